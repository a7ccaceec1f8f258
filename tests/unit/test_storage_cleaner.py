"""Log compaction (storage/cleaner.py) against Kafka's rules."""

import os

import pytest

from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage.cleaner import LogCleaner, OffsetMap, read_cleaner_checkpoint
from storage.errors import InvalidRecordsError, RecordsFault
from storage.log import Log, LogConfig
from storage.record_batch import DELETE_HORIZON_MASK, iter_headers, validate_batches
from storage.records import SimpleRecord, build_batch, iter_batch_records, iter_records

DAY = 86_400_000


def cfg(**kw):
    base = dict(
        segment_bytes=1500,
        cleanup_policy="compact",
        file_delete_delay_ms=0,
        min_cleanable_dirty_ratio=0.0,
        index_interval_bytes=100,
    )
    base.update(kw)
    return LogConfig(**base)


def open_log(path, config, **kw):
    return Log(str(path), config, now_ms=0, **kw)


def put(log, pairs, ts=1_000, codec=0, **batch_kw):
    recs = [SimpleRecord(k, v, (("h", b"1"),), ts + i) for i, (k, v) in enumerate(pairs)]
    return log.append_as_leader(build_batch(recs, codec, **batch_kw), 0, now_ms=1)


def contents(log):
    return [(r.offset, r.key, r.value) for r in iter_records(log.read_bytes(log.log_start_offset, 1 << 30))]


def latest(records):
    out = {}
    for off, k, v in records:
        out[k] = (off, v)
    return out


def fill(log, n=60, keys=6, codec=0):
    written = []
    for i in range(n):
        pairs = [(b"k%d" % ((i * 3 + j) % keys), b"v%d-%d" % (i, j)) for j in range(3)]
        info = put(log, pairs, ts=1_000 + i, codec=codec)
        written += [(info.first_offset + j, k, v) for j, (k, v) in enumerate(pairs)]
    return written


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_compaction_keeps_latest_per_key_same_codec(tmp_path, codec):
    log = open_log(tmp_path / "t-0", cfg())
    written = fill(log, codec=codec)
    active_base = log.active_segment.base_offset
    res = LogCleaner(1 << 20).clean(log, now_ms=10_000)
    assert res.error is None and res.end_offset == active_base
    got = contents(log)
    clean = [r for r in got if r[0] < active_base]
    expected_clean = sorted(
        (off, k, v) for k, (off, v) in latest([r for r in written if r[0] < active_base]).items()
    )
    assert clean == expected_clean
    assert [r for r in got if r[0] >= active_base] == [r for r in written if r[0] >= active_base]
    assert read_cleaner_checkpoint(log) == active_base
    # every batch keeps its codec, offsets strictly increase, CRCs are valid
    blob = log.read_bytes(0, 1 << 30)
    heads = validate_batches(blob, None, from_client=False)
    assert all(h.compression == codec for h in heads)
    lasts = [h.last_offset for h in heads]
    assert lasts == sorted(set(lasts))
    # headers and timestamps survive
    for r in iter_records(blob):
        assert r.headers == (("h", b"1"),)
        assert r.timestamp == next(1_000 + i for i in range(60) if r.value.startswith(b"v%d-" % i)) + int(
            r.value.split(b"-")[1]
        )
    log.close()
    again = Log(log.dir, log.config, recovery_point=0)
    assert contents(again) == got


def test_producer_fields_and_offsets_preserved(tmp_path):
    log = open_log(tmp_path / "t-0", cfg())
    put(log, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], producer_id=42, producer_epoch=3, base_sequence=0)
    put(log, [(b"b", b"2")], producer_id=42, producer_epoch=3, base_sequence=3)
    log.roll()
    put(log, [(b"z", b"z")])
    LogCleaner(1 << 20).clean(log, now_ms=10_000)
    blob = log.read_bytes(0, 1 << 30)
    heads = [h for _, h in iter_headers(blob)]
    first = heads[0]
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 1)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 0)
    assert [(r.offset, r.key, r.value) for r in iter_batch_records(blob)] == [(2, b"a", b"2")]


