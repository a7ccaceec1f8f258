"""Plain values the coordinator takes and gives back.

The actor translates between these and kio's request/response dataclasses;
keeping kio out of the core keeps the rules readable and testable without
the wire format. Error codes are kio's ``ErrorCode``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

from core.error_codes import ErrorCode

__all__ = [
    "AppendCompletion",
    "GroupDescription",
    "GroupListing",
    "JoinGroupMember",
    "JoinGroupResult",
    "LeaveGroupResult",
    "LeavingMember",
    "MemberDescription",
    "MemberLeaveResult",
    "OffsetAndMetadata",
    "OffsetFetchPartition",
    "OffsetFetchResult",
    "PartitionCommit",
    "SyncGroupResult",
    "TopicPartition",
    "TxnProducer",
    "UNKNOWN_GENERATION_ID",
    "UNKNOWN_MEMBER_ID",
]

# JoinGroupRequest.UNKNOWN_MEMBER_ID / UNKNOWN_GENERATION_ID.
UNKNOWN_MEMBER_ID = ""
UNKNOWN_GENERATION_ID = -1
# OffsetFetchResponse.INVALID_OFFSET: "no committed offset".
INVALID_OFFSET = -1
NO_LEADER_EPOCH = -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class TxnProducer(NamedTuple):
    """The transactional producer a TxnOffsetCommit writes for: its records
    go in a transactional batch carrying this id and epoch."""

    producer_id: int
    producer_epoch: int


# -- JoinGroup / SyncGroup -------------------------------------------------------


@dataclass(frozen=True)
class JoinGroupMember:
    """One member as the leader sees it: its metadata for the chosen protocol."""

    member_id: str
    group_instance_id: Optional[str]
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str
    generation_id: int = UNKNOWN_GENERATION_ID
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    # The current leader's member id; "" when none (error results).
    leader_id: str = ""
    # Filled for the leader only: everyone's metadata, to compute assignments.
    members: tuple[JoinGroupMember, ...] = ()
    # JoinGroup v9+: a static leader rejoining a Stable group is told it leads
    # but must not run the assignor (KIP-814).
    skip_assignment: bool = False

    @classmethod
    def failed(cls, member_id: str, error: ErrorCode) -> "JoinGroupResult":
        return cls(error=error, member_id=member_id)


@dataclass(frozen=True)
class SyncGroupResult:
    error: ErrorCode
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    assignment: bytes = b""


# -- LeaveGroup ------------------------------------------------------------------


@dataclass(frozen=True)
class LeavingMember:
    member_id: str
    group_instance_id: Optional[str] = None
    reason: Optional[str] = None


@dataclass(frozen=True)
class MemberLeaveResult:
    member_id: str
    group_instance_id: Optional[str]
    error: ErrorCode


@dataclass(frozen=True)
class LeaveGroupResult:
    # Group-level error; when set, ``members`` is empty (as in Kafka).
    error: ErrorCode
    members: tuple[MemberLeaveResult, ...] = ()


# -- offsets -----------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionCommit:
    """One partition of an OffsetCommit request."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    # None in the request means "no metadata", stored as "" (as in Kafka).
    metadata: Optional[str] = ""
    # OffsetCommit v1 carries a commit timestamp per partition; -1 or None =
    # the coordinator's current time.
    commit_timestamp_ms: Optional[int] = None
    # OffsetCommit v2-v4 with a retention time: absolute expiry (commit time +
    # retention). None = the broker's offsets.retention.minutes applies.
    expire_timestamp_ms: Optional[int] = None


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset as the coordinator stores it."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: Optional[int] = None


@dataclass(frozen=True)
class OffsetFetchPartition:
    offset: int = INVALID_OFFSET
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class OffsetFetchResult:
    error: ErrorCode
    partitions: dict[TopicPartition, OffsetFetchPartition] = field(default_factory=dict)


# -- DescribeGroups / ListGroups -------------------------------------------------


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    # Empty unless the group is Stable (Kafka's summaryNoMetadata otherwise).
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    # "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead";
    # "" with an error.
    state: str
    protocol_type: str = ""
    # The selected protocol, only while Stable; "" otherwise.
    protocol: str = ""
    members: tuple[MemberDescription, ...] = ()


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # ListGroups v5: "classic" or "consumer" (KIP-848)


# -- persistence -------------------------------------------------------------------


class AppendCompletion:
    """The outcome of one ``append_records`` call, delivered later.

    The driver returns one from ``append_records`` and calls ``complete(error)``
    exactly once when the records are durable (``ErrorCode.none``) or failed
    (the partition's produce error: NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
    ...). Completing before returning it is fine (synchronous stores, tests).
    Callbacks run in the order they were added, on whatever calls
    ``complete``: for the actor, its event loop.
    """

    __slots__ = ("_error", "_callbacks")

    def __init__(self) -> None:
        self._error: Optional[ErrorCode] = None
        self._callbacks: list[Callable[[ErrorCode], None]] = []

    @classmethod
    def completed(cls, error: ErrorCode = ErrorCode.none) -> "AppendCompletion":
        completion = cls()
        completion.complete(error)
        return completion

    @property
    def done(self) -> bool:
        return self._error is not None

    @property
    def error(self) -> Optional[ErrorCode]:
        return self._error

    def complete(self, error: ErrorCode = ErrorCode.none) -> None:
        if self._error is not None:
            raise RuntimeError("append completion completed twice")
        self._error = ErrorCode(error)
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self._error)

    def add_callback(self, callback: Callable[[ErrorCode], None]) -> None:
        if self._error is not None:
            callback(self._error)
        else:
            self._callbacks.append(callback)
