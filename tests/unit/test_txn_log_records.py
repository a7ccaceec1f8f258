"""__transaction_state record formats against bytes laid out by hand from
Kafka's TransactionLogKey.json / TransactionLogValue.json."""
import struct

import pytest

from cluster.transactions.log_records import (RecordFormatError, TransactionLogValue, TransactionState,
                                              decode_key, decode_value, encode_key, encode_value, group_partitions)

S = TransactionState


def test_state_ids_and_names_are_kafkas():
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert S.from_kafka_name("Ongoing") is S.ONGOING and S.from_kafka_name("nope") is None


def test_key_v0_bytes():
    # version int16 0, then a classic string: int16 length + UTF-8
    assert encode_key("tx-1") == b"\x00\x00" + b"\x00\x04" + b"tx-1"
    assert decode_key(b"\x00\x00\x00\x04tx-1") == "tx-1"
    assert encode_key("a\u00e9b") == b"\x00\x00\x00\x04a\xc3\xa9b"  # length in UTF-8 bytes
    assert decode_key(encode_key("a\u00e9b")) == "a\u00e9b"


def test_key_of_unknown_version_is_skipped():
    assert decode_key(b"\x00\x01\x00\x01x") is None


ONGOING = TransactionLogValue(producer_id=4000, producer_epoch=3, transaction_timeout_ms=60000,
                              transaction_status=S.ONGOING,
                              transaction_partitions=(("orders", (0, 2)), ("t", (7,))),
                              last_update_timestamp_ms=1_700_000_000_123, start_timestamp_ms=1_700_000_000_000)


def test_value_v0_bytes():
    expected = (struct.pack(">h", 0) + struct.pack(">q", 4000) + struct.pack(">h", 3) + struct.pack(">i", 60000)
                + struct.pack(">b", 1)
                + struct.pack(">i", 2)
                + struct.pack(">h", 6) + b"orders" + struct.pack(">i", 2) + struct.pack(">ii", 0, 2)
                + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + struct.pack(">i", 7)
                + struct.pack(">q", 1_700_000_000_123) + struct.pack(">q", 1_700_000_000_000))
    assert encode_value(ONGOING) == expected
    assert decode_value(expected) == ONGOING


def test_value_v0_empty_has_null_partitions():
    empty = TransactionLogValue(5, 0, 1000, S.EMPTY, None, 10, -1)
    data = encode_value(empty)
    assert data == (b"\x00\x00" + struct.pack(">qhib", 5, 0, 1000, 0) + struct.pack(">i", -1)
                    + struct.pack(">qq", 10, -1))
    assert decode_value(data) == empty
    with pytest.raises(ValueError):
        encode_value(empty._replace(transaction_partitions=(("t", (0,)),)))


def test_value_v1_flexible_bytes_and_tagged_fields():
    expected = (struct.pack(">h", 1) + struct.pack(">qhib", 4000, 3, 60000, 1)
                + bytes([3])  # compact array: 2 entries + 1
                + bytes([7]) + b"orders" + bytes([3]) + struct.pack(">ii", 0, 2) + bytes([0])
                + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 7) + bytes([0])
                + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
                + bytes([0]))  # no tagged fields: all at their defaults
    assert encode_value(ONGOING, version=1) == expected
    assert decode_value(expected) == ONGOING
    tagged = ONGOING._replace(previous_producer_id=17, next_producer_id=18, client_transaction_version=2)
    data = encode_value(tagged, version=1)
    assert data.endswith(bytes([3]) + bytes([0, 8]) + struct.pack(">q", 17) + bytes([1, 8]) + struct.pack(">q", 18)
                         + bytes([2, 2]) + struct.pack(">h", 2))
    assert decode_value(data) == tagged
    # v1 null partitions: compact length 0
    empty = TransactionLogValue(5, 0, 1000, S.EMPTY, None, 10, -1)
    assert encode_value(empty, 1) == b"\x00\x01" + struct.pack(">qhib", 5, 0, 1000, 0) + b"\x00" + \
        struct.pack(">qq", 10, -1) + b"\x00"
    assert decode_value(encode_value(empty, 1)) == empty


def test_unknown_tagged_fields_are_skipped():
    data = encode_value(ONGOING, version=1)[:-1] + bytes([1, 9, 2]) + b"zz"
    assert decode_value(data) == ONGOING


def test_tombstone_and_bad_values():
    assert decode_value(None) is None
    with pytest.raises(RecordFormatError):
        decode_value(b"\x00\x02" + b"\x00" * 40)
    with pytest.raises(RecordFormatError):
        decode_value(encode_value(ONGOING)[:-3])
    bad_state = bytearray(encode_value(ONGOING))
    bad_state[2 + 8 + 2 + 4] = 9
    with pytest.raises(RecordFormatError):
        decode_value(bytes(bad_state))
    # an array count larger than what remains is refused before allocating
    huge = b"\x00\x00" + struct.pack(">qhib", 1, 0, 1, 1) + struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises(RecordFormatError):
        decode_value(huge)


def test_group_partitions_sorted_by_topic():
    assert group_partitions({("b", 1), ("a", 3), ("b", 0)}) == (("a", (3,)), ("b", (0, 1)))


def test_replay_skips_records_it_cannot_parse():
    """Issue 28 item 3: a record that cannot be parsed is skipped (logged, counted),
    never a load that fails and takes every transactional id of the partition down."""
    from cluster.transactions.state_manager import replay
    from core import metrics

    counter = metrics.registry().counter("kafka_coordinator_skippedrecords")
    before = sum(counter.values.values())
    loaded = replay([(None, b"x"), (encode_key("t1"), b"\x00\x00\x01"), (b"\x00", None),
                     (encode_key("t2"), encode_value(ONGOING))], partition=0)
    assert list(loaded) == ["t2"] and loaded["t2"].producer_id == ONGOING.producer_id
    assert sum(counter.values.values()) == before + 3
