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
import re
import shutil
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, fsync_dir
from storage.errors import (
    RECORD_LIST_TOO_LARGE,
    InvalidRecordsError,
    LogClosedError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from storage.leader_epoch import LeaderEpochCache
from storage.record_batch import (
    LOG_OVERHEAD,
    assign_offsets,
    set_log_append_time,
    validate_batches,
)
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    FileSlice,
    LogSegment,
    segment_file_prefix,
)

__all__ = [
    "Log",
    "LogConfig",
    "AppendInfo",
    "FileSlice",
    "partition_dir_name",
    "parse_partition_dir_name",
    "LATEST_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "EARLIEST_LOCAL_TIMESTAMP",
]

log = logging.getLogger(__name__)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

# Leftovers of interrupted operations (Kafka's async deletes, cleaner output,
# our checkpoint writes); a fresh open discards them.
_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
_SEGMENT_NAME = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class LogConfig:
    """Per-topic log settings; names and defaults are Kafka's topic configs."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms
    segment_index_bytes: int = 10485760  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_message_bytes: int = 1048588  # max.message.bytes
    flush_messages: int | None = None  # flush.messages; None = never (Long.MAX)
    flush_ms: int | None = None  # flush.ms; None = never (Long.MAX)
    message_timestamp_type: str = CREATE_TIME  # message.timestamp.type
    cleanup_policy: str = "delete"  # cleanup.policy: delete, compact, or both

    @property
    def compacted(self) -> bool:
        """Compacted logs legitimately have offset gaps between batches."""
        return "compact" in self.cleanup_policy

    def __post_init__(self) -> None:
        # Positions in the offset index are int32, hence Kafka's Int range.
        if not 14 <= self.segment_bytes <= 0x7FFFFFFF:
            raise ValueError(f"segment_bytes must be in [14, 2147483647], got {self.segment_bytes}")
        if self.segment_index_bytes < 12:
            raise ValueError(f"segment_index_bytes must be >= 12, got {self.segment_index_bytes}")
        if self.index_interval_bytes < 0 or self.max_message_bytes < 0 or self.segment_ms < 1:
            raise ValueError("index_interval_bytes and max_message_bytes must be >= 0, segment_ms >= 1")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"unknown message_timestamp_type {self.message_timestamp_type!r}")
        policies = {p.strip() for p in self.cleanup_policy.split(",")}
        if not policies or not policies <= {"delete", "compact"}:
            raise ValueError(f"unknown cleanup_policy {self.cleanup_policy!r}")


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int  # last offset of the first batch with max_timestamp
    num_batches: int
    valid_bytes: int
    log_append_time: int = -1  # the broker timestamp with LogAppendTime, else -1


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
    ):
        self.dir = os.path.abspath(dir)
        self.config = config if config is not None else LogConfig()
        self._lock = threading.RLock()
        self._closed = False
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        now_ms = _now_ms() if now_ms is None else now_ms
        os.makedirs(self.dir, exist_ok=True)
        self.leader_epoch_cache = LeaderEpochCache(os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT))
        self._dir_dirty = False
        self._load(max(0, recovery_point), max(0, log_start_offset), now_ms)
        self._last_flush_ms = now_ms

    # ------------------------------------------------------------- loading

    def _load(self, recovery_point: int, log_start_offset: int, now_ms: int) -> None:
        names = os.listdir(self.dir)
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                path = os.path.join(self.dir, name)
                if os.path.isfile(path):
                    log.info("deleting leftover file %s", path)
                    os.unlink(path)
                    self._dir_dirty = True
        names = os.listdir(self.dir)
        bases = []
        for name in names:
            m = _SEGMENT_NAME.match(name)
            if m and m.group(2) == LOG_SUFFIX:
                bases.append(int(m.group(1)))
        present = set(bases)
        for name in names:
            m = _SEGMENT_NAME.match(name)
            if m and m.group(2) != LOG_SUFFIX and int(m.group(1)) not in present:
                log.info("deleting orphaned index file %s", name)
                os.unlink(os.path.join(self.dir, name))
                self._dir_dirty = True
        bases.sort()
        segments = [LogSegment(self.dir, base, self.config, now_ms=now_ms) for base in bases]

        cache = self.leader_epoch_cache

        def observe_epoch(epoch: int, base_offset: int) -> None:
            latest = cache.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                cache.assign(epoch, base_offset)

        if segments:
            first_unflushed = max(bisect_right(bases, recovery_point) - 1, 0)
            for seg in segments[:first_unflushed]:
                # Flushed segments are trusted; only a missing index forces a
                # rebuild now (other index damage is caught on first use).
                if not (seg.index.exists() and seg.time_index.exists()):
                    log.warning("rebuilding missing index of %s", seg.log_path)
                    seg.recover()
            i = first_unflushed
            while i < len(segments):
                seg = segments[i]
                truncated = seg.recover(
                    from_offset=recovery_point if i == first_unflushed else None,
                    epoch_observer=observe_epoch,
                )
                overlaps = i + 1 < len(segments) and segments[i + 1].base_offset < seg.next_offset
                if (truncated > 0 or overlaps) and i + 1 < len(segments):
                    # As Kafka: data after a corrupt point cannot be trusted to
                    # continue the log, so later segments go.
                    for later in segments[i + 1 :]:
                        log.warning("deleting segment %s after corruption in %s", later.log_path, seg.log_path)
                        later.delete()
                    del segments[i + 1 :]
                    self._dir_dirty = True
                i += 1

        if segments and segments[-1].next_offset < log_start_offset:
            # The log start was advanced past everything we have (e.g. by
            # DeleteRecords before a crash): start over there.
            for seg in segments:
                seg.delete()
            segments = []
            cache.clear()
        if not segments:
            segments = [LogSegment(self.dir, log_start_offset, self.config, create=True, now_ms=now_ms)]
            self._dir_dirty = True
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._next_offset = segments[-1].next_offset
        self._log_start_offset = max(log_start_offset, segments[0].base_offset)
        self._recovery_point = min(recovery_point, self._next_offset)
        cache.truncate_from_end(self._next_offset)
        cache.truncate_from_start(self._log_start_offset)
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False

    # ---------------------------------------------------------- properties

    def __repr__(self) -> str:
        return (
            f"Log({self.dir!r}, start={self._log_start_offset}, end={self._next_offset}, "
            f"segments={len(self._segments)})"
        )

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def unflushed_messages(self) -> int:
        return self._next_offset - self._recovery_point

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.dir} is closed")

    # -------------------------------------------------------------- append

    def append_as_leader(
        self,
        records,
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        from_client: bool = True,
    ) -> AppendInfo:
        """Validate a produce payload, assign offsets from the log end and append.

        ``records`` is copied once into a bytearray (a bytearray argument is
        used, and modified, in place).  ``from_client=False`` is for records
        the broker writes itself (transaction markers), which may be control
        batches.  Raises InvalidRecordsError with Kafka's error code.
        """
        if now_ms is None:
            now_ms = _now_ms()
        buf = records if isinstance(records, bytearray) else bytearray(records)
        view = memoryview(buf)
        cfg = self.config
        headers = validate_batches(view, cfg.max_message_bytes, from_client=from_client)
        total = len(buf)
        if total > cfg.segment_bytes:
            raise InvalidRecordsError(
                RECORD_LIST_TOO_LARGE,
                f"append of {total} bytes exceeds the segment size {cfg.segment_bytes}",
            )
        with self._lock:
            self._check_open()
            first = self._next_offset
            last = assign_offsets(buf, headers, first, leader_epoch)
            if cfg.message_timestamp_type == LOG_APPEND_TIME:
                pos = 0
                for h in headers:
                    set_log_append_time(buf, pos, now_ms)
                    pos += h[1] + LOG_OVERHEAD
                max_ts, off_max, append_time = now_ms, first + headers[0][6], now_ms
            else:
                max_ts, off_max, append_time = -1, first - 1, -1
                nxt = first
                for h in headers:
                    nxt += h[6] + 1
                    if h[8] > max_ts:
                        max_ts, off_max = h[8], nxt - 1
            seg = self._maybe_roll(total, len(headers), max_ts, last, first, now_ms)
            if leader_epoch >= 0 and leader_epoch != self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first)
            seg.append(last, max_ts, off_max, view)
            assert last >= first == self._next_offset, (first, last, self._next_offset)
            self._next_offset = last + 1
            self._maybe_flush(now_ms)
        return AppendInfo(first, last, max_ts, off_max, len(headers), total, append_time)

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
            leo = self._next_offset
            first = headers[0][0]
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
                base = h[0]
                if base <= prev_last or (base != prev_last + 1 and not allow_offset_gap):
                    raise UnexpectedAppendOffsetError(
                        f"follower append to {self.dir}: batch at offset {base} does not follow offset {prev_last}",
                        base,
                        prev_last + 1,
                    )
                prev_last = base + h[6]
                if h[8] > max_ts:
                    max_ts, off_max = h[8], prev_last
                if h[2] > latest_epoch:
                    latest_epoch = h[2]
                    new_epochs.append((h[2], base))
                valid += h[1] + LOG_OVERHEAD
            last = prev_last
            if valid > self.config.segment_bytes:
                raise InvalidRecordsError(
                    RECORD_LIST_TOO_LARGE,
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
            seg.append(last, max_ts, off_max, view[:valid])
            self._next_offset = last + 1
            self._maybe_flush(now_ms)
        return AppendInfo(first, last, max_ts, off_max, len(headers), valid, -1)

    def _maybe_roll(
        self, messages_size: int, num_batches: int, max_ts: int, max_offset: int, first_offset: int, now_ms: int
    ) -> LogSegment:
        seg = self._segments[-1]
        cfg = self.config
        size = seg.size
        if (
            size > cfg.segment_bytes - messages_size
            or (size > 0 and seg.time_waited_for_roll(now_ms, max_ts) > cfg.segment_ms)
            or not seg.index_has_room(num_batches)
            or not seg.can_convert_to_relative(max_offset)
        ):
            return self.roll(first_offset, now_ms)
        return seg

    def roll(self, new_base_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base_offset`` (default: the log
        end offset).  The finished segment is flushed and the recovery point
        advanced, as Kafka schedules right after every roll."""
        with self._lock:
            self._check_open()
            if new_base_offset is None:
                new_base_offset = self._next_offset
            if now_ms is None:
                now_ms = _now_ms()
            active = self._segments[-1]
            if active.size == 0:
                if active.base_offset == new_base_offset:
                    return active
                # An empty active segment is replaced rather than left behind.
                active.delete()
                self._segments.pop()
                self._bases.pop()
            else:
                if new_base_offset < active.next_offset:
                    raise ValueError(f"cannot roll at {new_base_offset}, below the log end {active.next_offset}")
                active.on_become_inactive()
                self._flush_segments(active.next_offset)
            prefix = os.path.join(self.dir, segment_file_prefix(new_base_offset))
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if os.path.exists(prefix + suffix):
                    log.warning("deleting stale %s before rolling a new segment", prefix + suffix)
                    os.unlink(prefix + suffix)
            seg = LogSegment(self.dir, new_base_offset, self.config, create=True, now_ms=now_ms)
            self._segments.append(seg)
            self._bases.append(new_base_offset)
            self._dir_dirty = True
            return seg

    # --------------------------------------------------------------- flush

    def _flush_segments(self, up_to: int) -> None:
        """fsync segments holding offsets in [recovery point, up_to)."""
        rp = self._recovery_point
        segs = self._segments
        start = max(bisect_right(self._bases, rp) - 1, 0)
        for i in range(start, len(segs)):
            if segs[i].base_offset >= up_to:
                break
            segs[i].flush()
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False
        if up_to > self._recovery_point:
            self._recovery_point = up_to

    def flush(self, up_to_offset: int | None = None, now_ms: int | None = None) -> int:
        """fsync data below ``up_to_offset`` (default: everything) and return
        the new recovery point."""
        with self._lock:
            self._check_open()
            target = self._next_offset if up_to_offset is None else min(up_to_offset, self._next_offset)
            if target > self._recovery_point or self._dir_dirty:
                self._flush_segments(target)
            self._last_flush_ms = _now_ms() if now_ms is None else now_ms
            return self._recovery_point

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush if ``flush_messages`` / ``flush_ms`` say so; for periodic callers."""
        with self._lock:
            return self._maybe_flush(_now_ms() if now_ms is None else now_ms)

    def _maybe_flush(self, now_ms: int) -> bool:
        cfg = self.config
        if (cfg.flush_messages is not None and self._next_offset - self._recovery_point >= cfg.flush_messages) or (
            cfg.flush_ms is not None and now_ms - self._last_flush_ms >= cfg.flush_ms
        ):
            self.flush(now_ms=now_ms)
            return True
        return False

    # ---------------------------------------------------------------- read

    def _read_slices(
        self, offset: int, max_bytes: int, max_offset_exclusive: int | None, min_one_batch: bool
    ) -> list[tuple[LogSegment, FileSlice]]:
        self._check_open()
        leo = self._next_offset
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{self._log_start_offset}, {leo}] for {self.dir}"
            )
        max_offset = leo if max_offset_exclusive is None else min(max_offset_exclusive, leo)
        out: list[tuple[LogSegment, FileSlice]] = []
        if offset >= max_offset:
            return out
        segs = self._segments
        i = max(bisect_right(self._bases, offset) - 1, 0)
        remaining = max_bytes
        while i < len(segs):
            seg = segs[i]
            if seg.base_offset >= max_offset:
                break
            sl = seg.read_slice(offset, remaining, max_offset, min_one_batch and not out)
            if sl is None:
                i += 1
                continue
            if sl.length == 0:
                break
            out.append((seg, sl))
            remaining -= sl.length
            if sl.position + sl.length < seg.size or sl.next_offset >= max_offset or remaining <= 0:
                break
            offset = sl.next_offset
            i += 1
        return out

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
                return self._next_offset, -1
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return self._log_start_offset, -1
            if timestamp == MAX_TIMESTAMP:
                return self.offset_of_max_timestamp()
            start = self._log_start_offset
            for seg in self._segments:
                if seg.max_timestamp >= timestamp and seg.next_offset > start:
                    found = seg.find_offset_by_timestamp(timestamp, start)
                    if found is not None:
                        return found
            return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the largest
        timestamp in the log, or None if the log holds no timestamps."""
        with self._lock:
            self._check_open()
            best = None
            for seg in self._segments:
                ts = seg.max_timestamp
                if ts >= 0 and (best is None or ts > best.max_timestamp):
                    best = seg
            return None if best is None else best.find_max_timestamp_record()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """OffsetsForLeaderEpoch: ``(epoch, end_offset)`` or None if unknown."""
        with self._lock:
            found_epoch, end = self.leader_epoch_cache.end_offset_for(epoch, self._next_offset)
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
            if offset >= self._next_offset:
                return False
            if offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                self._segments.pop().delete()
                self._bases.pop()
                self._dir_dirty = True
            active = self._segments[-1]
            active.truncate_to(offset, now_ms)
            new_end = active.next_offset
            assert new_end <= offset
            self._next_offset = new_end
            self.leader_epoch_cache.truncate_from_end(new_end)
            self._log_start_offset = min(self._log_start_offset, new_end)
            self._recovery_point = min(self._recovery_point, new_end)
            return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete all data and restart the (empty) log at ``offset``."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            for seg in self._segments:
                seg.delete()
            seg = LogSegment(self.dir, offset, self.config, create=True, now_ms=now_ms)
            self._segments = [seg]
            self._bases = [offset]
            self._next_offset = offset
            self._log_start_offset = offset
            self._recovery_point = offset
            self.leader_epoch_cache.clear()
            fsync_dir(self.dir)
            self._dir_dirty = False

    # ------------------------------------------------------------ retention

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Advance the log start (DeleteRecords, retention); offsets below it
        become unreadable.  The caller keeps it at or below the high watermark."""
        with self._lock:
            self._check_open()
            if new_start <= self._log_start_offset:
                return False
            if new_start > self._next_offset:
                raise OffsetOutOfRangeError(
                    f"cannot move log start of {self.dir} to {new_start}, beyond the log end {self._next_offset}"
                )
            self._log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            return True

    def delete_old_segments(
        self,
        now_ms: int | None = None,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        high_watermark: int | None = None,
    ) -> int:
        """Delete leading segments that are below the log start offset or
        breach ``retention_ms`` / ``retention_bytes`` (None or < 0 disables).

        Only segments entirely below ``high_watermark`` (default: log end)
        and never the active segment are deleted, so the log keeps its end
        offset.  The log start moves to the first remaining segment.  Returns
        the number of segments deleted.
        """
        with self._lock:
            self._check_open()
            now_ms = _now_ms() if now_ms is None else now_ms
            limit = self._next_offset if high_watermark is None else min(high_watermark, self._next_offset)
            segs = self._segments
            total = sum(s.size for s in segs)
            deleted = 0
            while len(segs) - deleted > 1:
                seg = segs[deleted]
                next_base = segs[deleted + 1].base_offset
                if next_base > limit:
                    break
                below_start = next_base <= self._log_start_offset
                expired = retention_ms is not None and retention_ms >= 0 and (
                    now_ms - self._segment_timestamp(seg) > retention_ms
                )
                oversize = retention_bytes is not None and retention_bytes >= 0 and total - seg.size >= retention_bytes
                if not (below_start or expired or oversize):
                    break
                total -= seg.size
                deleted += 1
            if deleted:
                for seg in segs[:deleted]:
                    seg.delete()
                del self._segments[:deleted]
                del self._bases[:deleted]
                fsync_dir(self.dir)
                self.maybe_increment_log_start_offset(self._segments[0].base_offset)
            return deleted

    @staticmethod
    def _segment_timestamp(seg: LogSegment) -> int:
        # Kafka's LogSegment.largestTimestamp: the max record timestamp, or
        # the file's modification time when no batch carries one.
        ts = seg.max_timestamp
        if ts >= 0:
            return ts
        return int(os.stat(seg.log_path).st_mtime * 1000)

    # -------------------------------------------------------------- closing

    def close(self) -> None:
        """Flush everything (recovery point = log end) and close all files."""
        with self._lock:
            if self._closed:
                return
            try:
                self._segments[-1].on_become_inactive()
                self.flush()
            finally:
                self._closed = True
                for seg in self._segments:
                    seg.close()

    def delete(self) -> None:
        """Close without flushing and remove the partition directory."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_handles()
            self._segments = []
            self._bases = []
            shutil.rmtree(self.dir, ignore_errors=True)
            parent = os.path.dirname(self.dir)
            if os.path.isdir(parent):
                fsync_dir(parent)

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