def test_empty_batch_kept_only_for_last_batch_of_producer(tmp_path):
    log = open_log(tmp_path / "t-0", cfg())
    put(log, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0)
    put(log, [(b"b", b"1")], producer_id=8, producer_epoch=0, base_sequence=0)
    put(log, [(b"b", b"2")], producer_id=9, producer_epoch=0, base_sequence=0)
    put(log, [(b"a", b"2")])  # supersedes producer 7's only batch
    log.roll()
    put(log, [(b"z", b"z")])
    LogCleaner(1 << 20).clean(log, now_ms=10_000)
    heads = [h for _, h in iter_headers(log.read_bytes(0, 1 << 30))]
    by_offset = {h.base_offset: h for h in heads}
    # producer 7's batch is its last: kept empty; producer 8's too
    assert by_offset[0].record_count == 0 and by_offset[0].producer_id == 7
    assert by_offset[1].record_count == 0 and by_offset[1].producer_id == 8
    assert by_offset[2].record_count == 1 and by_offset[3].record_count == 1
    put(log, [(b"a", b"3")], producer_id=7, producer_epoch=0, base_sequence=1)
    log.roll()
    put(log, [(b"y", b"y")])
    LogCleaner(1 << 20).clean(log, now_ms=20_000)
    offsets = [h.base_offset for _, h in iter_headers(log.read_bytes(0, 1 << 30))]
    assert 0 not in offsets  # no longer producer 7's last batch


def test_committed_transactional_records_compact_like_others_and_the_marker_stays(tmp_path):
    log = open_log(tmp_path / "t-0", cfg())
    put(log, [(b"a", b"1")])
    txn = build_batch([SimpleRecord(b"a", b"t", (), 1)], 0, producer_id=5, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    log.append_as_leader(txn, 0, now_ms=1)
    marker = build_batch([SimpleRecord(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), 1)], 0,
                         producer_id=5, producer_epoch=0, is_transactional=True, is_control=True)
    log.append_as_leader(marker, 0, now_ms=1, from_client=False)
    stored_marker = log.read_bytes(2, 1 << 30)
    put(log, [(b"a", b"2")])
    log.roll()
    put(log, [(b"z", b"z")])
    log.producer_state.on_high_watermark_updated(log.log_end_offset)  # the marker is replicated: stable
    LogCleaner(1 << 20).clean(log, now_ms=10_000)
    # "a"=1 and the committed transaction's "a"=t are both superseded by "a"=2 (2 is the marker).
    assert [r for r in contents(log) if r[0] != 2] == [(3, b"a", b"2"), (4, b"z", b"z")]
    heads = {h.base_offset: h for _, h in iter_headers(log.read_bytes(0, 1 << 30))}
    # The producer's last batch stays, empty, for its sequence; so its marker stays, unchanged.
    assert heads[1].record_count == 0 and heads[1].producer_id == 5
    assert log.read_bytes(2, 1 << 30).startswith(stored_marker[: heads[2].batch_length + 12])


def test_tombstones_retained_for_delete_retention_after_first_pass(tmp_path):
    log = open_log(tmp_path / "t-0", cfg(delete_retention_ms=DAY))
    put(log, [(b"a", b"1"), (b"b", b"1")])
    put(log, [(b"a", None)])
    log.roll()
    put(log, [(b"z", b"z")])
    cleaner = LogCleaner(1 << 20)
    t0 = 1_000_000
    cleaner.clean(log, now_ms=t0)
    assert contents(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"z", b"z")]
    heads = [h for _, h in iter_headers(log.read_bytes(2, 1))]
    assert heads[0].attributes & DELETE_HORIZON_MASK and heads[0].base_timestamp == t0 + DAY
    # the record timestamp survives the base timestamp change
    assert next(iter_records(log.read_bytes(2, 1))).timestamp == 1_000
    # later passes (there must be something dirty to trigger one, as in
    # Kafka) keep it before the horizon and drop it from then on
    put(log, [(b"y", b"1")])
    log.roll()
    assert cleaner.clean(log, now_ms=t0 + DAY - 1).end_offset == 5
    assert (2, b"a", None) in contents(log)
    put(log, [(b"y", b"2")])
    log.roll()
    cleaner.clean(log, now_ms=t0 + DAY)
    assert contents(log) == [(1, b"b", b"1"), (3, b"z", b"z"), (5, b"y", b"2")]


