import pytest

from core.config import (BrokerConfig, ConfigError, parse_listener, parse_properties,
                         validate_topic_configs)
from node.config import load_broker_config


def test_defaults_are_kafkas():
    config = BrokerConfig.from_sources()
    assert config["num.partitions"] == 1
    assert config["message.max.bytes"] == 1048588
    assert config["log.segment.bytes"] == 1073741824
    assert config["auto.create.topics.enable"] is True
    assert config.retention_ms() == 168 * 3600 * 1000


def test_precedence_properties_env_override():
    config = BrokerConfig.from_sources(
        {"num.partitions": "2", "log.segment.bytes": "1000"},
        overrides=[("num.partitions", "5")],
        environ={"RAYKAFKA_LOG_SEGMENT_BYTES": "2000", "UNRELATED": "x"},
    )
    assert config["num.partitions"] == 5
    assert config["log.segment.bytes"] == 2000
    assert config.is_explicit("num.partitions") and not config.is_explicit("broker.rack")


def test_unknown_key_is_named():
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_sources(overrides=[("log.segmnet.bytes", "5")])
    assert info.value.key == "log.segmnet.bytes"


@pytest.mark.parametrize("key,value", [("num.partitions", "zero"), ("num.partitions", "0"),
                                       ("auto.create.topics.enable", "yes"), ("listeners", "localhost:9092"),
                                       ("log.segment.bytes", "10")])
def test_invalid_values_are_named(key, value):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_sources(overrides=[(key, value)])
    assert info.value.key == key


def test_socket_request_max_must_fit_a_message():
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_sources(overrides=[("socket.request.max.bytes", "1000")])
    assert info.value.key == "socket.request.max.bytes"


def test_properties_parsing():
    text = "# comment\n! also\nbroker.id=3\nlisteners = PLAINTEXT://127.0.0.1:9093\nlog.dirs=/a,\\\n  /b\n"
    assert parse_properties(text) == {"broker.id": "3", "listeners": "PLAINTEXT://127.0.0.1:9093",
                                      "log.dirs": "/a,/b"}


def test_listener_parsing():
    assert parse_listener("PLAINTEXT://127.0.0.1:0").port == 0
    assert parse_listener("PLAINTEXT://:9092").host == "0.0.0.0"
    assert parse_listener("SSL://127.0.0.1:9093").name == "SSL"
    with pytest.raises(ConfigError):  # an SSL listener needs a key store (tests/unit/test_security.py)
        load_broker_config(overrides=[("listeners", "SSL://127.0.0.1:9093")])


def test_topic_configs_validated():
    assert validate_topic_configs({"cleanup.policy": "compact,delete"}) == {"cleanup.policy": ["compact", "delete"]}
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({"retention.mss": "1"})
    assert info.value.key == "retention.mss"
    with pytest.raises(ConfigError):
        validate_topic_configs({"compression.type": "brotli"})


def test_topic_default_follows_broker_synonym():
    config = BrokerConfig.from_sources(overrides=[("log.segment.bytes", "4096"), ("log.roll.hours", "1")])
    assert config.topic_default("segment.bytes") == 4096
    assert config.topic_default("segment.ms") == 3600 * 1000
    assert config.topic_default("cleanup.policy") == ["delete"]
