"""The one checked reader of leader-named slices (storage/slice_reader.py):
bytes come only from the file the leader named (inode), whole, starting
with the batch it named; its fd cache is bounded."""
import os
import struct

import pytest

from core.replica_messages import FileSlice
from storage.slice_reader import SliceChangedError, SliceReader, read_slices


def batch_at(base_offset: int, size: int = 64) -> bytes:
    return struct.pack(">q", base_offset) + b"\x05" * (size - 8)


def _segment(tmp_path, name: str, data: bytes) -> tuple[str, int]:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path), os.stat(path).st_ino


def test_reads_whole_checked_slices(tmp_path):
    path, inode = _segment(tmp_path, "00.log", batch_at(10) + batch_at(20))
    with SliceReader() as reader:
        assert reader.read(path, 0, 128, 10, inode) == batch_at(10) + batch_at(20)
        assert reader.read(path, 64, 64, 20, inode) == batch_at(20)
        slices = [FileSlice(path, 64, 64, 20, inode), FileSlice(path, 0, 64, 10, inode)]
        assert reader.read_all(slices) == batch_at(20) + batch_at(10)
    assert read_slices([FileSlice(path, 0, 64, 10, inode)]) == batch_at(10)


def test_a_file_replaced_at_the_same_path_is_refused(tmp_path):
    path, inode = _segment(tmp_path, "00.log", batch_at(10) + batch_at(20))
    swapped, _ = _segment(tmp_path, "00.log.swap", batch_at(10) + batch_at(20))  # same bytes, another file
    os.replace(swapped, path)
    with SliceReader() as reader:
        with pytest.raises(SliceChangedError):
            reader.read(path, 0, 128, 10, inode)
        # The file at the path now is readable under its own inode.
        assert reader.read(path, 0, 64, 10, os.stat(path).st_ino) == batch_at(10)
    with pytest.raises(FileNotFoundError):  # callers catch FileNotFoundError and ask the leader again
        read_slices([FileSlice(path, 0, 128, 10, inode)])


def test_a_cached_fd_of_a_replaced_file_is_reopened_once(tmp_path):
    path, inode = _segment(tmp_path, "00.log", batch_at(10))
    with SliceReader() as reader:
        assert reader.read(path, 0, 64, 10, inode) == batch_at(10)  # the fd is cached now
        swapped, new_inode = _segment(tmp_path, "swap", batch_at(30))
        os.replace(swapped, path)
        assert reader.read(path, 0, 64, 30, new_inode) == batch_at(30)
        assert reader.open(path)[1] == new_inode


def test_a_truncated_file_is_refused(tmp_path):
    path, inode = _segment(tmp_path, "00.log", batch_at(10) + batch_at(20))
    os.truncate(path, 100)  # retention or a follower's truncation cut the second batch
    with SliceReader() as reader:
        assert reader.read(path, 0, 64, 10, inode) == batch_at(10)
        with pytest.raises(SliceChangedError):
            reader.read(path, 64, 64, 20, inode)
        with pytest.raises(SliceChangedError):
            reader.read(path, 0, 128, 10, inode)


def test_a_slice_not_starting_with_the_named_batch_is_refused(tmp_path):
    path, inode = _segment(tmp_path, "00.log", batch_at(10) + batch_at(20))
    with SliceReader() as reader:
        with pytest.raises(SliceChangedError):
            reader.read(path, 0, 64, 11, inode)
        with pytest.raises(SliceChangedError):
            reader.read(path, 64, 64, 10, inode)
        # base offset < 0: not known to the caller, not checked
        assert reader.read(path, 64, 64, -1, inode) == batch_at(20)


def test_a_deleted_file_is_refused(tmp_path):
    path, inode = _segment(tmp_path, "00.log", batch_at(10))
    os.unlink(path)
    with SliceReader() as reader, pytest.raises(FileNotFoundError):
        reader.read(path, 0, 64, 10, inode)


def test_the_fd_cache_evicts_the_least_recently_used(tmp_path):
    segments = [_segment(tmp_path, f"{i:02d}.log", batch_at(i)) for i in range(4)]
    reader = SliceReader(max_open_fds=2)
    (p0, i0), (p1, i1), (p2, i2), (p3, i3) = segments
    reader.read(p0, 0, 64, 0, i0)
    reader.read(p1, 0, 64, 1, i1)
    fd1 = reader.open(p1)[0]
    reader.read(p0, 0, 64, 0, i0)  # p0 is the most recently used now
    reader.read(p2, 0, 64, 2, i2)  # evicts p1
    assert list(reader._fds) == [p0, p2]
    with pytest.raises(OSError):
        os.fstat(fd1)  # closed on eviction
    reader.read(p3, 0, 64, 3, i3)
    assert list(reader._fds) == [p2, p3]
    assert reader.read(p1, 0, 64, 1, i1) == batch_at(1)  # reopened on demand
    reader.forget(p1)
    assert p1 not in reader._fds
    fds = [fd for fd, _ino in reader._fds.values()]
    reader.close()
    assert not reader._fds
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
