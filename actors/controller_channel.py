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
from core.naming import controller_actor_name, edge_actor_name, replica_actor_name


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

    @property
    def coordinator_handles(self) -> dict[tuple[int, int], Any]:
        return self._coordinators.coordinator_handles

    # ---- replicas ------------------------------------------------------------------------------
    def attach(self, spec_for: SpecFor) -> None:
        self._spec_for = spec_for

    def has_replica(self, key: ReplicaKey) -> bool:
        return tuple(key) in self.replica_handles

    def replica_keys(self) -> list[ReplicaKey]:
        return [ReplicaKey(*k) for k in self.replica_handles]

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
        return self.handle(key).become_leader.remote(request.controller_epoch, request.leader_epoch, request.isr,
                                                     request.replicas, request.zk_version)

    def become_follower(self, key: ReplicaKey, request: LeaderAndIsr, leader: ReplicaKey | None) -> Awaitable:
        handle = self.handle(key)
        leader_handle = self.handle(leader) if leader is not None else None
        return handle.become_follower.remote(request.controller_epoch, request.leader, request.leader_epoch,
                                             request.isr, request.replicas, leader_handle)

    def stop_replica(self, key: ReplicaKey, controller_epoch: int, delete: bool) -> Awaitable:
        return self.handle(key).stop_replica.remote(controller_epoch, delete)

    def remove_replica(self, key: ReplicaKey) -> None:
        handle = self.replica_handles.pop(tuple(key), None)
        if handle is not None:
            ray.kill(handle)

    def update_log_config(self, key: ReplicaKey, log_config: Any, min_insync_replicas: int) -> Awaitable:
        return self.handle(key).update_log_config.remote(log_config, min_insync_replicas)

    def replica_state(self, key: ReplicaKey) -> Awaitable | None:
        handle = self.replica_handles.get(tuple(key))
        return None if handle is None else handle.state.remote()

    def update_replication_throttle(self, key: ReplicaKey, leader_rate, follower_rate,
                                    **throttled_replicas: Any) -> Awaitable:
        return self.handle(key).update_replication_throttle.remote(leader_rate, follower_rate, **throttled_replicas)

    async def close_replicas(self, broker_id: int, timeout_s: float) -> int:
        # By handle: the broker may already have left the context (its edge deregistered).
        handles = [h for (topic, p, b), h in self.replica_handles.items() if b == broker_id]
        await asyncio.gather(*(asyncio.wait_for(h.close.remote(), timeout_s) for h in handles),
                             return_exceptions=True)
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

    def update_metadata(self, broker_id: int, snapshot: Any, leaders: Iterable[ReplicaKey]) -> Awaitable:
        handles = {(k.topic, k.partition): self.handle(k) for k in map(ReplicaKey._make, leaders)}
        return self._edge(broker_id).update_metadata.remote(snapshot, handles, self.self_handle)

    def forget_edge(self, broker_id: int) -> None:
        self.edge_handles.pop(broker_id, None)

    def forget_broker(self, broker_id: int) -> None:
        self.edge_handles.pop(broker_id, None)
        for key in [k for k in self.replica_handles if k[2] == broker_id]:
            del self.replica_handles[key]
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
