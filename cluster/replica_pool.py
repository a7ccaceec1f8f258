"""Live replica actors as a cache over the partitions a node hosts (issue 30):
idle replicas hibernate (log on disk, state in ZooKeeper and here, actor gone)
and wake on the first request that needs them. Plain asyncio, no Ray: the
node's edge drives it (actors/replica_keeper.py starts and stops the actors).

Why this shape: the cost of a replica is its live process (Ray's core worker
wakes ~150 times a second: ~1.1% of a core and ~48 MiB each, DESIGN
"Density and liveness"), not its partition. A node can host far more
partitions than it can keep processes for, if most of them are idle, which
is what real clusters look like.

Who routes to a hibernating replica: the edge of its node, for the clients,
and the controller's channel, which sends a pooled replica's LeaderAndIsr
here instead of to the actor. A hibernated replica's LeaderAndIsr is kept
(the newest the controller sent), and a wake replays it to the new actor, so
it comes back with the same name, log, leader epoch and ISR; nothing a
client or the controller sees changes.

The idle time to hibernate after (`raykafka.replica.hibernate.ms`; 60 s
recommended, 0 = off, the default until the whole suite has run with it) is the ski-rental break-even on this machine: a wake costs about one
actor start (~0.4-0.7 s of a core, ENVIRONMENT.md), an idle live replica
~0.011 core-seconds per second, so staying live for ~40-60 s costs what one
wake does. Hibernating after that long costs at most about twice the best
schedule in hindsight, and a partition written more often than once a
minute never pays a wake. The live limit evicts sooner when it must.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import logging
import time
from typing import Any, Awaitable, Callable, NamedTuple, Protocol

from core.error_codes import ErrorCode
from core.naming import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from core.pooled_replica import HibernateAnswer

log = logging.getLogger("raykafka.replica_pool")

HIBERNATE_KEY = "raykafka.replica.hibernate.ms"
DEFAULT_HIBERNATE_MS = 60_000
# Wake latencies kept for the p50/p99 the metrics and tools show.
LATENCY_SAMPLES = 1024
# Bound on how long a wake waits for a live slot (an idle replica to evict)
# before it starts its actor over the limit: a request is never refused for
# the limit, and one that would wait longer would time out anyway.
SLOT_WAIT_S = 10.0
# Actor starts under way at once: Ray starts worker processes a few at a time
# (its startup concurrency is the node's CPU count), so fifty wakes at once only
# queue there, each waiting longer; here they queue in order and each start
# gets the CPU it needs.
MAX_CONCURRENT_STARTS = 4


class PoolKey(NamedTuple):
    topic: str
    partition: int


class PoolStats(NamedTuple):
    hosted: int
    live: int
    hibernated: int
    live_max: int
    wakeups: int
    hibernations: int
    refusals: int  # hibernations a replica refused (open transaction, unreplicated tail, ...)
    over_limit: int  # wakes that started over the live limit (no idle replica to evict in time)
    wake_p50_ms: float
    wake_p99_ms: float


class ReplicaStarter(Protocol):
    """How the pool starts, calls and stops actors (actors/replica_keeper.py)."""

    def start(self, spec: Any, request: Any) -> Awaitable[Any]:
        """Start (or find) the replica actor and give it its LeaderAndIsr; -> its handle."""

    def leader_and_isr(self, handle: Any, request: Any) -> Awaitable[int]:
        """Forward a LeaderAndIsr to a live replica; -> its error code."""

    def hibernate(self, handle: Any) -> Awaitable[HibernateAnswer]:
        """Ask a live replica to checkpoint and close, unless something holds it."""

    def end(self, handle: Any) -> None:
        """End the (closed) actor's process."""


class State(enum.Enum):
    HIBERNATED = "hibernated"
    WAKING = "waking"
    LIVE = "live"
    HIBERNATING = "hibernating"


@dataclasses.dataclass
class Entry:
    spec: Any
    request: Any  # the newest LeaderAndIsr (controller epoch, leader, leader epoch, isr, replicas, zk version)
    state: State = State.HIBERNATED
    handle: Any = None
    inflight: int = 0
    last_used: float = 0.0
    # Not asked to hibernate again before this time (it refused: open transaction, ...).
    not_before: float = 0.0
    transition: asyncio.Future | None = None  # set while WAKING or HIBERNATING
    failure: Exception | None = None  # why the last wake failed, for the requests that waited on it


def _newer_or_same(request: Any, known: Any) -> bool:
    return (request.controller_epoch, request.leader_epoch) >= (known.controller_epoch, known.leader_epoch)


