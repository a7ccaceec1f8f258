"""Read-ahead of consumer fetches on the edge.

Why: a consumer catching up fetches offset after offset, and each fetch
used to cost one actor call to the leader replica (~0.5 ms of CPU on each
side plus a round trip: the top cost in bench/PROFILE.md). The edge now asks
for a *run* of consecutive reads (ReplicaActor.read_run), answers the fetch
with the first and keeps the rest here, keyed by the offset each one starts
at. When the client's next fetch asks for exactly that offset (same
partition, max bytes, leader epoch and isolation level), it is answered
from here.

What an answer holds is what the replica would have said at the time of the
run: slices of committed data (below the high watermark) plus the high
watermark, last stable offset and log start offset of that moment. Entries
live at most ``ttl_s``, so those figures are at most that stale, and every
entry is dropped on a metadata update (a leadership change). The slices
themselves are checked on use like any others (the file's inode and the
first batch's base offset, storage/slice_reader.py): a segment deleted or
replaced since simply turns the hit into a call. A read_committed run ends
at the last stable offset of its moment, as a read then would have; the
replica reports no aborted transactions yet (there are no transactions), and
when it does they must be kept with each read.
"""
from __future__ import annotations

import collections
import time
from typing import Callable

__all__ = ["FetchReadAhead", "ReadAheadHit"]

ReadAheadHit = tuple  # (high_watermark, last_stable_offset, log_start_offset, slices)


class FetchReadAhead:
    """Per-edge cache of read-ahead answers; a plain class, no Ray."""

    def __init__(self, max_entries: int = 1024, ttl_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        # (topic, partition, offset) -> (expires, (max_bytes, leader_epoch, isolation), hw, lso, log_start, runs)
        # where runs[0] (a ReadRun) answers a fetch at its offset.
        self._entries: collections.OrderedDict[tuple[str, int, int], tuple] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, topic: str, partition: int, max_bytes: int, leader_epoch: int, isolation: int,
            high_watermark: int, last_stable_offset: int, log_start_offset: int, runs: list) -> None:
        """Keep ``runs`` (core.replica_messages.ReadRun, consecutive) for later fetches."""
        if not runs or self.max_entries <= 0:
            return
        key = (topic, partition, runs[0].offset)
        self._entries[key] = (self._clock() + self.ttl_s, (max_bytes, leader_epoch, isolation),
                              high_watermark, last_stable_offset, log_start_offset, runs)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def take(self, topic: str, partition: int, offset: int, max_bytes: int, leader_epoch: int,
             isolation: int) -> ReadAheadHit | None:
        """The answer kept for a fetch at ``offset``, or None."""
        entry = self._entries.pop((topic, partition, offset), None)
        if entry is None:
            self.misses += 1
            return None
        expires, asked, hw, lso, start, runs = entry
        if expires < self._clock() or asked != (max_bytes, leader_epoch, isolation):
            self.misses += 1
            return None
        self.hits += 1
        rest = runs[1:]
        if rest:
            self._entries[(topic, partition, rest[0].offset)] = (expires, asked, hw, lso, start, rest)
        return hw, lso, start, runs[0].slices

    def forget(self, topic: str, partition: int | None = None) -> None:
        """Drop what is kept for one partition, or for every partition of ``topic``."""
        for key in [k for k in self._entries if k[0] == topic and (partition is None or k[1] == partition)]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()
