"""A partition's log: an ordered list of segments in ``<log.dir>/<topic>-<partition>/``.

The directory layout and every file in it follow Apache Kafka byte for byte
(segment files, indexes, ``leader-epoch-checkpoint``), so Kafka's own tools
can read it.

Durability model (Kafka's): appends go to the page cache; ``flush`` fsyncs
and advances the *recovery point*, below which everything is known to be on
disk.  The owner persists the recovery point (``recovery-point-offset-
checkpoint``) and passes it back when reopening; everything at or above it is
re-validated on open and a torn or corrupt tail is cut.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
from typing import Callable, NamedTuple

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, fsync_dir
from storage.cleaner_checkpoint import CleanerCheckpoint
from storage.errors import (InvalidRecordsError, LogClosedError, OffsetOutOfRangeError, RecordsFault,
                            UnexpectedAppendOffsetError)
from storage.leader_epoch import LeaderEpochCache
from storage.log_config import (CREATE_TIME, EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
                                LOG_APPEND_TIME, MAX_TIMESTAMP, LogConfig)
from storage.log_files import CLEANED_FILE_SUFFIX, parse_partition_dir_name, partition_dir_name
from storage.local_log import LocalLog
from storage.log_loader import LogLoader, rebuild_producer_state
from storage.log_retention import FROM_CONFIG, RetentionResult, deletable_segment_count, retention_limits
from storage.log_validator import convert_and_validate_keys
from storage.producer_append import analyze_producers, apply_producer_updates, producer_batch_positions
from storage.producer_state import ORIGIN_CLIENT, ORIGIN_COORDINATOR, ORIGIN_REPLICATION, BatchMetadata, ProducerStateManager
from storage.record_batch import (LOG_OVERHEAD, assign_offsets, set_log_append_time, stamp_client_batches,
                                  validate_batches)
from storage.segment import FileSlice, LogSegment
from storage.txn_index import AbortedTxn

__all__ = [
    "Log",
    "LogConfig",
    "AppendInfo",
    "RetentionResult",
    "FileSlice",
    "partition_dir_name",
    "parse_partition_dir_name",
    "CLEANED_FILE_SUFFIX",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "LATEST_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "EARLIEST_LOCAL_TIMESTAMP",
]

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int  # last offset of the first batch with max_timestamp
    num_batches: int
    valid_bytes: int
    log_append_time: int = -1  # the broker timestamp with LogAppendTime, else -1
    # A producer's retried batch already in the log: nothing was appended and
    # the offsets are those of the original (Kafka answers it as a success).
    duplicate: bool = False


_EMPTY_APPEND = AppendInfo(-1, -1, -1, -1, 0, 0, -1)


class Log:
    def __init__(
        self,
        dir: str,
        config: LogConfig | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        *,
        now_ms: int | None = None,
        rng: random.Random | None = None,
        producer_id_expiration_ms: int = 86400000,
    ):
        self.dir = os.path.abspath(dir)
        config = config if config is not None else LogConfig()
        self._lock = threading.RLock()
        # The segment files (Kafka's LocalLog); this class adds what is not about files.
        self.local = LocalLog(self.dir, config, self._lock, rng if rng is not None else random.Random())
        now_ms = _now_ms() if now_ms is None else now_ms
        os.makedirs(self.dir, exist_ok=True)
        self.leader_epoch_cache = LeaderEpochCache(os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT))
        self.producer_state = ProducerStateManager(self.dir, os.path.basename(self.dir), producer_id_expiration_ms)
        self._load(max(0, recovery_point), max(0, log_start_offset), now_ms)
        self.local.last_flush_ms = now_ms

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A topic config change: segments opened from now on use it."""
        self.local.config = config

    @property
    def flush_scheduler(self) -> Callable[[Callable[[], None]], object] | None:
        """Where a rolled segment's fsync runs (LocalLog.flush_scheduler)."""
        return self.local.flush_scheduler

    @flush_scheduler.setter
    def flush_scheduler(self, scheduler: Callable[[Callable[[], None]], object] | None) -> None:
        self.local.flush_scheduler = scheduler

    @property
    def truncation_generation(self) -> int:
        """Bumped by every truncation; the cleaner aborts a pass that spans one."""
        return self.local.truncation_generation

    # ------------------------------------------------------------- loading

    def _load(self, recovery_point: int, log_start_offset: int, now_ms: int) -> None:
        loaded = LogLoader(self.dir, self.config, self.local.open_segment, self.leader_epoch_cache).load(
            recovery_point, log_start_offset, now_ms)
        self.local.set_segments(loaded.segments)
        self._log_start_offset = loaded.log_start_offset
        self.local.recovery_point = loaded.recovery_point
        self._reload_producer_state(now_ms)
        if loaded.dir_dirty:
            fsync_dir(self.dir)
        self.local.dir_dirty = False

    # ------------------------------------------------------ producer state

    def _reload_producer_state(self, now_ms: int | None = None) -> None:
        rebuild_producer_state(self.producer_state, self.local.segments, self.local.bases, self._log_start_offset,
                               _now_ms() if now_ms is None else now_ms)

    def _apply_producer_updates(self, updates) -> None:
        apply_producer_updates(self.producer_state, updates, self.local.segments[-1].txn_index, self.local.next_offset)

    @staticmethod
    def _duplicate_append(duplicate: BatchMetadata, total: int) -> AppendInfo:
        return AppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, duplicate.last_offset,
                          0, total, -1, True)

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction not yet ended and replicated."""
        return self.producer_state.first_unstable_offset()

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``
        (Kafka's ``collectAbortedTransactions``): the transaction indexes from
        the fetch offset's segment on, until one entry's LSO passes the bound."""
        return self.local.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        with self._lock:
            return self.producer_state.remove_expired_producers(_now_ms() if now_ms is None else now_ms)

    # ---------------------------------------------------------- properties

    def __repr__(self) -> str:
        return (
            f"Log({self.dir!r}, start={self._log_start_offset}, end={self.local.next_offset}, "
            f"segments={len(self.local.segments)})"
        )

    @property
    def log_end_offset(self) -> int:
        return self.local.next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.local.segments)

    @property
    def segments(self) -> list[LogSegment]:
        return list(self.local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self.local.segments[-1]

    @property
    def unflushed_messages(self) -> int:
        return self.local.next_offset - self.local.recovery_point

    @property
    def closed(self) -> bool:
        return self.local.closed

    def _check_open(self) -> None:
        if self.local.closed:
            raise LogClosedError(f"log {self.dir} is closed")

    # -------------------------------------------------------------- append

    def append_as_leader(
        self,
        records,
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        from_client: bool = True,
        origin: str | None = None,
    ) -> AppendInfo:
        """Validate a produce payload, assign offsets from the log end and append.

        A writable buffer (a bytearray, or a memoryview of one or of the
        edge's shared-memory region) is used and modified in place: offsets
        and leader epochs are written into it, so the append copies nothing.
        Read-only input (``bytes``) is copied once.  ``from_client=False`` is for records
        the broker writes itself (transaction markers), which may be control
        batches.  ``origin`` is Kafka's AppendOrigin (storage.producer_state.
        ORIGIN_*): producers' batches are checked for epoch and sequence (a
        retried batch is answered with its original offsets, ``duplicate``),
        a coordinator's are not; default: the client when ``from_client``,
        else the coordinator.  Raises InvalidRecordsError (ProducerStateError
        for producer faults) with Kafka's error code.
        """
        if origin is None:
            origin = ORIGIN_CLIENT if from_client else ORIGIN_COORDINATOR
        elif origin != ORIGIN_CLIENT:
            from_client = False
        if now_ms is None:
            now_ms = _now_ms()
        if isinstance(records, bytearray):
            buf = records
        elif isinstance(records, memoryview) and not records.readonly and records.c_contiguous:
            buf = records.cast("B") if records.format != "B" else records
        else:
            buf = bytearray(records)
        view = memoryview(buf)
        cfg = self.config
        total = len(buf)
        target = cfg.compression_codec
        if (
            from_client
            and not cfg.compacted
            and cfg.message_timestamp_type != LOG_APPEND_TIME
            and total <= cfg.segment_bytes
        ):
            # The common produce: one pass validates and stamps under the
            # lock. Anything it does not plainly accept falls through to the
            # exact path below, which names Kafka's error.
            with self._lock:
                self._check_open()
                first = self.local.next_offset
                stamped = stamp_client_batches(buf, first, leader_epoch, cfg.max_message_bytes, target)
                if stamped is not None:
                    last, batches, max_ts, off_max, layout, producer_batches = stamped
                    updates = None
                    if producer_batches:
                        updates = analyze_producers(self.producer_state, view, producer_batches, origin)
                        if isinstance(updates, BatchMetadata):
                            return self._duplicate_append(updates, total)
                    self._append_stamped(view, first, last, batches, max_ts, off_max, leader_epoch, now_ms, layout)
                    self._apply_producer_updates(updates)
                    return AppendInfo(first, last, max_ts, off_max, batches, total, -1)
        headers = validate_batches(view, cfg.max_message_bytes, from_client=from_client)
        if cfg.compacted or (
            target is not None and any(h.compression != target and not h.is_control for h in headers)
        ):
            # The only leader-side decoding, as in Kafka's LogValidator: keys
            # of compacted topics, and conversion to the topic's codec.
            converted = convert_and_validate_keys(view, headers, target, cfg.compacted,
                                                  self.topic_partition_name)
            if converted is not None:
                buf = converted
                view = memoryview(buf)
                # max.message.bytes applies again to the converted batches
                headers = validate_batches(view, cfg.max_message_bytes, from_client=from_client)
        total = len(buf)
        if total > cfg.segment_bytes:
            raise InvalidRecordsError(
                RecordsFault.record_list_too_large,
                f"append of {total} bytes exceeds the segment size {cfg.segment_bytes}",
            )
        with self._lock:
            self._check_open()
            first = self.local.next_offset
            last = assign_offsets(buf, headers, first, leader_epoch)
            if cfg.message_timestamp_type == LOG_APPEND_TIME:
                pos = 0
                for h in headers:
                    set_log_append_time(buf, pos, now_ms)
                    pos += h.batch_length + LOG_OVERHEAD
                max_ts, off_max, append_time = now_ms, first + headers[0].last_offset_delta, now_ms
            else:
                max_ts, off_max, append_time = -1, first - 1, -1
                nxt = first
                for h in headers:
                    nxt += h.last_offset_delta + 1
                    if h.max_timestamp > max_ts:
                        max_ts, off_max = h.max_timestamp, nxt - 1
            updates = None
            producer_batches = producer_batch_positions(headers, view)
            if producer_batches:
                updates = analyze_producers(self.producer_state, view, producer_batches, origin)
                if isinstance(updates, BatchMetadata):
                    return self._duplicate_append(updates, total)
            self._append_stamped(view, first, last, len(headers), max_ts, off_max, leader_epoch, now_ms)
            self._apply_producer_updates(updates)
        return AppendInfo(first, last, max_ts, off_max, len(headers), total, append_time)

    def _append_stamped(
        self,
        view,
        first: int,
        last: int,
        batches: int,
        max_ts: int,
        off_max: int,
        leader_epoch: int,
        now_ms: int,
        layout=None,
    ) -> None:
        """Write batches whose offsets ``first..last`` are stamped; under the lock."""
        seg = self._maybe_roll(len(view), batches, max_ts, last, first, now_ms)
        if leader_epoch >= 0 and leader_epoch != self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first)
        seg.append(last, max_ts, off_max, view, layout)
        local = self.local
        assert last >= first == local.next_offset, (first, last, local.next_offset)
        local.next_offset = last + 1
        local.maybe_flush(now_ms)

    @property
    def topic_partition_name(self) -> str:
        """``<topic>-<partition>``, Kafka's TopicPartition string."""
        return os.path.basename(self.dir)

    def append_as_follower(
        self, records, now_ms: int | None = None, *, allow_offset_gap: bool | None = None
    ) -> AppendInfo:
        """Append batches replicated from the leader, offsets already assigned.

        CRCs and batch structure are checked; a trailing partial batch is
        ignored (a fetch response may end mid-batch).  The first batch must
        start at the log end offset (``UnexpectedAppendOffsetError``
        otherwise) and offsets must increase.  ``allow_offset_gap`` (default:
        whether the topic is compacted) accepts a first offset above the log
        end and gaps between batches, which compaction produces.  Empty input
        is a no-op.
        """
        if now_ms is None:
            now_ms = _now_ms()
        if allow_offset_gap is None:
            allow_offset_gap = self.config.compacted
        view = records if isinstance(records, memoryview) else memoryview(records)
        if len(view) == 0:
            return _EMPTY_APPEND
        headers = validate_batches(view, None, from_client=False, allow_partial_tail=True)
        if not headers:
            return _EMPTY_APPEND
        with self._lock:
            self._check_open()
            leo = self.local.next_offset
            first = headers[0].base_offset
            if first < leo or (first > leo and not allow_offset_gap):
                raise UnexpectedAppendOffsetError(
                    f"follower append to {self.dir} starts at offset {first}, log end offset is {leo}",
                    first,
                    leo,
                )
            prev_last = first - 1
            max_ts, off_max = -1, first - 1
            valid = 0
            new_epochs = []
            latest_epoch = self.leader_epoch_cache.latest_epoch
            latest_epoch = -1 if latest_epoch is None else latest_epoch
            for h in headers:
                base = h.base_offset
                if base <= prev_last or (base != prev_last + 1 and not allow_offset_gap):
                    raise UnexpectedAppendOffsetError(
                        f"follower append to {self.dir}: batch at offset {base} does not follow offset {prev_last}",
                        base,
                        prev_last + 1,
                    )
                prev_last = base + h.last_offset_delta
                if h.max_timestamp > max_ts:
                    max_ts, off_max = h.max_timestamp, prev_last
                if h.partition_leader_epoch > latest_epoch:
                    latest_epoch = h.partition_leader_epoch
                    new_epochs.append((h.partition_leader_epoch, base))
                valid += h.batch_length + LOG_OVERHEAD
            last = prev_last
            if valid > self.config.segment_bytes:
                raise InvalidRecordsError(
                    RecordsFault.record_list_too_large,
                    f"append of {valid} bytes exceeds the segment size {self.config.segment_bytes}",
                )
            if first > leo:
                # Start a segment at the gap so each segment still begins at
                # its base offset (recovery checks that).
                seg = self.roll(first, now_ms)
            else:
                seg = self._maybe_roll(valid, len(headers), max_ts, last, first, now_ms)
            for epoch, start in new_epochs:
                self.leader_epoch_cache.assign(epoch, start)
            updates = None
            producer_batches = producer_batch_positions(headers)
            if producer_batches:
                updates = analyze_producers(self.producer_state, view[:valid], producer_batches, ORIGIN_REPLICATION)
            seg.append(last, max_ts, off_max, view[:valid])
            self.local.next_offset = last + 1
            self._apply_producer_updates(updates)
            self.local.maybe_flush(now_ms)
        return AppendInfo(first, last, max_ts, off_max, len(headers), valid, -1)

    def _maybe_roll(
        self, messages_size: int, num_batches: int, max_ts: int, max_offset: int, first_offset: int, now_ms: int
    ) -> LogSegment:
        local = self.local
        seg = local.segments[-1]
        cfg = local.config
        size = seg.size
        if (
            size > cfg.segment_bytes - messages_size
            or (size > 0 and seg.time_waited_for_roll(now_ms, max_ts) > cfg.max_segment_ms - seg.roll_jitter_ms)
            or not seg.index_has_room(num_batches)
            or not seg.can_convert_to_relative(max_offset)
        ):
            return self.roll(first_offset, now_ms)
        return seg

    def roll(self, new_base_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base_offset`` (default: the log
        end offset).  The finished segment is flushed and the recovery point
        advanced, as Kafka schedules right after every roll: on
        :attr:`flush_scheduler` when set, else before this returns."""
        with self._lock:
            self._check_open()
            if new_base_offset is None:
                new_base_offset = self.local.next_offset
            if now_ms is None:
                now_ms = _now_ms()
            active = self.local.segments[-1]
            if active.size == 0:
                if active.base_offset == new_base_offset:
                    return active
                self.local.drop_empty_active()
            else:
                if new_base_offset < active.next_offset:
                    raise ValueError(f"cannot roll at {new_base_offset}, below the log end {active.next_offset}")
                active.on_become_inactive()
                # Kafka snapshots the producer state at every roll, so a
                # restart replays at most the active segment's headers.
                self.producer_state.map_end_offset = self.local.next_offset
                self.producer_state.take_snapshot(sync=False)
                self.local.flush_rolled(active.next_offset)
            return self.local.add_segment(new_base_offset, now_ms)

    # --------------------------------------------------------------- flush

    def flush(self, up_to_offset: int | None = None, now_ms: int | None = None) -> int:
        """fsync data below ``up_to_offset`` (default: everything) and return
        the new recovery point."""
        with self._lock:
            self._check_open()
            return self.local.flush(up_to_offset, _now_ms() if now_ms is None else now_ms)

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush if ``flush_messages`` / ``flush_ms`` say so; for periodic callers."""
        with self._lock:
            return self.local.maybe_flush(_now_ms() if now_ms is None else now_ms)

    # ---------------------------------------------------------------- read

    def _read_slices(
        self, offset: int, max_bytes: int, max_offset_exclusive: int | None, min_one_batch: bool
    ) -> list[tuple[LogSegment, FileSlice]]:
        self._check_open()
        return self.local.read_slices(offset, max_bytes, max_offset_exclusive, min_one_batch, self._log_start_offset)

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        min_one_batch: bool = True,
    ) -> list[FileSlice]:
        """Whole batches starting with the one containing ``offset``.

        At most ``max_bytes`` in total, except that with ``min_one_batch`` the
        first batch is returned even when larger; only batches whose last
        offset is below ``max_offset_exclusive`` (the high watermark for
        consumers; default the log end).  Raises OffsetOutOfRangeError when
        ``offset`` is below the log start or above the log end.
        """
        with self._lock:
            return [sl for _, sl in self._read_slices(offset, max_bytes, max_offset_exclusive, min_one_batch)]

    def read_with_inodes(self, offset: int, max_bytes: int, max_offset_exclusive: int | None = None,
                         min_one_batch: bool = True) -> list[tuple[FileSlice, int]]:
        """:meth:`read`, each slice paired with its file's inode (see LogSegment.inode)."""
        with self._lock:
            return [(sl, seg.inode)
                    for seg, sl in self._read_slices(offset, max_bytes, max_offset_exclusive, min_one_batch)]

    def read_bytes(
        self,
        offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Like :meth:`read`, returning the batches' bytes."""
        with self._lock:
            parts = [
                seg.read_bytes(sl.position, sl.length)
                for seg, sl in self._read_slices(offset, max_bytes, max_offset_exclusive, min_one_batch)
            ]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >=
        ``timestamp`` (ListOffsets).  Special values: -1 latest (log end),
        -2 / -4 earliest (log start), -3 the max-timestamp record; those
        report timestamp -1 except -3.  None when no record qualifies."""
        with self._lock:
            self._check_open()
            if timestamp == LATEST_TIMESTAMP:
                return self.local.next_offset, -1
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return self._log_start_offset, -1
            if timestamp == MAX_TIMESTAMP:
                return self.offset_of_max_timestamp()
            return self.local.find_offset_by_timestamp(timestamp, self._log_start_offset)

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the largest
        timestamp in the log, or None if the log holds no timestamps."""
        with self._lock:
            self._check_open()
            return self.local.max_timestamp_record()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """OffsetsForLeaderEpoch: ``(epoch, end_offset)`` or None if unknown."""
        with self._lock:
            found_epoch, end = self.leader_epoch_cache.end_offset_for(epoch, self.local.next_offset)
            return None if end < 0 else (found_epoch, end)

    # ----------------------------------------------------------- truncation

    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove everything at or after ``offset`` (follower divergence).

        Batch-granular: when ``offset`` falls inside a batch, that whole batch
        goes and the log end becomes its base offset.  Returns whether
        anything was removed.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self.local.next_offset:
                # Nothing to cut, but epochs this replica started without appending
                # (it led an epoch that never got data) must go, as Kafka's
                # truncateTo does: else the follower keeps finding the same divergence.
                self.leader_epoch_cache.truncate_from_end(self.local.next_offset)
                return False
            if offset < self.local.segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            new_end = self.local.truncate_to(offset, now_ms)
            self.leader_epoch_cache.truncate_from_end(new_end)
            self._log_start_offset = min(self._log_start_offset, new_end)
            self._truncate_cleaner_checkpoint(new_end)
            self._reload_producer_state()
            return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete all data and restart the (empty) log at ``offset``."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            self.local.reset_at(offset, _now_ms() if now_ms is None else now_ms)
            self._log_start_offset = offset
            self.leader_epoch_cache.clear()
            self.producer_state.delete_snapshots_above(-1)
            self.producer_state.reset(offset)
            self._truncate_cleaner_checkpoint(offset)

    # ------------------------------------------------------------ retention

    def maybe_increment_log_start_offset(self, new_start: int, high_watermark: int | None = None) -> bool:
        """Advance the log start (DeleteRecords, retention); offsets below it
        become unreadable.  As Kafka, it cannot pass the high watermark
        (default: the log end): OffsetOutOfRangeError otherwise.  Returns
        whether it moved; the owner then checkpoints :attr:`log_start_offset`.
        Segments wholly below it are deleted by the next :meth:`apply_retention`."""
        with self._lock:
            self._check_open()
            if new_start <= self._log_start_offset:
                return False
            limit = self.local.next_offset if high_watermark is None else min(high_watermark, self.local.next_offset)
            if new_start > limit:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {new_start} of partition "
                    f"{self.topic_partition_name} since it is larger than the high watermark {limit}"
                )
            self._log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self.producer_state.on_log_start_offset_incremented(new_start)
            return True

    def delete_records(self, offset: int, high_watermark: int) -> int:
        """DeleteRecords: make ``offset`` the log start (-1 = the high
        watermark).  Returns the new low watermark (log start offset).
        OffsetOutOfRangeError when ``offset`` is above the high watermark."""
        if offset == -1:
            offset = high_watermark
        if offset < 0:
            raise OffsetOutOfRangeError(f"invalid DeleteRecords offset {offset}")
        with self._lock:
            self.maybe_increment_log_start_offset(offset, high_watermark)
            return self._log_start_offset

    def _delete_leading(self, n: int, now_ms: int) -> int:
        """Remove the first ``n`` segments (asynchronously, via ".deleted")
        and move the log start to the first remaining one."""
        if n <= 0:
            return 0
        size = self.local.remove_leading(n, now_ms)
        first = self.local.segments[0].base_offset
        if first > self._log_start_offset:
            self._log_start_offset = first
            self.leader_epoch_cache.truncate_from_start(first)
            self.producer_state.on_log_start_offset_incremented(first)
        # Snapshots below the first segment can never be loaded again.
        self.producer_state.delete_snapshots_below(first)
        return size

    def apply_retention(
        self,
        high_watermark: int | None = None,
        now_ms: int | None = None,
        *,
        retention_ms=FROM_CONFIG,
        retention_bytes=FROM_CONFIG,
    ) -> RetentionResult:
        """Kafka's ``UnifiedLog.deleteOldSegments``, for a periodic caller
        (storage/log_retention.py decides which segments). ``retention_ms``
        and ``retention_bytes`` (-1 = unlimited) default to the config. Only
        whole closed segments go, never the active one, and only those that
        end at or below ``high_watermark`` (default: the log end). Deleted
        segments are renamed to ``.deleted`` and removed by
        :meth:`delete_pending` after ``file_delete_delay_ms``.  The log start
        moves to the first kept segment; the result says where it is now.
        """
        retention_ms, retention_bytes = retention_limits(self.config, retention_ms, retention_bytes)
        with self._lock:
            self._check_open()
            now_ms = _now_ms() if now_ms is None else now_ms
            start_before = self._log_start_offset
            limit = self.local.next_offset if high_watermark is None else min(high_watermark, self.local.next_offset)
            deleted = deletable_segment_count(self.local.segments, self._log_start_offset, limit, retention_ms,
                                              retention_bytes, now_ms)
            deleted_bytes = self._delete_leading(deleted, now_ms)
            if deleted and self.local.dir_dirty:
                fsync_dir(self.dir)
                self.local.dir_dirty = False
            return RetentionResult(
                deleted, deleted_bytes, self._log_start_offset, self._log_start_offset != start_before
            )

    def delete_old_segments(
        self,
        now_ms: int | None = None,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        high_watermark: int | None = None,
    ) -> int:
        """:meth:`apply_retention` with explicit limits (None disables one,
        regardless of the config and cleanup policy).  Returns the number of
        segments deleted."""
        return self.apply_retention(
            high_watermark,
            now_ms,
            retention_ms=-1 if retention_ms is None else retention_ms,
            retention_bytes=-1 if retention_bytes is None else retention_bytes,
        ).deleted_segments

    # ------------------------------------------------- asynchronous deletion

    def delete_pending(self, now_ms: int | None = None) -> int:
        """Unlink ``.deleted`` segments whose ``file_delete_delay_ms`` has
        passed; returns how many segments were removed.  For a periodic caller,
        from any thread: the unlinks run outside the log's lock, so appends do
        not wait for them."""
        return self.local.delete_pending(_now_ms() if now_ms is None else now_ms)

    @property
    def pending_deletes(self) -> int:
        return len(self.local.deleter)

    # -------------------------------------------------------- cleaner hooks

    def replace_segments(self, new_segment: LogSegment, old_segments: list[LogSegment], now_ms: int | None = None,
                         *, carry_txn_index: bool = True) -> None:
        """Swap a cleaned segment in for ``old_segments`` (Kafka's
        ``LocalLog.replaceSegments``), crash-safe:

        1. the new segment's ``.cleaned`` files are renamed to ``.swap``;
        2. the old segments are renamed to ``.deleted`` (unlinked later);
        3. the ``.swap`` suffix is dropped.

        A crash after 1 is completed on the next open, a crash before it is
        rolled back (see log_loader.LogLoader.complete_or_roll_back_swaps).  ``old_segments``
        must be consecutive non-active segments of this log starting at the
        new segment's base offset; ValueError otherwise (the caller's view is
        stale, e.g. retention or truncation ran meanwhile).
        """
        with self._lock:
            self._check_open()
            now_ms = _now_ms() if now_ms is None else now_ms
            self.local.replace_segments(new_segment, old_segments, now_ms, carry_txn_index)

    def _truncate_cleaner_checkpoint(self, offset: int) -> None:
        self.local.truncation_generation += 1
        try:
            CleanerCheckpoint(self.dir).lower(offset)
        except Exception:  # the checkpoint is advisory; never fail a truncation
            log.exception("cannot lower the cleaner checkpoint of %s after a truncation", self.dir)

    # -------------------------------------------------------------- closing

    def close(self) -> None:
        """Flush everything (recovery point = log end) and close all files."""
        with self._lock:
            if self.local.closed:
                return
            try:
                self.local.segments[-1].on_become_inactive()
                self.flush()
                # Clean shutdown: the next open loads this and replays nothing.
                self.producer_state.map_end_offset = self.local.next_offset
                self.producer_state.take_snapshot(sync=True)
            finally:
                self.local.close()

    def delete(self) -> None:
        """Close without flushing and remove the partition directory."""
        with self._lock:
            self.local.close_handles()
            shutil.rmtree(self.dir, ignore_errors=True)
            try:
                CleanerCheckpoint(self.dir).remove()
            except Exception:
                log.exception("cannot remove %s from its cleaner checkpoint", self.dir)
            parent = os.path.dirname(self.dir)
            if os.path.isdir(parent):
                fsync_dir(parent)

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
