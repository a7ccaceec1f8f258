import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import InvalidRecordsError, RecordsFault
from storage.record_batch import HEADER_SIZE, parse_header, validate_batches
from storage.records import (
    XERIAL_MAGIC,
    Record,
    SimpleRecord,
    build_batch,
    compress,
    decode_batch,
    decompress,
    find_offset_for_timestamp,
    iter_records,
    offset_of_max_timestamp,
)

CODECS = [0, 1, 2, 3, 4]


def sample_records():
    return [
        SimpleRecord(b"key", b"value", (("h1", b"v1"), ("h2", None)), 1_000),
        SimpleRecord(None, b"no key", (), 1_005),
        SimpleRecord(b"null value", None, (), 999),
        SimpleRecord(b"", b"", (("ünïcode-key", b"\x00\xff"),), 2_000),
        SimpleRecord(b"k" * 300, b"v" * 70_000, (), 1_500),  # spans several xerial blocks
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    recs = sample_records()
    b = build_batch(recs, codec, base_offset=50)
    h, out = decode_batch(b, verify_crc=True)
    assert h.compression == codec
    assert h.base_timestamp == 1000 and h.max_timestamp == 2000
    assert [r.offset for r in out] == [50, 51, 52, 53, 54]
    for src, got in zip(recs, out):
        assert got.key == src.key
        assert got.value == src.value
        assert got.headers == tuple(src.headers)
        assert got.timestamp == src.timestamp


@pytest.mark.parametrize("xerial", [True, False])
def test_snappy_framings(xerial):
    data = b"abc" * 50_000
    comp = compress(2, data, xerial_snappy=xerial)
    assert comp.startswith(XERIAL_MAGIC) == xerial
    assert decompress(2, comp) == data


def test_foreign_codec_variants_decode():
    data = b"hello kafka " * 1000
    # zlib-wrapped deflate and plain gzip
    assert decompress(1, zlib.compress(data)) == data
    assert decompress(1, gzip.compress(data)) == data
    # lz4 frames with linked blocks and checksums (python-lz4 defaults)
    assert decompress(3, lz4.frame.compress(data)) == data
    # zstd without a content size, as zstd-jni streams write
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    co = cctx.compressobj()
    frame = co.compress(data) + co.flush()
    assert decompress(4, frame) == data
    # two concatenated zstd frames
    assert decompress(4, frame + zstandard.ZstdCompressor().compress(b"tail")) == data + b"tail"
    # raw snappy
    assert decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_payload_is_corrupt(codec):
    with pytest.raises(InvalidRecordsError) as ei:
        decompress(codec, b"\x01\x02\x03 definitely not compressed")
    assert ei.value.fault == RecordsFault.corrupt_message


def test_malformed_records_are_corrupt():
    b = bytearray(build_batch([SimpleRecord(b"k", b"v", (), 1)]))
    struct.pack_into(">i", b, 57, 3)  # claims more records than present
    with pytest.raises(InvalidRecordsError) as ei:
        decode_batch(bytes(b))
    assert ei.value.fault == RecordsFault.corrupt_message
    c = build_batch([SimpleRecord(b"k", b"v", (), 1)])
    with pytest.raises(InvalidRecordsError):
        decode_batch(c[:-1] + b"\x7f", verify_crc=True)


def test_log_append_time_overrides_record_timestamps():
    b = build_batch(sample_records()[:3], log_append_time=42)
    h, out = decode_batch(b)
    assert h.timestamp_type == 1
    assert [r.timestamp for r in out] == [42, 42, 42]


def test_find_offset_for_timestamp():
    recs = [SimpleRecord(None, b"x", (), ts) for ts in (10, 30, 20, 40, 40)]
    b = build_batch(recs, 1, base_offset=100)
    assert find_offset_for_timestamp(b, 0) == (100, 10)
    assert find_offset_for_timestamp(b, 10) == (100, 10)
    assert find_offset_for_timestamp(b, 11) == (101, 30)
    assert find_offset_for_timestamp(b, 25) == (101, 30)
    assert find_offset_for_timestamp(b, 31) == (103, 40)
    assert find_offset_for_timestamp(b, 41) is None
    assert find_offset_for_timestamp(b, 15, start_offset=102) == (102, 20)
    assert offset_of_max_timestamp(b) == (103, 40)


def test_record_objects_keep_offsets_and_timestamps():
    """Compaction re-encodes decoded records, keeping offsets (with gaps)."""
    kept = [Record(203, 7, b"a", b"1", ()), Record(207, 9, b"b", None, (("x", b"y"),))]
    b = build_batch(kept, 3, base_offset=200, last_offset_delta=9)
    h, out = decode_batch(b, verify_crc=True)
    assert h.base_offset == 200 and h.last_offset == 209 and h.record_count == 2
    assert out == kept
    validate_batches(b, None, from_client=False)


def test_iter_records_over_several_batches_ignores_partial_tail():
    a = build_batch([(b"a", b"1")], base_offset=0)
    b = build_batch([(b"b", b"2"), (b"c", b"3")], 4, base_offset=1)
    got = list(iter_records(a + b + a[:30], verify_crc=True))
    assert [(r.offset, r.key) for r in got] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_build_batch_header_consistency():
    b = build_batch([(b"k", b"v")] * 3, producer_id=9, producer_epoch=1, base_sequence=4,
                    is_transactional=True, partition_leader_epoch=3)
    h = parse_header(b)
    assert h.size == len(b) and h.record_count == 3 and h.last_offset_delta == 2
    assert h.producer_id == 9 and h.base_sequence == 4 and h.is_transactional
    assert len(b) >= HEADER_SIZE
    validate_batches(b, None)


records_strategy = st.lists(
    st.builds(
        lambda key, value, headers, ts: SimpleRecord(key, value, headers, ts),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3).map(tuple),
        st.integers(min_value=0, max_value=2**40),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.sampled_from(CODECS), st.integers(min_value=0, max_value=2**40))
def test_property_encode_decode(recs, codec, base_offset):
    b = build_batch(recs, codec, base_offset=base_offset)
    (h,) = validate_batches(b, None)
    assert h.record_count == len(recs)
    _, out = decode_batch(b, verify_crc=True)
    assert [r.offset for r in out] == list(range(base_offset, base_offset + len(recs)))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in out] == [
        (r.key, r.value, tuple(r.headers), r.timestamp) for r in recs
    ]
    assert h.max_timestamp == max(r.timestamp for r in recs)
