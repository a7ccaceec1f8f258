"""Reading the file slices a leader replica names (core.replica_messages.FileSlice).

A leader answers reads with (path, position, length, base offset, inode)
slices of its segment files; readers on the same node (the edge, the group
and transaction coordinators, Spark's Ray path) pread them. Between the
answer and the read the segment may have been replaced at its path (the
cleaner swaps a new file in) or deleted (retention, truncation). The bytes
must come from the very file the leader named and start with the batch it
named, so every reader checks the same three things:

- the inode of the open file is the slice's;
- the read is whole (the file still holds ``position + length`` bytes);
- the first batch's base offset is the slice's.

A failed check raises ``SliceChangedError`` (a FileNotFoundError): the
caller asks the leader again.
"""
from __future__ import annotations

import collections
import os
import struct

_BASE_OFFSET = struct.Struct(">q")


class SliceChangedError(FileNotFoundError):
    """The file at a slice's path is not the one the leader named any more."""


def check_slice_bytes(data: bytes, length: int, base_offset: int) -> bool:
    """Whole, and starting with the batch the leader named (base offset
    < 0: not known, as in slices of older callers)."""
    if len(data) != length:
        return False
    return base_offset < 0 or length < 8 or _BASE_OFFSET.unpack_from(data, 0)[0] == base_offset


class SliceReader:
    """Checked preads through a small LRU cache of open fds (path -> (fd,
    inode)). Not thread-safe: one per event loop."""

    def __init__(self, max_open_fds: int = 64):
        self.max_open_fds = max(1, max_open_fds)
        self._fds: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()

    def read(self, path: str, position: int, length: int, base_offset: int = -1, inode: int | None = None) -> bytes:
        """The slice's bytes, checked; a cached fd of a replaced file is
        reopened once before giving up."""
        for _attempt in range(2):
            fd, fd_inode = self.open(path)
            if inode is None or fd_inode == inode:
                data = os.pread(fd, length, position)
                if check_slice_bytes(data, length, base_offset):
                    return data
            self.forget(path)
        raise SliceChangedError(path)

    def read_all(self, slices) -> bytes:
        """The concatenated bytes of ``slices`` (FileSlices or 5-tuples)."""
        if len(slices) == 1:
            return self.read(*slices[0])
        return b"".join(self.read(*s) for s in slices)

    def open(self, path: str) -> tuple[int, int]:
        """(fd, inode) of ``path``, cached; the fd stays owned by the cache
        (dup it to keep it past the next call)."""
        entry = self._fds.get(path)
        if entry is None:
            fd = os.open(path, os.O_RDONLY)
            try:
                entry = (fd, os.fstat(fd).st_ino)
            except OSError:
                os.close(fd)
                raise
            self._fds[path] = entry
            while len(self._fds) > self.max_open_fds:
                _, (old, _ino) = self._fds.popitem(last=False)
                os.close(old)
        else:
            self._fds.move_to_end(path)
        return entry

    def forget(self, path: str) -> None:
        entry = self._fds.pop(path, None)
        if entry is not None:
            os.close(entry[0])

    def close(self) -> None:
        while self._fds:
            _, (fd, _ino) = self._fds.popitem()
            os.close(fd)

    def __enter__(self) -> "SliceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_slices(slices) -> bytes:
    """One-shot checked read of ``slices`` (no fd kept open afterwards):
    for coordinators loading their partition and Spark tasks."""
    with SliceReader(max_open_fds=4) as reader:
        return reader.read_all(slices)
