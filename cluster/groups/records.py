"""Records of the ``__consumer_offsets`` topic, byte-exact with Kafka's.

Every record is a (key, value) pair; both start with an int16 *version*. For
keys the version says which kind of record it is (Kafka reuses the key
version as a type tag):

* key versions 0 and 1: ``OffsetCommitKey`` (group, topic, partition), the
  committed offset of one partition for one group. Kafka writes version 1;
  versions 0 and 1 have the same layout.
* key version 2: ``GroupMetadataKey`` (group), the group's membership and
  assignment as of its last completed rebalance.
* higher key versions are the records of KIP-848's consumer groups, written
  by newer brokers; this coordinator skips them (``UnknownKey``).

A value of ``None`` is a tombstone: log compaction keeps only the last record
per key, and a tombstone finally deletes the key. Replaying a partition with
"last value per key wins, tombstones delete" rebuilds the coordinator state.

Values:

* ``OffsetCommitValue`` versions 0-4. We write version 3 (offset, leader
  epoch, metadata, commit timestamp), or version 1 (with an expire timestamp,
  no leader epoch) when the commit carries an explicit expire timestamp, which
  is what Kafka 2.1+ writes. Version 4 is the first flexible version (KIP-915);
  it is read, and written only when asked for.
* ``GroupMetadataValue`` versions 0-4. We write version 3 (adds the members'
  group instance ids, KIP-345), as Kafka does for classic groups. Version 0
  has no rebalance timeout (it reads as the session timeout, as in Kafka), and
  versions below 2 no current-state timestamp (reads as -1).

Also here: ``partition_for_group``, the offsets-topic partition that owns a
group, computed exactly as Kafka does (Java ``String.hashCode``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Union

from storage.byte_reader import ByteReader

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "Record",
    "RecordFormatError",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "group_metadata_record",
    "group_metadata_tombstone",
    "java_string_hash_code",
    "offset_commit_record",
    "offset_commit_tombstone",
    "partition_for_group",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

# Key versions that are offset commits: 0 is the original (Kafka 0.8.2) and
# has the same layout as 1.
_OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
_MAX_OFFSET_COMMIT_VALUE_VERSION = 4
_MAX_GROUP_METADATA_VALUE_VERSION = 4
_FLEXIBLE_VALUE_VERSION = 4

# (key, value); value None is a tombstone.
Record = tuple[bytes, Optional[bytes]]


class RecordFormatError(ValueError):
    """Bytes that are not a valid record of the version they claim."""


# -- the record types --------------------------------------------------------


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class UnknownKey:
    """A key whose version this coordinator does not know (e.g. KIP-848
    consumer-group records written by a newer broker)."""

    version: int


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    # -1 = unknown (Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH).
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    # -1 = none: retention is the broker's offsets.retention.minutes. Only
    # version 1 stores it; commits from OffsetCommit v2-v4 with a retention
    # time set it.
    expire_timestamp: int = -1


@dataclass(frozen=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    # The member's metadata for the group's selected protocol only.
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: Optional[str]
    leader: Optional[str]
    current_state_timestamp: int = -1
    members: tuple[MemberMetadataValue, ...] = ()


# -- primitive writers/readers (Kafka's protocol types) ----------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def int16(self, value: int) -> None:
        self.buf += _I16.pack(value)

    def int32(self, value: int) -> None:
        self.buf += _I32.pack(value)

    def int64(self, value: int) -> None:
        self.buf += _I64.pack(value)

    def uvarint(self, value: int) -> None:
        if value < 0:
            raise RecordFormatError("unsigned varint cannot be negative")
        while value >= 0x80:
            self.buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self.buf.append(value)

    def string(self, value: Optional[str], *, nullable: bool = False, compact: bool = False) -> None:
        if value is None:
            if not nullable:
                raise RecordFormatError("non-nullable string is None")
            if compact:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = value.encode("utf-8")
        if compact:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise RecordFormatError(f"string of {len(data)} bytes exceeds the int16 length limit")
            self.int16(len(data))
        self.buf += data

    def bytes_(self, value: bytes, *, compact: bool = False) -> None:
        if value is None:
            raise RecordFormatError("non-nullable bytes is None")
        if compact:
            self.uvarint(len(value) + 1)
        else:
            self.int32(len(value))
        self.buf += value

    def array_length(self, count: int, *, compact: bool = False) -> None:
        if compact:
            self.uvarint(count + 1)
        else:
            self.int32(count)

    def empty_tagged_fields(self) -> None:
        self.uvarint(0)


def _version_of(data: bytes, what: str) -> tuple[int, ByteReader]:
    reader = ByteReader(data, error=RecordFormatError)
    try:
        version = reader.int16()
    except RecordFormatError:
        raise RecordFormatError(f"{what} is too short to hold a version") from None
    return version, reader


# -- keys --------------------------------------------------------------------


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return bytes(w.buf)


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.buf)


def decode_key(data: bytes) -> Union[OffsetCommitKey, GroupMetadataKey, UnknownKey]:
    version, r = _version_of(data, "key")
    if version in _OFFSET_COMMIT_KEY_VERSIONS:
        group = r.string()
        topic = r.string()
        partition = r.int32()
        return OffsetCommitKey(group, topic, partition)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(r.string())
    if version < 0:
        raise RecordFormatError(f"negative key version {version}")
    return UnknownKey(version)


# -- offset commit values ------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue, version: Optional[int] = None) -> bytes:
    """Encode with ``version``, or with the version Kafka would pick: 1 when
    the commit has an explicit expire timestamp (only v1 can hold it), else 3."""
    if version is None:
        version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp != -1 else OFFSET_COMMIT_VALUE_VERSION
    if not 0 <= version <= _MAX_OFFSET_COMMIT_VALUE_VERSION:
        raise RecordFormatError(f"unsupported OffsetCommitValue version {version}")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    w = _Writer()
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata, compact=flexible)
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    if flexible:
        w.empty_tagged_fields()
    return bytes(w.buf)


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    version, r = _version_of(data, "OffsetCommitValue")
    if not 0 <= version <= _MAX_OFFSET_COMMIT_VALUE_VERSION:
        raise RecordFormatError(f"unsupported OffsetCommitValue version {version}")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string(compact=flexible)
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    if flexible:
        r.skip_tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# -- group metadata values -------------------------------------------------------


def encode_group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= _MAX_GROUP_METADATA_VALUE_VERSION:
        raise RecordFormatError(f"unsupported GroupMetadataValue version {version}")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    w = _Writer()
    w.int16(version)
    w.string(value.protocol_type, compact=flexible)
    w.int32(value.generation)
    w.string(value.protocol, nullable=True, compact=flexible)
    w.string(value.leader, nullable=True, compact=flexible)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.array_length(len(value.members), compact=flexible)
    for member in value.members:
        w.string(member.member_id, compact=flexible)
        if version >= 3:
            w.string(member.group_instance_id, nullable=True, compact=flexible)
        elif member.group_instance_id is not None:
            # Writing a static member in a version without the field would
            # silently turn it into a dynamic one.
            raise RecordFormatError(f"GroupMetadataValue v{version} cannot hold a group instance id")
        w.string(member.client_id, compact=flexible)
        w.string(member.client_host, compact=flexible)
        if version >= 1:
            w.int32(member.rebalance_timeout)
        w.int32(member.session_timeout)
        w.bytes_(member.subscription, compact=flexible)
        w.bytes_(member.assignment, compact=flexible)
        if flexible:
            w.empty_tagged_fields()
    if flexible:
        w.empty_tagged_fields()
    return bytes(w.buf)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    version, r = _version_of(data, "GroupMetadataValue")
    if not 0 <= version <= _MAX_GROUP_METADATA_VALUE_VERSION:
        raise RecordFormatError(f"unsupported GroupMetadataValue version {version}")
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    protocol_type = r.string(compact=flexible)
    generation = r.int32()
    protocol = r.string(nullable=True, compact=flexible)
    leader = r.string(nullable=True, compact=flexible)
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length(compact=flexible)):
        member_id = r.string(compact=flexible)
        group_instance_id = r.string(nullable=True, compact=flexible) if version >= 3 else None
        client_id = r.string(compact=flexible)
        client_host = r.string(compact=flexible)
        rebalance_timeout = r.int32() if version >= 1 else None
        session_timeout = r.int32()
        subscription = r.bytes_(compact=flexible)
        assignment = r.bytes_(compact=flexible)
        if flexible:
            r.skip_tagged_fields()
        if rebalance_timeout is None:
            # v0 predates KIP-62's separate rebalance timeout; Kafka reads the
            # session timeout in its place.
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadataValue(
                member_id, group_instance_id, client_id, client_host,
                rebalance_timeout, session_timeout, subscription, assignment,
            )
        )
    if flexible:
        r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))


# -- whole records ---------------------------------------------------------------


def offset_commit_record(group: str, topic: str, partition: int, value: OffsetCommitValue) -> Record:
    return encode_offset_commit_key(group, topic, partition), encode_offset_commit_value(value)


def offset_commit_tombstone(group: str, topic: str, partition: int) -> Record:
    return encode_offset_commit_key(group, topic, partition), None


def group_metadata_record(group: str, value: GroupMetadataValue) -> Record:
    return encode_group_metadata_key(group), encode_group_metadata_value(value)


def group_metadata_tombstone(group: str) -> Record:
    return encode_group_metadata_key(group), None


# -- which partition owns a group -------------------------------------------------


def java_string_hash_code(value: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over
    UTF-16 code units, in wrapping 32-bit signed arithmetic."""
    data = value.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates
    ``group_id``: ``Utils.abs(groupId.hashCode) % n``. Kafka's ``Utils.abs`` is
    ``x & 0x7fffffff`` (not ``Math.abs``), so Integer.MIN_VALUE maps to 0
    rather than staying negative. Clients never compute this themselves (they
    ask FindCoordinator), but every broker must agree with Kafka's choice for
    logs written by Kafka to be readable."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (java_string_hash_code(group_id) & 0x7FFFFFFF) % num_partitions
