"""How the node's replica pool (cluster/replica_pool.py) starts, calls and
ends replica actors through Ray (issue 30). The edge of each node holds the
pool; this is its Ray side.

A woken replica is the same actor name on the same node, created with the
spec the controller sent and given the newest LeaderAndIsr the pool kept, so
it opens the same log and takes the same leader epoch and ISR.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from core.naming import replica_actor_name
from core.pooled_replica import HibernateAnswer

log = logging.getLogger("raykafka.replica_pool")

# Tries at creating a woken replica whose name still led to its ended predecessor.
START_ATTEMPTS = 6


def create_replica_actor(spec: Any, namespace: str, zk_connect: str | None):
    """The replica actor for `spec` (cluster/controller/channel.ReplicaSpec), created
    on its broker's node, or the live one of that name. Blocks on Ray's GCS:
    call it off an event loop."""
    from actors.partition_leader import ReplicaActorRemote

    strategy = NodeAffinitySchedulingStrategy(spec.ray_node_id, soft=False) if spec.ray_node_id else "DEFAULT"
    return ReplicaActorRemote.options(
        name=replica_actor_name(spec.topic, spec.partition, spec.broker_id), namespace=namespace,
        lifetime="detached", get_if_exists=True, num_cpus=0, max_concurrency=10_000,
        scheduling_strategy=strategy,
    ).remote(spec.topic, spec.partition, spec.broker_id, spec.log_dirs, spec.log_config,
             spec.min_insync_replicas, zk_connect, namespace, spec.replica_config)


class RayReplicaStarter:
    """cluster.replica_pool.ReplicaStarter over Ray."""

    def __init__(self, namespace: str, zk_connect: str | None, call_timeout_s: float, start_timeout_s: float):
        self.namespace = namespace
        self.zk_connect = zk_connect
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s

    async def start(self, spec: Any, request: Any):
        loop = asyncio.get_running_loop()
        for attempt in range(START_ATTEMPTS):
            handle = await loop.run_in_executor(None, create_replica_actor, spec, self.namespace, self.zk_connect)
            try:
                # The first call waits for the actor's process and constructor (log recovery included).
                error = await self.leader_and_isr(handle, request, self.start_timeout_s)
                break
            except ray.exceptions.ActorDiedError:
                # The name still led to the actor just ended (ray.kill is asynchronous):
                # look it up again once Ray has let it go.
                if attempt == START_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.05 * 2 ** attempt)
        if error:
            log.warning("woken %s-%d answered LeaderAndIsr with error %d", spec.topic, spec.partition, error)
        return handle

    async def leader_and_isr(self, handle: Any, request: Any, timeout_s: float | None = None) -> int:
        timeout_s = timeout_s or self.call_timeout_s
        return await asyncio.wait_for(handle.become_leader.remote(
            request.controller_epoch, request.leader_epoch, request.isr, request.replicas, request.zk_version),
            timeout_s)

    async def hibernate(self, handle: Any) -> HibernateAnswer:
        return await asyncio.wait_for(handle.hibernate.remote(), self.call_timeout_s)

    def end(self, handle: Any) -> None:
        # Closed already (hibernate() flushed and checkpointed): nothing is lost by killing it,
        # and no restart, so the name is free for the next wake.
        try:
            ray.kill(handle, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - gone already
            log.info("ending a hibernated replica: %r", exc)

    async def call(self, handle: Any, method: str, args: tuple, timeout_s: float | None = None):
        return await asyncio.wait_for(getattr(handle, method).remote(*args), timeout_s or self.call_timeout_s)
