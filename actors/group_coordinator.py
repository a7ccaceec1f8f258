"""Group coordinator actor: one per ``__consumer_offsets`` partition, living
with that partition's leader replica (named ``group-coordinator-<p>@<broker>``,
placed on the leader's node, num_cpus=0).

A thin asyncio shell over ``cluster.groups.GroupCoordinator`` (the rules):

* Ownership follows leadership. The controller calls ``elect(leader_epoch,
  replica)`` on the coordinator of the broker it just made leader of the
  offsets partition (creating the actor if needed) and ``resign(epoch)`` on the
  other replicas' coordinators (Kafka's onElection / onResignation). On
  ``elect`` the coordinator answers COORDINATOR_LOAD_IN_PROGRESS while it reads
  the partition's log from the leader replica (file slices of its segments,
  pread here, decoded with ``storage.records``) and replays it; on ``resign``
  it unloads, and every request gets NOT_COORDINATOR until the next ``elect``.
* Appends (group metadata, offset commits, tombstones) go to the leader
  replica's ``append`` with acks=-1, one call in flight at a time so they reach
  the log in call order; each is complete once the partition's high watermark
  has passed it (the node purgatory's ``delay_produce``, as Produce does), and
  completions are delivered in append order.
* Time: the coordinator's delayed operations (sessions, rebalance timeouts,
  the initial rebalance delay, offset expiration) run on a ``SystemTimer``
  driven by ``delayed.AsyncTimerDriver`` on the actor's event loop, the only
  thread that touches the coordinator.
* Requests: the edge (``net/apis/n08..n16, n28, n42, n47``) calls the methods
  below with plain values; they answer with the ``cluster.groups.api`` values.
* Transactions: TxnOffsetCommit's records go to the log as a transactional
  batch of the producer and stay pending until the transaction coordinator,
  having written the producer's COMMIT/ABORT marker to this partition, calls
  ``complete_transaction`` (a load replays markers the same way). Every
  append carries Kafka's AppendOrigin.COORDINATOR.

Every await on another actor is bounded (``raykafka.actor.call.timeout.ms``,
``offsets.commit.timeout.ms``).

A coordinator whose process dies is restarted by Ray (unlimited restarts, on
its node) with its state gone. Nothing tells it to load again (the controller
sees no leadership change), so on its first call the restarted incarnation
asks the offsets partition's replica on its node whether it leads and, if so,
elects itself at that leader epoch and loads the log as on ``elect``;
meanwhile, and while loading, requests get NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS, both retriable.

``sync_group_coordinators`` and ``ensure_offsets_topic_spec`` are the
controller's side (actors/controller.py calls them).
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
from typing import Any, Callable, Iterable, Optional

import ray
from kio.schema.errors import ErrorCode

from cluster.groups import (AppendCompletion, GroupConfig, GroupCoordinator, LeavingMember, PartitionCommit,
                            TopicPartition, TxnProducer)
from cluster.groups.coordinator import CoordinatorStatus
from core.config import BrokerConfig
from core.local_calls import LocalCallServer
from core.local_channels import LocalChannels
from core.naming import purgatory_actor_name
from core.txn_messages import ORIGIN_COORDINATOR, TxnCompletion

log = logging.getLogger("raykafka.group_coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
E = ErrorCode

# Appends batched into one replica call at most.
MAX_SETS_PER_CALL = 64
# What the edge of this node may call over the direct channel: the per-request calls.
LOCAL_CALL_METHODS = ("join_group", "sync_group", "heartbeat", "leave_group", "commit_offsets", "fetch_offsets",
                      "describe_groups", "list_groups", "delete_groups", "delete_offsets", "txn_commit_offsets",
                      "complete_transaction")
LOAD_RETRY_S = 0.5


def coordinator_actor_name(partition: int, broker_id: int) -> str:
    return f"group-coordinator-{partition}@{broker_id}"


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
        self.call_timeout_s = broker_config.get("raykafka.actor.call.timeout.ms", 30000) / 1000
        self.commit_timeout_ms = int(broker_config.get("offsets.commit.timeout.ms", 5000))
        self.load_buffer_bytes = int(broker_config.get("offsets.load.buffer.size", 5 * 1024 * 1024))
        self.leader_epoch = -1
        self.leading = False
        self.replica: Any = None
        self.coordinator: Optional[GroupCoordinator] = None
        self._driver = None
        self._generation = 0  # bumped by every elect/resign: stale loads and appends notice
        self._load_task: Optional[asyncio.Task] = None
        self._queue: collections.deque = collections.deque()
        self._sending = False
        self._last_step: Optional[asyncio.Future] = None
        self._appends_started = 0
        self._known_end = -1  # log end offset as far as our loads and appends know it
        self._purgatory: Any = None
        self._local_calls_enabled = bool(broker_config.get("raykafka.local.calls", True))
        self._to_node: LocalChannels | None = None  # to this node's replica and purgatory
        self._local_calls: LocalCallServer | None = None  # for the edge, opened on first ask
        self.counters = collections.Counter()
        # Restarted by Ray after its process died: reclaim leadership on first use.
        self._needs_recovery = _restarted_by_ray()
        self._recovery: Optional[asyncio.Task] = None

    # ---- setup (needs the running loop) ------------------------------------------------------
    def _ensure(self) -> GroupCoordinator:
        if self._needs_recovery and self._recovery is None:
            self._recovery = asyncio.get_running_loop().create_task(self._recover())
        if self.coordinator is None:
            from delayed import AsyncTimerDriver, SystemTimer

            timer = SystemTimer(tick_ms=1, wheel_size=20)
            self._driver = AsyncTimerDriver(timer, asyncio.get_running_loop())
            self.coordinator = GroupCoordinator(timer, self._append_records, self.group_config,
                                                partition=self.partition)
        return self.coordinator

    # ---- recovery after a restart --------------------------------------------------------------
    async def _recover(self) -> None:
        """Serve again as the dead incarnation did, if the replica on this node
        still leads the offsets partition (and the controller has not elected
        or resigned this coordinator since the restart)."""
        from core.naming import replica_actor_name

        name = replica_actor_name(OFFSETS_TOPIC, self.partition, self.broker_id)
        loop = asyncio.get_running_loop()
        try:
            replica = await asyncio.wait_for(
                loop.run_in_executor(None, lambda: ray.get_actor(name, namespace=self.namespace)), self.call_timeout_s)
            state = await asyncio.wait_for(replica.state.remote(), self.call_timeout_s)
        except Exception as exc:  # noqa: BLE001 - no replica here (yet): the next call tries again
            log.warning("restarted group coordinator for %s-%d: no leader replica to recover from (%s)",
                        OFFSETS_TOPIC, self.partition, str(exc).splitlines()[0][:200] if str(exc) else repr(exc))
            await asyncio.sleep(LOAD_RETRY_S)
            self._recovery = None
            return
        self._needs_recovery = False
        if self.leader_epoch >= 0 or not state["is_leader"]:
            return  # the controller spoke meanwhile, or another broker leads: nothing to reclaim
        log.info("restarted group coordinator for %s-%d reloads at leader epoch %d", OFFSETS_TOPIC,
                 self.partition, state["leader_epoch"])
        await self.elect(state["leader_epoch"], replica)

    # ---- ownership: controller -> coordinator --------------------------------------------------
    async def elect(self, leader_epoch: int, replica: Any) -> int:
        """This broker leads the offsets partition (at ``leader_epoch``): load and serve."""
        coordinator = self._ensure()
        if leader_epoch < self.leader_epoch:
            return int(E.fenced_leader_epoch)
        if self.leading and coordinator.status is not CoordinatorStatus.NOT_LOADED:
            if leader_epoch == self.leader_epoch:
                return 0  # a repeated LeaderAndIsr (e.g. a new controller): nothing changed
            if await self._still_own_log(replica):
                # Same leader, new epoch (an ISR change): the log is ours as we know it.
                self.leader_epoch = leader_epoch
                self.replica = replica
                return 0
        self.leader_epoch = leader_epoch
        self.replica = replica
        self.leading = True
        self._start_load()
        return 0

    async def _still_own_log(self, replica: Any) -> bool:
        """True when nobody else wrote the partition since we loaded it (its log
        end is where our own appends left it), so the state in memory is current."""
        if self.coordinator.status is not CoordinatorStatus.ACTIVE or self._queue or self._sending:
            return False
        started = self._appends_started
        try:
            state = await asyncio.wait_for(replica.state.remote(), self.call_timeout_s)
        except Exception:
            return False
        return (started == self._appends_started and not self._queue and not self._sending
                and state["is_leader"] and state["log_end_offset"] == self._known_end)

    async def resign(self, leader_epoch: int) -> int:
        """Another broker leads the partition now (or nobody): unload."""
        coordinator = self._ensure()
        if 0 <= leader_epoch < self.leader_epoch:
            return int(E.fenced_leader_epoch)
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        was = coordinator.status
        self.leading = False
        self.replica = None
        self._generation += 1
        if self._load_task is not None:
            self._load_task.cancel()
            self._load_task = None
        if was is not CoordinatorStatus.NOT_LOADED:
            coordinator.unload()
            log.info("group coordinator for %s-%d unloaded (leader epoch %d)", OFFSETS_TOPIC, self.partition,
                     leader_epoch)
        self._fail_queued(E.not_leader_or_follower)
        return 0

    def _start_load(self) -> None:
        self._generation += 1
        if self._load_task is not None:
            self._load_task.cancel()
        self._fail_queued(E.not_leader_or_follower)
        self.coordinator.begin_loading()
        self._load_task = asyncio.get_running_loop().create_task(self._load(self._generation))

    async def _load(self, generation: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while generation == self._generation:
            try:
                batches, end = await self._read_log(generation)
                if generation != self._generation:
                    return
                if self.coordinator.status is not CoordinatorStatus.LOADING:
                    self.coordinator.begin_loading()
                self.coordinator.replay_batches(batches)
                self.coordinator.complete_loading()
                self._known_end = end
                log.info("group coordinator for %s-%d loaded %d batches up to offset %d in %.0f ms: %d groups "
                         "(leader epoch %d)", OFFSETS_TOPIC, self.partition, len(batches), end,
                         (loop.time() - started) * 1000, len(self.coordinator.groups), self.leader_epoch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if generation != self._generation:
                    return
                log.warning("loading %s-%d failed (%s); retrying", OFFSETS_TOPIC, self.partition,
                            str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
                self.coordinator.begin_loading()  # start over from a clean slate
                await asyncio.sleep(LOAD_RETRY_S)

    async def _read_log(self, generation: int) -> tuple[list, int]:
        """Every batch of the partition (``cluster.groups.log_batches``: data
        batches' records with their producer id and transactional flag,
        control batches' marker type) up to its log end offset as of now,
        once the high watermark has reached it (what is below the HW
        survives a leader change; what is above is about to be replicated or
        truncated)."""
        from cluster.groups.log_batches import read_log_batches

        replica, epoch = self.replica, self.leader_epoch
        state = await asyncio.wait_for(replica.state.remote(), self.call_timeout_s)
        target = state["log_end_offset"]
        while state["high_watermark"] < target:
            if generation != self._generation:
                return [], target
            if not state["is_leader"]:
                raise RuntimeError("the replica is not the leader")
            await asyncio.sleep(0.05)
            state = await asyncio.wait_for(replica.state.remote(), self.call_timeout_s)
        offset = state["log_start_offset"]
        batches: list = []
        while offset < target:
            error, hw, _lso, log_start, slices = await self._channels().call(
                replica, "read", (offset, self.load_buffer_bytes, 0, epoch), self.call_timeout_s)
            if error:
                raise RuntimeError(f"read at offset {offset} failed: {E(error).name}")
            if offset < log_start:
                offset = log_start
                continue
            if not slices:
                break  # nothing more below the HW
            read, following = read_log_batches(self._read_slices(slices), offset, target)
            if following <= offset:
                raise RuntimeError(f"no complete batch at offset {offset}")
            batches.extend(read)
            offset = following
        return batches, target

    @staticmethod
    def _read_slices(slices: list[tuple]) -> bytes:
        """pread the (path, position, length[, base offset]) slices the leader
        named. Files are opened per read: a compacted segment is swapped for a
        new file at the same path, so a cached descriptor could read the old
        one. A slice not starting with the batch the leader named was replaced
        under us: FileNotFoundError, and the load starts over."""
        out = []
        for path, position, length, *rest in slices:
            fd = os.open(path, os.O_RDONLY)
            try:
                data = os.pread(fd, length, position)
            finally:
                os.close(fd)
            if len(data) != length or (rest and (len(data) < 8 or int.from_bytes(data[:8], "big") != rest[0])):
                raise FileNotFoundError(path)
            out.append(data)
        return b"".join(out)

    # ---- appends: coordinator -> leader replica (acks=-1, in call order) ---------------------------
    def _append_records(self, records: list, producer: Optional[TxnProducer] = None) -> AppendCompletion:
        """One batch of ``records``; with a ``producer`` (TxnOffsetCommit) a
        transactional batch of its id and epoch, without a sequence (Kafka's
        coordinator batches are checked for the epoch, not for sequences)."""
        from storage.records import SimpleRecord, build_batch

        completion = AppendCompletion()
        if not self.leading or self.replica is None:
            completion.complete(E.not_leader_or_follower)
            return completion
        simple = [SimpleRecord(key, value) for key, value in records]
        if producer is None:
            batch = build_batch(simple)
        else:
            batch = build_batch(simple, producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                base_sequence=-1, is_transactional=True)
        self._queue.append((batch, completion))
        self._appends_started += 1
        if not self._sending:
            self._sending = True
            asyncio.get_running_loop().create_task(self._send())
        return completion

    def _fail_queued(self, error: ErrorCode) -> None:
        queued, self._queue = list(self._queue), collections.deque()
        for _batch, completion in queued:
            completion.complete(error)

    async def _send(self) -> None:
        try:
            while self._queue:
                items = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_SETS_PER_CALL))]
                replica, epoch = self.replica, self.leader_epoch
                timeout_s = self.commit_timeout_ms / 1000 + self.call_timeout_s
                try:
                    if replica is None:
                        raise _NotLeader()
                    # Kafka's AppendOrigin.COORDINATOR: no producer sequence checks.
                    results = await self._channels().call(
                        replica, "append",
                        ([(batch, -1, self.commit_timeout_ms) for batch, _ in items], epoch, False,
                         ORIGIN_COORDINATOR),
                        timeout_s)
                except asyncio.TimeoutError:
                    results = [(int(E.request_timed_out), -1, -1, -1, None, -1, -1)] * len(items)
                except Exception as exc:  # the replica actor is gone, or we are not leading
                    if not isinstance(exc, _NotLeader):
                        log.warning("append to %s-%d failed: %s", OFFSETS_TOPIC, self.partition,
                                    str(exc).splitlines()[0][:300])
                    results = [(int(E.not_leader_or_follower), -1, -1, -1, None, -1, -1)] * len(items)
                self.counters["append_calls"] += 1
                previous = self._last_step
                step = asyncio.get_running_loop().create_task(self._complete(items, results, previous))
                self._last_step = step
        finally:
            self._sending = False

    async def _complete(self, items: list, results: list, previous: Optional[asyncio.Future]) -> None:
        """Wait for the HW to pass this call's records, then complete them,
        after the previous call's (append order). Never raises: every
        completion is completed exactly once."""
        try:
            errors = await self._durability(results)
        except Exception:
            log.exception("append to %s-%d: waiting for durability failed", OFFSETS_TOPIC, self.partition)
            errors = [E.request_timed_out] * len(items)
        if previous is not None:
            try:
                await previous
            except Exception:
                pass
        for (_batch, completion), error in zip(items, errors):
            try:
                completion.complete(error)
            except Exception:
                log.exception("group coordinator append callback failed")

    async def _durability(self, results: list) -> list[ErrorCode]:
        errors = []
        need = -1
        for result in results:
            error = E(result[0])
            if error in (E.fenced_leader_epoch, E.unknown_leader_epoch):
                error = E.not_leader_or_follower  # our view of the epoch is behind: rediscover
            errors.append(error)
            if error == E.none:
                last_offset, high_watermark = result[5], result[6]
                self._known_end = max(self._known_end, last_offset + 1)
                if high_watermark < last_offset + 1:
                    need = max(need, last_offset + 1)
        if need >= 0:
            status = await self._wait_for_high_watermark(need)
            errors = [status if e == E.none else e for e in errors]
        return errors

    async def _wait_for_high_watermark(self, offset: int) -> ErrorCode:
        """DelayedProduce in the node's purgatory until the HW passes ``offset``."""
        key = (OFFSETS_TOPIC, self.partition)
        try:
            if self._purgatory is None:
                self._purgatory = ray.get_actor(purgatory_actor_name(self.broker_id), namespace=self.namespace)
            statuses = await self._channels().call(
                self._purgatory, "delay_produce", ([(OFFSETS_TOPIC, self.partition, offset)], self.commit_timeout_ms),
                self.commit_timeout_ms / 1000 + self.call_timeout_s)
        except asyncio.TimeoutError:
            return E.request_timed_out
        except Exception as exc:
            log.warning("waiting for the HW of %s-%d failed: %s", OFFSETS_TOPIC, self.partition,
                        str(exc).splitlines()[0][:300])
            self._purgatory = None
            return E.request_timed_out
        return E(statuses.get(key, int(E.request_timed_out)))

    # ---- direct calls on this node (core/local_calls.py) -----------------------------------------------
    def _channels(self) -> LocalChannels:
        # Each commit is an append to the offsets partition's leader replica
        # (and, while followers lag, a DelayedProduce in the purgatory): over
        # a channel each costs ~0.15 ms of CPU a side instead of Ray's ~1.3 ms.
        if self._to_node is None:
            self._to_node = LocalChannels.here(self._local_calls_enabled, self.call_timeout_s)
        return self._to_node

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

    async def join_group(self, group_id: str, member_id: str, group_instance_id: Optional[str], client_id: str,
                         client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list, api_version: int, reason: Optional[str] = None):
        future, callback = self._answer()
        self._ensure().join_group(group_id, member_id, group_instance_id, client_id, client_host,
                                  rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, callback,
                                  api_version=api_version, reason=reason)
        return await future

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: Optional[str],
                         protocol_type: Optional[str], protocol_name: Optional[str], assignments: dict):
        future, callback = self._answer()
        self._ensure().sync_group(group_id, generation_id, member_id, group_instance_id, protocol_type,
                                  protocol_name, assignments, callback)
        return await future

    async def heartbeat(self, group_id: str, member_id: str, group_instance_id: Optional[str],
                        generation_id: int) -> ErrorCode:
        return self._ensure().heartbeat(group_id, member_id, group_instance_id, generation_id)

    async def leave_group(self, group_id: str, members: list[tuple[str, Optional[str], Optional[str]]]):
        return self._ensure().leave_group(group_id, [LeavingMember(*m) for m in members])

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: Optional[str],
                             generation_id: int, offsets: dict) -> dict:
        """offsets: {(topic, partition): (offset, leader_epoch, metadata, expire_timestamp_ms | None)}"""
        future, callback = self._answer()
        commits = {TopicPartition(*tp): PartitionCommit(offset=o, leader_epoch=epoch, metadata=metadata,
                                                        expire_timestamp_ms=expire)
                   for tp, (o, epoch, metadata, expire) in offsets.items()}
        self._ensure().commit_offsets(group_id, member_id, group_instance_id, generation_id, commits, callback)
        return await future

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                 group_instance_id: Optional[str], generation_id: int, offsets: dict) -> dict:
        """TxnOffsetCommit. offsets: {(topic, partition): (offset, leader_epoch, metadata)}"""
        future, callback = self._answer()
        commits = {TopicPartition(*tp): PartitionCommit(offset=o, leader_epoch=epoch, metadata=metadata)
                   for tp, (o, epoch, metadata) in offsets.items()}
        self._ensure().txn_commit_offsets(group_id, TxnProducer(producer_id, producer_epoch), member_id,
                                          group_instance_id, generation_id, commits, callback)
        return await future

    async def complete_transaction(self, completion: TxnCompletion) -> int:
        """The transaction coordinator wrote ``completion``'s COMMIT/ABORT
        marker to this offsets partition (Kafka's
        scheduleHandleTxnCompletion): the producer's pending TxnOffsetCommits
        become committed offsets, or are dropped. -> groups it touched."""
        completion = TxnCompletion(*completion)
        return self._ensure().complete_transaction(completion.producer_id, completion.committed)

    async def fetch_offsets(self, group_id: str, partitions: Optional[list], require_stable: bool = False):
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        return self._ensure().fetch_offsets(group_id, tps, require_stable)

    async def describe_groups(self, group_ids: list[str]):
        return self._ensure().describe_groups(group_ids)

    async def list_groups(self, states_filter: Optional[list[str]] = None):
        return self._ensure().list_groups(states_filter)

    async def delete_groups(self, group_ids: list[str]) -> dict:
        return self._ensure().delete_groups(group_ids)

    async def delete_offsets(self, group_id: str, partitions: list):
        return self._ensure().delete_offsets(group_id, [TopicPartition(*tp) for tp in partitions])

    # ---- inspection -------------------------------------------------------------------------------------
    async def state(self) -> dict:
        coordinator = self._ensure()
        return {"partition": self.partition, "broker_id": self.broker_id, "leader_epoch": self.leader_epoch,
                "status": coordinator.status.value, "groups": sorted(coordinator.groups),
                "known_end": self._known_end, **self.counters}

    async def snapshot(self) -> dict:
        return self._ensure().snapshot()


