"""The parts of the consumer's embedded protocol the coordinator reads.

The classic group protocol treats member metadata and assignments as opaque
bytes; the cooperative/eager distinction (KIP-429) and the assignors live in
the clients. Only two broker features look inside, both for groups whose
protocol type is ``"consumer"``:

* OffsetDelete (KIP-496) refuses to delete offsets of a topic the group is
  subscribed to (GROUP_SUBSCRIBED_TO_TOPIC).
* Offset expiration of a Stable group expires offsets of topics nobody
  subscribes to any more.

Both need the union of the members' subscribed topics. Kafka reads each
member's ConsumerProtocolSubscription with the version-0 schema after the
version prefix: every later version only appends fields (owned partitions,
generation, rack), so the v0 prefix is readable whatever the client sent, and
a future version cannot break the broker. We do the same.

The encoders are for tests and tools (and document the layout).
"""

from __future__ import annotations

import struct
from typing import Iterable, Mapping, Optional, Sequence

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "decode_subscription_topics",
    "encode_assignment",
    "encode_subscription",
]

CONSUMER_PROTOCOL_TYPE = "consumer"


class _Truncated(Exception):
    pass


def _read(data: bytes, pos: int, fmt: str) -> tuple[int, int]:
    size = struct.calcsize(fmt)
    if pos + size > len(data):
        raise _Truncated
    return struct.unpack_from(fmt, data, pos)[0], pos + size


def decode_subscription_topics(metadata: bytes) -> Optional[set[str]]:
    """The topics of a ConsumerProtocolSubscription, or None if the bytes are
    not one (Kafka then treats the group's subscriptions as unknown)."""
    try:
        version, pos = _read(metadata, 0, ">h")
        if version < 0:
            return None
        count, pos = _read(metadata, pos, ">i")
        if count < 0:
            return None
        topics = set()
        for _ in range(count):
            length, pos = _read(metadata, pos, ">h")
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(bytes(metadata[pos : pos + length]).decode("utf-8"))
            pos += length
        # user_data (nullable bytes) completes the v0 schema.
        length, pos = _read(metadata, pos, ">i")
        if length > 0 and pos + length > len(metadata):
            return None
        return topics
    except (_Truncated, UnicodeDecodeError):
        return None


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _nullable_bytes(value: Optional[bytes]) -> bytes:
    if value is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(value)) + value


def _topic_partitions(partitions: Mapping[str, Sequence[int]]) -> bytes:
    out = struct.pack(">i", len(partitions))
    for topic, parts in partitions.items():
        out += _string(topic) + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    return out


def encode_subscription(
    topics: Iterable[str],
    user_data: Optional[bytes] = None,
    *,
    version: int = 0,
    owned_partitions: Optional[Mapping[str, Sequence[int]]] = None,
    generation_id: int = -1,
    rack_id: Optional[str] = None,
) -> bytes:
    """ConsumerProtocolSubscription, versions 0-3."""
    topics = list(topics)
    out = struct.pack(">h", version) + struct.pack(">i", len(topics))
    out += b"".join(_string(t) for t in topics)
    out += _nullable_bytes(user_data)
    if version >= 1:
        out += _topic_partitions(owned_partitions or {})
    if version >= 2:
        out += struct.pack(">i", generation_id)
    if version >= 3:
        out += struct.pack(">h", -1) if rack_id is None else _string(rack_id)
    return out


def encode_assignment(partitions: Mapping[str, Sequence[int]], user_data: Optional[bytes] = None, *, version: int = 0) -> bytes:
    """ConsumerProtocolAssignment (versions 0-3 share this layout)."""
    return struct.pack(">h", version) + _topic_partitions(partitions) + _nullable_bytes(user_data)
