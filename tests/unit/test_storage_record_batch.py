import struct

import pytest
from crc32c import crc32c

from storage.errors import InvalidRecordsError, RecordsFault
from storage.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    assign_offsets,
    iter_headers,
    parse_header,
    set_log_append_time,
    validate_batches,
)
from storage.records import SimpleRecord, build_batch, decode_batch

CODECS = [0, 1, 2, 3, 4]


def make_batch(n=3, codec=0, **kw):
    recs = [SimpleRecord(b"k%d" % i, b"value-%d" % i * 3, (), 1_000 + i) for i in range(n)]
    return build_batch(recs, codec, **kw)


def rewrite_crc(buf: bytearray, pos: int = 0) -> None:
    size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 : pos + size])))


def test_header_size_and_fields():
    assert HEADER_SIZE == 61
    b = make_batch(4, 0, producer_id=7, producer_epoch=2, base_sequence=10, partition_leader_epoch=5)
    h = parse_header(b)
    assert isinstance(h, BatchHeader)
    assert h.magic == 2
    assert h.record_count == 4
    assert h.last_offset_delta == 3
    assert h.last_offset == 3 and h.next_offset == 4
    assert h.size == len(b) == h.batch_length + 12
    assert h.base_timestamp == 1000 and h.max_timestamp == 1003
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 10)
    assert h.partition_leader_epoch == 5
    assert h.compression == 0 and h.timestamp_type == 0
    assert not h.is_transactional and not h.is_control


def test_attribute_flags():
    b = make_batch(1, 3, is_transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
    h = parse_header(b)
    assert h.compression == 3 and h.is_transactional and not h.is_control
    c = build_batch([SimpleRecord(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), 5)], is_control=True,
                    is_transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
    assert parse_header(c).is_control
    t = make_batch(1, 0, log_append_time=99)
    assert parse_header(t).timestamp_type == 1 and parse_header(t).max_timestamp == 99


@pytest.mark.parametrize("codec", CODECS)
def test_validate_round_trip_every_codec(codec):
    batches = [make_batch(n, codec) for n in (1, 5, 40)]
    blob = b"".join(batches)
    headers = validate_batches(blob, 1 << 20)
    assert [h.record_count for h in headers] == [1, 5, 40]
    assert all(h.compression == codec for h in headers)
    assert sum(h.size for h in headers) == len(blob)
    # memoryview and bytearray inputs are accepted too
    assert validate_batches(memoryview(blob), None) == headers
    assert validate_batches(bytearray(blob), None) == headers


def test_crc_flip_is_corrupt_message():
    b = bytearray(make_batch(5))
    b[HEADER_SIZE + 3] ^= 0x01
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.corrupt_message


def test_crc_flip_in_header_attributes_is_corrupt():
    b = bytearray(make_batch(5))
    b[40] ^= 0x10  # inside max_timestamp, covered by the CRC
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.corrupt_message


def test_offset_and_epoch_outside_crc():
    b = bytearray(make_batch(5))
    struct.pack_into(">qii", b, 0, 12345, struct.unpack_from(">i", b, 8)[0], 77)
    (h,) = validate_batches(b, None)
    assert h.base_offset == 12345 and h.partition_leader_epoch == 77


def test_magic_1_is_invalid_record():
    b = bytearray(make_batch(2))
    b[16] = 1
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.invalid_record


def test_bogus_magic_is_corrupt():
    b = bytearray(make_batch(2))
    b[16] = 7
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.corrupt_message


def test_oversized_batch_is_message_too_large():
    b = make_batch(50)
    validate_batches(b, len(b))
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, len(b) - 1)
    assert ei.value.fault == RecordsFault.message_too_large


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_unsupported_compression(codec):
    b = bytearray(make_batch(2))
    struct.pack_into(">h", b, 21, codec)
    rewrite_crc(b)
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.unsupported_compression_type


def test_empty_blob_is_invalid_record():
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b"", None)
    assert ei.value.fault == RecordsFault.invalid_record