class _NotLeader(Exception):
    pass


def _restarted_by_ray() -> bool:
    """True in an actor process Ray started again after the previous one died."""
    if not ray.is_initialized():
        return False  # driven without Ray (unit tests)
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - not inside an actor
        return False


GroupCoordinatorActorRemote = ray.remote(GroupCoordinatorActor)


# ---- the controller's side --------------------------------------------------------------------------------
def offsets_topic_spec(config: BrokerConfig, live_brokers: int) -> dict:
    """CreateTopics entry for __consumer_offsets (Kafka's configs: compacted,
    offsets.topic.segment.bytes, producer compression). The replication factor
    is capped at the live brokers (see offsets.topic.replication.factor in
    core/config.py)."""
    wanted = config["offsets.topic.replication.factor"]
    replication = max(1, min(wanted, live_brokers))
    if replication < wanted:
        log.warning("creating %s with replication factor %d: offsets.topic.replication.factor=%d but only %d "
                    "live brokers", OFFSETS_TOPIC, replication, wanted, live_brokers)
    return {"name": OFFSETS_TOPIC, "num_partitions": config["offsets.topic.num.partitions"],
            "replication_factor": replication, "assignments": {},
            "configs": {"cleanup.policy": "compact", "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                        "compression.type": "producer"}}


async def sync_group_coordinators(service: Any, partitions: Iterable[tuple[str, int]]) -> None:
    """After a LeaderAndIsr round: the coordinator of each __consumer_offsets
    partition's leader is created if needed and elected at the partition's
    leader epoch; the other live replicas' coordinators (if any) resign.
    ``service`` is the ControllerService (its ctx, handles, config)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ctx = service.ctx
    topic = ctx.topics.get(OFFSETS_TOPIC)
    if topic is None or OFFSETS_TOPIC in ctx.topics_being_deleted:
        return
    mine = sorted({p for t, p in partitions if t == OFFSETS_TOPIC and (t, p) in ctx.states})
    if not mine:
        return
    handles = service.coordinator_handles
    calls = []
    for p in mine:
        state = ctx.states[(OFFSETS_TOPIC, p)]
        for broker_id in topic.assignment[p]:
            if broker_id not in ctx.brokers:
                continue
            key = (p, broker_id)
            name = coordinator_actor_name(p, broker_id)
            handle = handles.get(key)
            if broker_id == state.leader:
                if handle is None:
                    broker = ctx.brokers[broker_id]
                    strategy = NodeAffinitySchedulingStrategy(broker.ray_node_id, soft=False) \
                        if broker.ray_node_id else "DEFAULT"
                    handle = GroupCoordinatorActorRemote.options(
                        name=name, namespace=service.namespace, lifetime="detached", get_if_exists=True,
                        num_cpus=0, max_concurrency=10_000, scheduling_strategy=strategy,
                        # A dead coordinator process comes back (and reloads, _recover).
                        max_restarts=-1,
                    ).remote(p, broker_id, len(topic.assignment), service.config.as_dict(), service.namespace)
                    handles[key] = handle
                ref = handle.elect.remote(state.leader_epoch, service._replica(OFFSETS_TOPIC, p, broker_id))
            else:
                if handle is None:
                    try:
                        handle = handles[key] = ray.get_actor(name, namespace=service.namespace)
                    except ValueError:
                        continue  # never coordinated here: nothing to resign
                ref = handle.resign.remote(state.leader_epoch)
            calls.append((key, ref))
    results = await asyncio.gather(*(asyncio.wait_for(ref, service.call_timeout_s) for _, ref in calls),
                                   return_exceptions=True)
    for (key, _), result in zip(calls, results):
        if isinstance(result, Exception):
            log.error("group coordinator %s: elect/resign failed: %s", coordinator_actor_name(*key),
                      str(result).splitlines()[0][:300] if str(result) else type(result).__name__)
            handles.pop(key, None)
        elif result:
            log.warning("group coordinator %s answered %s", coordinator_actor_name(*key), E(result).name)


def forget_broker(service: Any, broker_id: int) -> None:
    """A broker died: its coordinators died with its node."""
    for key in [k for k in service.coordinator_handles if k[1] == broker_id]:
        del service.coordinator_handles[key]