def test_offset_map_full_cleans_only_the_covered_range(tmp_path):
    log = open_log(tmp_path / "t-0", cfg())
    for i in range(60):
        put(log, [(b"key-%d" % i, b"a")])
    for i in range(20):
        put(log, [(b"key-%d" % i, b"b")])
    log.roll()
    put(log, [(b"z", b"z")])
    omap = OffsetMap(24 * 50, load_factor=1.0)
    assert omap.slots == 50 and omap.max_entries == 50
    cleaner = LogCleaner(24 * 50, load_factor=1.0)
    res = cleaner.clean(log, now_ms=10_000)
    # 50 keys fit: the clean point stops after offset 49
    assert res.map_full and res.end_offset == 50 and res.map_entries == 50
    assert read_cleaner_checkpoint(log) == 50
    assert [r[0] for r in contents(log)] == list(range(81))
    res = cleaner.clean(log, now_ms=10_001)
    assert res.first_dirty_offset == 50 and res.end_offset == 80 and not res.map_full
    assert [r[0] for r in contents(log)] == list(range(20, 81))


def test_dirtiest_log_selected_and_ratio_threshold(tmp_path):
    config = cfg(min_cleanable_dirty_ratio=0.5)
    a = open_log(tmp_path / "a-0", config)
    b = open_log(tmp_path / "b-0", config)
    fill(a, n=60, keys=50)
    fill(b, n=60, keys=2)
    cleaner = LogCleaner(1 << 20)
    res = cleaner.clean_once([a, b], now_ms=10_000)
    assert res.topic_partition in ("a-0", "b-0") and res.cleanable_ratio == 1.0
    first = res.topic_partition
    res2 = cleaner.clean_once([a, b], now_ms=10_000)
    assert res2.topic_partition != first
    # both clean now: nothing new is dirty enough
    assert cleaner.clean_once([a, b], now_ms=10_000) is None
    ckpt = OffsetCheckpointFile(str(tmp_path / CLEANER_OFFSET_CHECKPOINT)).read()
    assert set(ckpt) == {("a", 0), ("b", 0)}
    # non-compacted logs are ignored
    d = open_log(tmp_path / "d-0", LogConfig(segment_bytes=1500))
    fill(d)
    assert cleaner.clean_once([d], now_ms=10_000) is None


def test_high_watermark_bounds_cleaning(tmp_path):
    log = open_log(tmp_path / "t-0", cfg())
    fill(log)
    hw = log.segments[2].base_offset + 1
    res = LogCleaner(1 << 20).clean_once([(log, hw)], now_ms=10_000)
    assert res.end_offset <= log.segments[2].base_offset


def test_min_compaction_lag(tmp_path):
    log = open_log(tmp_path / "t-0", cfg(min_compaction_lag_ms=5_000))
    fill(log)  # timestamps 1000..1060
    cleaner = LogCleaner(1 << 20)
    assert cleaner.clean_once([log], now_ms=5_500) is None  # everything younger than the lag
    assert cleaner.clean_once([log], now_ms=7_000).end_offset == log.active_segment.base_offset


def test_max_compaction_lag_forces_cleaning(tmp_path):
    log = open_log(tmp_path / "t-0", cfg(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=10_000))
    fill(log, keys=50)
    cleaner = LogCleaner(1 << 20)
    cleaner.clean(log, now_ms=2_000)
    put(log, [(b"k1", b"new")], ts=3_000)
    log.roll()
    put(log, [(b"z", b"z")], ts=3_001)
    ltc = cleaner.cleanable_range(log, now_ms=5_000)
    assert ltc.cleanable_ratio < 0.99 and not ltc.needs_compaction_now
    assert cleaner.clean_once([log], now_ms=5_000) is None
    ltc = cleaner.cleanable_range(log, now_ms=13_001)
    assert ltc.needs_compaction_now
    assert cleaner.clean_once([log], now_ms=13_001) is not None


def test_compacted_topic_rejects_records_without_key(tmp_path):
    log = open_log(tmp_path / "topic-3", cfg())
    for codec in (0, 1, 3):
        with pytest.raises(InvalidRecordsError) as ei:
            log.append_as_leader(build_batch([(b"k", b"v"), (None, b"v")], codec), 0)
        assert ei.value.fault == RecordsFault.invalid_record
        assert "Compacted topic cannot accept message without key in topic partition topic-3." in str(ei.value)
        assert ei.value.record_errors[0][0] == 1
    assert log.log_end_offset == 0
    plain = open_log(tmp_path / "plain-0", LogConfig())
    plain.append_as_leader(build_batch([(None, b"v")]), 0)


