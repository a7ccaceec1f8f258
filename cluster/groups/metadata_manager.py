"""The groups of one ``__consumer_offsets`` partition as they are stored in
it (Kafka's GroupMetadataManager, without threads): the group cache,
committed and transactional (pending) offsets, the records that persist
them, loading the partition by replay, unloading it, and the periodic
offsets.retention sweep.

The membership side (``membership.GroupCoordinator``, Kafka's
GroupCoordinator) owns one and decides *whether* a request may store; this
decides *what* is written and what memory looks like once it is durable.
It tells its ``GroupLifecycle`` (the coordinator) when groups are loaded and
unloaded, as Kafka's manager calls onGroupLoaded / onGroupUnloaded.

* Persistence: ``append_records(records)`` gets a list of ``(key, value)``
  (value None = tombstone), to be written as one batch (for TxnOffsetCommit
  ``append_records(records, producer=TxnProducer(id, epoch))``: one
  transactional batch of that producer), and returns an ``AppendCompletion``
  (or an asyncio/concurrent future resolving to an ErrorCode, None meaning
  success) that reports when the records are durable. Appends must reach the
  log in call order; replaying the log then reproduces this state.
* Loading: ``load(records)`` (or ``begin_loading`` / ``replay`` or
  ``replay_batches`` / ``complete_loading`` for a partition read in chunks);
  ``unload()`` when this broker stops leading the partition.
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol

from core.error_codes import ErrorCode
from core.metrics import count_skipped_coordinator_record
from core.naming import OFFSETS_TOPIC

from cluster.groups.api import (
    AppendCompletion,
    OffsetAndMetadata,
    OffsetFetchPartition,
    OffsetFetchResult,
    PartitionCommit,
    TopicPartition,
    TxnProducer,
)
from cluster.groups.config import GroupConfig
from cluster.groups.group import (
    CommittedOffset,
    GroupMetadata,
    GroupState,
    IllegalStateError,
    MemberMetadata,
    invoke_callback,
)
from cluster.groups.log_batches import CONTROL_COMMIT, LogBatch
from cluster.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    RecordFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    group_metadata_record,
    group_metadata_tombstone,
    offset_commit_record,
    offset_commit_tombstone,
)
from delayed.timing_wheel import SystemTimer, TimerTask

__all__ = ["AppendRecords", "CommitCallback", "CoordinatorStatus", "GroupLifecycle", "GroupMetadataManager"]

log = logging.getLogger("raykafka.groups")

CommitCallback = Callable[[dict[TopicPartition, ErrorCode]], None]
AppendRecords = Callable[[list[Record]], Any]

S = GroupState


class CoordinatorStatus(enum.Enum):
    NOT_LOADED = "not-loaded"  # not (or no longer) the partition's coordinator
    LOADING = "loading"
    ACTIVE = "active"


def _store_group_error(error: ErrorCode) -> ErrorCode:
    """Kafka's translation of an append error into what JoinGroup/SyncGroup
    clients understand (they retry COORDINATOR_NOT_AVAILABLE and rediscover
    on NOT_COORDINATOR)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                 ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


