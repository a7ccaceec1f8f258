"""docs/storage-contract.md, rule by rule, against the engine.

Every test runs for uncompressed and compressed data and for compacted and
non-compacted configs (rule ids refer to the document)."""

import os
import random

import pytest

from storage.cleaner import LogCleaner, read_cleaner_checkpoint
from storage.errors import InvalidRecordsError, OffsetOutOfRangeError, RecordsFault
from storage.log import Log, LogConfig
from storage.record_batch import iter_headers, validate_batches
from storage.records import SimpleRecord, build_batch, iter_batch_records, iter_records

CODECS = [0, 1, 4]
POLICIES = ["delete", "compact"]


def params(policies=POLICIES):
    return [pytest.param((c, p), id=f"codec{c}-{p}") for c in CODECS for p in policies]


class Scenario:
    def __init__(self, path, codec, policy, n=50, seed=1):
        self.codec = codec
        self.policy = policy
        self.compacted = policy == "compact"
        self.config = LogConfig(
            segment_bytes=1200,
            index_interval_bytes=128,
            cleanup_policy=policy,
            file_delete_delay_ms=0,
            min_cleanable_dirty_ratio=0.0,
            delete_retention_ms=1_000,
            retention_ms=-1,
        )
        self.log = Log(str(path), self.config, now_ms=0)
        self.rnd = random.Random(seed)
        self.written = []  # (offset, key, value, timestamp)
        self.infos = []
        for i in range(n):
            self.append(i)

    def append(self, i):
        rnd = self.rnd
        recs = []
        for j in range(rnd.randint(1, 4)):
            key = b"key%d" % rnd.randint(0, 7)
            value = None if self.compacted and rnd.random() < 0.15 else b"value-%d-%d" % (i, j) * rnd.randint(1, 3)
            recs.append(SimpleRecord(key, value, (), 10_000 + i * 10 + j))
        info = self.log.append_as_leader(build_batch(recs, self.codec), 0, now_ms=i)
        self.infos.append(info)
        self.written += [(info.first_offset + j, r.key, r.value, r.timestamp) for j, r in enumerate(recs)]
        return info

    def read_all(self):
        log = self.log
        return log.read_bytes(log.log_start_offset, 1 << 30)

    def records(self):
        return [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(self.read_all())]

    def clean(self, now_ms=100_000):
        return LogCleaner(1 << 20).clean(self.log, now_ms=now_ms)


def _scenario(request, tmp_path):
    codec, policy = request.param
    s = Scenario(tmp_path / "t-0", codec, policy)
    yield s
    if not s.log.closed:
        s.log.close()


@pytest.fixture(params=params())
def sc(request, tmp_path):
    yield from _scenario(request, tmp_path)


# Rules that only mean something for compacted logs run only on those (no skips).
@pytest.fixture(params=params(["compact"]))
def compacted_sc(request, tmp_path):
    yield from _scenario(request, tmp_path)


# --------------------------------------------------------------------- offsets


def test_C1_offsets_contiguous_within_a_batch(sc):
    for _, h in iter_headers(sc.read_all()):
        assert h.last_offset_delta == h.record_count - 1
    blob = sc.read_all()
    for pos, h in iter_headers(blob):
        offs = [r.offset for r in iter_batch_records(blob, pos)]
        assert offs == list(range(h.base_offset, h.last_offset + 1))


def test_C2_offsets_increase_across_batches(sc):
    for a, b in zip(sc.infos, sc.infos[1:]):
        assert b.first_offset == a.last_offset + 1
    lasts = [(h.base_offset, h.last_offset) for _, h in iter_headers(sc.read_all())]
    assert all(b0 > a1 for (_, a1), (b0, _) in zip(lasts, lasts[1:]))


def test_C3_gaps_only_after_compaction(sc):
    offsets = [r[0] for r in sc.records()]
    assert offsets == list(range(sc.log.log_start_offset, sc.log.log_end_offset))
    res = sc.clean()
    offsets = [r[0] for r in sc.records()]
    assert offsets == sorted(set(offsets))
    if sc.compacted:
        assert res.error is None and len(offsets) < sc.log.log_end_offset
    else:
        assert res.end_offset == res.first_dirty_offset  # the cleaner leaves it alone
        assert offsets == list(range(sc.log.log_start_offset, sc.log.log_end_offset))


def test_C4_offsets_never_change(sc):
    before = {r[0]: r for r in sc.records()}
    sc.clean()
    for r in sc.records():
        assert before[r[0]] == r
    leo = sc.log.log_end_offset
    sc.log.truncate_to(leo - 5)
    assert sc.log.log_end_offset <= leo - 5
    info = sc.append(99)
    assert info.first_offset == sc.log.log_end_offset - (info.last_offset - info.first_offset + 1)


# ------------------------------------------------------------------ watermarks


