"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of record batches exactly as they
travel on the wire (with offsets assigned).  File names are the segment's
base offset, zero padded to 20 digits, as in Kafka.

Only batch headers are ever read here (with ``os.pread``); record payloads
stay opaque.  The offset index is fed one entry per batch whenever more than
``index_interval_bytes`` were written since the last entry, keyed by the
batch's *last* offset, exactly what Kafka's own segment recovery writes (and
what ``kafka-dump-log --index-sanity-check`` expects).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Iterator, NamedTuple

from crc32c import crc32c

from storage.errors import CorruptIndexError, KafkaStorageError
from storage.index import OffsetIndex, TimeIndex
from storage.sequential_reader import RECOVERY_CHUNK, SequentialReader, streamed_crc
from storage.txn_index import TransactionIndex
from storage.record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_RELATIVE_OFFSET,
    MIN_BATCH_LENGTH,
    BatchHeader,
    batch_layout,
    unpack_header,
)
import storage.records as _records

# tuple.__new__ builds a BatchHeader without NamedTuple's Python-level
# __new__: scans make one per batch.
_tuple_new = tuple.__new__

__all__ = [
    "LogSegment",
    "FileSlice",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "segment_file_prefix",
]

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"

# Header scans read a page at a time: small batches then share one pread,
# large ones cost one small read each.
_SCAN_CHUNK = 4096
_NO_TIMESTAMP = -1
# Buffered index bytes written per batch of entries (a page of offset entries).
INDEX_WRITE_BYTES = 4096


def segment_file_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


class FileSlice(NamedTuple):
    """Whole batches ``[position, position + length)`` of a segment file.

    ``base_offset`` is the first batch's base offset; ``next_offset`` the
    offset a consumer fetches next (after the last batch).  The bytes stay
    valid until the log is truncated or the segment deleted.
    """

    path: str
    position: int
    length: int
    base_offset: int
    next_offset: int