def _commit_error(error: ErrorCode) -> ErrorCode:
    """The same translation for OffsetCommit (Kafka leaves REQUEST_TIMED_OUT
    as is there, and calls oversized batches INVALID_COMMIT_OFFSET_SIZE)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return error


def _java_length(text: str) -> int:
    # offset.metadata.max.bytes is compared with Java's String.length(),
    # which counts UTF-16 code units.
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _offset_from_value(value: OffsetCommitValue) -> OffsetAndMetadata:
    return OffsetAndMetadata(
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp,
        expire_timestamp=None if value.expire_timestamp == -1 else value.expire_timestamp,
    )


class _OffsetExpirationTask(TimerTask):
    """The periodic offsets.retention sweep (Kafka's
    delete-expired-group-metadata scheduler task)."""

    def __init__(self, manager: "GroupMetadataManager", interval_ms: int) -> None:
        super().__init__(interval_ms)
        self.manager = manager

    def run(self) -> None:
        self.manager._run_offset_expiration(self)


class GroupLifecycle(Protocol):
    """What the membership side does when groups come and go (Kafka's
    onGroupLoaded / onGroupUnloaded)."""

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """A loaded group starts serving: sessions, rebalance if over capacity."""

    def on_groups_unloaded(self, groups: list[GroupMetadata]) -> None:
        """The partition is unloaded: answer whatever waits, cancel timers."""


class GroupMetadataManager:
    def __init__(
        self,
        append_records: AppendRecords,
        config: GroupConfig,
        clock: Callable[[], int],
        timer: Optional[SystemTimer],
        lifecycle: GroupLifecycle,
        *,
        expire_offsets_periodically: bool = True,
        partition: Optional[int] = None,
    ) -> None:
        """``timer`` runs the offsets.retention sweep (None: no sweep);
        ``partition``: the __consumer_offsets partition (for logs and metrics)."""
        self.partition = -1 if partition is None else partition
        self._append_records = append_records
        self.config = config
        self._clock = clock
        self._timer = timer
        self._lifecycle = lifecycle
        self._expire_periodically = expire_offsets_periodically
        self.status = CoordinatorStatus.NOT_LOADED
        self._groups: dict[str, GroupMetadata] = {}
        # Order of offset-commit appends, for "later append wins".
        self._append_sequence = 0
        self._expiration_task: Optional[_OffsetExpirationTask] = None
        # Records of other kinds (KIP-848 consumer groups): (key, value) -> whether taken.
        self.other_records: Optional[Callable[[bytes, Optional[bytes]], bool]] = None
        self._reset_loading_state()

    # ======================================================================
    # the group cache
    # ======================================================================

    def add_group(self, group_id: str) -> GroupMetadata:
        """The group, created Empty if it is new (Kafka's addGroup)."""
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = GroupMetadata(group_id, S.EMPTY, self._clock)
        return group

    def all_groups(self) -> list[GroupMetadata]:
        return list(self._groups.values())

    # ======================================================================
    # ownership: loading and unloading
    # ======================================================================

    def _reset_loading_state(self) -> None:
        # (group, partition) -> (value, append sequence of its batch): the
        # sequence orders committed and transactional offsets as their log
        # offsets do in Kafka (CommitRecordMetadataAndOffset.olderThan).
        self._loading_offsets: dict[tuple[str, TopicPartition], tuple[OffsetCommitValue, int]] = {}
        # producer id -> the same, for transactional offsets awaiting a marker.
        self._loading_pending: dict[int, dict[tuple[str, TopicPartition], tuple[OffsetCommitValue, int]]] = {}
        self._loading_groups: dict[str, GroupMetadataValue] = {}
        self._loading_unknown_keys = 0
        # Transaction completions that arrived while loading (applied after).
        self._completions_while_loading: list[tuple[int, bool]] = []

    def begin_loading(self) -> None:
        """This broker became leader of the partition: answer
        COORDINATOR_LOAD_IN_PROGRESS until ``complete_loading``."""
        if self.status is not CoordinatorStatus.NOT_LOADED:
            self.unload()
        self._reset_loading_state()
        self.status = CoordinatorStatus.LOADING

    def replay(self, records: Iterable[tuple[Optional[bytes], Optional[bytes]]]) -> None:
        """Feed the partition's records in log order (any number of calls),
        as if each were a batch of its own without a producer id. Only the
        last value per key matters; tombstones delete."""
        if self.status is not CoordinatorStatus.LOADING:
            raise IllegalStateError("replay() outside begin_loading()/complete_loading()")
        for record in records:
            self._replay_records((record,), None)

    def replay_batches(self, batches: Iterable[LogBatch]) -> None:
        """Feed the partition's batches in log order (any number of calls;
        ``log_batches.read_log_batches`` makes them). A transactional batch's
        offsets stay pending under its producer id until that producer's
        control batch: COMMIT makes them committed offsets (unless a commit
        appended later is there already), anything else drops them; pending
        ones at the end of the log stay pending (Kafka's
        loadGroupsAndOffsets)."""
        if self.status is not CoordinatorStatus.LOADING:
            raise IllegalStateError("replay_batches() outside begin_loading()/complete_loading()")
        for batch in batches:
            if batch.control is not None:
                pending = self._loading_pending.pop(batch.producer_id, None)
                if pending and batch.control == CONTROL_COMMIT:
                    for slot, loaded in pending.items():
                        current = self._loading_offsets.get(slot)
                        if current is None or current[1] < loaded[1]:
                            self._loading_offsets[slot] = loaded
            else:
                self._replay_records(batch.records, batch.producer_id if batch.transactional else None)

    def _replay_records(self, records: Iterable[tuple[Optional[bytes], Optional[bytes]]],
                        producer_id: Optional[int]) -> None:
        sequence = self._append_sequence
        self._append_sequence += 1
        for key_bytes, value_bytes in records:
            try:
                self._replay_record(key_bytes, value_bytes, producer_id, sequence)
            except Exception as exc:  # noqa: BLE001 - any record we cannot parse
                # Kafka's coordinator fails the load, and with it every group of
                # the partition, retried forever. Only coordinators write here
                # (clients' appends are refused), so skip it, say so and count it.
                self._skip_record(f"{type(exc).__name__}: {exc}")

    def _skip_record(self, why: str) -> None:
        log.warning("__consumer_offsets-%d: skipping a record that cannot be parsed (%s)", self.partition,
                    why[:300])
        count_skipped_coordinator_record(OFFSETS_TOPIC, self.partition)

    def _replay_record(self, key_bytes: Optional[bytes], value_bytes: Optional[bytes], producer_id: Optional[int],
                       sequence: int) -> None:
        if key_bytes is None:
            raise RecordFormatError("a record without a key")
        key = decode_key(key_bytes)
        if isinstance(key, OffsetCommitKey):
            slot = (key.group, TopicPartition(key.topic, key.partition))
            if producer_id is not None:
                pending = self._loading_pending.setdefault(producer_id, {})
                if value_bytes is None:
                    pending.pop(slot, None)
                else:
                    pending[slot] = (decode_offset_commit_value(value_bytes), sequence)
            elif value_bytes is None:
                self._loading_offsets.pop(slot, None)
                # The group's offsets were deleted: transactional commits
                # of the partition appended before go too (Kafka's newer
                # coordinator; what remove_offsets does in memory).
                for pending in self._loading_pending.values():
                    pending.pop(slot, None)
            else:
                self._loading_offsets[slot] = (decode_offset_commit_value(value_bytes), sequence)
        elif isinstance(key, GroupMetadataKey):
            if value_bytes is None:
                self._loading_groups.pop(key.group, None)
            else:
                self._loading_groups[key.group] = decode_group_metadata_value(value_bytes)
        else:
            assert isinstance(key, UnknownKey)
            if self.other_records is None or not self.other_records(key_bytes, value_bytes):
                self._loading_unknown_keys += 1

    def complete_loading(self) -> None:
        """Build the groups from what was replayed and start serving."""
        if self.status is not CoordinatorStatus.LOADING:
            raise IllegalStateError("complete_loading() without begin_loading()")
        if self._loading_unknown_keys:
            log.warning("skipped %d records of unknown key versions",
                        self._loading_unknown_keys)
        groups: dict[str, GroupMetadata] = {}
        for group_id, value in self._loading_groups.items():
            try:
                groups[group_id] = self._group_from_record(group_id, value)
            except RecordFormatError as exc:
                self._skip_record(str(exc))

        def group_of(group_id: str) -> GroupMetadata:
            group = groups.get(group_id)
            if group is None:
                # Offsets without group metadata: a group that only stores
                # offsets (standalone consumers, transactional producers), or
                # whose metadata expired.
                group = groups[group_id] = GroupMetadata(group_id, S.EMPTY, self._clock)
            return group

        for (group_id, tp), (value, sequence) in self._loading_offsets.items():
            group_of(group_id).offsets[tp] = CommittedOffset(_offset_from_value(value), sequence)
        for producer_id, pending in self._loading_pending.items():
            for (group_id, tp), (value, sequence) in pending.items():
                group_of(group_id).pending_txn_offset_commits.setdefault(producer_id, {})[tp] = CommittedOffset(
                    _offset_from_value(value), sequence)
        completions = self._completions_while_loading
        self._reset_loading_state()
        self._groups = groups
        self.status = CoordinatorStatus.ACTIVE
        for group in list(groups.values()):
            self._lifecycle.on_group_loaded(group)
        if self._expire_periodically:
            self._schedule_offset_expiration()
        # A marker written while we read the log may lie beyond what we read:
        # its completion, kept meanwhile, applies now (a no-op for a producer
        # whose marker was replayed).
        for producer_id, committed in completions:
            self.complete_transaction(producer_id, committed)

    def load(self, records: Iterable[tuple[Optional[bytes], Optional[bytes]]]) -> None:
        """``begin_loading`` + ``replay`` + ``complete_loading`` in one go."""
        self.begin_loading()
        try:
            self.replay(records)
        except Exception:
            # A partition we cannot read is one we cannot coordinate.
            self.status = CoordinatorStatus.NOT_LOADED
            self._reset_loading_state()
            raise
        self.complete_loading()

    def unload(self) -> None:
        """This broker is no longer the partition's leader: the groups go (the
        lifecycle answers what waits on them and cancels their timers), and
        every later request gets NOT_COORDINATOR until the next load."""
        groups = list(self._groups.values())
        self._groups = {}
        self._reset_loading_state()
        self.status = CoordinatorStatus.NOT_LOADED
        if self._expiration_task is not None:
            self._expiration_task.cancel()
            self._expiration_task = None
        self._lifecycle.on_groups_unloaded(groups)

    def _group_from_record(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
        if value.members and value.protocol is None:
            raise RecordFormatError(f"group {group_id}: members without a selected protocol")
        group = GroupMetadata(group_id, S.STABLE if value.members else S.EMPTY, self._clock)
        group.generation_id = value.generation
        for m in value.members:
            group.add(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout,
                    session_timeout_ms=m.session_timeout,
                    protocol_type=value.protocol_type,
                    # Only the selected protocol's metadata is persisted.
                    supported_protocols=[(value.protocol, m.subscription)],
                    assignment=m.assignment,
                )
            )
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.current_state_timestamp = None if value.current_state_timestamp == -1 else value.current_state_timestamp
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # ======================================================================
    # offsets: commit, fetch, transactions, removal
    # ======================================================================

    def _metadata_fits(self, metadata: Optional[str]) -> bool:
        return metadata is None or _java_length(metadata) <= self.config.offset_metadata_max_bytes

    def store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, PartitionCommit],
                       callback: CommitCallback, producer: Optional[TxnProducer] = None) -> None:
        """Kafka's storeOffsets: with a ``producer`` the records go in one
        transactional batch of it and the offsets stay pending under its id
        once appended; without, they are committed once appended."""
        now = self._clock()
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, commit in offsets.items():
            if not self._metadata_fits(commit.metadata):
                continue
            commit_ts = commit.commit_timestamp_ms
            accepted[tp] = OffsetAndMetadata(
                offset=commit.offset,
                # A commit with its own expire timestamp is written as a v1
                # record, which has no leader epoch; keep memory equal to what
                # a reload would give. (On the wire the two never meet: the
                # retention time is OffsetCommit v2-v4, the epoch v6+.)
                leader_epoch=commit.leader_epoch if commit.expire_timestamp_ms is None else -1,
                metadata=commit.metadata or "",
                commit_timestamp=now if commit_ts is None or commit_ts == -1 else commit_ts,
                expire_timestamp=commit.expire_timestamp_ms,
            )

        def answer(error: ErrorCode) -> None:
            invoke_callback(callback, {tp: (error if self._metadata_fits(c.metadata) else ErrorCode.offset_metadata_too_large)
                               for tp, c in offsets.items()})

        if not accepted:
            answer(ErrorCode.offset_metadata_too_large)
            return
        if self.status is not CoordinatorStatus.ACTIVE:
            answer(ErrorCode.not_coordinator)
            return
        records = [
            offset_commit_record(group.group_id, tp.topic, tp.partition, OffsetCommitValue(
                offset=o.offset, leader_epoch=o.leader_epoch, metadata=o.metadata,
                commit_timestamp=o.commit_timestamp,
                expire_timestamp=-1 if o.expire_timestamp is None else o.expire_timestamp))
            for tp, o in accepted.items()
        ]
        sequence = self._append_sequence
        self._append_sequence += 1
        if producer is None:
            group.prepare_offset_commit(accepted)
        else:
            group.prepare_txn_offset_commit(producer.producer_id, accepted)

        def on_appended(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                if not group.is_(S.DEAD):
                    for tp, o in accepted.items():
                        if producer is None:
                            group.on_offset_commit_append(tp, CommittedOffset(o, sequence))
                        else:
                            group.on_txn_offset_commit_append(producer.producer_id, tp, CommittedOffset(o, sequence))
                answer(ErrorCode.none)
            else:
                if not group.is_(S.DEAD):
                    for tp, o in accepted.items():
                        if producer is None:
                            group.fail_pending_offset_write(tp, o)
                        else:
                            group.fail_pending_txn_offset_commit(producer.producer_id, tp)
                answer(_commit_error(error))

        self._append(records, on_appended, producer)

    def complete_transaction(self, producer_id: int, committed: bool) -> int:
        """The producer's COMMIT (``committed``) or ABORT marker is written to
        this offsets partition (the transaction coordinator calls this, as
        Kafka's scheduleHandleTxnCompletion): in every group of the
        partition its pending offsets become committed offsets or are
        dropped. Returns the number of groups that had pending offsets of
        the producer. While loading the completion waits for the load to end
        (the marker may lie beyond what the load reads); before loading and
        after unloading it is nobody's business here (the next owner replays
        the marker)."""
        if self.status is CoordinatorStatus.LOADING:
            self._completions_while_loading.append((producer_id, committed))
            return 0
        if self.status is not CoordinatorStatus.ACTIVE:
            return 0
        groups = 0
        for group in list(self._groups.values()):
            if group.is_(S.DEAD) or not group.has_pending_offset_commits_from_producer(producer_id):
                continue
            groups += 1
            group.complete_pending_txn_offset_commit(producer_id, committed)
            # An Empty group left without offsets (an aborted transaction's
            # only commits) goes with the next expiration sweep, as in Kafka.
        return groups

    def get_offsets(self, group_id: str, requested: Optional[list[TopicPartition]],
                    require_stable: bool) -> OffsetFetchResult:
        """The group's committed offsets (Kafka's getOffsets): ``requested``
        None = every partition with one; the others get offset -1."""
        group = self._groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return OffsetFetchResult(ErrorCode.none, {tp: OffsetFetchPartition() for tp in requested or ()})
        result = {}
        for tp in requested if requested is not None else list(group.offsets):
            if require_stable and group.has_pending_offset_commits_for(tp):
                result[tp] = OffsetFetchPartition(error=ErrorCode.unstable_offset_commit)
                continue
            offset = group.offset(tp)
            if offset is None:
                result[tp] = OffsetFetchPartition()
            else:
                result[tp] = OffsetFetchPartition(offset.offset, offset.leader_epoch, offset.metadata)
        return OffsetFetchResult(ErrorCode.none, result)

    def expire_offsets(self, now_ms: Optional[int] = None) -> int:
        """One offsets.retention sweep (see ``GroupMetadata.remove_expired_offsets``
        for the rules). Empty groups left without offsets are removed too.
        Returns the number of offsets removed."""
        if self.status is not CoordinatorStatus.ACTIVE:
            return 0
        now = self._clock() if now_ms is None else now_ms
        retention = self.config.offsets_retention_ms
        return self.cleanup_group_metadata(list(self._groups.values()),
                                            lambda g: g.remove_expired_offsets(now, retention))

    def cleanup_group_metadata(self, groups: Iterable[GroupMetadata],
                                select: Callable[[GroupMetadata], Iterable[TopicPartition]]) -> int:
        """Remove the offsets ``select`` picks; a group left Empty with no
        offsets is dead and goes too. Writes the tombstones without waiting:
        like Kafka (acks=0 here) a lost tombstone only means the data
        reappears after a reload, to be removed again by a later sweep."""
        removed_total = 0
        for group in groups:
            removed = list(select(group))
            if group.is_(S.EMPTY) and not group.has_offsets():
                group.transition_to(S.DEAD)
            records = [offset_commit_tombstone(group.group_id, tp.topic, tp.partition) for tp in removed]
            if group.is_(S.DEAD) and self._groups.get(group.group_id) is group:
                del self._groups[group.group_id]
                # Generation 0 never wrote metadata (offsets-only group).
                if group.generation_id > 0:
                    records.append(group_metadata_tombstone(group.group_id))
            if records and self.status is CoordinatorStatus.ACTIVE:
                group_id = group.group_id

                def on_appended(error: ErrorCode, group_id: str = group_id) -> None:
                    if error != ErrorCode.none:
                        log.warning("failed to write tombstones for group %s: %s", group_id, error.name)

                self._append(records, on_appended)
            removed_total += len(removed)
        return removed_total

    def _schedule_offset_expiration(self) -> None:
        if self._timer is None or self._expiration_task is not None:
            return
        interval = self.config.offsets_retention_check_interval_ms
        if interval <= 0:
            return
        self._expiration_task = _OffsetExpirationTask(self, interval)
        self._timer.add(self._expiration_task)

    def _run_offset_expiration(self, task: _OffsetExpirationTask) -> None:
        if task is not self._expiration_task:
            return
        self._expiration_task = None
        if self.status is not CoordinatorStatus.ACTIVE:
            return
        removed = self.expire_offsets()
        if removed:
            log.info("removed %d expired offsets", removed)
        self._schedule_offset_expiration()

    # ======================================================================
    # persistence
    # ======================================================================

    def store_group(self, group: GroupMetadata, assignment: Mapping[str, bytes],
                     on_done: Callable[[ErrorCode], None]) -> None:
        """Write the group's metadata record (its generation, members and
        ``assignment``); ``on_done(error)`` once durable."""
        if self.status is not CoordinatorStatus.ACTIVE:
            on_done(ErrorCode.not_coordinator)
            return
        self._append([self.group_record(group, assignment)], lambda error: on_done(_store_group_error(error)))

    @staticmethod
    def group_record(group: GroupMetadata, assignment: Mapping[str, bytes]) -> Record:
        """The group's metadata record: its generation, members and ``assignment``."""
        protocol = group.protocol_name
        if group.members and protocol is None:
            raise IllegalStateError(f"group {group.group_id}: storing members without a selected protocol")
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=-1 if group.current_state_timestamp is None else group.current_state_timestamp,
            members=tuple(
                MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(protocol),  # type: ignore[arg-type]
                    assignment=bytes(assignment[m.member_id]),
                )
                for m in group.members.values()
            ),
        )
        return group_metadata_record(group.group_id, value)

    def _append(self, records: list[Record], on_done: Callable[[ErrorCode], None],
                producer: Optional[TxnProducer] = None) -> None:
        try:
            # Transactional records go in a batch of their producer (keyword
            # only then, so plain drivers need not know about it).
            completion = (self._append_records(records) if producer is None
                          else self._append_records(records, producer=producer))
        except Exception:
            log.exception("append to __consumer_offsets failed")
            on_done(ErrorCode.coordinator_not_available)
            return
        _when_appended(completion, on_done)

    # ======================================================================
    # inspection
    # ======================================================================

    def group(self, group_id: str) -> Optional[GroupMetadata]:
        return self._groups.get(group_id)

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        """The live groups (read-only use, please)."""
        return dict(self._groups)

    def snapshot(self) -> dict[str, dict]:
        """Everything that is persisted, as plain data: what a reload must
        reproduce. (Members' other supported protocols, waiting requests and
        timers are not persisted, so not here either.)"""
        out = {}
        for group_id, g in sorted(self._groups.items()):
            out[group_id] = {
                "state": g.state.value,
                "protocol_type": g.protocol_type,
                "protocol": g.protocol_name,
                "generation": g.generation_id,
                "leader": g.leader_id,
                "current_state_timestamp": g.current_state_timestamp,
                "members": {
                    m.member_id: {
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "rebalance_timeout_ms": m.rebalance_timeout_ms,
                        "session_timeout_ms": m.session_timeout_ms,
                        "subscription": dict(m.supported_protocols).get(g.protocol_name),
                        "assignment": m.assignment,
                    }
                    for m in g.members.values()
                },
                "static_members": dict(sorted(g.static_members.items())),
                "offsets": dict(sorted(g.all_offsets().items())),
                # Appended TxnOffsetCommits awaiting their marker, per producer id.
                "pending_txn_offsets": {
                    producer_id: dict(sorted((tp, c.offset_and_metadata) for tp, c in pending.items()
                                             if c.append_sequence is not None))
                    for producer_id, pending in sorted(g.pending_txn_offset_commits.items())
                },
            }
        return out


def _when_appended(completion: Any, on_done: Callable[[ErrorCode], None]) -> None:
    """Run ``on_done(error)`` when an append completes, whatever the driver
    returned: an AppendCompletion (or anything with ``add_callback``), an
    asyncio/concurrent future resolving to an ErrorCode (None = success; an
    exception or cancellation = COORDINATOR_NOT_AVAILABLE), or None for an
    append that is already durable."""
    if completion is None:
        on_done(ErrorCode.none)
    elif isinstance(completion, AppendCompletion) or hasattr(completion, "add_callback"):
        completion.add_callback(on_done)
    elif hasattr(completion, "add_done_callback"):
        def done(future: Any) -> None:
            try:
                if future.cancelled():
                    error = ErrorCode.coordinator_not_available
                else:
                    result = future.result()
                    error = ErrorCode.none if result is None else ErrorCode(result)
            except Exception:
                log.exception("append to __consumer_offsets failed")
                error = ErrorCode.coordinator_not_available
            on_done(error)

        completion.add_done_callback(done)
    else:
        raise TypeError(f"append_records returned {type(completion).__name__}, not a completion")
