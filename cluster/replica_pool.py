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

Replicated partitions (RF > 1, `raykafka.replica.hibernate.replicated`):
every replica of the set is pooled, each by its own node's pool, and the set
hibernates together. The leader's pool decides: its replica refuses unless
HW = LEO and every ISR follower has fetched up to LEO; it then closes, and
its pool asks each follower's pool to hibernate that follower at the same
epoch and end offset (the follower takes the leader's HW first), then ends
the leader. No follower stops fetching from a live leader, so the leader
never shrinks the ISR for it, and the controller sees no replica change. A
leader's wake wakes its followers (through their nodes' pools); a follower
fetch that finds its leader gone wakes the leader (actors/partition_leader.py).
A follower is never put to sleep by its own pool while it follows a live
leader (it refuses); one left without a leader to follow (the leader
hibernated while it was away) hibernates when idle, as a leader does.

The idle time to hibernate after (`raykafka.replica.hibernate.ms`; 60 s
the default, 0 = off) is the ski-rental break-even on this machine: a wake costs about one
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

from cluster.replication_quota import parse_throttled_replicas
from core.error_codes import ErrorCode
from core.naming import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from core.pooled_replica import HibernateAnswer

log = logging.getLogger("raykafka.replica_pool")

HIBERNATE_KEY = "raykafka.replica.hibernate.ms"
SPARES_KEY = "raykafka.replica.spares"
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
# A follower out of the ISR of a hibernated leader asks the leader's pool to wake the set
# this many times (the controller's LeaderAndIsr may reach the leader's node after it).
LEADER_WAKE_ATTEMPTS = 5
LEADER_WAKE_BACKOFF_S = 0.5
# A follower whose leader is live keeps trying to wake, as Kafka's fetcher keeps
# fetching (replica.fetch.backoff.ms): backoff from 0.5 s, doubling up to 30 s. A
# wake starts a process (~0.6 s of a core), so a follower that can never start (its
# log unreadable) costs ~2% of a core and a log line every 30 s, not a start loop.
FOLLOWER_WAKE_BACKOFF_S = 0.5
FOLLOWER_WAKE_BACKOFF_MAX_S = 30.0
# How long a new partition's LeaderAndIsr (so CreateTopics) waits for its leader's prestart:
# a few partitions' starts, not a thousand's (those answer still starting; the controller
# bounds CreateTopics by the client's timeout anyway).
PRESTART_WAIT_S = 5.0
# Prestarts under way at once, per node: a topic of up to a dozen partitions (most topics)
# is ready when CreateTopics answers; a bulk creation starts a dozen (a start costs ~0.75 s
# of a core here, spent whether or not the partition is used before it hibernates again),
# and the rest wake on their first request, as any hibernated partition does.
PRESTART_MAX = 12


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
    adopted: int = 0  # wakes a spare took (actors/replica_keeper.py)
    cold_starts: int = 0  # wakes that started a process
    prestarts: int = 0  # wakes of just-created partitions into free live slots, before any request


class ReplicaStarter(Protocol):
    """How the pool starts, calls and stops actors (actors/replica_keeper.py)."""

    def start(self, spec: Any, request: Any, spare: Any = None) -> Awaitable[Any]:
        """Start (or find) the replica actor and give it its LeaderAndIsr; -> its handle.
        `spare`: one claim_spare() gave, to adopt the partition (only with spares > 0)."""

    def leader_and_isr(self, handle: Any, request: Any) -> Awaitable[int]:
        """Forward a LeaderAndIsr to a live replica; -> its error code."""

    def hibernate(self, handle: Any) -> Awaitable[HibernateAnswer]:
        """Ask a live replica to checkpoint and close, unless something holds it."""

    def end(self, handle: Any) -> None:
        """End the (closed) actor's process."""

    # Replicated partitions only (RF > 1): the calls to the other replicas' pools.
    def wake_followers(self, spec: Any, request: Any, handle: Any = None) -> Awaitable[None]:
        """The leader woke (`handle`): each follower's pool wakes its follower (to fetch from the
        new actor); meanwhile the leader counts none it has not heard from as lagging."""

    def hibernate_followers(self, spec: Any, request: Any, answer: HibernateAnswer) -> Awaitable[None]:
        """The leader closed for hibernation at answer's HW/LEO: each follower's pool hibernates its follower."""

    def hibernate_follower(self, handle: Any, leader_epoch: int, high_watermark: int,
                           log_end_offset: int) -> Awaitable[HibernateAnswer]:
        """Ask a live follower to take the HW and close, if it holds exactly the leader's log."""

    def leader_is_live(self, spec: Any, request: Any) -> Awaitable[bool]:
        """Whether the leader `request` names has a live actor (a follower is woken to follow it)."""

    def call(self, handle: Any, method: str, args: tuple) -> Awaitable[Any]:
        """A method of a live replica actor (the controller's requests: StopReplica, ...)."""

    def delete_log(self, spec: Any, controller_epoch: int) -> Awaitable[ErrorCode]:
        """StopReplica(delete) for a replica with no live actor: open its log in an actor that takes
        no LeaderAndIsr (it leads and follows nothing), delete it, end the actor."""

    def wake_leader(self, spec: Any, request: Any) -> Awaitable[ErrorCode]:
        """Ask the pool of the leader `request` names to wake it (it then wakes its followers)."""

    def spares(self, wanted: int) -> None:
        """Keep `wanted` started, empty replica actors for wakes to adopt (only called with spares > 0)."""

    def claim_spare(self) -> Any:
        """A ready spare, taken out of the starter's hands (None: none ready; only with spares > 0)."""


