"""Kafka's sparse segment indexes.

``<base>.index`` (OffsetIndex): 8-byte entries ``relative_offset int32,
position int32`` mapping an offset to the byte position of a batch at or
before it.  ``<base>.timeindex`` (TimeIndex): 12-byte entries ``timestamp
int64, relative_offset int32`` recording the segment's max timestamp so far
and the offset where it occurred.  Both are big-endian, sorted, with offsets
relative to the segment's base offset.

Kafka preallocates and mmaps these files; here they are plain append-only
files (identical bytes once Kafka trims its files on close) with an
in-memory copy in ``array`` objects for ``bisect``.  Loading is lazy so a log
with many old segments opens without reading every index.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from itertools import islice
from operator import le, lt

from storage.errors import CorruptIndexError

__all__ = ["OffsetIndex", "TimeIndex", "CorruptIndexError", "IndexFullError"]

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_MAX_RELATIVE = 0x7FFFFFFF
_NO_TIMESTAMP = -1
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class IndexFullError(ValueError):
    """The index reached ``segment_index_bytes``; the segment must roll."""


def _strictly_increasing(a) -> bool:
    return all(map(lt, a, islice(a, 1, None)))


def _non_decreasing(a) -> bool:
    return all(map(le, a, islice(a, 1, None)))


class _Index:
    ENTRY_SIZE = 0

    def __init__(self, path: str, base_offset: int, max_index_bytes: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_index_bytes // self.ENTRY_SIZE, 2)
        self._loaded = False
        self._fd: int | None = None
        self._pending = bytearray()

    # -- file handling -----------------------------------------------------

    def _write_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def create(self) -> None:
        """Create an empty index file (for a new segment)."""
        self._write_fd()
        self._loaded = True
        self._clear_memory()

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def _read_file(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return b""
        extra = len(data) % self.ENTRY_SIZE
        if extra:
            # A crash can tear the last entry; Kafka rounds down likewise.
            data = data[: len(data) - extra]
            os.truncate(self.path, len(data))
        return data

    def ensure_loaded(self) -> None:
        if not self._loaded:
            self._load(self._read_file())
            self._loaded = True

    def write_pending(self) -> None:
        if self._pending:
            fd = self._write_fd()
            data = self._pending
            written = os.write(fd, data)
            while written < len(data):
                written += os.write(fd, data[written:])
            data.clear()

    def write_pending_beyond(self, nbytes: int) -> None:
        """Write buffered entries once more than ``nbytes`` have accumulated."""
        if len(self._pending) > nbytes:
            self.write_pending()

    def flush(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        try:
            self.write_pending()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def unload(self) -> None:
        """Drop the in-memory copy (it reloads on next use)."""
        self.close()
        self._loaded = False
        self._clear_memory()

    def delete(self) -> None:
        self._pending.clear()
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def rename(self, new_path: str) -> None:
        self.close()
        if os.path.exists(self.path):
            os.replace(self.path, new_path)
        self.path = new_path

    def truncate_entries(self, n: int) -> None:
        self.ensure_loaded()
        if n >= self.entries:
            return
        self.write_pending()
        self._del_from(n)
        fd = self._write_fd()
        os.ftruncate(fd, n * self.ENTRY_SIZE)

    def reset(self) -> None:
        self.ensure_loaded()
        self._pending.clear()
        self._del_from(0)
        os.ftruncate(self._write_fd(), 0)

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > _MAX_RELATIVE:
            raise ValueError(f"offset {offset} cannot be stored relative to base {self.base_offset} in {self.path}")
        return rel

    # subclass hooks
    def _load(self, data: bytes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _clear_memory(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _del_from(self, n: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def entries(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


class OffsetIndex(_Index):
    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_index_bytes: int = 10485760):
        super().__init__(path, base_offset, max_index_bytes)
        self._rel = array("i")
        self._pos = array("i")

    def _clear_memory(self) -> None:
        self._rel = array("i")
        self._pos = array("i")

    def _load(self, data: bytes) -> None:
        words = array("i")
        words.frombytes(data)
        if not _BIG_ENDIAN_HOST:
            words.byteswap()
        self._rel = words[0::2]
        self._pos = words[1::2]

    def _del_from(self, n: int) -> None:
        del self._rel[n:]
        del self._pos[n:]

    @property
    def entries(self) -> int:
        self.ensure_loaded()
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (as Kafka)."""
        self.ensure_loaded()
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    def entry(self, i: int) -> tuple[int, int]:
        self.ensure_loaded()
        return self.base_offset + self._rel[i], self._pos[i]

    def append(self, offset: int, position: int) -> None:
        self.ensure_loaded()
        rel = self._relative(offset)
        if self._rel and rel <= self._rel[-1]:
            raise ValueError(
                f"index entry offset {offset} is not larger than the last entry "
                f"{self.base_offset + self._rel[-1]} in {self.path}"
            )
        if len(self._rel) >= self.max_entries:
            raise IndexFullError(f"offset index {self.path} is full ({self.max_entries} entries)")
        self._rel.append(rel)
        self._pos.append(position)
        self._pending += _OFFSET_ENTRY.pack(rel, position)

    def append_many(self, offsets: list[int], positions: list[int]) -> None:
        """Append entries already known to be increasing (the segment's
        append path builds them so); one pack and one buffer extend."""
        self.ensure_loaded()
        if not offsets:
            return
        base = self.base_offset
        rels = [o - base for o in offsets]
        if rels[0] < 0 or rels[-1] > _MAX_RELATIVE or (self._rel and rels[0] <= self._rel[-1]):
            raise ValueError(f"index entries {offsets[0]}..{offsets[-1]} do not extend {self.path}")
        if len(self._rel) + len(rels) > self.max_entries:
            raise IndexFullError(f"offset index {self.path} is full ({self.max_entries} entries)")
        self._rel.extend(rels)
        self._pos.extend(positions)
        flat = [v for pair in zip(rels, positions) for v in pair]
        self._pending += struct.pack(f">{len(flat)}i", *flat)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, as ``(offset, position)``;
        ``(base_offset, 0)`` when there is none."""
        self.ensure_loaded()
        i = bisect_right(self._rel, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """Largest entry with position <= ``position``, or ``(base_offset, 0)``."""
        self.ensure_loaded()
        i = bisect_right(self._pos, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def entries_below(self, offset: int) -> int:
        """Number of entries whose offset is < ``offset``."""
        self.ensure_loaded()
        return bisect_left(self._rel, offset - self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        self.truncate_entries(self.entries_below(offset))

    def is_sorted(self) -> bool:
        self.ensure_loaded()
        return _strictly_increasing(self._rel) and _strictly_increasing(self._pos)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError unless entries are strictly increasing and
        point inside the segment."""
        self.ensure_loaded()
        rel, pos = self._rel, self._pos
        if not rel:
            return
        if rel[0] < 0 or pos[0] < 0:
            raise CorruptIndexError(f"offset index {self.path} has a negative entry")
        if not (_strictly_increasing(rel) and _strictly_increasing(pos)):
            raise CorruptIndexError(f"offset index {self.path} entries are not strictly increasing")
        if log_size is not None and pos[-1] >= log_size:
            raise CorruptIndexError(
                f"offset index {self.path} points at position {pos[-1]} beyond the log size {log_size}"
            )


