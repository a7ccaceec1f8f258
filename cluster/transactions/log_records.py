"""The ``__transaction_state`` records, byte for byte as Kafka writes them.

Kafka's ``TransactionLog.keyToBytes`` / ``valueToBytes`` (generated from
transaction-coordinator/src/main/resources/common/message/TransactionLogKey.json
and TransactionLogValue.json), each prefixed by its int16 schema version:

Key v0 (not flexible)::

    version int16 = 0 | transactional_id string (int16 length + UTF-8)

Value v0 (not flexible)::

    version int16 = 0 | producer_id int64 | producer_epoch int16
    | transaction_timeout_ms int32 | transaction_status int8
    | transaction_partitions nullable array (int32 count, -1 = null) of
        { topic string (int16 length) | partition_ids array (int32 count) of int32 }
    | last_update_timestamp_ms int64 | start_timestamp_ms int64

Value v1 (flexible, KIP-890's transaction version 2): the same fields with
compact strings and arrays (unsigned varint length + 1, 0 = null), an empty
tagged-field section after each partitions entry, and at the end the tagged
fields PreviousProducerId (tag 0), NextProducerId (tag 1) and
ClientTransactionVersion (tag 2), each written only when it differs from its
default (-1, -1, 0).

A null value is the tombstone of an expired transactional id. Keys of an
unknown version are skipped on load (Kafka's UnknownKey); values of an unknown
version are an error, as in Kafka.
"""
from __future__ import annotations

import enum
import struct
from typing import NamedTuple, Optional

from storage.byte_reader import ByteReader

KEY_VERSION = 0
VALUE_VERSION_0 = 0
VALUE_VERSION_1 = 1  # first flexible version

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


class TransactionState(enum.IntEnum):
    """Kafka's TransactionState ids (the int8 ``TransactionStatus``)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools show (DescribeTransactions, ListTransactions)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> Optional["TransactionState"]:
        for state, kafka_name in _NAMES.items():
            if kafka_name == name:
                return state
        return None


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


class TransactionLogValue(NamedTuple):
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: TransactionState
    # (topic, [partition ids]) in the order written; None for Empty (Kafka writes null)
    transaction_partitions: Optional[tuple[tuple[str, tuple[int, ...]], ...]]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID  # tagged, v1+
    next_producer_id: int = NO_PRODUCER_ID  # tagged, v1+
    client_transaction_version: int = 0  # tagged, v1+

    def partitions(self) -> set[tuple[str, int]]:
        return {(topic, p) for topic, ids in self.transaction_partitions or () for p in ids}


class RecordFormatError(ValueError):
    """Bytes that are not a transaction log record Kafka could have written."""


# ---- encoding --------------------------------------------------------------------------------------
def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return struct.pack(">h", len(data)) + data


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _uvarint(len(data) + 1) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(transactional_id)


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION_0) -> bytes:
    """Kafka writes v0 for transaction versions 0/1 and v1 for version 2."""
    if value.transaction_status == TransactionState.EMPTY and value.transaction_partitions:
        raise ValueError("an Empty transaction has no partitions")
    partitions = value.transaction_partitions
    out = bytearray(struct.pack(">hqhib", version, value.producer_id, value.producer_epoch,
                                value.transaction_timeout_ms, int(value.transaction_status)))
    if version == VALUE_VERSION_0:
        if partitions is None:
            out += struct.pack(">i", -1)
        else:
            out += struct.pack(">i", len(partitions))
            for topic, ids in partitions:
                out += _string(topic) + struct.pack(f">i{len(ids)}i", len(ids), *ids)
        out += struct.pack(">qq", value.last_update_timestamp_ms, value.start_timestamp_ms)
        return bytes(out)
    if version != VALUE_VERSION_1:
        raise ValueError(f"unknown TransactionLogValue version {version}")
    if partitions is None:
        out += _uvarint(0)
    else:
        out += _uvarint(len(partitions) + 1)
        for topic, ids in partitions:
            out += _compact_string(topic) + _uvarint(len(ids) + 1) + struct.pack(f">{len(ids)}i", *ids)
            out += _uvarint(0)  # the entry's tagged fields: none
    out += struct.pack(">qq", value.last_update_timestamp_ms, value.start_timestamp_ms)
    tagged = []
    if value.previous_producer_id != NO_PRODUCER_ID:
        tagged.append((_TAG_PREVIOUS_PRODUCER_ID, struct.pack(">q", value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tagged.append((_TAG_NEXT_PRODUCER_ID, struct.pack(">q", value.next_producer_id)))
    if value.client_transaction_version != 0:
        tagged.append((_TAG_CLIENT_TRANSACTION_VERSION, struct.pack(">h", value.client_transaction_version)))
    out += _uvarint(len(tagged))
    for tag, data in tagged:
        out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


# ---- decoding --------------------------------------------------------------------------------------
def decode_key(data: bytes) -> Optional[str]:
    """The transactional id of a key; None for a key of a version Kafka does not know
    (Kafka's UnknownKey: skipped on load)."""
    reader = ByteReader(data, error=RecordFormatError)
    version = reader.int16()
    if version != KEY_VERSION:
        return None
    return reader.string()


def decode_value(data: Optional[bytes]) -> Optional[TransactionLogValue]:
    """None for a tombstone."""
    if data is None:
        return None
    reader = ByteReader(data, error=RecordFormatError)
    version = reader.int16()
    if version not in (VALUE_VERSION_0, VALUE_VERSION_1):
        raise RecordFormatError(f"unknown version {version} of a transaction log value")
    flexible = version >= VALUE_VERSION_1
    producer_id, epoch, timeout_ms, status = reader.unpack(">qhib")
    try:
        state = TransactionState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction state id {status}") from None
    n = reader.array_length(nullable=True, compact=flexible)
    partitions = None
    if n >= 0:
        entries = []
        for _ in range(n):
            topic = reader.string(compact=flexible)
            count = reader.array_length(nullable=True, compact=flexible)
            ids = reader.unpack(f">{count}i") if count > 0 else ()
            entries.append((topic, tuple(ids) if isinstance(ids, tuple) else (ids,)))
            if flexible:
                reader.skip_tagged_fields()
        partitions = tuple(entries)
    last_update, start = reader.unpack(">qq")
    previous_id = next_id = NO_PRODUCER_ID
    client_version = 0
    if flexible:
        tagged = reader.tagged_fields()
        if _TAG_PREVIOUS_PRODUCER_ID in tagged:
            previous_id = struct.unpack(">q", tagged[_TAG_PREVIOUS_PRODUCER_ID])[0]
        if _TAG_NEXT_PRODUCER_ID in tagged:
            next_id = struct.unpack(">q", tagged[_TAG_NEXT_PRODUCER_ID])[0]
        if _TAG_CLIENT_TRANSACTION_VERSION in tagged:
            client_version = struct.unpack(">h", tagged[_TAG_CLIENT_TRANSACTION_VERSION])[0]
    return TransactionLogValue(producer_id, epoch, timeout_ms, state, partitions, last_update, start,
                               previous_id, next_id, client_version)


def group_partitions(partitions) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """{(topic, partition)} -> the record's per-topic form, sorted (Kafka groups by
    topic; the order inside is not part of the format)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return tuple((topic, tuple(sorted(ids))) for topic, ids in sorted(by_topic.items()))
