"""Transaction coordinator actor: one per ``__transaction_state`` partition,
living with that partition's leader replica (named
``txn-coordinator-<p>@<broker>``, placed on the leader's node, num_cpus=0).

A thin asyncio shell over ``cluster.transactions`` (the rules):

* Ownership follows leadership, exactly as for the group coordinators: the
  controller calls ``elect(leader_epoch, replica)`` on the coordinator of the
  broker it just made leader of the partition (creating the actor if needed)
  and ``resign(epoch)`` on the other replicas' coordinators. On ``elect`` the
  coordinator answers COORDINATOR_LOAD_IN_PROGRESS while it reads the
  partition's log from the leader replica and replays it; the coordinator
  epoch is the partition's leader epoch. Transactions found in
  PrepareCommit/PrepareAbort get their markers sent again.
* Appends (state changes, tombstones) go to the leader replica's ``append``
  with acks=-1, one call at a time so they reach the log in call order, and
  complete once the high watermark has passed them (the node purgatory's
  ``delay_produce``).
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
controller's side (actors/controller.py calls them).
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Iterable, Optional

import ray
from kio.schema.errors import ErrorCode

from cluster.transactions.coordinator import EndTxnResult, InitProducerIdResult, TransactionCoordinator
from cluster.transactions.markers import TransactionMarkerChannelManager
from cluster.transactions.state_manager import (TRANSACTION_STATE_TOPIC, TransactionConfig,
                                                TransactionStateManager)
from core.config import BrokerConfig
from core.local_channels import LocalChannels
from core.naming import purgatory_actor_name, replica_actor_name
from core.txn_messages import ORIGIN_COORDINATOR, TxnCompletion, TxnMarker, TxnMarkerResult

log = logging.getLogger("raykafka.transaction_coordinator")

E = ErrorCode
OFFSETS_TOPIC = "__consumer_offsets"
LOAD_RETRY_S = 0.5
MARKER_TIMEOUT_MS = 30000


def coordinator_actor_name(partition: int, broker_id: int) -> str:
    return f"txn-coordinator-{partition}@{broker_id}"


async def read_partition_records(channels: LocalChannels, replica: Any, leader_epoch: int, buffer_bytes: int,
                                 timeout_s: float, still_wanted) -> tuple[list, int]:
    """Every (key, value) of a partition up to its log end offset as of now, once
    the high watermark has reached it (the same reading as the group
    coordinator's load: file slices from the leader, pread here)."""
    from storage.record_batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, parse_header
    from storage.records import iter_batch_records

    state = await asyncio.wait_for(replica.state.remote(), timeout_s)
    target = state["log_end_offset"]
    while state["high_watermark"] < target:
        if not still_wanted():
            return [], target
        if not state["is_leader"]:
            raise RuntimeError("the replica is not the leader")
        await asyncio.sleep(0.05)
        state = await asyncio.wait_for(replica.state.remote(), timeout_s)
    offset = state["log_start_offset"]
    records: list = []
    while offset < target:
        error, _hw, _lso, log_start, slices = await channels.call(
            replica, "read", (offset, buffer_bytes, 0, leader_epoch), timeout_s)
        if error:
            raise RuntimeError(f"read at offset {offset} failed: {E(error).name}")
        if offset < log_start:
            offset = log_start
            continue
        if not slices:
            break
        data = _read_slices(slices)
        pos, moved = 0, False
        while len(data) - pos >= HEADER_SIZE:
            size = HEADER.unpack_from(data, pos)[1] + LOG_OVERHEAD
            if pos + size > len(data):
                break
            header = parse_header(data, pos)
            if header.next_offset > offset and not header.is_control:
                for record in iter_batch_records(data, pos):
                    if offset <= record.offset < target:
                        records.append((bytes(record.key) if record.key is not None else None,
                                        bytes(record.value) if record.value is not None else None))
            offset = max(offset, header.next_offset)
            moved = True
            pos += size
        if not moved:
            raise RuntimeError(f"no complete batch at offset {offset}")
    return records, target


def _read_slices(slices: list[tuple]) -> bytes:
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
        self.append_timeout_ms = int(broker_config.get("offsets.commit.timeout.ms", 5000))
        self.load_buffer_bytes = int(broker_config.get("transaction.state.log.load.buffer.size", 5 * 1024 * 1024))
        self.session_timeout_ms = int(broker_config.get("zookeeper.session.timeout.ms", 18000))
        self._local_calls_enabled = bool(broker_config.get("raykafka.local.calls", True))
        self.leader_epoch = -1
        self.leading = False
        self.replica: Any = None
        self.coordinator: Optional[TransactionCoordinator] = None
        self._generation = 0
        self._load_task: Optional[asyncio.Task] = None
        self._timers: list[asyncio.Task] = []
        self._append_lock: Optional[asyncio.Lock] = None
        self._purgatory: Any = None
        self._to_node: Optional[LocalChannels] = None
        self._zk = None
        self._producer_ids = None
        self._leaders: dict[tuple[str, int], int] = {}  # partition -> leader broker id, as last read
        self._replicas: dict[tuple[str, int, int], Any] = {}
        self._missing: set[tuple[str, int]] = set()  # partitions ZooKeeper no longer has
        self._group_coordinator_warned = False
        self._known_end = -1  # log end offset as far as our load and appends know it
        self.counters: dict[str, int] = {"appends": 0, "marker_calls": 0, "group_completions": 0}
        self._needs_recovery = _restarted_by_ray()
        self._recovery: Optional[asyncio.Task] = None

    # ---- setup -----------------------------------------------------------------------------------
    def _ensure(self) -> TransactionCoordinator:
        if self._needs_recovery and self._recovery is None:
            self._recovery = asyncio.get_running_loop().create_task(self._recover())
        if self.coordinator is None:
            from cluster.transactions.producer_ids import ProducerIdManager

            state = TransactionStateManager(self.config, self._append)
            markers = TransactionMarkerChannelManager(state, self._write_markers,
                                                      partition_exists=lambda t, p: (t, p) not in self._missing)
            self._producer_ids = ProducerIdManager(self._zk_client, self.broker_id)
            self.coordinator = TransactionCoordinator(state, markers, self._generate_producer_id)
            loop = asyncio.get_running_loop()
            self._timers = [
                loop.create_task(self._every(self.config.abort_interval_ms / 1000, self._abort_timed_out)),
                loop.create_task(self._every(self.config.remove_expired_interval_ms / 1000, self._remove_expired)),
            ]
        return self.coordinator

    def _channels(self) -> LocalChannels:
        if self._to_node is None:
            self._to_node = LocalChannels.here(self._local_calls_enabled, self.call_timeout_s)
        return self._to_node

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
            if not self.leading or self.coordinator is None:
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

    # ---- recovery after a restart ------------------------------------------------------------------
    async def _recover(self) -> None:
        name = replica_actor_name(TRANSACTION_STATE_TOPIC, self.partition, self.broker_id)
        loop = asyncio.get_running_loop()
        try:
            replica = await asyncio.wait_for(
                loop.run_in_executor(None, lambda: ray.get_actor(name, namespace=self.namespace)), self.call_timeout_s)
            state = await asyncio.wait_for(replica.state.remote(), self.call_timeout_s)
        except Exception as exc:  # noqa: BLE001 - no replica here (yet): the next call tries again
            log.warning("restarted transaction coordinator for %s-%d: no leader replica to recover from (%s)",
                        TRANSACTION_STATE_TOPIC, self.partition, _first_line(exc))
            await asyncio.sleep(LOAD_RETRY_S)
            self._recovery = None
            return
        self._needs_recovery = False
        if self.leader_epoch >= 0 or not state["is_leader"]:
            return
        log.info("restarted transaction coordinator for %s-%d reloads at leader epoch %d", TRANSACTION_STATE_TOPIC,
                 self.partition, state["leader_epoch"])
        await self.elect(state["leader_epoch"], replica)

    # ---- ownership: controller -> coordinator ------------------------------------------------------
    async def elect(self, leader_epoch: int, replica: Any) -> int:
        coordinator = self._ensure()
        if leader_epoch < self.leader_epoch:
            return int(E.fenced_leader_epoch)
        if self.leading and leader_epoch == self.leader_epoch:
            return 0  # a repeated LeaderAndIsr
        if self.leading and await self._still_own_log(replica):
            # Same leader, new epoch (the controller took a dead follower out of the
            # ISR): the log is ours as we know it. The coordinator epoch stays (Kafka's
            # leader epoch does not move on ISR changes); appends use the new epoch.
            self.leader_epoch = leader_epoch
            self.replica = replica
            return 0
        self.leader_epoch = leader_epoch
        self.replica = replica
        self.leading = True
        self._generation += 1
        if self._load_task is not None:
            self._load_task.cancel()
        # The coordinator epoch is the leader epoch: a new epoch reloads (a
        # leader's own ISR change costs one replay of a small compacted topic).
        coordinator.markers.remove_markers_for_partition(self.partition)
        coordinator.state.begin_loading(self.partition, leader_epoch)
        self._load_task = asyncio.get_running_loop().create_task(self._load(self._generation, leader_epoch))
        return 0

    async def _still_own_log(self, replica: Any) -> bool:
        """True when the partition is loaded, no append is under way and nobody
        else wrote the partition since (its log end is where our appends left it)."""
        state = self.coordinator.state
        if (state.coordinator_epoch(self.partition) is None or state.is_loading(self.partition)
                or (self._append_lock is not None and self._append_lock.locked())):
            return False
        appends = self.counters["appends"]
        try:
            replica_state = await asyncio.wait_for(replica.state.remote(), self.call_timeout_s)
        except Exception:  # noqa: BLE001
            return False
        return (appends == self.counters["appends"] and not self._append_lock_held()
                and replica_state["is_leader"] and replica_state["log_end_offset"] == self._known_end)

    def _append_lock_held(self) -> bool:
        return self._append_lock is not None and self._append_lock.locked()

    async def resign(self, leader_epoch: int) -> int:
        coordinator = self._ensure()
        if 0 <= leader_epoch < self.leader_epoch:
            return int(E.fenced_leader_epoch)
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        was_leading = self.leading
        self.leading = False
        self.replica = None
        self._generation += 1
        if self._load_task is not None:
            self._load_task.cancel()
            self._load_task = None
        coordinator.on_resignation(self.partition)
        if was_leading:
            log.info("transaction coordinator for %s-%d unloaded (leader epoch %d)", TRANSACTION_STATE_TOPIC,
                     self.partition, leader_epoch)
        return 0

    async def _load(self, generation: int, epoch: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while generation == self._generation:
            try:
                records, end = await read_partition_records(
                    self._channels(), self.replica, epoch, self.load_buffer_bytes, self.call_timeout_s,
                    lambda: generation == self._generation)
                if generation != self._generation:
                    return
                resent = self.coordinator.on_election(self.partition, epoch, records)
                self._known_end = end
                log.info("transaction coordinator for %s-%d loaded %d records up to offset %d in %.0f ms: %d "
                         "transactional ids, %d transactions to complete (leader epoch %d)", TRANSACTION_STATE_TOPIC,
                         self.partition, len(records), end, (loop.time() - started) * 1000,
                         len(self.coordinator.state.all_metadata()), resent, epoch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                if generation != self._generation:
                    return
                log.warning("loading %s-%d failed (%s); retrying", TRANSACTION_STATE_TOPIC, self.partition,
                            _first_line(exc))
                self.coordinator.state.begin_loading(self.partition, epoch)
                await asyncio.sleep(LOAD_RETRY_S)

    # ---- appends: coordinator -> leader replica (acks=-1, in call order) ---------------------------
    async def _append(self, partition: int, records: list) -> ErrorCode:
        from storage.records import SimpleRecord, build_batch

        if partition != self.partition or not self.leading or self.replica is None:
            return E.not_leader_or_follower
        if self._append_lock is None:
            self._append_lock = asyncio.Lock()
        batch = build_batch([SimpleRecord(key, value) for key, value in records])
        async with self._append_lock:
            replica, epoch = self.replica, self.leader_epoch
            if replica is None:
                return E.not_leader_or_follower
            try:
                [result] = await self._channels().call(
                    replica, "append", ([(batch, -1, self.append_timeout_ms)], epoch, False, ORIGIN_COORDINATOR),
                    self.append_timeout_ms / 1000 + self.call_timeout_s)
            except asyncio.TimeoutError:
                return E.request_timed_out
            except Exception as exc:  # noqa: BLE001 - the replica actor is gone, or moving
                log.warning("append to %s-%d failed: %s", TRANSACTION_STATE_TOPIC, self.partition, _first_line(exc))
                return E.not_leader_or_follower
        self.counters["appends"] += 1
        error = E(result[0])
        if error in (E.fenced_leader_epoch, E.unknown_leader_epoch):
            return E.not_leader_or_follower
        if error != E.none:
            return error
        last_offset, high_watermark = result[5], result[6]
        self._known_end = max(self._known_end, last_offset + 1)
        if high_watermark >= last_offset + 1:
            return E.none
        return await self._wait_for_high_watermark(last_offset + 1)

    async def _wait_for_high_watermark(self, offset: int) -> ErrorCode:
        key = (TRANSACTION_STATE_TOPIC, self.partition)
        try:
            if self._purgatory is None:
                self._purgatory = ray.get_actor(purgatory_actor_name(self.broker_id), namespace=self.namespace)
            statuses = await self._channels().call(
                self._purgatory, "delay_produce", ([(TRANSACTION_STATE_TOPIC, self.partition, offset)],
                                                   self.append_timeout_ms),
                self.append_timeout_ms / 1000 + self.call_timeout_s)
        except asyncio.TimeoutError:
            return E.request_timed_out
        except Exception as exc:  # noqa: BLE001
            log.warning("waiting for the HW of %s-%d failed: %s", TRANSACTION_STATE_TOPIC, self.partition,
                        _first_line(exc))
            self._purgatory = None
            return E.request_timed_out
        return E(statuses.get(key, int(E.request_timed_out)))

    # ---- markers: coordinator -> partition leaders -------------------------------------------------
    async def _leader_of(self, topic: str, partition: int, refresh: bool) -> Optional[int]:
        key = (topic, partition)
        if not refresh and key in self._leaders:
            return self._leaders[key]

        def read():
            found = self._zk_client().get_partition_state(topic, partition)
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
            name = replica_actor_name(topic, partition, broker_id)
            handle = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
                None, lambda: ray.get_actor(name, namespace=self.namespace)), self.call_timeout_s)
            self._replicas[key] = handle
        return handle

    async def _write_markers(self, topic: str, partition: int, markers: list[TxnMarker]) -> list[TxnMarkerResult]:
        """One partition's markers, to its leader; errors as TxnMarkerResults (the
        channel manager retries). A failed call forgets the leader, so the
        retry reads it again."""
        key = (topic, partition)
        fresh = key not in self._leaders
        try:
            leader = await self._leader_of(topic, partition, refresh=False)
            if leader is None:
                return [TxnMarkerResult(int(E.unknown_topic_or_partition), -1)] * len(markers)
            if leader < 0:
                self._leaders.pop(key, None)
                return [TxnMarkerResult(int(E.not_leader_or_follower), -1)] * len(markers)
            handle = await self._replica_handle(topic, partition, leader)
            self.counters["marker_calls"] += 1
            # Over the replica's direct channel when it is on this node (a Ray
            # call costs ~1.5 ms of CPU each side here): markers are on every
            # transaction's critical path until its next AddPartitionsToTxn.
            results = await self._channels().call(handle, "write_txn_markers", (list(markers), MARKER_TIMEOUT_MS),
                                                  MARKER_TIMEOUT_MS / 1000 + self.call_timeout_s)
            results = [TxnMarkerResult(*r) for r in results]
        except Exception as exc:  # noqa: BLE001 - the leader moved or died, a timeout: look it up again
            log.info("markers to %s-%d%s failed: %s", topic, partition, "" if fresh else " (cached leader)",
                     _first_line(exc))
            self._leaders.pop(key, None)
            self._replicas = {k: v for k, v in self._replicas.items() if k[:2] != key}
            return [TxnMarkerResult(int(E.not_leader_or_follower), -1)] * len(markers)
        if any(r.error != 0 for r in results):
            self._leaders.pop(key, None)
            self._replicas = {k: v for k, v in self._replicas.items() if k[:2] != key}
        if topic == OFFSETS_TOPIC:
            await self._complete_group_transactions(partition, leader, markers, results)
        return results

    async def _complete_group_transactions(self, partition: int, leader: int, markers: list[TxnMarker],
                                           results: list[TxnMarkerResult]) -> None:
        """The group coordinator of an __consumer_offsets partition makes the
        transactions' pending offset commits final once their markers are written."""
        from actors.group_coordinator import coordinator_actor_name as group_coordinator_name

        done = [m for m, r in zip(markers, results) if r.error == 0]
        if not done:
            return
        name = group_coordinator_name(partition, leader)
        try:
            handle = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
                None, lambda: ray.get_actor(name, namespace=self.namespace)), self.call_timeout_s)
        except Exception as exc:  # noqa: BLE001 - no group coordinator there (no groups loaded yet)
            log.info("no group coordinator %s to complete %d transactions: %s", name, len(done), _first_line(exc))
            return
        for marker in done:
            completion = TxnCompletion(marker.producer_id, marker.producer_epoch, marker.committed)
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
                log.warning("telling %s that producer %d's transaction ended failed: %s", name, marker.producer_id,
                            _first_line(exc))

    # ---- requests: edge -> coordinator ---------------------------------------------------------------
    async def init_producer_id(self, transactional_id: Optional[str], transaction_timeout_ms: int,
                               expected: Optional[tuple[int, int]] = None) -> InitProducerIdResult:
        return await self._ensure().handle_init_producer_id(transactional_id, transaction_timeout_ms,
                                                            None if expected is None else tuple(expected))

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> int:
        return int(await self._ensure().handle_add_partitions(transactional_id, producer_id, producer_epoch,
                                                              {tuple(tp) for tp in partitions}))

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: list[tuple[str, int]]) -> dict:
        answer = self._ensure().handle_verify_partitions(transactional_id, producer_id, producer_epoch,
                                                         {tuple(tp) for tp in partitions})
        return {tp: int(error) for tp, error in answer.items()}

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      committed: bool) -> EndTxnResult:
        return await self._ensure().handle_end_transaction(transactional_id, producer_id, producer_epoch, committed)

    async def describe_transactions(self, transactional_ids: list[str]) -> list:
        coordinator = self._ensure()
        return [coordinator.handle_describe_transaction(t) for t in transactional_ids]

    async def list_transactions(self, producer_ids: list[int], states: list[str], duration_ms: int = -1):
        return self._ensure().handle_list_transactions(set(producer_ids), set(states), duration_ms)

    # ---- inspection --------------------------------------------------------------------------------------
    async def state(self) -> dict:
        coordinator = self._ensure()
        return {"partition": self.partition, "broker_id": self.broker_id, "leader_epoch": self.leader_epoch,
                "leading": self.leading, "loading": coordinator.state.is_loading(self.partition),
                "pending_markers": coordinator.markers.pending_transactional_ids(), **self.counters,
                **coordinator.markers.counters}

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


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _restarted_by_ray() -> bool:
    if not ray.is_initialized():
        return False
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001
        return False


