"""The edge's reads of the segment slices a local leader names in its
answers (core.replica_messages.FileSlice): as bytes, through the checked
reader every reader of slices shares (storage/slice_reader.py, which keeps
the edge's cache of open fds), or, for a response going out on a socket
that can sendfile, as file regions sent without copying (net/file_region.py).

A segment may be replaced at its path (compaction swaps a new file in) or
deleted (retention) between the leader's answer and this read: the bytes
must come from the very file (inode) the leader named, and start with the
batch it named; otherwise SliceChangedError (a FileNotFoundError) and the
caller asks the leader again.
"""
from __future__ import annotations

import os

from core.replica_messages import FileSlice
from net.file_region import FdBudget, FileRecords, FileRegion
from storage.slice_reader import SliceChangedError, SliceReader

# Slices shorter than this are read as bytes even when sendfile could serve
# them: below it the extra event-loop turn of a sendfile costs more than the
# copies it saves.
SENDFILE_MIN_BYTES = 64 * 1024


class SegmentReader:
    def __init__(self, max_open_fds: int = 256, max_region_fds: int = 1024):
        self.slices = SliceReader(max_open_fds)
        # fds duplicated for file regions of responses not yet written.
        self.region_fds = FdBudget(max_region_fds)

    def read_slices(self, slices: list) -> bytes:
        """The concatenated, checked bytes of ``slices``."""
        return self.slices.read_all(slices)

    def read_records(self, slices: list, zero_copy: bool) -> bytes | FileRecords:
        """The records of `slices` as bytes, or, with `zero_copy` (the response
        goes out on a socket that can sendfile), as FileRecords whose large
        slices are regions of the checked files, sent without copying. Same
        checks as read_slices."""
        if not zero_copy:
            return self.slices.read_all(slices)
        read = self.slices.read
        pieces: list = []
        try:
            for s in slices:
                region = None
                if s.length >= SENDFILE_MIN_BYTES and self.region_fds.try_acquire():
                    try:
                        region = self._region(s)
                    finally:
                        if region is None:
                            self.region_fds.release()
                pieces.append(region if region is not None else read(*s))
        except BaseException:
            for piece in pieces:
                if type(piece) is FileRegion:
                    piece.close()
            raise
        if all(type(p) is bytes for p in pieces):
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return FileRecords(pieces)

    def _region(self, piece: FileSlice) -> FileRegion | None:
        """A region of the file the leader named (inode), holding the whole slice
        and starting with the batch it named; sent later from a duplicate fd,
        so neither the fd cache nor a swap at the path can change its file.
        None when no fd can be spared (then bytes are read)."""
        path = piece.path
        for _attempt in range(2):
            fd, fd_inode = self.slices.open(path)
            if fd_inode == piece.inode:
                try:
                    region_fd = os.dup(fd)
                except OSError:  # out of fds
                    return None
                region = FileRegion(region_fd, piece.position, piece.length, piece.base_offset, self.region_fds)
                if region.intact():
                    return region
                region.budget = None  # the caller releases the budget it acquired
                region.close()
            self.slices.forget(path)  # a cached fd of a replaced file: reopen once
        raise SliceChangedError(path)

    def forget_fd(self, path: str) -> None:
        self.slices.forget(path)

    def close(self) -> None:
        self.slices.close()
