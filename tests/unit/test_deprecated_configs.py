"""Kafka 3.9's deprecated-but-accepted keys (issue 29 item 2): accepted and
validated as Kafka validates them, their value without effect."""
import pytest

from core.config import BROKER_CONFIGS, TOPIC_CONFIGS, ConfigError, validate_topic_configs


@pytest.mark.parametrize("version", ["0.8.2", "0.10.0", "0.10.0-IV1", "0.11.0", "1.1", "2.8", "2.8.1", "3.0-IV1",
                                     "3.9"])
def test_message_format_version_accepts_kafka_versions(version):
    assert validate_topic_configs({"message.format.version": version}) == {"message.format.version": version}


@pytest.mark.parametrize("version", ["banana", "4", "0.7.0", "", "3.0-IV"])
def test_message_format_version_refuses_what_kafka_refuses(version):
    with pytest.raises(ConfigError, match="message.format.version"):
        validate_topic_configs({"message.format.version": version})


def test_deprecated_keys_are_known_and_marked_without_effect():
    for key in ("message.format.version", "message.downconversion.enable"):
        assert TOPIC_CONFIGS[key].no_effect
    assert TOPIC_CONFIGS["message.format.version"].broker_synonym == "log.message.format.version"
    for key in ("log.message.format.version", "inter.broker.protocol.version",
                "log.message.timestamp.difference.max.ms", "log.message.downconversion.enable"):
        assert BROKER_CONFIGS[key].no_effect
