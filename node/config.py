"""The broker's configuration as `raykafka start` reads it: defaults, the
properties file, RAYKAFKA_* environment variables and --override pairs (in
rising precedence, core/config.py), then the listeners' TLS stores and JAAS
configs (net/listener_security.py). Raises ConfigError naming the key."""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

from core.config import BrokerConfig, load_properties_file
from net.listener_security import check_listener_security


def load_broker_config(config_file: Optional[str] = None, overrides: Iterable[tuple[str, str]] = (),
                       environ: Optional[Mapping[str, str]] = None) -> BrokerConfig:
    properties = load_properties_file(config_file) if config_file else {}
    config = BrokerConfig.from_sources(properties, overrides, environ)
    check_listener_security(config)
    return config