TransactionCoordinatorActorRemote = ray.remote(TransactionCoordinatorActor)


# ---- the controller's side --------------------------------------------------------------------------------
def transaction_state_topic_spec(config: BrokerConfig, live_brokers: int) -> dict:
    """CreateTopics entry for __transaction_state (Kafka's transactionTopicConfigs:
    compacted, uncompressed, min.insync.replicas, segment.bytes, no unclean
    election). The replication factor is capped at the live brokers, as for
    __consumer_offsets, and min.insync.replicas at the replication factor."""
    wanted = config["transaction.state.log.replication.factor"]
    replication = max(1, min(wanted, live_brokers))
    if replication < wanted:
        log.warning("creating %s with replication factor %d: transaction.state.log.replication.factor=%d but only "
                    "%d live brokers", TRANSACTION_STATE_TOPIC, replication, wanted, live_brokers)
    min_isr = min(config["transaction.state.log.min.isr"], replication)
    return {"name": TRANSACTION_STATE_TOPIC, "num_partitions": config["transaction.state.log.num.partitions"],
            "replication_factor": replication, "assignments": {},
            "configs": {"cleanup.policy": "compact", "compression.type": "uncompressed",
                        "min.insync.replicas": str(min_isr),
                        "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
                        "unclean.leader.election.enable": "false"}}


