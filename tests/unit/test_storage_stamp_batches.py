"""stamp_client_batches: the produce path's one-pass validate-and-stamp.

It must accept exactly the valid client blobs (stamping them as
validate_batches + assign_offsets would) and decline everything else, so
that Log.append_as_leader's exact path reports Kafka's error.
"""
import struct

import pytest

from storage.errors import InvalidRecordsError, RecordsFault
from storage.log import Log, LogConfig
from storage.record_batch import (
    StampedBatches,
    assign_offsets,
    batch_layout,
    iter_headers,
    stamp_client_batches,
    validate_batches,
)
from storage.records import SimpleRecord, build_batch
from tests.unit.test_storage_record_batch import rewrite_crc

MAX = 1 << 20


def batch(n, codec=0, ts0=1_000, **kw):
    recs = [SimpleRecord(b"k%d" % i, b"v" * (20 + i), (), ts0 + (i * 7) % 5) for i in range(n)]
    return build_batch(recs, codec, **kw)


def blob(*batches) -> bytearray:
    return bytearray(b"".join(batches))


def mixed_blob() -> bytearray:
    return blob(
        batch(3, 0, ts0=5_000),
        batch(1, 3, ts0=9_002, producer_id=4, producer_epoch=0, base_sequence=0),
        batch(5, 4, ts0=2_000),
        batch(2, 1, ts0=9_000),
    )


@pytest.mark.parametrize("base,epoch", [(0, 0), (1234, 7), (2**40, -1)])
def test_stamps_exactly_as_validate_then_assign(base, epoch):
    fast, exact = mixed_blob(), mixed_blob()
    stamped = stamp_client_batches(fast, base, epoch, MAX)
    headers = validate_batches(memoryview(exact), MAX)
    last = assign_offsets(exact, headers, base, epoch)
    assert fast == exact
    # max timestamp and its offset as the log computes them from headers
    nxt, max_ts, off_max = base, -1, base - 1
    for h in headers:
        nxt += h.last_offset_delta + 1
        if h.max_timestamp > max_ts:
            max_ts, off_max = h.max_timestamp, nxt - 1
    # each batch naming a producer, with its header as stamped (what the log
    # checks producer state from)
    producer_batches = [(pos, h) for pos, h in iter_headers(exact) if h.producer_id >= 0]
    assert len(producer_batches) == 1
    assert stamped == StampedBatches(last, len(headers), max_ts, off_max, batch_layout(exact), producer_batches)
    # the layout the segment indexes from: each batch's size, last offset, max timestamp
    nxt = base
    for (size, batch_last, ts), h in zip(stamped.layout, headers, strict=True):
        nxt += h.last_offset_delta + 1
        assert (size, batch_last, ts) == (h.batch_length + 12, nxt - 1, h.max_timestamp)
    assert last == base + 3 + 1 + 5 + 2 - 1
    # the first batch holding the largest timestamp wins, as in Kafka
    assert max_ts == 9_002 and off_max == base + 3
    validate_batches(memoryview(fast), MAX)  # CRCs still hold after stamping


def _set(buf, pos, fmt, value, *, fix_crc=True):
    struct.pack_into(fmt, buf, pos, value)
    if fix_crc:
        rewrite_crc(buf, 0)
    return buf


def faulty_blobs():
    """(name, blob, error code the exact path gives or None when it accepts)."""
    one = batch(3, 0)
    cases = []
    b = blob(one)
    b[-1] ^= 0xFF
    cases.append(("crc", b, RecordsFault.corrupt_message))
    cases.append(("magic1", _set(blob(one), 16, ">b", 1), RecordsFault.invalid_record))
    cases.append(("magic9", _set(blob(one), 16, ">b", 9), RecordsFault.corrupt_message))
    cases.append(("codec6", _set(blob(one), 21, ">h", 6), None))
    cases.append(("count0", _set(blob(one), 57, ">i", 0), RecordsFault.invalid_record))
    cases.append(("delta", _set(blob(one), 23, ">i", 1), RecordsFault.invalid_record))
    cases.append(("control", _set(blob(one), 21, ">h", 0x20), RecordsFault.invalid_record))
    cases.append(("seq", blob(batch(2, 0, producer_id=5, producer_epoch=0, base_sequence=-1)), RecordsFault.invalid_record))
    cases.append(("truncated", blob(one)[:-3], RecordsFault.corrupt_message))
    cases.append(("tail", blob(one, b"\x00" * 20), RecordsFault.corrupt_message))
    cases.append(("empty", bytearray(), RecordsFault.invalid_record))
    cases.append(("length", _set(blob(one), 8, ">i", 30, fix_crc=False), RecordsFault.corrupt_message))
    # a bad batch after good ones: the good ones must not be accepted alone
    late = blob(batch(2, 0), batch(2, 3))
    late[-1] ^= 0x01
    cases.append(("late-crc", late, RecordsFault.corrupt_message))
    return cases


@pytest.mark.parametrize("name,buf,code", faulty_blobs(), ids=lambda v: v if isinstance(v, str) else "")
def test_declines_what_the_exact_path_rejects(name, buf, code):
    assert stamp_client_batches(bytearray(buf), 0, 0, MAX) is None
    if code is None:
        return
    with pytest.raises(InvalidRecordsError) as err:
        validate_batches(memoryview(bytearray(buf)), MAX)
    assert err.value.fault == code


def test_declines_oversized_batches_and_other_codecs():
    b = blob(batch(4, 3))
    assert stamp_client_batches(bytearray(b), 0, 0, len(b) - 1) is None
    assert stamp_client_batches(bytearray(b), 0, 0, len(b)) is not None
    # a topic codec the batch is not in: conversion is due, so the exact path
    assert stamp_client_batches(bytearray(b), 0, 0, MAX, codec=4) is None
    assert stamp_client_batches(bytearray(b), 0, 0, MAX, codec=3) is not None


def test_log_reports_exact_errors_and_keeps_offsets_contiguous(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig(max_message_bytes=4096))
    assert log.append_as_leader(blob(batch(3)), 0).last_offset == 2
    late = blob(batch(2, 0), batch(2, 3))
    late[-1] ^= 0x01
    with pytest.raises(InvalidRecordsError) as err:
        log.append_as_leader(late, 0)
    assert err.value.fault == RecordsFault.corrupt_message
    big = blob(batch(200))
    with pytest.raises(InvalidRecordsError) as err:
        log.append_as_leader(big, 0)
    assert err.value.fault == RecordsFault.message_too_large
    assert log.log_end_offset == 3
    info = log.append_as_leader(blob(batch(2), batch(1)), 5)
    assert (info.first_offset, info.last_offset, info.num_batches) == (3, 5, 2)
    got = [(h.base_offset, h.partition_leader_epoch) for h in validate_batches(
        memoryview(bytearray(log.read_bytes(0, MAX))), MAX, from_client=False)]
    assert got == [(0, 0), (3, 5), (5, 5)]
    log.close()
