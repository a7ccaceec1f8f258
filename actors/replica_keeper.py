"""How the node's replica pool (cluster/replica_pool.py) starts, calls and
ends replica actors through Ray (issue 30). The edge of each node holds the
pool; this is its Ray side.

A woken replica opens the same log on the same node with the spec the
controller sent and the newest LeaderAndIsr the pool kept, so it takes the same
leader epoch and ISR.

Fast wakes: starting an actor costs a process start, Ray's worker setup and our
imports (~0.6 s quiet here, 6-40 s when fifty start at once under load, and Ray
offers no pre-started worker to a named detached actor: measured, only the first
of six creations reused an idle worker). So the starter keeps a few *spares*
(`raykafka.replica.spares`): replica actors started with nothing open, owned by
this edge. A wake hands a spare its partition (ReplicaActor.adopt: one call, the
log opens, LeaderAndIsr applies: a leader leads, a follower follows its leader's
live actor) and starts the next spare in the background. This holds for the
replicas of replicated sets too: a woken RF=3 set is three adoptions, one per
node, instead of three cold starts of 0.6-3.8 s one after the other.

A spare has no Ray name (Ray names an actor when it is created). The name a
replica is known by, `<topic>-<partition>@<broker>`, resolves through
actors/replica_lookup.py: Ray's named actor, else the replica's node's pool.
Every actor that looks a replica up (followers for their leader, the
controller's pooled calls, coordinators, the purgatory, metrics, the Spark
source) goes through it, so an adopted replica answers to the same name. The
spares count against the live limit (cluster/replica_pool.py reserves their
slots).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.replica_lookup import find_replicas, named_actor
from core.error_codes import ErrorCode
from core.naming import edge_actor_name, replica_actor_name
from core.pooled_replica import HibernateAnswer

log = logging.getLogger("raykafka.replica_pool")

# Spares started at once (each is a process start: ~0.5 s of a core).
MAX_SPARE_STARTS = 2
# Spares start this long after an adoption, not at once (unless a wake waits for one): on a
# 2-core node a process start next to a waking RF=3 set held each follower's adoption ~0.5 s.
REFILL_PAUSE_S = 1.0
# How long a woken leader's actor named by its pool is used for its followers' wakes.
LEADER_HINT_S = 10.0
# Tries at creating a woken replica whose name still led to its ended predecessor.
START_ATTEMPTS = 6


def create_spare_actor(ray_node_id: str | None, broker_id: int, namespace: str):
    """A replica actor with nothing open (ReplicaActor.adopt gives it a partition), owned by
    the calling edge: it ends with it. Blocks on Ray's GCS: call it off an event loop."""
    from actors.partition_leader import ReplicaActorRemote

    strategy = NodeAffinitySchedulingStrategy(ray_node_id, soft=False) if ray_node_id else "DEFAULT"
    return ReplicaActorRemote.options(num_cpus=0, max_concurrency=10_000, scheduling_strategy=strategy).remote(
        None, -1, broker_id, [], {}, namespace=namespace)


def named_actors(namespace: str) -> set[str]:
    """Names of the live named actors of `namespace`. Blocks on Ray's GCS (one call)."""
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace}


def create_replica_actor(spec: Any, namespace: str, zk_connect: str | None):
    """The replica actor for `spec` (cluster/controller/channel.ReplicaSpec), created
    on its broker's node, or the live one of that name. Blocks on Ray's GCS:
    call it off an event loop."""
    from actors.partition_leader import ReplicaActorRemote

    strategy = NodeAffinitySchedulingStrategy(spec.ray_node_id, soft=False) if spec.ray_node_id else "DEFAULT"
    return ReplicaActorRemote.options(
        name=replica_actor_name(spec.topic, spec.partition, spec.broker_id), namespace=namespace,
        lifetime="detached", get_if_exists=True, num_cpus=0, max_concurrency=10_000,
        scheduling_strategy=strategy,
    ).remote(spec.topic, spec.partition, spec.broker_id, spec.log_dirs, spec.log_config,
             spec.min_insync_replicas, zk_connect, namespace, spec.replica_config)