@pytest.mark.parametrize("cut", [1, 11, 12, 30, 60, 61, 70])
def test_truncated_batch_is_corrupt(cut):
    b = make_batch(3)
    blob = b + b[: min(cut, len(b) - 1)]
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(blob, None)
    assert ei.value.fault == RecordsFault.corrupt_message
    # replication tolerates (drops) a partial trailing batch
    headers = validate_batches(blob, None, from_client=False, allow_partial_tail=True)
    assert len(headers) == 1


@pytest.mark.parametrize("length", [-5, 0, 13, 48])
def test_short_batch_length_is_corrupt(length):
    b = bytearray(make_batch(3))
    struct.pack_into(">i", b, 8, length)
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.corrupt_message


def test_short_length_in_a_tiny_tail_is_corrupt():
    blob = make_batch(1) + struct.pack(">qi", 0, 3)
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(blob, None, allow_partial_tail=True)
    assert ei.value.fault == RecordsFault.corrupt_message


def test_client_count_checks():
    b = bytearray(make_batch(3))
    struct.pack_into(">i", b, 23, 5)  # last_offset_delta disagrees with 3 records
    rewrite_crc(b)
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.invalid_record
    # a follower accepts it: compaction keeps a batch's original offset span
    assert validate_batches(b, None, from_client=False)[0].last_offset_delta == 5

    empty = build_batch([], last_offset_delta=4)
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(empty, None)
    assert ei.value.fault == RecordsFault.invalid_record
    assert validate_batches(empty, None, from_client=False)[0].record_count == 0

    neg = bytearray(make_batch(1))
    struct.pack_into(">i", neg, 23, -1)
    rewrite_crc(neg)
    for from_client in (True, False):
        with pytest.raises(InvalidRecordsError):
            validate_batches(neg, None, from_client=from_client)


def test_client_may_not_write_control_batches():
    c = build_batch([SimpleRecord(b"\x00\x00\x00\x00", b"", (), 5)], is_control=True,
                    producer_id=3, producer_epoch=0, base_sequence=0)
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(c, None)
    assert ei.value.fault == RecordsFault.invalid_record
    assert validate_batches(c, None, from_client=False)[0].is_control


def test_producer_id_needs_sequence():
    b = make_batch(2, producer_id=5, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordsError) as ei:
        validate_batches(b, None)
    assert ei.value.fault == RecordsFault.invalid_record


def test_assign_offsets_in_place_keeps_crc():
    batches = [make_batch(n, c) for n, c in ((1, 0), (4, 1), (2, 4))]
    buf = bytearray(b"".join(batches))
    headers = validate_batches(buf, None)
    last = assign_offsets(buf, headers, 100, 9)
    assert last == 100 + 1 + 4 + 2 - 1
    again = validate_batches(buf, None)  # CRCs still valid
    assert [h.base_offset for h in again] == [100, 101, 105]
    assert [h.last_offset for h in again] == [100, 104, 106]
    assert {h.partition_leader_epoch for h in again} == {9}
    # record offsets follow the base offsets
    _, recs = decode_batch(bytes(buf), again[0].size)
    assert [r.offset for r in recs] == [101, 102, 103, 104]


def test_set_log_append_time():
    buf = bytearray(make_batch(3) + make_batch(2))
    headers = validate_batches(buf, None)
    set_log_append_time(buf, headers[0].size, 5555)
    h0, h1 = validate_batches(buf, None)
    assert h0.timestamp_type == 0 and h0.max_timestamp == 1002
    assert h1.timestamp_type == 1 and h1.max_timestamp == 5555
    _, recs = decode_batch(bytes(buf), h0.size)
    assert [r.timestamp for r in recs] == [5555, 5555]


def test_iter_headers():
    blob = make_batch(1) + make_batch(2) + b"junk"
    got = list(iter_headers(blob))
    assert [pos for pos, _ in got] == [0, got[0][1].size]
    assert [h.record_count for _, h in got] == [1, 2]
