"""The edge without its Ray actor shell (actors/edge.py): one object that
composes the edge's roles and is what handlers see as ``ctx.edge``:

- request dispatch (net/request_dispatch.py, Kafka's KafkaApis role);
- ``leaders`` and the purgatory: the replica router with the produce
  appender (net/replica_router.py);
- ``coordinators`` (net/coordinator_router.py) and ``transactions``
  (net/txn_coordinators.py);
- ``controller``: the active controller's admin operations;
- the segment reader (net/segment_reader.py) on storage/slice_reader.py;
- the metadata cache and the fetch caches it invalidates.

Every role is built here, once, over the ports of net/ports.py that the
actor shell hands in (``calls``: how other actors are reached; actors/edge_ports.py
over Ray): handlers see roles with Kafka's answers, never an actor reference.
The bound shortcuts (``edge.group_call``, ``edge.controller_call``, ...)
cost what a call cost when one class held them all.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from core.error_codes import ErrorCode

from core.config import BrokerConfig
from core.controller_messages import MetadataApplied, MetadataDelta, MetadataSnapshot
from net import registry
from net.actor_calls import ActorCallFailed, settle
from net.client_quotas import EdgeClientQuotas
from net.coordinator_router import CoordinatorRouter
from net.edge_metrics import EdgeMetrics
from net.fetch_local_tail import LocalTail
from net.fetch_read_ahead import FetchReadAhead
from net.fetch_session import FetchSessionCache
from net.metadata_cache import MetadataCache, StaleControllerEpoch
from net.metadata_updates import HeldMetadata, resolve_update
from net.ports import ActorCalls, ActorRef
from net.replica_router import ReplicaRouter
from net.request_dispatch import RequestDispatch
from net.segment_reader import SegmentReader
from net.txn_coordinators import TransactionRouting

log = logging.getLogger("raykafka.edge")


class ControllerClient:
    """net/ports.Controller: calls to the active controller, whose reference
    comes with every UpdateMetadata."""

    def __init__(self, calls: ActorCalls, call_timeout_s: float):
        self.calls = calls
        self.call_timeout_s = call_timeout_s
        self.ref: Optional[ActorRef] = None

    async def call(self, method: str, *args, timeout_s: float | None = None):
        if self.ref is None:
            raise ActorCallFailed(ErrorCode.not_controller)
        try:
            return await settle(self.calls.call_via_runtime(self.ref, method, args, timeout_s or self.call_timeout_s))
        except ActorCallFailed as exc:
            if exc.error == ErrorCode.not_leader_or_follower:
                # The controller actor is gone (failover under way): admin clients
                # retry NOT_CONTROLLER after refreshing metadata.
                raise ActorCallFailed(ErrorCode.not_controller) from None
            raise


class EdgeService:
    def __init__(self, config: BrokerConfig, broker_id: int, advertised_host: str, advertised_port: int, *,
                 calls: ActorCalls, zk: Any = None):
        """calls: how other actors are reached (net/ports.ActorCalls; actors/edge_ports.py).
        zk: the edge process's one KafkaZkClient (metadata/kafka_zk.py), started or
        starting; None in unit tests that need no ZooKeeper."""
        self.config = config
        self.broker_id = broker_id
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.metadata = MetadataCache()
        self.metadata_ready = asyncio.Event()
        # The whole image the last applied UpdateMetadata left (deltas build on it).
        self.held_metadata: HeldMetadata | None = None
        self.call_timeout_s = config["raykafka.actor.call.timeout.ms"] / 1000
        # How other actors are reached (net/ports.ActorCalls): direct channels to the
        # replicas, purgatory and coordinators of this node when it can, else the runtime.
        self.calls = calls
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"],
                                                config["min.incremental.fetch.session.eviction.ms"])
        self.read_ahead_runs = config["raykafka.fetch.read.ahead"]
        self.read_ahead = FetchReadAhead(ttl_s=config["raykafka.fetch.read.ahead.ttl.ms"] / 1000)
        # Tail fetches answered from this edge's own appends (net/fetch_local_tail.py);
        # the wait for a local append is off with several edges per node.
        local_wait_ms = config["raykafka.fetch.local.tail.wait.ms"]
        self.local_tail: LocalTail | None = (
            LocalTail(wait_s=local_wait_ms / 1000 if config["raykafka.edge.processes"] == 1 else 0.0,
                      ttl_s=config["raykafka.fetch.read.ahead.ttl.ms"] / 1000)
            if local_wait_ms > 0 else None)

        handlers = registry.handlers()
        # Kafka's request and topic metrics (net/edge_metrics.py); None: not recorded.
        self.metrics: EdgeMetrics | None = (
            EdgeMetrics(broker_id, {key: h.name for key, h in handlers.items()},
                        {key: (h.min_version, h.max_version) for key, h in handlers.items()})
            if config["raykafka.metrics.enabled"] else None)
        self.requests = RequestDispatch(self, handlers, self.metrics)
        self.controller = ControllerClient(calls, self.call_timeout_s)
        # net/ports.Leaders and net/ports.Purgatory: the one way to a leader replica of this node.
        self.replicas = ReplicaRouter(broker_id, self.call_timeout_s, calls, self.local_tail)
        self.leaders = self.replicas
        self.coordinators = CoordinatorRouter(self)
        self.zk = zk
        self.transactions = TransactionRouting(self, zk)
        # On the edge's ZooKeeper session, each loading from it on first use: SCRAM
        # credentials (SaslAuthenticate, the SCRAM credential APIs), client quotas, and the
        # ACL store (net/authorization.py starts it off the loop when an authorizer is set).
        from net.sasl import ScramStore

        self.scram_store: ScramStore | None = ScramStore(zk) if zk is not None else None
        self.client_quotas = EdgeClientQuotas(config, zk, config["raykafka.edge.processes"])
        self.acl_store = None
        self.acl_store_starting: asyncio.Future | None = None
        self.segments = SegmentReader()

        self.handlers = handlers
        self.fault_hooks = self.requests.fault_hooks
        self.dispatch = self.requests.dispatch
        self.api_versions_entries = self.requests.api_versions_entries
        self.wait_committed = self.replicas.wait_committed
        self.delay_fetch = self.replicas.delay_fetch
        self.controller_call = self.controller.call
        self.group_call = self.coordinators.group_call
        self.group_partition = self.coordinators.group_partition
        self.ensure_offsets_topic = self.coordinators.ensure_offsets_topic
        self.read_records = self.segments.read_records
        self.read_slices = self.segments.read_slices
        self.forget_fd = self.segments.forget_fd
        self.region_fds = self.segments.region_fds

    def set_purgatory(self, ref: ActorRef) -> None:
        """This node's purgatory actor (DelayedProduce, DelayedFetch); set again when it is re-created."""
        self.replicas.purgatory = ref

    def attach_replica_pool(self, pool) -> None:
        """This node's replica pool (cluster/replica_pool.py): pooled leaders resolve through it; a
        hibernated replica's direct channel is closed with it."""
        self.replicas.pool = pool
        pool.on_hibernated = lambda key, handle: self.calls.forget(handle)

    # ---- metadata from the controller ----------------------------------------------------
    def forget_cached_reads(self, topic: str | None = None, partition: int | None = None) -> None:
        """Drop the fetch answers this edge keeps (read-ahead runs, local tail
        answers): all of them, or those of one topic or partition."""
        caches = (self.read_ahead, self.local_tail) if self.local_tail is not None else (self.read_ahead,)
        for cache in caches:
            if topic is None:
                cache.clear()
            else:
                cache.forget(topic, partition)

    def apply_update_metadata(self, update: MetadataSnapshot | MetadataDelta, leader_handles: dict,
                              controller_handle: Any) -> MetadataApplied:
        """UpdateMetadata, whole or a delta (net/metadata_updates.py)."""
        resolved = resolve_update(self.held_metadata, update, leader_handles)
        if isinstance(resolved, MetadataApplied):
            return resolved
        before = self.metadata.topics
        try:
            self.metadata.update(resolved.snapshot)
        except StaleControllerEpoch as exc:
            log.warning("%s", exc)
            return MetadataApplied(ErrorCode.stale_controller_epoch)
        self.held_metadata = resolved
        if self.metrics is not None and before:
            self.metrics.metadata_changed(before, self.metadata.topics, self.metadata.controller_id, self.broker_id)
        self.replicas.set_leaders(resolved.leader_handles)
        self.calls.keep_only([*self.replicas.live_handles(), self.replicas.purgatory,
                              *self.coordinators.handles.values(), *self.transactions.coordinator_handles()])
        self.forget_cached_reads()  # leaders may have moved: nothing read before is answered again
        self.controller.ref = controller_handle
        self.metadata_ready.set()
        return MetadataApplied()

    def close(self) -> None:
        self.calls.close()
        self.replicas.close()
        self.segments.close()


__all__ = ["EdgeService"]
