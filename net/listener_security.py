"""The start-up check that every listener's security settings can be served:
its TLS key and trust stores load, and PLAIN's JAAS config names its users.

The config table (core/config.py, core/security_config.py) checks keys and
their combinations; whether a store loads is known only by building the TLS
context from it, which is net/'s job (net/tls.py). Kafka does the same: its
config validation names keys, and a bad store fails the broker when it builds
its channels at start. The node runs this before it starts anything
(node/config.py), so a bad store is a clean "invalid configuration", not an
edge that dies in Ray.
"""
from __future__ import annotations

from core.security_config import listener_specs, sasl_mechanisms
from net.sasl import plain_users
from net.tls import server_context


def check_listener_security(config) -> None:
    """Raises ConfigError (naming the key) for the first listener whose TLS
    context cannot be built or whose PLAIN users are not configured."""
    for spec in listener_specs(config):
        if spec.uses_tls:
            server_context(config, spec)
        if spec.uses_sasl and "PLAIN" in sasl_mechanisms(config, spec):
            plain_users(config, spec)
