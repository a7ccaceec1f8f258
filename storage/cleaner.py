"""Log compaction: Kafka's ``LogCleaner`` for ``cleanup.policy=compact``.

One :meth:`LogCleaner.clean_once` call is one iteration of a Kafka cleaner
thread: pick the filthiest compacted log among those given, build an offset
map (key hash -> latest offset) over its dirty section, rewrite every segment
below the end of the mapped range, swap the rewritten segments in, and record
the new clean point in ``cleaner-offset-checkpoint``.

Kafka's rules, as implemented here:

* The *dirty section* starts at the checkpointed clean point (or the log
  start when the checkpoint is missing or out of range) and ends at the first
  uncleanable offset: the smallest of the active segment's base offset, the
  high watermark (no clean beyond what is committed; Kafka uses the last
  stable offset) and, with ``min_compaction_lag_ms``, the base of the first
  segment holding a record younger than that lag; rounded down to a segment
  boundary.
* A log is cleanable when its dirty ratio (dirty bytes / total bytes of the
  cleanable range) exceeds ``min_cleanable_dirty_ratio``, or when a dirty
  segment's first batch is older than ``max_compaction_lag_ms`` (then
  regardless of the ratio).  The highest ratio wins.
* The offset map holds ``dedupe_buffer_bytes / 24`` slots (16-byte MD5 hash +
  8-byte offset, as Kafka's ``SkimpyOffsetMap``) filled up to the load
  factor.  When it fills, only the offsets it covers count as cleaned (the
  batch that did not fit contributes nothing: the map covers whole batches).
* A record is kept if it is past the map's latest offset, or it is the
  latest offset of its key and either has a value or is a tombstone whose
  batch's delete horizon has not passed.  Records without a key are dropped.
  The first time the cleaner keeps a tombstone, its batch gets a delete
  horizon of now + ``delete_retention_ms`` (KIP-534: the base timestamp holds
  it, attribute bit 6 marks it), so tombstones survive delete.retention.ms
  after the cleaner first passes them.
* Transactional batches of aborted transactions (the segments' ``.txnindex``
  entries say which) are removed, as Kafka's cleaner discards them; the
  producer's last batch stays so its sequence survives. Committed
  transactional records are compacted like any others (the cleaner never
  passes the last stable offset, so every transaction it sees has ended).
* A transaction marker stays while any batch of its transaction is still in
  the log. Once none is, the first pass stamps it with a delete horizon
  (now + ``delete_retention_ms``, as tombstones get) and a pass after the
  horizon removes it, with its ``.txnindex`` entry (Kafka's
  CleanedTransactionMetadata): consumers that read the transaction's data
  before had that long to read its marker too. Empty control batches go.
* A batch that loses all its records disappears, except the last batch of a
  producer id, which stays as an empty batch so sequence numbers survive.
* Retained records keep their offsets (gaps are legal in compacted logs),
  timestamps, headers and the batch's producer id/epoch/sequence, leader
  epoch, flags and codec; a batch that lost records is re-encoded with its
  own codec, an untouched one is copied byte for byte.
* Segments are rewritten in groups that fit one segment (``segment_bytes``,
  ``segment_index_bytes``, 2^31 relative offsets) into ``.cleaned`` files,
  which :meth:`Log.replace_segments` swaps in through ``.swap`` renames.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from bisect import bisect_right
from typing import Iterable, Iterator, NamedTuple

from crc32c import crc32c

from storage.checkpoint import OffsetCheckpointFile
from storage.cleaner_checkpoint import CleanerCheckpoint
from storage.errors import InvalidRecordsError, StorageError
from storage.log import Log
from storage.log_files import CLEANED_FILE_SUFFIX
from storage.log_retention import segment_timestamp
from storage.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_RELATIVE_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    unpack_header,
)
import storage.records as _records
from storage.segment import LogSegment

__all__ = [
    "LogCleaner",
    "OffsetMap",
    "LogToClean",
    "CleanResult",
    "read_cleaner_checkpoint",
]

log = logging.getLogger(__name__)

DEFAULT_DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
_READ_CHUNK = 1024 * 1024
_WRITE_CHUNK = 1024 * 1024


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_cleaner_checkpoint(log_: Log) -> int | None:
    """The clean point checkpointed for ``log_``, or None."""
    return CleanerCheckpoint(log_.dir).read()


class OffsetMap:
    """Kafka's ``SkimpyOffsetMap``: key hash -> latest offset, bounded.

    Kafka stores a 16-byte MD5 hash and an 8-byte offset per slot, so
    ``memory // 24`` slots, of which ``load_factor`` may be used.
    """

    BYTES_PER_ENTRY = 24

    def __init__(self, memory: int, load_factor: float = DEFAULT_LOAD_FACTOR):
        self.slots = max(memory // self.BYTES_PER_ENTRY, 1)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    @staticmethod
    def hash(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.max_entries

    def put(self, key: bytes, offset: int) -> None:
        self._map[self.hash(key)] = offset

    def get(self, key: bytes) -> int:
        """Latest offset of ``key``, -1 if absent."""
        return self._map.get(self.hash(key), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1


class LogToClean(NamedTuple):
    """Kafka's ``LogToClean``: a log with its cleanable range."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int  # > 0: past max.compaction.lag.ms

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.max_compaction_delay_ms > 0


