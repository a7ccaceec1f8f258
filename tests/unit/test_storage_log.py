import os
import random
import struct

import pytest

from storage.errors import (
    InvalidRecordsError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordsFault,
    UnexpectedAppendOffsetError,
)
from storage.log import Log, LogConfig, parse_partition_dir_name, partition_dir_name
from storage.record_batch import assign_offsets, parse_header, validate_batches
from storage.records import SimpleRecord, build_batch, iter_records


def make_batch(n=2, value_size=30, ts=1_000, codec=0, key=b"k"):
    return build_batch(
        [SimpleRecord(key + b"%d" % i, bytes([i % 251]) * value_size, (), ts + i) for i in range(n)], codec
    )


def stamp(batch: bytes, base_offset: int, epoch: int) -> bytes:
    buf = bytearray(batch)
    assign_offsets(buf, validate_batches(buf, None), base_offset, epoch)
    return bytes(buf)


class Model:
    """Appends to a Log and remembers the exact bytes each batch should have."""

    def __init__(self, log: Log):
        self.log = log
        self.batches: list[tuple[int, int, bytes]] = []  # (base, last, bytes)

    def append(self, batch: bytes, epoch: int = 0, now_ms: int = 10_000):
        info = self.log.append_as_leader(batch, epoch, now_ms)
        h = parse_header(batch)
        assert info.first_offset == (self.batches[-1][1] + 1 if self.batches else info.first_offset)
        self.batches.append((info.first_offset, info.last_offset, stamp(batch, info.first_offset, epoch)))
        assert info.last_offset == info.first_offset + h.last_offset_delta
        return info

    def all_bytes(self, from_offset=0):
        return b"".join(b for base, last, b in self.batches if last >= from_offset)


def open_log(path, recovery_point=0, log_start_offset=0, **cfg):
    return Log(str(path), LogConfig(**cfg), recovery_point, log_start_offset, now_ms=10_000)


SMALL = dict(segment_bytes=1024, index_interval_bytes=64)


@pytest.fixture
def filled(tmp_path):
    rnd = random.Random(3)
    log = open_log(tmp_path / "topic-0", **SMALL)
    m = Model(log)
    for i in range(120):
        m.append(make_batch(rnd.randint(1, 5), rnd.randint(1, 120), ts=1_000 + i * 10, codec=i % 5))
    return m


def test_partition_dir_names():
    assert partition_dir_name("my-topic", 3) == "my-topic-3"
    assert parse_partition_dir_name("my-topic-3") == ("my-topic", 3)
    with pytest.raises(ValueError):
        parse_partition_dir_name("nodash")


def test_append_and_read_across_rolls_exact_bytes(filled):
    log = filled.log
    assert len(log.segments) > 5
    assert log.log_end_offset == filled.batches[-1][1] + 1
    assert log.read_bytes(0, 1 << 30) == filled.all_bytes()
    # segment boundaries fall on batch boundaries, contiguous offsets
    segs = log.segments
    for a, b in zip(segs, segs[1:]):
        assert a.next_offset == b.base_offset
        assert a.size <= 1024
    # the on-disk files are exactly the concatenated batches
    data = b"".join(open(s.log_path, "rb").read() for s in segs)
    assert data == filled.all_bytes()
    offsets = [r.offset for r in iter_records(data, verify_crc=True)]
    assert offsets == list(range(log.log_end_offset))


def test_read_from_every_offset_returns_containing_batch(filled):
    log = filled.log
    for base, last, b in filled.batches:
        for off in range(base, last + 1):
            slices = log.read(off, 1)
            assert len(slices) == 1
            sl = slices[0]
            assert (sl.base_offset, sl.length) == (base, len(b))
            assert log.read_bytes(off, 1) == b
            assert log.read(off, 1, min_one_batch=False) == []


