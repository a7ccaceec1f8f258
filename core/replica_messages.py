"""What crosses the replica actor's boundary: the answers of append, read,
list_offsets and the committed tail the edge serves tail fetches from, the
file slices of those answers, and the progress a leader reports to its
node's purgatory.

NamedTuples rather than dataclasses: they pickle as tuples (Ray and the
local-call channels move many of them per request) and cost no more than
the tuples they replace. Only stdlib here: every replica process imports
this module.
"""
from __future__ import annotations

from typing import NamedTuple

from core.error_codes import ErrorCode


class FileSlice(NamedTuple):
    """A region of a leader's segment file. ``inode`` and ``base_offset``
    (the first batch's) let a reader on the same node detect a file
    replaced at the same path (a cleaner swap) between the answer and the
    read (storage/slice_reader.py)."""
    path: str
    position: int
    length: int
    base_offset: int
    inode: int


class AppendResult(NamedTuple):
    """One record set's append (Kafka's PartitionResponse, plus the
    high watermark after the call: acks=all needs no purgatory when it has
    already passed ``last_offset``)."""
    error: ErrorCode
    base_offset: int
    log_append_time: int
    log_start_offset: int
    error_message: str | None
    last_offset: int
    high_watermark: int
    # KIP-467: (batch index, message) of each record that made the set
    # INVALID_RECORD, so the client fails exactly those (ProduceResponse v8+).
    record_errors: tuple = ()


def failed_append(error: ErrorCode, log_start_offset: int = -1, message: str | None = None,
                  high_watermark: int = -1, record_errors: tuple = ()) -> AppendResult:
    return AppendResult(error, -1, -1, log_start_offset, message, -1, high_watermark, tuple(record_errors))


class ReadRun(NamedTuple):
    """One read in a run of consecutive reads (read_uncommitted)."""
    offset: int
    slices: list[FileSlice]


class CommittedReadRun(NamedTuple):
    """One read of a read_committed run, with the (producer id, first
    offset) of the aborted transactions it overlaps."""
    offset: int
    slices: list[FileSlice]
    aborted: list[tuple[int, int]]


class ReadResult(NamedTuple):
    """A read's answer: ``slices`` for a single read, or the runs of
    read_run (a list of ReadRun/CommittedReadRun)."""
    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    slices: list


class ListOffsetsResult(NamedTuple):
    error: ErrorCode
    offset: int
    timestamp: int
    leader_epoch: int


class EpochEndOffset(NamedTuple):
    """OffsetForLeaderEpoch's answer for one partition."""
    error: ErrorCode
    leader_epoch: int
    end_offset: int


class CommittedTail(NamedTuple):
    """Where the data an append committed lies, for the edge to answer tail
    fetches from without a replica call (net/fetch_local_tail.py)."""
    leader_epoch: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    first_offset: int
    next_offset: int
    slices: list[FileSlice]
    length: int


class PartitionProgress(NamedTuple):
    """A leader's report to its node's purgatory: what delayed produces
    (acks=all), fetches and DeleteRecords wait on."""
    partition: tuple[str, int]
    high_watermark: int
    last_stable_offset: int
    isr_size: int
    min_insync_replicas: int
    is_leader: bool
    leader_epoch: int


# One produce request's records for a partition, as Partition.append takes them:
# (records: bytes, acks, timeout_ms). Internal to the replica process; across
# the actor boundary the sets travel column-wise in an AppendRequest.
RecordSet = tuple[bytes, int, int]


class AppendRequest(NamedTuple):
    """An append call from the edge (or a coordinator) to a leader replica: its
    record sets column-wise (one entry per produce request for the partition,
    up to 256 per call on the produce path). Columns, not a NamedTuple per set:
    a NamedTuple per set costs ~5x the pickling of a tuple (measured, issue 32),
    and three lists cost no more than the tuples did."""
    records: list  # bytes (or a memoryview of a shared region) per set: v2 batches, opaque
    acks: list[int]
    timeouts_ms: list[int]
    leader_epoch: int
    tail: bool = False  # answer with the committed tail too (net/fetch_local_tail.py)
    origin: str = "client"  # Kafka's AppendOrigin (core.txn_messages.ORIGIN_*)

    def record_sets(self) -> list[RecordSet]:
        return list(zip(self.records, self.acks, self.timeouts_ms))

    @classmethod
    def from_sets(cls, record_sets: list[RecordSet], leader_epoch: int, tail: bool = False,
                  origin: str = "client") -> "AppendRequest":
        return cls([r for r, _a, _t in record_sets], [a for _r, a, _t in record_sets],
                   [t for _r, _a, t in record_sets], leader_epoch, tail, origin)