class CleanResult(NamedTuple):
    """What one cleaning did.  ``end_offset`` is the new clean point (the
    checkpointed offset); ``error`` is set, and nothing was swapped in for the
    failing group, when cleaning was abandoned."""

    topic_partition: str
    first_dirty_offset: int
    end_offset: int
    cleanable_ratio: float
    segments_before: int
    segments_after: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_retained: int
    map_entries: int
    map_full: bool
    error: str | None = None


class _Stats:
    __slots__ = ("bytes_read", "bytes_written", "records_read", "records_retained")

    def __init__(self):
        self.bytes_read = self.bytes_written = self.records_read = self.records_retained = 0


class _Abort(Exception):
    """Abandon the pass; ``corrupt`` marks the log uncleanable."""

    def __init__(self, message: str, corrupt: bool = False):
        super().__init__(message)
        self.corrupt = corrupt


def _iter_file_batches(fd: int, size: int) -> Iterator[tuple[int, tuple, memoryview]]:
    """``(position, raw header, batch bytes)`` of every batch in a segment
    file, CRC-checked; raises _Abort on a damaged batch."""
    pos = 0
    buf = memoryview(b"")
    buf_start = 0
    while pos < size:
        if size - pos < HEADER_SIZE:
            raise _Abort(f"torn batch header at position {pos}", corrupt=True)
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf = memoryview(os.pread(fd, min(max(_READ_CHUNK, HEADER_SIZE), size - pos), pos))
            buf_start, off = pos, 0
            if len(buf) < HEADER_SIZE:
                raise _Abort(f"short read at position {pos}")
        h = unpack_header(buf, off)
        bsize = h.batch_length + LOG_OVERHEAD
        if bsize < HEADER_SIZE or h.magic != 2 or pos + bsize > size:
            raise _Abort(f"invalid batch at position {pos}", corrupt=True)
        if off + bsize > len(buf):
            buf = memoryview(os.pread(fd, min(max(_READ_CHUNK, bsize), size - pos), pos))
            buf_start, off = pos, 0
            if len(buf) < bsize:
                raise _Abort(f"short read at position {pos}")
        batch = buf[off : off + bsize]
        if crc32c(batch[ATTRIBUTES_OFFSET:]) != h.crc:
            raise _Abort(f"batch at position {pos} (offset {h.base_offset}) failed its CRC check", corrupt=True)
        yield pos, h, batch
        pos += bsize


class _SourceSegment:
    """A segment to read while cleaning: its own descriptor, so concurrent
    renames (retention) or closes cannot disturb the reads."""

    def __init__(self, seg: LogSegment):
        self.seg = seg
        self.size = seg.size
        self.fd = os.open(seg.log_path, os.O_RDONLY)

    def batches(self):
        return _iter_file_batches(self.fd, self.size)

    def close(self) -> None:
        os.close(self.fd)


