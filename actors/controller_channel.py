"""The controller channel over Ray (cluster/controller/channel.py): replica
actors created by name on their broker's node, LeaderAndIsr / StopReplica /
UpdateMetadata as actor calls, coordinators elected and resigned, and Ray's
death watch (a pending call on an actor fails within milliseconds of its death)."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.group_coordinator import forget_broker as forget_coordinators_of
from actors.group_coordinator import sync_group_coordinators
from actors.partition_leader import ReplicaActorRemote
from actors.transaction_coordinator import forget_broker as forget_txn_coordinators_of
from actors.transaction_coordinator import sync_transaction_coordinators
from cluster.controller.channel import ControllerChannel, LeaderAndIsr, ReplicaKey, SpecFor
from core.config import BrokerConfig
from core.controller_messages import MetadataDelta, MetadataSnapshot
from cluster.replica_pool import HIBERNATE_KEY
from core.naming import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, controller_actor_name, edge_actor_name, replica_actor_name
from core.pooled_replica import PooledReplica


def is_internal_topic(topic: str) -> bool:
    return topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)


class _CoordinatorSide:
    """What sync_group_coordinators / sync_transaction_coordinators read from their
    `service` argument (actors/group_coordinator.py, actors/transaction_coordinator.py):
    the context of the round, the coordinator handles, and the replicas' handles."""

    def __init__(self, channel: "RayControllerChannel"):
        self._channel = channel
        self.ctx: Any = None
        self.coordinator_handles: dict[tuple[int, int], Any] = {}
        self.namespace = channel.namespace
        self.config = channel.config
        self.zk_connect = channel.zk_connect
        self.call_timeout_s = channel.call_timeout_s

    def _replica(self, topic: str, p: int, broker_id: int):
        return self._channel.handle(ReplicaKey(topic, p, broker_id))