def test_W1_nothing_served_beyond_the_high_watermark(sc):
    hw = sc.log.log_end_offset - 7
    for start in range(sc.log.log_start_offset, hw, 5):
        data = sc.log.read_bytes(start, 1 << 30, hw)
        assert all(h.last_offset < hw for _, h in iter_headers(data))
    res = sc.log.apply_retention(high_watermark=sc.log.log_end_offset + 100, now_ms=0, retention_bytes=0)
    assert res.log_start_offset <= sc.log.log_end_offset


def test_W2_log_start_never_passes_the_high_watermark(sc):
    hw = sc.log.log_end_offset - 10
    with pytest.raises(OffsetOutOfRangeError):
        sc.log.maybe_increment_log_start_offset(hw + 1, hw)
    with pytest.raises(OffsetOutOfRangeError):
        sc.log.delete_records(hw + 1, hw)
    assert sc.log.delete_records(hw - 3, hw) == hw - 3
    res = sc.log.apply_retention(high_watermark=hw, now_ms=10**13, retention_ms=0, retention_bytes=0)
    assert res.log_start_offset <= hw
    assert not sc.log.maybe_increment_log_start_offset(hw - 20, hw)  # never moves back


def test_W3_recovery_point(sc):
    assert sc.log.recovery_point <= sc.log.log_end_offset
    assert sc.log.flush() == sc.log.log_end_offset == sc.log.recovery_point


# ------------------------------------------------------------------- retention


def test_R1_whole_segments_and_policy(sc):
    segs = sc.log.segments
    kept_bytes = {s.base_offset: open(s.log_path, "rb").read() for s in segs}
    res = sc.log.apply_retention(now_ms=0, retention_bytes=2000)
    for s in sc.log.segments:
        assert open(s.log_path, "rb").read() == kept_bytes[s.base_offset]
    assert res.deleted_segments == len(segs) - len(sc.log.segments)
    # config-driven retention applies only with the delete policy
    sc.log.config.retention_bytes = 0
    res = sc.log.apply_retention(now_ms=0)
    assert (res.deleted_segments > 0) == (not sc.compacted) or len(sc.log.segments) == 1


def test_R2_active_segment_never_deleted(sc):
    leo = sc.log.log_end_offset
    active = sc.log.active_segment
    sc.log.apply_retention(now_ms=10**13, retention_ms=0, retention_bytes=0)
    assert sc.log.segments == [active] and sc.log.log_end_offset == leo


def test_R3_retention_stops_at_the_high_watermark(sc):
    hw = sc.log.segments[2].base_offset
    sc.log.apply_retention(high_watermark=hw, now_ms=10**13, retention_ms=0)
    assert sc.log.segments[0].base_offset <= hw and sc.log.log_start_offset <= hw
    assert all(s.base_offset >= 0 for s in sc.log.segments)
    assert sc.log.segments[0].next_offset > hw - 1 or sc.log.segments[0].base_offset == hw


def test_R4_asynchronous_deletion(sc):
    sc.log.config.file_delete_delay_ms = 1_000
    n = sc.log.apply_retention(now_ms=50, retention_bytes=0).deleted_segments
    assert n > 0
    assert sum(1 for f in os.listdir(sc.log.dir) if f.endswith(".log.deleted")) == n
    assert sc.log.delete_pending(1_049) == 0 and sc.log.delete_pending(1_050) == n
    assert not [f for f in os.listdir(sc.log.dir) if f.endswith(".deleted")]


# ------------------------------------------------------------------ compaction


def _latest_below(written, point):
    latest = {}
    for r in written:
        if r[0] < point and r[1] is not None:
            latest[r[1]] = r
    return latest


def test_K1_latest_value_per_key(sc):
    sc.clean(now_ms=100_000)
    if not sc.compacted:
        assert read_cleaner_checkpoint(sc.log) is None
        return
    point = read_cleaner_checkpoint(sc.log)
    got = sc.records()
    below = [r for r in got if r[0] < point]
    expected = sorted(_latest_below(sc.written, point).values())
    assert below == expected  # tombstones are still within delete.retention.ms
    assert [r for r in got if r[0] >= point] == [r for r in sc.written if r[0] >= point]


def test_K2_tombstones(compacted_sc):
    sc = compacted_sc
    sc.clean(now_ms=100_000)
    point = read_cleaner_checkpoint(sc.log)
    tomb_keys = {k for k, r in _latest_below(sc.written, point).items() if r[2] is None}
    assert tomb_keys, "the scenario writes tombstones"
    assert {r[1] for r in sc.records() if r[2] is None and r[0] < point} == tomb_keys
    for i in range(3):
        sc.append(1000 + i)
    sc.log.roll()
    sc.clean(now_ms=100_000 + 1_000)  # delete_retention_ms after the first pass
    point2 = read_cleaner_checkpoint(sc.log)
    got = sc.records()
    remaining = {r[1] for r in got if r[2] is None and r[0] < point}
    assert not remaining
    expected = {k: r for k, r in _latest_below(sc.written, point2).items() if not (r[2] is None and r[0] < point)}
    assert sorted(r for r in got if r[0] < point2) == sorted(expected.values())


