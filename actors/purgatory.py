"""The delayed-operation purgatory actor: one per node.

A thin asyncio shell over delayed/ (Kafka's hierarchical timing wheel with a
delay queue of buckets, and DelayedOperationPurgatory with watch keys). The
actor's event loop is the only thread touching them, so they need no locks.

Operations are parked here by key (e.g. "topic-partition") and completed when
a replica reports progress under that key (check_and_complete) or when their
deadline passes. Each parked operation is an awaitable the caller holds open:
it returns True if completed by a key check, False on expiry.
"""
from __future__ import annotations

import asyncio

import ray

from delayed import AsyncTimerDriver, DelayedOperation, DelayedOperationPurgatory, SystemTimer

# Kafka's purgatory purge interval (fetch.purgatory.purge.interval.requests).
PURGE_INTERVAL = 1000
# Bound on parked operations: beyond it new ones are refused (caller answers at once).
MAX_PARKED = 100_000


class _WaitForKey(DelayedOperation):
    """Completes when its key is checked (progress reported), or expires."""

    def __init__(self, delay_ms: int, future: asyncio.Future):
        super().__init__(delay_ms)
        self.future = future
        self.progressed = False

    def try_complete(self) -> bool:
        if self.progressed:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.progressed)


class PurgatoryActor:
    def __init__(self) -> None:
        self._driver: AsyncTimerDriver | None = None
        self._purgatory: DelayedOperationPurgatory | None = None

    def _ensure(self) -> DelayedOperationPurgatory:
        if self._purgatory is None:
            timer = SystemTimer(tick_ms=1, wheel_size=20)
            self._driver = AsyncTimerDriver(timer, asyncio.get_running_loop())
            self._purgatory = DelayedOperationPurgatory("delayed", timer, purge_interval=PURGE_INTERVAL)
        return self._purgatory

    async def wait(self, keys: list[str], timeout_ms: int) -> bool:
        """Park until progress is reported under any key (True) or timeout (False)."""
        purgatory = self._ensure()
        if purgatory.delayed >= MAX_PARKED:
            return False
        future = asyncio.get_running_loop().create_future()
        op = _WaitForKey(timeout_ms, future)
        purgatory.try_complete_else_watch(op, keys)
        return await future

    async def progress(self, keys: list[str]) -> int:
        """A replica reports progress (append, HW move): complete what waits on it."""
        purgatory = self._ensure()
        completed = 0
        for key in keys:
            for op in purgatory.watched_operations(key):
                op.progressed = True
            completed += purgatory.check_and_complete(key)
        purgatory.purge_completed()
        return completed

    async def stats(self) -> dict:
        purgatory = self._ensure()
        return {"delayed": purgatory.delayed, "watched": purgatory.watched}


PurgatoryActorRemote = ray.remote(PurgatoryActor)
