"""Kafka's classic consumer-group coordinator, as plain Python.

* ``records``: the ``__consumer_offsets`` record formats and
  ``partition_for_group``.
* ``group``: a group's state machine and members.
* ``group_coordinator``: ``GroupCoordinator``, the request handling of one
  offsets partition (Kafka's GroupCoordinator); driven by an actor (timer,
  appends, load/unload). Its parts: ``rebalance_protocol`` (join, sync,
  rebalances), ``member_sessions`` (heartbeat, session expiry, leave),
  ``offset_requests`` (offset commit, fetch, delete, transactional commits).
* ``metadata_manager``: ``GroupMetadataManager``, the groups as stored in
  the partition (Kafka's GroupMetadataManager: offsets, records, loading,
  expiration).
* ``delayed_ops``: the delayed join, sync and heartbeat.
* ``api``: the plain values requests and answers are made of.
* ``consumer_protocol``: the bits of the consumer's embedded protocol the
  broker reads (subscribed topics).
"""

from cluster.groups.api import (
    AppendCompletion,
    GroupDescription,
    GroupListing,
    JoinGroupMember,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    MemberDescription,
    MemberLeaveResult,
    OffsetAndMetadata,
    OffsetFetchPartition,
    OffsetFetchResult,
    PartitionCommit,
    SyncGroupResult,
    TopicPartition,
    TxnProducer,
)
from cluster.groups.config import GroupConfig
from cluster.groups.group import GroupMetadata, GroupState, MemberMetadata
from cluster.groups.group_coordinator import CoordinatorStatus, GroupCoordinator
from cluster.groups.records import partition_for_group

__all__ = [
    "AppendCompletion",
    "CoordinatorStatus",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "GroupMetadata",
    "GroupState",
    "JoinGroupMember",
    "JoinGroupResult",
    "LeaveGroupResult",
    "LeavingMember",
    "MemberDescription",
    "MemberLeaveResult",
    "MemberMetadata",
    "OffsetAndMetadata",
    "OffsetFetchPartition",
    "OffsetFetchResult",
    "PartitionCommit",
    "SyncGroupResult",
    "TopicPartition",
    "TxnProducer",
    "partition_for_group",
]
