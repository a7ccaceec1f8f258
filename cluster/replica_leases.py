"""Replica pooling on a node with several edges (issue 30, raykafka.edge.processes > 1).

The node's replica pool (cluster/replica_pool.py) lives in its primary edge:
one process decides what is live, wakes, evicts and hibernates. The sibling
edges serve clients as well, and their requests must wake a hibernated
replica and keep it live while they use it, as the primary's own requests do.

Asking the primary on every request (acquire, then release) would put two
actor calls on each produce and fetch of a sibling. A sibling takes a *lease*
instead: the primary's pool counts it as one request in flight (the replica
neither hibernates nor is evicted under it) and hands over the live handle,
which the sibling uses for every request until the partition has been idle
there for `linger_s`; then it gives the lease back, and the replica's idle
time runs from then on at the primary. While in use a lease is renewed every
`renew_s`; one not renewed for `ttl_s` expires at the primary, so a sibling
that died holds nothing for long.

Plain asyncio, no Ray: PoolLeases is the primary's side (over its pool),
LeasedPool the sibling's (over a PrimaryPool port; actors/edge.py wires both
over Ray).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Callable, Protocol

from cluster.replica_pool import PoolStats

log = logging.getLogger("raykafka.replica_pool")

LINGER_S = 2.0  # a sibling gives a lease back once its partition was idle there this long
RENEW_S = 5.0  # a lease in use is renewed this often ...
TTL_S = 20.0  # ... and expires at the primary when not renewed for this long


class PoolLeases:
    """The primary edge's leases of its pool's replicas to sibling edges: one per (partition,
    holder), numbered by the holder, so that a give-back overtaken by the next lease of the
    same partition (calls between actors are not ordered) ends nothing."""

    def __init__(self, pool: Any, ttl_s: float = TTL_S, clock: Callable[[], float] = time.monotonic):
        self.pool = pool
        self.ttl_s = ttl_s
        self.clock = clock
        self.held: dict[tuple[tuple[str, int], str], tuple[int, float]] = {}  # -> (lease number, expiry)

    async def lease(self, key: tuple[str, int], holder: str, number: int) -> Any:
        """The live handle of `key`'s replica (woken if it hibernates), held live for `holder`
        until it gives lease `number` back or lets it expire. KeyError: not a replica here."""
        key = tuple(key)
        handle = await self.pool.acquire(key)  # one in flight, for the lease
        if (key, holder) in self.held:
            self.pool.release(key)  # still held under an older number: one lease, the newest number
        self.held[(key, holder)] = (number, self.clock() + self.ttl_s)
        return handle

    def renew(self, leases: list[tuple[tuple[str, int], int]], holder: str) -> list[bool]:
        """Extend the holder's leases; False for one it no longer holds (expired, or the replica
        was lost or stopped): the holder drops it and leases again on its next request."""
        now, out = self.clock(), []
        for key, number in leases:
            key = tuple(key)
            held = self._holds(key, holder, number) and self.pool.live_handle(key) is not None
            if held:
                self.held[(key, holder)] = (number, now + self.ttl_s)
            elif self._holds(key, holder, number):
                self._end((key, holder))
            out.append(held)
        return out

    def give_back(self, leases: list[tuple[tuple[str, int], int]], holder: str) -> None:
        for key, number in leases:
            if self._holds(tuple(key), holder, number):
                self._end((tuple(key), holder))

    def lost(self, key: tuple[str, int], handle: Any, holder: str, number: int) -> None:
        """The holder's call found the leased actor gone: the pool starts it again on the next
        request, and the lease ends."""
        key = tuple(key)
        self.pool.lost(key, handle)
        if self._holds(key, holder, number):
            self._end((key, holder))

    def expire(self) -> int:
        """End the leases not renewed in time (the primary's sweep); -> how many."""
        now = self.clock()
        late = [lease for lease, (_n, until) in self.held.items() if until <= now]
        for lease in late:
            log.warning("lease of %s-%d by edge %s expired", *lease[0], lease[1])
            self._end(lease)
        return len(late)

    def _holds(self, key: tuple[str, int], holder: str, number: int) -> bool:
        held = self.held.get((key, holder))
        return held is not None and held[0] == number

    def _end(self, lease: tuple[tuple[str, int], str]) -> None:
        if self.held.pop(lease, None) is not None:
            self.pool.release(lease[0])


class PrimaryPool(Protocol):
    """A sibling's calls to its primary edge's PoolLeases (actors/edge.py over Ray; the
    holder is the sibling)."""

    async def lease(self, key: tuple[str, int], number: int) -> Any: ...

    async def renew(self, leases: list[tuple[tuple[str, int], int]]) -> list[bool]: ...

    async def give_back(self, leases: list[tuple[tuple[str, int], int]]) -> None: ...

    async def lost(self, key: tuple[str, int], handle: Any, number: int) -> None: ...

    async def stats(self) -> dict: ...


@dataclasses.dataclass
class Lease:
    handle: Any
    number: int
    inflight: int = 0
    last_used: float = 0.0
    renewed: float = 0.0


class LeasedPool:
    """A sibling edge's pool: the parts of ReplicaPool its router uses (acquire, release,
    lost, live_handle, knows), over leases from the primary's pool."""

    def __init__(self, primary: PrimaryPool, linger_s: float = LINGER_S, renew_s: float = RENEW_S,
                 clock: Callable[[], float] = time.monotonic):
        self.primary = primary
        self.linger_s = linger_s
        self.renew_s = renew_s
        self.clock = clock
        self.leases: dict[tuple[str, int], Lease] = {}
        self._numbers = 0
        self._pending: dict[tuple[str, int], asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self.on_hibernated = None  # the router's hook (unused: the primary's pool hibernates)
        self._stats: Any = None  # the primary pool's, refreshed every stats_s (operators' view)
        self._stats_at = float("-inf")
        self.stats_s = 2.0

    async def acquire(self, key: tuple[str, int]) -> Any:
        key = tuple(key)
        lease = self.leases.get(key)
        while lease is None:
            pending = self._pending.get(key)
            if pending is None:  # one lease call per partition: concurrent requests share it
                pending = self._pending[key] = asyncio.ensure_future(self._lease(key))
            await asyncio.shield(pending)
            lease = self.leases.get(key)  # None: given back or lost since: lease again
        lease.inflight += 1
        lease.last_used = self.clock()
        return lease.handle

    async def _lease(self, key: tuple[str, int]) -> None:
        try:
            self._numbers += 1
            number = self._numbers
            handle = await self.primary.lease(key, number)
            now = self.clock()
            self.leases[key] = Lease(handle, number, last_used=now, renewed=now)
        finally:
            self._pending.pop(key, None)

    def release(self, key: tuple[str, int]) -> None:
        lease = self.leases.get(tuple(key))
        if lease is not None and lease.inflight > 0:
            lease.inflight -= 1
            lease.last_used = self.clock()

    def lost(self, key: tuple[str, int], handle: Any) -> None:
        key = tuple(key)
        lease = self.leases.get(key)
        if lease is not None and lease.handle is handle:
            del self.leases[key]
            self._spawn(self.primary.lost(key, handle, lease.number))

    def live_handle(self, key: tuple[str, int]) -> Any:
        lease = self.leases.get(tuple(key))
        return lease.handle if lease is not None else None

    def knows(self, key: tuple[str, int]) -> bool:
        return tuple(key) in self.leases

    def stats(self):
        """The primary pool's PoolStats as last fetched (the node's counts, not this edge's);
        None before the first."""
        return None if self._stats is None else PoolStats(**self._stats)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("a lease call to the primary edge failed: %r", task.exception())

    async def tick(self) -> None:
        """Give back the leases idle for linger_s; renew the others every renew_s."""
        now = self.clock()
        if now - self._stats_at >= self.stats_s:
            self._stats_at = now
            try:
                self._stats = await self.primary.stats() or None
            except Exception as exc:  # noqa: BLE001 - shown stale until the next fetch
                log.info("the primary edge's pool stats: %r", exc)
        idle = [k for k, lease in self.leases.items() if not lease.inflight and now - lease.last_used >= self.linger_s]
        given = [(key, self.leases.pop(key).number) for key in idle]
        if given:
            await self.primary.give_back(given)
        due = [(k, lease.number) for k, lease in self.leases.items() if now - lease.renewed >= self.renew_s]
        if due:
            for (key, number), held in zip(due, await self.primary.renew(due)):
                lease = self.leases.get(key)
                if lease is None or lease.number != number:
                    continue
                if held:
                    lease.renewed = now
                else:
                    # Ended at the primary (expired while this edge stalled, or the replica was
                    # lost or stopped): requests using it finish or fail on their own, and the
                    # next one leases again.
                    del self.leases[key]

    async def run(self, interval_s: float) -> None:
        """tick() forever (the sibling edge's background task)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next tick tries again
                log.info("replica lease upkeep failed: %r", exc)