def test_read_honours_max_bytes(filled):
    log = filled.log
    rnd = random.Random(5)
    for _ in range(300):
        start_idx = rnd.randrange(len(filled.batches))
        max_bytes = rnd.randint(0, 3000)
        start = rnd.randint(filled.batches[start_idx][0], filled.batches[start_idx][1])
        expected = []
        total = 0
        for base, last, b in filled.batches[start_idx:]:
            if total + len(b) > max_bytes and expected:
                break
            if total + len(b) > max_bytes:
                expected.append(b)  # min_one_batch
                break
            expected.append(b)
            total += len(b)
        got = log.read_bytes(start, max_bytes)
        assert got == b"".join(expected)
        slices = log.read(start, max_bytes)
        assert sum(s.length for s in slices) == len(got)
        assert slices[-1].next_offset == filled.batches[start_idx + len(expected) - 1][1] + 1
        for s in slices:
            validate_batches(open(s.path, "rb").read()[s.position : s.position + s.length], None,
                             from_client=False)


def test_read_honours_max_offset(filled):
    log = filled.log
    rnd = random.Random(11)
    leo = log.log_end_offset
    for _ in range(200):
        start = rnd.randrange(leo)
        max_offset = rnd.randint(start, leo + 5)
        expected = b"".join(b for base, last, b in filled.batches if last >= start and last < max_offset)
        assert log.read_bytes(start, 1 << 30, max_offset) == expected


def test_read_bounds(filled):
    log = filled.log
    leo = log.log_end_offset
    assert log.read(leo, 100) == []
    with pytest.raises(OffsetOutOfRangeError) as ei:
        log.read(leo + 1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_reopen_resumes_log_end(tmp_path, filled):
    log = filled.log
    leo = log.log_end_offset
    expected = filled.all_bytes()
    log.close()
    assert log.recovery_point == leo
    with pytest.raises(LogClosedError):
        log.append_as_leader(make_batch(), 0, 1)
    again = open_log(log.dir, recovery_point=leo, **SMALL)
    assert again.log_end_offset == leo
    assert again.read_bytes(0, 1 << 30) == expected
    info = again.append_as_leader(make_batch(3), 0, 20_000)
    assert info.first_offset == leo and info.last_offset == leo + 2
    again.close()
    third = open_log(log.dir, recovery_point=0, **SMALL)  # full recovery agrees
    assert third.log_end_offset == leo + 3
    assert third.read_bytes(0, 1 << 30)[: len(expected)] == expected


@pytest.mark.parametrize("recovery", ["zero", "stale_end"])
@pytest.mark.parametrize("cut", [1, 11, 30, 61, -1])
def test_torn_tail_is_cut(tmp_path, recovery, cut):
    log = open_log(tmp_path / "t-0", **SMALL)
    m = Model(log)
    for i in range(30):
        m.append(make_batch(3, 40, ts=i))
    old_leo = log.log_end_offset
    active = log.active_segment
    log.close()
    last_base, last_last, last_bytes = m.batches[-1]
    size = os.path.getsize(active.log_path)
    keep = size - len(last_bytes) + (cut if cut > 0 else len(last_bytes) - 1)
    os.truncate(active.log_path, keep)
    rp = 0 if recovery == "zero" else old_leo
    again = open_log(tmp_path / "t-0", recovery_point=rp, **SMALL)
    assert again.log_end_offset == last_base
    assert again.read_bytes(0, 1 << 30) == b"".join(b for _, _, b in m.batches[:-1])
    assert os.path.getsize(active.log_path) == size - len(last_bytes)
    assert again.recovery_point <= last_base
    # appends continue from the valid prefix
    info = again.append_as_leader(make_batch(1), 0, 50_000)
    assert info.first_offset == last_base


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"\xff" * 7, os.urandom(500)])
def test_garbage_tail_is_cut(tmp_path, garbage):
    log = open_log(tmp_path / "t-0", **SMALL)
    m = Model(log)
    for i in range(20):
        m.append(make_batch(2, 10))
    leo = log.log_end_offset
    path = log.active_segment.log_path
    log.close()
    with open(path, "ab") as f:
        f.write(garbage)
    again = open_log(tmp_path / "t-0", recovery_point=leo, **SMALL)
    assert again.log_end_offset == leo
    assert again.read_bytes(0, 1 << 30) == m.all_bytes()
    with pytest.raises(OffsetOutOfRangeError):
        again.read(leo + 1, 100)


