"""TLS for SSL and SASL_SSL listeners, with Python's ssl and KIP-651 PEM stores.

Key store: ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (one
file: the private key and its certificate chain) or inline
``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``; an encrypted key
takes ``ssl.key.password``. Trust store: ``ssl.truststore.type=PEM`` with
``ssl.truststore.location`` or inline ``ssl.truststore.certificates``. As in
Kafka, a PEM store takes no store password. Every key also works with the
``listener.name.<l>.`` prefix.

Inline PEM values in a properties file usually arrive with their line breaks
folded away (Java's line continuation joins lines without a newline), so PEM
blocks are re-wrapped before OpenSSL sees them, as Kafka's PemParser does.

The principal of an SSL connection is ``User:`` + the client certificate's
subject DN in RFC 2253 form, mapped by ``ssl.principal.mapping.rules``
(Kafka's SslPrincipalMapper); without a certificate it is ``User:ANONYMOUS``;
a certificate no rule maps fails the authentication (the connection is closed), as in Kafka.
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Any

from core.security_config import ListenerSpec, listener_value

ANONYMOUS = "User:ANONYMOUS"

_PROTOCOL_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
                      "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                 "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"}
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def _error(key: str, message: str):
    from core.config import ConfigError

    return ConfigError(key, message)


def normalise_pem(text: str) -> str:
    """PEM blocks with their base64 re-wrapped at 64 columns (inline values lose their newlines)."""
    blocks = []
    for kind, body in _PEM_BLOCK.findall(text):
        # An encrypted legacy key carries "Proc-Type:"/"DEK-Info:" headers: keep them on their own lines.
        headers, _, data = body.rpartition("\n\n") if "Proc-Type:" in body else ("", "", body)
        data = re.sub(r"\s+", "", data)
        lines = [data[i:i + 64] for i in range(0, len(data), 64)]
        blocks.append("\n".join([f"-----BEGIN {kind}-----", *([headers.strip(), ""] if headers else []),
                                 *lines, f"-----END {kind}-----"]))
    return "\n".join(blocks) + "\n"


def iana_to_openssl(name: str) -> str:
    """TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 -> ECDHE-RSA-AES256-GCM-SHA384 (the AEAD suites Kafka
    users list); OpenSSL names pass through unchanged."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    exchange, cipher = name[4:].split("_WITH_", 1)
    exchange = "" if exchange == "RSA" else exchange.replace("_", "-") + "-"
    cipher = (cipher.replace("AES_128_GCM", "AES128-GCM").replace("AES_256_GCM", "AES256-GCM")
              .replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305").replace("_", "-"))
    return exchange + cipher


def _key_of(config, spec: ListenerSpec, key: str) -> str:
    """The key name as the user wrote it (prefixed or not), for error messages."""
    prefixed = spec.prefix + key
    return prefixed if config.as_dict().get(prefixed) is not None else key


def server_context(config, spec: ListenerSpec) -> ssl.SSLContext:
    """The SSLContext of an SSL or SASL_SSL listener; ConfigError on a bad setting."""
    def value(key: str) -> Any:
        return listener_value(config, spec, key)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    protocols = value("ssl.enabled.protocols") or []
    if not protocols:
        raise _error(_key_of(config, spec, "ssl.enabled.protocols"), "no TLS version enabled")
    versions = sorted(_PROTOCOL_VERSIONS[p] for p in protocols)
    try:
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
    except (ValueError, ssl.SSLError) as exc:
        raise _error(_key_of(config, spec, "ssl.enabled.protocols"), str(exc)) from None
    suites = value("ssl.cipher.suites") or []
    if suites:
        tls12 = [iana_to_openssl(s) for s in suites if s not in _TLS13_SUITES]
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise _error(_key_of(config, spec, "ssl.cipher.suites"),
                             f"no cipher suite of {suites} is known to OpenSSL") from None
        if not any(s in _TLS13_SUITES for s in suites):
            # Python's ssl cannot narrow TLS 1.3's suites; a list naming none of them means no TLS 1.3.
            context.maximum_version = min(context.maximum_version, ssl.TLSVersion.TLSv1_2)

    # Key store.
    if not (value("ssl.keystore.location") or value("ssl.keystore.key") or value("ssl.keystore.certificate.chain")):
        raise _error(_key_of(config, spec, "ssl.keystore.location"),
                     f"listener {spec.name} ({spec.protocol}) needs a key store: ssl.keystore.location, "
                     f"or ssl.keystore.key and ssl.keystore.certificate.chain")
    if str(value("ssl.keystore.type")).upper() != "PEM":
        raise _error(_key_of(config, spec, "ssl.keystore.type"),
                     f"listener {spec.name}: only PEM key stores are served (KIP-651), got "
                     f"{value('ssl.keystore.type')}; convert with openssl (pkcs12 -nodes) and set "
                     f"ssl.keystore.type=PEM")
    if value("ssl.keystore.password") is not None:
        raise _error(_key_of(config, spec, "ssl.keystore.password"),
                     "a PEM key store takes no store password (only ssl.key.password), as in Kafka")
    location, key, chain = value("ssl.keystore.location"), value("ssl.keystore.key"), \
        value("ssl.keystore.certificate.chain")
    password = value("ssl.key.password")
    if location and (key or chain):
        raise _error(_key_of(config, spec, "ssl.keystore.location"),
                     "set either ssl.keystore.location or ssl.keystore.key/ssl.keystore.certificate.chain")
    if location:
        try:
            context.load_cert_chain(location, password=password)
        except FileNotFoundError:
            raise _error(_key_of(config, spec, "ssl.keystore.location"), f"no such file {location}") from None
        except (ssl.SSLError, OSError) as exc:
            raise _error(_key_of(config, spec, "ssl.keystore.location"),
                         f"cannot load the key and certificate chain from {location}: {exc}") from None
    elif key and chain:
        # load_cert_chain reads files only: a private temporary file, removed at once.
        fd, path = tempfile.mkstemp(prefix="raykafka-keystore-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(normalise_pem(key) + normalise_pem(chain))
            context.load_cert_chain(path, password=password)
        except (ssl.SSLError, OSError) as exc:
            raise _error(_key_of(config, spec, "ssl.keystore.key"),
                         f"cannot load the inline key and certificate chain: {exc}") from None
        finally:
            os.unlink(path)
    else:
        raise _error(_key_of(config, spec, "ssl.keystore.key"),
                     "an inline key store needs both ssl.keystore.key and ssl.keystore.certificate.chain")

    # Trust store and client authentication.
    trust_location, trust_inline = value("ssl.truststore.location"), value("ssl.truststore.certificates")
    if trust_location or trust_inline:
        if str(value("ssl.truststore.type")).upper() != "PEM":
            raise _error(_key_of(config, spec, "ssl.truststore.type"),
                         "only PEM trust stores are served (KIP-651)")
        if value("ssl.truststore.password") is not None:
            raise _error(_key_of(config, spec, "ssl.truststore.password"),
                         "a PEM trust store takes no password, as in Kafka")
        try:
            if trust_location:
                context.load_verify_locations(cafile=trust_location)
            else:
                context.load_verify_locations(cadata=normalise_pem(trust_inline))
        except (ssl.SSLError, OSError) as exc:
            key_name = "ssl.truststore.location" if trust_location else "ssl.truststore.certificates"
            raise _error(_key_of(config, spec, key_name), f"cannot load the trusted certificates: {exc}") \
                from None
    client_auth = value("ssl.client.auth")
    if client_auth != "none" and not (trust_location or trust_inline):
        # Without a trust store the system's CA bundle would vouch for client
        # certificates: anyone with a certificate any public CA signed would
        # get in under the name in it.
        raise _error(_key_of(config, spec, "ssl.client.auth"),
                     f"ssl.client.auth={client_auth} needs a trust store (ssl.truststore.location or "
                     "ssl.truststore.certificates) naming the CAs that sign client certificates")
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[client_auth]
    try:
        PrincipalMapper(value("ssl.principal.mapping.rules"))
    except ValueError as exc:
        raise _error(_key_of(config, spec, "ssl.principal.mapping.rules"), str(exc)) from None
    return context


# ------------------------------------------------------------------ principals

_ATTRIBUTE_NAMES = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
                    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
                    "domainComponent": "DC", "userId": "UID"}


def _escape_rfc2253(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def subject_dn(peercert: dict) -> str:
    """The subject of SSLSocket.getpeercert() as RFC 2253 (Java's X500Principal.getName()):
    most specific RDN first."""
    rdns = []
    for rdn in peercert.get("subject", ()):
        rdns.append("+".join(f"{_ATTRIBUTE_NAMES.get(name, name)}={_escape_rfc2253(value)}"
                             for name, value in rdn))
    return ",".join(reversed(rdns))


class NoMatchingRule(ValueError):
    pass


class PrincipalMapper:
    """Kafka's ssl.principal.mapping.rules: a comma-separated list of
    ``RULE:pattern/replacement/[LU]`` and ``DEFAULT``; the first rule whose
    pattern matches the whole DN gives the name (Java's $n back references)."""

    _RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
    _SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
    _PARSER = re.compile(_RULE)

    def __init__(self, rules: str | None):
        rules = "DEFAULT" if rules is None else rules
        self.rules: list[tuple[re.Pattern, str, str] | None] = []
        # As Kafka's splitRules: every match of the splitter over the trimmed text.
        for match in self._SPLITTER.finditer(rules.strip()):
            rule = match.group(1)
            parsed = self._PARSER.fullmatch(rule)
            if parsed is None or parsed.group(5):
                raise ValueError(f"invalid rule: {rule}")
            if parsed.group(1):
                self.rules.append(None)
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ValueError(f"invalid rule pattern {parsed.group(2)!r}: {exc}") from None
                # Java's "$1" back references -> Python's "\g<1>".
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", parsed.group(3).replace("\\", "\\\\"))
                self.rules.append((pattern, replacement, parsed.group(4)))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn):
                result = pattern.sub(replacement, dn)
                return result.lower() if case == "L" else result.upper() if case == "U" else result
        raise NoMatchingRule(f"no rule applies to {dn}")


def ssl_principal(transport_peercert: dict | None, mapper: PrincipalMapper) -> str:
    if not transport_peercert:
        return ANONYMOUS
    return "User:" + mapper.name(subject_dn(transport_peercert))
