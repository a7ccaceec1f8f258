"""Group coordinator actor: one per ``__consumer_offsets`` partition, living
with that partition's leader replica (named ``group-coordinator-<p>@<broker>``,
placed on the leader's node, num_cpus=0).

A thin asyncio shell over ``cluster.groups.GroupCoordinator`` (the rules) and
``cluster.internal_topic_log.InternalTopicLog`` (the partition as its store):

* Ownership follows leadership. The controller calls ``elect(leader_epoch,
  replica)`` on the coordinator of the broker it just made leader of the
  offsets partition (creating the actor if needed) and ``resign(epoch)`` on the
  other replicas' coordinators (Kafka's onElection / onResignation). On
  ``elect`` the coordinator answers COORDINATOR_LOAD_IN_PROGRESS while it reads
  the partition's log from the leader replica and replays it; on ``resign``
  it unloads, and every request gets NOT_COORDINATOR until the next ``elect``.
* Appends (group metadata, offset commits, tombstones) go to the leader
  replica with acks=-1, in call order, each complete once the partition's
  high watermark has passed it (InternalTopicLog).
* Time: the coordinator's delayed operations (sessions, rebalance timeouts,
  the initial rebalance delay, offset expiration) run on a ``SystemTimer``
  driven by ``delayed.AsyncTimerDriver`` on the actor's event loop, the only
  thread that touches the coordinator.
* Requests: the edge (``net/apis/n08..n16, n28, n42, n47, n68, n69``) calls the
  methods below with one request each, of core/group_messages.py's types
  (ConsumerGroupHeartbeat: cluster.groups.consumer.ConsumerHeartbeat); they
  answer with the ``cluster.groups.api`` values.
* KIP-848 consumer groups (``n68`` ConsumerGroupHeartbeat, ``n69``
  ConsumerGroupDescribe) go to ``cluster.groups.consumer.ConsumerGroupCoordinator``,
  which shares this partition's log, loading and offset store with the
  classic coordinator; the group APIs of both kinds ask it first whether a
  group is a consumer group.
* Transactions: TxnOffsetCommit's records go to the log as a transactional
  batch of the producer and stay pending until the transaction coordinator,
  having written the producer's COMMIT/ABORT marker to this partition, calls
  ``complete_transaction`` (a load replays markers the same way).

Every await on another actor is bounded (``raykafka.actor.call.timeout.ms``,
``offsets.commit.timeout.ms``).

A coordinator whose process dies is restarted by Ray (unlimited restarts, on
its node) with its state gone. Nothing tells it to load again (the controller
sees no leadership change), so on its first call the restarted incarnation
asks the offsets partition's replica on its node whether it leads and, if so,
elects itself at that leader epoch and loads the log as on ``elect``;
meanwhile, and while loading, requests get NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS, both retriable.

``sync_group_coordinators`` and ``offsets_topic_spec`` are the controller's
side (actors/controller.py, actors/controller_channel.py call them).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Callable, Iterable, Optional

import ray

from actors.internal_topic_calls import (CoordinatorKind, RayNodeCalls, forget_coordinators, restarted_by_ray,
                                         sync_coordinators)
# offsets_topic_spec: actors/controller.py's import.
from cluster.controller.internal_topics import OFFSETS_TOPIC, offsets_topic_spec  # noqa: F401
from cluster.groups import (AppendCompletion, CoordinatorStatus, GroupConfig, GroupCoordinator, GroupDescription,
                            LeavingMember, OffsetFetchResult, PartitionCommit,
                            TopicPartition, TxnProducer)
from cluster.groups.consumer import (ConsumerGroupConfig, ConsumerGroupCoordinator, ConsumerHeartbeat,
                                     TopicsImageWanted)
from cluster.internal_topic_log import InternalTopicLog
from core.config import BrokerConfig
from core.error_codes import ErrorCode
from core.group_messages import (ConsumerGroupDescribe, DeleteGroups, DescribeGroups, Heartbeat, JoinGroup, LeaveGroup,
                                 ListGroups, ListGroupsResult, OffsetCommit, OffsetDelete, OffsetDeleteResult,
                                 OffsetFetch, OffsetToCommit, SyncGroup, TxnOffsetCommit)
from core.local_calls import LocalCallServer
from core.naming import group_coordinator_actor_name
from core.txn_messages import TxnCompletion

log = logging.getLogger("raykafka.group_coordinator")


# What the edge of this node may call over the direct channel: the per-request calls.
LOCAL_CALL_METHODS = ("join_group", "sync_group", "heartbeat", "leave_group", "commit_offsets", "fetch_offsets",
                      "describe_groups", "list_groups", "delete_groups", "delete_offsets", "txn_commit_offsets",
                      "complete_transaction", "consumer_group_heartbeat", "consumer_group_describe")


coordinator_actor_name = group_coordinator_actor_name  # the name the edge looks up (core.naming)


class GroupCoordinatorActor:
    def __init__(self, partition: int, broker_id: int, num_partitions: int, config: dict,
                 namespace: str = "raykafka"):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.partition = partition
        self.broker_id = broker_id
        self.namespace = namespace
        broker_config = BrokerConfig(config)
        self.group_config = dataclasses.replace(GroupConfig.from_broker_config(broker_config),
                                                offsets_topic_num_partitions=num_partitions)
        self.consumer_group_config = ConsumerGroupConfig.from_broker_config(broker_config)
        self.consumer_groups: Optional[ConsumerGroupCoordinator] = None
        call_timeout_s = broker_config.get("raykafka.actor.call.timeout.ms", 30000) / 1000
        self.node_calls = RayNodeCalls(OFFSETS_TOPIC, partition, broker_id, namespace, call_timeout_s,
                                       bool(broker_config.get("raykafka.local.calls", True)))
        self.state_log = InternalTopicLog(
            OFFSETS_TOPIC, partition, self.node_calls, owner="group coordinator",
            load_buffer_bytes=int(broker_config.get("offsets.load.buffer.size", 5 * 1024 * 1024)),
            append_timeout_ms=int(broker_config.get("offsets.commit.timeout.ms", 5000)), restarted=restarted_by_ray())
        self.coordinator: Optional[GroupCoordinator] = None
        self._driver = None
        self._local_calls: LocalCallServer | None = None  # for the edge, opened on first ask

    # ---- setup (needs the running loop) ------------------------------------------------------
    def _ensure(self) -> GroupCoordinator:
        self.state_log.recover_if_restarted(self.elect)
        if self.coordinator is None:
            from delayed import AsyncTimerDriver, SystemTimer

            timer = SystemTimer(tick_ms=1, wheel_size=20)
            self._driver = AsyncTimerDriver(timer, asyncio.get_running_loop())
            self.coordinator = GroupCoordinator(timer, self._append_records, self.group_config,
                                                partition=self.partition)
            self.consumer_groups = ConsumerGroupCoordinator(self.coordinator, timer, self._append_records,
                                                            self.consumer_group_config)
            self.coordinator.manager.other_records = self.consumer_groups.replay
        return self.coordinator

    # ---- ownership: controller -> coordinator --------------------------------------------------
    async def elect(self, leader_epoch: int, replica: Any) -> ErrorCode:
        """This broker leads the offsets partition (at ``leader_epoch``): load and serve."""
        coordinator = self._ensure()
        if leader_epoch < self.state_log.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if self.state_log.leading and coordinator.status is not CoordinatorStatus.NOT_LOADED:
            if leader_epoch == self.state_log.leader_epoch:
                return ErrorCode.none  # a repeated LeaderAndIsr (e.g. a new controller): nothing changed
            if coordinator.status is CoordinatorStatus.ACTIVE and await self.state_log.still_own_log(replica):
                # Same leader, new epoch (an ISR change): the log is ours as we know it.
                self.state_log.keep_leading(leader_epoch, replica)
                return ErrorCode.none
        self.state_log.lead(leader_epoch, replica)
        self._begin_loading()
        self.state_log.start_load(self._replay, self._begin_loading)
        return ErrorCode.none

    def _begin_loading(self) -> None:
        self.coordinator.begin_loading()
        self.consumer_groups.begin_loading()

    def _unload(self) -> None:
        self.consumer_groups.unload()
        self.coordinator.unload()

    def _replay(self, batches: list, end: int) -> str:
        coordinator = self.coordinator
        if coordinator.status is not CoordinatorStatus.LOADING:
            self._begin_loading()
        coordinator.replay_batches(batches)
        coordinator.complete_loading()
        self.consumer_groups.complete_loading()
        return f"{len(coordinator.groups) - len(self.consumer_groups.groups)} classic groups, " \
               f"{len(self.consumer_groups.groups)} consumer groups"

    async def resign(self, leader_epoch: int) -> ErrorCode:
        """Another broker leads the partition now (or nobody): unload."""
        coordinator = self._ensure()
        if 0 <= leader_epoch < self.state_log.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        was = coordinator.status
        self.state_log.resign(leader_epoch, unload=self._unload if was is not CoordinatorStatus.NOT_LOADED else None)
        if was is not CoordinatorStatus.NOT_LOADED:
            log.info("group coordinator for %s-%d unloaded (leader epoch %d)", OFFSETS_TOPIC, self.partition,
                     leader_epoch)
        return ErrorCode.none

    # ---- appends: coordinator -> leader replica (acks=-1, in call order) ---------------------------
    def _append_records(self, records: list, producer: Optional[TxnProducer] = None) -> AppendCompletion:
        """One batch of ``records``; with a ``producer`` (TxnOffsetCommit) a
        transactional batch of its id and epoch, without a sequence (Kafka's
        coordinator batches are checked for the epoch, not for sequences)."""
        from storage.records import SimpleRecord, build_batch

        completion = AppendCompletion()
        simple = [SimpleRecord(key, value) for key, value in records]
        if producer is None:
            batch = build_batch(simple)
        else:
            batch = build_batch(simple, producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                base_sequence=-1, is_transactional=True)
        self.state_log.append(batch, completion.complete)
        return completion

    # ---- direct calls on this node (core/local_calls.py) -----------------------------------------------
    async def local_call_endpoint(self):
        """(node id, socket address, token, name, methods) of the direct-call
        socket for the edge of this node; the methods run as their Ray calls would."""
        self._ensure()  # a restarted coordinator starts reclaiming its partition
        if self._local_calls is None:
            self._local_calls = LocalCallServer.serving(f"coordinator-{self.partition}@{self.broker_id}", self,
                                                        LOCAL_CALL_METHODS)
        return await self._local_calls.endpoint()

    # ---- requests: edge -> coordinator ----------------------------------------------------------------
    @staticmethod
    def _answer() -> tuple[asyncio.Future, Callable[[Any], None]]:
        future = asyncio.get_running_loop().create_future()

        def callback(result: Any) -> None:
            if not future.done():
                future.set_result(result)

        return future, callback

    async def join_group(self, r: JoinGroup, image=None):
        self._ensure()
        if self.consumer_groups.owns(r.group_id) and self.consumer_groups.wants_image(image):
            return TopicsImageWanted(self.consumer_groups.image.version)  # the edge asks again with it
        if self.consumer_groups.takes_classic_join(r.group_id):
            # A classic member of a consumer group with members (a group migrating between the
            # protocols); an empty consumer group was just deleted and continues as a classic one.
            future, callback = self._answer()
            self.consumer_groups.classic_join(r.group_id, r.member_id, r.group_instance_id, r.client_id,
                                              r.client_host, r.rebalance_timeout_ms, r.session_timeout_ms,
                                              r.protocol_type, list(r.protocols), r.api_version, callback, image)
            return await future
        future, callback = self._answer()
        self._ensure().join_group(r.group_id, r.member_id, r.group_instance_id, r.client_id, r.client_host,
                                  r.rebalance_timeout_ms, r.session_timeout_ms, r.protocol_type, list(r.protocols),
                                  callback, api_version=r.api_version, reason=r.reason)
        return await future

    async def sync_group(self, r: SyncGroup):
        if self._ensure() and self.consumer_groups.owns(r.group_id):
            return self.consumer_groups.classic_sync(r.group_id, r.generation_id, r.member_id, r.group_instance_id,
                                                     r.protocol_type, r.protocol_name)
        future, callback = self._answer()
        self._ensure().sync_group(r.group_id, r.generation_id, r.member_id, r.group_instance_id, r.protocol_type,
                                  r.protocol_name, dict(r.assignments), callback)
        return await future

    async def heartbeat(self, r: Heartbeat) -> ErrorCode:
        if self._ensure() and self.consumer_groups.owns(r.group_id):
            return self.consumer_groups.classic_heartbeat(r.group_id, r.member_id, r.group_instance_id,
                                                          r.generation_id)
        return self._ensure().heartbeat(r.group_id, r.member_id, r.group_instance_id, r.generation_id)

    async def leave_group(self, r: LeaveGroup):
        members = [LeavingMember(*m) for m in r.members]
        if self._ensure() and self.consumer_groups.owns(r.group_id):
            return self.consumer_groups.classic_leave(r.group_id, members)
        return self._ensure().leave_group(r.group_id, members)

    @staticmethod
    def _commits(offsets: dict[tuple[str, int], OffsetToCommit]) -> dict[TopicPartition, PartitionCommit]:
        return {TopicPartition(*tp): PartitionCommit(offset=o.offset, leader_epoch=o.leader_epoch,
                                                     metadata=o.metadata, expire_timestamp_ms=o.expire_timestamp_ms)
                for tp, o in offsets.items()}

    async def commit_offsets(self, r: OffsetCommit) -> dict:
        """OffsetCommit -> {(topic, partition): ErrorCode}. ``generation_id`` is a
        consumer group member's member epoch."""
        future, callback = self._answer()
        commits = self._commits(r.offsets)
        coordinator = self._ensure()
        if not self.consumer_groups.commit_offsets(r.group_id, r.member_id, r.group_instance_id, r.generation_id,
                                                   commits, callback, r.api_version):
            coordinator.commit_offsets(r.group_id, r.member_id, r.group_instance_id, r.generation_id, commits,
                                       callback)
        return await future

    async def txn_commit_offsets(self, r: TxnOffsetCommit) -> dict:
        """TxnOffsetCommit -> {(topic, partition): ErrorCode}."""
        future, callback = self._answer()
        commits = self._commits(r.offsets)
        coordinator, producer = self._ensure(), TxnProducer(r.producer_id, r.producer_epoch)
        if not self.consumer_groups.commit_offsets(r.group_id, r.member_id, r.group_instance_id, r.generation_id,
                                                   commits, callback, producer=producer):
            coordinator.txn_commit_offsets(r.group_id, producer, r.member_id, r.group_instance_id, r.generation_id,
                                           commits, callback)
        return await future

    async def complete_transaction(self, completion: TxnCompletion) -> int:
        """The transaction coordinator wrote ``completion``'s COMMIT/ABORT
        marker to this offsets partition (Kafka's
        scheduleHandleTxnCompletion): the producer's pending TxnOffsetCommits
        become committed offsets, or are dropped. -> groups it touched."""
        completion = TxnCompletion(*completion)
        return self._ensure().complete_transaction(completion.producer_id, completion.committed)

    async def fetch_offsets(self, r: OffsetFetch):
        """OffsetFetch; its ``member_id``/``member_epoch`` (v9+) are checked for consumer groups."""
        tps = None if r.partitions is None else [TopicPartition(*tp) for tp in r.partitions]
        coordinator = self._ensure()
        if self.consumer_groups.owns(r.group_id):
            error = self.consumer_groups.validate_fetch(r.group_id, r.member_id, r.member_epoch)
            if error is not None:
                return OffsetFetchResult(error)
        return coordinator.fetch_offsets(r.group_id, tps, r.require_stable)

    async def describe_groups(self, r: DescribeGroups):
        """DescribeGroups: a consumer group is no classic group (Kafka: "Dead",
        GROUP_ID_NOT_FOUND from v6; clients describe it with ConsumerGroupDescribe)."""
        coordinator = self._ensure()
        return [GroupDescription(g, ErrorCode.none, state="Dead") if self.consumer_groups.owns(g)
                else coordinator.describe_group(g) for g in r.group_ids]

    async def list_groups(self, r: ListGroups = ListGroups()) -> ListGroupsResult:
        """ListGroups of both kinds; ``types_filter`` (v5): "classic", "consumer"."""
        coordinator = self._ensure()
        types = {t.lower() for t in r.types_filter or ()}
        error, classic = coordinator.list_groups(r.states_filter)
        listings = []
        if not types or "classic" in types:
            listings += [g for g in classic if not self.consumer_groups.owns(g.group_id)]
        if not types or "consumer" in types:
            listings += self.consumer_groups.listings(r.states_filter)
        return ListGroupsResult(error, listings)

    async def delete_groups(self, r: DeleteGroups) -> dict:
        """DeleteGroups -> {group id: ErrorCode}."""
        group_ids = list(r.group_ids)
        coordinator = self._ensure()
        errors = self.consumer_groups.delete_groups(group_ids)
        rest = [g for g in group_ids if errors.get(g, ErrorCode.none) == ErrorCode.none]
        classic = coordinator.delete_groups(rest) if rest else {}
        # A deleted consumer group's offsets holder may be gone already: that is fine.
        return {g: errors[g] if g in errors else classic.get(g, ErrorCode.group_id_not_found) for g in group_ids}

    async def consumer_group_heartbeat(self, request: ConsumerHeartbeat, image):
        """ConsumerGroupHeartbeat (KIP-848) -> ConsumerHeartbeatResult, once its records are durable."""
        self._ensure()
        if self.consumer_groups.wants_image(image):
            return TopicsImageWanted(self.consumer_groups.image.version)  # the edge asks again with it
        future, callback = self._answer()
        self.consumer_groups.heartbeat(request, image, callback)
        return await future

    async def consumer_group_describe(self, r: ConsumerGroupDescribe, image=None):
        self._ensure()
        self.consumer_groups.see_image(image)
        return self.consumer_groups.describe(list(r.group_ids))

    async def delete_offsets(self, r: OffsetDelete) -> OffsetDeleteResult:
        coordinator = self._ensure()
        tps = [TopicPartition(*tp) for tp in r.partitions]
        subscribed = self.consumer_groups.subscribed_topics(r.group_id)
        if not subscribed:
            return OffsetDeleteResult(*coordinator.delete_offsets(r.group_id, tps))
        # A consumer group's members keep the offsets of the topics they subscribe to.
        error, errors = coordinator.delete_offsets(r.group_id, [tp for tp in tps if tp.topic not in subscribed])
        if error != ErrorCode.none:
            return OffsetDeleteResult(error, errors)
        return OffsetDeleteResult(error, {**errors, **{tp: ErrorCode.group_subscribed_to_topic for tp in tps
                                                        if tp.topic in subscribed}})

    # ---- inspection -------------------------------------------------------------------------------------
    async def state(self) -> dict:
        coordinator = self._ensure()
        return {"partition": self.partition, "broker_id": self.broker_id, "leader_epoch": self.state_log.leader_epoch,
                "status": coordinator.status.value, "groups": sorted(coordinator.groups),
                "known_end": self.state_log.known_end, **self.state_log.counters}

    async def snapshot(self) -> dict:
        return self._ensure().snapshot()


GroupCoordinatorActorRemote = ray.remote(GroupCoordinatorActor)


# ---- the controller's side --------------------------------------------------------------------------------
GROUP_COORDINATORS = CoordinatorKind(
    OFFSETS_TOPIC, "group coordinator", coordinator_actor_name, GroupCoordinatorActorRemote,
    lambda service, p, broker_id, num_partitions: (p, broker_id, num_partitions, service.config.as_dict(),
                                                   service.namespace),
    lambda service: service.coordinator_handles)


async def sync_group_coordinators(service: Any, partitions: Iterable[tuple[str, int]]) -> None:
    """After a LeaderAndIsr round: elect / resign the __consumer_offsets coordinators."""
    await sync_coordinators(GROUP_COORDINATORS, service, partitions)


def forget_broker(service: Any, broker_id: int) -> None:
    """A broker died: its coordinators died with its node."""
    forget_coordinators(GROUP_COORDINATORS, service, broker_id)