def test_corruption_in_middle_segment_drops_later_segments(tmp_path):
    log = open_log(tmp_path / "t-0", **SMALL)
    m = Model(log)
    for i in range(60):
        m.append(make_batch(2, 50))
    segs = log.segments
    victim = segs[2]
    log.close()
    data = bytearray(open(victim.log_path, "rb").read())
    first = parse_header(data)
    data[first.size + 70] ^= 0xFF  # corrupt the second batch's payload
    open(victim.log_path, "wb").write(data)
    # recovery point below the victim: it and everything after get re-validated
    again = open_log(tmp_path / "t-0", recovery_point=victim.base_offset, **SMALL)
    assert again.log_end_offset == victim.base_offset + first.last_offset_delta + 1
    assert len(again.segments) == 3
    assert again.read_bytes(0, 1 << 30) == m.all_bytes()[: sum(s.size for s in segs[:2]) + first.size]
    assert not os.path.exists(segs[3].log_path)


def test_missing_index_is_rebuilt(tmp_path, filled):
    log = filled.log
    segs = log.segments
    leo = log.log_end_offset
    log.close()
    originals = {s.index.path: open(s.index.path, "rb").read() for s in segs}
    times = {s.time_index.path: open(s.time_index.path, "rb").read() for s in segs}
    os.unlink(segs[1].index.path)
    os.unlink(segs[-1].time_index.path)
    os.unlink(segs[3].time_index.path)
    again = open_log(log.dir, recovery_point=leo, **SMALL)
    assert again.read_bytes(0, 1 << 30) == filled.all_bytes()
    again.close()
    for path, content in originals.items():
        assert open(path, "rb").read() == content
    for path, content in times.items():
        assert open(path, "rb").read() == content


def test_corrupt_index_is_rebuilt_on_use(tmp_path, filled):
    log = filled.log
    segs = log.segments
    leo = log.log_end_offset
    log.close()
    idx_path = segs[2].index.path
    original = open(idx_path, "rb").read()
    assert len(original) >= 16
    # entries out of order and pointing past the segment
    open(idx_path, "wb").write(struct.pack(">ii", 5, 900000) + struct.pack(">ii", 1, 3))
    again = open_log(log.dir, recovery_point=leo, **SMALL)
    for base, last, b in filled.batches:
        assert again.read_bytes(base, 1) == b
    again.close()
    assert open(idx_path, "rb").read() == original


def test_index_entries_match_kafka_layout(filled):
    """Each index entry maps a batch's last offset to that batch's position,
    which is what Kafka's own recovery writes and DumpLogSegments checks."""
    for seg in filled.log.segments:
        data = open(seg.log_path, "rb").read()
        for i in range(seg.index.entries):
            off, pos = seg.index.entry(i)
            assert parse_header(data, pos).last_offset == off
        assert seg.index.entries > 0


def test_timestamp_lookup(tmp_path):
    log = open_log(tmp_path / "t-0", **SMALL)
    # timestamps: batch i holds records i*100 + j*10
    for i in range(40):
        recs = [SimpleRecord(None, b"x" * 20, (), i * 100 + j * 10) for j in range(3)]
        log.append_as_leader(build_batch(recs, i % 5), 0, 1)
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(5) == (1, 10)
    assert log.offset_for_timestamp(100) == (3, 100)
    assert log.offset_for_timestamp(2015) == (62, 2020)
    assert log.offset_for_timestamp(3920) == (119, 3920)
    assert log.offset_for_timestamp(3921) is None
    assert log.offset_for_timestamp(-1) == (120, -1)
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_of_max_timestamp() == (119, 3920)
    assert log.offset_for_timestamp(-3) == (119, 3920)
    for ts in range(0, 3921, 7):
        expect = next((o, t) for o, t in ((i * 3 + j, i * 100 + j * 10) for i in range(40) for j in range(3))
                      if t >= ts)
        assert log.offset_for_timestamp(ts) == expect
    # the same answers after reopening (indexes loaded from disk)
    leo = log.log_end_offset
    log.close()
    again = open_log(tmp_path / "t-0", recovery_point=leo, **SMALL)
    assert again.offset_for_timestamp(2015) == (62, 2020)
    assert again.offset_of_max_timestamp() == (119, 3920)


