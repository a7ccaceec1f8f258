"""Transaction coordinator actor: one per ``__transaction_state`` partition,
living with that partition's leader replica (named
``txn-coordinator-<p>@<broker>``, placed on the leader's node, num_cpus=0).

A thin asyncio shell over ``cluster.transactions`` (the rules) and
``cluster.internal_topic_log.InternalTopicLog`` (the partition as its store):

* Ownership follows leadership, exactly as for the group coordinators: the
  controller calls ``elect(leader_epoch, replica)`` on the coordinator of the
  broker it just made leader of the partition (creating the actor if needed)
  and ``resign(epoch)`` on the other replicas' coordinators. On ``elect`` the
  coordinator answers COORDINATOR_LOAD_IN_PROGRESS while it reads the
  partition's log from the leader replica and replays it; the coordinator
  epoch is the partition's leader epoch. Transactions found in
  PrepareCommit/PrepareAbort get their markers sent again.
* Appends (state changes, tombstones) go to the leader replica with acks=-1,
  in call order, each complete once the high watermark has passed it
  (InternalTopicLog).
* Markers: to the leader replica of each partition, its method
  ``write_txn_markers(markers, timeout_ms)``; the leader is read from the
  partition's state znode (what the controller wrote), cached, and read again
  after an error. After a marker is written to an ``__consumer_offsets``
  partition its group coordinator is told (``complete_transaction``), so the
  transaction's pending offset commits are committed or dropped.
* Producer ids: a block of 1000 from ZooKeeper's ``/latest_producer_id_block``,
  through this actor's own ZooKeeper client, off the event loop.
* Time: timed-out transactions are aborted every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``; expired
  transactional ids removed every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``.

Every await on another actor is bounded. A coordinator whose process dies is
restarted by Ray (unlimited restarts) and reclaims its partition on first use,
as the group coordinator does.

``sync_transaction_coordinators`` and ``transaction_state_topic_spec`` are the
controller's side (actors/controller.py, actors/controller_channel.py call them).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable, Optional

import ray

from actors.internal_topic_calls import (CoordinatorKind, RayNodeCalls, forget_coordinators, restarted_by_ray,
                                         sync_coordinators)
# transaction_state_topic_spec: actors/controller.py's import.
from cluster.controller.internal_topics import transaction_state_topic_spec  # noqa: F401
from cluster.controller.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC  # noqa: F401
from cluster.internal_topic_log import InternalTopicLog, first_line
from cluster.transactions.coordinator import EndTxnResult, InitProducerIdResult, TransactionCoordinator
from cluster.transactions.marker_writer import TxnMarkerWriter, WrittenMarkers
from cluster.transactions.markers import TransactionMarkerChannelManager
from cluster.transactions.state_manager import TransactionConfig, TransactionStateManager
from core.config import BrokerConfig
from core.error_codes import ErrorCode
from core.local_calls import LocalCallServer
from actors.replica_lookup import find_replica
from core.naming import group_coordinator_actor_name, transaction_coordinator_actor_name
from core.txn_messages import (AddPartitionsToTxn, DescribeTransactions, EndTxn, InitProducerId, ListTransactions,
                               TxnCompletion, TxnMarker, TxnMarkerResult, VerifyTxnPartitions)

log = logging.getLogger("raykafka.transaction_coordinator")

MARKER_TIMEOUT_MS = 30000
# What the edge of this node calls over the direct channel (core/local_calls.py):
# each transaction's AddPartitionsToTxn and EndTxn, and AddOffsetsToTxn, sit on
# a commit's critical path; a Ray call costs ~1.3 ms of CPU a side here and
# 4-6 ms at p99.
LOCAL_CALL_METHODS = ("init_producer_id", "add_partitions", "verify_partitions", "end_txn")


coordinator_actor_name = transaction_coordinator_actor_name  # the name the edge looks up (core.naming)


class TransactionCoordinatorActor:
    def __init__(self, partition: int, broker_id: int, num_partitions: int, config: dict,
                 namespace: str = "raykafka", zk_connect: Optional[str] = None):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.partition = partition
        self.broker_id = broker_id
        self.namespace = namespace
        self.zk_connect = zk_connect
        broker_config = BrokerConfig(config)
        self.config = TransactionConfig.from_broker_config(broker_config, num_partitions)
        self.call_timeout_s = broker_config.get("raykafka.actor.call.timeout.ms", 30000) / 1000
        self.session_timeout_ms = int(broker_config.get("zookeeper.session.timeout.ms", 18000))
        self.node_calls = RayNodeCalls(TRANSACTION_STATE_TOPIC, partition, broker_id, namespace, self.call_timeout_s,
                                       bool(broker_config.get("raykafka.local.calls", True)))
        self.state_log = InternalTopicLog(
            TRANSACTION_STATE_TOPIC, partition, self.node_calls, owner="transaction coordinator",
            load_buffer_bytes=int(broker_config.get("transaction.state.log.load.buffer.size", 5 * 1024 * 1024)),
            append_timeout_ms=int(broker_config.get("offsets.commit.timeout.ms", 5000)), restarted=restarted_by_ray())
        self.coordinator: Optional[TransactionCoordinator] = None
        self._timers: list[asyncio.Task] = []
        self._zk = None
        self._producer_ids = None
        self._leaders: dict[tuple[str, int], int] = {}  # partition -> leader broker id, as last read
        self._replicas: dict[tuple[str, int, int], Any] = {}
        self._missing: set[tuple[str, int]] = set()  # partitions ZooKeeper no longer has
        self._group_coordinator_warned = False
        self.counters: dict[str, int] = {"marker_calls": 0, "group_completions": 0}
        self._local_calls: LocalCallServer | None = None  # for the edge, opened on first ask
        # The one marker write path (cluster/transactions/marker_writer.py), over this actor's calls.
        self._marker_writer = TxnMarkerWriter(self._write_markers, self._complete_group_transactions)

    # ---- setup -----------------------------------------------------------------------------------
    def _ensure(self) -> TransactionCoordinator:
        self.state_log.recover_if_restarted(self.elect)
        if self.coordinator is None:
            from cluster.transactions.producer_ids import ProducerIdManager

            state = TransactionStateManager(self.config, self._append)
            markers = TransactionMarkerChannelManager(state, self._marker_writer.write,
                                                      partition_exists=lambda t, p: (t, p) not in self._missing)
            self._producer_ids = ProducerIdManager(lambda: self._zk_client().producer_ids, self.broker_id)
            self.coordinator = TransactionCoordinator(state, markers, self._generate_producer_id)
            loop = asyncio.get_running_loop()
            self._timers = [
                loop.create_task(self._every(self.config.abort_interval_ms / 1000, self._abort_timed_out)),
                loop.create_task(self._every(self.config.remove_expired_interval_ms / 1000, self._remove_expired)),
            ]
        return self.coordinator

    def _zk_client(self):
        """This actor's ZooKeeper client (blocking; called in the executor)."""
        if self._zk is None:
            from metadata.kafka_zk import KafkaZkClient

            if not self.zk_connect:
                raise RuntimeError("no ZooKeeper address given to the transaction coordinator")
            zk = KafkaZkClient(self.zk_connect, session_timeout_ms=self.session_timeout_ms)
            zk.start(ensure_paths=False)
            self._zk = zk
        return self._zk

    async def _generate_producer_id(self) -> int:
        return await asyncio.wait_for(self._producer_ids.generate_producer_id(), self.call_timeout_s)

    async def _every(self, period_s: float, job) -> None:
        while True:
            await asyncio.sleep(period_s)
            if not self.state_log.leading or self.coordinator is None:
                continue
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next period tries again
                log.exception("transaction coordinator %d: periodic %s failed", self.partition, job.__name__)

    async def _abort_timed_out(self) -> None:
        await self.coordinator.abort_timed_out_transactions()

    async def _remove_expired(self) -> None:
        await self.coordinator.state.remove_expired_transactional_ids()

    # ---- ownership: controller -> coordinator ------------------------------------------------------
    async def elect(self, leader_epoch: int, replica: Any) -> ErrorCode:
        coordinator = self._ensure()
        if leader_epoch < self.state_log.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if self.state_log.leading and leader_epoch == self.state_log.leader_epoch:
            return ErrorCode.none  # a repeated LeaderAndIsr
        if self.state_log.leading and self._loaded() and await self.state_log.still_own_log(replica):
            # Same leader, new epoch (the controller took a dead follower out of the
            # ISR): the log is ours as we know it. The coordinator epoch stays (Kafka's
            # leader epoch does not move on ISR changes); appends use the new epoch.
            self.state_log.keep_leading(leader_epoch, replica)
            return ErrorCode.none
        self.state_log.lead(leader_epoch, replica)
        # The coordinator epoch is the leader epoch: a new epoch reloads (a
        # leader's own ISR change costs one replay of a small compacted topic).
        coordinator.markers.remove_markers_for_partition(self.partition)
        coordinator.state.begin_loading(self.partition, leader_epoch)

        def replay(batches: list, end: int) -> str:
            records = [record for batch in batches if batch.control is None for record in batch.records]
            resent = coordinator.on_election(self.partition, leader_epoch, records)
            return (f"{len(records)} records, {len(coordinator.state.all_metadata())} transactional ids, "
                    f"{resent} transactions to complete")

        self.state_log.start_load(replay, lambda: coordinator.state.begin_loading(self.partition, leader_epoch))
        return ErrorCode.none

    def _loaded(self) -> bool:
        state = self.coordinator.state
        return state.coordinator_epoch(self.partition) is not None and not state.is_loading(self.partition)

    async def resign(self, leader_epoch: int) -> ErrorCode:
        coordinator = self._ensure()
        if 0 <= leader_epoch < self.state_log.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        was_leading = self.state_log.leading
        self.state_log.resign(leader_epoch, unload=lambda: coordinator.on_resignation(self.partition))
        if was_leading:
            log.info("transaction coordinator for %s-%d unloaded (leader epoch %d)", TRANSACTION_STATE_TOPIC,
                     self.partition, leader_epoch)
        return ErrorCode.none

    # ---- appends: coordinator -> leader replica (acks=-1, in call order) ---------------------------
    async def _append(self, partition: int, records: list) -> ErrorCode:
        from storage.records import SimpleRecord, build_batch

        if partition != self.partition:
            return ErrorCode.not_leader_or_follower
        appended = asyncio.get_running_loop().create_future()

        def done(error: ErrorCode) -> None:
            if not appended.done():
                appended.set_result(error)

        self.state_log.append(build_batch([SimpleRecord(key, value) for key, value in records]), done)
        return await appended

    # ---- markers: coordinator -> partition leaders -------------------------------------------------
    async def _leader_of(self, topic: str, partition: int, refresh: bool) -> Optional[int]:
        key = (topic, partition)
        if not refresh and key in self._leaders:
            return self._leaders[key]

        def read():
            found = self._zk_client().partitions.state(topic, partition)
            return None if found is None else found[0].leader

        leader = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, read), self.call_timeout_s)
        if leader is None:
            self._missing.add(key)
            self._leaders.pop(key, None)
        else:
            self._missing.discard(key)
            self._leaders[key] = leader
        return leader

    async def _replica_handle(self, topic: str, partition: int, broker_id: int):
        key = (topic, partition, broker_id)
        handle = self._replicas.get(key)
        if handle is None:
            # By name, or through the edge of its broker (a pooled replica: woken for its markers).
            handle = self._replicas[key] = await find_replica(topic, partition, broker_id, self.node_calls.namespace,
                                                              True, self.call_timeout_s)
        return handle

    async def _write_markers(self, topic: str, partition: int, markers: list[TxnMarker]) -> WrittenMarkers:
        """One partition's markers, to its leader; errors as TxnMarkerResults (the
        channel manager retries). A failed call forgets the leader, so the
        retry reads it again."""
        key = (topic, partition)
        fresh = key not in self._leaders
        leader = -1
        try:
            leader = await self._leader_of(topic, partition, refresh=False)
            if leader is None:
                return WrittenMarkers([TxnMarkerResult(ErrorCode.unknown_topic_or_partition, -1)] * len(markers), -1)
            if leader < 0:
                self._leaders.pop(key, None)
                return WrittenMarkers([TxnMarkerResult(ErrorCode.not_leader_or_follower, -1)] * len(markers), leader)
            handle = await self._replica_handle(topic, partition, leader)
            self.counters["marker_calls"] += 1
            # Over the replica's direct channel when it is on this node (a Ray
            # call costs ~1.5 ms of CPU each side here): markers are on every
            # transaction's critical path until its next AddPartitionsToTxn.
            results = await self.node_calls.channels().call(handle, "write_txn_markers", (list(markers), MARKER_TIMEOUT_MS),
                                                  MARKER_TIMEOUT_MS / 1000 + self.call_timeout_s)
            results = [TxnMarkerResult(*r) for r in results]
        except Exception as exc:  # noqa: BLE001 - the leader moved or died, a timeout: look it up again
            log.info("markers to %s-%d%s failed: %s", topic, partition, "" if fresh else " (cached leader)",
                     first_line(exc))
            self._leaders.pop(key, None)
            self._replicas = {k: v for k, v in self._replicas.items() if k[:2] != key}
            return WrittenMarkers([TxnMarkerResult(ErrorCode.not_leader_or_follower, -1)] * len(markers), leader)
        if any(r.error != ErrorCode.none for r in results):
            self._leaders.pop(key, None)
            self._replicas = {k: v for k, v in self._replicas.items() if k[:2] != key}
        return WrittenMarkers(results, leader)

    async def _complete_group_transactions(self, partition: int, leader: int, done: list[TxnCompletion]) -> None:
        """The group coordinator of an __consumer_offsets partition (on the leader's
        broker) makes the transactions' pending offset commits final."""
        name = group_coordinator_actor_name(partition, leader)
        try:
            handle = await self.node_calls.find_actor(name)
        except Exception as exc:  # noqa: BLE001 - no group coordinator there (no groups loaded yet)
            log.info("no group coordinator %s to complete %d transactions: %s", name, len(done), first_line(exc))
            return
        for completion in done:
            try:
                await asyncio.wait_for(handle.complete_transaction.remote(completion), self.call_timeout_s)
                self.counters["group_completions"] += 1
            except AttributeError:
                if not self._group_coordinator_warned:
                    log.warning("group coordinator %s has no complete_transaction: transactional offset commits "
                                "are not completed", name)
                    self._group_coordinator_warned = True
                return
            except Exception as exc:  # noqa: BLE001
                log.warning("telling %s that producer %d's transaction ended failed: %s", name,
                            completion.producer_id, first_line(exc))

    # ---- direct calls on this node (core/local_calls.py) -----------------------------------------------
    async def local_call_endpoint(self):
        """(node id, socket address, token, name, methods) of the direct-call
        socket for the edge of this node; the methods run as their Ray calls would."""
        self._ensure()  # a restarted coordinator starts reclaiming its partition
        if self._local_calls is None:
            self._local_calls = LocalCallServer.serving(f"txn-coordinator-{self.partition}@{self.broker_id}", self,
                                                        LOCAL_CALL_METHODS)
        return await self._local_calls.endpoint()

    # ---- requests: edge -> coordinator ---------------------------------------------------------------
    async def init_producer_id(self, r: InitProducerId) -> InitProducerIdResult:
        return await self._ensure().handle_init_producer_id(r.transactional_id, r.transaction_timeout_ms,
                                                            None if r.expected is None else tuple(r.expected))

    async def add_partitions(self, r: AddPartitionsToTxn) -> ErrorCode:
        return await self._ensure().handle_add_partitions(r.transactional_id, r.producer_id, r.producer_epoch,
                                                          {tuple(tp) for tp in r.partitions})

    async def verify_partitions(self, r: VerifyTxnPartitions) -> dict[tuple[str, int], ErrorCode]:
        answer = self._ensure().handle_verify_partitions(r.transactional_id, r.producer_id, r.producer_epoch,
                                                         {tuple(tp) for tp in r.partitions})
        return dict(answer)

    async def end_txn(self, r: EndTxn) -> EndTxnResult:
        return await self._ensure().handle_end_transaction(r.transactional_id, r.producer_id, r.producer_epoch,
                                                           r.committed)

    async def describe_transactions(self, r: DescribeTransactions) -> list:
        coordinator = self._ensure()
        return [coordinator.handle_describe_transaction(t) for t in r.transactional_ids]

    async def list_transactions(self, r: ListTransactions = ListTransactions()):
        return self._ensure().handle_list_transactions(set(r.producer_ids), set(r.states), r.duration_ms)

    # ---- inspection --------------------------------------------------------------------------------------
    async def state(self) -> dict:
        coordinator = self._ensure()
        return {"partition": self.partition, "broker_id": self.broker_id, "leader_epoch": self.state_log.leader_epoch,
                "leading": self.state_log.leading, "loading": coordinator.state.is_loading(self.partition),
                "pending_markers": coordinator.markers.pending_transactional_ids(), **self.counters,
                **self.state_log.counters, **coordinator.markers.counters}

    async def transactions(self) -> list[dict]:
        """Every transactional id this coordinator holds (DescribeTransactions' view)."""
        out = []
        for m in self._ensure().state.all_metadata():
            out.append({"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                        "producer_epoch": m.producer_epoch, "state": m.state.kafka_name,
                        "pending_state": m.pending_state.kafka_name if m.pending_state is not None else None,
                        "timeout_ms": m.txn_timeout_ms, "start_timestamp": m.txn_start_timestamp,
                        "last_update_timestamp": m.txn_last_update_timestamp,
                        "partitions": sorted(m.topic_partitions)})
        return out


TransactionCoordinatorActorRemote = ray.remote(TransactionCoordinatorActor)


# ---- the controller's side --------------------------------------------------------------------------------
TRANSACTION_COORDINATORS = CoordinatorKind(
    TRANSACTION_STATE_TOPIC, "transaction coordinator", coordinator_actor_name, TransactionCoordinatorActorRemote,
    lambda service, p, broker_id, num_partitions: (p, broker_id, num_partitions, service.config.as_dict(),
                                                   service.namespace, service.zk_connect),
    lambda service: service.__dict__.setdefault("txn_coordinator_handles", {}))


async def sync_transaction_coordinators(service: Any, partitions: Iterable[tuple[str, int]]) -> None:
    """After a LeaderAndIsr round: elect / resign the __transaction_state coordinators."""
    await sync_coordinators(TRANSACTION_COORDINATORS, service, partitions)


def forget_broker(service: Any, broker_id: int) -> None:
    """A broker died: its coordinators died with its node."""
    forget_coordinators(TRANSACTION_COORDINATORS, service, broker_id)
