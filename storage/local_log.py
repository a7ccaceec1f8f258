"""The files of one partition's log (Kafka's ``LocalLog``): the ordered
segment list, rolling a new segment file, fsync and the recovery point,
reading whole batches as file slices, truncating segment files, the
crash-safe swap of cleaned segments, and asynchronous deletion.

storage/log.py's ``Log`` (Kafka's UnifiedLog) composes one and adds what is
not about files: validation, offsets and epochs, producer state, the log
start offset and retention. Not thread-safe on its own: the Log's lock
(``lock``, shared) is held around every call, except where a method takes
it itself (the background flush job, unlinking due deletions).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import threading
from bisect import bisect_right
from typing import Callable

from storage.checkpoint import fsync_dir, fsync_path
from storage.errors import OffsetOutOfRangeError
from storage.log_config import LogConfig
from storage.log_files import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX
from storage.log_retention import SegmentDeleter
from storage.segment import (INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, FileSlice, LogSegment,
                             segment_file_prefix)
from storage.txn_index import AbortedTxn

log = logging.getLogger("storage.log")


class LocalLog:
    def __init__(self, dir: str, config: LogConfig, lock: threading.RLock, rng: random.Random):
        self.dir = dir
        self.config = config
        self.lock = lock
        self.closed = False
        self.segments: list[LogSegment] = []
        # base offsets of ``segments``, for bisect
        self.bases: list[int] = []
        self.next_offset = 0
        self.recovery_point = 0
        self.last_flush_ms = 0
        # Files were created, renamed or removed since the directory's last fsync.
        self.dir_dirty = False
        # segment.jitter.ms draws (one per segment opened, as Kafka)
        self._rng = rng
        # segments renamed to ".deleted", unlinked by delete_pending()
        self.deleter = SegmentDeleter()
        # bumped by every truncation; the cleaner aborts a pass that spans one,
        # and a background flush started before one does not move the recovery point
        self.truncation_generation = 0
        # Where a rolled segment's fsync runs. Kafka schedules it on its
        # scheduler thread ("flush-log") instead of in the append that rolled:
        # fsyncing a 1 GiB segment inline stalls that append, and every
        # request queued behind it, for hundreds of milliseconds. An owner with
        # a background thread sets this to a callable that runs the job it is
        # given there; None flushes inline (tools, tests, the cleaner).
        self.flush_scheduler: Callable[[Callable[[], None]], object] | None = None

    def set_segments(self, segments: list[LogSegment]) -> None:
        self.segments = segments
        self.bases = [s.base_offset for s in segments]
        self.next_offset = segments[-1].next_offset

    def open_segment(self, base_offset: int, now_ms: int, *, create: bool = False) -> LogSegment:
        return LogSegment(self.dir, base_offset, self.config, create=create, now_ms=now_ms,
                          roll_jitter_ms=self.config.random_segment_jitter(self._rng))

    def floor_index(self, offset: int) -> int:
        """Index of the segment that holds ``offset`` (the first one below all)."""
        return max(bisect_right(self.bases, offset) - 1, 0)

    # ---- rolling ---------------------------------------------------------------------------
    def drop_empty_active(self) -> None:
        """An empty active segment is replaced rather than left behind."""
        self.segments.pop().delete()
        self.bases.pop()

    def add_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        """A new, empty active segment at ``base_offset``; stale files of that name go first."""
        prefix = os.path.join(self.dir, segment_file_prefix(base_offset))
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            if os.path.exists(prefix + suffix):
                log.warning("deleting stale %s before rolling a new segment", prefix + suffix)
                os.unlink(prefix + suffix)
        seg = self.open_segment(base_offset, now_ms, create=True)
        self.segments.append(seg)
        self.bases.append(base_offset)
        self.dir_dirty = True
        return seg

    # ---- flush -----------------------------------------------------------------------------
    def flush_segments(self, up_to: int) -> None:
        """fsync segments holding offsets in [recovery point, up_to)."""
        segs = self.segments
        for i in range(self.floor_index(self.recovery_point), len(segs)):
            if segs[i].base_offset >= up_to:
                break
            segs[i].flush()
        if self.dir_dirty:
            fsync_dir(self.dir)
            self.dir_dirty = False
        if up_to > self.recovery_point:
            self.recovery_point = up_to

    def flush_rolled(self, up_to: int) -> None:
        """Make the segments below ``up_to`` (the one just rolled and any
        older unflushed ones, all closed to appends) durable and move the
        recovery point to ``up_to``: through :attr:`flush_scheduler` when set,
        else now."""
        scheduler = self.flush_scheduler
        if scheduler is None:
            self.flush_segments(up_to)
            return
        paths = []
        for seg in self.segments[self.floor_index(self.recovery_point):]:
            if seg.base_offset >= up_to:
                break
            paths += [seg.log_path, seg.index.path, seg.time_index.path]
        scheduler(functools.partial(self._flush_in_background, paths, up_to, self.truncation_generation))

    def _flush_in_background(self, paths: list[str], up_to: int, generation: int) -> None:
        """A flush job for :attr:`flush_scheduler`'s thread. It opens the files
        by path, so it shares no descriptor with the log: a segment deleted
        meanwhile (retention, DeleteRecords) needs no flush, and one replaced
        by the cleaner was flushed by the cleaner. The recovery point moves
        only if no truncation happened since the roll (it may have cut the log
        below ``up_to``)."""
        if self.closed:
            return
        try:
            for path in paths:
                try:
                    fsync_path(path)
                except FileNotFoundError:
                    continue
            fsync_dir(self.dir)
        except OSError as exc:
            # The recovery point stays put: recovery rescans these segments.
            log.error("flushing %s below offset %d failed: %s", self.dir, up_to, exc)
            return
        with self.lock:
            if self.closed or generation != self.truncation_generation:
                return
            if self.recovery_point < up_to <= self.next_offset:
                self.recovery_point = up_to

    def flush(self, up_to_offset: int | None, now_ms: int) -> int:
        """fsync data below ``up_to_offset`` (None: everything) -> the new recovery point."""
        target = self.next_offset if up_to_offset is None else min(up_to_offset, self.next_offset)
        if target > self.recovery_point or self.dir_dirty:
            self.flush_segments(target)
        self.last_flush_ms = now_ms
        return self.recovery_point

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if ``flush_messages`` / ``flush_ms`` say so."""
        cfg = self.config
        if (cfg.flush_messages is not None and self.next_offset - self.recovery_point >= cfg.flush_messages) or (
            cfg.flush_ms is not None and now_ms - self.last_flush_ms >= cfg.flush_ms
        ):
            self.flush(None, now_ms)
            return True
        return False

    # ---- read ------------------------------------------------------------------------------
    def read_slices(self, offset: int, max_bytes: int, max_offset_exclusive: int | None, min_one_batch: bool,
                    log_start_offset: int) -> list[tuple[LogSegment, FileSlice]]:
        leo = self.next_offset
        if offset < log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range [{log_start_offset}, {leo}] for {self.dir}")
        max_offset = leo if max_offset_exclusive is None else min(max_offset_exclusive, leo)
        out: list[tuple[LogSegment, FileSlice]] = []
        if offset >= max_offset:
            return out
        segs = self.segments
        i = self.floor_index(offset)
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

    def find_offset_by_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        for seg in self.segments:
            if seg.max_timestamp >= timestamp and seg.next_offset > log_start_offset:
                found = seg.find_offset_by_timestamp(timestamp, log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        best = None
        for seg in self.segments:
            ts = seg.max_timestamp
            if ts >= 0 and (best is None or ts > best.max_timestamp):
                best = seg
        return None if best is None else best.find_max_timestamp_record()

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        found: list[AbortedTxn] = []
        for seg in self.segments[self.floor_index(fetch_offset):]:
            entries, complete = seg.txn_index.collect(fetch_offset, upper_bound_offset)
            found.extend(entries)
            if complete:
                break
        return found

    # ---- truncation and deletion -----------------------------------------------------------
    def truncate_to(self, offset: int, now_ms: int | None) -> int:
        """Cut the segment files at ``offset`` (batch-granular) -> the new log end."""
        while len(self.segments) > 1 and self.segments[-1].base_offset > offset:
            self.segments.pop().delete()
            self.bases.pop()
            self.dir_dirty = True
        active = self.segments[-1]
        active.truncate_to(offset, now_ms)
        new_end = active.next_offset
        assert new_end <= offset
        self.next_offset = new_end
        self.recovery_point = min(self.recovery_point, new_end)
        for seg in self.segments:
            seg.txn_index.truncate_to(new_end)
        return new_end

    def reset_at(self, offset: int, now_ms: int) -> None:
        """Delete every segment and start over, empty, at ``offset``."""
        for seg in self.segments:
            seg.delete()
        self.set_segments([self.open_segment(offset, now_ms, create=True)])
        self.recovery_point = offset
        fsync_dir(self.dir)
        self.dir_dirty = False

    def remove_leading(self, n: int, now_ms: int) -> int:
        """Take the first ``n`` segments out and delete them asynchronously -> their bytes."""
        doomed = self.segments[:n]
        del self.segments[:n]
        del self.bases[:n]
        self.schedule_delete(doomed, now_ms)
        return sum(s.size for s in doomed)

    def schedule_delete(self, segments: list[LogSegment], now_ms: int) -> None:
        self.deleter.schedule(segments, now_ms, self.config.file_delete_delay_ms)
        self.dir_dirty = True

    def delete_pending(self, now_ms: int) -> int:
        """Unlink the ``.deleted`` segments that are due -> how many; the
        unlinks (slow for big files) run outside the lock."""
        with self.lock:
            due = self.deleter.take_due(now_ms)
        for seg in due:
            seg.delete()
        return len(due)

    def replace_segments(self, new_segment: LogSegment, old_segments: list[LogSegment], now_ms: int,
                         carry_txn_index: bool) -> None:
        """See Log.replace_segments."""
        segs = self.segments
        try:
            i = next(k for k, s in enumerate(segs) if s is old_segments[0])
        except StopIteration:
            raise ValueError("segments to replace are no longer in the log") from None
        j = i + len(old_segments)
        if j >= len(segs) or any(a is not b for a, b in zip(segs[i:j], old_segments)):
            raise ValueError("segments to replace are not consecutive non-active segments of the log")
        if new_segment.base_offset != old_segments[0].base_offset:
            raise ValueError("the new segment must start at the first replaced segment's base offset")
        if new_segment.size and new_segment.next_offset > segs[j].base_offset:
            raise ValueError("the new segment overlaps the segment after the replaced ones")
        # Unless the caller wrote the new segment's index itself (the
        # cleaner, which drops the entries of the markers it removes), the
        # aborted transactions indexed by the replaced segments stay indexed.
        new_index = new_segment.txn_index
        if carry_txn_index and len(new_index) == 0:
            for old in old_segments:
                for txn in old.txn_index.entries():
                    new_index.append(txn)
        new_segment.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
        fsync_dir(self.dir)
        self.schedule_delete(old_segments, now_ms)
        new_segment.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        fsync_dir(self.dir)
        self.dir_dirty = False
        segs[i:j] = [new_segment]
        self.bases[i:j] = [new_segment.base_offset]

    # ---- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        self.closed = True
        for seg in self.segments:
            seg.close()
        # pending ".deleted" files are removed by the next open
        self.deleter.close()

    def close_handles(self) -> None:
        """For deletion: no flush, nothing kept."""
        self.closed = True
        for seg in self.segments:
            seg.close_handles()
        self.deleter.close()
        self.segments = []
        self.bases = []