def test_timestamp_lookup_out_of_order_timestamps(tmp_path):
    log = open_log(tmp_path / "t-0", **SMALL)
    stamps = [500, 100, 900, 300, 900, 1000, 50]
    for ts in stamps:
        log.append_as_leader(build_batch([SimpleRecord(None, b"y" * 100, (), ts)]), 0, 1)
    assert log.offset_for_timestamp(200) == (0, 500)
    assert log.offset_for_timestamp(600) == (2, 900)
    assert log.offset_for_timestamp(950) == (5, 1000)
    assert log.offset_of_max_timestamp() == (5, 1000)


def test_log_append_time(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(make_batch(3, ts=5) + make_batch(2, ts=7), 0, now_ms=777_000)
    assert info.log_append_time == 777_000 and info.max_timestamp == 777_000
    data = log.read_bytes(0, 1 << 20)
    headers = validate_batches(data, None)
    assert all(h.timestamp_type == 1 and h.max_timestamp == 777_000 for h in headers)
    assert [r.timestamp for r in iter_records(data)] == [777_000] * 5
    assert log.offset_for_timestamp(777_000) == (0, 777_000)


def test_log_append_time_reaches_producer_state(tmp_path):
    """The exact append path stamps offsets and LogAppendTime after parsing:
    producer state records the stamped offsets and the broker's timestamp."""
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    log.append_as_leader(make_batch(2), 0, now_ms=100_000)
    batch = build_batch([SimpleRecord(b"k", b"v", (), 5)], producer_id=9, producer_epoch=0, base_sequence=0)
    info = log.append_as_leader(batch, 0, now_ms=777_000)
    assert info.first_offset == 2
    entry = log.producer_state.last_entry(9)
    assert entry.last_timestamp == 777_000
    assert entry.last_data_offset == 2


def test_leader_epochs(tmp_path):
    log = open_log(tmp_path / "t-0", **SMALL)
    for epoch, n in [(0, 5), (0, 5), (2, 3), (2, 3), (5, 4)]:
        for _ in range(n):
            log.append_as_leader(make_batch(2), epoch, 1)
    # epoch 0: offsets 0..19, epoch 2: 20..31, epoch 5: 32..39
    cache = log.leader_epoch_cache
    assert cache.entries() == [(0, 0), (2, 20), (5, 32)]
    assert log.end_offset_for_epoch(0) == (0, 20)
    assert log.end_offset_for_epoch(1) == (0, 20)
    assert log.end_offset_for_epoch(2) == (2, 32)
    assert log.end_offset_for_epoch(5) == (5, 40)
    assert log.end_offset_for_epoch(9) is None
    # the batches carry their epoch
    epochs = {parse_header(b).partition_leader_epoch for b in [log.read_bytes(o, 1) for o in (0, 20, 39)]}
    assert epochs == {0, 2, 5}
    log.truncate_to(25)
    assert log.log_end_offset == 24  # batch [24, 25] removed whole
    assert cache.entries() == [(0, 0), (2, 20)]
    log.close()
    # a lost checkpoint is rebuilt from the batches during full recovery
    os.unlink(os.path.join(log.dir, "leader-epoch-checkpoint"))
    again = open_log(log.dir, **SMALL)
    assert again.leader_epoch_cache.entries() == [(0, 0), (2, 20)]


def test_follower_append_replicates_bytes(tmp_path):
    leader = open_log(tmp_path / "leader" / "t-0", **SMALL)
    m = Model(leader)
    for i in range(50):
        m.append(make_batch(random.Random(i).randint(1, 4), 40), epoch=i // 20)
    follower = open_log(tmp_path / "follower" / "t-0", **SMALL)
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read_bytes(offset, 700)
        info = follower.append_as_follower(chunk + chunk[:25])  # partial trailing batch ignored
        assert info.first_offset == offset
        offset = info.last_offset + 1
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.read_bytes(0, 1 << 30) == leader.read_bytes(0, 1 << 30)
    assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries()
    assert follower.append_as_follower(b"").num_batches == 0
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(leader.read_bytes(0, 100))
    with pytest.raises(InvalidRecordsError):
        bad = bytearray(stamp(make_batch(), follower.log_end_offset, 3))
        bad[-1] ^= 1
        follower.append_as_follower(bad)


def test_follower_gap_rules(tmp_path):
    log = open_log(tmp_path / "t-0")
    b = stamp(make_batch(2), 5, 0)
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(b)
    info = log.append_as_follower(b, allow_offset_gap=True)
    assert (info.first_offset, log.log_end_offset) == (5, 7)
    # the empty segment at 0 is replaced by one starting at the gap
    assert [s.base_offset for s in log.segments] == [5]
    assert log.read_bytes(5, 100) == b
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(stamp(make_batch(2), 7, 0) + stamp(make_batch(1), 10, 0))
    log.append_as_follower(stamp(make_batch(1), 9, 0), allow_offset_gap=True)
    assert [s.base_offset for s in log.segments] == [5, 9]
    log.close()
    assert open_log(tmp_path / "t-0").log_end_offset == 10

    compacted = open_log(tmp_path / "c-0", cleanup_policy="compact")
    gappy = stamp(make_batch(2), 0, 0) + stamp(make_batch(1), 10, 0)
    compacted.append_as_follower(gappy)  # gaps are normal in compacted logs
    compacted.close()
    again = open_log(tmp_path / "c-0", cleanup_policy="compact")
    assert again.log_end_offset == 11 and again.read_bytes(0, 1000) == gappy
    # a non-compacted log treats the same gap as damage
    assert open_log(tmp_path / "c-0").log_end_offset == 2


def test_invalid_appends_write_nothing(tmp_path):
    log = open_log(tmp_path / "t-0", max_message_bytes=500, segment_bytes=2000)
    log.append_as_leader(make_batch(), 0, 1)
    size = log.size_in_bytes
    bad = bytearray(make_batch())
    bad[-2] ^= 0x40
    cases = [
        (bytes(bad), RecordsFault.corrupt_message),
        (make_batch(1, 600), RecordsFault.message_too_large),
        (b"", RecordsFault.invalid_record),
        (make_batch(1, 10) + make_batch(1, 10)[:20], RecordsFault.corrupt_message),
        (b"".join(make_batch(1, 300) for _ in range(6)), RecordsFault.record_list_too_large),
    ]
    for payload, code in cases:
        with pytest.raises(InvalidRecordsError) as ei:
            log.append_as_leader(payload, 0, 1)
        assert ei.value.fault == code
    assert log.size_in_bytes == size and log.log_end_offset == 2


def test_bytearray_input_used_in_place(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(), 0, 1)
    buf = bytearray(make_batch(3))
    log.append_as_leader(buf, 4, 1)
    assert parse_header(buf).base_offset == 2 and parse_header(buf).partition_leader_epoch == 4
    assert log.read_bytes(2, 1) == bytes(buf)


def test_truncate_to(tmp_path, filled):
    log = filled.log
    segs = log.segments
    target_batch = filled.batches[70]
    log.truncate_to(target_batch[0])
    assert log.log_end_offset == target_batch[0]
    assert log.read_bytes(0, 1 << 30) == b"".join(b for _, _, b in filled.batches[:70])
    assert all(not os.path.exists(s.log_path) for s in segs if s.base_offset > target_batch[0])
    # truncating inside a batch removes the whole batch
    mid = filled.batches[40]
    if mid[1] > mid[0]:
        log.truncate_to(mid[0] + 1)
        assert log.log_end_offset == mid[0]
    else:
        log.truncate_to(mid[0])
    assert not log.truncate_to(10**9)
    leo = log.log_end_offset
    info = log.append_as_leader(make_batch(2), 0, 1)
    assert info.first_offset == leo
    assert log.read_bytes(0, 1 << 30) == b"".join(b for _, _, b in filled.batches[:40]) + stamp(make_batch(2), leo, 0)
    log.close()
    again = open_log(log.dir, recovery_point=0, **SMALL)
    assert again.log_end_offset == leo + 2


def test_truncate_to_segment_base_and_fully(tmp_path, filled):
    log = filled.log
    third = log.segments[3]
    log.truncate_to(third.base_offset)
    assert log.log_end_offset == third.base_offset
    assert log.active_segment.base_offset == third.base_offset and log.active_segment.size == 0
    log.truncate_fully_and_start_at(5000)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (5000, 5000, 5000)
    assert [s.base_offset for s in log.segments] == [5000]
    assert log.leader_epoch_cache.entries() == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 10)
    info = log.append_as_leader(make_batch(2), 1, 1)
    assert info.first_offset == 5000
    log.close()
    again = open_log(log.dir, recovery_point=0, log_start_offset=5000, **SMALL)
    assert (again.log_start_offset, again.log_end_offset) == (5000, 5002)
    assert sorted(f for f in os.listdir(log.dir) if f.endswith(".log")) == [f"{5000:020d}.log"]


def test_leftover_files_are_removed(tmp_path):
    log = open_log(tmp_path / "t-0", **SMALL)
    for _ in range(20):
        log.append_as_leader(make_batch(2, 50), 0, 1)
    leo = log.log_end_offset
    log.close()
    d = log.dir
    for name in ["00000000000000000000.log.deleted", "00000000000000000003.log.cleaned",
                 "00000000000000000007.log.swap", "leader-epoch-checkpoint.tmp",
                 "00000000000000099999.index", "00000000000000099999.timeindex"]:
        open(os.path.join(d, name), "wb").write(b"junk")
    open(os.path.join(d, "partition.metadata"), "w").write("version: 0\n")
    again = open_log(d, recovery_point=leo, **SMALL)
    names = set(os.listdir(d))
    assert not any(n.endswith((".deleted", ".cleaned", ".swap", ".tmp")) for n in names)
    assert "00000000000000099999.index" not in names
    assert "partition.metadata" in names
    assert again.log_end_offset == leo


def test_flush_and_recovery_point(tmp_path):
    log = open_log(tmp_path / "t-0", flush_messages=5)
    for i in range(3):
        log.append_as_leader(make_batch(1), 0, 1)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(2), 0, 1)
    assert log.recovery_point == 5
    log.append_as_leader(make_batch(1), 0, 1)
    assert log.flush(up_to_offset=5) == 5
    assert log.flush() == 6

    timed = open_log(tmp_path / "t-1", flush_ms=1000)
    timed.append_as_leader(make_batch(1), 0, now_ms=10_500)
    assert timed.recovery_point == 0
    timed.append_as_leader(make_batch(1), 0, now_ms=11_000)
    assert timed.recovery_point == 2
    timed.append_as_leader(make_batch(1), 0, now_ms=11_100)
    assert not timed.maybe_flush(11_200) and timed.recovery_point == 2
    assert timed.maybe_flush(12_100) and timed.recovery_point == 3