async def sync_transaction_coordinators(service: Any, partitions: Iterable[tuple[str, int]]) -> None:
    """After a LeaderAndIsr round: the coordinator of each __transaction_state
    partition's leader is created if needed and elected at the partition's
    leader epoch; the other live replicas' coordinators (if any) resign.
    ``service`` is the ControllerService (its ctx, handles, config)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ctx = service.ctx
    topic = ctx.topics.get(TRANSACTION_STATE_TOPIC)
    if topic is None or TRANSACTION_STATE_TOPIC in ctx.topics_being_deleted:
        return
    mine = sorted({p for t, p in partitions if t == TRANSACTION_STATE_TOPIC and (t, p) in ctx.states})
    if not mine:
        return
    handles = service.__dict__.setdefault("txn_coordinator_handles", {})
    calls = []
    for p in mine:
        state = ctx.states[(TRANSACTION_STATE_TOPIC, p)]
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
                    handle = TransactionCoordinatorActorRemote.options(
                        name=name, namespace=service.namespace, lifetime="detached", get_if_exists=True,
                        num_cpus=0, max_concurrency=10_000, scheduling_strategy=strategy, max_restarts=-1,
                    ).remote(p, broker_id, len(topic.assignment), service.config.as_dict(), service.namespace,
                             service.zk_connect)
                    handles[key] = handle
                ref = handle.elect.remote(state.leader_epoch,
                                          service._replica(TRANSACTION_STATE_TOPIC, p, broker_id))
            else:
                if handle is None:
                    try:
                        handle = handles[key] = ray.get_actor(name, namespace=service.namespace)
                    except ValueError:
                        continue
                ref = handle.resign.remote(state.leader_epoch)
            calls.append((key, ref))
    results = await asyncio.gather(*(asyncio.wait_for(ref, service.call_timeout_s) for _, ref in calls),
                                   return_exceptions=True)
    for (key, _), result in zip(calls, results):
        if isinstance(result, Exception):
            log.error("transaction coordinator %s: elect/resign failed: %s", coordinator_actor_name(*key),
                      _first_line(result))
            handles.pop(key, None)
        elif result:
            log.warning("transaction coordinator %s answered %s", coordinator_actor_name(*key), E(result).name)


def forget_broker(service: Any, broker_id: int) -> None:
    """A broker died: its coordinators died with its node."""
    handles = service.__dict__.get("txn_coordinator_handles", {})
    for key in [k for k in handles if k[1] == broker_id]:
        del handles[key]