class SharedAppendRequest(NamedTuple):
    """An AppendRequest whose record sets lie in the edge's shared-memory region
    (same node): the call carries their places, not their bytes."""
    region_path: str
    offsets: list[int]
    lengths: list[int]
    acks: list[int]
    timeouts_ms: list[int]
    leader_epoch: int
    tail: bool = False
    # Over a direct channel only: answer at once and, if an acks=all set is not
    # committed yet, send a CommitNotice as the call's second part (core.local_calls.FollowUp).
    commit_notice: bool = False


class CommitNotice(NamedTuple):
    """The second part of an acks=all append call (SharedAppendRequest.commit_notice):
    sent once the high watermark passed every acks=all set of the call that was not
    committed when it answered (last_uncommitted), or the wait ended otherwise. One
    notice answers the whole call: waiting for the first set only left the call's
    later sets, when a follower fetch carried part of the call (replica.fetch.max.bytes),
    a wait_committed round trip each. ``error`` is what wait_committed would answer
    for the last set (NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT); ``high_watermark`` the HW then, which tells the edge which of
    the call's sets it covers (all of them, unless the wait ended otherwise)."""
    error: ErrorCode
    high_watermark: int


def first_uncommitted(results: list, acks: list) -> int | None:
    """The offset the HW must reach for the first acks=all set of an append
    call that was appended but not yet committed when the call answered
    (last offset + 1), or None."""
    return _uncommitted_end(results, acks, min)


def last_uncommitted(results: list, acks: list) -> int | None:
    """The offset the HW must reach for every acks=all set of an append call
    that was appended but not yet committed when the call answered (the last
    such set's last offset + 1), or None."""
    return _uncommitted_end(results, acks, max)


def _uncommitted_end(results: list, acks: list, pick) -> int | None:
    ends = [result.last_offset + 1 for result, set_acks in zip(results, acks)
            if set_acks == -1 and result.error == ErrorCode.none and result.high_watermark <= result.last_offset]
    return pick(ends) if ends else None


class AppendAnswer(NamedTuple):
    """An append call's answer: an AppendResult per set, in order, and with
    AppendRequest.tail the committed tail the edge may serve fetches from
    (None: not everything appended is committed yet)."""
    results: list
    committed_tail: "CommittedTail | None" = None


class DivergingEpoch(NamedTuple):
    """KIP-320: the end of the follower's last fetched epoch as the leader
    has it; the follower truncates there before fetching again."""
    epoch: int
    end_offset: int


class FollowerFetchResult(NamedTuple):
    """The leader's answer to a follower's fetch. ``records`` are bytes (the
    follower may live on another node), or empty with the data in ``slices``
    (FileSlices of the leader's segments) when the follower asked for them:
    it shares the machine and preads them itself (storage/slice_reader.py).
    ``expand_isr`` is the ISR the leader is to commit with this follower in
    it, ``hw_moved`` whether the fetch moved the leader's high watermark:
    both for the leader itself."""
    error: ErrorCode
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging: DivergingEpoch | None = None
    expand_isr: tuple[int, ...] | None = None
    hw_moved: bool = False
    slices: tuple = ()

    @property
    def data_size(self) -> int:
        """Bytes of records carried, in either form."""
        return len(self.records) + sum(s.length for s in self.slices)


class PartitionOffset(NamedTuple):
    """An offset of one partition, as the edge parks operations in the
    purgatory: the offset a produce waits for the HW to pass (delay_produce),
    or the fetchable end a fetch last read (delay_fetch)."""
    topic: str
    partition: int
    offset: int


class DeleteRecordsResult(NamedTuple):
    """DeleteRecords on the leader: the error, and the partition's low
    watermark (the smallest log start over the in-sync replicas) after it."""
    error: ErrorCode
    low_watermark: int
