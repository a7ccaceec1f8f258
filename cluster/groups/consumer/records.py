"""The ``__consumer_offsets`` records of KIP-848 consumer groups, byte-exact
with what Kafka 4.0 writes.

A coordinator record's key starts with an int16 that names its type (Kafka's
``apiKey`` of the coordinator-key schema); the key's fields follow in the
non-flexible encoding. The value starts with its own int16 version (0 for
all of these) and is flexible (compact strings and arrays, tagged fields).
A value of ``None`` is a tombstone.

=====  ==========================================  ======================
type   key fields                                  value
=====  ==========================================  ======================
3      ConsumerGroupMetadataKey (group)            epoch
4      ConsumerGroupPartitionMetadataKey (group)   subscribed topics' metadata
5      ConsumerGroupMemberMetadataKey (group, m)   the member's subscription
6      ConsumerGroupTargetAssignmentMetadataKey    assignment epoch
7      ConsumerGroupTargetAssignmentMemberKey      the member's target
8      ConsumerGroupCurrentMemberAssignmentKey     epoch, state, assigned, pending
=====  ==========================================  ======================

Partitions are named by topic id (a UUID), as in Kafka: a topic deleted and
re-created under the same name is another topic.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Optional, Union

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
_GROUP_ONLY_KEYS = (GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA)

VALUE_VERSION = 0

# topic id -> partitions; the assignment shape of every record here.
Assignment = dict[uuid.UUID, frozenset[int]]


class ConsumerRecordError(ValueError):
    """Bytes that are not a valid KIP-848 record."""


@dataclass(frozen=True)
class ConsumerGroupKey:
    record_type: int
    group_id: str
    member_id: Optional[str] = None  # types 5, 7, 8


@dataclass(frozen=True)
class GroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]
    epoch: int = 0  # the group epoch the metadata was taken at


@dataclass(frozen=True)
class MemberMetadataValue:
    instance_id: Optional[str]
    rack_id: Optional[str]
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: Optional[str]
    rebalance_timeout_ms: int
    server_assignor: Optional[str]
    # (name, metadata) of a classic member's protocols; None for a consumer-protocol member.
    classic_protocols: Optional[tuple[tuple[str, bytes], ...]] = None
    classic_session_timeout_ms: int = -1


@dataclass(frozen=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True)
class TargetAssignmentMemberValue:
    partitions: Assignment = field(default_factory=dict)


@dataclass(frozen=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


Value = Union[GroupMetadataValue, PartitionMetadataValue, MemberMetadataValue, TargetAssignmentMetadataValue,
              TargetAssignmentMemberValue, CurrentMemberAssignmentValue]


# -- encoding ---------------------------------------------------------------------------------------

class _Out:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> None:
        self.buf += struct.pack(">b", v)

    def i16(self, v: int) -> None:
        self.buf += struct.pack(">h", v)

    def i32(self, v: int) -> None:
        self.buf += struct.pack(">i", v)

    def i64(self, v: int) -> None:
        self.buf += struct.pack(">q", v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def string(self, v: str) -> None:  # non-flexible (keys)
        data = v.encode()
        self.i16(len(data))
        self.buf += data

    def cstring(self, v: Optional[str]) -> None:  # compact, nullable when v is None
        if v is None:
            self.uvarint(0)
            return
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.buf += data

    def cbytes(self, v: bytes) -> None:
        self.uvarint(len(v) + 1)
        self.buf += v

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def count(self, n: Optional[int]) -> None:  # compact array length; None = null
        self.uvarint(0 if n is None else n + 1)

    def no_tags(self) -> None:
        self.uvarint(0)


class _In:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise ConsumerRecordError("record ends early")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ConsumerRecordError("varint too long")

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise ConsumerRecordError("null key string")
        return bytes(self._take(n)).decode()

    def cstring(self) -> Optional[str]:
        n = self.uvarint()
        return None if n == 0 else bytes(self._take(n - 1)).decode()

    def cbytes(self) -> bytes:
        n = self.uvarint()
        if n == 0:
            raise ConsumerRecordError("null bytes")
        return bytes(self._take(n - 1))

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def count(self) -> Optional[int]:
        n = self.uvarint()
        return None if n == 0 else n - 1

    def tags(self) -> dict[int, bytes]:
        found = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            found[tag] = bytes(self._take(self.uvarint()))
        return found


def encode_key(key: ConsumerGroupKey) -> bytes:
    out = _Out()
    out.i16(key.record_type)
    out.string(key.group_id)
    if key.record_type not in _GROUP_ONLY_KEYS:
        out.string(key.member_id or "")
    return bytes(out.buf)


def decode_key(data: bytes) -> ConsumerGroupKey:
    inp = _In(data)
    record_type = inp.i16()
    if record_type not in CONSUMER_GROUP_RECORD_TYPES:
        raise ConsumerRecordError(f"not a consumer group record type: {record_type}")
    group_id = inp.string()
    member_id = None if record_type in _GROUP_ONLY_KEYS else inp.string()
    return ConsumerGroupKey(record_type, group_id, member_id)


def _write_assignment(out: _Out, assignment: Assignment) -> None:
    topics = sorted(assignment.items(), key=lambda item: item[0].bytes)
    out.count(len(topics))
    for topic_id, partitions in topics:
        out.uuid(topic_id)
        out.count(len(partitions))
        for p in sorted(partitions):
            out.i32(p)
        out.no_tags()


def _read_assignment(inp: _In) -> Assignment:
    result: Assignment = {}
    for _ in range(inp.count() or 0):
        topic_id = inp.uuid()
        partitions = frozenset(inp.i32() for _ in range(inp.count() or 0))
        inp.tags()  # AssignmentEpochs (KIP-1251) and later tags: not used here
        if partitions:
            result[topic_id] = partitions
    return result


def encode_value(value: Value) -> bytes:
    out = _Out()
    out.i16(VALUE_VERSION)
    if isinstance(value, GroupMetadataValue):
        out.i32(value.epoch)
        if value.metadata_hash:
            tagged = _Out()
            tagged.i64(value.metadata_hash)
            out.uvarint(1)
            out.uvarint(0)
            out.uvarint(len(tagged.buf))
            out.buf += tagged.buf
            return bytes(out.buf)
    elif isinstance(value, PartitionMetadataValue):
        out.i32(value.epoch)
        out.count(len(value.topics))
        for topic in value.topics:
            out.uuid(topic.topic_id)
            out.cstring(topic.name)
            out.i32(topic.num_partitions)
            out.count(0)  # PartitionRacks: racks are not tracked here
            out.no_tags()
    elif isinstance(value, MemberMetadataValue):
        out.cstring(value.instance_id)
        out.cstring(value.rack_id)
        out.cstring(value.client_id)
        out.cstring(value.client_host)
        out.count(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            out.cstring(name)
        out.cstring(value.subscribed_topic_regex)
        out.i32(value.rebalance_timeout_ms)
        out.cstring(value.server_assignor)
        if value.classic_protocols is not None:
            tagged = _Out()
            tagged.i32(value.classic_session_timeout_ms)
            tagged.count(len(value.classic_protocols))
            for name, metadata in value.classic_protocols:
                tagged.cstring(name)
                tagged.cbytes(metadata)
                tagged.no_tags()
            tagged.no_tags()  # ClassicMemberMetadata's own tagged fields
            out.uvarint(1)
            out.uvarint(0)
            out.uvarint(len(tagged.buf))
            out.buf += tagged.buf
            return bytes(out.buf)
    elif isinstance(value, TargetAssignmentMetadataValue):
        out.i32(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        _write_assignment(out, value.partitions)
    elif isinstance(value, CurrentMemberAssignmentValue):
        out.i32(value.member_epoch)
        out.i32(value.previous_member_epoch)
        out.i8(value.state)
        _write_assignment(out, value.assigned)
        _write_assignment(out, value.pending_revocation)
    else:
        raise TypeError(f"not a consumer group record value: {type(value).__name__}")
    out.no_tags()
    return bytes(out.buf)


def decode_value(record_type: int, data: bytes) -> Value:
    inp = _In(data)
    version = inp.i16()
    if version != VALUE_VERSION:
        raise ConsumerRecordError(f"record type {record_type}: unknown value version {version}")
    if record_type == GROUP_METADATA:
        epoch = inp.i32()
        tags = inp.tags()
        metadata_hash = struct.unpack(">q", tags[0])[0] if 0 in tags else 0
        return GroupMetadataValue(epoch, metadata_hash)
    if record_type == PARTITION_METADATA:
        epoch = inp.i32()
        topics = []
        for _ in range(inp.count() or 0):
            topic_id, name, num = inp.uuid(), inp.cstring() or "", inp.i32()
            for _ in range(inp.count() or 0):  # PartitionRacks
                inp.i32()
                for _ in range(inp.count() or 0):
                    inp.cstring()
                inp.tags()
            inp.tags()
            topics.append(TopicMetadata(topic_id, name, num))
        inp.tags()
        return PartitionMetadataValue(tuple(topics), epoch)
    if record_type == MEMBER_METADATA:
        instance_id, rack_id = inp.cstring(), inp.cstring()
        client_id, client_host = inp.cstring() or "", inp.cstring() or ""
        names = tuple(inp.cstring() or "" for _ in range(inp.count() or 0))
        regex = inp.cstring()
        rebalance_timeout = inp.i32()
        assignor = inp.cstring()
        tags = inp.tags()
        classic, session_timeout = None, -1
        if 0 in tags:
            tagged = _In(tags[0])
            session_timeout = tagged.i32()
            n = tagged.count()
            if n is not None:
                protocols = []
                for _ in range(n):
                    name, metadata = tagged.cstring() or "", tagged.cbytes()
                    tagged.tags()
                    protocols.append((name, metadata))
                classic = tuple(protocols)
        return MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout,
                                   assignor, classic, session_timeout)
    if record_type == TARGET_ASSIGNMENT_METADATA:
        epoch = inp.i32()
        inp.tags()
        return TargetAssignmentMetadataValue(epoch)
    if record_type == TARGET_ASSIGNMENT_MEMBER:
        partitions = _read_assignment(inp)
        inp.tags()
        return TargetAssignmentMemberValue(partitions)
    if record_type == CURRENT_MEMBER_ASSIGNMENT:
        epoch, previous, state = inp.i32(), inp.i32(), inp.i8()
        assigned = _read_assignment(inp)
        pending = _read_assignment(inp)
        inp.tags()
        return CurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)
    raise ConsumerRecordError(f"not a consumer group record type: {record_type}")


def record(record_type: int, group_id: str, member_id: Optional[str], value: Optional[Value]
           ) -> tuple[bytes, Optional[bytes]]:
    """(key, value) bytes; ``value`` None makes a tombstone."""
    key = encode_key(ConsumerGroupKey(record_type, group_id, member_id))
    return key, None if value is None else encode_value(value)
