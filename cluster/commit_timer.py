"""Time from a leader's append to the high watermark passing it (what an
acks=all producer waits for beyond the append itself), as counters a
profile reads: count, sum, max and a coarse histogram.

Cheap enough to stay on: one deque entry per append call that left data
uncommitted, popped when the high watermark passes it.
"""
from __future__ import annotations

import collections

# Upper bounds (ms) of the histogram's buckets; the last bucket is open.
BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
# Bound on remembered appends: beyond it the oldest is dropped uncounted
# (a leader whose followers are gone would otherwise grow it without end).
MAX_PENDING = 4096


class CommitTimer:
    def __init__(self) -> None:
        self._pending: collections.deque[tuple[int, float]] = collections.deque()
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0
        self.histogram = [0] * (len(BUCKETS_MS) + 1)

    def appended(self, end_offset: int, now_s: float) -> None:
        """Data up to ``end_offset`` (exclusive) was appended at ``now_s``, not yet committed."""
        if len(self._pending) >= MAX_PENDING:
            self._pending.popleft()
        self._pending.append((end_offset, now_s))

    def committed(self, high_watermark: int, now_s: float) -> None:
        pending = self._pending
        while pending and pending[0][0] <= high_watermark:
            _, at = pending.popleft()
            ms = (now_s - at) * 1000
            self.count += 1
            self.total_ms += ms
            if ms > self.max_ms:
                self.max_ms = ms
            i = 0
            while i < len(BUCKETS_MS) and ms > BUCKETS_MS[i]:
                i += 1
            self.histogram[i] += 1

    def reset_pending(self) -> None:
        """Leadership changed: what was waiting is no longer this leader's to time."""
        self._pending.clear()

    def stats(self) -> dict:
        return {"commit_count": self.count, "commit_total_ms": round(self.total_ms, 3),
                "commit_max_ms": round(self.max_ms, 3), "commit_histogram": list(self.histogram)}
