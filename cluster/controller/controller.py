"""The controller's logic (Kafka's KafkaController): one candidate per broker, one active at a time.

Election is Kafka's: an ephemeral /controller znode plus a conditionally
incremented /controller_epoch. Work is processed one event at a time from a
single queue (ZooKeeper watches, edge requests), so decisions never interleave.
Every LeaderAndIsr / UpdateMetadata / StopReplica it sends carries its epoch;
replicas and edges refuse a smaller one, so a deposed controller changes nothing.

Its I/O is injected: a KafkaZkClient, and a ControllerChannel (channel.py) for
every request to replicas, edges and coordinators. actors/controller.py wires
the Ray channel; unit tests hand in a fake. No Ray here.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Awaitable, Callable

from cluster.controller.balancer import Balancer
from cluster.controller.broker_requests import BrokerRequests
from cluster.controller.channel import ControllerChannel, ReplicaKey, ReplicaSpec
from cluster.controller.configs import ConfigManager
from cluster.controller.topic_deletion import TopicDeletionManager
from cluster.controller.internal_topics import InternalTopic
from cluster.controller.partition_operations import Elections, PartitionGrowth, Reassignments
from cluster.controller.zk import AsyncZk
from cluster.controller.controller_context import (NO_LEADER, BrokerState, ControllerContext, PartitionState,
                                                   TopicState, new_zk_topic_id, zk_topic_id_to_uuid)
from cluster.controller.leader_election import offline_partition_leader
from cluster.controller.partition_state_machine import PartitionStateName as PS
from cluster.controller.reassignment import ReplicaAssignment
from cluster.controller.replica_state_machine import ReplicaState as RS
from cluster.topic_admin import TopicSpecError, described_configs, plan_topic
from core.config import BrokerConfig, TOPIC_CONFIGS
from core.controller_messages import (NOT_CONTROLLER_MESSAGE, AlterReassignmentsResult, ConfigChange,
                                      ConfigResource, ControlledShutdownResult, CreatePartitionsSpec,
                                      CreateTopicResult, CreateTopicSpec, DescribedConfigs, ElectLeadersResult,
                                      InternalTopicOutcome, ListReassignmentsResult, PartitionReassignment,
                                      TopicOutcome)
from metadata.kafka_zk import BadVersionError, KafkaZkClient
from metadata.kafka_zk import PartitionState as ZkPartitionState
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.controller")

# Bound on the event queue: edge requests beyond it are refused, not buffered forever.
MAX_QUEUED_EVENTS = 10_000


class Controller:
    """Controller logic with its I/O (ZooKeeper client, channel) injected."""

    def __init__(self, broker_id: int, config: BrokerConfig, zk: KafkaZkClient, namespace: str,
                 zk_connect: str | None, channel: ControllerChannel, offsets_topic: InternalTopic,
                 transaction_state_topic: InternalTopic):
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self._edge_watches: dict[int, asyncio.Task] = {}
        # broker id -> registration timestamp of an edge Ray reported dead,
        # until ZooKeeper's ephemeral for that registration goes away.
        self._dead_registrations: dict[int, str] = {}
        self.config = config
        self.zk = zk
        # Every ZooKeeper call awaited off the event loop (kazoo blocks its caller until the answer).
        self.azk = AsyncZk(zk)
        self.namespace = namespace
        self.ctx: ControllerContext | None = None
        self.events: asyncio.Queue = asyncio.Queue(MAX_QUEUED_EVENTS)
        self.loop = asyncio.get_running_loop()
        self.call_timeout_s = config["raykafka.actor.call.timeout.ms"] / 1000
        # Every request to replicas, edges and coordinators, and the death watches.
        self.channel = channel
        # LeaderAndIsr / UpdateMetadata rounds over the channel (Kafka's ControllerBrokerRequestBatch).
        self.requests = BrokerRequests(self)
        self._role_watches: list = []  # the active controller's ZooKeeper watches (WatchHandle each)
        self.channel.attach(self._replica_spec)
        # __consumer_offsets and __transaction_state: created on first use (FindCoordinator).
        self.offsets_topic = offsets_topic
        self.transaction_state_topic = transaction_state_topic
        self._worker: asyncio.Task | None = None
        self.stopped = False
        self.epoch_zk_version: int | None = None
        self._controller_watch: asyncio.Task | None = None
        self._controller_watch_key: tuple[int, int] | None = None
        # Its parts, each holding the controller: topic and dynamic broker configs, topic
        # deletion, partition growth, leader elections (and controlled shutdown), reassignment.
        self.configs = ConfigManager(self)
        self.deletion = TopicDeletionManager(self)
        self.growth = PartitionGrowth(self)
        self.elections = Elections(self)
        self.reassignment = Reassignments(self)
        # Replicas follow the nodes: balance on join, heal on loss (issue 31).
        self.balancer = Balancer(self)

    # ---- event queue ---------------------------------------------------------------------------
    def start(self) -> None:
        self._worker = self.loop.create_task(self._process_events())

        async def watch_controller():
            await self.azk.controller.watch(lambda _id: self.from_zk_thread(self._elect))

        self.enqueue(watch_controller)
        self.enqueue(self._elect)

    def from_zk_thread(self, event: Callable[[], Awaitable]) -> None:
        self.loop.call_soon_threadsafe(self.enqueue, event)

    def enqueue(self, event: Callable[[], Awaitable], future: asyncio.Future | None = None) -> None:
        try:
            self.events.put_nowait((event, future))
        except asyncio.QueueFull:
            if future is not None:
                future.set_exception(RuntimeError("controller event queue is full"))
            log.error("controller event queue full; dropped %s", event)

    async def submit(self, event: Callable[[], Awaitable]):
        future = self.loop.create_future()
        self.enqueue(event, future)
        return await future

    async def _process_events(self) -> None:
        while True:
            event, future = await self.events.get()
            try:
                result = await event()
            except Exception as exc:
                log.exception("controller event %s failed", getattr(event, "__name__", event))
                if future is not None and not future.done():
                    future.set_exception(exc)
                continue
            if future is not None and not future.done():
                future.set_result(result)

    @property
    def is_active(self) -> bool:
        return self.ctx is not None and not self.stopped

    def stop(self) -> None:
        """Stop taking events (watches fire as the ZooKeeper session closes,
        later); the session itself stays open until :meth:`close`."""
        self.stopped = True
        for task in (self._worker, self._controller_watch, self.elections._rebalance_task):
            if task is not None:
                task.cancel()
        self.balancer.stop()

    async def close(self) -> None:
        """stop(), then close the ZooKeeper session off the event loop
        (kazoo's close joins its threads and waits for the server)."""
        self.stop()
        await self.azk.close()

    # ---- election ----------------------------------------------------------------------------
    async def _elect(self) -> None:
        if self.is_active:
            if await self.azk.controller.id() == self.broker_id:
                return
            log.warning("broker %d lost the controller role", self.broker_id)
            self.ctx = None
            self._cancel_role_watches()
        started = time.monotonic()
        epoch = await self.azk.controller.try_elect(self.broker_id)
        if epoch is None:
            await self._watch_active_controller()
            return
        self.epoch_zk_version = (await self.azk.controller.epoch())[1]
        log.info("broker %d is the active controller, epoch %d", self.broker_id, epoch)
        self.ctx = ControllerContext(epoch, await self.azk.cluster.get_or_create_id())
        azk = self.azk
        # The watches of an earlier term of this controller (kazoo re-arms them on
        # a new session) would deliver every later change once more.
        self._cancel_role_watches()
        # One after another: each fires once at once, and those first events queue in this order.
        self._role_watches = [
            await azk.brokers.watch(lambda _ids: self.from_zk_thread(self._on_broker_change)),
            await azk.topics.watch_names(lambda _names: self.from_zk_thread(self._on_topic_change)),
            await azk.admin.watch_topic_deletions(lambda _names: self.from_zk_thread(self.deletion.on_marked)),
            await azk.isr_changes.watch(lambda _names: self.from_zk_thread(self._on_isr_change)),
            await azk.configs.watch_changes(lambda _names: self.from_zk_thread(self.configs.on_config_change)),
            await azk.admin.watch_reassignment(
                lambda _body: self.from_zk_thread(self.reassignment._on_reassign_partitions_znode)),
            await azk.admin.watch_preferred_replica_election(
                lambda _body: self.from_zk_thread(self.elections._on_preferred_replica_election)),
        ]
        await self._load_brokers()
        await self._load_topics()
        await self.configs.load_broker_overrides()
        self._initialize_state_machines()
        await self._elect_offline_partitions(list(self.ctx.all_partitions()))
        await self._send_leader_and_isr([tp for tp, _ in self.ctx.all_partitions()])
        await self._send_update_metadata()
        marked = await self.azk.admin.topics_marked_for_deletion()
        if marked:
            await self.deletion.delete(marked)
        # Reassignments a previous controller left in flight resume where they were.
        await self.reassignment._check_reassignments(list(self.ctx.reassignments))
        self.elections._start_auto_rebalance()
        try:
            await self.balancer.on_elected()
        except Exception:  # the controller works on without its balancer
            log.exception("the balancer could not take over")
        log.info("controller %d ready (epoch %d) in %.0f ms", self.broker_id, epoch,
                 (time.monotonic() - started) * 1000)

    def _cancel_role_watches(self) -> None:
        for handle in self._role_watches:
            handle.cancel()
        self._role_watches = []

    def _initialize_state_machines(self) -> None:
        ctx = self.ctx
        ctx.replica_sm.initialize(
            (((topic, p, b), b in ctx.brokers) for (topic, p), replicas in ctx.all_partitions() for b in replicas),
            set(ctx.topics_being_deleted))
        ctx.partition_sm.initialize(
            ((tp, tp in ctx.states, tp in ctx.states and ctx.states[tp].leader in ctx.brokers)
             for tp, _ in ctx.all_partitions()))

    async def _watch_active_controller(self) -> None:
        """Standby candidates watch the active controller's actor through Ray. When Ray
        reports it dead (its process or node is gone), /controller is removed at once
        instead of after the ZooKeeper session timeout, so a new controller is elected
        in about Ray's node-death detection time. Safe against a controller that is
        only unreachable: its ZooKeeper writes and its requests to replicas and edges
        are fenced by the controller epoch the new controller increments."""
        try:
            found = await self.azk.controller.znode()
        except Exception:
            log.exception("cannot read /controller")
            return
        if found is None:
            return
        controller_id, owner, _version = found
        if controller_id == self.broker_id or self._controller_watch_key == (controller_id, owner):
            return
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        self._controller_watch_key = (controller_id, owner)
        died = self.channel.watch_controller(controller_id)
        if died is None:
            return

        async def watch():
            if not await died:
                return
            log.warning("the active controller (broker %d) died (Ray death watch)", controller_id)

            async def take_over():
                current = await self.azk.controller.znode()
                if current is not None and current[0] == controller_id and current[1] == owner:
                    if await self.azk.controller.delete_if(owner, controller_id):
                        log.info("removed dead controller %d's /controller znode", controller_id)
                self._controller_watch_key = None
                await self._elect()

            take_over.__name__ = f"controller_died({controller_id})"
            self.enqueue(take_over)

        self._controller_watch = self.loop.create_task(watch())

    async def _live_registrations(self) -> dict[int, dict]:
        current = await self.azk.brokers.all()
        for broker_id, stamp in list(self._dead_registrations.items()):
            info = current.get(broker_id)
            if info is None or info.get("timestamp") != stamp:
                del self._dead_registrations[broker_id]  # gone, or a new registration: trust ZooKeeper again
            else:
                del current[broker_id]
        return current

    async def _load_brokers(self) -> None:
        self.ctx.brokers = {b: _broker_state(b, info) for b, info in (await self._live_registrations()).items()}
        for broker_id in self.ctx.brokers:
            self._watch_edge(broker_id)

    async def _load_topics(self) -> None:
        """Failover reads every topic's znodes: pipelined (all reads in flight at once,
        as Kafka's controller does with ZooKeeper's async API), installed in order."""
        ctx = self.ctx
        names = await self.azk.topics.names()
        for name, found in zip(names, await asyncio.gather(*(self._read_topic(n) for n in names))):
            self._install_topic(name, *found)
        log.info("controller context: %d brokers, %d topics, %d partitions", len(ctx.brokers),
                 len(ctx.topics), len(ctx.states))

    async def _load_topic(self, name: str) -> TopicState | None:
        return self._install_topic(name, *await self._read_topic(name))

    async def _read_topic(self, name: str) -> tuple:
        """-> (assignment, configs, {partition: (state, version) or None}); (None, None, {}) if gone."""
        assignment, configs = await asyncio.gather(self.azk.topics.get(name), self.azk.configs.topic(name))
        if assignment is None:
            return None, None, {}
        partitions = list(assignment.partitions)
        states = await asyncio.gather(*(self.azk.partitions.state(name, p) for p in partitions))
        return assignment, configs, dict(zip(partitions, states))

    def _install_topic(self, name: str, assignment, configs, states: dict) -> TopicState | None:
        if assignment is None:
            return None
        topic = TopicState(name, assignment.topic_id, dict(assignment.partitions), configs,
                           internal=name.startswith("__"))
        self.ctx.topics[name] = topic
        for p, replicas in topic.assignment.items():
            adding, removing = assignment.adding_replicas.get(p, []), assignment.removing_replicas.get(p, [])
            if adding or removing:
                self.ctx.reassignments[(name, p)] = ReplicaAssignment(list(replicas), list(adding), list(removing))
        for p in topic.assignment:
            found = states.get(p)
            if found is not None:
                state, version = found
                self.ctx.states[(name, p)] = PartitionState(state.leader, state.leader_epoch, list(state.isr),
                                                            state.controller_epoch, version)
        return topic

    # ---- partition state machine: NewPartition/OfflinePartition -> OnlinePartition --------------
    async def _elect_offline_partitions(self, partitions) -> None:
        ctx = self.ctx
        partitions = list(partitions)
        new_states = {}
        for (topic, p), replicas in partitions:
            if ctx.states.get((topic, p)) is None:
                live = [r for r in replicas if r in ctx.brokers]
                new_states[(topic, p)] = PartitionState(live[0] if live else NO_LEADER, 0, live or list(replicas),
                                                        ctx.epoch)
        versions = await self._create_partition_states(new_states)
        writes = []
        for (topic, p), replicas in partitions:
            state = ctx.states.get((topic, p))
            if state is None:
                live = [r for r in replicas if r in ctx.brokers]
                new = new_states[(topic, p)]
                leader = new.leader
                ctx.partition_sm.transition([(topic, p)], PS.NEW_PARTITION)
                ctx.replica_sm.transition([(topic, p, r) for r in replicas], RS.NEW_REPLICA)
                new.zk_version = versions[(topic, p)]
                ctx.states[(topic, p)] = new
                ctx.partition_sm.transition([(topic, p)], PS.ONLINE_PARTITION if leader != NO_LEADER
                                            else PS.OFFLINE_PARTITION)
                ctx.replica_sm.transition([(topic, p, r) for r in live], RS.ONLINE_REPLICA)
                continue
            if state.leader in ctx.brokers:
                continue
            ctx.partition_sm.transition([(topic, p)], PS.OFFLINE_PARTITION)
            unclean = self._topic_flag(topic, "unclean.leader.election.enable")
            outcome = offline_partition_leader(replicas, state.isr, set(ctx.brokers) - ctx.shutting_down, unclean)
            leader = NO_LEADER if outcome.leader is None else outcome.leader
            if leader == NO_LEADER and state.leader == NO_LEADER:
                continue
            if leader == NO_LEADER:
                log.warning("%s-%d is offline: no live replica in ISR %s (unclean election %s)", topic, p,
                            state.isr, "enabled" if unclean else "disabled")
            else:
                ctx.partition_sm.transition([(topic, p)], PS.ONLINE_PARTITION)
            # Dead replicas leave the ISR; with no live replica the last ISR is kept (Kafka).
            isr = [r for r in state.isr if r in ctx.brokers] if leader != NO_LEADER else state.isr
            if leader != NO_LEADER and leader not in isr:
                isr = [leader]
            writes.append(self._write_state(topic, p, PartitionState(leader, state.leader_epoch + 1, isr, ctx.epoch,
                                                                     state.zk_version)))
        # Pipelined, as Kafka writes the new leaders of all offline partitions at once.
        await self._write_states(writes)

    async def _create_partition_states(self, states: dict[tuple[str, int], PartitionState]) -> dict:
        """The state znodes of new partitions, written off the event loop and
        concurrently: one ZooKeeper write each (~5 ms with its fsync), so 100
        partitions held the loop ~0.5 s one after another. -> (topic, p) -> znode version.
        The first failure (a deposed controller's fenced write) propagates, as before."""
        if not states:
            return {}
        epoch, fence = self.ctx.epoch, self.epoch_zk_version

        def create(topic: str, p: int, state: PartitionState):
            return self.azk.partitions.create_state(topic, p, state.leader, state.leader_epoch, state.isr, epoch,
                                                   expected_controller_epoch_zk_version=fence)

        keys = list(states)
        versions = await asyncio.gather(*(create(t, p, states[(t, p)]) for t, p in keys))
        return dict(zip(keys, versions))

    async def _write_states(self, writes: list) -> None:
        """Await state writes issued together; the first failure propagates once all are done."""
        results = await asyncio.gather(*writes, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _write_state(self, topic: str, p: int, new: PartitionState) -> None:
        def write(leader_epoch: int, version: int):
            # Fenced on /controller_epoch's version: a deposed controller's write fails.
            return self.azk.partitions.update_state(
                topic, p, ZkPartitionState(new.leader, leader_epoch, list(new.isr), self.ctx.epoch), version,
                expected_controller_epoch_zk_version=self.epoch_zk_version)

        try:
            new.zk_version = await write(new.leader_epoch, new.zk_version)
        except BadVersionError:
            # Someone (a leader shrinking its ISR) wrote first: re-read and retry once.
            found = await self.azk.partitions.state(topic, p)
            if found is None:
                raise
            current, version = found
            new.leader_epoch = max(new.leader_epoch, current.leader_epoch + 1)
            new.zk_version = await write(new.leader_epoch, version)
        self.ctx.states[(topic, p)] = new

    def _topic_flag(self, topic: str, key: str) -> bool:
        configs = self.ctx.topics[topic].configs
        if key in configs:
            return TOPIC_CONFIGS[key].parse(configs[key])
        return bool(self.config.topic_default(key))

    # ---- requests to replicas and edges (broker_requests.py) ------------------------------------
    def _replica_spec(self, key: ReplicaKey) -> ReplicaSpec:
        return self.requests.replica_spec(key)

    def replica_config(self, broker_id: int, topic_configs: dict) -> dict:
        return self.requests.replica_config(broker_id, topic_configs)

    async def _send_leader_and_isr(self, partitions: list[tuple[str, int]], exclude: frozenset[int] = frozenset(),
                                   only: frozenset[tuple[str, int, int]] | None = None, attempt: int = 0,
                                   new: bool = False) -> None:
        await self.requests.send_leader_and_isr(partitions, exclude, only, attempt, new)

    def _retry_leader_and_isr(self, targets: frozenset[tuple[str, int, int]], attempt: int) -> None:
        self.requests.retry_leader_and_isr(targets, attempt)

    async def _await_all(self, calls, what: str, timeout_s: float | None = None) -> list:
        return await self.requests.await_all(calls, what, timeout_s)

    async def _send_update_metadata(self, without_leaders: frozenset[tuple[str, int]] = frozenset()) -> None:
        await self.requests.send_update_metadata(without_leaders)

    # ---- ZooKeeper-driven events -------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        if not self.is_active:
            return
        current = await self._live_registrations()
        await self._apply_broker_changes(current, [b for b in current if b not in self.ctx.brokers],
                                         [b for b in self.ctx.brokers if b not in current])

    def _watch_edge(self, broker_id: int) -> None:
        """Ray's death watch on the broker's edge: a pending call fails within
        milliseconds of the node dying, long before ZooKeeper's session expires."""
        if broker_id in self._edge_watches:
            return
        died = self.channel.watch_edge(broker_id)
        if died is None:
            # Registered in ZooKeeper but its edge actor is gone: the node died and its
            # session has not expired yet (e.g. seen by a controller elected after the
            # crash). Treat it as dead now rather than after the session timeout.
            self.enqueue(lambda: self._on_edge_died(broker_id))
            return

        async def watch():
            dead_edge_id = await died
            self._edge_watches.pop(broker_id, None)
            self.enqueue(lambda: self._on_edge_died(broker_id, dead_edge_id))

        self._edge_watches[broker_id] = self.loop.create_task(watch())

    def _on_edge_died(self, broker_id: int, dead_edge_id: str | None = None):
        async def event():
            if not self.is_active or broker_id not in self.ctx.brokers:
                return
            info = await self.azk.brokers.get(broker_id)
            # A replacement edge (started by the broker's supervisor) may have
            # registered already: only the dead edge's own registration is ignored.
            replaced = info is not None and dead_edge_id is not None and \
                info.get("edge_actor_id") not in (None, dead_edge_id)
            if info is not None and not replaced:
                self._dead_registrations[broker_id] = info.get("timestamp")
            log.warning("broker %d's edge died (Ray death watch)", broker_id)
            await self._apply_broker_changes({}, [], [broker_id])
            if replaced:
                await self._on_broker_change()  # re-admit it under its new edge

        event.__name__ = f"edge_died({broker_id})"
        return event()

    async def _apply_broker_changes(self, current: dict, new_ids: list[int], dead_ids: list[int]) -> None:
        ctx = self.ctx
        for broker_id in dead_ids:
            log.info("broker %d is gone", broker_id)
            del ctx.brokers[broker_id]
            ctx.shutting_down.discard(broker_id)
            self.channel.forget_broker(broker_id)  # its edge, replicas and coordinators
            self.requests.rounds.forget(broker_id)  # a returning broker's edge starts from a whole snapshot
        for broker_id in new_ids:
            log.info("broker %d joined", broker_id)
            ctx.brokers[broker_id] = _broker_state(broker_id, current[broker_id])
            self._watch_edge(broker_id)
        if not new_ids and not dead_ids:
            return
        await self._apply_broker_changes_to_partitions(new_ids, dead_ids)
        await self.balancer.on_brokers_changed(new_ids, dead_ids)

    async def _apply_broker_changes_to_partitions(self, new_ids: list[int], dead_ids: list[int]) -> None:
        ctx = self.ctx
        touched = [(tp, r) for tp, r in ctx.all_partitions()
                   if set(r) & (set(new_ids) | set(dead_ids))]
        ctx.replica_sm.transition([(t, p, b) for (t, p), r in touched for b in r if b in dead_ids],
                                  RS.OFFLINE_REPLICA)
        await self._elect_offline_partitions(touched)
        await self._remove_dead_from_isr(touched)
        await self._send_leader_and_isr([tp for tp, _ in touched])
        ctx.replica_sm.transition([(t, p, b) for (t, p), r in touched for b in r if b in new_ids],
                                  RS.ONLINE_REPLICA)
        await self._send_update_metadata()
        if new_ids:
            await self.reassignment._retry_replica_deletions(new_ids)
            retry = [t for t in ctx.topics_being_deleted if t in ctx.topics]
            if retry:
                await self.deletion.delete(retry)

    async def _remove_dead_from_isr(self, partitions) -> None:
        """Replica state machine, OnlineReplica -> OfflineReplica: a dead follower
        leaves the ISR at once (new leader epoch), so acks=all need not wait for
        replica.lag.time.max.ms."""
        ctx = self.ctx
        writes = []
        for (topic, p), _replicas in partitions:
            state = ctx.states.get((topic, p))
            if state is None or state.leader not in ctx.brokers:
                continue
            isr = [r for r in state.isr if r in ctx.brokers]
            if isr != state.isr:
                writes.append(self._write_state(topic, p, PartitionState(state.leader, state.leader_epoch + 1, isr,
                                                                         ctx.epoch, state.zk_version)))
        await self._write_states(writes)  # pipelined

    async def _on_isr_change(self) -> None:
        """Leaders changed ISRs in ZooKeeper: refresh those states and tell the edges."""
        if not self.is_active:
            return
        notes = await self.azk.isr_changes.pending()
        if not notes:
            return
        changed = {tuple(tp) for n in notes for tp in n.partitions}
        changed = [tp for tp in changed if tp[0] in self.ctx.topics]
        reads = await asyncio.gather(*(self.azk.partitions.state(topic, p) for topic, p in changed))
        for (topic, p), found in zip(changed, reads):
            if found is not None:
                state, version = found
                self.ctx.states[(topic, p)] = PartitionState(state.leader, state.leader_epoch, list(state.isr),
                                                             state.controller_epoch, version)
        await self._send_update_metadata()
        await self.azk.isr_changes.delete([n.name for n in notes])
        await self.reassignment._check_reassignments([tp for tp in changed if tp in self.ctx.reassignments])
        await self.balancer.on_reassignments_checked()

    async def _on_topic_change(self) -> None:
        """Topics written to ZooKeeper by someone else (e.g. an admin tool)."""
        if not self.is_active:
            return
        new = [t for t in await self.azk.topics.names() if t not in self.ctx.topics]
        if not new:
            return
        for name in new:
            await self._load_topic(name)
        partitions = [item for name in new for item in self.ctx.partitions_of(name)]
        await self._elect_offline_partitions(partitions)
        await self._send_leader_and_isr([tp for tp, _ in partitions])
        await self._send_update_metadata()

    # ---- admin requests from edges ---------------------------------------------------------------
    async def create_topics(self, specs: list[CreateTopicSpec], validate_only: bool,
                            timeout_ms: int | None = None) -> list[CreateTopicResult]:
        """CreateTopics. With the request's ``timeout_ms``: answered within it
        whatever the partition count (see _create_topics' ``answer``)."""
        budget_s = _answer_budget_s(timeout_ms, self.call_timeout_s)
        answer = self.loop.create_future() if budget_s is not None else None
        # From the request's arrival: queued events and ZooKeeper writes count too.
        answer_by = self.loop.time() + budget_s if budget_s is not None else None

        async def event():
            if not self.is_active:
                return [CreateTopicResult(s.name, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE) for s in specs]
            return await self._create_topics(specs, validate_only, answer, answer_by)

        event.__name__ = "create_topics"
        done = asyncio.ensure_future(self.submit(event))
        if answer is None:
            return await done
        await asyncio.wait({answer, done}, return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            # The event goes on starting replicas; its outcome is logged by _process_events.
            done.add_done_callback(lambda task: task.cancelled() or task.exception())
            return answer.result()
        return done.result()

    async def _create_topics(self, specs: list[CreateTopicSpec], validate_only: bool,
                             answer: asyncio.Future | None = None,
                             answer_by: float | None = None) -> list[CreateTopicResult]:
        """``answer`` (CreateTopics from a client): set with the results before
        this returns when the new replicas are not all up by ``answer_by``
        (the loop's time: half the request's timeout after it came). A
        replica actor costs ~0.35 s of CPU to start, so 100 partitions take
        longer than a client's 15 s on a small node. Kafka
        answers once the topics' metadata is written and their leaders are
        elected; so does this, at that point: the assignment and the leaders'
        state znodes are durable, and every edge has had an UpdateMetadata
        naming the topics and their leaders. Meanwhile a client sees the topic
        in Metadata, and a partition whose leader replica is not up yet
        answers NOT_LEADER_OR_FOLLOWER (retriable) until the UpdateMetadata
        sent once all of them are."""
        ctx = self.ctx
        results, created = [], []
        existing = set(ctx.topics) | set(ctx.topics_being_deleted)
        capacity = self.growth._node_capacity()  # raykafka.replicas.per.node.max: checked before any write
        for spec in specs:
            try:
                plan = plan_topic(spec, self.config, ctx.live_broker_ids, existing,
                                  racks={b: info.rack for b, info in ctx.brokers.items()},
                                  capacity=capacity, internal=spec.name.startswith("__"))
            except TopicSpecError as exc:
                results.append(CreateTopicResult(spec.name, ErrorCode(exc.error), str(exc)))
                continue
            # later topics of this request (validate_only too) count it
            capacity.add(plan.assignment, spec.name.startswith("__"))
            topic_id = new_zk_topic_id()
            if not validate_only:
                try:
                    # Off the event loop (a ZooKeeper write with its fsync, per topic).
                    await self.azk.topics.create(plan.name, plan.assignment, plan.configs, topic_id)
                except Exception as exc:  # TopicExistsError from a racing writer, or ZooKeeper trouble
                    code = (ErrorCode.topic_already_exists if type(exc).__name__ == "TopicExistsError"
                            else ErrorCode.unknown_server_error)
                    results.append(CreateTopicResult(plan.name, code, str(exc)))
                    continue
                ctx.topics[plan.name] = TopicState(plan.name, topic_id, plan.assignment, plan.configs,
                                                   internal=plan.name.startswith("__"))
                existing.add(plan.name)
                created.append(plan.name)
            results.append(CreateTopicResult(
                plan.name, ErrorCode.none, None,
                topic_id=uuid.UUID(zk_topic_id_to_uuid(topic_id)) if not validate_only else None,
                num_partitions=plan.num_partitions, replication_factor=plan.replication_factor,
                configs=described_configs(plan.configs, self.config)))
        if created:
            partitions = [item for name in created for item in ctx.partitions_of(name)]
            await self._elect_offline_partitions(partitions)
            starting = asyncio.ensure_future(self._send_leader_and_isr([tp for tp, _ in partitions], new=True))
            if answer is not None and answer_by is not None:
                await asyncio.wait({starting}, timeout=max(0.0, answer_by - self.loop.time()))
                if not starting.done():
                    pending = frozenset(tp for tp, _ in partitions)
                    log.info("CreateTopics %s: answering with %d new replicas still starting", created,
                             len(pending))
                    await self._send_update_metadata(without_leaders=pending)
                    if not answer.done():
                        answer.set_result(results)
            await starting
            await self._send_update_metadata()
        return results

    async def ensure_offsets_topic(self) -> InternalTopicOutcome:
        """Create __consumer_offsets unless it exists (the first FindCoordinator
        asks for it, as in Kafka)."""
        async def event():
            if not self.is_active:
                return InternalTopicOutcome(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
            if self.offsets_topic.name in self.ctx.topics:
                return InternalTopicOutcome()
            if not self.ctx.brokers:
                return InternalTopicOutcome(ErrorCode.coordinator_not_available, "no live brokers")
            [result] = await self._create_topics([self.offsets_topic.spec(self.config, len(self.ctx.brokers))],
                                                 False)
            return InternalTopicOutcome(result.error, result.message)

        event.__name__ = "ensure_offsets_topic"
        return await self.submit(event)

    async def ensure_transaction_state_topic(self) -> InternalTopicOutcome:
        """Create __transaction_state unless it exists (the first
        FindCoordinator(TRANSACTION) asks for it)."""
        async def event():
            if not self.is_active:
                return InternalTopicOutcome(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
            if self.transaction_state_topic.name in self.ctx.topics:
                return InternalTopicOutcome()
            if not self.ctx.brokers:
                return InternalTopicOutcome(ErrorCode.coordinator_not_available, "no live brokers")
            spec = self.transaction_state_topic.spec(self.config, len(self.ctx.brokers))
            [result] = await self._create_topics([spec], False)
            return InternalTopicOutcome(result.error, result.message)

        event.__name__ = "ensure_transaction_state_topic"
        return await self.submit(event)

    async def delete_topics(self, names: list[str]) -> list[TopicOutcome]:
        return await self.deletion.delete_topics(names)

    # ---- the parts' entry points (edge requests through the actor, calls between parts) ----------------
    async def create_partitions(self, specs: list[CreatePartitionsSpec], validate_only: bool) -> list[TopicOutcome]:
        return await self.growth.create_partitions(specs, validate_only)

    def _described_broker_config(self, name: str):
        return self.growth._described_broker_config(name)

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None,
                            timeout_ms: int = 0) -> ElectLeadersResult:
        return await self.elections.elect_leaders(election_type, partitions, timeout_ms)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1) -> ControlledShutdownResult:
        return await self.elections.controlled_shutdown(broker_id, broker_epoch)

    async def alter_partition_reassignments(self, reassignments: list[PartitionReassignment],
                                            timeout_ms: int = 0) -> AlterReassignmentsResult:
        return await self.reassignment.alter_partition_reassignments(reassignments, timeout_ms)

    async def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None,
                                           timeout_ms: int = 0) -> ListReassignmentsResult:
        return await self.reassignment.list_partition_reassignments(partitions, timeout_ms)

    def _target_replicas(self, topic: str, p: int) -> list[int]:
        return self.reassignment._target_replicas(topic, p)

    async def _await_calls(self, calls: list) -> dict:
        return await self.reassignment._await_calls(calls)

    async def alter_topic_configs(self, changes: list[ConfigChange], validate_only: bool) -> list[TopicOutcome]:
        return await self.configs.alter_topic_configs(changes, validate_only)

    async def alter_broker_configs(self, changes: list[ConfigChange], validate_only: bool) -> list[TopicOutcome]:
        return await self.configs.alter_broker_configs(changes, validate_only)

    async def describe_configs(self, resources: list[ConfigResource]) -> list[DescribedConfigs]:
        return await self.configs.describe_configs(resources)

    def _throttle_rates(self, broker_id: int) -> tuple[int, int]:
        return self.configs.throttle_rates(broker_id)

    # ---- shutdown ------------------------------------------------------------------------------
    async def close_local_replicas(self, broker_id: int) -> int:
        """Clean shutdown of one broker's replicas: flush and checkpoint each log."""
        return await self.channel.close_replicas(broker_id, self.call_timeout_s)


def _broker_state(broker_id: int, info: dict) -> BrokerState:
    return BrokerState(broker_id=broker_id, host=info.get("host"), port=info.get("port"), rack=info.get("rack"),
                       ray_node_id=info.get("ray_node_id"), log_dirs=list(info.get("log_dirs") or []),
                       replicas_max=info.get("replicas_max"), partitions_max=info.get("partitions_max"))


# CreateTopics answers early once starting its replicas has taken this share
# of the request's timeout (less the time an answer takes to travel back).
ANSWER_WITHIN_SHARE = 0.5


def _answer_budget_s(timeout_ms: int | None, call_timeout_s: float) -> float | None:
    """How long CreateTopics waits for its new replicas before answering
    without them; None: until they are all up (no timeout given, or 0: a
    client that asks not to wait gets the answer it always got, once the
    replicas are up, so that its next request finds them)."""
    if timeout_ms is None or timeout_ms <= 0:
        return None
    return max(0.0, min(timeout_ms / 1000 * ANSWER_WITHIN_SHARE, call_timeout_s))