class LogCleaner:
    """Compacts logs, one log per :meth:`clean_once` call (Kafka's cleaner
    thread loop body).  Stateless between calls except for logs marked
    uncleanable after an error (as Kafka's ``uncleanablePartitions``)."""

    def __init__(
        self,
        dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
        *,
        load_factor: float = DEFAULT_LOAD_FACTOR,
    ):
        if dedupe_buffer_bytes < OffsetMap.BYTES_PER_ENTRY:
            raise ValueError(f"dedupe_buffer_bytes must hold at least one entry, got {dedupe_buffer_bytes}")
        if not 0 < load_factor <= 1:
            raise ValueError(f"load_factor must be in (0, 1], got {load_factor}")
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.load_factor = load_factor
        self.uncleanable: set[str] = set()

    # ------------------------------------------------------------ selection

    @staticmethod
    def _normalise(logs: Iterable) -> list[tuple[Log, int | None]]:
        out = []
        for item in logs:
            if isinstance(item, Log):
                out.append((item, None))
            else:
                lg, hw = item
                out.append((lg, hw))
        return out

    def cleanable_range(
        self, log_: Log, now_ms: int | None = None, high_watermark: int | None = None, checkpoint: int | None = None
    ) -> LogToClean:
        """Kafka's ``cleanableOffsets`` + ``LogToClean`` for one log.
        ``checkpoint`` defaults to the one in ``cleaner-offset-checkpoint``."""
        now_ms = _now_ms() if now_ms is None else now_ms
        if checkpoint is None:
            checkpoint = read_cleaner_checkpoint(log_)
        cfg = log_.config
        segs = log_.segments
        bases = [s.base_offset for s in segs]
        start, leo = log_.log_start_offset, log_.log_end_offset
        if checkpoint is None or checkpoint < start or checkpoint > leo:
            first_dirty = start
        else:
            first_dirty = checkpoint
        active_base = segs[-1].base_offset
        non_active = segs[:-1]
        dirty_from = max(bisect_right(bases, first_dirty) - 1, 0)
        dirty_non_active = non_active[dirty_from:]
        candidates = [active_base, leo if high_watermark is None else min(high_watermark, leo)]
        first_unstable = log_.first_unstable_offset()
        if first_unstable is not None:
            candidates.append(first_unstable)  # as Kafka: never clean past the last stable offset
        min_lag = max(cfg.min_compaction_lag_ms, 0)
        if min_lag > 0:
            for s in dirty_non_active:
                if segment_timestamp(s) > now_ms - min_lag:
                    candidates.append(s.base_offset)
                    break
        uncleanable = min(candidates)
        # Round down to a segment boundary: a segment is cleaned whole or not at all.
        k = bisect_right(bases, uncleanable) - 1
        first_uncleanable = bases[max(k, 0)] if k < len(segs) - 1 else active_base
        if first_dirty > first_uncleanable:
            first_dirty = first_uncleanable
        clean_bytes = sum(s.size for s in segs if s.base_offset < first_dirty)
        lo = min(first_dirty, first_uncleanable)
        lo_idx = max(bisect_right(bases, lo) - 1, 0)
        cleanable_bytes = sum(s.size for s in segs[lo_idx:] if s.base_offset < first_uncleanable)
        # max.compaction.lag.ms: the first batch of each dirty segment
        first_ts = [
            t for t in (s.rolling_based_timestamp for s in dirty_non_active) if t is not None and t > 0
        ]
        delay = 0
        if first_ts:
            clean_until = now_ms - max(cfg.max_compaction_lag_ms, 0)
            earliest = min(first_ts)
            if earliest < clean_until:
                delay = clean_until - earliest
        return LogToClean(log_, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, delay)

    def grab_filthiest_log(self, logs: Iterable, now_ms: int | None = None) -> LogToClean | None:
        """The compacted log most in need of cleaning, or None: cleanable
        when its dirty ratio exceeds ``min_cleanable_dirty_ratio`` or it is
        past ``max_compaction_lag_ms`` with something to clean."""
        now_ms = _now_ms() if now_ms is None else now_ms
        checkpoints: dict[str, dict] = {}
        best: LogToClean | None = None
        for lg, hw in self._normalise(logs):
            if lg.closed or not lg.config.compacted or lg.dir in self.uncleanable:
                continue
            entry = CleanerCheckpoint(lg.dir)
            path = entry.path
            if path not in checkpoints:
                try:
                    checkpoints[path] = OffsetCheckpointFile(path).read()
                except StorageError:
                    log.exception("unreadable %s; treating it as empty", path)
                    checkpoints[path] = {}
            if entry.key is None:
                continue
            ltc = self.cleanable_range(lg, now_ms, hw, checkpoints[path].get(entry.key))
            if not (
                (ltc.needs_compaction_now and ltc.cleanable_bytes > 0)
                or ltc.cleanable_ratio > lg.config.min_cleanable_dirty_ratio
            ):
                continue
            if best is None or ltc.cleanable_ratio > best.cleanable_ratio:
                best = ltc
        return best

    def clean_once(self, logs: Iterable, now_ms: int | None = None) -> CleanResult | None:
        """Clean the filthiest of ``logs`` (each a :class:`Log` or a
        ``(Log, high_watermark)`` pair); None when none needs cleaning.

        Failures (a damaged batch, I/O errors) mark the log uncleanable and
        come back as a result with ``error`` set; retention or truncation
        racing with the pass abandons it without marking."""
        now_ms = _now_ms() if now_ms is None else now_ms
        ltc = self.grab_filthiest_log(logs, now_ms)
        if ltc is None:
            return None
        return self._clean(ltc, now_ms)

    def clean(self, log_: Log, now_ms: int | None = None, high_watermark: int | None = None) -> CleanResult:
        """Clean ``log_`` now, whatever its dirty ratio (tests, admin)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        return self._clean(self.cleanable_range(log_, now_ms, high_watermark), now_ms)

    # -------------------------------------------------------------- cleaning

    def _clean(self, ltc: LogToClean, now_ms: int) -> CleanResult:
        lg = ltc.log
        generation = lg.truncation_generation
        segments_before = len(lg.segments)
        stats = _Stats()
        omap = OffsetMap(self.dedupe_buffer_bytes, self.load_factor)
        tp = lg.topic_partition_name

        def result(end: int, error: str | None = None) -> CleanResult:
            return CleanResult(
                tp,
                ltc.first_dirty_offset,
                end,
                ltc.cleanable_ratio,
                segments_before,
                len(lg.segments),
                stats.bytes_read,
                stats.bytes_written,
                stats.records_read,
                stats.records_retained,
                len(omap),
                omap.full,
                error,
            )

        try:
            if not lg.config.compacted:
                return result(ltc.first_dirty_offset, f"cleanup policy {lg.config.cleanup_policy!r} does not compact")
            if ltc.first_dirty_offset >= ltc.first_uncleanable_offset:
                return result(ltc.first_dirty_offset, None)
            self._build_offset_map(lg, ltc.first_dirty_offset, ltc.first_uncleanable_offset, omap)
            end_offset = omap.latest_offset + 1
            if end_offset <= ltc.first_dirty_offset:
                return result(
                    ltc.first_dirty_offset,
                    "the dedupe buffer cannot hold the keys of a single batch; nothing cleaned",
                )
            producers = self._last_offsets_of_producers(lg)
            segs = [s for s in lg.segments[:-1] if s.base_offset < end_offset]
            # Producers with a batch of their current transaction kept so far
            # in this pass (the pass runs from the log start, in offset order).
            txn_data_kept: set[int] = set()
            for group in self._group_segments(lg, segs, ltc.first_uncleanable_offset):
                self._clean_group(lg, group, omap, producers, now_ms, stats, txn_data_kept)
            with lg._lock:
                if lg.closed or lg.truncation_generation != generation:
                    raise _Abort("the log was truncated or closed during cleaning")
                CleanerCheckpoint(lg.dir).store(end_offset)
            log.info(
                "cleaned %s: offsets [%d, %d), %d -> %d bytes",
                tp, ltc.first_dirty_offset, end_offset, stats.bytes_read, stats.bytes_written,
            )
            return result(end_offset)
        except _Abort as exc:
            log.warning("abandoned cleaning %s: %s", tp, exc)
            if exc.corrupt:
                self.uncleanable.add(lg.dir)
            return result(ltc.first_dirty_offset, str(exc))
        except (OSError, StorageError, ValueError) as exc:
            log.exception("cleaning %s failed; marking it uncleanable", tp)
            self.uncleanable.add(lg.dir)
            return result(ltc.first_dirty_offset, f"{type(exc).__name__}: {exc}")

    def _open_sources(self, lg: Log, segs: list[LogSegment]) -> list[_SourceSegment]:
        with lg._lock:
            if lg.closed:
                raise _Abort("the log is closed")
            current = {id(c) for c in lg.segments[:-1]}
            if any(id(s) not in current for s in segs):
                raise _Abort("segments changed during cleaning")
            out = []
            try:
                for s in segs:
                    out.append(_SourceSegment(s))
            except OSError:
                for o in out:
                    o.close()
                raise
            return out

    def _build_offset_map(self, lg: Log, start: int, end: int, omap: OffsetMap) -> None:
        """Kafka's ``buildOffsetMap``: keys of the dirty segments below
        ``end`` from offset ``start`` on, until the map is full."""
        segs = lg.segments
        bases = [s.base_offset for s in segs]
        i = max(bisect_right(bases, start) - 1, 0)
        dirty = [s for s in segs[i:-1] if s.base_offset < end]
        aborted: dict[int, list[tuple[int, int]]] = {}
        for txn in lg.collect_aborted_txns(start, end):
            aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        for src in self._open_sources(lg, dirty):
            try:
                if self._map_segment(src, start, omap, aborted):
                    return
            finally:
                src.close()

    @staticmethod
    def _map_segment(src: _SourceSegment, start: int, omap: OffsetMap,
                     aborted: dict[int, list[tuple[int, int]]] | None = None) -> bool:
        """Returns True when the map filled up inside this segment. Committed
        transactional records count as any other; aborted ones and markers
        do not (Kafka's buildOffsetMapForSegment)."""
        max_entries = omap.max_entries
        table = omap._map
        md5 = hashlib.md5
        for _, h, batch in src.batches():
            last = h.base_offset + h.last_offset_delta
            if last < start:
                continue
            attrs = h.attributes
            if not attrs & CONTROL_MASK and h.record_count > 0 and not (aborted and _aborted_data(h, aborted)):
                recs = _scan(batch, h)
                base = h.base_offset
                undo = []
                for r in recs:
                    key = r.key
                    off = base + r.offset_delta
                    if key is not None and off >= start:
                        if len(table) < max_entries:
                            digest = md5(key, usedforsecurity=False).digest()
                            undo.append((digest, table.get(digest)))
                            table[digest] = off
                        else:
                            # Unlike Kafka, drop this batch's entries: the map
                            # then covers exactly [start, latest_offset], so
                            # below the clean point each key keeps precisely
                            # its latest record (Kafka may already remove an
                            # older record in favour of one past the point).
                            for digest, prev in reversed(undo):
                                if prev is None:
                                    del table[digest]
                                else:
                                    table[digest] = prev
                            return True
            omap.latest_offset = last
        return False

    @staticmethod
    def _last_offsets_of_producers(lg: Log) -> dict[int, int]:
        """Last offset of each producer id's last data batch in the log
        (Kafka keeps that batch, emptied if need be, for sequence checks)."""
        last: dict[int, int] = {}
        for seg in lg.segments:
            try:
                for _, h in seg.iter_batches():
                    if h.producer_id >= 0 and not h.attributes & CONTROL_MASK:
                        last[h.producer_id] = h.base_offset + h.last_offset_delta
            except StorageError:
                raise _Abort("segments changed during cleaning") from None
        return last

    @staticmethod
    def _group_segments(lg: Log, segs: list[LogSegment], first_uncleanable: int) -> list[list[LogSegment]]:
        """Kafka's ``groupSegmentsBySize``."""
        cfg = lg.config
        max_size, max_index = cfg.segment_bytes, cfg.segment_index_bytes
        groups = []
        i = 0
        n = len(segs)
        while i < n:
            group = [segs[i]]
            size = segs[i].size
            index_size = segs[i].index.size_in_bytes
            time_size = segs[i].time_index.size_in_bytes
            i += 1
            while i < n:
                nxt = segs[i]
                last_of_next = (segs[i + 1].base_offset if i + 1 < n else first_uncleanable) - 1
                if not (
                    size + nxt.size <= max_size
                    and index_size + nxt.index.size_in_bytes <= max_index
                    and time_size + nxt.time_index.size_in_bytes <= max_index
                    and (nxt.size == 0 or last_of_next - group[0].base_offset <= MAX_RELATIVE_OFFSET)
                ):
                    break
                group.append(nxt)
                size += nxt.size
                index_size += nxt.index.size_in_bytes
                time_size += nxt.time_index.size_in_bytes
                i += 1
            groups.append(group)
        return groups

    def _clean_group(
        self,
        lg: Log,
        group: list[LogSegment],
        omap: OffsetMap,
        producers: dict[int, int],
        now_ms: int,
        stats: _Stats,
        txn_data_kept: set[int],
    ) -> None:
        cfg = lg.config
        base = group[0].base_offset
        stale = LogSegment(lg.dir, base, cfg, file_suffix=CLEANED_FILE_SUFFIX) if os.path.exists(
            os.path.join(lg.dir, f"{base:020d}.log{CLEANED_FILE_SUFFIX}")
        ) else None
        if stale is not None:
            stale.delete()
        cleaned = LogSegment(lg.dir, base, cfg, create=True, now_ms=now_ms, file_suffix=CLEANED_FILE_SUFFIX)
        sources = self._open_sources(lg, group)
        ok = False
        aborted: dict[int, list[tuple[int, int]]] = {}
        abort_entries = {}  # marker offset -> its index entry
        for txn in lg.collect_aborted_txns(base, group[-1].next_offset):
            aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
            abort_entries[txn.last_offset] = txn
        kept_entries = []
        try:
            horizon = now_ms + cfg.delete_retention_ms
            for src in sources:
                parts: list[bytes] = []
                pending = 0
                chunk_last, chunk_max_ts, chunk_off_max = -1, -1, -1
                for _, h, batch in src.batches():
                    stats.bytes_read += len(batch)
                    if h.producer_id >= 0 and h.attributes & CONTROL_MASK:
                        out = _filter_marker(batch, h, txn_data_kept, now_ms, horizon, stats)
                        if out is not None and h.base_offset in abort_entries:
                            kept_entries.append(abort_entries[h.base_offset])
                        if out is None:
                            continue
                    else:
                        if h.producer_id >= 0 and h.attributes & TRANSACTIONAL_MASK:
                            if (aborted and _aborted_data(h, aborted)
                                    and producers.get(h.producer_id) != h.last_offset):
                                stats.records_read += h.record_count
                                continue
                        out = _filter_batch(batch, h, omap, producers, now_ms, horizon, stats)
                        if out is not None and h.producer_id >= 0 and h.attributes & TRANSACTIONAL_MASK:
                            txn_data_kept.add(h.producer_id)
                    if out is None:
                        continue
                    oh = unpack_header(out)
                    last = oh.base_offset + oh.last_offset_delta
                    if oh.max_timestamp > chunk_max_ts:
                        chunk_max_ts, chunk_off_max = oh.max_timestamp, last
                    chunk_last = last
                    parts.append(out)
                    pending += len(out)
                    if pending >= _WRITE_CHUNK:
                        cleaned.append(chunk_last, chunk_max_ts, chunk_off_max, b"".join(parts))
                        stats.bytes_written += pending
                        parts, pending, chunk_max_ts = [], 0, -1
                if parts:
                    cleaned.append(chunk_last, chunk_max_ts, chunk_off_max, b"".join(parts))
                    stats.bytes_written += pending
            for entry in kept_entries:
                cleaned.txn_index.append(entry)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified_ms(group[-1].last_modified_ms)
            try:
                lg.replace_segments(cleaned, group, now_ms, carry_txn_index=False)
            except ValueError as exc:
                raise _Abort(str(exc)) from None
            ok = True
        except InvalidRecordsError as exc:
            raise _Abort(f"malformed records: {exc}", corrupt=True) from None
        finally:
            for src in sources:
                src.close()
            if not ok:
                cleaned.delete()


def _with_delete_horizon(batch, h, horizon: int) -> bytes:
    """The control batch re-encoded with a delete horizon (KIP-534): the base
    timestamp holds it and attribute bit 6 says so; record timestamps stay."""
    data = _records.batch_payload(batch, 0, h)
    recs = _records.scan_records(data, h.record_count)
    payload = b"".join(
        _records.reencode_timestamp_delta(data, r, h.base_timestamp + r.timestamp_delta - horizon) for r in recs
    )
    return _records.pack_batch(
        payload, 0, base_offset=h.base_offset, partition_leader_epoch=h.partition_leader_epoch,
        attributes=h.attributes | DELETE_HORIZON_MASK, last_offset_delta=h.last_offset_delta, base_timestamp=horizon,
        max_timestamp=h.max_timestamp, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, record_count=h.record_count)


def _aborted_data(h, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    """Whether the batch is data of an aborted transaction (not its marker)."""
    if not h.attributes & TRANSACTIONAL_MASK or h.attributes & CONTROL_MASK:
        return False
    return any(first <= h.base_offset < last for first, last in aborted.get(h.producer_id, ()))


def _filter_marker(batch, h, txn_data_kept: set[int], now_ms: int, new_horizon: int, stats: _Stats):
    """Kafka's rule for a transaction marker: kept while its transaction has
    data in the log; then stamped with a delete horizon, and removed once
    that has passed. Returns the bytes to keep or None."""
    stats.records_read += h.record_count
    data_kept = h.producer_id in txn_data_kept
    txn_data_kept.discard(h.producer_id)
    if h.record_count == 0:
        return None  # an empty control batch was cleaned before
    if not data_kept:
        if not h.attributes & DELETE_HORIZON_MASK:
            stats.records_retained += h.record_count
            return _with_delete_horizon(batch, h, new_horizon)
        if now_ms >= h.base_timestamp:
            return None
    stats.records_retained += h.record_count
    return batch


def _scan(batch: memoryview, h) -> list:
    try:
        data = _records.batch_payload(batch, 0, h)
        return _records.scan_records(data, h.record_count)
    except (InvalidRecordsError, IndexError, ValueError) as exc:
        raise _Abort(f"malformed records in batch at offset {h.base_offset}: {exc}", corrupt=True) from None


def _filter_batch(batch: memoryview, h, omap: OffsetMap, producers: dict[int, int], now_ms: int,
                  new_horizon: int, stats: _Stats) -> bytes | memoryview | None:
    """Kafka's ``MemoryRecords.filterTo`` for one batch: the bytes to keep
    (the original batch, a rebuilt one, an empty one) or None."""
    attrs = h.attributes
    count = h.record_count
    stats.records_read += count
    if attrs & CONTROL_MASK:
        stats.records_retained += count
        return batch
    base = h.base_offset
    last = base + h.last_offset_delta
    latest = omap.latest_offset
    data = _records.batch_payload(batch, 0, h)
    try:
        recs = _records.scan_records(data, count)
    except (IndexError, ValueError) as exc:
        raise _Abort(f"malformed records in batch at offset {base}: {exc}", corrupt=True) from None
    horizon = h.base_timestamp if attrs & DELETE_HORIZON_MASK else None
    table = omap._map
    md5 = hashlib.md5
    kept = []
    has_tombstone = False
    for r in recs:
        off = base + r.offset_delta
        if off > latest:
            keep = True
        elif r.key is None:
            keep = False  # Kafka drops (and counts as invalid) keyless records
        elif off < table.get(md5(r.key, usedforsecurity=False).digest(), -1):
            keep = False
        else:
            keep = r.has_value or horizon is None or now_ms < horizon
        if keep:
            kept.append(r)
            if not r.has_value:
                has_tombstone = True
    stats.records_retained += len(kept)
    set_horizon = has_tombstone and horizon is None
    if kept and len(kept) == count and not set_horizon:
        return batch
    if not kept:
        if h.producer_id >= 0 and producers.get(h.producer_id) == last:
            # RETAIN_EMPTY: the producer's last batch keeps its sequence range
            return _records.pack_batch(
                b"",
                0,
                base_offset=base,
                partition_leader_epoch=h.partition_leader_epoch,
                attributes=attrs & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK),
                last_offset_delta=h.last_offset_delta,
                base_timestamp=h.max_timestamp,
                max_timestamp=h.max_timestamp,
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence,
                record_count=0,
            )
        return None
    old_base_ts = h.base_timestamp
    if set_horizon:
        base_ts = new_horizon
        attrs |= DELETE_HORIZON_MASK
        payload = b"".join(
            _records.reencode_timestamp_delta(data, r, old_base_ts + r.timestamp_delta - base_ts) for r in kept
        )
    else:
        base_ts = old_base_ts
        payload = b"".join(data[r.start : r.end] for r in kept)
    if attrs & TIMESTAMP_TYPE_MASK:
        max_ts = h.max_timestamp
    else:
        max_ts = max(old_base_ts + r.timestamp_delta for r in kept)
    return _records.pack_batch(
        payload,
        attrs & COMPRESSION_MASK,
        base_offset=base,
        partition_leader_epoch=h.partition_leader_epoch,
        attributes=attrs,
        last_offset_delta=h.last_offset_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        record_count=len(kept),
    )
