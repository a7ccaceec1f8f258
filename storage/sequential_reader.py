"""Reading a segment file front to back for recovery: big sequential
chunks, and batches larger than a chunk CRC-checked in pieces instead of
being held in memory whole."""

from __future__ import annotations

import os

from crc32c import crc32c

from storage.record_batch import ATTRIBUTES_OFFSET

RECOVERY_CHUNK = 4 * 1024 * 1024


class SequentialReader:
    """Chunked sequential reader over a file for recovery."""

    __slots__ = ("fd", "end", "buf", "start")

    def __init__(self, fd: int, end: int):
        self.fd = fd
        self.end = end
        self.buf = memoryview(b"")
        self.start = 0

    def view(self, pos: int, n: int) -> memoryview | None:
        off = pos - self.start
        if 0 <= off and off + n <= len(self.buf):
            return self.buf[off : off + n]
        want = min(max(n, RECOVERY_CHUNK), self.end - pos)
        if want < n:
            return None
        data = os.pread(self.fd, want, pos)
        if len(data) < n:
            return None
        self.buf = memoryview(data)
        self.start = pos
        return self.buf[:n]


def streamed_crc(fd: int, pos: int, size: int) -> int:
    """CRC-32C of the batch at ``pos`` (``size`` bytes), read a chunk at a
    time; -1 when the file ends first."""
    crc = 0
    cur = pos + ATTRIBUTES_OFFSET
    end = pos + size
    while cur < end:
        chunk = os.pread(fd, min(RECOVERY_CHUNK, end - cur), cur)
        if not chunk:
            return -1
        crc = crc32c(chunk, crc)
        cur += len(chunk)
    return crc
