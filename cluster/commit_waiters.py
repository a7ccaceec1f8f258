"""acks=all produces waiting at their leader for the high watermark (Kafka's
DelayedProduce for one partition, completed where the HW moves).

The edge appends, and if the answer's high watermark has not passed the
appended records the leader tells it once it has: as the append call's
second part over the edge's direct channel (a CommitNotice,
core/local_calls.FollowUp), or, where there is none, in answer to the
edge's `wait_committed` call. The leader completes every waiter the HW passed in the
very step that moved it: the follower fetch carrying the follower's new log
end, an ISR change, or an append when it is the only ISR member. No report
to the node's purgatory and no second process on the way (issue 27).

Kafka's outcome rules (DelayedProduce.tryComplete,
Partition.checkEnoughReplicasReachOffset): once the HW reaches the offset the
produce succeeds if the ISR has at least min.insync.replicas members, else
NOT_ENOUGH_REPLICAS_AFTER_APPEND; leadership lost first ->
NOT_LEADER_OR_FOLLOWER; the produce's timeout first -> REQUEST_TIMED_OUT (the
caller's wait). A limit: beyond MAX_WAITERS new waits fail at once with
REQUEST_TIMED_OUT, as a full purgatory completes new operations at once.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Any

from core.error_codes import ErrorCode

MAX_WAITERS = 100_000


class CommitWaiters:
    def __init__(self) -> None:
        # (offset the HW must reach, sequence, future): earliest first.
        self._heap: list[tuple[int, int, Any]] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, offset: int, future: Any) -> bool:
        """Wait for HW >= ``offset``; False (nothing added) when full."""
        if len(self._heap) >= MAX_WAITERS:
            return False
        heapq.heappush(self._heap, (offset, next(self._sequence), future))
        return True

    def on_high_watermark(self, high_watermark: int, isr_size: int, min_insync_replicas: int) -> int:
        """Complete the waiters the HW reached; returns how many."""
        heap = self._heap
        if not heap or heap[0][0] > high_watermark:
            return 0
        error = ErrorCode.none if isr_size >= min_insync_replicas else ErrorCode.not_enough_replicas_after_append
        done = 0
        while heap and heap[0][0] <= high_watermark:
            _, _, future = heapq.heappop(heap)
            if not future.done():
                future.set_result(error)
            done += 1
        return done

    def fail_all(self, error: int) -> None:
        """Leadership lost (or the replica stopped): every waiter gets ``error``."""
        heap, self._heap = self._heap, []
        for _, _, future in heap:
            if not future.done():
                future.set_result(error)

    def prune(self) -> None:
        """Drop waiters whose callers gave up (timed out), keeping the heap small."""
        if self._heap and any(f.done() for _, _, f in self._heap):
            self._heap = [w for w in self._heap if not w[2].done()]
            heapq.heapify(self._heap)
