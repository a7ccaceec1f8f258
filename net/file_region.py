"""Zero-copy Fetch responses: record bytes go from segment files to the socket
with sendfile(2) instead of being read into Python and copied three times
(pread, kio's encoder, the final bytes()).

A Fetch response is kio-encoded with a short marker in place of each
file-backed `records` blob, then cut at the markers into a ResponseFrame:
[bytes][file region][bytes][file region]...[bytes]. The length prefixes of the
blobs (int32, or a compact unsigned varint from v12 on) and the frame's own
size are rewritten for the real lengths, so the frame on the wire is exactly
what kio would have produced with the bytes inline.

A region holds its own duplicate of the segment's fd: it keeps reading the very
file (inode) that was checked, even if the edge's fd cache closes its copy or
the cleaner swaps a new file in at the same path.
"""
from __future__ import annotations

import os
import struct

from net.codec import encode_response

_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
# 12 bytes no client can guess + a 4-byte index: a marker cannot collide with
# anything else in the encoded response (topic names are client-chosen).
_MARKER_SECRET = os.urandom(12)
_MARKER_SIZE = len(_MARKER_SECRET) + 4


class FdBudget:
    """Bounds the fds held by regions waiting for their turn on a socket
    (responses queue behind each other per connection); past the bound the
    edge reads bytes instead."""

    __slots__ = ("limit", "held")

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0

    def try_acquire(self) -> bool:
        if self.held >= self.limit:
            return False
        self.held += 1
        return True

    def release(self) -> None:
        self.held -= 1


class FileRegion:
    """Bytes [position, position + length) of one segment file, starting with
    the batch whose base offset is `base_offset`."""

    __slots__ = ("fd", "position", "length", "base_offset", "budget")

    def __init__(self, fd: int, position: int, length: int, base_offset: int, budget: FdBudget | None = None):
        self.fd = fd
        self.position = position
        self.length = length
        self.base_offset = base_offset
        self.budget = budget

    def fileno(self) -> int:  # loop.sendfile takes any object with fileno()
        return self.fd

    def intact(self) -> bool:
        """The file still holds the whole region and it still starts with the
        named batch (the checks the pread path makes on the bytes it read)."""
        try:
            head = os.pread(self.fd, _BASE_OFFSET.size, self.position)
            size = os.fstat(self.fd).st_size
        except OSError:
            return False
        return (size >= self.position + self.length and len(head) == _BASE_OFFSET.size
                and _BASE_OFFSET.unpack(head)[0] == self.base_offset)

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            if self.budget is not None:
                self.budget.release()

    def __del__(self):  # a response dropped unsent (connection gone) must not leak its fds
        self.close()


class FileRecords:
    """One partition's records blob: bytes and file regions, in order."""

    __slots__ = ("pieces", "length")

    def __init__(self, pieces: list):
        self.pieces = pieces
        self.length = sum(p.length if type(p) is FileRegion else len(p) for p in pieces)

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0

    def to_bytes(self) -> bytes:
        return b"".join(p.read() if type(p) is FileRegion else p for p in self.pieces)

    def close(self) -> None:
        for piece in self.pieces:
            if type(piece) is FileRegion:
                piece.close()


def release(records) -> None:
    """Close the fds of a records value that will not be sent."""
    if type(records) is FileRecords:
        records.close()


class ResponseFrame:
    """An encoded response frame (4-byte size included) as bytes pieces and
    FileRegions, to be written in order."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list, size: int):
        self.pieces = pieces
        self.size = size  # the whole frame on the wire, size prefix included

    def regions(self) -> list[FileRegion]:
        return [p for p in self.pieces if type(p) is FileRegion]

    def to_bytes(self) -> bytes:
        """The frame with every region read in (non-sendfile transports, tests)."""
        return b"".join(p.read() if type(p) is FileRegion else p for p in self.pieces)

    def close(self) -> None:
        for region in self.regions():
            region.close()


class SplicedResponse:
    """A response entity whose file-backed records blobs are spliced in at encoding."""

    __slots__ = ("response", "blobs")

    def __init__(self):
        self.response = None
        self.blobs: list[tuple[bytes, FileRecords]] = []

    def placeholder(self, records: FileRecords) -> bytes:
        marker = _MARKER_SECRET + _INT32.pack(len(self.blobs))
        self.blobs.append((marker, records))
        return marker

    def close(self) -> None:
        for _marker, records in self.blobs:
            records.close()

    def to_frame(self, correlation_id: int) -> ResponseFrame:
        try:
            return self.cut(encode_response(self.response, correlation_id), type(self.response).__flexible__)
        except BaseException:
            self.close()
            raise

    def cut(self, encoded: bytes, flexible: bool) -> ResponseFrame:
        """Cut a kio-encoded frame (markers inline) into a ResponseFrame."""
        found = []
        for marker, records in self.blobs:
            at = encoded.find(marker, 4)
            if at < 0 or encoded.find(marker, at + 1) >= 0:
                raise AssertionError("records marker not found exactly once in the encoded response")
            found.append((at, records))
        found.sort(key=lambda item: item[0])
        old_prefix = compact_length(_MARKER_SIZE) if flexible else _INT32.pack(_MARKER_SIZE)
        pieces: list = []
        start = 0
        size = len(encoded) - 4
        for at, records in found:
            prefix_at = at - len(old_prefix)
            if encoded[prefix_at:at] != old_prefix:
                raise AssertionError("unexpected length prefix before a records marker")
            new_prefix = compact_length(records.length) if flexible else _INT32.pack(records.length)
            _append_bytes(pieces, encoded[start:prefix_at] + new_prefix)
            for piece in records.pieces:
                if type(piece) is FileRegion:
                    pieces.append(piece)
                else:
                    _append_bytes(pieces, piece)
            size += len(new_prefix) - len(old_prefix) + records.length - _MARKER_SIZE
            start = at + _MARKER_SIZE
        _append_bytes(pieces, encoded[start:])
        if size > 0x7FFFFFFF:
            raise AssertionError(f"response of {size} bytes does not fit a frame")
        head = pieces[0]  # always bytes: the frame starts with the size and the header
        pieces[0] = _INT32.pack(size) + head[4:]
        return ResponseFrame(pieces, size + 4)


def compact_length(length: int) -> bytes:
    """A compact (flexible-version) bytes length: unsigned varint of length + 1."""
    value = length + 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _append_bytes(pieces: list, data: bytes) -> None:
    # Neighbouring bytes pieces go out as one write.
    if not data:
        return
    if pieces and type(pieces[-1]) is not FileRegion:
        pieces[-1] += data
    else:
        pieces.append(data)
