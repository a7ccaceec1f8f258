"""The edge's side of transactions: producer ids for idempotent producers, and
finding / calling the transaction coordinator of a transactional id.

* ``generate_producer_id``: InitProducerId without a transactional id needs no
  coordinator (Kafka's broker answers from its own ProducerIdManager). Each
  edge process keeps one ``ProducerIdManager`` and takes blocks of 1000 ids
  from ZooKeeper's ``/latest_producer_id_block`` through its own ZooKeeper
  client, opened on first use, off the event loop.
* The coordinator of a transactional id is the leader of
  ``__transaction_state`` partition ``abs(hash(id)) % partitions``; its actor
  (actors/transaction_coordinator.py) lives on that leader's node. Requests
  for an id whose partition this broker does not lead get NOT_COORDINATOR,
  as Kafka answers, and the client asks FindCoordinator again.
* The first FindCoordinator(TRANSACTION) creates ``__transaction_state``
  through the controller, as the first group lookup creates
  ``__consumer_offsets``.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from kio.schema.errors import ErrorCode

log = logging.getLogger("raykafka.edge.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"


class TransactionRouting:
    def __init__(self, edge: Any):
        self.edge = edge
        self._producer_ids = None
        self._zk = None
        self._handles: dict[int, Any] = {}
        self._topic_creation: Optional[asyncio.Future] = None

    # ---- producer ids ------------------------------------------------------------------------------
    def _zk_client(self):
        """The ZooKeeper client for producer id blocks (blocking: runs in the executor)."""
        if self._zk is None:
            from metadata.kafka_zk import KafkaZkClient

            connect = getattr(self.edge, "zk_connect", None) or self.edge.config["zookeeper.connect"]
            if not connect:
                raise RuntimeError("no ZooKeeper address known to this edge")
            zk = KafkaZkClient(connect, session_timeout_ms=self.edge.config["zookeeper.session.timeout.ms"])
            zk.start(ensure_paths=False)
            self._zk = zk
        return self._zk

    async def generate_producer_id(self) -> int:
        if self._producer_ids is None:
            from cluster.transactions.producer_ids import ProducerIdManager

            self._producer_ids = ProducerIdManager(self._zk_client, self.edge.broker_id)
        return await asyncio.wait_for(self._producer_ids.generate_producer_id(), self.edge.call_timeout_s)

    def close(self) -> None:
        if self._zk is not None:
            zk, self._zk = self._zk, None
            try:
                zk.close()
            except Exception:  # noqa: BLE001 - closing at shutdown
                pass

    # ---- coordinators --------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> Optional[int]:
        from cluster.transactions.state_manager import partition_for_transactional_id

        info = self.edge.metadata.topics.get(TRANSACTION_STATE_TOPIC)
        if not info or not info.partitions:
            return None
        return partition_for_transactional_id(transactional_id, len(info.partitions))

    async def ensure_topic(self) -> Optional[ErrorCode]:
        """Ask the controller to create __transaction_state (once; concurrent callers
        share the request). None once it exists."""
        if TRANSACTION_STATE_TOPIC in self.edge.metadata.topics:
            return None
        if self._topic_creation is None or self._topic_creation.done():
            self._topic_creation = asyncio.ensure_future(self._create_topic())
        return await asyncio.shield(self._topic_creation)

    async def _create_topic(self) -> Optional[ErrorCode]:
        from net.edge_service import ActorCallFailed

        try:
            code, message = await self.edge.controller_call("ensure_transaction_state_topic",
                                                            timeout_s=2 * self.edge.call_timeout_s)
        except ActorCallFailed as exc:
            log.warning("creating %s failed: %s", TRANSACTION_STATE_TOPIC, exc)
            return ErrorCode.coordinator_not_available
        except AttributeError:
            log.warning("the controller cannot create %s", TRANSACTION_STATE_TOPIC)
            return ErrorCode.coordinator_not_available
        if code not in (0, int(ErrorCode.topic_already_exists)):
            log.warning("creating %s failed: %s (%s)", TRANSACTION_STATE_TOPIC, ErrorCode(code).name, message)
            return ErrorCode.coordinator_not_available
        return None

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

    async def _handle(self, partition: int):
        info = self.edge.metadata.partition(TRANSACTION_STATE_TOPIC, partition)
        if info is None or info.leader != self.edge.broker_id:
            return None
        handle = self._handles.get(partition)
        if handle is None:
            from actors.transaction_coordinator import coordinator_actor_name

            name = coordinator_actor_name(partition, self.edge.broker_id)
            namespace = self.edge.config["raykafka.namespace"]

            def lookup():
                import ray

                try:
                    return ray.get_actor(name, namespace=namespace)
                except ValueError:
                    return None

            try:
                handle = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, lookup),
                                                self.edge.call_timeout_s)
            except asyncio.TimeoutError:
                handle = None
            if handle is None:
                return None
            self._handles[partition] = handle
        return handle

    async def local_coordinators(self) -> list:
        """(partition, handle) of every transaction coordinator on this broker."""
        info = self.edge.metadata.topics.get(TRANSACTION_STATE_TOPIC)
        partitions = sorted(p for p, s in info.partitions.items() if s.leader == self.edge.broker_id) if info else []
        handles = await asyncio.gather(*(self._handle(p) for p in partitions))
        return [(p, h) for p, h in zip(partitions, handles) if h is not None]

    async def call(self, transactional_id: str, method: str, *args, timeout_s: Optional[float] = None):
        """Call the coordinator of ``transactional_id`` on this node -> (error or None, answer)."""
        partition = self.partition_for(transactional_id)
        handle = None if partition is None else await self._handle(partition)
        if handle is None:
            return ErrorCode.not_coordinator, None
        try:
            return None, await asyncio.wait_for(getattr(handle, method).remote(*args),
                                                timeout_s or self.edge.call_timeout_s)
        except asyncio.TimeoutError:
            return ErrorCode.request_timed_out, None
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__.startswith("RayTaskError"):
                log.error("transaction coordinator %s failed: %s", method, str(exc).splitlines()[-1][:300])
                return ErrorCode.unknown_server_error, None
            if not type(exc).__module__.startswith("ray"):
                raise
            self._handles.pop(partition, None)  # gone (node died, or it moved): rediscover
            return ErrorCode.not_coordinator, None
