"""What the edge asks of a group coordinator: one request type per group API
(JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete,
ConsumerGroupDescribe; ConsumerGroupHeartbeat is
cluster.groups.consumer.ConsumerHeartbeat), and the answers that are not
cluster.groups.api's values already.

NamedTuples (they pickle as tuples do). The net/ handlers build them from
kio's requests; actors/group_coordinator.py hands their fields to
cluster.groups. Partitions are (topic, partition) pairs.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence

from core.error_codes import ErrorCode

TopicPartitionKey = tuple[str, int]


class JoinGroup(NamedTuple):
    group_id: str
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]  # (name, metadata), in the member's order of preference
    api_version: int
    reason: Optional[str] = None


class SyncGroup(NamedTuple):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: Optional[str]
    protocol_type: Optional[str]
    protocol_name: Optional[str]
    assignments: Mapping[str, bytes]  # member id -> assignment (from the leader only)


class Heartbeat(NamedTuple):
    group_id: str
    member_id: str
    group_instance_id: Optional[str]
    generation_id: int


class LeavingMemberIdentity(NamedTuple):
    member_id: str
    group_instance_id: Optional[str] = None
    reason: Optional[str] = None


class LeaveGroup(NamedTuple):
    group_id: str
    members: Sequence[LeavingMemberIdentity]


class OffsetToCommit(NamedTuple):
    offset: int
    leader_epoch: int = -1
    metadata: Optional[str] = ""
    expire_timestamp_ms: Optional[int] = None  # OffsetCommit v1's commit timestamp + retention; None: the default


class OffsetCommit(NamedTuple):
    group_id: str
    member_id: str
    group_instance_id: Optional[str]
    generation_id: int  # a consumer group member's member epoch
    offsets: Mapping[TopicPartitionKey, OffsetToCommit]
    api_version: int = 9


class TxnOffsetCommit(NamedTuple):
    group_id: str
    producer_id: int
    producer_epoch: int
    member_id: str
    group_instance_id: Optional[str]
    generation_id: int
    offsets: Mapping[TopicPartitionKey, OffsetToCommit]


class OffsetFetch(NamedTuple):
    group_id: str
    partitions: Optional[Sequence[TopicPartitionKey]]  # None: every partition with an offset
    require_stable: bool = False
    member_id: Optional[str] = None  # v9+, checked for consumer groups
    member_epoch: int = -1


class DescribeGroups(NamedTuple):
    group_ids: Sequence[str]


class ListGroups(NamedTuple):
    states_filter: Optional[Sequence[str]] = None
    types_filter: Optional[Sequence[str]] = None  # v5: "classic", "consumer"


class DeleteGroups(NamedTuple):
    group_ids: Sequence[str]


class OffsetDelete(NamedTuple):
    group_id: str
    partitions: Sequence[TopicPartitionKey]


class ConsumerGroupDescribe(NamedTuple):
    group_ids: Sequence[str]


# ---- answers ----------------------------------------------------------------------------------------
class ListGroupsResult(NamedTuple):
    error: ErrorCode
    groups: Sequence[Any]  # cluster.groups.api.GroupListing


class OffsetDeleteResult(NamedTuple):
    error: ErrorCode
    partitions: Mapping[TopicPartitionKey, ErrorCode]


__all__ = ["ConsumerGroupDescribe", "DeleteGroups", "DescribeGroups", "Heartbeat", "JoinGroup", "LeaveGroup",
           "LeavingMemberIdentity", "ListGroups", "ListGroupsResult", "OffsetCommit", "OffsetDelete",
           "OffsetDeleteResult", "OffsetFetch", "OffsetToCommit", "SyncGroup", "TopicPartitionKey",
           "TxnOffsetCommit"]
