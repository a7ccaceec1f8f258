"""The node's purgatory (Kafka's DelayedOperationPurgatory for Produce and
Fetch, over delayed/'s hierarchical timing wheel): parks DelayedProduce and
DelayedFetch (cluster/delayed_operations.py) per partition and completes them
from the progress (high watermark, last stable offset, ISR size, leadership)
the node's leader replicas report. No Ray: actors/purgatory.py wraps it, and
its event loop is the only thread touching it.

Leaders report only while something waits on their partition: report()
returns the partitions nothing waits on (their leaders may go quiet), and
parking on a quiet or never-heard-from partition asks its leader to report
again (ask_to_report, set by the actor).
"""
from __future__ import annotations

import asyncio
from typing import Callable, Hashable, Optional

from cluster.delayed_operations import DelayedFetch, DelayedProduce, PartitionKey
from core.replica_messages import PartitionProgress
from delayed import AsyncTimerDriver, DelayedOperationPurgatory, SystemTimer

# Kafka's purge interval (producer/fetch.purgatory.purge.interval.requests).
PURGE_INTERVAL = 1000
# Bound on parked operations: beyond it new ones complete at once.
MAX_PARKED = 100_000
# A partition something parked on this recently is not called quiet when its
# last waiter completes: a consumer's next fetch parks again within moments,
# and asking a quiet leader to report again (a Ray call, after a name lookup
# the first time) is where a record appended meanwhile waited (issue 29).
KEEP_REPORTING_S = 5.0


class PurgatoryService:
    """The purgatory's logic; actors/purgatory.py only forwards calls to it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, keep_reporting_s: float = KEEP_REPORTING_S):
        timer = SystemTimer(tick_ms=1, wheel_size=20)
        self.driver = AsyncTimerDriver(timer, loop)
        self.produce = DelayedOperationPurgatory("Produce", timer, purge_interval=PURGE_INTERVAL)
        self.fetch = DelayedOperationPurgatory("Fetch", timer, purge_interval=PURGE_INTERVAL)
        self.progress: dict[PartitionKey, PartitionProgress] = {}
        self.loop = loop
        # Partitions whose leader stopped reporting because nothing waited on
        # them; parking an operation there asks the leader to report again.
        self.quiet: set[PartitionKey] = set()
        # Partitions never reported here whose leaders were asked to report
        # (asked once: a report, or the leader's next leadership change, follows).
        self.asked_unknown: set[PartitionKey] = set()
        self.ask_to_report: Optional[Callable[[list[PartitionKey]], None]] = None  # set by the actor
        # When an operation last parked on each partition (KEEP_REPORTING_S).
        self.last_parked: dict[PartitionKey, float] = {}
        self.keep_reporting_s = keep_reporting_s

    def parked(self) -> int:
        return self.produce.delayed + self.fetch.delayed

    def delay_produce(self, required: dict[PartitionKey, int], timeout_ms: int) -> asyncio.Future:
        future = self.loop.create_future()
        op = DelayedProduce(max(0, timeout_ms), required, self.progress, future)
        if self.parked() >= MAX_PARKED:
            op.on_expiration()
            op.force_complete()
            return future
        self.produce.try_complete_else_watch(op, list(required))
        self._parked_on(required)
        return future

    def delay_fetch(self, known_ends: dict[PartitionKey, int], isolation_level: int, timeout_ms: int) -> asyncio.Future:
        future = self.loop.create_future()
        op = DelayedFetch(max(0, timeout_ms), known_ends, isolation_level, self.progress, future)
        if self.parked() >= MAX_PARKED or not known_ends:
            op.force_complete()
            return future
        self.fetch.try_complete_else_watch(op, list(known_ends))
        self._parked_on(known_ends)
        return future

    def _parked_on(self, keys) -> None:
        now = self.loop.time()
        for key in keys:
            self.last_parked[key] = now
        self._wake_quiet(keys)

    def _wake_quiet(self, keys) -> None:
        """Ask the leaders of these partitions to report if they may not: quiet
        ones, and ones never heard from (this purgatory may be a restarted one,
        and their leaders quiet towards its dead predecessor)."""
        quiet = [k for k in keys if k in self.quiet]
        unknown = [k for k in keys if k not in self.progress and k not in self.asked_unknown]
        if (quiet or unknown) and self.ask_to_report is not None:
            self.quiet.difference_update(quiet)
            self.asked_unknown.update(unknown)
            self.ask_to_report(quiet + unknown)

    def watched(self, key: PartitionKey) -> bool:
        return bool(self.produce.watched_operations(key) or self.fetch.watched_operations(key))

    def report(self, updates: list[PartitionProgress]) -> list[PartitionKey]:
        """Apply progress; returns the keys nothing waits on (their leaders may go quiet)."""
        keys = []
        for raw in updates:
            update = PartitionProgress._make(raw)  # a plain tuple (an older sender's) reads the same
            key = tuple(update.partition)
            keys.append(key)
            current = self.progress.get(key)
            if current is not None and update.leader_epoch < current.leader_epoch:
                continue  # a stale report from a deposed leader
            self.progress[key] = update
            self.asked_unknown.discard(key)
            self.produce.check_and_complete(key)
            self.fetch.check_and_complete(key)
        self.produce.purge_completed()
        self.fetch.purge_completed()
        recent = self.loop.time() - self.keep_reporting_s
        unwatched = [key for key in keys if not self.watched(key) and self.last_parked.get(key, 0.0) < recent]
        for key in unwatched:
            self.last_parked.pop(key, None)
        self.quiet.update(unwatched)
        return unwatched

    def forget(self, keys: list[Hashable]) -> None:
        for key in keys:
            self.progress.pop(tuple(key), None)
            self.asked_unknown.discard(tuple(key))
            self.last_parked.pop(tuple(key), None)
