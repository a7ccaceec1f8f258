"""Leader-side rewriting: LogAppendTime and topic compression.type."""

import pytest

from storage.errors import InvalidRecordsError, RecordsFault
from storage.log import Log, LogConfig
from storage.record_batch import TIMESTAMP_TYPE_MASK, iter_headers, parse_header, validate_batches
from storage.records import SimpleRecord, build_batch, iter_records


def open_log(path, **cfg):
    return Log(str(path), LogConfig(**cfg), now_ms=0)


def recs(n=5, size=50):
    return [SimpleRecord(b"k%d" % i, b"v" * size, (("h", b"x"),), 1_000 + i) for i in range(n)]


def test_log_append_time_sets_type_and_max_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    blob = build_batch(recs(3), 0) + build_batch(recs(2), 3)
    info = log.append_as_leader(blob, 0, now_ms=777_000)
    assert info.log_append_time == 777_000 and info.max_timestamp == 777_000
    data = log.read_bytes(0, 1 << 20)
    heads = validate_batches(data, None, from_client=False)  # CRCs recomputed
    assert all(h.attributes & TIMESTAMP_TYPE_MASK and h.max_timestamp == 777_000 for h in heads)
    assert {r.timestamp for r in iter_records(data)} == {777_000}
    create = open_log(tmp_path / "t-1")
    assert create.append_as_leader(build_batch(recs(2)), 0, now_ms=5).log_append_time == -1


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("source", [0, 1, 2, 3, 4])
def test_compression_type_converts_batches(tmp_path, target, source):
    log = open_log(tmp_path / "t-0", compression_type=target)
    codec = LogConfig(compression_type=target).compression_codec
    original = build_batch(recs(), source, producer_id=9, producer_epoch=2, base_sequence=11)
    info = log.append_as_leader(original, 4, now_ms=1)
    assert (info.first_offset, info.last_offset) == (0, 4)
    data = log.read_bytes(0, 1 << 20)
    h = parse_header(data)
    assert h.compression == codec
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (9, 2, 11, 4)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in iter_records(data)] == [
        (r.key, r.value, r.timestamp, r.headers) for r in recs()
    ]
    if codec == source:
        assert data[12:16] == (4).to_bytes(4, "big") and data[16:] == original[16:]


def test_producer_compression_keeps_bytes(tmp_path):
    log = open_log(tmp_path / "t-0")
    original = build_batch(recs(), 3)
    log.append_as_leader(original, 0, now_ms=1)
    assert log.read_bytes(0, 1 << 20)[16:] == original[16:]


def test_conversion_then_log_append_time(tmp_path):
    log = open_log(tmp_path / "t-0", compression_type="zstd", message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(build_batch(recs(), 1) + build_batch(recs(2), 0), 0, now_ms=42)
    assert info.log_append_time == 42 and info.num_batches == 2
    data = log.read_bytes(0, 1 << 20)
    heads = validate_batches(data, None, from_client=False)
    assert [h.compression for h in heads] == [4, 4]
    assert all(h.max_timestamp == 42 for h in heads)


def test_max_message_bytes_applies_after_conversion(tmp_path):
    big = [SimpleRecord(b"k", bytes(2000), (), 1)]
    compressed = build_batch(big, 4)
    limit = len(compressed) + 10
    log = open_log(tmp_path / "t-0", compression_type="uncompressed", max_message_bytes=limit)
    with pytest.raises(InvalidRecordsError) as ei:
        log.append_as_leader(compressed, 0, now_ms=1)
    assert ei.value.fault == RecordsFault.message_too_large
    assert log.log_end_offset == 0
    ok = open_log(tmp_path / "t-1", compression_type="zstd", max_message_bytes=limit)
    ok.append_as_leader(compressed, 0, now_ms=1)


def test_conversion_rejects_non_incremental_inner_offsets(tmp_path):
    bad = build_batch([SimpleRecord(b"a", b"1", (), 1, 0), SimpleRecord(b"b", b"2", (), 1, 2)], 0,
                      last_offset_delta=1)
    log = open_log(tmp_path / "t-0", compression_type="gzip")
    with pytest.raises(InvalidRecordsError) as ei:
        log.append_as_leader(bad, 0, now_ms=1)
    assert ei.value.fault == RecordsFault.invalid_record


def test_compacted_and_converted_key_check(tmp_path):
    log = open_log(tmp_path / "t-0", compression_type="lz4", cleanup_policy="compact")
    with pytest.raises(InvalidRecordsError) as ei:
        log.append_as_leader(build_batch([(None, b"v")], 1), 0)
    assert ei.value.fault == RecordsFault.invalid_record and ei.value.record_errors == (
        (0, "Compacted topic cannot accept message without key in topic partition t-0."),
    )
    log.append_as_leader(build_batch([(b"k", b"v")], 1), 0)
    assert [h.compression for _, h in iter_headers(log.read_bytes(0, 1 << 20))] == [3]