class LogSegment:
    def __init__(
        self,
        dir: str,
        base_offset: int,
        config,
        *,
        create: bool = False,
        now_ms: int | None = None,
        file_suffix: str = "",
        roll_jitter_ms: int = 0,
    ):
        self.dir = dir
        self.base_offset = base_offset
        self.config = config
        # Kafka's LogSegment.rollJitterMs: drawn from segment.jitter.ms when
        # the segment object is opened; time-based rolling happens that much
        # earlier so segments of many partitions do not all roll together.
        self.roll_jitter_ms = roll_jitter_ms
        # "" for a live segment; ".cleaned" / ".swap" while the cleaner builds
        # a replacement, ".deleted" while a deletion is pending.
        self.file_suffix = file_suffix
        prefix = os.path.join(dir, segment_file_prefix(base_offset))
        self.log_path = prefix + LOG_SUFFIX + file_suffix
        self.index = OffsetIndex(prefix + INDEX_SUFFIX + file_suffix, base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(prefix + TIME_INDEX_SUFFIX + file_suffix, base_offset, config.segment_index_bytes)
        flags = os.O_RDWR | os.O_APPEND
        if create:
            flags |= os.O_CREAT | os.O_EXCL
        self._fd: int | None = os.open(self.log_path, flags, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
        # Lazily derived state (None = not computed yet); a segment opened
        # without recovery learns these from its indexes on first use.
        self._next_offset: int | None = base_offset if self._size == 0 else None
        self._max_ts: int | None = None
        self._offset_of_max_ts: int | None = None
        self._rolling_ts: int | None = None
        self._rolling_ts_known = False
        self._bytes_since_index = 0
        self._indexes_checked = False
        self._txn_index: TransactionIndex | None = None
        if create:
            self.index.create()
            self.time_index.create()
            self._max_ts = _NO_TIMESTAMP
            self._offset_of_max_ts = base_offset
            self._rolling_ts_known = True
            self._indexes_checked = True

    # ------------------------------------------------------------------ info

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self._size}, next={self._next_offset})"

    @property
    def size(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        """Offset after the last batch (the base offset when empty)."""
        if self._next_offset is None:
            self._check_indexes()
            if self._next_offset is None:
                self._next_offset = self._scan_next_offset()
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        self._ensure_max_ts()
        return self._max_ts

    @property
    def offset_of_max_timestamp(self) -> int:
        """Last offset of the first batch that reached ``max_timestamp``."""
        self._ensure_max_ts()
        return self._offset_of_max_ts

    @property
    def rolling_based_timestamp(self) -> int | None:
        """Max timestamp of the first batch: what time-based rolling measures from."""
        if not self._rolling_ts_known:
            if self._size >= HEADER_SIZE:
                self._rolling_ts = unpack_header(os.pread(self._fd, HEADER_SIZE, 0)).max_timestamp
            else:
                self._rolling_ts = None
            self._rolling_ts_known = True
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_messages: int) -> int:
        ts = self.rolling_based_timestamp
        if ts is not None and ts >= 0:
            return max_timestamp_in_messages - ts
        return max(0, now_ms - self.created_ms)

    def can_convert_to_relative(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def index_has_room(self, new_batches: int) -> bool:
        """Whether ``new_batches`` more batches fit the indexes (each batch can
        add at most one entry to each)."""
        return (
            self.index.entries + new_batches <= self.index.max_entries
            and self.time_index.entries + new_batches < self.time_index.max_entries
        )

    # --------------------------------------------------------------- helpers

    @property
    def inode(self) -> int:
        """The segment file's inode: a reader holding a FileSlice by path can tell
        a file swapped in at the same path (compaction) from this one."""
        ino = getattr(self, "_inode", None)
        if ino is None:
            ino = self._inode = os.fstat(self._fd_or_raise()).st_ino
        return ino

    def _fd_or_raise(self) -> int:
        if self._fd is None:
            raise KafkaStorageError(f"segment {self.log_path} is closed")
        return self._fd

    def _heads(self, pos: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` for each complete batch from ``pos``
        (a batch boundary) up to ``end``."""
        fd = self._fd_or_raise()
        if end is None:
            end = self._size
        unpack = HEADER.unpack_from
        new_header = _tuple_new
        buf = b""
        buf_start = pos
        while end - pos >= HEADER_SIZE:
            off = pos - buf_start
            if off < 0 or off + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
                buf_start = pos
                off = 0
                if len(buf) < HEADER_SIZE:
                    return
            h = new_header(BatchHeader, unpack(buf, off))
            size = h.batch_length + LOG_OVERHEAD
            if size < HEADER_SIZE or pos + size > end:
                return
            yield pos, h
            pos += size

    def _find_batch(self, offset: int) -> tuple[int, BatchHeader | None]:
        """Position and header of the first batch whose last offset >= offset,
        or ``(size, None)``."""
        _, pos = self.index.lookup(offset)
        for p, h in self._heads(pos):
            if h.base_offset + h.last_offset_delta >= offset:
                return p, h
        return self._size, None

    def _scan_next_offset(self) -> int:
        if self._size == 0:
            return self.base_offset
        pos = self.index.entry(self.index.entries - 1)[1] if self.index.entries else 0
        last = None
        for _, h in self._heads(pos):
            last = h
        return self.base_offset if last is None else last.base_offset + last.last_offset_delta + 1

    def _check_indexes(self) -> None:
        """First use of a segment opened without recovery: load and sanity
        check its indexes, rebuilding them from the log if corrupt."""
        if self._indexes_checked:
            return
        self._indexes_checked = True
        try:
            self.index.sanity_check(self._size)
            self._verify_last_entries()
        except CorruptIndexError as exc:
            log.warning("rebuilding indexes of %s: %s", self.log_path, exc)
            self.recover()

    def _verify_last_entries(self) -> None:
        """Cheap spot check of a trusted segment's indexes against its data:
        the last offset index entry must point at a batch boundary and the
        last time index entry at a batch with that max timestamp.  Sorted
        garbage would otherwise make reads parse mid-batch bytes."""
        index, time_index = self.index, self.time_index
        if index.entries:
            off, pos = index.entry(index.entries - 1)
            head = os.pread(self._fd_or_raise(), HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                raise CorruptIndexError(f"offset index {index.path} points past the log")
            h = unpack_header(head)
            if (h.magic != 2 or h.batch_length < MIN_BATCH_LENGTH or pos + h.batch_length + LOG_OVERHEAD > self._size
                    or h.base_offset > off):
                raise CorruptIndexError(f"offset index {index.path} entry ({off}, {pos}) is not a batch boundary")
        self._next_offset = self._scan_next_offset()
        time_index.sanity_check(self._next_offset)
        if time_index.entries:
            ts, off = time_index.last_entry
            _, h = self._find_batch(off)
            if h is None or h.max_timestamp != ts or h.base_offset > off:
                raise CorruptIndexError(f"time index {time_index.path} entry ({ts}, {off}) does not match the log")
        elif self._size:
            # Rolled and closed segments end with a time index entry; an
            # empty one means it was lost (or no batch has a timestamp).
            raise CorruptIndexError(f"time index {time_index.path} is empty")

    def _ensure_max_ts(self) -> None:
        if self._max_ts is None:
            self._check_indexes()
            if self._max_ts is None:
                ts, off = self.time_index.last_entry
                self._max_ts, self._offset_of_max_ts = ts, off

    def _max_ts_after(self, pos: int, ts: int, off: int) -> tuple[int, int]:
        for _, h in self._heads(pos):
            if h.max_timestamp > ts:
                ts, off = h.max_timestamp, h.base_offset + h.last_offset_delta
        return ts, off

    # ----------------------------------------------------------------- write

    def append(self, largest_offset: int, max_timestamp: int, offset_of_max_ts: int, buf, layout=None) -> None:
        """Append validated batches (offsets assigned) at the end of the file.

        ``largest_offset`` is the last offset in ``buf``; ``max_timestamp`` and
        ``offset_of_max_ts`` summarise its batches' max timestamps.
        ``layout``, when the caller has it, is ``batch_layout(buf)``.
        """
        n = len(buf)
        if n == 0:
            return
        fd = self._fd_or_raise()
        if not self.can_convert_to_relative(largest_offset):
            raise ValueError(f"offset {largest_offset} out of range for segment {self.base_offset}")
        self._ensure_max_ts()
        start = self._size
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        try:
            written = os.write(fd, view)
            while written < n:
                written += os.write(fd, view[written:])
        except OSError as exc:
            # Leave the file as it was so the segment stays consistent.
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise KafkaStorageError(f"append to {self.log_path} failed: {exc}") from exc
        self._size = start + n
        if start == 0:
            self._rolling_ts = max_timestamp
            self._rolling_ts_known = True

        interval = self.config.index_interval_bytes
        since = self._bytes_since_index
        if since + n <= interval:
            # No batch of this append can start past the interval: skip the
            # per-batch walk entirely.
            self._bytes_since_index = since + n
            if max_timestamp > self._max_ts:
                self._max_ts = max_timestamp
                self._offset_of_max_ts = offset_of_max_ts
        else:
            index, time_index = self.index, self.time_index
            index_room = index.max_entries - index.entries
            time_room = time_index.max_entries - 1 - time_index.entries
            last_indexed_ts = time_index.last_timestamp
            max_ts, off_max = self._max_ts, self._offset_of_max_ts
            index_offsets: list[int] = []
            index_positions: list[int] = []
            time_entries: list[tuple[int, int]] = []
            p = start
            for size, last, ts in batch_layout(view) if layout is None else layout:
                if ts > max_ts:
                    max_ts, off_max = ts, last
                if since > interval and index_room > 0:
                    index_offsets.append(last)
                    index_positions.append(p)
                    index_room -= 1
                    if time_room > 0 and max_ts > last_indexed_ts:
                        time_entries.append((max_ts, off_max))
                        last_indexed_ts = max_ts
                        time_room -= 1
                    since = 0
                since += size
                p += size
            self._bytes_since_index = since
            self._max_ts, self._offset_of_max_ts = max_ts, off_max
            # Index entries reach their files in pages, not per append: a sparse
            # index missing its newest entries is still a valid index (lookups
            # land a little earlier), flush()/roll/close write everything, and
            # recovery rebuilds the indexes of unflushed segments anyway.
            if index_offsets:
                index.append_many(index_offsets, index_positions)
                index.write_pending_beyond(INDEX_WRITE_BYTES)
            if time_entries:
                time_index.append_many(time_entries)
                time_index.write_pending_beyond(INDEX_WRITE_BYTES)
        self._next_offset = largest_offset + 1

    def on_become_inactive(self) -> None:
        """Called when a newer segment takes over: record the final max
        timestamp in the time index, as Kafka does on roll."""
        self._ensure_max_ts()
        if self._max_ts is not None and self._max_ts >= 0:
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)
        self.index.write_pending()
        self.time_index.write_pending()

    def flush(self) -> None:
        """fsync the log file, both indexes and the transaction index."""
        os.fsync(self._fd_or_raise())
        self.index.flush()
        self.time_index.flush()
        if self._txn_index is not None and self._txn_index.last_offset is not None:
            self._txn_index.flush()

    # ------------------------------------------------------------------ read

    def read_slice(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        min_one_batch: bool = True,
    ) -> FileSlice | None:
        """Locate whole batches from the one containing ``start_offset``.

        At most ``max_bytes`` (except that ``min_one_batch`` always returns
        the first batch) and only batches whose last offset is below
        ``max_offset_exclusive``.  None when no batch at or after
        ``start_offset`` exists in this segment; a zero-length slice when
        limits exclude even the first batch.
        """
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes}")
        if start_offset >= self.next_offset:
            return None
        self._check_indexes()
        start_pos, h = self._find_batch(start_offset)
        if h is None:
            return None
        size = self._size
        first_size = h.batch_length + LOG_OVERHEAD
        limit = size if max_bytes >= size - start_pos else start_pos + max_bytes
        if max_offset_exclusive is not None and max_offset_exclusive < self.next_offset:
            cut, _ = self._find_batch(max_offset_exclusive)
            if cut <= start_pos:
                return FileSlice(self.log_path, start_pos, 0, h.base_offset, h.base_offset)
            limit = min(limit, cut)
        if limit >= size:
            end_pos, next_offset = size, self.next_offset
        else:
            # The last batch boundary <= limit: jump close to it through the
            # index instead of walking every batch in between.
            _, scan_from = self.index.lookup_position(limit)
            if scan_from < start_pos:
                scan_from = start_pos
            end_pos, next_offset = size, self.next_offset
            for p, hh in self._heads(scan_from):
                if p + hh.batch_length + LOG_OVERHEAD > limit:
                    end_pos, next_offset = p, hh.base_offset
                    break
        if end_pos == start_pos:
            if not min_one_batch:
                return FileSlice(self.log_path, start_pos, 0, h.base_offset, h.base_offset)
            end_pos = start_pos + first_size
            next_offset = h.base_offset + h.last_offset_delta + 1
            if end_pos < size:
                next_offset = unpack_header(os.pread(self._fd, HEADER_SIZE, end_pos)).base_offset
        return FileSlice(self.log_path, start_pos, end_pos - start_pos, h.base_offset, next_offset)

    def read_bytes(self, position: int, length: int) -> bytes:
        fd = self._fd_or_raise()
        data = os.pread(fd, length, position)
        if len(data) != length:
            raise KafkaStorageError(f"short read from {self.log_path} at {position}")
        return data

    def iter_batches(self, start_pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch from ``start_pos``."""
        return self._heads(start_pos)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """First record at or after ``start_offset`` with timestamp >=
        ``timestamp``, as ``(offset, timestamp)``."""
        self._check_indexes()
        from_offset = max(self.time_index.lookup(timestamp), start_offset)
        _, pos = self.index.lookup(from_offset)
        for p, h in self._heads(pos):
            if h.max_timestamp >= timestamp and h.base_offset + h.last_offset_delta >= start_offset:
                found = _records.find_offset_for_timestamp(
                    self.read_bytes(p, h.batch_length + LOG_OVERHEAD), timestamp, start_offset
                )
                if found is not None:
                    return found
        return None

    def find_max_timestamp_record(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record holding this segment's
        max timestamp."""
        self._ensure_max_ts()
        if self._max_ts < 0:
            return None
        _, pos = self.index.lookup(self._offset_of_max_ts)
        for p, h in self._heads(pos):
            if h.max_timestamp == self._max_ts:
                return _records.offset_of_max_timestamp(self.read_bytes(p, h.batch_length + LOG_OVERHEAD))
        return None

    # -------------------------------------------------------------- recovery

    def _trusted_prefix(self, from_offset: int, file_size: int):
        """State to resume recovery near ``from_offset`` instead of position 0.

        Everything below the recovery point was fsynced, index entries
        included, so the index entries below it can be trusted.  Returns
        ``(position, max_ts, offset_of_max_ts, prev_last_offset,
        bytes_since_index)`` or None to recover the whole segment.
        """
        index, time_index = self.index, self.time_index
        if not (index.exists() and time_index.exists()):
            return None
        # bisect needs sorted entries; a torn, unsorted tail means a full
        # rebuild (rare: it takes a crash that leaves garbage in the index).
        if not (index.is_sorted() and time_index.is_sorted()):
            return None
        k = index.entries_below(from_offset) - 1
        while k >= 0 and index.entry(k)[1] >= file_size:
            k -= 1
        if k < 0:
            return None
        entry_offset, resume_pos = index.entry(k)
        head = os.pread(self._fd, HEADER_SIZE, resume_pos)
        if len(head) < HEADER_SIZE:
            return None
        hk = unpack_header(head)
        if (hk.magic != 2 or hk.batch_length < MIN_BATCH_LENGTH
                or not (self.base_offset <= hk.base_offset <= entry_offset)):
            return None
        # Walk from the previous entry to resume_pos: finds the last offset
        # before it and the max timestamp of batches the kept time index
        # entries may not cover.
        scan_from = index.entry(k - 1)[1] if k > 0 else 0
        prev_last = self.base_offset - 1
        max_ts, off_max = _NO_TIMESTAMP, self.base_offset
        reached = scan_from
        for p, h in self._heads(scan_from, resume_pos):
            if h.magic != 2 or h.base_offset <= prev_last:
                return None
            prev_last = h.base_offset + h.last_offset_delta
            if h.max_timestamp > max_ts:
                max_ts, off_max = h.max_timestamp, prev_last
            reached = p + h.batch_length + LOG_OVERHEAD
        if reached != resume_pos:
            return None
        if time_index.entries >= time_index.max_entries - 1:
            # A full time index stopped tracking the running max; only a
            # rebuild knows the max timestamp of the kept prefix.
            return None
        kept_time = time_index.entries_below(hk.base_offset)
        index.truncate_entries(k)
        time_index.truncate_entries(kept_time)
        if kept_time:
            ts, off = time_index.last_entry
            if ts > max_ts or (ts == max_ts and off < off_max):
                max_ts, off_max = ts, off
        since = resume_pos - scan_from if k > 0 else resume_pos
        return resume_pos, max_ts, off_max, prev_last, since

    def recover(
        self,
        max_batch_bytes: int | None = None,
        from_offset: int | None = None,
        epoch_observer: Callable[[int, int], None] | None = None,
        require_contiguous: bool | None = None,
    ) -> int:
        """Re-validate batches, cut the file at the first invalid or torn one,
        and rebuild the indexes.  Returns the number of bytes truncated.

        With ``from_offset`` (the log's recovery point) only batches from the
        last index entry below it are re-validated.  A batch is invalid when
        its length, magic, CRC or offsets (not increasing, outside the
        segment) are wrong, or when it exceeds ``max_batch_bytes`` if given.
        ``epoch_observer(epoch, base_offset)`` sees every change of partition
        leader epoch among re-validated batches.  ``require_contiguous``
        (default: the log is not compacted) also rejects offset gaps, which
        catches a damaged base offset: that field is outside the CRC.
        """
        fd = self._fd_or_raise()
        if require_contiguous is None:
            require_contiguous = not getattr(self.config, "compacted", False)
        self.index.write_pending()
        self.time_index.write_pending()
        file_size = os.fstat(fd).st_size
        state = None
        if from_offset is not None and from_offset > self.base_offset:
            try:
                state = self._trusted_prefix(from_offset, file_size)
            except (OSError, ValueError, CorruptIndexError):
                state = None
        if state is None:
            self.index.reset()
            self.time_index.reset()
            pos, max_ts, off_max, prev_last, since = 0, _NO_TIMESTAMP, self.base_offset, self.base_offset - 1, 0
        else:
            pos, max_ts, off_max, prev_last, since = state

        index, time_index = self.index, self.time_index
        index_room = index.max_entries - index.entries
        time_room = time_index.max_entries - 1 - time_index.entries
        interval = self.config.index_interval_bytes
        max_rel_last = self.base_offset + MAX_RELATIVE_OFFSET
        reader = SequentialReader(fd, file_size)
        unpack = HEADER.unpack_from
        new_header = _tuple_new
        last_epoch = None
        while file_size - pos >= HEADER_SIZE:
            h = new_header(BatchHeader, unpack(reader.view(pos, HEADER_SIZE)))
            size = h.batch_length + LOG_OVERHEAD
            if h.batch_length < MIN_BATCH_LENGTH or h.magic != 2 or size > file_size - pos:
                break
            if max_batch_bytes is not None and size > max_batch_bytes:
                break
            base = h.base_offset
            last = base + h.last_offset_delta
            if h.last_offset_delta < 0 or h.record_count < 0 or base <= prev_last or last > max_rel_last:
                break
            if require_contiguous and base != prev_last + 1:
                break
            if size <= RECOVERY_CHUNK:
                body = reader.view(pos, size)
                if body is None or crc32c(body[ATTRIBUTES_OFFSET:]) != h.crc:
                    break
            elif streamed_crc(self._fd, pos, size) != h.crc:
                break
            if h.max_timestamp > max_ts:
                max_ts, off_max = h.max_timestamp, last
            if since > interval and index_room > 0:
                index.append(last, pos)
                index_room -= 1
                if time_room > 0 and time_index.maybe_append(max_ts, off_max):
                    time_room -= 1
                since = 0
            since += size
            if epoch_observer is not None and h.partition_leader_epoch != last_epoch:
                last_epoch = h.partition_leader_epoch
                epoch_observer(h.partition_leader_epoch, base)
            prev_last = last
            pos += size

        truncated = file_size - pos
        if truncated:
            log.warning("truncating %d invalid bytes at position %d of %s", truncated, pos, self.log_path)
            os.ftruncate(fd, pos)
        self._size = pos
        self._next_offset = prev_last + 1 if pos else self.base_offset
        self._max_ts, self._offset_of_max_ts = max_ts, off_max
        self._bytes_since_index = since
        self._rolling_ts_known = False
        if max_ts >= 0:
            time_index.maybe_append(max_ts, off_max, skip_full_check=True)
        index.write_pending()
        time_index.write_pending()
        self._indexes_checked = True
        return truncated

    # ------------------------------------------------------------ truncation

    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Drop the batch containing ``offset`` and everything after it.

        Truncation is batch-granular: if ``offset`` falls inside a batch the
        whole batch goes and :attr:`next_offset` becomes its base offset.
        Returns the number of bytes removed.
        """
        if offset >= self.next_offset:
            return 0
        self._check_indexes()
        pos, h = self._find_batch(offset)
        if h is None:
            return 0
        fd = self._fd_or_raise()
        new_next = max(min(h.base_offset, offset), self.base_offset)
        removed = self._size - pos
        self.txn_index.truncate_to(new_next)
        self.index.truncate_to(new_next)
        self.time_index.truncate_to(new_next)
        os.ftruncate(fd, pos)
        self._size = pos
        self._next_offset = new_next
        if pos == 0:
            self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
            self._rolling_ts_known = True
            self._rolling_ts = None
            self._max_ts, self._offset_of_max_ts = _NO_TIMESTAMP, self.base_offset
            self._bytes_since_index = 0
            return removed
        # The kept time index entries cover batches up to the last kept
        # offset index entry; scan the rest for the max timestamp.
        entries = self.index.entries
        last_entry_pos = self.index.entry(entries - 1)[1] if entries else 0
        ts, off = self.time_index.last_entry
        if ts < 0:
            off = self.base_offset
        if self.time_index.entries >= self.time_index.max_entries - 1:
            # a full time index stopped following the running max
            last_entry_pos, ts, off = 0, _NO_TIMESTAMP, self.base_offset
        self._max_ts, self._offset_of_max_ts = self._max_ts_after(last_entry_pos, ts, off)
        self._bytes_since_index = pos - last_entry_pos if entries else pos
        return removed

    # --------------------------------------------------------------- closing

    def close(self) -> None:
        if self._fd is None:
            return
        try:
            if self._max_ts is not None and self._max_ts >= 0:
                self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)
        finally:
            self.index.close()
            self.time_index.close()
            os.close(self._fd)
            self._fd = None

    def close_handles(self) -> None:
        """Release descriptors without touching the files (before deletion)."""
        self.index.close()
        self.time_index.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def txn_index_path(self) -> str:
        return os.path.join(self.dir, segment_file_prefix(self.base_offset)) + TXN_INDEX_SUFFIX + self.file_suffix

    @property
    def txn_index(self) -> TransactionIndex:
        """The aborted transactions whose markers are in this segment
        (``.txnindex``, created on the first entry)."""
        path = self.txn_index_path
        if self._txn_index is None:
            self._txn_index = TransactionIndex(path, self.base_offset)
        elif self._txn_index.path != path:
            self._txn_index.renamed(path)
        return self._txn_index

    def file_paths(self) -> list[str]:
        """The segment's current file names (log, indexes, transaction index)."""
        return [self.log_path, self.index.path, self.time_index.path, self.txn_index_path]

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment from ``old_suffix`` to
        ``new_suffix`` (Kafka's ``LogSegment.changeFileSuffixes``).  The log
        descriptor stays open, so reads through this object keep working."""
        if self.file_suffix != old_suffix:
            raise ValueError(f"segment {self.log_path} has suffix {self.file_suffix!r}, not {old_suffix!r}")

        def renamed(path: str) -> str:
            return path[: len(path) - len(old_suffix)] + new_suffix if old_suffix else path + new_suffix

        txn = self.txn_index_path
        # The log goes first: recovery treats a ".swap" log next to a
        # ".cleaned" index as an unfinished swap and rolls it back.
        os.replace(self.log_path, renamed(self.log_path))
        self.log_path = renamed(self.log_path)
        self.index.rename(renamed(self.index.path))
        self.time_index.rename(renamed(self.time_index.path))
        if os.path.exists(txn):
            os.replace(txn, renamed(txn))
        self.file_suffix = new_suffix

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    def set_last_modified_ms(self, ms: int) -> None:
        t = ms / 1000
        for path in (self.log_path, self.index.path, self.time_index.path):
            try:
                os.utime(path, (t, t))
            except FileNotFoundError:
                pass

    def delete(self) -> None:
        """Close and unlink the segment's files (under their current names)."""
        self.close_handles()
        for path in self.file_paths():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