def test_truncation_below_clean_point_lowers_checkpoint(tmp_path):
    log = open_log(tmp_path / "t-0", cfg())
    fill(log)
    end = LogCleaner(1 << 20).clean(log, now_ms=10_000).end_offset
    assert read_cleaner_checkpoint(log) == end
    log.truncate_to(end - 10)
    assert read_cleaner_checkpoint(log) <= end - 10
    log.truncate_fully_and_start_at(5)
    assert read_cleaner_checkpoint(log) == 5
    log.delete()
    assert read_cleaner_checkpoint(log) is None


def test_corrupt_segment_marks_log_uncleanable(tmp_path):
    log = open_log(tmp_path / "t-0", cfg())
    fill(log)
    victim = log.segments[1]
    with open(victim.log_path, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    before = sorted(os.listdir(log.dir))
    cleaner = LogCleaner(1 << 20)
    res = cleaner.clean_once([log], now_ms=10_000)
    assert res.error and log.dir in cleaner.uncleanable
    assert sorted(os.listdir(log.dir)) == before  # nothing swapped, no leftovers
    assert cleaner.clean_once([log], now_ms=10_000) is None


# ------------------------------------------------------- swap crash recovery


def _prepared_swap(tmp_path):
    """A log plus a finished ``.cleaned`` copy of its first segment, as the
    cleaner leaves it right before swapping in a group of two segments whose
    second one lost all its records."""
    from storage.segment import LogSegment

    config = cfg()
    log = open_log(tmp_path / "t-0", config)
    written = fill(log)
    group = log.segments[:2]
    cleaned = LogSegment(log.dir, group[0].base_offset, config, create=True, file_suffix=".cleaned")
    keep = group[0].read_bytes(0, group[0].size)
    cleaned.append(group[0].next_offset - 1, group[0].max_timestamp, group[0].offset_of_max_timestamp, keep)
    cleaned.on_become_inactive()
    cleaned.flush()
    return log, written, group, cleaned


def test_interrupted_swap_with_cleaned_files_is_rolled_back(tmp_path):
    log, written, group, cleaned = _prepared_swap(tmp_path)
    # crash after the log file became .swap but before its indexes did
    os.replace(cleaned.log_path, cleaned.log_path[: -len(".cleaned")] + ".swap")
    cleaned.close_handles()
    end = log.log_end_offset
    for s in log.segments:
        s.close_handles()
    again = Log(log.dir, log.config, recovery_point=0)
    assert contents(again) == written
    assert again.log_end_offset == end
    assert not [n for n in os.listdir(log.dir) if n.endswith((".swap", ".cleaned", ".deleted"))]


def test_interrupted_swap_with_all_swap_files_is_completed(tmp_path):
    log, written, group, cleaned = _prepared_swap(tmp_path)
    cleaned.change_file_suffixes(".cleaned", ".swap")
    cleaned.close_handles()
    # crash before the old segments were renamed to .deleted: the second old
    # segment (inside the swapped range) must go, the data it held was "compacted away"
    end = log.log_end_offset
    for s in log.segments:
        s.close_handles()
    again = Log(log.dir, log.config, recovery_point=0)
    bases = [s.base_offset for s in again.segments]
    assert group[1].base_offset in bases  # it starts past the swapped segment's end: kept, as Kafka
    assert again.log_end_offset == end
    assert not [n for n in os.listdir(log.dir) if n.endswith((".swap", ".cleaned", ".deleted"))]
    assert contents(again) == written


def test_swap_completed_after_old_segments_renamed(tmp_path):
    log, written, group, cleaned = _prepared_swap(tmp_path)
    cleaned.change_file_suffixes(".cleaned", ".swap")
    cleaned.close_handles()
    for s in group:
        s.change_file_suffixes("", ".deleted")
    for s in log.segments:
        s.close_handles()
    again = Log(log.dir, log.config, recovery_point=0)
    # the old segments were already on their way out: only the swap remains
    # for their range (a legal offset gap in a compacted log)
    lo, hi = group[1].base_offset, log.segments[2].base_offset
    assert contents(again) == [r for r in written if not lo <= r[0] < hi]
    assert again.segments[0].base_offset == 0
    assert not [n for n in os.listdir(log.dir) if n.endswith((".swap", ".cleaned", ".deleted"))]


def test_swap_range_deletes_replaced_segments(tmp_path):
    """A swap file covering two old segments replaces both on recovery."""
    from storage.segment import LogSegment

    config = cfg()
    log = open_log(tmp_path / "t-0", config)
    written = fill(log)
    group = log.segments[:2]
    swap = LogSegment(log.dir, 0, config, create=True, file_suffix=".cleaned")
    # keep only the last batch of the second segment: the swap covers [0, its end)
    data = group[1].read_bytes(0, group[1].size)
    last_pos = [p for p, _ in iter_headers(data)][-1]
    swap.append(group[1].next_offset - 1, 10**6, group[1].next_offset - 1, data[last_pos:])
    swap.on_become_inactive()
    swap.flush()
    swap.change_file_suffixes(".cleaned", ".swap")
    swap.close_handles()
    for s in log.segments:
        s.close_handles()
    again = Log(log.dir, config, recovery_point=0)
    assert [s.base_offset for s in again.segments][:2] == [0, log.segments[2].base_offset]
    got = contents(again)
    assert got[0][0] >= group[1].base_offset
    assert got == [r for r in written if r[0] >= got[0][0]]


def test_aborted_transactional_data_is_removed_markers_kept(tmp_path):
    from storage.producer_state import build_end_txn_marker, end_txn_marker_type

    log = open_log(tmp_path / "t-0", cfg(segment_bytes=100_000))

    def txn_batch(pid, seq, key, value):
        return build_batch([SimpleRecord(key, value, (), 1)], 0, producer_id=pid, producer_epoch=0,
                           base_sequence=seq, is_transactional=True)

    log.append_as_leader(txn_batch(5, 0, b"a", b"aborted-1"), 0, now_ms=1)  # 0
    log.append_as_leader(txn_batch(5, 1, b"b", b"aborted-2"), 0, now_ms=1)  # 1
    log.append_as_leader(txn_batch(6, 0, b"c", b"committed"), 0, now_ms=1)  # 2
    log.append_as_leader(build_end_txn_marker(5, 0, 0, False, 1), 0, now_ms=1, from_client=False)  # 3: abort
    log.append_as_leader(build_end_txn_marker(6, 0, 0, True, 1), 0, now_ms=1, from_client=False)  # 4: commit
    log.append_as_leader(txn_batch(5, 2, b"d", b"last"), 0, now_ms=1)  # 5: producer 5's next transaction
    log.append_as_leader(build_end_txn_marker(5, 0, 0, True, 1), 0, now_ms=1, from_client=False)  # 6
    log.roll()
    put(log, [(b"z", b"z")])
    # Nothing is cleaned past the last stable offset: the markers must be replicated first.
    assert LogCleaner(1 << 20).clean(log, now_ms=10_000).end_offset == 0
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    LogCleaner(1 << 20).clean(log, now_ms=10_000)
    kept = [h.base_offset for _, h in iter_headers(log.read_bytes(0, 1 << 30))]
    # The aborted data (0, 1) is gone; the committed data, the markers and the rest stay.
    assert kept == [2, 3, 4, 5, 6, 7]
    # Its index entry survived the swap: read_committed readers still skip correctly.
    assert [t.first_offset for t in log.collect_aborted_txns(0, 8)] == [0]
    # The abort marker has no data left: it got a delete horizon (delete.retention.ms)...
    marker = next(h for _, h in iter_headers(log.read_bytes(0, 1 << 30)) if h.base_offset == 3)
    assert marker.attributes & DELETE_HORIZON_MASK and marker.base_timestamp == 10_000 + DAY
    assert end_txn_marker_type(log.read_bytes(3, 1 << 20)) == (0, 0)  # still a valid ABORT marker
    # ...and a pass before it keeps it, a pass after it removes it and its index entry
    # (something must be dirty to trigger a pass, as in Kafka).
    for now_ms in (10_000 + DAY - 1, 10_000 + DAY):
        put(log, [(b"y", b"%d" % now_ms)])
        log.roll()
        log.producer_state.on_high_watermark_updated(log.log_end_offset)
        LogCleaner(1 << 20).clean(log, now_ms=now_ms)
        offsets = [h.base_offset for _, h in iter_headers(log.read_bytes(0, 1 << 30))]
        assert (3 in offsets) == (now_ms < 10_000 + DAY)
    assert offsets[:4] == [2, 4, 5, 6]
    assert log.collect_aborted_txns(0, 8) == []
    # Committed transactions keep their markers while their data is there.
    assert {4, 6} <= {h.base_offset for _, h in iter_headers(log.read_bytes(0, 1 << 30))}
