"""What crosses the controller actor's boundary: the admin operations edges
ask of it (CreateTopics, DeleteTopics, CreatePartitions, the config APIs,
ElectLeaders, partition reassignments, controlled shutdown, the internal
topics' creation), requests and answers both.

Named types only (NamedTuples: they pickle as tuples do). A result carries
its Kafka error as ``ErrorCode`` and Kafka's message; the net/ handlers turn
them into responses, the controller (cluster/controller/) builds them.
"""
from __future__ import annotations

import uuid
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from core.error_codes import ErrorCode

NOT_CONTROLLER_MESSAGE = "This is not the active controller"


# ---- topics ---------------------------------------------------------------------------------------
class CreateTopicSpec(NamedTuple):
    """One topic of CreateTopics (or of a Metadata auto-creation, or an
    internal topic's own spec): -1 counts take the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    # partition -> broker ids (a manual assignment), or empty
    assignments: Mapping[int, Sequence[int]] = {}
    configs: Mapping[str, Optional[str]] = {}


class CreateTopicResult(NamedTuple):
    """A created (or validated) topic, with what CreateTopics v5+ answers
    about it, or its error."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None
    topic_id: Optional[uuid.UUID] = None  # None when validate_only or failed
    num_partitions: int = -1
    replication_factor: int = -1
    # key -> {"value", "source"} (cluster.topic_admin.described_configs)
    configs: Mapping[str, Mapping[str, Any]] = {}


class TopicOutcome(NamedTuple):
    """One topic's answer to DeleteTopics, CreatePartitions, or a resource's
    to AlterConfigs / IncrementalAlterConfigs."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None


class InternalTopicOutcome(NamedTuple):
    """The answer to creating an internal topic on first use
    (__consumer_offsets, __transaction_state): NONE once it exists."""

    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None


class CreatePartitionsSpec(NamedTuple):
    """CreatePartitions for one topic: its new total ``count`` and, optionally,
    one broker list per new partition, in partition order (None: the
    controller places them)."""

    name: str
    count: int
    assignments: Optional[Sequence[Sequence[int]]] = None


# ---- configs ---------------------------------------------------------------------------------------
class ConfigOp(NamedTuple):
    """One IncrementalAlterConfigs operation: op 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT."""

    key: str
    op: int
    value: Optional[str]


SET = 0


class ConfigChange(NamedTuple):
    """A change of one resource's config overrides: a topic's name, or a
    broker's id as text ("" for the cluster-wide default). ``replace``
    (AlterConfigs): the new whole override set; otherwise ``ops``
    (IncrementalAlterConfigs) applied in order."""

    name: str
    ops: Sequence[ConfigOp] = ()
    replace: Optional[Mapping[str, Optional[str]]] = None

    def operations(self) -> list[ConfigOp]:
        """The change as operations on an empty set (replace) or the current one (ops)."""
        if self.replace is not None:
            return [ConfigOp(k, SET, v) for k, v in self.replace.items()]
        return [ConfigOp(*op) for op in self.ops]


class ConfigResource(NamedTuple):
    """A resource of DescribeConfigs: type 2 topic, 4 broker, 8 broker logger."""

    resource_type: int
    name: str


class DescribedConfigs(NamedTuple):
    """A resource's configs: entries as cluster.topic_admin describes them
    ({"name", "value", "source", "read_only", "sensitive", "synonyms", "type", "doc"}), or its error."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None
    entries: Sequence[Mapping[str, Any]] = ()


# ---- partitions: elections, reassignments, controlled shutdown ------------------------------------------
class PartitionOutcome(NamedTuple):
    """One partition's answer to ElectLeaders or AlterPartitionReassignments."""

    topic: str
    partition: int
    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None


class ElectLeadersResult(NamedTuple):
    error: ErrorCode = ErrorCode.none
    results: Sequence[PartitionOutcome] = ()


class PartitionReassignment(NamedTuple):
    """AlterPartitionReassignments for one partition: its target replicas, or
    None to cancel an ongoing reassignment."""

    topic: str
    partition: int
    replicas: Optional[Sequence[int]]


class AlterReassignmentsResult(NamedTuple):
    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None
    results: Sequence[PartitionOutcome] = ()


class OngoingReassignment(NamedTuple):
    topic: str
    partition: int
    replicas: Sequence[int]
    adding_replicas: Sequence[int]
    removing_replicas: Sequence[int]


class ListReassignmentsResult(NamedTuple):
    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None
    results: Sequence[OngoingReassignment] = ()


class ControlledShutdownResult(NamedTuple):
    """Kafka's ControlledShutdown answer: the partitions the broker still leads."""

    error: ErrorCode = ErrorCode.none
    remaining: Sequence[tuple[str, int]] = ()


# ---- UpdateMetadata: controller -> edges ---------------------------------------------------------------
class BrokerEndpoint(NamedTuple):
    id: int
    host: str
    port: int
    rack: Optional[str] = None


class PartitionSnapshot(NamedTuple):
    leader: int  # -1: no leader
    leader_epoch: int
    isr: Sequence[int]
    replicas: Sequence[int]


class TopicSnapshot(NamedTuple):
    topic_id: str  # a UUID's text
    partitions: Mapping[int, PartitionSnapshot]
    internal: bool = False


class MetadataSnapshot(NamedTuple):
    """The whole cluster metadata an edge serves (Kafka's UpdateMetadata).
    Sent whole to an edge the controller has not yet told anything in its
    epoch (a new or restarted edge, a controller failover, a call that failed
    or timed out, a changed broker set); otherwise a MetadataDelta follows it."""

    controller_epoch: int
    controller_id: int
    cluster_id: Optional[str]
    brokers: Sequence[BrokerEndpoint]
    topics: Mapping[str, TopicSnapshot]
    # The controller's number for this round, within its epoch (0: unnumbered).
    version: int = 0


class MetadataDelta(NamedTuple):
    """An UpdateMetadata round as a change of the snapshot numbered
    ``base_version`` (same controller epoch, same brokers): the topics that
    changed, whole, with their leaders' handles, and the topics gone. An edge
    that does not hold ``base_version`` applies nothing and answers
    ``MetadataApplied(needs_full=True)``; the controller then sends it a whole
    snapshot, so a lost or reordered round never leaves an edge wrong."""

    controller_epoch: int
    controller_id: int
    base_version: int
    version: int
    topics: Mapping[str, TopicSnapshot]  # changed or new topics
    removed_topics: Sequence[str] = ()


class MetadataApplied(NamedTuple):
    """An edge's answer to UpdateMetadata."""

    error: ErrorCode = ErrorCode.none
    needs_full: bool = False  # a delta whose base this edge does not hold


__all__ = ["AlterReassignmentsResult", "BrokerEndpoint", "MetadataApplied", "MetadataDelta", "MetadataSnapshot", "PartitionSnapshot", "TopicSnapshot",
           "ConfigChange", "ConfigOp", "ConfigResource", "ControlledShutdownResult",
           "CreatePartitionsSpec", "CreateTopicResult", "CreateTopicSpec", "DescribedConfigs", "ElectLeadersResult",
           "InternalTopicOutcome", "ListReassignmentsResult", "NOT_CONTROLLER_MESSAGE", "OngoingReassignment",
           "PartitionOutcome", "PartitionReassignment", "TopicOutcome"]
