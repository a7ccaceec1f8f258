"""Finding a partition's replica actor from another actor (issue 30).

A replica is found by its name, `<topic>-<partition>@<broker id>`, except one
that a spare adopted on a wake (actors/replica_keeper.py): it has no name, and
its node's edge knows it through its replica pool. So: the name first, then
the edge of the replica's broker.
"""
from __future__ import annotations

import asyncio
from typing import Any

import ray

from core.naming import edge_actor_name, replica_actor_name


def named_actor(name: str, namespace: str) -> Any:
    """The live actor of that name, or None (blocks on Ray's GCS: off the event loop)."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


async def find_replicas(keys: list[tuple[str, int]], broker_id: int, namespace: str, wake: bool,
                        timeout_s: float) -> list[Any]:
    """The replica actor of each (topic, partition) on `broker_id`, or None where there is
    none; `wake`: a hibernated pooled replica is woken for it (else None). Name lookups ask
    Ray's GCS, so they run off the event loop; each step is bounded by `timeout_s`."""
    loop = asyncio.get_running_loop()

    def lookup() -> tuple[list[Any], Any]:
        found = [named_actor(replica_actor_name(t, p, broker_id), namespace) for t, p in keys]
        edge = named_actor(edge_actor_name(broker_id), namespace) if any(h is None for h in found) else None
        return found, edge

    found, edge = await asyncio.wait_for(loop.run_in_executor(None, lookup), timeout_s)
    missing = [i for i, h in enumerate(found) if h is None]
    if missing and edge is not None:
        pooled = await asyncio.wait_for(edge.pooled_replicas.remote([keys[i] for i in missing], wake), timeout_s)
        for i, handle in zip(missing, pooled):
            found[i] = handle
    return found


async def find_replica(topic: str, partition: int, broker_id: int, namespace: str, wake: bool,
                       timeout_s: float) -> Any:
    """find_replicas for one; ValueError (as ray.get_actor) where there is none."""
    handle = (await find_replicas([(topic, partition)], broker_id, namespace, wake, timeout_s))[0]
    if handle is None:
        raise ValueError(f"no replica actor for {topic}-{partition} on broker {broker_id}")
    return handle