class State(enum.Enum):
    HIBERNATED = "hibernated"
    # Asked for, waiting for a slot under the live limit: not a process yet, so it does not
    # count (wakes waiting for each other's slots would otherwise block one another until the
    # slot wait ran out).
    WAKING = "waking"
    STARTING = "starting"  # given its slot: a process is starting (or a spare adopting) for it
    LIVE = "live"
    HIBERNATING = "hibernating"


# What counts against the live limit: processes, and those being started or ended.
_PROCESS_STATES = frozenset({State.STARTING, State.LIVE, State.HIBERNATING})


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
    transition: asyncio.Future | None = None  # set while WAKING, STARTING or HIBERNATING
    failure: Exception | None = None  # why the last wake failed, for the requests that waited on it
    # StopReplica came (Kafka's ReplicaManager stops hosting the partition): nothing wakes it,
    # requests get NOT_LEADER_OR_FOLLOWER, until a LeaderAndIsr makes it a replica again. A wake
    # would replay the LeaderAndIsr kept from before, and bring back a leader of an old epoch
    # over a log StopReplica(delete) removed.
    stopped: bool = False
    # A replicated leader's background wake of its followers, from its last wake (a new
    # partition's LeaderAndIsr waits for it too: the set is ready when CreateTopics answers).
    followers_waking: asyncio.Task | None = None
    # Woken for its creation, no request waiting yet: its start queues after requests' wakes.
    prestarting: bool = False


class StartGate:
    """At most `limit` process starts at once, in arrival order, except that a wake a
    request waits for goes before prestarts still queued: a CreateTopics of many
    partitions must not hold up the wake of a partition a client is asking for."""

    def __init__(self, limit: int):
        self.free = limit
        self._waiting: list[tuple[asyncio.Future, Entry]] = []

    async def acquire(self, entry: Entry) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append((turn, entry))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release()  # handed the start just as it was cancelled: pass it on
            else:
                self._waiting = [w for w in self._waiting if w[0] is not turn]
            raise

    def release(self) -> None:
        if not self._waiting:
            self.free += 1
            return
        i = next((i for i, (_, e) in enumerate(self._waiting) if not e.prestarting), 0)
        turn, _ = self._waiting.pop(i)
        turn.set_result(None)  # the start passes straight to it


def _is_follower(entry: Entry, broker_id: int | None) -> bool:
    return broker_id is not None and entry.request.leader != broker_id


def _replicated(entry: Entry) -> bool:
    return len(entry.request.replicas) > 1


def _newer_or_same(request: Any, known: Any) -> bool:
    return (request.controller_epoch, request.leader_epoch) >= (known.controller_epoch, known.leader_epoch)


