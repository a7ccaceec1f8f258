"""Tail fetches answered from this edge's own appends.

Why: a consumer at the tail of a partition sends a fetch, the edge parks it
in the leader replica (one actor call), and the next append answers it. On
this machine a Ray call costs ~1.7 ms of CPU in the callee and ~1.3 ms in
the caller (bench.env_costs): at the rates of the latency phase, one call
per produce request plus one per tail fetch keeps a core busy.

The edge already makes the append call; the replica's answer to it can
carry where the new data is (file slices) once the high watermark covers
it (actors/partition_leader.py, ``append(..., tail=True)``). The edge keeps
the last few such answers per partition here. A fetch at exactly the
offset where one starts is answered from it; a fetch at the offset the last
one ended (the consumer is waiting for the next append) waits here, briefly,
for the next local append instead of parking in the replica. Without one in
that time it asks the replica as before, for the rest of its wait.

What an answer holds is what the replica said right after that append:
committed slices and its high watermark, last stable offset and log start
offset. Entries live at most ``ttl_s`` and all are dropped on a metadata
update (a leadership change). The slices are checked on use like any
others (storage/slice_reader.py: file inode and first batch's base offset): a segment deleted or
replaced since turns the hit into a call. Only the appends of this edge are
seen: with several edges per node, another edge's appends reach this
edge's consumers through the replica, after the short local wait, so the
edge turns the wait off there (``wait_s`` 0).
"""
from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable

from core.replica_messages import CommittedTail

__all__ = ["LocalTail"]


class _PartitionTail:
    __slots__ = ("entries", "next_offset", "leader_epoch", "published", "event")

    def __init__(self) -> None:
        # first offset -> (expires, CommittedTail)
        self.entries: collections.OrderedDict[int, tuple] = collections.OrderedDict()
        self.next_offset = -1
        self.leader_epoch = -1
        self.published = 0.0
        self.event: asyncio.Event | None = None


class LocalTail:
    """Per-edge record of the data its own appends committed; a plain class
    (asyncio for the waits, no Ray)."""

    def __init__(self, wait_s: float = 0.05, ttl_s: float = 0.5, entries_per_partition: int = 8,
                 max_partitions: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s
        self.ttl_s = ttl_s
        self.entries_per_partition = entries_per_partition
        self.max_partitions = max_partitions
        self._clock = clock
        self._tails: collections.OrderedDict[tuple[str, int], _PartitionTail] = collections.OrderedDict()
        self.hits = 0
        self.waits = 0
        self.wait_misses = 0

    def publish(self, topic: str, partition: int, committed: CommittedTail) -> None:
        """Record the committed data [first_offset, next_offset) an append's answer names."""
        if not committed.slices or committed.next_offset <= committed.first_offset or self.max_partitions <= 0:
            return
        key = (topic, partition)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = _PartitionTail()
            while len(self._tails) > self.max_partitions:
                _key, dropped = self._tails.popitem(last=False)
                self._wake(dropped)
        else:
            self._tails.move_to_end(key)
        leader_epoch, next_offset = committed.leader_epoch, committed.next_offset
        if leader_epoch != tail.leader_epoch:
            tail.entries.clear()
        now = self._clock()
        tail.entries[committed.first_offset] = (now + self.ttl_s, committed)
        while len(tail.entries) > self.entries_per_partition:
            tail.entries.popitem(last=False)
        tail.next_offset = max(tail.next_offset, next_offset) if leader_epoch == tail.leader_epoch else next_offset
        tail.leader_epoch = leader_epoch
        tail.published = now
        self._wake(tail)

    @staticmethod
    def _wake(tail: _PartitionTail) -> None:
        if tail.event is not None:
            tail.event.set()
            tail.event = None

    def take(self, topic: str, partition: int, offset: int, max_bytes: int, leader_epoch: int,
             isolation: int, min_bytes: int = 0):
        """(hw, lso, log_start, slices) for a fetch at ``offset``, or None.

        Several consumers may read the same offsets: an entry stays until it
        expires or newer ones push it out. Refused when the fetch's leader
        epoch is given and differs, when the data is larger than the fetch's
        partition budget (the replica would cut it at a batch boundary), or
        smaller than its min_bytes, or, for read_committed, beyond the last
        stable offset."""
        tail = self._tails.get((topic, partition))
        entry = tail.entries.get(offset) if tail is not None else None
        if entry is None:
            return None
        expires, committed = entry
        length = committed.length
        if (expires < self._clock() or (leader_epoch >= 0 and leader_epoch != committed.leader_epoch)
                or length > max_bytes or length < min_bytes
                or (isolation == 1 and committed.last_stable_offset < committed.next_offset)):
            return None
        self.hits += 1
        return committed.high_watermark, committed.last_stable_offset, committed.log_start_offset, committed.slices

    def expects(self, topic: str, partition: int, offset: int, leader_epoch: int) -> bool:
        """Is ``offset`` where this edge's last append to the partition ended,
        recently enough that the next one is likely to come through here?"""
        if self.wait_s <= 0:
            return False
        tail = self._tails.get((topic, partition))
        return (tail is not None and tail.next_offset == offset
                and (leader_epoch < 0 or leader_epoch == tail.leader_epoch)
                and self._clock() - tail.published <= self.ttl_s)

    async def wait(self, topic: str, partition: int, timeout_s: float) -> None:
        """Until the next publish for the partition, or ``timeout_s``."""
        tail = self._tails.get((topic, partition))
        if tail is None or timeout_s <= 0:
            return
        if tail.event is None:
            tail.event = asyncio.Event()
        self.waits += 1
        try:
            await asyncio.wait_for(tail.event.wait(), timeout_s)
        except asyncio.TimeoutError:
            self.wait_misses += 1

    def forget(self, topic: str, partition: int | None = None) -> None:
        """Drop one partition's entries, or those of every partition of ``topic``."""
        for key in [k for k in self._tails if k[0] == topic and (partition is None or k[1] == partition)]:
            self._wake(self._tails.pop(key))

    def clear(self) -> None:
        for tail in self._tails.values():
            self._wake(tail)
        self._tails.clear()