def test_roll_flushes_previous_segments(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=500)
    for i in range(10):
        log.append_as_leader(make_batch(2, 100), 0, 1)
    assert len(log.segments) > 2
    assert log.recovery_point == log.active_segment.base_offset


def test_roll_by_time(tmp_path):
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    log.append_as_leader(make_batch(1, ts=5_000), 0, now_ms=1)
    log.append_as_leader(make_batch(1, ts=5_900), 0, now_ms=2)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, ts=6_001), 0, now_ms=3)  # message time drives the roll
    assert [s.base_offset for s in log.segments] == [0, 2]
    # batches without timestamps fall back to the segment's creation time
    notime = open_log(tmp_path / "t-1", segment_ms=1000)
    notime.append_as_leader(make_batch(1, ts=-1), 0, now_ms=10_100)
    notime.append_as_leader(make_batch(1, ts=-1), 0, now_ms=10_900)
    assert len(notime.segments) == 1
    notime.append_as_leader(make_batch(1, ts=-1), 0, now_ms=11_001)
    assert len(notime.segments) == 2


def test_roll_when_index_full(tmp_path):
    log = open_log(tmp_path / "t-0", segment_index_bytes=48, index_interval_bytes=0)
    for i in range(20):
        log.append_as_leader(make_batch(1, 10), 0, 1)
    # 6 offset index slots; the first batch of a segment gets no entry
    assert [s.base_offset for s in log.segments] == [0, 7, 14]
    for seg in log.segments:
        assert seg.index.entries <= 6
    assert log.read_bytes(0, 1 << 30) == b"".join(log.read_bytes(o, 1) for o in range(20))