class RayControllerChannel(ControllerChannel):
    def __init__(self, namespace: str, config: BrokerConfig, zk_connect: str | None, call_timeout_s: float):
        self.namespace = namespace
        self.config = config
        self.zk_connect = zk_connect
        self.call_timeout_s = call_timeout_s
        self.replica_handles: dict[tuple[str, int, int], Any] = {}
        self.edge_handles: dict[int, Any] = {}
        # The controller actor's own handle, sent with UpdateMetadata (edges call it back).
        self.self_handle: Any = None
        self._spec_for: SpecFor | None = None
        self._coordinators = _CoordinatorSide(self)
        # Replicas the node's replica pool keeps (issue 30, cluster/replica_pool.py): their
        # requests go to their broker's edge, which starts, wakes and hibernates the actor.
        self.pooled: set[tuple[str, int, int]] = set()
        self.hibernation = config.get(HIBERNATE_KEY, 0) > 0
        # RF > 1 sets hibernate too: every replica of a non-internal partition, leader and
        # followers, is pooled by its own node's edge (cluster/replica_pool.py).
        self.replicated = self.hibernation and bool(config.get("raykafka.replica.hibernate.replicated", False))

    def _pooled_kind(self, key: ReplicaKey, request: LeaderAndIsr) -> bool:
        return self.replicated or (len(request.replicas) == 1 and request.leader == key.broker_id)

    def _poolable(self, key: ReplicaKey, request: LeaderAndIsr) -> bool:
        """A replica that may hibernate: an unreplicated leader (or, with replicated sets,
        any replica), not internal, never live here before (a replica this channel started
        keeps its actor), and its edge reachable."""
        return (self.hibernation and self._pooled_kind(key, request)
                and not is_internal_topic(key.topic) and tuple(key) not in self.replica_handles
                and self._edge(key.broker_id) is not None)

    async def _unpool(self, key: ReplicaKey) -> None:
        """The replica leaves its pool (replicated now, or deleted): its live actor (found
        by name from here on) stays."""
        self.pooled.discard(tuple(key))
        edge = self._edge(key.broker_id)
        if edge is not None:
            await asyncio.wait_for(edge.pool_forget.remote(key.topic, key.partition), self.call_timeout_s)

    @property
    def coordinator_handles(self) -> dict[tuple[int, int], Any]:
        return self._coordinators.coordinator_handles

    # ---- replicas ------------------------------------------------------------------------------
    def attach(self, spec_for: SpecFor) -> None:
        self._spec_for = spec_for

    def has_replica(self, key: ReplicaKey) -> bool:
        return tuple(key) in self.replica_handles or tuple(key) in self.pooled

    def replica_keys(self) -> list[ReplicaKey]:
        return [ReplicaKey(*k) for k in [*self.replica_handles, *self.pooled]]

    def handle(self, key: ReplicaKey):
        key = tuple(key)
        handle = self.replica_handles.get(key)
        if handle is None:
            spec = self._spec_for(ReplicaKey(*key))
            strategy = NodeAffinitySchedulingStrategy(spec.ray_node_id, soft=False) \
                if spec.ray_node_id else "DEFAULT"
            handle = ReplicaActorRemote.options(
                name=replica_actor_name(spec.topic, spec.partition, spec.broker_id), namespace=self.namespace,
                lifetime="detached", get_if_exists=True, num_cpus=0, max_concurrency=10_000,
                scheduling_strategy=strategy,
            ).remote(spec.topic, spec.partition, spec.broker_id, spec.log_dirs, spec.log_config,
                     spec.min_insync_replicas, self.zk_connect, self.namespace, spec.replica_config)
            self.replica_handles[key] = handle
        return handle

    def ensure_replica(self, key: ReplicaKey) -> None:
        self.handle(key)

    def forget_replica(self, key: ReplicaKey) -> None:
        self.replica_handles.pop(tuple(key), None)

    def become_leader(self, key: ReplicaKey, request: LeaderAndIsr) -> Awaitable:
        key = ReplicaKey(*key)
        if tuple(key) in self.pooled or self._poolable(key, request):
            if self._poolable_still(key, request):
                self.pooled.add(tuple(key))
                # No actor starts here: the pool keeps the request and replays it on the first wake
                # (a new partition's it starts at once while the node has room: is_new).
                return self._edge(key.broker_id).pool_leader_and_isr.remote(self._spec_for(key), request)
            return self._after_unpool(key, lambda: self._become_leader_direct(key, request))
        return self._become_leader_direct(key, request)

    def _poolable_still(self, key: ReplicaKey, request: LeaderAndIsr) -> bool:
        return self._pooled_kind(key, request) and self._edge(key.broker_id) is not None

    async def _after_unpool(self, key: ReplicaKey, then) -> Any:
        await self._unpool(key)
        return await then()

    def _become_leader_direct(self, key: ReplicaKey, request: LeaderAndIsr) -> Awaitable:
        return self.handle(key).become_leader.remote(request.controller_epoch, request.leader_epoch, request.isr,
                                                     request.replicas, request.zk_version)

    def become_follower(self, key: ReplicaKey, request: LeaderAndIsr, leader: ReplicaKey | None) -> Awaitable:
        key = ReplicaKey(*key)
        if self.replicated and not is_internal_topic(key.topic) and self._edge(key.broker_id) is not None:
            # Every follower of a replicated set is pooled, even one this channel started
            # before (its pool adopts the actor by name): a follower cannot keep its leader's
            # handle, since the leader may hibernate and wake as another actor. Its pool keeps
            # the request and points the follower at the leader's live actor, found by name.
            self.replica_handles.pop(tuple(key), None)
            self.pooled.add(tuple(key))
            return self._edge(key.broker_id).pool_leader_and_isr.remote(self._spec_for(key), request)
        pooled = [k for k in (key, leader) if k is not None and tuple(k) in self.pooled]
        if pooled:
            # A pooled replica becomes replicated (reassignment): it leaves the pool first.
            async def unpooled():
                for k in pooled:
                    await self._unpool(ReplicaKey(*k))
                return await self._become_follower_direct(key, request, leader)

            return unpooled()
        return self._become_follower_direct(key, request, leader)

    def _become_follower_direct(self, key: ReplicaKey, request: LeaderAndIsr, leader: ReplicaKey | None):
        handle = self.handle(key)
        leader_handle = self.handle(leader) if leader is not None else None
        return handle.become_follower.remote(request.controller_epoch, request.leader, request.leader_epoch,
                                             request.isr, request.replicas, leader_handle)

    def _edge_or_none(self, key: ReplicaKey):
        return self._edge(key.broker_id) if tuple(key) in self.pooled else None

    def stop_replica(self, key: ReplicaKey, controller_epoch: int, delete: bool) -> Awaitable:
        key = ReplicaKey(*key)
        if self._edge_or_none(key) is not None:
            return self._edge(key.broker_id).pool_stop_replica.remote(key.topic, key.partition, controller_epoch,
                                                                      delete)
        return self.handle(key).stop_replica.remote(controller_epoch, delete)

    def remove_replica(self, key: ReplicaKey) -> None:
        key = ReplicaKey(*key)
        if tuple(key) in self.pooled:
            self.pooled.discard(tuple(key))
            edge = self._edge(key.broker_id)
            if edge is not None:  # stopped (and deleted) already: its edge ends the actor if it is live
                edge.pool_forget.remote(key.topic, key.partition, True)
            return
        handle = self.replica_handles.pop(tuple(key), None)
        if handle is not None:
            ray.kill(handle)

    def update_log_config(self, key: ReplicaKey, log_config: Any, min_insync_replicas: int) -> Awaitable:
        key = ReplicaKey(*key)
        edge = self._edge_or_none(key)
        if edge is not None:
            return edge.pool_update_log_config.remote(key.topic, key.partition, log_config, min_insync_replicas)
        return self.handle(key).update_log_config.remote(log_config, min_insync_replicas)

    def replica_state(self, key: ReplicaKey) -> Awaitable | None:
        handle = self.replica_handles.get(tuple(key))
        return None if handle is None else handle.state.remote()

    def update_replication_throttle(self, key: ReplicaKey, leader_rate, follower_rate,
                                    **throttled_replicas: Any) -> Awaitable:
        key = ReplicaKey(*key)
        edge = self._edge_or_none(key)
        if edge is not None:
            # A live replica applies it now; a hibernated one is not woken for it and
            # wakes with it (the edge keeps it in the replica's spec).
            return edge.pool_update_replication_throttle.remote(
                key.topic, key.partition, leader_rate, follower_rate,
                throttled_replicas.get("leader_throttled_replicas"),
                throttled_replicas.get("follower_throttled_replicas"))
        return self.handle(key).update_replication_throttle.remote(leader_rate, follower_rate, **throttled_replicas)

    async def close_replicas(self, broker_id: int, timeout_s: float) -> int:
        # By handle: the broker may already have left the context (its edge deregistered).
        handles = [h for (topic, p, b), h in self.replica_handles.items() if b == broker_id]
        calls = [asyncio.wait_for(h.close.remote(), timeout_s) for h in handles]
        edge = self._edge(broker_id) if any(k[2] == broker_id for k in self.pooled) else None
        if edge is not None:
            calls.append(asyncio.wait_for(edge.pool_close.remote(), timeout_s))
        await asyncio.gather(*calls, return_exceptions=True)
        return len(handles)

    # ---- edges -------------------------------------------------------------------------------------
    def _edge(self, broker_id: int):
        handle = self.edge_handles.get(broker_id)
        if handle is None:
            try:
                handle = ray.get_actor(edge_actor_name(broker_id), namespace=self.namespace)
            except ValueError:
                return None
            self.edge_handles[broker_id] = handle
        return handle

    def has_edge(self, broker_id: int) -> bool:
        return self._edge(broker_id) is not None

    def leader_handle(self, key: ReplicaKey):
        """What the edge routes a leader's requests to: its pool's name for a
        pooled replica, else the actor's handle."""
        return PooledReplica(*key) if tuple(key) in self.pooled else self.handle(key)

    def leader_identity(self, key: ReplicaKey):
        # Ray's handles compare by actor id: a re-created actor is a new identity.
        return self.leader_handle(ReplicaKey(*key))

    def update_metadata(self, broker_id: int, update: MetadataSnapshot | MetadataDelta,
                        leaders: Iterable[ReplicaKey]) -> Awaitable:
        handles = {(k.topic, k.partition): self.leader_handle(k) for k in map(ReplicaKey._make, leaders)}
        return self._edge(broker_id).update_metadata.remote(update, handles, self.self_handle)

    def forget_edge(self, broker_id: int) -> None:
        self.edge_handles.pop(broker_id, None)

    def forget_broker(self, broker_id: int) -> None:
        self.edge_handles.pop(broker_id, None)
        for key in [k for k in self.replica_handles if k[2] == broker_id]:
            del self.replica_handles[key]
        # Its pool went with its edge: the next LeaderAndIsr (the broker back) pools them again.
        self.pooled = {k for k in self.pooled if k[2] != broker_id}
        forget_coordinators_of(self._coordinators, broker_id)
        forget_txn_coordinators_of(self._coordinators, broker_id)

    # ---- coordinators ----------------------------------------------------------------------------
    async def sync_coordinators(self, ctx: Any, partitions: Iterable[tuple[str, int]]) -> None:
        partitions = list(partitions)
        self._coordinators.ctx = ctx
        # Group coordinators move with the leaders of __consumer_offsets partitions.
        await sync_group_coordinators(self._coordinators, partitions)
        # Transaction coordinators move with the leaders of __transaction_state partitions.
        await sync_transaction_coordinators(self._coordinators, partitions)

    # ---- death watch -------------------------------------------------------------------------------
    def watch_edge(self, broker_id: int) -> Awaitable[str | None] | None:
        edge = self._edge(broker_id)
        if edge is None:
            return None

        async def watch():
            try:
                await edge.park.remote()
            except Exception:
                pass
            return edge._actor_id.hex()

        return watch()

    def watch_controller(self, controller_id: int) -> Awaitable[bool] | None:
        try:
            handle = ray.get_actor(controller_actor_name(controller_id), namespace=self.namespace)
        except ValueError:
            return None

        async def watch():
            try:
                await handle.park.remote()
                return False
            except asyncio.CancelledError:
                raise
            except Exception:
                return True

        return watch()
