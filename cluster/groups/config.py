"""Settings of the group coordinator, named after Kafka's broker keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["GroupConfig", "NEW_MEMBER_JOIN_TIMEOUT_MS"]

INT32_MAX = 2**31 - 1

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs (a constant, not a config):
# a new member's JoinGroup waits at most this long for the rebalance to end;
# it cannot heartbeat (it has no member id yet), so without this bound a
# client that gave up and retried would leave defunct members behind.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class GroupConfig:
    # group.min.session.timeout.ms / group.max.session.timeout.ms: the range a
    # JoinGroup's session timeout must fall in (INVALID_SESSION_TIMEOUT).
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # group.max.size (KIP-389): GROUP_MAX_SIZE_REACHED beyond it.
    group_max_size: int = INT32_MAX
    # group.initial.rebalance.delay.ms: how long the first rebalance of an
    # empty group waits for more members, so a fleet starting together does
    # not rebalance once per member.
    group_initial_rebalance_delay_ms: int = 3000
    # offset.metadata.max.bytes: longest metadata string of a commit
    # (OFFSET_METADATA_TOO_LARGE). Counted in UTF-16 units, like Java's length().
    offset_metadata_max_bytes: int = 4096
    # offsets.retention.minutes (in ms here).
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    # offsets.retention.check.interval.ms: period of the expiration sweep.
    offsets_retention_check_interval_ms: int = 600_000
    # offsets.topic.num.partitions: for partition_for_group.
    offsets_topic_num_partitions: int = 50
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS

    @classmethod
    def from_broker_config(cls, config: Any) -> "GroupConfig":
        """Build from anything with ``get(key, default)`` holding Kafka's
        broker keys (``core.config.BrokerConfig``, a dict). Keys the broker
        config does not define yet take Kafka's defaults."""
        d = cls()

        def get(key: str, default: int) -> int:
            value = config.get(key, default)
            return int(default if value is None else value)

        return cls(
            group_min_session_timeout_ms=get("group.min.session.timeout.ms", d.group_min_session_timeout_ms),
            group_max_session_timeout_ms=get("group.max.session.timeout.ms", d.group_max_session_timeout_ms),
            group_max_size=get("group.max.size", d.group_max_size),
            group_initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms", d.group_initial_rebalance_delay_ms),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes", d.offset_metadata_max_bytes),
            offsets_retention_ms=get("offsets.retention.minutes", d.offsets_retention_ms // 60_000) * 60_000,
            offsets_retention_check_interval_ms=get(
                "offsets.retention.check.interval.ms", d.offsets_retention_check_interval_ms
            ),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions", d.offsets_topic_num_partitions),
        )
