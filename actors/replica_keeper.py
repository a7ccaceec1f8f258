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

from core.naming import edge_actor_name, replica_actor_name
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

    def __init__(self, namespace: str, zk_connect: str | None, call_timeout_s: float, start_timeout_s: float,
                 replicated: bool = False):
        self.namespace = namespace
        # raykafka.replica.hibernate.replicated: RF > 1 sets hibernate together.
        self.replicated = replicated
        self.zk_connect = zk_connect
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s

    async def start(self, spec: Any, request: Any):
        loop = asyncio.get_running_loop()
        for attempt in range(START_ATTEMPTS):
            handle = await loop.run_in_executor(None, create_replica_actor, spec, self.namespace, self.zk_connect)
            try:
                # The first call waits for the actor's process and constructor (log recovery included).
                error = await self.leader_and_isr(handle, request, spec, timeout_s=self.start_timeout_s)
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

    async def leader_and_isr(self, handle: Any, request: Any, spec: Any = None, timeout_s: float | None = None) -> int:
        timeout_s = timeout_s or self.call_timeout_s
        if spec is not None and request.leader != spec.broker_id:
            # A follower: it fetches from the leader's live actor, found by name (None while
            # the leader hibernates: it then waits for the leader's wake to wake it again).
            leader = await self._leader_handle(spec, request)
            return await asyncio.wait_for(handle.become_follower.remote(
                request.controller_epoch, request.leader, request.leader_epoch, request.isr, request.replicas,
                leader), timeout_s)
        return await asyncio.wait_for(handle.become_leader.remote(
            request.controller_epoch, request.leader_epoch, request.isr, request.replicas, request.zk_version),
            timeout_s)

    async def hibernate(self, handle: Any) -> HibernateAnswer:
        return await asyncio.wait_for(handle.hibernate.remote(self.replicated), self.call_timeout_s)

    # ---- replicated partitions: the other replicas' pools, through their nodes' edges -----------
    async def _leader_handle(self, spec: Any, request: Any):
        if request.leader < 0:
            return None
        name = replica_actor_name(spec.topic, spec.partition, request.leader)
        return await asyncio.get_running_loop().run_in_executor(None, named_actor, name, self.namespace)

    async def leader_is_live(self, spec: Any, request: Any) -> bool:
        return await self._leader_handle(spec, request) is not None

    async def _to_follower_edges(self, spec: Any, request: Any, method: str, *args: Any) -> list:
        loop = asyncio.get_running_loop()
        followers = [b for b in request.replicas if b != spec.broker_id]
        edges = await asyncio.gather(*(loop.run_in_executor(None, named_actor, edge_actor_name(b), self.namespace)
                                       for b in followers))
        calls = [asyncio.wait_for(getattr(edge, method).remote(spec.topic, spec.partition, *args),
                                  self.call_timeout_s) for edge in edges if edge is not None]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        for broker, answer in zip([b for b, e in zip(followers, edges) if e is not None], answers):
            if isinstance(answer, BaseException) or (answer not in (0, None) and not getattr(answer, "ok", False)):
                log.info("%s-%d: follower %d answered %s to %s", spec.topic, spec.partition, broker,
                         repr(answer)[:200], method)
        return answers

    async def wake_followers(self, spec: Any, request: Any, handle: Any = None) -> None:
        if handle is not None:
            await asyncio.wait_for(handle.followers_waking.remote(True), self.call_timeout_s)
        try:
            await self._to_follower_edges(spec, request, "pool_wake_follower", request.leader_epoch)
        finally:
            if handle is not None:
                await asyncio.wait_for(handle.followers_waking.remote(False), self.call_timeout_s)

    async def hibernate_followers(self, spec: Any, request: Any, answer: HibernateAnswer) -> None:
        await self._to_follower_edges(spec, request, "pool_hibernate_follower", answer.leader_epoch,
                                      answer.high_watermark, answer.log_end_offset)

    async def hibernate_follower(self, handle: Any, leader_epoch: int, high_watermark: int,
                                 log_end_offset: int) -> HibernateAnswer:
        return await asyncio.wait_for(handle.hibernate_follower.remote(leader_epoch, high_watermark, log_end_offset),
                                      self.call_timeout_s)

    def end(self, handle: Any) -> None:
        # Closed already (hibernate() flushed and checkpointed): nothing is lost by killing it,
        # and no restart, so the name is free for the next wake.
        try:
            ray.kill(handle, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - gone already
            log.info("ending a hibernated replica: %r", exc)

    async def call(self, handle: Any, method: str, args: tuple, timeout_s: float | None = None):
        return await asyncio.wait_for(getattr(handle, method).remote(*args), timeout_s or self.call_timeout_s)


def named_actor(name: str, namespace: str):
    """The live actor of that name, or None (blocks on Ray's GCS: off the event loop)."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None