def test_K3_fields_preserved_and_same_codec(sc):
    before = {r[0]: r for r in sc.records()}
    sc.clean()
    blob = sc.read_all()
    for _, h in iter_headers(blob):
        assert h.compression == sc.codec or h.record_count == 0
    for r in sc.records():
        assert before[r[0]] == r


def test_K4_crash_during_swap_keeps_a_consistent_log(compacted_sc):
    sc = compacted_sc
    before = sc.records()
    sc.clean()
    after = sc.records()
    # simulate a crash that left a stray .cleaned and a rolled-back .swap
    d = sc.log.dir
    open(os.path.join(d, f"{0:020d}.log.cleaned"), "wb").write(b"x")
    open(os.path.join(d, f"{5:020d}.log.swap"), "wb").write(b"y")
    for s in sc.log.segments:
        s.close_handles()
    again = Log(d, sc.config, recovery_point=0)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(again.read_bytes(0, 1 << 30))] == after
    assert len(after) <= len(before)
    assert not [f for f in os.listdir(d) if f.endswith((".cleaned", ".swap"))]
    again.close()
    sc.log.local.closed = True


def test_K5_keys_required_on_compacted_topics(sc):
    leo = sc.log.log_end_offset
    blob = build_batch([SimpleRecord(None, b"v", (), 1)], sc.codec)
    if sc.compacted:
        with pytest.raises(InvalidRecordsError) as ei:
            sc.log.append_as_leader(blob, 0)
        assert ei.value.fault == RecordsFault.invalid_record
        assert "Compacted topic cannot accept message without key in topic partition t-0." in str(ei.value)
        assert sc.log.log_end_offset == leo
    else:
        assert sc.log.append_as_leader(blob, 0).first_offset == leo


# ----------------------------------------------------------------------- reads


def test_D1_reads_return_whole_batches(sc):
    sc.clean()
    blob = sc.read_all()
    for offset in range(sc.log.log_start_offset, sc.log.log_end_offset, 3):
        for max_bytes in (1, 200, 5000):
            for sl in sc.log.read(offset, max_bytes):
                with open(sl.path, "rb") as f:
                    f.seek(sl.position)
                    data = f.read(sl.length)
                heads = validate_batches(data, None, from_client=False)
                assert heads[0].base_offset == sl.base_offset
                assert heads[0].last_offset >= offset or sl.base_offset > offset
            assert sc.log.read(offset, 1)  # min_one_batch
    assert blob


def test_D2_only_valid_batches_served(sc):
    sc.clean()
    validate_batches(sc.read_all(), None, from_client=False)


# ---------------------------------------------------------------------- appends


def test_A1_failed_appends_change_nothing(sc):
    leo = sc.log.log_end_offset
    before = sc.read_all()
    sc.log.config.max_message_bytes = 100
    with pytest.raises(InvalidRecordsError) as ei:
        sc.log.append_as_leader(build_batch([(b"k", os.urandom(500))], 0), 0)
    assert ei.value.fault == RecordsFault.message_too_large
    assert sc.log.log_end_offset == leo and sc.read_all() == before


def test_A2_log_append_time_and_conversion(sc):
    sc.log.config.message_timestamp_type = "LogAppendTime"
    sc.log.config.compression_type = "lz4"
    info = sc.log.append_as_leader(build_batch([(b"k", b"v")], sc.codec), 0, now_ms=123_456)
    assert info.log_append_time == 123_456
    (h,) = validate_batches(sc.log.read_bytes(info.first_offset, 1 << 20), None, from_client=False)
    assert h.compression == 3 and h.max_timestamp == 123_456 and h.timestamp_type == 1


# --------------------------------------------------------------------- recovery


def test_V1_V2_recovery_keeps_a_valid_prefix(sc):
    sc.clean()
    expected = sc.read_all()
    sc.log.close()
    victim = [s for s in sc.log.segments if s.size][0]  # cleaning may leave empty segments
    size = os.path.getsize(victim.log_path)
    with open(victim.log_path, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x40]))
    again = Log(sc.log.dir, sc.config, recovery_point=0)
    got = again.read_bytes(again.log_start_offset, 1 << 30)
    assert expected.startswith(got) and len(got) < len(expected)
    validate_batches(got, None, from_client=False) if got else None
    end = again.log_end_offset
    assert again.append_as_leader(build_batch([(b"k", b"v")], sc.codec), 0).first_offset == end
    again.close()