def test_retention(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    for i in range(30):
        log.append_as_leader(make_batch(2, 60, ts=1_000 * i), 0, 1)
    nsegs = len(log.segments)
    assert nsegs > 5
    # nothing deleted above the high watermark
    assert log.delete_old_segments(retention_bytes=0, high_watermark=0) == 0
    total = log.size_in_bytes
    # as Kafka: a segment goes only when the excess covers all of it
    assert log.delete_old_segments(retention_bytes=total - log.segments[0].size + 1) == 0
    deleted = log.delete_old_segments(retention_bytes=total - log.segments[0].size)
    assert deleted == 1 and log.log_start_offset == log.segments[0].base_offset
    first_ts_seg = log.segments[1]
    n = log.delete_old_segments(now_ms=first_ts_seg.max_timestamp + 500, retention_ms=400)
    assert n >= 1
    assert log.segments[0].max_timestamp >= first_ts_seg.max_timestamp + 100
    # DeleteRecords-style start moves then segments below it go
    target = log.segments[2].base_offset + 1
    assert log.maybe_increment_log_start_offset(target)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 10)
    log.delete_old_segments()
    assert log.segments[0].base_offset <= target < log.segments[1].base_offset
    assert log.log_start_offset == target
    assert log.read_bytes(target, 1)  # still readable
    # the active segment is never deleted
    log.delete_old_segments(retention_bytes=0)
    assert len(log.segments) == 1
    leo = log.log_end_offset
    log.close()
    again = open_log(log.dir, recovery_point=leo, log_start_offset=log.log_start_offset, segment_bytes=400)
    assert again.log_end_offset == leo


def test_log_start_beyond_end_restarts_log(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(3), 0, 1)
    log.close()
    again = open_log(tmp_path / "t-0", recovery_point=3, log_start_offset=100)
    assert (again.log_start_offset, again.log_end_offset) == (100, 100)
    assert again.read(100, 10) == []


def test_unflushed_log_without_close_recovers(tmp_path):
    log = open_log(tmp_path / "t-0", **SMALL)
    m = Model(log)
    for i in range(40):
        m.append(make_batch(2, 30, ts=i))
    # simulate a crash: descriptors dropped, no flush, no final index entries
    for seg in log.segments:
        seg.close_handles()
    again = open_log(tmp_path / "t-0", recovery_point=0, **SMALL)
    assert again.log_end_offset == m.batches[-1][1] + 1
    assert again.read_bytes(0, 1 << 30) == m.all_bytes()
    assert again.offset_for_timestamp(30) == (m.batches[29][0] + 1, 30)


def test_delete(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(), 0, 1)
    log.delete()
    assert not os.path.exists(tmp_path / "t-0")
