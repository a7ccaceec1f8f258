"""The edge's side of transactions: producer ids for idempotent producers, and
finding / calling the transaction coordinator of a transactional id.

* ``generate_producer_id``: InitProducerId without a transactional id needs no
  coordinator (Kafka's broker answers from its own ProducerIdManager). Each
  edge process keeps one ``ProducerIdManager`` and takes blocks of 1000 ids
  from ZooKeeper's ``/latest_producer_id_block`` through the edge process's
  one ZooKeeper client (handed in), off the event loop.
* The coordinator of a transactional id is the leader of
  ``__transaction_state`` partition ``abs(hash(id)) % partitions``; its actor
  (actors/transaction_coordinator.py) lives on that leader's node. Requests
  for an id whose partition this broker does not lead get NOT_COORDINATOR,
  as Kafka answers, and the client asks FindCoordinator again. Failed calls
  are mapped to error codes as group calls are (net/coordinator_router.py).
* The first FindCoordinator(TRANSACTION) creates ``__transaction_state``
  through the controller, as the first group lookup creates
  ``__consumer_offsets``.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Optional

from core.error_codes import ErrorCode
from core.txn_messages import VerifyTxnPartitions

from core.naming import TRANSACTION_STATE_TOPIC, transaction_coordinator_actor_name
from net.coordinator_router import LocalCoordinators, coordinator_answer

log = logging.getLogger("raykafka.edge.transactions")

__all__ = ["TransactionRouting", "TRANSACTION_STATE_TOPIC"]


class TransactionRouting:
    def __init__(self, edge: Any, zk: Any = None):
        """zk: the edge process's KafkaZkClient (metadata/kafka_zk.py), for producer id
        blocks; None: idempotent producers get no id here."""
        self.edge = edge
        self.calls = edge.calls
        self._producer_ids = None
        self._zk = zk
        self._coordinators = LocalCoordinators(edge, TRANSACTION_STATE_TOPIC, transaction_coordinator_actor_name,
                                              "transaction")
        self._handles = self._coordinators.handles
        self._handle = self._coordinators.handle
        self.each = self._coordinators.each
        # (partition, leader broker) -> the coordinator on another node, for KIP-890 verification
        self._remote: dict[tuple[int, int], Any] = {}

    def coordinator_handles(self) -> list:
        """The transaction coordinators of this node the edge knows (their direct channels stay open)."""
        return list(self._handles.values())

    # ---- producer ids ------------------------------------------------------------------------------
    def _zk_client(self):
        """The ZooKeeper client for producer id blocks (called in the executor)."""
        if self._zk is None:
            raise RuntimeError("no ZooKeeper client given to this edge")
        return self._zk

    async def generate_producer_id(self) -> int:
        if self._producer_ids is None:
            from cluster.transactions.producer_ids import ProducerIdManager

            self._producer_ids = ProducerIdManager(lambda: self._zk_client().producer_ids, self.edge.broker_id)
        return await asyncio.wait_for(self._producer_ids.generate_producer_id(), self.edge.call_timeout_s)

    # ---- coordinators --------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> Optional[int]:
        from cluster.transactions.state_manager import partition_for_transactional_id

        info = self.edge.metadata.topics.get(TRANSACTION_STATE_TOPIC)
        if not info or not info.partitions:
            return None
        return partition_for_transactional_id(transactional_id, len(info.partitions))

    def ensure_topic(self) -> Awaitable[Optional[ErrorCode]]:
        """Ask the controller to create __transaction_state (once; concurrent callers
        share the request). None once it exists."""
        return self.edge.coordinators.ensure_topic(TRANSACTION_STATE_TOPIC, "ensure_transaction_state_topic")

    async def find(self, transactional_id: str) -> tuple[ErrorCode, int, str, int]:
        """FindCoordinator(TRANSACTION) -> (error, node id, host, port)."""
        failure = await self.ensure_topic()
        if failure is not None:
            return failure, -1, "", -1
        partition = self.partition_for(transactional_id)
        info = None if partition is None else self.edge.metadata.partition(TRANSACTION_STATE_TOPIC, partition)
        broker = None if info is None else self.edge.metadata.brokers.get(info.leader)
        if broker is None:
            return ErrorCode.coordinator_not_available, -1, "", -1
        return ErrorCode.none, broker.broker_id, broker.host, broker.port

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: list[tuple[str, int]]) -> tuple[Optional[ErrorCode], Any]:
        """KIP-890 verification for a leader: ask the coordinator of
        ``transactional_id``, wherever it runs (the partition's leader need not
        be on its node), whether ``partitions`` are in the ongoing transaction
        of ``producer_id``/``producer_epoch`` -> (error or None, {tp: error code})."""
        request = VerifyTxnPartitions(transactional_id, producer_id, producer_epoch, partitions)
        partition = self.partition_for(transactional_id)
        info = None if partition is None else self.edge.metadata.partition(TRANSACTION_STATE_TOPIC, partition)
        if info is None or info.leader < 0:
            return ErrorCode.coordinator_not_available, None
        if info.leader == self.edge.broker_id:
            return await self.call(transactional_id, "verify_partitions", request)
        key = (partition, info.leader)
        handle = self._remote.get(key)
        if handle is None:
            handle = await self.calls.find(transaction_coordinator_actor_name(partition, info.leader),
                                           self.edge.call_timeout_s)
            if handle is None:
                return ErrorCode.not_coordinator, None
            self._remote = {k: v for k, v in self._remote.items() if k[0] != partition}  # one per partition
            self._remote[key] = handle
        pending = self.calls.call_via_runtime(handle, "verify_partitions", (request,), self.edge.call_timeout_s)
        return await coordinator_answer(self._remote, key, "transaction", "verify_partitions", pending,
                                        ErrorCode.request_timed_out)

    async def call(self, transactional_id: str, method: str, *args, timeout_s: Optional[float] = None):
        """Call the coordinator of ``transactional_id`` on this node -> (error or None, answer)."""
        partition = self.partition_for(transactional_id)
        handle = None if partition is None else await self._handle(partition)
        if handle is None:
            return ErrorCode.not_coordinator, None
        # Over the coordinator's direct channel when it is up (it is on this
        # node: the edge only calls coordinators of partitions it leads), else Ray.
        pending = self.calls.call(handle, method, args, timeout_s or self.edge.call_timeout_s)
        return await coordinator_answer(self._handles, partition, "transaction", method, pending,
                                        ErrorCode.request_timed_out)
