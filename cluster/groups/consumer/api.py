"""Plain values of the consumer group protocol's requests and answers
(the edge builds them from kio's messages; they cross the actor boundary)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Optional

from core.error_codes import ErrorCode

# (topic id, partitions) pairs: an assignment as it travels.
WireAssignment = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True)
class TopicsImage:
    """The topics the edge knows (name, id, partition count), for the
    coordinator to resolve subscriptions and regexes; ``version`` is the
    metadata version of the edge ``source`` (an id per edge process: versions
    of different edges, or of one edge before and after a restart, do not
    compare). ``topics`` None: a reference to that version, sent while the
    coordinator already holds it (Kafka's coordinator keeps a metadata image;
    the edge does not ship every topic with every heartbeat)."""
    version: int
    topics: Optional[tuple[tuple[str, uuid.UUID, int], ...]]
    internal: frozenset[str] = frozenset()
    source: str = ""


@dataclass(frozen=True)
class TopicsImageWanted:
    """The coordinator's answer to a reference to a version it does not hold
    (a restarted coordinator holds none): send the image whole and ask
    again. Nothing was done."""
    held_version: int


@dataclass(frozen=True)
class ConsumerHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: Optional[str] = None
    rack_id: Optional[str] = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Optional[tuple[str, ...]] = None
    subscribed_topic_regex: Optional[str] = None
    server_assignor: Optional[str] = None
    owned: Optional[WireAssignment] = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True)
class ConsumerHeartbeatResult:
    error: ErrorCode
    error_message: Optional[str] = None
    member_id: Optional[str] = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Optional[WireAssignment] = None


@dataclass(frozen=True)
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: Optional[str]
    rack_id: Optional[str]
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: Optional[str]
    assignment: tuple[DescribedTopicPartitions, ...]
    target_assignment: tuple[DescribedTopicPartitions, ...]
    member_type: int  # 0 classic, 1 consumer (ConsumerGroupDescribe v1)


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    error: ErrorCode
    error_message: Optional[str] = None
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
