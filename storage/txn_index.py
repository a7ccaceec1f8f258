"""A segment's aborted-transaction index: ``<base offset>.txnindex``.

Kafka's format, byte for byte: a sequence of 34-byte entries, each

    version             int16  (0)
    producer_id         int64
    first_offset        int64  first offset of the aborted transaction
    last_offset         int64  offset of its ABORT marker
    last_stable_offset  int64  the LSO right after the marker was written

in marker order. An entry lives in the index of the segment that holds the
marker; the transaction's data may start in earlier segments. A
read_committed fetch asks every segment from the fetch offset's onwards
for the entries that overlap what it returns (``collect``), until one
entry's last stable offset is past the fetched range: no later marker can
abort anything in it.

Entries are few (one per aborted transaction per partition), so the index
is kept in memory once read and the file is only appended to or cut.
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

__all__ = ["AbortedTxn", "TransactionIndex", "ENTRY_SIZE", "CorruptTransactionIndexError"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
assert ENTRY_SIZE == 34
CURRENT_VERSION = 0


class CorruptTransactionIndexError(Exception):
    pass


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, *self)


class TransactionIndex:
    """The entries of one ``.txnindex`` file. The file may be absent: Kafka
    creates it lazily too, and an absent file means no aborted transaction."""

    __slots__ = ("path", "start_offset", "_entries")

    def __init__(self, path: str, start_offset: int):
        self.path = path
        self.start_offset = start_offset
        self._entries: list[AbortedTxn] | None = None

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            entries = []
            # A torn trailing entry (crash mid-append) is ignored, as Kafka's
            # reader stops at the last whole entry.
            for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
                version, *fields = _ENTRY.unpack_from(data, pos)
                if version != CURRENT_VERSION:
                    raise CorruptTransactionIndexError(
                        f"{self.path}: unexpected entry version {version} at position {pos}")
                entries.append(AbortedTxn(*fields))
            self._entries = entries
        return self._entries

    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    def __len__(self) -> int:
        return len(self._load())

    @property
    def last_offset(self) -> int | None:
        entries = self._load()
        return entries[-1].last_offset if entries else None

    def append(self, txn: AbortedTxn) -> None:
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"{self.path}: aborted transaction at {txn.last_offset} is not after "
                             f"the last one at {entries[-1].last_offset}")
        with open(self.path, "ab") as f:
            # Cut a torn tail first so the new entry lands on an entry boundary.
            size = f.tell()
            if size % ENTRY_SIZE:
                f.truncate(size - size % ENTRY_SIZE)
            f.write(txn.encode())
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        entries = self._load()
        keep = 0
        while keep < len(entries) and entries[keep].last_offset < offset:
            keep += 1
        if keep == len(entries):
            return
        del entries[keep:]
        try:
            os.truncate(self.path, keep * ENTRY_SIZE)
        except FileNotFoundError:
            pass

    def reset(self) -> None:
        self._entries = []
        try:
            os.truncate(self.path, 0)
        except FileNotFoundError:
            pass

    def flush(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def renamed(self, path: str) -> None:
        self.path = path

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper_bound_offset)``, and
        whether the search is complete (an entry's LSO reached the bound)."""
        found = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        for txn in self._load():
            if txn.last_offset < self.start_offset:
                raise CorruptTransactionIndexError(
                    f"{self.path}: last offset {txn.last_offset} of an aborted transaction is below the "
                    f"segment base offset {self.start_offset}")
