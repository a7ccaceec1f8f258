"""`--command-config FILE` for the admin tools: Kafka's client properties
(security.protocol, sasl.mechanism, sasl.jaas.config or sasl.username /
sasl.password, ssl.*) read once, then applied two ways:

- `secure_socket` + `authenticate`: TLS and SASL (PLAIN, SCRAM-SHA-256/512)
  for cli/admin_client's own kio connections;
- `librdkafka_config`: the same settings for confluent-kafka (cli/console.py).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
import re
import socket
import ssl
from typing import Callable, Optional

from cli.admin_errors import AdminError
from core.error_codes import ErrorCode

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = {"PLAIN": None, "SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SecurityConfigError(AdminError, ValueError):
    """The client properties cannot be used (unknown protocol or mechanism, no credentials)."""


class AuthenticationFailed(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "GSSAPI"
    username: Optional[str] = None
    password: Optional[str] = None
    ca_location: Optional[str] = None
    certificate_location: Optional[str] = None
    key_location: Optional[str] = None
    key_password: Optional[str] = None
    check_hostname: bool = True
    properties: tuple = ()  # every (key, value) read, for the librdkafka mapping

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def read_properties(path: str) -> dict[str, str]:
    from cli.console import UsageError, parse_properties_text

    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties_text(f.read())
    except OSError as exc:
        raise SecurityConfigError(f"cannot read the client properties {path}: {exc.strerror}") from None
    except UsageError as exc:
        raise SecurityConfigError(str(exc)) from None


def security_from_properties(props: dict[str, str]) -> ClientSecurity:
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise SecurityConfigError(f"security.protocol: unknown protocol {protocol!r}, expected one of {_PROTOCOLS}")
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).strip().upper()
    username, password = props.get("sasl.username"), props.get("sasl.password")
    if "sasl.jaas.config" in props:
        fields = dict(_JAAS.findall(props["sasl.jaas.config"]))
        username, password = fields.get("username", username), fields.get("password", password)
    if protocol.startswith("SASL"):
        if mechanism not in _MECHANISMS:
            raise SecurityConfigError(f"sasl.mechanism {mechanism} is not supported by this tool "
                                      f"({', '.join(_MECHANISMS)})")
        if username is None or password is None:
            raise SecurityConfigError("SASL needs a username and password (sasl.jaas.config or "
                                      "sasl.username / sasl.password)")
    keystore = props.get("ssl.keystore.location") or props.get("ssl.certificate.location")
    return ClientSecurity(
        protocol=protocol, mechanism=mechanism, username=username, password=password,
        ca_location=props.get("ssl.truststore.location") or props.get("ssl.ca.location"),
        certificate_location=keystore, key_location=props.get("ssl.key.location"),
        key_password=props.get("ssl.key.password") or props.get("ssl.keystore.password"),
        check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        not in ("", "none"),
        properties=tuple(sorted(props.items())))


def load_security(path: Optional[str]) -> Optional[ClientSecurity]:
    """The --command-config file's security settings (None without a file)."""
    return security_from_properties(read_properties(path)) if path else None


def secure_socket(sock: socket.socket, host: str, security: Optional[ClientSecurity]) -> socket.socket:
    if security is None or not security.uses_tls:
        return sock
    context = ssl.create_default_context(cafile=security.ca_location)
    context.check_hostname = security.check_hostname
    if security.certificate_location:
        context.load_cert_chain(security.certificate_location, security.key_location,
                                password=security.key_password)
    return context.wrap_socket(sock, server_hostname=host)


def authenticate(call: Callable, security: Optional[ClientSecurity]) -> None:
    """SaslHandshake then SaslAuthenticate rounds; call(api_key, **fields) -> response."""
    if security is None or not security.uses_sasl:
        return
    answer = call(SASL_HANDSHAKE, mechanism=security.mechanism)
    if answer.error_code != ErrorCode.none:
        raise AuthenticationFailed(f"SaslHandshake: {answer.error_code.name.upper()} "
                                   f"(broker mechanisms: {', '.join(answer.mechanisms)})")

    def exchange(token: bytes) -> bytes:
        reply = call(SASL_AUTHENTICATE, auth_bytes=token)
        if reply.error_code != ErrorCode.none:
            raise AuthenticationFailed(f"{reply.error_code.name.upper()}: {reply.error_message or ''}".strip())
        return bytes(reply.auth_bytes or b"")

    user, password = security.username.encode(), security.password.encode()
    if security.mechanism == "PLAIN":
        exchange(b"\0" + user + b"\0" + password)
        return
    scram_exchange(exchange, _MECHANISMS[security.mechanism], security.username, security.password)


def _scram_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def scram_exchange(exchange: Callable[[bytes], bytes], algorithm: str, user: str, password: str) -> None:
    """RFC 5802's client side, without channel binding."""
    nonce = base64.b64encode(os.urandom(24)).decode()
    first_bare = f"n={_scram_name(user)},r={nonce}"
    server_first = exchange(f"n,,{first_bare}".encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields.get("r", "").startswith(nonce):
        raise AuthenticationFailed("SCRAM: the server's nonce does not extend ours")
    salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", algorithm).digest()
    stored_key = hashlib.new(algorithm, client_key).digest()
    final_bare = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    signature = hmac.new(stored_key, auth_message, algorithm).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_final = exchange(f"{final_bare},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", algorithm).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, algorithm).digest()).decode()
    if server_final.startswith("e="):
        raise AuthenticationFailed(f"SCRAM: {server_final[2:]}")
    if server_final != f"v={expected}":
        raise AuthenticationFailed("SCRAM: the server's signature does not verify")


def librdkafka_config(security: Optional[ClientSecurity]) -> dict[str, str]:
    """The same settings for confluent-kafka (librdkafka's key names)."""
    if security is None:
        return {}
    from cli.console import librdkafka_config as translate

    return translate(dict(security.properties))