class ReplicaPool:
    """The pooled replicas of one node, keyed by (topic, partition)."""

    def __init__(self, starter: ReplicaStarter, live_max: int, hibernate_s: float,
                 clock: Callable[[], float] = time.monotonic, slot_wait_s: float = SLOT_WAIT_S):
        self.starter = starter
        self.live_max = max(1, live_max)
        self.hibernate_s = hibernate_s
        self.clock = clock
        self.slot_wait_s = slot_wait_s
        self.entries: dict[PoolKey, Entry] = {}
        # Live entries, least recently used first (the eviction order).
        self._lru: collections.OrderedDict[PoolKey, None] = collections.OrderedDict()
        self._changed = asyncio.Event()
        self.wakeups = self.hibernations = self.refusals = self.over_limit = 0
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_SAMPLES)
        self._starts = asyncio.Semaphore(MAX_CONCURRENT_STARTS)
        self._tasks: set[asyncio.Task] = set()
        self.on_hibernated: Callable[[PoolKey, Any], None] | None = None  # the router drops the handle's channel

    # ---- what the controller sends -----------------------------------------------------------
    async def leader_and_isr(self, key: PoolKey, spec: Any, request: Any) -> int:
        """A pooled replica's LeaderAndIsr: kept for a hibernated one (no wake:
        creating 1,000 partitions starts no actor), forwarded to a live one."""
        key = PoolKey(*key)
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = Entry(spec, request, last_used=self.clock())
            return 0
        if not _newer_or_same(request, entry.request):
            return int(ErrorCode.stale_controller_epoch) if request.controller_epoch < entry.request.controller_epoch \
                else int(ErrorCode.fenced_leader_epoch)
        await self._settled(entry)
        entry.spec, entry.request = spec, request
        if entry.state is not State.LIVE:
            return 0
        handle = await self.acquire(key)
        try:
            return await self.starter.leader_and_isr(handle, request)
        finally:
            self.release(key)

    def forget(self, key: PoolKey) -> Any:
        """The replica was deleted or moved away: -> its live handle (the caller ends it), or None."""
        entry = self.entries.pop(PoolKey(*key), None)
        self._lru.pop(PoolKey(*key), None)
        self._changed.set()
        return entry.handle if entry is not None and entry.state is State.LIVE else None

    def knows(self, key: PoolKey) -> bool:
        return PoolKey(*key) in self.entries

    # ---- what requests need ---------------------------------------------------------------------
    async def acquire(self, key: PoolKey) -> Any:
        """The live handle of `key`'s replica, woken if it hibernates; counts
        as in flight (not hibernated) until release(). KeyError: not pooled here.
        A caller that gives up (its timeout) does not stop a wake under way."""
        key = PoolKey(*key)
        while True:
            entry = self.entries[key]
            if entry.state is State.LIVE:
                entry.inflight += 1
                entry.last_used = self.clock()
                self._lru.move_to_end(key)
                return entry.handle
            if entry.state is State.HIBERNATED:
                # WAKING from here on, before any await: concurrent requests wait for this one wake.
                entry.state = State.WAKING
                entry.transition = asyncio.get_running_loop().create_future()
                task = asyncio.get_running_loop().create_task(self._wake(key, entry))
                self._tasks.add(task)  # referenced until done: the loop keeps only weak references
                task.add_done_callback(self._tasks.discard)
            await self._settled(entry)
            if entry.state is State.HIBERNATED and entry.handle is None and entry.failure is not None:
                failure, entry.failure = entry.failure, None
                raise failure

    def release(self, key: PoolKey) -> None:
        entry = self.entries.get(PoolKey(*key))
        if entry is not None and entry.inflight > 0:
            entry.inflight -= 1
            entry.last_used = self.clock()
            if entry.inflight == 0:
                self._changed.set()

    def lost(self, key: PoolKey, handle: Any) -> None:
        """A call to this live replica found its actor gone (crashed, killed): the next
        request starts it again (its log is on disk, its LeaderAndIsr here)."""
        key = PoolKey(*key)
        entry = self.entries.get(key)
        if entry is not None and entry.state is State.LIVE and entry.handle is handle:
            log.warning("pooled replica %s-%d was lost; the next request starts it again", *key)
            entry.state, entry.handle = State.HIBERNATED, None
            self._lru.pop(key, None)
            self._changed.set()

    def live_handle(self, key: PoolKey) -> Any:
        """The handle if live now (metrics sampling: never wakes)."""
        entry = self.entries.get(PoolKey(*key))
        return entry.handle if entry is not None and entry.state is State.LIVE else None

    async def _settled(self, entry: Entry) -> None:
        while entry.transition is not None:
            await asyncio.shield(entry.transition)

    async def _wake(self, key: PoolKey, entry: Entry) -> None:
        started = self.clock()
        try:
            await self._make_room(key)
            async with self._starts:
                entry.handle = await self.starter.start(entry.spec, entry.request)
        except Exception as exc:  # noqa: BLE001 - the waiting requests get it
            log.warning("waking %s-%d failed: %r", key.topic, key.partition, exc)
            entry.state, entry.handle, entry.failure = State.HIBERNATED, None, exc
        else:
            entry.state = State.LIVE
            entry.last_used = self.clock()
            entry.not_before = 0.0
            self._lru[key] = None
            self.wakeups += 1
            took = self.clock() - started
            self._latencies.append(took)
            log.info("woke %s-%d in %.0f ms (%d of %d live)", key.topic, key.partition, took * 1000,
                     self._live_count(), self.live_max)
        finally:
            transition, entry.transition = entry.transition, None
            transition.set_result(None)
            self._changed.set()

    def _live_count(self) -> int:
        return sum(1 for e in self.entries.values() if e.state is not State.HIBERNATED)

    async def _make_room(self, waking: PoolKey) -> None:
        """Evict least recently used idle replicas until the wake fits the live limit."""
        deadline = self.clock() + self.slot_wait_s
        while self._live_count() > self.live_max:  # the waking entry counts already
            candidate = next((k for k in self._lru if self._evictable(self.entries[k], ignore_time=True)), None)
            if candidate is not None:
                await self._hibernate(candidate, self.entries[candidate])
                continue
            remaining = deadline - self.clock()
            if remaining <= 0:
                self.over_limit += 1
                log.warning("waking %s-%d over the live limit %d: no idle replica to hibernate", *waking,
                            self.live_max)
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                pass

    # ---- hibernation ---------------------------------------------------------------------------
    def _evictable(self, entry: Entry, ignore_time: bool = False) -> bool:
        now = self.clock()
        return (entry.state is State.LIVE and entry.inflight == 0 and now >= entry.not_before
                and (ignore_time or now - entry.last_used >= self.hibernate_s))

    async def hibernate_idle(self) -> int:
        """One sweep: hibernate every replica idle for raykafka.replica.hibernate.ms; -> how many."""
        done = 0
        for key in [k for k in self._lru if self._evictable(self.entries[k])]:
            entry = self.entries.get(key)
            if entry is not None and self._evictable(entry) and await self._hibernate(key, entry):
                done += 1
        return done

    async def _hibernate(self, key: PoolKey, entry: Entry) -> bool:
        entry.state = State.HIBERNATING
        entry.transition = asyncio.get_running_loop().create_future()
        self._lru.pop(key, None)
        handle = entry.handle
        try:
            try:
                answer = await self.starter.hibernate(handle)
            except Exception as exc:  # noqa: BLE001 - gone already (killed, node trouble): it is not live
                answer = HibernateAnswer(True, f"unreachable: {exc!r}"[:200])
            if not answer.ok:
                self.refusals += 1
                entry.state = State.LIVE
                entry.not_before = self.clock() + self.hibernate_s
                self._lru[key] = None
                self._lru.move_to_end(key, last=False)
                return False
            self.starter.end(handle)
            entry.state, entry.handle = State.HIBERNATED, None
            self.hibernations += 1
            if self.on_hibernated is not None:
                self.on_hibernated(key, handle)
            return True
        finally:
            transition, entry.transition = entry.transition, None
            transition.set_result(None)
            self._changed.set()

    async def run(self, interval_s: float) -> None:
        """The sweep, forever (the edge's background task)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.hibernate_idle()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next sweep tries again
                log.exception("hibernation sweep failed")

    # ---- what operators see ----------------------------------------------------------------------
    def stats(self) -> PoolStats:
        live = self._live_count()
        ordered = sorted(self._latencies)
        return PoolStats(len(self.entries), live, len(self.entries) - live, self.live_max, self.wakeups,
                         self.hibernations, self.refusals, self.over_limit,
                         _quantile(ordered, 0.5) * 1000, _quantile(ordered, 0.99) * 1000)


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]



def hibernation_blocker(topic: str, is_leader: bool, replicas: int, high_watermark: int, log_end_offset: int,
                        open_transaction: bool) -> str:
    """What holds a replica live ("" when nothing does). The pool already
    holds back a replica with a request in flight (a parked fetch, a pending
    DeleteRecords, an append); these are what only the replica knows."""
    if topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        return "internal topic"
    if not is_leader:
        return "not the leader"
    if replicas > 1:
        return "replicated (RF > 1 replicas stay live)"
    if high_watermark < log_end_offset:
        return "unreplicated tail"
    if open_transaction:
        return "open transaction"
    return ""