class TimeIndex(_Index):
    ENTRY_SIZE = 12

    def __init__(self, path: str, base_offset: int, max_index_bytes: int = 10485760):
        super().__init__(path, base_offset, max_index_bytes)
        self._ts = array("q")
        self._rel = array("i")

    def _clear_memory(self) -> None:
        self._ts = array("q")
        self._rel = array("i")

    def _load(self, data: bytes) -> None:
        # Mixed-width entries defeat array.frombytes; time indexes load only
        # for timestamp lookups and recovery, so the per-entry cost is fine.
        pairs = list(_TIME_ENTRY.iter_unpack(data))
        self._ts = array("q", [p[0] for p in pairs])
        self._rel = array("i", [p[1] for p in pairs])

    def _del_from(self, n: int) -> None:
        del self._ts[n:]
        del self._rel[n:]

    @property
    def entries(self) -> int:
        self.ensure_loaded()
        return len(self._ts)

    @property
    def is_full(self) -> bool:
        # One slot stays free for the entry appended when the segment rolls
        # or closes (Kafka's TimeIndex.isFull does the same).
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base_offset)``."""
        self.ensure_loaded()
        if not self._ts:
            return _NO_TIMESTAMP, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def entry(self, i: int) -> tuple[int, int]:
        self.ensure_loaded()
        return self._ts[i], self.base_offset + self._rel[i]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append ``(timestamp, offset)`` if the timestamp is larger than the
        last entry's; returns whether an entry was written."""
        self.ensure_loaded()
        if not skip_full_check and len(self._ts) >= self.max_entries - 1:
            raise IndexFullError(f"time index {self.path} is full ({self.max_entries} entries)")
        rel = self._relative(offset)
        if self._ts:
            if rel < self._rel[-1]:
                raise ValueError(
                    f"time index entry offset {offset} is below the last entry "
                    f"{self.base_offset + self._rel[-1]} in {self.path}"
                )
            if timestamp <= self._ts[-1]:
                return False
        elif timestamp <= _NO_TIMESTAMP:
            return False
        self._ts.append(timestamp)
        self._rel.append(rel)
        self._pending += _TIME_ENTRY.pack(timestamp, rel)
        return True

    def append_many(self, entries: list[tuple[int, int]]) -> None:
        """Append ``(timestamp, offset)`` entries already filtered to strictly
        increasing timestamps and non-decreasing offsets."""
        self.ensure_loaded()
        if not entries:
            return
        base = self.base_offset
        first_ts, first_off = entries[0]
        if self._ts and (first_ts <= self._ts[-1] or first_off - base < self._rel[-1]):
            raise ValueError(f"time index entries at offset {first_off} do not extend {self.path}")
        if first_off < base or entries[-1][1] - base > _MAX_RELATIVE:
            raise ValueError(f"time index entries at offset {first_off} out of range for {self.path}")
        pack = _TIME_ENTRY.pack
        pending = self._pending
        for ts, off in entries:
            rel = off - base
            self._ts.append(ts)
            self._rel.append(rel)
            pending += pack(ts, rel)

    @property
    def last_timestamp(self) -> int:
        self.ensure_loaded()
        return self._ts[-1] if self._ts else _NO_TIMESTAMP

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry with timestamp <= ``timestamp`` (where a
        scan for the first record at or after ``timestamp`` may start), or the
        base offset when there is none."""
        self.ensure_loaded()
        i = bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self._rel[i]

    def entries_below(self, offset: int) -> int:
        self.ensure_loaded()
        return bisect_left(self._rel, offset - self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        self.truncate_entries(self.entries_below(offset))

    def is_sorted(self) -> bool:
        self.ensure_loaded()
        return _strictly_increasing(self._ts) and _non_decreasing(self._rel)

    def sanity_check(self, next_offset: int | None = None) -> None:
        self.ensure_loaded()
        ts, rel = self._ts, self._rel
        if not ts:
            return
        if rel[0] < 0:
            raise CorruptIndexError(f"time index {self.path} has a negative offset")
        if not (_strictly_increasing(ts) and _non_decreasing(rel)):
            raise CorruptIndexError(f"time index {self.path} entries are not sorted")
        if next_offset is not None and self.base_offset + rel[-1] >= next_offset:
            raise CorruptIndexError(
                f"time index {self.path} refers to offset {self.base_offset + rel[-1]} beyond the segment"
            )
