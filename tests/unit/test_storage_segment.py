import os

import pytest

from storage.log import LogConfig
from storage.record_batch import assign_offsets, parse_header, validate_batches
from storage.records import SimpleRecord, build_batch
from storage.segment import FileSlice, LogSegment

BASE = 100


def batch_at(base, n=2, size=50, ts=1_000):
    buf = bytearray(build_batch([SimpleRecord(None, b"v" * size, (), ts + i) for i in range(n)]))
    assign_offsets(buf, validate_batches(buf, None), base, 0)
    return bytes(buf)


@pytest.fixture
def seg(tmp_path):
    s = LogSegment(str(tmp_path), BASE, LogConfig(index_interval_bytes=150), create=True, now_ms=5)
    off = BASE
    batches = []
    for i in range(20):
        b = batch_at(off, n=1 + i % 3, size=40 + i * 7, ts=1_000 + i * 10)
        h = parse_header(b)
        s.append(h.last_offset, h.max_timestamp, h.last_offset, b)
        batches.append(b)
        off = h.last_offset + 1
    s.batches = batches
    return s


def test_file_names_and_state(seg, tmp_path):
    assert sorted(os.listdir(tmp_path)) == [f"{BASE:020d}.index", f"{BASE:020d}.log", f"{BASE:020d}.timeindex"]
    assert seg.size == sum(map(len, seg.batches))
    assert seg.next_offset == parse_header(seg.batches[-1]).last_offset + 1
    assert seg.max_timestamp == max(parse_header(b).max_timestamp for b in seg.batches)
    assert seg.rolling_based_timestamp == parse_header(seg.batches[0]).max_timestamp
    assert seg.index.entries > 3
    with pytest.raises(FileExistsError):
        LogSegment(str(tmp_path), BASE, LogConfig(), create=True)


def test_read_slice(seg):
    b0, b1, b2 = seg.batches[:3]
    h1 = parse_header(b1)
    sl = seg.read_slice(h1.base_offset, 1)
    assert sl == FileSlice(seg.log_path, len(b0), len(b1), h1.base_offset, h1.last_offset + 1)
    assert seg.read_bytes(sl.position, sl.length) == b1
    assert seg.read_slice(h1.base_offset, 1, min_one_batch=False).length == 0
    sl = seg.read_slice(BASE, len(b0) + len(b1) + len(b2) - 1)
    assert (sl.position, sl.length) == (0, len(b0) + len(b1))
    sl = seg.read_slice(BASE, 10**9, max_offset_exclusive=h1.last_offset)
    assert sl.length == len(b0)  # batch 1 ends at or beyond the max offset
    sl = seg.read_slice(BASE, 10**9, max_offset_exclusive=h1.last_offset + 1)
    assert sl.length == len(b0) + len(b1) and sl.next_offset == h1.last_offset + 1
    assert seg.read_slice(h1.base_offset, 10**9, max_offset_exclusive=h1.base_offset).length == 0
    assert seg.read_slice(seg.next_offset, 100) is None
    assert seg.read_slice(BASE - 50, 1).position == 0  # before the base: first batch
    whole = seg.read_slice(BASE, 10**9)
    assert whole.length == seg.size and whole.next_offset == seg.next_offset


def test_recover_rebuilds_identical_indexes(seg):
    seg.flush()
    index_bytes = open(seg.index.path, "rb").read()
    assert seg.recover() == 0
    seg.flush()
    assert open(seg.index.path, "rb").read() == index_bytes
    # partial recovery from a recovery point gives the same result
    assert seg.recover(from_offset=seg.next_offset) == 0
    seg.flush()
    assert open(seg.index.path, "rb").read() == index_bytes


def test_recover_max_batch_bytes_cuts(seg):
    sizes = [len(b) for b in seg.batches]
    limit = max(sizes[:5])
    first_big = next(i for i, s in enumerate(sizes) if s > limit)
    truncated = seg.recover(max_batch_bytes=limit)
    assert truncated == sum(sizes[first_big:])
    assert seg.size == sum(sizes[:first_big])


def test_recover_reports_epochs(tmp_path):
    s = LogSegment(str(tmp_path), 0, LogConfig(), create=True)
    off = 0
    for epoch in (0, 0, 3, 3, 7):
        buf = bytearray(build_batch([(b"k", b"v")]))
        assign_offsets(buf, validate_batches(buf, None), off, epoch)
        s.append(off, 0, off, buf)
        off += 1
    seen = []
    s.recover(epoch_observer=lambda e, o: seen.append((e, o)))
    assert seen == [(0, 0), (3, 2), (7, 4)]


def test_truncate_to(seg):
    b = seg.batches
    h5 = parse_header(b[5])
    removed = seg.truncate_to(h5.base_offset)
    assert removed == sum(map(len, b[5:]))
    assert seg.size == sum(map(len, b[:5]))
    assert seg.next_offset == h5.base_offset
    assert seg.max_timestamp == max(parse_header(x).max_timestamp for x in b[:5])
    h2 = parse_header(b[2])
    assert h2.record_count == 3
    seg.truncate_to(h2.base_offset + 1)  # inside batch 2: the batch goes
    assert seg.next_offset == h2.base_offset
    assert seg.truncate_to(10**9) == 0
    seg.truncate_to(0)
    assert seg.size == 0 and seg.next_offset == BASE and seg.max_timestamp == -1
    assert seg.index.entries == 0 and seg.time_index.entries == 0


def test_lazy_segment_reads_next_offset_from_index(seg, tmp_path):
    seg.close()
    again = LogSegment(str(tmp_path), BASE, LogConfig(index_interval_bytes=150))
    assert again.next_offset == parse_header(seg.batches[-1]).last_offset + 1
    assert again.max_timestamp == max(parse_header(x).max_timestamp for x in seg.batches)
    h = parse_header(seg.batches[7])
    assert again.read_bytes(again.read_slice(h.base_offset, 1).position, len(seg.batches[7])) == seg.batches[7]
    assert again.find_offset_by_timestamp(h.base_timestamp, 0) == (h.base_offset, h.base_timestamp)
    again.close()


def test_delete(seg, tmp_path):
    seg.delete()
    assert os.listdir(tmp_path) == []
