"""The network edge actor: a Kafka listener inside an async Ray actor, one per
node. It registers the node's broker id in /brokers/ids once it accepts
connections, and takes UpdateMetadata from the controller. The actor is the
shell (listeners, registration, metadata forwarding); what it serves is
net/edge_service.EdgeService and the roles it composes.

With raykafka.edge.processes = N > 1 a node runs N edges when one core cannot
parse and answer all its clients: edge 0 (the primary, named
edge_actor_name) binds first, registers the broker and is the only edge the
controller knows; edges 1..N-1 (the siblings, edge_sibling_actor_name) bind
the same host:port with SO_REUSEPORT, so the kernel spreads new connections
over all N, and the primary forwards every UpdateMetadata to them so all
share one view of the cluster. A connection lives on one edge for its whole
life, so per-connection request ordering is unchanged. Fetch sessions are
per edge: a client that reconnects and lands on another edge gets
FETCH_SESSION_ID_NOT_FOUND for its incremental fetch and falls back to a full
fetch, which Kafka clients do on their own.

An edge whose process dies is replaced by the `raykafka start` process that
created it (node/supervision.py): a new actor under the
same name, on the port the dead one had bound, that deletes the dead edge's
/brokers/ids registration (recognised by its `edge_actor_id`) rather than
waiting for its ZooKeeper session to expire. A new primary numbers its
forwarded updates after every number its predecessor used, so siblings that
outlived it take them.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import ray

from actors.edge_ports import RayActorCalls
from core.config import BrokerConfig, parse_listener
from core.controller_messages import MetadataApplied, MetadataDelta, MetadataSnapshot
from core.error_codes import ErrorCode
from core.gc_tuning import freeze_startup_heap
from metadata.kafka_zk import KafkaZkClient
from net.edge_service import EdgeService
from net.server import ConnectionLimits, KafkaServer

log = logging.getLogger("raykafka.edge")

# Registering again after the ZooKeeper session expired: each attempt waits up to a
# session timeout for the old registration to go; between failed ones, a pause.
REGISTER_AGAIN_ATTEMPTS = 30
REGISTER_AGAIN_BACKOFF_S = 1.0


class EdgeActor:
    def __init__(self, broker_id: int, config: dict, zk_connect: str, log_dirs: list[str], purgatory=None):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from core.memory_trace import start_if_asked

        start_if_asked("edge")  # debug only: RAYKAFKA_TRACEMALLOC_DIR
        self.broker_id = broker_id
        self.config = BrokerConfig(config)
        self.zk_connect = zk_connect
        self.log_dirs = log_dirs
        self.listener = parse_listener(self.config["listeners"])
        self.service: EdgeService | None = None
        self.server: KafkaServer | None = None
        self.zk: KafkaZkClient | None = None
        self.bound_port: int | None = None
        self.purgatory = purgatory
        # Only a broker running several edges asks the kernel for a shared port:
        # with one edge, a second process binding the port must still fail.
        self.reuse_port = self.config["raykafka.edge.processes"] > 1
        self.siblings: list = []  # on the primary: handles of edges 1..N-1 of this node
        self._last_update: tuple | None = None  # the primary's latest applied UpdateMetadata
        # primary: number of the latest UpdateMetadata sent to the siblings, as
        # (incarnation, count): a replacement primary starts a later incarnation
        # (its start time), so its first update is newer than all its predecessor's.
        self._forward_seq = (time.time_ns(), 0)
        self._applied_forward_seq = (0, 0)  # sibling: the newest forwarded UpdateMetadata applied
        self.sampler = None
        self._sampler: asyncio.Future | None = None
        # net/listeners.ListenerRuntime per listener (issue 21); the first is
        # self.server's, the others have servers of their own.
        self.listeners: list = []
        self.extra_servers: list[KafkaServer] = []
        self._pool_sweeper: asyncio.Future | None = None
        self._leases = None  # primary with siblings: cluster/replica_leases.PoolLeases
        self._lease_expiry: asyncio.Future | None = None
        self._stopping = False
        self._registering: asyncio.Future | None = None  # registering again after a session loss

    def _limits(self) -> ConnectionLimits:
        config = self.config
        return ConnectionLimits(
            max_request_bytes=config["socket.request.max.bytes"],
            max_inflight_requests=config["queued.max.requests"],
            max_inflight_bytes=config["raykafka.edge.max.inflight.bytes"],
            max_connections=config["max.connections"],
            idle_timeout_s=config["connections.max.idle.ms"] / 1000,
            max_queued_bytes=config["queued.max.request.bytes"],
        )

    async def _start_zk(self) -> KafkaZkClient:
        """This edge process's one ZooKeeper session (registration, SCRAM credentials, ACLs,
        client quotas, producer id blocks, other brokers' listeners), connected off the loop."""
        zk = KafkaZkClient(self.zk_connect, session_timeout_ms=self.config["zookeeper.session.timeout.ms"])
        await asyncio.get_running_loop().run_in_executor(None, zk.start)
        self.zk = zk
        return zk

    def _ports(self) -> RayActorCalls:
        """How the edge reaches other actors (net/ports.ActorCalls): direct channels
        to this node's actors (raykafka.local.calls), else Ray."""
        return RayActorCalls.for_config(self.config, ray.get_runtime_context().get_node_id())

    async def _listen(self, port: int) -> int:
        """Create the service and the listener on `port`; returns the bound port."""
        zk = await self._start_zk()
        self.service = EdgeService(self.config, self.broker_id, "", 0, calls=self._ports(), zk=zk)
        self.service.set_purgatory(self.purgatory)
        from net.listeners import build_listeners, listener_dispatch

        self.listeners = build_listeners(self.config, self.service.scram_store)
        self.server = KafkaServer(listener_dispatch(self.listeners[0], self.service.dispatch), self._limits())
        self.server.metrics = self.service.metrics
        self.server.listener = self.listeners[0]
        if self.service.metrics is not None:
            from core.metrics import registry

            registry().start_reporting(self.config["raykafka.metrics.report.interval.ms"] / 1000)
        self.bound_port = await self.server.start(self.listener.host, port, reuse_port=self.reuse_port,
                                                  ssl=self.listeners[0].ssl_context)
        for runtime in self.listeners[1:]:
            server = KafkaServer(listener_dispatch(runtime, self.service.dispatch), self._limits())
            server.metrics, server.listener = self.service.metrics, runtime
            if self.reuse_port and not runtime.spec.port:
                raise ValueError(f"listener {runtime.spec.name} needs a fixed port with raykafka.edge.processes > 1")
            await server.start(runtime.spec.host, runtime.spec.port, reuse_port=self.reuse_port,
                               ssl=runtime.ssl_context)
            self.extra_servers.append(server)
        return self.bound_port

    def _bound_ports(self) -> list[int]:
        return [self.bound_port] + [s._server.sockets[0].getsockname()[1] for s in self.extra_servers]

    async def _resolve_listeners(self) -> None:
        """Advertised endpoint of every listener; with several listeners, watch
        the other brokers' registrations for theirs (Metadata per listener)."""
        from net.listeners import resolve_advertised

        resolve_advertised(self.config, self.listeners, self._bound_ports())
        first = self.listeners[0]
        first.endpoints.set_own(self.broker_id, {r.spec.name: r.advertised for r in self.listeners})
        if len(self.listeners) > 1:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(
                None, first.endpoints.start_watch, self.zk, loop)

    def _start_sampler(self) -> None:
        """The primary edge samples its node's partitions, purgatory and groups
        for the metrics (net/edge_metrics.NodeSampler)."""
        if self.service.metrics is None or self._sampler is not None:
            return
        from net.edge_metrics import NodeSampler

        self.sampler = NodeSampler(self.service, self.broker_id, self.log_dirs, self.config["min.insync.replicas"])
        self._sampler = asyncio.ensure_future(
            self.sampler.run(self.config["raykafka.metrics.report.interval.ms"] / 1000))

    async def start(self, replaces: str | None = None) -> tuple[str, int]:
        """Bind, then register the broker; returns the advertised (host, port).

        replaces: the Ray actor id of this broker's previous edge, known dead
        (the supervisor saw it die): its registration, still held by its
        ZooKeeper session until that expires, is deleted instead of waited for."""
        config = self.config
        from core.shared_region import remove_orphans

        removed = remove_orphans()
        if removed:
            log.info("removed %d shared-memory regions left by crashed edges", removed)
        # The service needs the advertised port, known only after binding port 0.
        await self._listen(self.listener.port)
        self._start_replica_pool()
        await self._resolve_listeners()
        host, port = self.listeners[0].advertised
        self.service.advertised_host, self.service.advertised_port = host, port
        loop = asyncio.get_running_loop()
        from cluster.capacity import node_capacity, node_hosted_capacity

        extra = {"ray_node_id": ray.get_runtime_context().get_node_id(), "log_dirs": self.log_dirs,
                 # This node's replica capacity, for the controller's placement and
                 # refusals (issue 18); Kafka clients ignore unknown fields here.
                 "replicas_max": node_capacity(config["raykafka.replicas.per.node.max"]),
                 # With hibernation (issue 30): the partitions it may host, live or not.
                 **({"partitions_max": node_hosted_capacity(config["raykafka.partitions.per.node.max"],
                                                            self.log_dirs[0])}
                    if self.service.replicas.pool is not None else {}),
                 # Which edge incarnation holds the registration: a replacement deletes
                 # only its dead predecessor's, and the controller tells a dead edge's
                 # registration from its replacement's.
                 "edge_actor_id": ray.get_runtime_context().get_actor_id()}
        replace_stale = None
        if replaces is not None:
            def replace_stale(existing: dict) -> bool:
                return existing.get("edge_actor_id") == replaces
        # broker.rack, else the Ray node's "rack" label: racks follow the machines Ray knows.
        rack = config["broker.rack"] or ray.get_runtime_context().get_node_labels().get("rack")
        from net.listeners import registration_fields

        security = registration_fields(self.listeners)
        await loop.run_in_executor(None, lambda: self.zk.brokers.register(
            self.broker_id, host, port, rack=rack, extra=extra, replace_stale=replace_stale, security=security))
        own_edge = extra["edge_actor_id"]
        self._register_again_on_new_session(lambda: self.zk.brokers.register(
            self.broker_id, host, port, rack=rack, extra=extra, security=security,
            # Left by this edge's own expired session, if ZooKeeper has not removed it yet.
            replace_stale=lambda existing: existing.get("edge_actor_id") == own_edge))
        log.info("broker %d listening on %s:%d, advertised as %s:%d", self.broker_id, self.listener.host,
                 self.bound_port, host, port)
        self._start_sampler()
        # Start-up's ~95,000 objects out of every later full collection (core/gc_tuning.py).
        freeze_startup_heap(collect=True)
        return host, port

    def _register_again_on_new_session(self, register: Callable[[], Any]) -> None:
        """Kafka re-registers a broker whose ZooKeeper session expired (a long GC
        pause, a starved process): its ephemeral /brokers/ids/<id> went with the
        session, the controller took the broker for dead, and it comes back as a
        broker starting up (its partitions' leaders elected again). Without this
        the edge would serve on while no client could be told of it."""
        loop = asyncio.get_running_loop()

        def on_new_session(_session_id: int) -> None:
            # On the ZooKeeper client's event thread: hand over to the loop.
            try:
                loop.call_soon_threadsafe(self._start_registering_again, register)
            except RuntimeError:  # the loop is closed: the edge is gone
                pass

        self.zk.on_new_session(on_new_session)

    def _start_registering_again(self, register: Callable[[], Any]) -> None:
        if self._stopping or (self._registering is not None and not self._registering.done()):
            return  # a registration under way writes under the newest session anyway
        self._registering = asyncio.ensure_future(self._register_again(register))

    async def _register_again(self, register: Callable[[], Any]) -> None:
        from metadata.zk.errors import BrokerIdInUseError

        loop = asyncio.get_running_loop()
        for attempt in range(1, REGISTER_AGAIN_ATTEMPTS + 1):
            if self._stopping:
                return
            try:
                await loop.run_in_executor(None, register)
            except BrokerIdInUseError as exc:  # another live edge holds the id now: it is the broker
                log.error("broker %d not registered again after its ZooKeeper session expired: %s",
                          self.broker_id, exc)
                return
            except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable again: retry, bounded
                log.warning("registering broker %d again (attempt %d of %d) failed: %r", self.broker_id,
                            attempt, REGISTER_AGAIN_ATTEMPTS, exc)
                await asyncio.sleep(REGISTER_AGAIN_BACKOFF_S)
            else:
                log.warning("broker %d registered again after its ZooKeeper session expired", self.broker_id)
                return
        log.error("broker %d could not register again after its ZooKeeper session expired", self.broker_id)

    def _start_replica_pool(self) -> None:
        """The primary edge keeps its node's live replica actors as a cache over the
        partitions it hosts (cluster/replica_pool.py, issue 30). With several edges per
        node the siblings lease replicas from it (cluster/replica_leases.py)."""
        from cluster.capacity import node_capacity
        from cluster.replica_pool import HIBERNATE_KEY, SPARES_KEY, ReplicaPool

        config = self.config
        hibernate_ms = config[HIBERNATE_KEY]
        if hibernate_ms <= 0:
            return
        from actors.replica_keeper import RayReplicaStarter

        call_timeout_s = self.service.call_timeout_s
        starter = RayReplicaStarter(config["raykafka.namespace"], self.zk_connect, call_timeout_s,
                                    start_timeout_s=call_timeout_s + 30,
                                    replicated=config["raykafka.replica.hibernate.replicated"],
                                    ray_node_id=ray.get_runtime_context().get_node_id(), broker_id=self.broker_id)
        pool = ReplicaPool(starter, node_capacity(config["raykafka.replicas.per.node.max"]), hibernate_ms / 1000,
                           broker_id=self.broker_id, spares=config[SPARES_KEY])
        self.service.attach_replica_pool(pool)
        sweep_s = min(hibernate_ms / 1000 / 4, 5.0)
        if config["raykafka.edge.processes"] > 1:
            from cluster.replica_leases import PoolLeases

            self._leases = PoolLeases(pool)
            self._lease_expiry = asyncio.ensure_future(self._expire_leases(sweep_s))
        self._pool_sweeper = asyncio.ensure_future(pool.run(sweep_s))

    async def _expire_leases(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self._leases.expire()

    def _start_leased_pool(self) -> None:
        """A sibling edge: replicas of this node through leases from the primary's pool."""
        from cluster.replica_pool import HIBERNATE_KEY

        if self.config[HIBERNATE_KEY] <= 0:
            return
        from actors.replica_keeper import RayPrimaryPool
        from cluster.replica_leases import LeasedPool

        primary = RayPrimaryPool(self.broker_id, self.config["raykafka.namespace"],
                                 ray.get_runtime_context().get_actor_id(), self.service.call_timeout_s)
        pool = LeasedPool(primary)
        self.service.attach_replica_pool(pool)
        self._pool_sweeper = asyncio.ensure_future(pool.run(0.5))

    # ---- leases of pooled replicas to this node's sibling edges (primary only) --------------------
    async def pool_lease(self, topic: str, partition: int, holder: str, number: int):
        """A sibling's lease of a pooled replica: its live handle (woken if need be), held live
        until given back; None: not a replica here (stopped or not pooled)."""
        leases = self._leases
        if leases is None:
            return None
        try:
            return await leases.lease((topic, partition), holder, number)
        except KeyError:
            return None

    async def pool_renew(self, leases: list, holder: str) -> list[bool]:
        table = self._leases
        return [False] * len(leases) if table is None else table.renew(leases, holder)

    async def pool_give_back(self, leases: list, holder: str) -> None:
        table = self._leases
        if table is not None:
            table.give_back(leases, holder)

    async def pool_lease_lost(self, topic: str, partition: int, handle, holder: str, number: int) -> None:
        table = self._leases
        if table is not None:
            table.lost((topic, partition), handle, holder, number)

    # ---- the replica pool: what the controller sends to pooled replicas (issue 30) --------------
    async def pool_leader_and_isr(self, spec, request) -> ErrorCode:
        pool = self.service.replicas.pool
        if pool is None:  # hibernation is off on this node
            log.error("LeaderAndIsr for pooled %s-%d, but broker %d keeps no replica pool", spec.topic,
                      spec.partition, self.broker_id)
            return ErrorCode.network_exception  # the controller retries
        return await pool.leader_and_isr((spec.topic, spec.partition), spec, request)

    async def pool_call(self, topic: str, partition: int, method: str, args: tuple, hibernated_ok: bool = False):
        """A controller request to a pooled replica: to the live actor (woken if need be);
        with hibernated_ok, a hibernated replica is not woken for it (answers None)."""
        pool = self.service.replicas.pool
        key = (topic, partition)
        if pool is None or not pool.knows(key):
            return None
        if hibernated_ok and pool.live_handle(key) is None:
            return None
        try:
            handle = await pool.acquire(key)
        except KeyError:  # stopped (StopReplica): no longer a replica here
            return None
        try:
            return await pool.starter.call(handle, method, tuple(args))
        finally:
            pool.release(key)

    async def pool_stop_replica(self, topic: str, partition: int, controller_epoch: int, delete: bool):
        """StopReplica for a pooled replica: never wakes it (cluster/replica_pool.py, stopped
        replicas). None: not pooled here (the controller retries when the broker returns)."""
        pool = self.service.replicas.pool
        if pool is None or not pool.knows((topic, partition)):
            return None
        return await pool.stop_replica((topic, partition), controller_epoch, delete)

    async def pool_wake_leader(self, topic: str, partition: int, leader_epoch: int) -> ErrorCode:
        """A follower on another node found this node's leader replica gone (the set hibernated
        while it was away): wake it; it wakes its followers (RF > 1 hibernation)."""
        pool = self.service.replicas.pool
        if pool is None:
            return ErrorCode.not_leader_or_follower
        return await pool.wake_leader((topic, partition), leader_epoch)

    async def pool_wake_follower(self, topic: str, partition: int, leader_epoch: int,
                                 leader_handle=None) -> ErrorCode:
        """The leader of a replicated set woke (as `leader_handle`): wake (or re-point) this
        node's follower to fetch from it."""
        pool = self.service.replicas.pool
        if pool is None:
            return ErrorCode.not_leader_or_follower
        if leader_handle is not None:
            pool.starter.hint_leader((topic, partition), leader_epoch, leader_handle)
        return await pool.wake_follower((topic, partition), leader_epoch)

    async def pool_hibernate_follower(self, topic: str, partition: int, leader_epoch: int, high_watermark: int,
                                      log_end_offset: int):
        """The leader of a replicated set closed for hibernation: hibernate this node's follower."""
        from core.pooled_replica import HibernateAnswer

        pool = self.service.replicas.pool
        if pool is None:
            return HibernateAnswer(False, "no replica pool")
        return await pool.hibernate_follower((topic, partition), leader_epoch, high_watermark, log_end_offset)

    async def pooled_replicas(self, keys: list, wake: bool) -> list:
        """Live handles of pooled replicas of this node, for actors that find replicas
        (actors/replica_lookup.py: an adopted one has no name); None where a key is not
        pooled here, or hibernates and `wake` is false. A woken one is not pinned: it
        may hibernate again once idle, and the caller's next call then fails and looks again."""
        pool = self.service.replicas.pool
        out = []
        for topic, partition in keys:
            key = (topic, partition)
            if pool is None or not pool.knows(key):
                out.append(None)
            elif not wake:
                out.append(pool.live_handle(key))
            else:
                try:
                    handle = await pool.acquire(key)
                except KeyError:  # stopped (StopReplica): no longer a replica here
                    out.append(None)
                    continue
                pool.release(key)
                out.append(handle)
        return out

    async def pool_update_log_config(self, topic: str, partition: int, log_config, min_insync_replicas: int) -> int:
        """A topic config change: a live replica applies it now, a hibernated one when it wakes."""
        pool = self.service.replicas.pool
        entry = pool.entries.get((topic, partition)) if pool is not None else None
        if entry is None:
            return 0
        entry.spec = entry.spec._replace(log_config=log_config, min_insync_replicas=min_insync_replicas)
        await self.pool_call(topic, partition, "update_log_config", (log_config, min_insync_replicas),
                             hibernated_ok=True)
        return 0

    async def pool_update_replication_throttle(self, topic: str, partition: int, leader_rate, follower_rate,
                                               leader_throttled_replicas: str | None = None,
                                               follower_throttled_replicas: str | None = None):
        """A replication throttle change: a live replica applies it now, a hibernated one
        when it wakes (kept in its spec; not woken for it). None: not pooled here."""
        pool = self.service.replicas.pool
        if pool is None or not pool.keep_replication_throttle(
                (topic, partition), leader_rate, follower_rate, leader_throttled_replicas,
                follower_throttled_replicas):
            return None
        args = (leader_rate, follower_rate, leader_throttled_replicas, follower_throttled_replicas)
        answer = await self.pool_call(topic, partition, "update_replication_throttle", args, hibernated_ok=True)
        return ErrorCode.none if answer is None else answer

    async def pool_forget(self, topic: str, partition: int, end: bool = False) -> None:
        """The replica left the pool: deleted (end: its stopped actor ends), or replicated
        now (its live actor stays, found by name from then on)."""
        pool = self.service.replicas.pool
        if pool is not None:
            handle = pool.forget((topic, partition))
            await pool.starter.leave_pool((topic, partition), handle, end)

    async def pool_stats(self) -> dict:
        pool = self.service.replicas.pool
        stats = None if pool is None else pool.stats()
        return {} if stats is None else stats._asdict()

    async def pool_close(self) -> int:
        """Clean shutdown: close every live pooled replica (flush, checkpoint)."""
        pool = self.service.replicas.pool
        if pool is None:
            return 0
        handles = [e.handle for e in pool.entries.values() if e.handle is not None]
        await asyncio.gather(*(asyncio.wait_for(h.close.remote(), self.service.call_timeout_s) for h in handles),
                             return_exceptions=True)
        return len(handles)

    async def start_sibling(self, port: int, advertised_host: str, advertised_port: int) -> int:
        """Start as edge 1..N-1 of a broker whose primary edge already listens on
        `port` with SO_REUSEPORT. No ZooKeeper registration: the broker is
        registered once, by the primary, and its address is the primary's.
        Returns the pid, for nodes.json."""
        import os

        if not self.reuse_port:
            raise ValueError("a sibling edge needs raykafka.edge.processes > 1")
        await self._listen(port)
        self._start_leased_pool()
        await self._resolve_listeners()
        self.listeners[0].advertised = (advertised_host, advertised_port)
        self.service.advertised_host, self.service.advertised_port = advertised_host, advertised_port
        log.info("broker %d: edge process %d shares %s:%d", self.broker_id, os.getpid(), self.listener.host,
                 self.bound_port)
        return os.getpid()

    async def set_siblings(self, siblings: list) -> None:
        """On the primary: from now on forward every UpdateMetadata to these
        edges, starting with the latest one already applied here (the controller
        may have sent it before the siblings existed)."""
        self.siblings = list(siblings)
        if self._last_update is not None:
            await self._forward(*self._last_update)

    async def _forward(self, snapshot: MetadataSnapshot, leader_handles: dict, controller_handle) -> None:
        # Numbered, because Ray does not promise that an async actor runs calls
        # in the order they were sent: a sibling skips an update older than one
        # it has already applied.
        incarnation, count = self._forward_seq
        seq = self._forward_seq = (incarnation, count + 1)
        calls = [s.update_metadata.remote(snapshot, leader_handles, controller_handle, seq) for s in self.siblings]
        timeout_s = self.service.call_timeout_s
        results = await asyncio.gather(*(asyncio.wait_for(ref, timeout_s) for ref in calls),
                                       return_exceptions=True)
        for index, result in enumerate(results, start=1):
            if isinstance(result, Exception):
                log.error("UpdateMetadata to edge %d of broker %d failed: %s", index, self.broker_id,
                          str(result).splitlines()[0][:300] if str(result) else repr(result))
            elif result.error != ErrorCode.none or result.needs_full:
                log.warning("UpdateMetadata to edge %d of broker %d answered %s", index, self.broker_id, result)

    async def wait_ready(self, timeout_s: float) -> bool:
        """True once the controller has sent this edge its first metadata, and,
        on a primary with siblings, once every sibling has it too."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        try:
            await asyncio.wait_for(self.service.metadata_ready.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        for sibling in self.siblings:
            left = deadline - asyncio.get_running_loop().time()
            try:
                if left <= 0 or not await asyncio.wait_for(sibling.wait_ready.remote(left), left + 5):
                    return False
            except asyncio.TimeoutError:
                return False
        return True

    async def update_metadata(self, update: MetadataSnapshot | MetadataDelta, leader_handles: dict,
                              controller_handle, forward_seq: tuple[int, int] | None = None) -> MetadataApplied:
        """From the controller, whole or a delta (forward_seq None), or
        forwarded whole by the primary edge of this node (numbered)."""
        if forward_seq is not None:
            forward_seq = tuple(forward_seq)
            if forward_seq <= self._applied_forward_seq:
                return MetadataApplied()  # an older update overtaken by a newer one
            self._applied_forward_seq = forward_seq
        answer = self.service.apply_update_metadata(update, leader_handles, controller_handle)
        if answer.error != ErrorCode.none or answer.needs_full:
            return answer
        held = self.service.held_metadata
        self._last_update = (held.snapshot, held.leader_handles, controller_handle)
        if self.siblings:
            await self._forward(*self._last_update)
        return answer

    async def listener_ports(self) -> dict[str, int]:
        """Listener name -> bound port (tests, tools)."""
        return {r.spec.name: port for r, port in zip(self.listeners, self._bound_ports())}

    async def connection_principals(self) -> list[tuple[str, str | None]]:
        """(listener, principal) of every open connection (tests, tools)."""
        return [(conn.listener.spec.name if conn.listener else "", conn.principal)
                for server in [self.server, *self.extra_servers] for conn in list(server._connections)]

    async def listening_port(self) -> int:
        """The port actually bound (listeners may name port 0)."""
        return self.bound_port

    async def pid(self) -> int:
        import os

        return os.getpid()

    async def park(self) -> None:
        """Never returns: the controller (and the supervisor in `raykafka
        start`) hold this call open so Ray tells them within milliseconds when
        this edge (its node) dies."""
        await asyncio.Event().wait()

    async def set_purgatory(self, purgatory) -> None:
        """The node's purgatory was re-created (a new actor): park operations there."""
        self.purgatory = purgatory
        if self.service is not None:
            self.service.set_purgatory(purgatory)

    async def live_broker_ids(self) -> list[int]:
        return sorted(self.service.metadata.brokers) if self.service is not None else []

    async def controlled_shutdown(self, max_retries: int, backoff_ms: int) -> dict:
        """Kafka's broker side of ControlledShutdown: ask the controller to move this
        broker's leaders and take it out of the ISRs, retried while it still leads
        partitions or the controller cannot be reached, at most max_retries + 1 times.
        -> {"attempts", "remaining": [(topic, p)], "error": str | None}"""
        from net.actor_calls import ActorCallFailed

        attempt, remaining, error = 0, [], None
        while True:
            attempt += 1
            try:
                answer = await self.service.controller_call("controlled_shutdown", self.broker_id)
                error = None if answer.error == ErrorCode.none else f"controller answered {answer.error.name}"
                remaining = [tuple(tp) for tp in answer.remaining]
            except ActorCallFailed as exc:
                error = str(exc)
            if error is None and not remaining:
                break
            log.warning("controlled shutdown attempt %d of broker %d: %s", attempt, self.broker_id,
                        error or f"still leads {len(remaining)} partitions")
            if attempt > max_retries:
                break
            await asyncio.sleep(backoff_ms / 1000)
        log.info("controlled shutdown of broker %d %s after %d attempt(s)", self.broker_id,
                 "succeeded" if error is None and not remaining else "gave up", attempt)
        return {"attempts": attempt, "remaining": remaining, "error": error}

    async def stats(self) -> dict:
        import os

        return {"connections": self.server.connection_count, **self.server.stats,
                "metadata_version": self.service.metadata.version, "pid": os.getpid(),
                **self.service.calls.counters}

    async def metrics(self, sample: bool = False) -> dict:
        """This edge process's metrics as recorded locally (for tests and
        tools); sample: take the node sample first (primary edge only)."""
        from core.metrics import registry

        if sample and self.sampler is not None:
            await self.sampler.sample()
        return registry().snapshot()

    async def stop(self) -> None:
        self._stopping = True
        if self._registering is not None:
            self._registering.cancel()
        if self._sampler is not None:
            self._sampler.cancel()
        if self._pool_sweeper is not None:
            self._pool_sweeper.cancel()
        if self._lease_expiry is not None:
            self._lease_expiry.cancel()
        if self.server is not None:
            await self.server.stop()
        for server in self.extra_servers:
            await server.stop()
        if self.listeners:
            self.listeners[0].endpoints.close()
        if self.service is not None and self.service.scram_store is not None:
            self.service.scram_store.close()
        if self.service is not None and self.service.acl_store is not None:
            # The ACLs' ZooKeeper session (net/authorization.py); kazoo's close blocks.
            await asyncio.get_running_loop().run_in_executor(None, self.service.acl_store.close)
        if self.service is not None and self.service.client_quotas is not None:
            # The client quotas' watch (net/client_quotas.py; the session is the edge's own, closed below).
            await asyncio.get_running_loop().run_in_executor(None, self.service.client_quotas.close)
        if self.zk is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.zk.close)
        if self.service is not None:
            self.service.close()


EdgeActorRemote = ray.remote(EdgeActor)
