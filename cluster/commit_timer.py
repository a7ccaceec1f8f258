"""Time from a leader's append to the high watermark passing it (what an
acks=all producer waits for beyond the append itself), as counters a
profile reads: count, sum, max and a coarse histogram.

Split in two (where an append's wait goes): append -> the first follower
fetch answer that carries it leaves the leader (how fast a parked follower
fetch is woken), and the rest (the follower reading and appending it and its
next fetch arriving with the new log end, the slower of the ISR's followers).

Cheap enough to stay on: one entry in each of two deques per append call that
left data uncommitted, popped when a fetch answer / the high watermark passes it.
"""
from __future__ import annotations

import collections

# Upper bounds (ms) of the histogram's buckets; the last bucket is open.
BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
# Bound on remembered appends: beyond it the oldest is dropped uncounted
# (a leader whose followers are gone would otherwise grow it without end).
MAX_PENDING = 4096


class _Durations:
    """count, sum, max and histogram of durations in ms."""

    def __init__(self) -> None:
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0
        self.histogram = [0] * (len(BUCKETS_MS) + 1)

    def add(self, ms: float) -> None:
        self.count += 1
        self.total_ms += ms
        if ms > self.max_ms:
            self.max_ms = ms
        i = 0
        while i < len(BUCKETS_MS) and ms > BUCKETS_MS[i]:
            i += 1
        self.histogram[i] += 1

    def stats(self, prefix: str) -> dict:
        return {f"{prefix}_count": self.count, f"{prefix}_total_ms": round(self.total_ms, 3),
                f"{prefix}_max_ms": round(self.max_ms, 3), f"{prefix}_histogram": list(self.histogram)}


class CommitTimer:
    def __init__(self) -> None:
        self._pending: collections.deque[tuple[int, float]] = collections.deque()
        self._unserved: collections.deque[tuple[int, float]] = collections.deque()
        self._commit = _Durations()  # append -> HW
        self._serve = _Durations()  # append -> first follower fetch answer carrying it

    @property
    def count(self) -> int:
        return self._commit.count

    def appended(self, end_offset: int, now_s: float) -> None:
        """Data up to ``end_offset`` (exclusive) was appended at ``now_s``, not yet committed."""
        for queue in (self._pending, self._unserved):
            if len(queue) >= MAX_PENDING:
                queue.popleft()
            queue.append((end_offset, now_s))

    def served(self, end_offset: int, now_s: float) -> None:
        """A follower fetch answer carrying data up to ``end_offset`` (exclusive) leaves now."""
        unserved = self._unserved
        while unserved and unserved[0][0] <= end_offset:
            self._serve.add((now_s - unserved.popleft()[1]) * 1000)

    def committed(self, high_watermark: int, now_s: float) -> None:
        pending = self._pending
        while pending and pending[0][0] <= high_watermark:
            _, at = pending.popleft()
            self._commit.add((now_s - at) * 1000)
        unserved = self._unserved  # committed without a fetch answer seen here (an ISR change)
        while unserved and unserved[0][0] <= high_watermark:
            unserved.popleft()

    def reset_pending(self) -> None:
        """Leadership changed: what was waiting is no longer this leader's to time."""
        self._pending.clear()
        self._unserved.clear()

    def stats(self) -> dict:
        return {**self._commit.stats("commit"), **self._serve.stats("serve")}