class ReplicaPool:
    """The pooled replicas of one node, keyed by (topic, partition)."""

    def __init__(self, starter: ReplicaStarter, live_max: int, hibernate_s: float,
                 clock: Callable[[], float] = time.monotonic, slot_wait_s: float = SLOT_WAIT_S,
                 broker_id: int | None = None, spares: int = 0):
        self.starter = starter
        # This node's broker: a pooled replica whose LeaderAndIsr names another leader
        # is a follower (RF > 1). None: every pooled replica is a leader (RF = 1).
        self.broker_id = broker_id
        self.live_max = max(1, live_max)
        # Spare actors a wake adopts (raykafka.replica.spares, actors/replica_keeper.py): their
        # slots are reserved under the live limit, so live replicas + spares never pass it.
        self.spare_slots = max(0, min(spares, self.live_max - 1))
        self.hibernate_s = hibernate_s
        self.clock = clock
        self.slot_wait_s = slot_wait_s
        self.entries: dict[PoolKey, Entry] = {}
        # Live entries, least recently used first (the eviction order).
        self._lru: collections.OrderedDict[PoolKey, None] = collections.OrderedDict()
        self._changed = asyncio.Event()
        self.wakeups = self.hibernations = self.refusals = self.over_limit = self.prestarts = 0
        self._prestarting = 0  # entries with prestarting set
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_SAMPLES)
        self._starts = StartGate(MAX_CONCURRENT_STARTS)
        self._tasks: set[asyncio.Task] = set()
        self.on_hibernated: Callable[[PoolKey, Any], None] | None = None  # the router drops the handle's channel

    # ---- what the controller sends -----------------------------------------------------------
    async def leader_and_isr(self, key: PoolKey, spec: Any, request: Any) -> ErrorCode:
        """A pooled replica's LeaderAndIsr: kept for a hibernated one, forwarded to a
        live one. A new partition's leader starts now while the node has a free live
        slot (at most PRESTART_MAX at once), and the LeaderAndIsr (so CreateTopics)
        waits for it up to PRESTART_WAIT_S; creating 1,000 partitions starts a dozen."""
        key = PoolKey(*key)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = Entry(spec, request, last_used=self.clock())
            await self._follow_if_leader_live(key, entry)
            prestarted = request.is_new and self._prestart(key, entry)
            self._tell_spares()
            if prestarted:
                await self._ready_within(entry, PRESTART_WAIT_S)
            return ErrorCode.none
        if not _newer_or_same(request, entry.request):
            return ErrorCode.stale_controller_epoch if request.controller_epoch < entry.request.controller_epoch \
                else ErrorCode.fenced_leader_epoch
        await self._settled(entry)
        entry.spec, entry.request = spec, request
        entry.stopped = False
        if entry.state is not State.LIVE:
            await self._follow_if_leader_live(key, entry)
            return ErrorCode.none
        handle = await self.acquire(key)
        try:
            return await self.starter.leader_and_isr(handle, request, spec)
        finally:
            self.release(key)

    async def _follow_if_leader_live(self, key: PoolKey, entry: Entry) -> None:
        """A hibernated follower told of a leader that is live (its node came back, a new
        leader elected while the set was live) wakes now, in the background, to fetch
        from it: otherwise it would never catch up and rejoin the ISR. Followers in the
        ISR of a hibernated leader stay hibernated: the leader's wake wakes them. One left
        out of the ISR of a hibernated leader (its node was away) has the leader woken, so
        it catches up and rejoins now, as a returning Kafka replica does, idle partition or
        not; until then the partition is under-replicated and its preferred leader, if this
        is it, cannot be elected. The set hibernates again once idle."""
        if not _is_follower(entry, self.broker_id) or entry.request.leader < 0:
            return
        try:
            live = await self.starter.leader_is_live(entry.spec, entry.request)
        except Exception as exc:  # noqa: BLE001 - unknown: wake it (a follower that finds no live leader wakes it)
            log.info("leader of %s-%d not found (%r): waking the follower", key.topic, key.partition, exc)
            live = True
        if live:
            self._spawn(self._keep_waking_follower(key, entry.request))
        elif self.broker_id not in entry.request.isr:
            self._spawn(self._wake_hibernated_leader(key, entry.request))

    async def _keep_waking_follower(self, key: PoolKey, request: Any) -> None:
        """Wake a follower whose leader is live, trying again with backoff while this
        LeaderAndIsr stands: a follower that gave up would stay out of the ISR for good
        (its partition under-replicated, its preferred leader never elected). A wake
        fails for a while when a node comes back: its replica's name still leads to the
        actor of the node that died until Ray declares that node dead (~10 s of missed
        health checks), and every call to it is refused."""
        delay = FOLLOWER_WAKE_BACKOFF_S
        while self._wake_wanted(key, request) and not await self._wake_and_release(key):
            log.info("follower %s-%d not woken, again in %.1f s", key.topic, key.partition, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, FOLLOWER_WAKE_BACKOFF_MAX_S)

    def _wake_wanted(self, key: PoolKey, request: Any) -> Entry | None:
        """The entry a background wake for `request` is still for (-> None when the replica
        was removed or stopped, a newer LeaderAndIsr took over, or it is live already)."""
        entry = self.entries.get(key)
        if entry is None or entry.stopped or entry.request is not request or entry.state is State.LIVE:
            return None
        return entry

    async def _wake_hibernated_leader(self, key: PoolKey, request: Any) -> None:
        """Ask the leader's pool to wake the set, for this follower out of its ISR. Retried a
        few times: the leader's pool may not have this leader epoch's LeaderAndIsr yet."""
        for attempt in range(LEADER_WAKE_ATTEMPTS):
            entry = self._wake_wanted(key, request)
            if entry is None:
                return  # a newer LeaderAndIsr or StopReplica took over, or the leader's wake woke this one
            try:
                error = await self.starter.wake_leader(entry.spec, request)
            except Exception as exc:  # noqa: BLE001 - tried again below
                error = exc
            if error == ErrorCode.none:
                return
            log.info("waking the leader of %s-%d for its follower out of the ISR: %r", key.topic, key.partition,
                     error)
            await asyncio.sleep(LEADER_WAKE_BACKOFF_S * 2 ** attempt)

    async def _ready_within(self, entry: Entry, timeout_s: float) -> None:
        """Wait up to `timeout_s` for a prestarted leader, and for a replicated one's
        followers too (an acks=all produce needs them); what is not up by then goes on
        starting, and its first request waits for it, as for any wake."""
        async def ready() -> None:
            await self._settled(entry)
            if entry.followers_waking is not None:
                await asyncio.shield(entry.followers_waking)
        try:
            await asyncio.wait_for(ready(), timeout_s)
        except asyncio.TimeoutError:
            pass

    def _prestart(self, key: PoolKey, entry: Entry) -> bool:
        """Wake a just-created partition's leader into a free live slot only (never
        evicting, spares' slots kept), at most PRESTART_MAX at once -> whether it is
        waking. Kafka's new partition is ready once CreateTopics answers; here its
        clients' first requests would otherwise wait for the start (a spare's adoption,
        or ~0.6-1.2 s cold), and one ListOffsets waits for every partition it names: a
        member's offset reset answered that late raced librdkafka's own retry timer, and
        a KIP-848 consumer re-read records it had committed (docs/test-suite-durations.md).
        A replicated set's leader wakes its followers, as on any wake. Unused, it
        hibernates after raykafka.replica.hibernate.ms like any replica: one start spent
        early, where the first request would spend it."""
        if self._prestarting >= PRESTART_MAX or entry.state is not State.HIBERNATED \
                or _is_follower(entry, self.broker_id) or entry.request.leader < 0:
            return False
        waking = sum(1 for e in self.entries.values() if e.state is State.WAKING)
        if self._live_count() + waking + 1 + self._spare_reserve() > self.live_max:
            return False
        entry.prestarting = True
        self._prestarting += 1
        self.prestarts += 1
        self._begin_wake(key, entry)
        return True

    def _end_prestart(self, entry: Entry) -> None:
        """A request waits for it now, or its wake is over: it no longer queues as a prestart."""
        if entry.prestarting:
            entry.prestarting = False
            self._prestarting -= 1

    def _begin_wake(self, key: PoolKey, entry: Entry) -> None:
        # WAKING from here on, before any await: concurrent requests wait for this one wake.
        entry.state = State.WAKING
        entry.transition = asyncio.get_running_loop().create_future()
        self._spawn(self._wake(key, entry))

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)  # referenced until done: the loop keeps only weak references
        task.add_done_callback(self._tasks.discard)
        return task

    async def _wake_and_release(self, key: PoolKey) -> bool:
        """A wake nothing waits for -> whether the replica is live."""
        try:
            await self.acquire(key)
        except Exception as exc:  # noqa: BLE001 - _wake logged a failed start; KeyError: stopped
            log.info("background wake of %s-%d failed: %r", key.topic, key.partition, exc)
            return False
        self.release(key)
        return True

    # ---- replicated partitions: what the other replicas' pools ask -------------------------------
    async def wake_leader(self, key: PoolKey, leader_epoch: int) -> ErrorCode:
        """A follower found this leader's actor gone (hibernated): wake it (it then
        wakes its followers). -> 0, or NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH."""
        entry = self.entries.get(PoolKey(*key))
        if entry is None or entry.stopped or _is_follower(entry, self.broker_id):
            return ErrorCode.not_leader_or_follower
        if leader_epoch >= 0 and leader_epoch != entry.request.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        self._spawn(self._wake_and_release(PoolKey(*key)))
        return ErrorCode.none

    async def wake_follower(self, key: PoolKey, leader_epoch: int) -> ErrorCode:
        """The leader woke (a new actor): a hibernated follower wakes to follow it, a live
        one is given its LeaderAndIsr again (its fetcher still calls the old actor)."""
        key = PoolKey(*key)
        entry = self.entries.get(key)
        if entry is None or entry.stopped or not _is_follower(entry, self.broker_id):
            return ErrorCode.not_leader_or_follower
        if leader_epoch != entry.request.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        await self._settled(entry)
        fresh = entry.state is not State.LIVE
        handle = await self.acquire(key)
        try:
            if fresh:
                return ErrorCode.none  # started with the newest LeaderAndIsr, following the woken leader's actor
            return await self.starter.leader_and_isr(handle, entry.request, entry.spec)
        finally:
            self.release(key)

    async def hibernate_follower(self, key: PoolKey, leader_epoch: int, high_watermark: int,
                                 log_end_offset: int) -> HibernateAnswer:
        """The leader of the set closed for hibernation: hibernate this follower too if it
        holds exactly the leader's log at that epoch (it takes the leader's HW first)."""
        key = PoolKey(*key)
        entry = self.entries.get(key)
        if entry is None or entry.stopped or not _is_follower(entry, self.broker_id):
            return HibernateAnswer(False, "not a pooled follower")
        await self._settled(entry)
        if entry.state is State.HIBERNATED:
            return HibernateAnswer(True)
        if entry.request.leader_epoch != leader_epoch:
            return HibernateAnswer(False, "another leader epoch")
        if entry.state is not State.LIVE or entry.inflight:
            return HibernateAnswer(False, "in use")
        ok = await self._hibernate(key, entry, lambda handle: self.starter.hibernate_follower(
            handle, leader_epoch, high_watermark, log_end_offset))
        return HibernateAnswer(True) if ok else HibernateAnswer(False, "refused")

    async def stop_replica(self, key: PoolKey, controller_epoch: int, delete: bool) -> ErrorCode:
        """StopReplica for a pooled replica: a live one is told (it closes, or deletes its
        log); a hibernated one is not woken for it (a wake would replay its old
        LeaderAndIsr), and with `delete` its log is deleted by an actor that takes no
        LeaderAndIsr. Either way it stays stopped (never woken) until a new LeaderAndIsr."""
        key = PoolKey(*key)
        entry = self.entries.get(key)
        if entry is None:
            return ErrorCode.none  # not hosted here: nothing to stop (Kafka answers NONE too)
        if controller_epoch < entry.request.controller_epoch:
            return ErrorCode.stale_controller_epoch
        entry.stopped = True
        await self._settled(entry)
        if entry.state is State.LIVE:
            entry.inflight += 1  # not hibernated (or ended as lost) under the call
            try:
                return ErrorCode(await self.starter.call(entry.handle, "stop_replica", (controller_epoch, delete)))
            finally:
                self.release(key)
        if not delete:
            return ErrorCode.none
        return ErrorCode(await self.starter.delete_log(entry.spec, controller_epoch))

    def forget(self, key: PoolKey) -> Any:
        """The replica was deleted or moved away: -> its live handle (the caller ends it), or None."""
        entry = self.entries.pop(PoolKey(*key), None)
        self._lru.pop(PoolKey(*key), None)
        self._changed.set()
        self._tell_spares()
        return entry.handle if entry is not None and entry.state is State.LIVE else None

    def keep_replication_throttle(self, key: PoolKey, leader_rate: int | None, follower_rate: int | None,
                                  leader_throttled_replicas: str | None = None,
                                  follower_throttled_replicas: str | None = None) -> bool:
        """A replication throttle change (KIP-73: the broker's rates, None keeps
        one, and the topic's two throttled-replica lists, None keeps one) kept in
        the replica's spec, so a hibernated replica wakes with it instead of the
        settings it was created with. The caller tells a live one as well.
        False: not pooled here, or a malformed list (nothing kept)."""
        entry = self.entries.get(PoolKey(*key))
        if entry is None:
            return False
        try:
            for value in (leader_throttled_replicas, follower_throttled_replicas):
                parse_throttled_replicas(value)
        except ValueError:
            return False
        config = dict(entry.spec.replica_config)
        for name, value in (("leader.replication.throttled.rate", leader_rate),
                            ("follower.replication.throttled.rate", follower_rate),
                            ("leader.replication.throttled.replicas", leader_throttled_replicas),
                            ("follower.replication.throttled.replicas", follower_throttled_replicas)):
            if value is not None:
                config[name] = value
        entry.spec = entry.spec._replace(replica_config=config)
        return True

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
            if entry.stopped:
                raise KeyError(key)  # not a replica here any more (StopReplica): NOT_LEADER_OR_FOLLOWER
            if entry.state is State.LIVE:
                entry.inflight += 1
                entry.last_used = self.clock()
                self._lru.move_to_end(key)
                return entry.handle
            if entry.state is State.HIBERNATED:
                self._begin_wake(key, entry)
            # A request now waits for it: a prestart still queued for a start goes first.
            self._end_prestart(entry)
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
        if entry is not None and entry.stopped:
            # Its channel closed because StopReplica closed it; the actor is alive, and StopReplica's
            # call, the replica's removal or the sweep ends it.
            return
        if entry is not None and entry.state is State.LIVE and entry.handle is handle:
            log.warning("pooled replica %s-%d was lost; the next request starts it again", *key)
            entry.state, entry.handle = State.HIBERNATED, None
            self._lru.pop(key, None)
            self._changed.set()
            # Ended for sure: a replica that only looked gone (a timeout) must not keep its log
            # open beside the one the next request starts.
            self.starter.end(handle)
            self._tell_spares()

    def live_handle(self, key: PoolKey) -> Any:
        """The handle if live now and still a replica (metrics sampling: never wakes; a stopped
        one's actor closed its log)."""
        entry = self.entries.get(PoolKey(*key))
        return entry.handle if entry is not None and entry.state is State.LIVE and not entry.stopped else None

    async def _settled(self, entry: Entry) -> None:
        while entry.transition is not None:
            await asyncio.shield(entry.transition)

    async def _wake(self, key: PoolKey, entry: Entry) -> None:
        started = self.clock()
        try:
            spare = await self._make_room(key)
            entry.state = State.STARTING
            if spare is not None:  # no room, but a started process: adopting adds none
                entry.handle = await self.starter.start(entry.spec, entry.request, spare)
            else:
                await self._starts.acquire(entry)
                try:
                    entry.handle = await self.starter.start(entry.spec, entry.request)
                finally:
                    self._starts.release()
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
            if _replicated(entry) and not _is_follower(entry, self.broker_id):
                # Its followers fetch from this new actor (the set hibernated with it). In the
                # background: the request that woke it needs only the leader; an acks=all one
                # then waits for the followers' fetches, as any would.
                entry.followers_waking = self._spawn(
                    self._wake_followers(key, entry.spec, entry.request, entry.handle))
        finally:
            self._end_prestart(entry)
            transition, entry.transition = entry.transition, None
            transition.set_result(None)
            self._changed.set()
            self._tell_spares()

    def _live_count(self) -> int:
        return sum(1 for e in self.entries.values() if e.state in _PROCESS_STATES)

    def _spare_reserve(self) -> int:
        """Slots kept for spares: only where a pooled partition could adopt one."""
        if not self.spare_slots or not self.entries:
            return 0
        return self.spare_slots

    def _tell_spares(self) -> None:
        """The spares the free live slots allow now (none past the limit)."""
        if self.spare_slots:
            self.starter.spares(max(0, min(self._spare_reserve(), self.live_max - self._live_count())))

    async def _make_room(self, waking: PoolKey) -> Any:
        """Evict least recently used idle replicas until the wake fits the live limit; where
        none is idle, a ready spare claimed for the wake (-> it; else None). The waking entry
        does not count yet (WAKING)."""
        deadline = self.clock() + self.slot_wait_s
        reserve = self._spare_reserve()
        while self._live_count() + 1 + reserve > self.live_max:
            candidate = next((k for k in self._lru if self._evictable(self.entries[k], ignore_time=True)), None)
            if candidate is not None:
                await self._hibernate(candidate, self.entries[candidate])
                continue
            spare = self.starter.claim_spare() if self.spare_slots else None
            if spare is not None:
                return spare
            remaining = deadline - self.clock()
            if remaining <= 0:
                self.over_limit += 1
                log.warning("waking %s-%d over the live limit %d: no idle replica to hibernate", *waking,
                            self.live_max)
                return None
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

    async def _wake_followers(self, key: PoolKey, spec: Any, request: Any, handle: Any) -> None:
        try:
            await self.starter.wake_followers(spec, request, handle)
        except Exception as exc:  # noqa: BLE001 - a follower not woken falls out of the ISR, as if it had failed
            log.warning("waking the followers of %s-%d: %r", key.topic, key.partition, exc)

    async def _hibernate(self, key: PoolKey, entry: Entry,
                         ask: Callable[[Any], Awaitable[HibernateAnswer]] | None = None) -> bool:
        entry.state = State.HIBERNATING
        entry.transition = asyncio.get_running_loop().create_future()
        self._lru.pop(key, None)
        handle = entry.handle
        try:
            try:
                # A stopped replica closed its log already: it only ends.
                answer = HibernateAnswer(True, "stopped") if entry.stopped else \
                    await (ask or self.starter.hibernate)(handle)
            except Exception as exc:  # noqa: BLE001 - gone already (killed, node trouble): it is not live
                answer = HibernateAnswer(True, f"unreachable: {exc!r}"[:200])
            if not answer.ok:
                self.refusals += 1
                entry.state = State.LIVE
                entry.not_before = self.clock() + self.hibernate_s
                self._lru[key] = None
                self._lru.move_to_end(key, last=False)
                return False
            if answer.ok and not answer.blocker and _replicated(entry) \
                    and not _is_follower(entry, self.broker_id):
                # The leader closed at HW = LEO with every ISR follower there: they stop now,
                # before it ends, so none of them ever finds it gone (and wakes it again).
                try:
                    await self.starter.hibernate_followers(entry.spec, entry.request, answer)
                except Exception as exc:  # noqa: BLE001 - a follower left live wakes the leader when it finds it gone
                    log.warning("hibernating the followers of %s-%d: %r", key.topic, key.partition, exc)
            self.starter.end(handle)
            entry.state, entry.handle = State.HIBERNATED, None
            self.hibernations += 1
            self._tell_spares()
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
                         _quantile(ordered, 0.5) * 1000, _quantile(ordered, 0.99) * 1000,
                         getattr(self.starter, "adopted", 0), getattr(self.starter, "cold_starts", 0),
                         self.prestarts)


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]



def hibernation_blocker(topic: str, is_leader: bool, replicas: int, high_watermark: int, log_end_offset: int,
                        open_transaction: bool, replicated: bool = False, followers_behind: bool = False,
                        fetching: bool = False) -> str:
    """What holds a replica live ("" when nothing does). The pool already
    holds back a replica with a request in flight (a parked fetch, a pending
    DeleteRecords, an append); these are what only the replica knows.
    ``replicated``: RF > 1 sets hibernate (raykafka.replica.hibernate.replicated);
    ``followers_behind``: the leader knows an ISR follower short of its log end,
    or a follower's log start short of its own (DeleteRecords under way);
    ``fetching``: a follower's fetcher runs (its leader is live)."""
    if topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        return "internal topic"
    if not is_leader:
        if replicas > 1 and replicated and not fetching:
            return ""  # a follower with no live leader to follow (it hibernated while this was away)
        return "a follower (hibernates with its leader)" if replicas > 1 and replicated else "not the leader"
    if replicas > 1 and not replicated:
        return "replicated (RF > 1 replicas stay live)"
    if high_watermark < log_end_offset:
        return "unreplicated tail"
    if followers_behind:
        return "followers not caught up"
    if open_transaction:
        return "open transaction"
    return ""
