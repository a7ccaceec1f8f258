import os
import random
import struct

import pytest

from storage.errors import CorruptIndexError
from storage.index import IndexFullError, OffsetIndex, TimeIndex

BASE = 1000


def offset_index(tmp_path, max_bytes=10485760):
    idx = OffsetIndex(str(tmp_path / f"{BASE:020d}.index"), BASE, max_bytes)
    idx.create()
    return idx


def time_index(tmp_path, max_bytes=10485760):
    idx = TimeIndex(str(tmp_path / f"{BASE:020d}.timeindex"), BASE, max_bytes)
    idx.create()
    return idx


def test_offset_index_lookup(tmp_path):
    idx = offset_index(tmp_path)
    entries = [(BASE + 5, 0), (BASE + 9, 4200), (BASE + 30, 9000), (BASE + 31, 13000)]
    for o, p in entries:
        idx.append(o, p)
    assert idx.entries == 4
    assert idx.lookup(BASE - 1) == (BASE, 0)
    assert idx.lookup(BASE + 4) == (BASE, 0)
    assert idx.lookup(BASE + 5) == (BASE + 5, 0)
    assert idx.lookup(BASE + 20) == (BASE + 9, 4200)
    assert idx.lookup(BASE + 31) == (BASE + 31, 13000)
    assert idx.lookup(BASE + 10**6) == (BASE + 31, 13000)
    assert idx.lookup_position(9000) == (BASE + 30, 9000)
    assert idx.lookup_position(8999) == (BASE + 9, 4200)
    assert idx.last_offset == BASE + 31


def test_offset_index_file_format_and_reload(tmp_path):
    idx = offset_index(tmp_path)
    idx.append(BASE + 3, 77)
    idx.append_many([BASE + 8, BASE + 12], [5000, 9000])
    idx.flush()
    raw = open(idx.path, "rb").read()
    assert raw == struct.pack(">iiiiii", 3, 77, 8, 5000, 12, 9000)
    idx.close()
    again = OffsetIndex(idx.path, BASE)
    assert again.entries == 3
    assert again.lookup(BASE + 11) == (BASE + 8, 5000)
    again.sanity_check(10000)


def test_offset_index_rejects_non_increasing_and_full(tmp_path):
    idx = offset_index(tmp_path, max_bytes=24)
    idx.append(BASE + 1, 0)
    with pytest.raises(ValueError):
        idx.append(BASE + 1, 10)
    with pytest.raises(ValueError):
        idx.append(BASE - 1, 10)
    idx.append(BASE + 2, 10)
    idx.append(BASE + 3, 20)
    assert idx.is_full
    with pytest.raises(IndexFullError):
        idx.append(BASE + 4, 30)


def test_offset_index_truncate(tmp_path):
    idx = offset_index(tmp_path)
    for i in range(10):
        idx.append(BASE + i * 10, i * 100)
    idx.truncate_to(BASE + 50)
    assert idx.entries == 5 and idx.last_offset == BASE + 40
    idx.truncate_to(BASE + 41)
    assert idx.entries == 5
    idx.flush()
    assert os.path.getsize(idx.path) == 40
    idx.reset()
    assert idx.entries == 0 and os.path.getsize(idx.path) == 0
    assert idx.lookup(BASE + 5) == (BASE, 0)


def test_trailing_partial_entry_trimmed_on_open(tmp_path):
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">ii", 1, 10) + b"\x00\x00\x00")
    idx = OffsetIndex(str(path), BASE)
    assert idx.entries == 1
    assert os.path.getsize(path) == 8


@pytest.mark.parametrize(
    "entries,log_size",
    [
        ([(5, 10), (3, 20)], 100),  # offsets decrease
        ([(5, 10), (6, 5)], 100),  # positions decrease
        ([(5, 10), (5, 20)], 100),  # duplicate offsets
        ([(5, 10), (6, 200)], 100),  # beyond the log
        ([(-3, 10)], 100),  # negative relative offset
    ],
)
def test_offset_index_sanity_check(tmp_path, entries, log_size):
    path = tmp_path / "x.index"
    path.write_bytes(b"".join(struct.pack(">ii", o, p) for o, p in entries))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(path), BASE).sanity_check(log_size)


def test_time_index_semantics(tmp_path):
    idx = time_index(tmp_path)
    assert idx.last_entry == (-1, BASE)
    assert not idx.maybe_append(-1, BASE)  # no timestamp: nothing to index
    assert idx.maybe_append(100, BASE + 3)
    assert not idx.maybe_append(100, BASE + 4)  # not larger: skipped
    assert idx.maybe_append(150, BASE + 4)
    idx.append_many([(170, BASE + 9), (200, BASE + 9)])
    with pytest.raises(ValueError):
        idx.maybe_append(300, BASE + 2)  # offset went backwards
    assert idx.last_entry == (200, BASE + 9)
    assert idx.lookup(50) == BASE
    assert idx.lookup(100) == BASE + 3
    assert idx.lookup(160) == BASE + 4
    assert idx.lookup(10**12) == BASE + 9
    idx.flush()
    assert open(idx.path, "rb").read()[:12] == struct.pack(">qi", 100, 3)
    idx.close()
    again = TimeIndex(idx.path, BASE)
    assert again.entries == 4
    again.sanity_check(BASE + 10)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(BASE + 9)
    again.truncate_to(BASE + 9)
    assert again.last_entry == (150, BASE + 4)


def test_time_index_full_keeps_a_slot_for_roll(tmp_path):
    idx = time_index(tmp_path, max_bytes=36)  # three entries
    idx.maybe_append(1, BASE)
    idx.maybe_append(2, BASE + 1)
    assert idx.is_full
    with pytest.raises(IndexFullError):
        idx.maybe_append(3, BASE + 2)
    assert idx.maybe_append(3, BASE + 2, skip_full_check=True)


def test_time_index_sanity_check_unsorted(tmp_path):
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qi", 50, 1) + struct.pack(">qi", 40, 2))
    with pytest.raises(CorruptIndexError):
        TimeIndex(str(path), BASE).sanity_check()


def test_offset_index_random_lookup_matches_linear_scan(tmp_path):
    rnd = random.Random(7)
    idx = offset_index(tmp_path)
    offs, pos = sorted(rnd.sample(range(1, 100000), 500)), sorted(rnd.sample(range(1, 10**8), 500))
    idx.append_many([BASE + o for o in offs], pos)
    for _ in range(500):
        t = BASE + rnd.randrange(-10, 100010)
        best = (BASE, 0)
        for o, p in zip(offs, pos):
            if BASE + o <= t:
                best = (BASE + o, p)
        assert idx.lookup(t) == best
