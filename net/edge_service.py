"""The edge without its Ray actor shell (actors/edge.py): one object that
composes the edge's roles and is what handlers see as ``ctx.edge``:

- request dispatch (net/request_dispatch.py, Kafka's KafkaApis role);
- the replica router with the produce appender (net/replica_router.py);
- the coordinator router (net/coordinator_router.py; transactions in
  net/txn_coordinators.py);
- the segment reader (net/segment_reader.py) on storage/slice_reader.py;
- the metadata cache and the fetch caches it invalidates.

Handlers call the roles' methods on the edge itself (``edge.leader_handle``,
``edge.read_records``, ``edge.group_call``, ...): they are bound once here,
so such a call costs what it did when one class held them all.
"""
from __future__ import annotations

import asyncio
from typing import Any

from core.error_codes import ErrorCode

from core.config import BrokerConfig
from core.controller_messages import MetadataSnapshot
from core.local_channels import LocalChannels
from net import registry
from net.actor_calls import ActorCallFailed, call
from net.coordinator_router import CoordinatorRouter
from net.edge_metrics import EdgeMetrics
from net.fetch_local_tail import LocalTail
from net.fetch_read_ahead import FetchReadAhead
from net.fetch_session import FetchSessionCache
from net.metadata_cache import MetadataCache
from net.replica_router import ReplicaRouter
from net.request_dispatch import RequestDispatch
from net.segment_reader import SegmentReader


class EdgeService:
    def __init__(self, config: BrokerConfig, broker_id: int, advertised_host: str, advertised_port: int,
                 node_id: str | None = None):
        self.config = config
        self.broker_id = broker_id
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.metadata = MetadataCache()
        self.metadata_ready = asyncio.Event()
        self.call_timeout_s = config["raykafka.actor.call.timeout.ms"] / 1000
        self.controller_handle: Any = None
        # Direct channels to the replicas, purgatory and group coordinators of
        # this node (core/local_channels.py); off without the node's id or with
        # raykafka.local.calls=false.
        self.local_channels = LocalChannels(node_id if config["raykafka.local.calls"] else None,
                                            self.call_timeout_s)
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
        self.replicas = ReplicaRouter(broker_id, self.call_timeout_s, self.local_channels, self.local_tail)
        self.coordinators = CoordinatorRouter(self)
        self.segments = SegmentReader()

        self.handlers = handlers
        self.fault_hooks = self.requests.fault_hooks
        self.dispatch = self.requests.dispatch
        self.api_versions_entries = self.requests.api_versions_entries
        self.leader_handle = self.replicas.leader_handle
        self.appender = self.replicas.appender
        self.call = self.replicas.call
        self.node_call = self.replicas.node_call
        self.delay_produce = self.replicas.delay_produce
        self.wait_committed = self.replicas.wait_committed
        self.delay_fetch = self.replicas.delay_fetch
        self.group_call = self.coordinators.group_call
        self.group_partition = self.coordinators.group_partition
        self.coordinator_handle = self.coordinators.coordinator_handle
        self.local_coordinators = self.coordinators.local_coordinators
        self.ensure_offsets_topic = self.coordinators.ensure_offsets_topic
        self.read_records = self.segments.read_records
        self.read_slices = self.segments.read_slices
        self.forget_fd = self.segments.forget_fd
        self.region_fds = self.segments.region_fds

    @property
    def purgatory(self):
        """This node's purgatory actor (DelayedProduce, DelayedFetch)."""
        return self.replicas.purgatory

    @purgatory.setter
    def purgatory(self, handle) -> None:
        self.replicas.purgatory = handle

    def attach_replica_pool(self, pool) -> None:
        """This node's replica pool (cluster/replica_pool.py): pooled leaders resolve through it; a
        hibernated replica's direct channel is closed with it."""
        self.replicas.pool = pool
        pool.on_hibernated = lambda key, handle: self.local_channels.forget(handle)

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

    def apply_update_metadata(self, snapshot: MetadataSnapshot, leader_handles: dict, controller_handle: Any) -> None:
        before = self.metadata.topics
        self.metadata.update(snapshot)
        if self.metrics is not None and before:
            self.metrics.metadata_changed(before, self.metadata.topics, self.metadata.controller_id, self.broker_id)
        self.replicas.set_leaders(leader_handles)
        transactions = getattr(self, "transactions", None)  # net/txn_coordinators.py, made on first use
        self.local_channels.keep_only([*self.replicas.live_handles(), self.replicas.purgatory,
                                       *self.coordinators.handles.values(),
                                       *(transactions.coordinator_handles() if transactions else ())])
        self.forget_cached_reads()  # leaders may have moved: nothing read before is answered again
        self.controller_handle = controller_handle
        self.metadata_ready.set()

    # ---- the controller ----------------------------------------------------------------------
    async def controller_call(self, method: str, *args, timeout_s: float | None = None):
        if self.controller_handle is None:
            raise ActorCallFailed(ErrorCode.not_controller)
        try:
            return await call(getattr(self.controller_handle, method).remote(*args), timeout_s or self.call_timeout_s)
        except ActorCallFailed as exc:
            if exc.error == ErrorCode.not_leader_or_follower:
                # The controller actor is gone (failover under way): admin clients
                # retry NOT_CONTROLLER after refreshing metadata.
                raise ActorCallFailed(ErrorCode.not_controller) from None
            raise

    def close(self) -> None:
        self.local_channels.close()
        self.replicas.close()
        self.segments.close()


__all__ = ["EdgeService"]
