"""Listener and security configuration (issue 21), with Kafka's key names.

- ``listeners`` / ``advertised.listeners``: ``NAME://host:port,...``;
  ``listener.security.protocol.map``: ``NAME:PROTOCOL,...``. Without a map
  entry a listener's name must be its protocol (PLAINTEXT, SSL,
  SASL_PLAINTEXT, SASL_SSL).
- ``ssl.*`` and ``sasl.*`` keys, each also accepted with the
  ``listener.name.<listener>.`` prefix (listener name in lower case, as
  Kafka's ListenerName.configPrefix), which wins for that listener; JAAS
  configs per mechanism: ``listener.name.<l>.<mechanism>.sasl.jaas.config``.

core/config.py builds its table from SECURITY_KEYS below; this module
imports nothing of the broker's config table, and nothing of net/: that the
TLS stores load and PLAIN's JAAS config parses is checked where the
listeners are built from them (net/listener_security.py, run by the node at
start, before anything else starts), as Kafka checks them when it builds its
channels, not when it parses the config.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from core.config_errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_DEFAULT_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# (name, type, default, doc, extra ConfigDef kwargs): core.config makes ConfigDefs of them.
SECURITY_KEYS: tuple[tuple[str, str, Any, str, dict], ...] = (
    ("ssl.keystore.type", "string", "JKS", "Key store format; only PEM is served (KIP-651)", {}),
    ("ssl.keystore.location", "string", None, "PEM file holding the private key and its certificate chain", {}),
    ("ssl.keystore.password", "password", None, "Not used with PEM (an error if set, as in Kafka)", {}),
    ("ssl.keystore.key", "password", None, "Inline PEM private key (KIP-651)", {}),
    ("ssl.keystore.certificate.chain", "password", None, "Inline PEM certificate chain (KIP-651)", {}),
    ("ssl.key.password", "password", None, "Password of an encrypted private key", {}),
    ("ssl.truststore.type", "string", "JKS", "Trust store format; only PEM is served (KIP-651)", {}),
    ("ssl.truststore.location", "string", None, "PEM file of trusted CA certificates", {}),
    ("ssl.truststore.password", "password", None, "Not used with PEM (an error if set, as in Kafka)", {}),
    ("ssl.truststore.certificates", "password", None, "Inline PEM trusted certificates (KIP-651)", {}),
    ("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], "TLS versions accepted",
     {"choices": ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")}),
    ("ssl.protocol", "string", "TLSv1.3", "Accepted for compatibility; ssl.enabled.protocols decides",
     {"no_effect": True}),
    ("ssl.cipher.suites", "list", [], "Cipher suites (IANA or OpenSSL names; empty: OpenSSL's defaults)", {}),
    ("ssl.client.auth", "string", "none", "Client certificates: none, requested or required",
     {"choices": ("none", "requested", "required")}),
    ("ssl.principal.mapping.rules", "string", "DEFAULT", "Rules mapping a certificate DN to a principal name", {}),
    ("ssl.endpoint.identification.algorithm", "string", "https", "Client-side setting; no effect on a broker",
     {"no_effect": True}),
    ("ssl.keymanager.algorithm", "string", "SunX509", "", {"no_effect": True}),
    ("ssl.trustmanager.algorithm", "string", "PKIX", "", {"no_effect": True}),
    ("ssl.secure.random.implementation", "string", None, "", {"no_effect": True}),
    ("sasl.enabled.mechanisms", "list", ["GSSAPI"], "SASL mechanisms offered (PLAIN, SCRAM-SHA-256, "
     "SCRAM-SHA-512 here)", {}),
    ("sasl.jaas.config", "password", None, "JAAS login module config (fallback for every listener and mechanism)",
     {}),
    ("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", "Brokers talk through Ray here",
     {"no_effect": True}),
    ("security.inter.broker.protocol", "string", "PLAINTEXT", "Brokers talk through Ray here",
     {"no_effect": True, "choices": PROTOCOLS}),
    ("inter.broker.listener.name", "string", None, "Brokers talk through Ray here", {"no_effect": True}),
    ("connection.failed.authentication.delay.ms", "int", 100,
     "Delay before answering and closing a failed authentication", {"min": 0}),
    ("sasl.server.max.receive.size", "int", 524288,
     "Largest request a SASL connection may send before it has authenticated", {"min": 1}),
    ("connections.max.reauth.ms", "long", 0, "Re-authentication (KIP-368) is not offered; only 0", {"max": 0}),
)

# Keys that may carry the listener.name.<l>. prefix.
_PREFIXABLE = frozenset(name for name, *_ in SECURITY_KEYS
                        if name.startswith(("ssl.", "sasl.")) and name not in (
                            "sasl.mechanism.inter.broker.protocol",))
_PREFIXED = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
_MECHANISM_JAAS = re.compile(r"^([a-z0-9-]+)\.sasl\.jaas\.config$")


def prefixed_base_key(key: str) -> str | None:
    """The base key a listener-prefixed key stands for, or None if it is not one.
    listener.name.sasl_ssl.plain.sasl.jaas.config -> sasl.jaas.config."""
    match = _PREFIXED.match(key)
    if match is None:
        return None
    rest = match.group(2)
    if rest in _PREFIXABLE:
        return rest
    if _MECHANISM_JAAS.match(rest):
        return "sasl.jaas.config"
    return None


@dataclasses.dataclass(frozen=True)
class ListenerSpec:
    name: str        # upper case, as Kafka normalises it
    protocol: str    # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    host: str
    port: int

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def prefix(self) -> str:
        return f"listener.name.{self.name.lower()}."


_ENDPOINT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:]*):(\d+)$")


def _error(key: str, message: str) -> ConfigError:
    return ConfigError(key, message)


def parse_protocol_map(value: str | None) -> dict[str, str]:
    value = KAFKA_DEFAULT_PROTOCOL_MAP if value is None else value
    result: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise _error("listener.security.protocol.map",
                         f"expected NAME:PROTOCOL entries with a protocol of {', '.join(PROTOCOLS)}, got {item!r}")
        if name in result:
            raise _error("listener.security.protocol.map", f"listener {name} is mapped twice")
        result[name] = protocol
    return result


def parse_endpoints(value: str, key: str, protocol_map: Mapping[str, str] | None = None) -> list[ListenerSpec]:
    """NAME://host:port,... -> ListenerSpecs, in the order given."""
    protocol_map = parse_protocol_map(None) if protocol_map is None else protocol_map
    specs: list[ListenerSpec] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        match = _ENDPOINT.match(item)
        if match is None:
            raise _error(key, f"expected NAME://HOST:PORT, got {item!r}")
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if not 0 <= port <= 65535:
            raise _error(key, f"port {port} out of range")
        protocol = protocol_map.get(name)
        if protocol is None:
            raise _error(key, f"listener {name} is not in listener.security.protocol.map (and is not a "
                              f"protocol name: {', '.join(PROTOCOLS)})")
        if any(s.name == name for s in specs):
            raise _error(key, f"listener {name} is named twice")
        specs.append(ListenerSpec(name, protocol, host or "0.0.0.0", port))
    if not specs:
        raise _error(key, "no listener given")
    return specs