class RayReplicaStarter:
    """cluster.replica_pool.ReplicaStarter over Ray."""

    def __init__(self, namespace: str, zk_connect: str | None, call_timeout_s: float, start_timeout_s: float,
                 replicated: bool = False, ray_node_id: str | None = None, broker_id: int = -1):
        self.namespace = namespace
        # raykafka.replica.hibernate.replicated: RF > 1 sets hibernate together.
        self.replicated = replicated
        self.zk_connect = zk_connect
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self.ray_node_id = ray_node_id  # this edge's node: spares start here
        self.broker_id = broker_id
        self._spares: list = []  # started, answering, nothing open
        self._spares_starting = 0
        self._spares_wanted = 0
        self._waiting: collections.deque[asyncio.Future] = collections.deque()  # wakes waiting for a spare
        self._filler: asyncio.Task | None = None
        # Never two actors on one log: a partition whose actor under its name was live when
        # this pool began (started before it was pooled, or by an earlier edge of this node)
        # keeps that actor (found by name on its wake) until this starter ends it. Listed
        # once, before the first spare starts; later named actors of pooled partitions are
        # only this starter's own cold starts (_named), and a partition leaving the pool
        # (leave_pool) is the controller's again.
        self._maybe_named: set[str] | None = None  # actor names; None: not listed yet (no spares)
        # Actors this starter started under their names, by handle: ended (closed first by
        # hibernate()), their partitions are free for a spare.
        self._named: dict[Any, str] = {}
        self.adopted = self.cold_starts = 0
        self._refill_after = 0.0  # monotonic time before which no spare starts (REFILL_PAUSE_S)
        # (topic, partition) -> (leader epoch, the leader's live actor, until), from the leader's
        # pool waking this node's follower; used once, soon (hint_leader): that actor may
        # hibernate again later under the same epoch.
        self._leader_hints: dict[tuple[str, int], tuple[int, Any, float]] = {}

    # ---- spares ------------------------------------------------------------------------------------
    def spares(self, wanted: int) -> None:
        """Keep `wanted` spares (the pool's free live slots, up to raykafka.replica.spares):
        started one at a time in the background, extra ones ended now."""
        self._spares_wanted = max(0, wanted)
        while self._spares and len(self._spares) + self._spares_starting > self._spares_wanted:
            self.end(self._spares.pop())
        if len(self._spares) + self._spares_starting < self._spares_wanted and \
                (self._filler is None or self._filler.done()):
            self._filler = asyncio.get_running_loop().create_task(self._fill())

    def spare_count(self) -> int:
        return len(self._spares)

    def claim_spare(self):
        """A ready spare for a wake the pool has no room for otherwise (cluster/replica_pool.py)."""
        return self._spares.pop(0) if self._spares else None

    async def _fill(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while self._maybe_named is None and failures < 3:
            try:
                self._maybe_named = await asyncio.wait_for(loop.run_in_executor(None, named_actors, self.namespace),
                                                            self.start_timeout_s)
            except Exception as exc:  # noqa: BLE001 - no spares until it is known
                failures += 1
                log.warning("listing named actors failed: %r", exc)
                await asyncio.sleep(1.0)
        while self._maybe_named is not None and failures < 3:
            # Just after an adoption the woken replica's set is still waking (its followers
            # adopt spares on their nodes, its first requests run): a process start now takes
            # the CPU they need (~0.5 s of a core). Unless a wake waits for a spare, wait first.
            pause = self._refill_after - time.monotonic()
            if pause > 0 and not self._waiting:
                await asyncio.sleep(min(pause, REFILL_PAUSE_S))
                continue
            deficit = self._spares_wanted - len(self._spares) - self._spares_starting
            if deficit <= 0:
                return
            # A few at a time: they compete for the CPU with the wakes that start cold.
            started = await asyncio.gather(*(self._start_spare() for _ in range(min(deficit, MAX_SPARE_STARTS))))
            failures += started.count(False)

    async def _start_spare(self) -> bool:
        self._spares_starting += 1
        handle = None
        try:
            handle = await asyncio.get_running_loop().run_in_executor(
                None, create_spare_actor, self.ray_node_id, self.broker_id, self.namespace)
            await asyncio.wait_for(handle.is_spare.remote(), self.start_timeout_s)
        except Exception as exc:  # noqa: BLE001 - wakes start cold meanwhile; the next change tries again
            log.warning("starting a spare replica failed: %r", exc)
            if handle is not None:
                self.end(handle)
            await asyncio.sleep(1.0)
            return False
        finally:
            self._spares_starting -= 1
        while self._waiting:  # a wake waits for the spare under way
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(handle)
                return True
        if len(self._spares) < self._spares_wanted:
            self._spares.append(handle)
        else:
            self.end(handle)
        return True

    async def _next_spare(self):
        """A ready spare, or the next one under way if no other wake waits for it (it started
        earlier than a cold start would now), or None."""
        if self._spares:
            return self._spares.pop(0)
        if self._spares_starting <= len(self._waiting):
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await asyncio.wait_for(waiter, self.start_timeout_s)
        except asyncio.TimeoutError:
            return None

    async def _adopt(self, spec: Any, request: Any, spare: Any = None):
        """A spare (`spare`, or one of ours) with `spec`'s partition open and its LeaderAndIsr
        applied (a follower follows its leader's live actor), or None: no spare, or an actor
        under the replica's name is live (it keeps its log: never two actors on one)."""
        name = replica_actor_name(spec.topic, spec.partition, spec.broker_id)
        if self._maybe_named is None or name in self._maybe_named or \
                await asyncio.get_running_loop().run_in_executor(None, named_actor, name, self.namespace) is not None:
            # The last check catches an actor the controller started under the name after the
            # pool listed them (a replica started directly, then pooled): the cold path finds it.
            if spare is not None:
                self._spares.append(spare)
            return None
        started = time.monotonic()
        if spare is None:
            spare = await self._next_spare()  # the pool asks for the next one once this wake is done
            if spare is None:
                return None
        try:
            leader = await self._leader_handle(spec, request) if request.leader != spec.broker_id else None
            error = await asyncio.wait_for(spare.adopt.remote(spec, request, self.zk_connect, self.namespace, leader),
                                           self.start_timeout_s)
        except Exception as exc:  # noqa: BLE001 - start this one cold
            log.warning("a spare could not adopt %s-%d: %r", spec.topic, spec.partition, exc)
            self.end(spare)
            return None
        if error:
            log.warning("adopted %s-%d answered LeaderAndIsr with error %d", spec.topic, spec.partition, error)
        log.info("a spare adopted %s-%d as %s in %.0f ms (%d spares left)", spec.topic, spec.partition,
                 "leader" if request.leader == spec.broker_id else f"follower of {request.leader}",
                 (time.monotonic() - started) * 1000, len(self._spares))
        self.adopted += 1
        self._refill_after = time.monotonic() + REFILL_PAUSE_S
        return spare

    # ---- starting, calling, ending --------------------------------------------------------------
    async def start(self, spec: Any, request: Any, spare: Any = None):
        adopted = await self._adopt(spec, request, spare)
        if adopted is not None:
            return adopted
        self.cold_starts += 1
        log.info("starting %s-%d cold (%d spares ready, %d starting)", spec.topic, spec.partition,
                 len(self._spares), self._spares_starting)
        loop = asyncio.get_running_loop()
        for attempt in range(START_ATTEMPTS):
            handle = await loop.run_in_executor(None, create_replica_actor, spec, self.namespace, self.zk_connect)
            try:
                # The first call waits for the actor's process and constructor (log recovery included).
                error = await self.leader_and_isr(handle, request, spec, timeout_s=self.start_timeout_s)
                break
            except ray.exceptions.ActorDiedError:
                # The name still led to the actor just ended (ray.kill is asynchronous):
                # look it up again once Ray has let it go.
                if attempt == START_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.05 * 2 ** attempt)
        if error:
            log.warning("woken %s-%d answered LeaderAndIsr with error %d", spec.topic, spec.partition, error)
        name = replica_actor_name(spec.topic, spec.partition, spec.broker_id)
        self._named[handle] = name
        if self._maybe_named is not None:
            self._maybe_named.add(name)
        return handle

    async def leader_and_isr(self, handle: Any, request: Any, spec: Any = None, timeout_s: float | None = None) -> int:
        timeout_s = timeout_s or self.call_timeout_s
        if spec is not None and request.leader != spec.broker_id:
            # A follower: it fetches from the leader's live actor, found by name (None while
            # the leader hibernates: it then waits for the leader's wake to wake it again).
            leader = await self._leader_handle(spec, request)
            return await asyncio.wait_for(handle.become_follower.remote(
                request.controller_epoch, request.leader, request.leader_epoch, request.isr, request.replicas,
                leader), timeout_s)
        return await asyncio.wait_for(handle.become_leader.remote(
            request.controller_epoch, request.leader_epoch, request.isr, request.replicas, request.zk_version),
            timeout_s)

    async def hibernate(self, handle: Any) -> HibernateAnswer:
        return await asyncio.wait_for(handle.hibernate.remote(self.replicated), self.call_timeout_s)

    # ---- replicated partitions: the other replicas' pools, through their nodes' edges -----------
    def hint_leader(self, key: tuple[str, int], leader_epoch: int, handle: Any) -> None:
        """The leader's pool, waking this follower, named the leader's new actor: the follower's
        start uses it once instead of looking it up (two GCS lookups and a call to the leader's
        edge, hundreds of ms on a loaded machine)."""
        now = time.monotonic()
        if len(self._leader_hints) >= 1024:  # bounded: hints of wakes that never consumed theirs
            self._leader_hints = {k: v for k, v in self._leader_hints.items() if v[2] > now}
        self._leader_hints[tuple(key)] = (leader_epoch, handle, now + LEADER_HINT_S)

    async def _leader_handle(self, spec: Any, request: Any):
        """The live actor of the leader `request` names, by its name or through its node's pool
        (an adopted leader); None while it hibernates (its wake then wakes this follower)."""
        if request.leader < 0:
            return None
        hint = self._leader_hints.pop((spec.topic, spec.partition), None)
        if hint is not None and hint[0] == request.leader_epoch and hint[1] is not None \
                and time.monotonic() < hint[2]:
            return hint[1]
        found = await find_replicas([(spec.topic, spec.partition)], request.leader, self.namespace, False,
                                    self.call_timeout_s)
        return found[0]

    async def leader_is_live(self, spec: Any, request: Any) -> bool:
        return await self._leader_handle(spec, request) is not None

    async def wake_leader(self, spec: Any, request: Any) -> ErrorCode:
        if request.leader < 0:
            return ErrorCode.leader_not_available
        edge = await asyncio.get_running_loop().run_in_executor(None, named_actor, edge_actor_name(request.leader),
                                                                 self.namespace)
        if edge is None:
            return ErrorCode.broker_not_available
        return ErrorCode(await asyncio.wait_for(
            edge.pool_wake_leader.remote(spec.topic, spec.partition, request.leader_epoch), self.call_timeout_s))

    async def _to_follower_edges(self, spec: Any, request: Any, method: str, *args: Any) -> list:
        loop = asyncio.get_running_loop()
        followers = [b for b in request.replicas if b != spec.broker_id]
        edges = await asyncio.gather(*(loop.run_in_executor(None, named_actor, edge_actor_name(b), self.namespace)
                                       for b in followers))
        calls = [asyncio.wait_for(getattr(edge, method).remote(spec.topic, spec.partition, *args),
                                  self.call_timeout_s) for edge in edges if edge is not None]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        for broker, answer in zip([b for b, e in zip(followers, edges) if e is not None], answers):
            if isinstance(answer, BaseException) or (answer not in (ErrorCode.none, None) and not getattr(answer, "ok", False)):
                log.info("%s-%d: follower %d answered %s to %s", spec.topic, spec.partition, broker,
                         repr(answer)[:200], method)
        return answers

    async def wake_followers(self, spec: Any, request: Any, handle: Any = None) -> None:
        # The leader hears that its followers are waking while they do (not before: every
        # round trip here delays the first acks=all answer); each follower's pool gets the
        # leader's new actor with the call.
        waking = asyncio.wait_for(handle.followers_waking.remote(True), self.call_timeout_s) \
            if handle is not None else asyncio.sleep(0)
        try:
            await asyncio.gather(waking, self._to_follower_edges(spec, request, "pool_wake_follower",
                                                                 request.leader_epoch, handle))
        finally:
            if handle is not None:
                await asyncio.wait_for(handle.followers_waking.remote(False), self.call_timeout_s)

    async def hibernate_followers(self, spec: Any, request: Any, answer: HibernateAnswer) -> None:
        await self._to_follower_edges(spec, request, "pool_hibernate_follower", answer.leader_epoch,
                                      answer.high_watermark, answer.log_end_offset)

    async def hibernate_follower(self, handle: Any, leader_epoch: int, high_watermark: int,
                                 log_end_offset: int) -> HibernateAnswer:
        return await asyncio.wait_for(handle.hibernate_follower.remote(leader_epoch, high_watermark, log_end_offset),
                                      self.call_timeout_s)

    def end(self, handle: Any) -> None:
        # Closed already (hibernate() flushed and checkpointed): nothing is lost by killing it,
        # and no restart, so the name is free for the next wake.
        name = self._named.pop(handle, None)
        if name is not None and self._maybe_named is not None:
            self._maybe_named.discard(name)
        try:
            ray.kill(handle, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - gone already
            log.info("ending a hibernated replica: %r", exc)

    async def leave_pool(self, key: tuple[str, int], handle: Any, end: bool) -> None:
        """The replica left the pool (deleted: `end`; or replicated now: the controller finds
        it by name from here on). An adopted one has no name: it closes and ends, and the
        controller starts it under its name on the same log."""
        if not end and self._maybe_named is not None:
            self._maybe_named.add(replica_actor_name(key[0], key[1], self.broker_id))
        if handle is None:
            return
        if not end and handle in self._named:
            self._named.pop(handle, None)  # the controller's from here on
            return
        if not end:
            try:
                await asyncio.wait_for(handle.close.remote(), self.call_timeout_s)
            except Exception as exc:  # noqa: BLE001 - gone already
                log.info("closing adopted %s-%d: %r", *key, exc)
        self.end(handle)

    async def delete_log(self, spec: Any, controller_epoch: int) -> ErrorCode:
        """StopReplica(delete) for a hibernated replica: an actor under its name opens the log
        (and takes no LeaderAndIsr: it leads and follows nothing), deletes it, and ends."""
        handle = await asyncio.get_running_loop().run_in_executor(None, create_replica_actor, spec, self.namespace,
                                                                  self.zk_connect)
        try:
            return ErrorCode(await asyncio.wait_for(handle.stop_replica.remote(controller_epoch, True),
                                                    self.start_timeout_s))
        finally:
            self.end(handle)

    async def call(self, handle: Any, method: str, args: tuple, timeout_s: float | None = None):
        return await asyncio.wait_for(getattr(handle, method).remote(*args), timeout_s or self.call_timeout_s)


class RayPrimaryPool:
    """cluster.replica_leases.PrimaryPool over Ray: a sibling edge's calls to its node's
    primary edge, found by name (again after a failure: a replaced primary is a new actor,
    whose pool has none of the old leases, so renewals answer False and leases start over)."""

    def __init__(self, broker_id: int, namespace: str, holder: str, call_timeout_s: float):
        self.broker_id = broker_id
        self.namespace = namespace
        self.holder = holder  # this sibling edge's actor id
        self.call_timeout_s = call_timeout_s
        self._edge = None

    async def _primary(self):
        if self._edge is None:
            self._edge = await asyncio.get_running_loop().run_in_executor(
                None, named_actor, edge_actor_name(self.broker_id), self.namespace)
            if self._edge is None:
                raise ConnectionError(f"no primary edge for broker {self.broker_id}")
        return self._edge

    async def _call(self, method: str, *args, timeout_s: float | None = None):
        edge = await self._primary()
        try:
            return await asyncio.wait_for(getattr(edge, method).remote(*args), timeout_s or self.call_timeout_s)
        except (ray.exceptions.RayActorError, asyncio.TimeoutError):
            self._edge = None
            raise

    async def lease(self, key: tuple[str, int], number: int):
        # A wake waits for an actor start: as long as the pool's own wakes may take.
        handle = await self._call("pool_lease", key[0], key[1], self.holder, number,
                                  timeout_s=self.call_timeout_s + 30)
        if handle is None:
            raise KeyError(key)  # not a replica of this node: NOT_LEADER_OR_FOLLOWER
        return handle

    async def renew(self, leases: list) -> list[bool]:
        return await self._call("pool_renew", leases, self.holder)

    async def give_back(self, leases: list) -> None:
        await self._call("pool_give_back", leases, self.holder)

    async def lost(self, key: tuple[str, int], handle, number: int) -> None:
        await self._call("pool_lease_lost", key[0], key[1], handle, self.holder, number)

    async def stats(self):
        return await self._call("pool_stats")
