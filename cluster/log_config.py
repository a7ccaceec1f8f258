"""Topic configuration -> storage.log.LogConfig, with broker defaults filling
what a topic does not override (Kafka's LogConfig from topic + broker props)."""
from __future__ import annotations

from typing import Any

from core.config import TOPIC_CONFIGS, BrokerConfig

_NEVER = 2**63 - 1


def log_config_for(topic_configs: dict[str, str], broker: BrokerConfig) -> dict[str, Any]:
    """storage.log.LogConfig kwargs for a topic."""

    def value(key: str):
        if key in topic_configs:
            return TOPIC_CONFIGS[key].parse(topic_configs[key])
        return broker.topic_default(key)

    def unbounded(v):
        return None if v in (None, _NEVER) else v

    policy = value("cleanup.policy")
    return {
        "segment_bytes": value("segment.bytes"),
        "segment_ms": value("segment.ms"),
        "segment_jitter_ms": value("segment.jitter.ms") or 0,
        "segment_index_bytes": value("segment.index.bytes"),
        "index_interval_bytes": value("index.interval.bytes"),
        "max_message_bytes": value("max.message.bytes"),
        "flush_messages": unbounded(value("flush.messages")),
        "flush_ms": unbounded(value("flush.ms")),
        "message_timestamp_type": value("message.timestamp.type"),
        "cleanup_policy": ",".join(policy) if isinstance(policy, list) else policy,
        "retention_ms": value("retention.ms"),
        "retention_bytes": value("retention.bytes"),
        "file_delete_delay_ms": value("file.delete.delay.ms"),
        "delete_retention_ms": value("delete.retention.ms"),
        "min_cleanable_dirty_ratio": value("min.cleanable.dirty.ratio"),
        "min_compaction_lag_ms": value("min.compaction.lag.ms"),
        "max_compaction_lag_ms": value("max.compaction.lag.ms"),
        "compression_type": value("compression.type"),
    }


def throttled_replicas_for(topic_configs: dict[str, str]) -> dict[str, str]:
    """The topic's two replication-throttle lists, validated and normalised
    ("" = none, "*" = all, else "partition:broker,..."), as the keyword
    arguments of the replica actor's update_replication_throttle. They are not
    part of log_config_for: storage.log.LogConfig does not take them."""

    def listed(key: str) -> str:
        raw = topic_configs.get(key)
        return "" if raw is None else ",".join(TOPIC_CONFIGS[key].parse(raw))

    return {
        "leader_throttled_replicas": listed("leader.replication.throttled.replicas"),
        "follower_throttled_replicas": listed("follower.replication.throttled.replicas"),
    }