def listener_specs(config) -> list[ListenerSpec]:
    return parse_endpoints(config["listeners"], "listeners", parse_protocol_map(config["listener.security.protocol.map"]))


def advertised_specs(config) -> dict[str, ListenerSpec]:
    """Listener name -> advertised endpoint (only the listeners advertised.listeners names)."""
    if not config["advertised.listeners"]:
        return {}
    specs = parse_endpoints(config["advertised.listeners"], "advertised.listeners",
                            parse_protocol_map(config["listener.security.protocol.map"]))
    return {s.name: s for s in specs}


def listener_value(config, listener: ListenerSpec, key: str, mechanism: str | None = None) -> Any:
    """`key` for this listener: listener.name.<l>.[<mechanism>.]key, then key."""
    values = config.as_dict() if hasattr(config, "as_dict") else config
    if mechanism is not None:
        found = values.get(f"{listener.prefix}{mechanism.lower()}.{key}")
        if found is not None:
            return found
    found = values.get(listener.prefix + key)
    if found is not None:
        return found
    return values.get(key)


def sasl_mechanisms(config, listener: ListenerSpec) -> list[str]:
    return [m.strip().upper() for m in listener_value(config, listener, "sasl.enabled.mechanisms") or []]


def validate(config) -> None:
    """Cross-key checks at start: listeners, maps, SASL mechanisms (the TLS
    stores and PLAIN's users: net/listener_security.py). Raises ConfigError
    naming the key."""
    specs = listener_specs(config)
    ports = [s.port for s in specs if s.port]
    if len(set(ports)) != len(ports):
        raise _error("listeners", "two listeners bind the same port")
    names = {s.name for s in specs}
    advertised = advertised_specs(config)
    for name, spec in advertised.items():
        if name not in names:
            raise _error("advertised.listeners", f"listener {name} is not in listeners")
        if spec.host in ("0.0.0.0", "::"):
            raise _error("advertised.listeners", f"{name} advertises the meta-address {spec.host}")
    values = config.as_dict()
    for key in values:
        match = _PREFIXED.match(key)
        if match and values[key] is not None and match.group(1).upper() not in names:
            raise _error(key, f"listener {match.group(1).upper()} is not in listeners")
    for spec in specs:
        if spec.uses_sasl:
            mechanisms = sasl_mechanisms(config, spec)
            key = spec.prefix + "sasl.enabled.mechanisms" if values.get(
                spec.prefix + "sasl.enabled.mechanisms") is not None else "sasl.enabled.mechanisms"
            if not mechanisms:
                raise _error(key, f"listener {spec.name} ({spec.protocol}) enables no SASL mechanism")
            for mechanism in mechanisms:
                if mechanism not in SUPPORTED_MECHANISMS:
                    raise _error(key, f"mechanism {mechanism} of listener {spec.name} is not supported "
                                      f"(supported: {', '.join(SUPPORTED_MECHANISMS)})")


def first_listener(value: str, key: str = "listeners"):
    """The first NAME://host:port of a listeners value, protocol unchecked."""
    first = value.split(",")[0].strip()
    match = _ENDPOINT.match(first)
    if match is None:
        raise _error(key, f"expected NAME://HOST:PORT, got {value!r}")
    name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
    if not 0 <= port <= 65535:
        raise _error(key, f"port {port} out of range")
    return name, host or "0.0.0.0", port


def shift_ports(value: str, index: int) -> str:
    """listeners for the index-th broker started on one machine (--nodes N):
    every non-zero port moved up by index."""
    def shift(match: re.Match) -> str:
        port = int(match.group(3))
        return f"{match.group(1)}://{match.group(2)}:{port + index if port else 0}"

    return ",".join(_ENDPOINT.sub(shift, part.strip()) for part in value.split(",") if part.strip())


def rebind_first(value: str, port: int) -> str:
    """listeners with the first listener's port replaced (a replacement edge binds what the dead one had)."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    parts[0] = _ENDPOINT.sub(lambda m: f"{m.group(1)}://{m.group(2)}:{port}", parts[0])
    return ",".join(parts)
