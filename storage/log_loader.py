"""Opening a partition's log (Kafka's ``LogLoader``): finish or roll back a
cleaner swap a crash interrupted, drop leftover files, open the segments,
re-validate everything at or after the recovery point (cutting a torn or
corrupt tail and the segments after it), and rebuild the producer state from
the newest snapshot plus the batch headers after it."""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import Callable, NamedTuple

from storage.leader_epoch import LeaderEpochCache
from storage.log_config import LogConfig
from storage.log_files import (ANY_SEGMENT_FILE, CLEANED_FILE_SUFFIX, DELETED_FILE_SUFFIX, SEGMENT_FILE_NAME,
                               SWAP_FILE_SUFFIX, TMP_SUFFIX)
from storage.producer_append import complete_txn
from storage.producer_state import ORIGIN_REPLICATION, ProducerStateManager, end_txn_marker_type, increment_sequence
from storage.record_batch import CONTROL_MASK
from storage.segment import LOG_SUFFIX, LogSegment

log = logging.getLogger("storage.log")


class LoadedLog(NamedTuple):
    """The segments of an opened log and the offsets they bound."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    # Whether files were created, renamed or removed: the directory needs an fsync.
    dir_dirty: bool


class LogLoader:
    """One load of one partition directory. ``open_segment(base, now_ms,
    create=...)`` opens a segment as the log will own it."""

    def __init__(self, dir: str, config: LogConfig, open_segment: Callable[..., LogSegment],
                 leader_epoch_cache: LeaderEpochCache):
        self.dir = dir
        self.config = config
        self.open_segment = open_segment
        self.leader_epoch_cache = leader_epoch_cache
        self.dir_dirty = False

    def unlink(self, name: str, why: str) -> None:
        log.info("deleting %s %s", why, os.path.join(self.dir, name))
        try:
            os.unlink(os.path.join(self.dir, name))
        except FileNotFoundError:
            pass
        self.dir_dirty = True

    def complete_or_roll_back_swaps(self) -> None:
        """Kafka's ``LogLoader.removeTempFilesAndCollectSwapFiles`` and swap
        recovery, run before segments are opened.

        * ``.deleted`` files (pending deletions) and ``.tmp`` files go.
        * ``.cleaned`` files (cleaner output never swapped in) go, and so does
          every ``.swap`` file whose offset is >= the smallest ``.cleaned``
          offset: that swap was interrupted before all of its files were
          renamed, the replaced segments are still intact, and the swap is
          rolled back.
        * The remaining ``.swap`` files completed their ``.cleaned -> .swap``
          rename, after which the cleaner only deletes what they replace: the
          swap is completed.  Segment files (not ``.swap``) with a base offset
          in ``[min swap base, max swap next offset)`` are the replaced ones
          and are deleted, then the ``.swap`` suffix is dropped.
        """
        swap_names = []
        min_cleaned = None
        for name in os.listdir(self.dir):
            if not os.path.isfile(os.path.join(self.dir, name)):
                continue
            if name.endswith(DELETED_FILE_SUFFIX) or name.endswith(TMP_SUFFIX):
                self.unlink(name, "leftover file")
            elif name.endswith(CLEANED_FILE_SUFFIX):
                m = ANY_SEGMENT_FILE.match(name)
                if m:
                    base = int(m.group(1))
                    min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
                self.unlink(name, "unfinished cleaner output")
            elif name.endswith(SWAP_FILE_SUFFIX):
                swap_names.append(name)
        valid = []
        for name in swap_names:
            m = SEGMENT_FILE_NAME.match(name[: -len(SWAP_FILE_SUFFIX)])
            if m is None or (min_cleaned is not None and int(m.group(1)) >= min_cleaned):
                self.unlink(name, "swap file of an interrupted, rolled back swap")
            else:
                valid.append(name)
        if not valid:
            return
        min_swap, max_swap = None, None
        for name in valid:
            m = SEGMENT_FILE_NAME.match(name[: -len(SWAP_FILE_SUFFIX)])
            if m.group(2) != LOG_SUFFIX:
                continue
            base = int(m.group(1))
            seg = LogSegment(self.dir, base, self.config, file_suffix=SWAP_FILE_SUFFIX)
            try:
                end = seg.next_offset
            finally:
                seg.close_handles()
            log.info("completing interrupted swap of %s (offsets %d..%d)", name, base, end)
            min_swap = base if min_swap is None else min(min_swap, base)
            max_swap = end if max_swap is None else max(max_swap, end)
        if min_swap is not None:
            for name in os.listdir(self.dir):
                m = SEGMENT_FILE_NAME.match(name)
                if m and min_swap <= int(m.group(1)) < max_swap:
                    self.unlink(name, "segment file replaced by an interrupted swap")
        for name in valid:
            os.replace(os.path.join(self.dir, name), os.path.join(self.dir, name[: -len(SWAP_FILE_SUFFIX)]))
            self.dir_dirty = True

    def load(self, recovery_point: int, log_start_offset: int, now_ms: int) -> LoadedLog:
        self.complete_or_roll_back_swaps()
        names = os.listdir(self.dir)
        bases = []
        for name in names:
            m = SEGMENT_FILE_NAME.match(name)
            if m and m.group(2) == LOG_SUFFIX:
                bases.append(int(m.group(1)))
        present = set(bases)
        for name in names:
            m = SEGMENT_FILE_NAME.match(name)
            if m and m.group(2) != LOG_SUFFIX and int(m.group(1)) not in present:
                log.info("deleting orphaned index file %s", name)
                os.unlink(os.path.join(self.dir, name))
                self.dir_dirty = True
        bases.sort()
        segments = [self.open_segment(base, now_ms) for base in bases]

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
                    self.dir_dirty = True
                i += 1

        if segments and segments[-1].next_offset < log_start_offset:
            # The log start was advanced past everything we have (e.g. by
            # DeleteRecords before a crash): start over there.
            for seg in segments:
                seg.delete()
            segments = []
            cache.clear()
        if not segments:
            segments = [self.open_segment(log_start_offset, now_ms, create=True)]
            self.dir_dirty = True
        next_offset = segments[-1].next_offset
        log_start_offset = max(log_start_offset, segments[0].base_offset)
        cache.truncate_from_end(next_offset)
        cache.truncate_from_start(log_start_offset)
        return LoadedLog(segments, log_start_offset, min(recovery_point, next_offset), self.dir_dirty)


def rebuild_producer_state(ps: ProducerStateManager, segments: list[LogSegment], bases: list[int],
                           log_start_offset: int, now_ms: int) -> None:
    """Kafka's ``rebuildProducerState``: the newest snapshot at or below
    the log end, then the batch headers after it. The transaction indexes
    from there on are rebuilt on the way (recovery may have cut them)."""
    end = segments[-1].next_offset
    ps.delete_snapshots_above(end)
    start = ps.load_latest_snapshot(end, log_start_offset, now_ms)
    replayed = replay_producer_state(ps, segments, bases, start)
    ps.map_end_offset = end
    if replayed and end > start:
        # The next restart starts from here instead of replaying again.
        ps.take_snapshot(sync=False)


def replay_producer_state(ps: ProducerStateManager, segments: list[LogSegment], bases: list[int],
                          start: int) -> int:
    """Apply the producer batches at or after ``start`` -> how many there were."""
    first = max(bisect_right(bases, start) - 1, 0)
    for seg in segments[first:]:
        seg.txn_index.truncate_to(start)
    batches = 0
    for seg in segments[first:]:
        for pos, h in seg.iter_batches():
            if h.last_offset < start or h.producer_id < 0:
                continue
            batches += 1
            info = ps.prepare_update(h.producer_id, ORIGIN_REPLICATION)
            completed = None
            if h.attributes & CONTROL_MASK:
                marker = end_txn_marker_type(seg.read_bytes(pos, h.size))
                if marker is not None:
                    completed = info.append_end_txn_marker(marker[0], marker[1], h.producer_epoch, h.base_offset,
                                                           h.max_timestamp)
            else:
                info.append_data_batch(h.producer_epoch, h.base_sequence,
                                       increment_sequence(h.base_sequence, h.last_offset_delta), h.max_timestamp,
                                       h.base_offset, h.last_offset, h.is_transactional)
            ps.update(info)
            if completed is not None:
                complete_txn(ps, completed, seg.txn_index)
    return batches
