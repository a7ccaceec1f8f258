"""The consumer's embedded protocol (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, versions 0-3) as a classic member of a consumer
group sends and expects it: its topics and the partitions it still owns, and
the assignment the coordinator computed for it."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

MAX_VERSION = 3


class EmbeddedProtocolError(ValueError):
    """Bytes that are not a ConsumerProtocolSubscription/Assignment."""


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: dict[str, tuple[int, ...]]  # empty before v1 (eager members revoke everything before joining)
    rack_id: Optional[str] = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise EmbeddedProtocolError("truncated")
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def string(self) -> Optional[str]:
        n = self.take(">h")
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise EmbeddedProtocolError("truncated string")
        value = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return value

    def nullable_bytes(self) -> None:
        n = self.take(">i")
        if n > 0:
            if self.pos + n > len(self.data):
                raise EmbeddedProtocolError("truncated bytes")
            self.pos += n

    def topic_partitions(self) -> dict[str, tuple[int, ...]]:
        result = {}
        for _ in range(max(self.take(">i"), 0)):
            topic = self.string() or ""
            result[topic] = tuple(self.take(">i") for _ in range(max(self.take(">i"), 0)))
        return result


def decode_subscription(metadata: bytes) -> Subscription:
    reader = _Reader(bytes(metadata))
    version = reader.take(">h")
    if version < 0:
        raise EmbeddedProtocolError(f"subscription version {version}")
    topics = tuple(reader.string() or "" for _ in range(max(reader.take(">i"), 0)))
    reader.nullable_bytes()
    owned: dict[str, tuple[int, ...]] = {}
    rack = None
    try:
        if version >= 1:
            owned = reader.topic_partitions()
        if version >= 2:
            reader.take(">i")  # generation
        if version >= 3:
            rack = reader.string()
    except EmbeddedProtocolError:
        if version <= MAX_VERSION:
            raise
        # A newer version than we know: its v3 prefix is what we read.
    return Subscription(version, topics, owned, rack)


def encode_assignment(partitions: Mapping[str, Sequence[int]], version: int) -> bytes:
    """ConsumerProtocolAssignment in the member's own version (0-3 share this layout)."""
    out = struct.pack(">hi", max(0, min(version, MAX_VERSION)), len(partitions))
    for topic, parts in sorted(partitions.items()):
        data = topic.encode("utf-8")
        out += struct.pack(">h", len(data)) + data + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in sorted(parts))
    return out + struct.pack(">i", -1)  # no user data
