"""The delayed-operation purgatory actor: one per node.

A thin asyncio shell over cluster/purgatory_service.py (Kafka's
DelayedOperationPurgatory for Produce and Fetch; the operations themselves are
cluster/delayed_operations.py, the timing wheel delayed/). The actor's event
loop is the only thread touching them. Leader replicas on this node report
each partition's progress with `progress`; the edge parks operations with
`delay_produce` and `delay_fetch`.

Follower fetches long-poll inside the leader replica itself (one call, no
extra hop), so they do not come through here.

Nothing here is durable: the actor is created with unlimited Ray restarts
(node/process.py), and a restarted purgatory starts empty. Operations parked in
the dead process fail at their callers (the edge answers a retriable error);
a partition it has no progress for yet is asked to report, as a quiet one is,
since its leader may have gone quiet towards the dead incarnation.
"""
from __future__ import annotations

import asyncio
import logging

import ray

from cluster.delayed_operations import PartitionKey
from cluster.purgatory_service import MAX_PARKED, PurgatoryService
from core.local_calls import LocalCallServer
from core.replica_messages import PartitionOffset, PartitionProgress

log = logging.getLogger("raykafka.purgatory")

# What the node's edge and leader replicas may call over the direct channel.
LOCAL_CALL_METHODS = ("delay_produce", "delay_fetch", "progress")
# One connection per leader replica of the node, plus its edges.
MAX_LOCAL_CONNECTIONS = 10_000
# Bound on looking up the leaders asked to report (Ray's GCS).
ASK_TIMEOUT_S = 10.0


class PurgatoryActor:
    def __init__(self, broker_id: int = -1, namespace: str = "raykafka") -> None:
        self.broker_id = broker_id
        self.namespace = namespace
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._service: PurgatoryService | None = None
        self._local_calls: LocalCallServer | None = None

    def _svc(self) -> PurgatoryService:
        if self._service is None:
            self._service = PurgatoryService(asyncio.get_running_loop())
            self._service.ask_to_report = self._ask_to_report
        return self._service

    def _ask_to_report(self, keys: list[PartitionKey]) -> None:
        """Tell quiet leaders that someone waits on them (fire and forget)."""
        asyncio.get_running_loop().create_task(self._ask(list(keys)))

    async def _ask(self, keys: list[PartitionKey]) -> None:
        from actors.replica_lookup import find_replicas

        # A hibernated replica is not woken for it: its wake reports anyway.
        try:
            found = await find_replicas([tuple(k) for k in keys], self.broker_id, self.namespace, False,
                                        ASK_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the next parked operation asks again for quiet ones
            log.warning("asking leaders %s to report failed: %r", keys[:5], exc)
            return
        leaders = [h for h in found if h is not None]
        for leader in leaders:
            leader.report_progress.remote()

    async def delay_produce(self, required: list[PartitionOffset], timeout_ms: int) -> dict:
        """Wait until each (topic, partition)'s HW reaches its offset; -> {(t, p): error}."""
        return await self._svc().delay_produce({(t, p): o for t, p, o in required}, timeout_ms)

    async def delay_fetch(self, known_ends: list[PartitionOffset], isolation_level: int,
                          timeout_ms: int) -> bool:
        """Wait until some partition's fetchable end passes what was read; False on timeout."""
        return await self._svc().delay_fetch({(t, p): e for t, p, e in known_ends}, isolation_level, timeout_ms)

    async def progress(self, updates: list[PartitionProgress]) -> list:
        return self._svc().report(updates)

    async def forget(self, keys: list[tuple[str, int]]) -> None:
        self._svc().forget(keys)

    async def local_call_endpoint(self):
        """(node id, socket address, token, name, methods) of the direct-call
        socket (core/local_calls.py) for the actors of this node."""
        if self._local_calls is None:
            # Every leader replica of the node reports over its own connection,
            # and one edge connection carries all of that edge's parked
            # operations: bounds as wide as the actor's own (MAX_PARKED, Ray's
            # max_concurrency of 100,000).
            self._local_calls = LocalCallServer.serving(f"purgatory@{self.broker_id}", self, LOCAL_CALL_METHODS,
                                                        max_inflight=MAX_PARKED,
                                                        max_connections=MAX_LOCAL_CONNECTIONS)
        return await self._local_calls.endpoint()

    async def park(self) -> None:
        """Never returns: the supervisor in `raykafka start` holds this call
        open so Ray tells it within milliseconds when this process dies."""
        await asyncio.Event().wait()

    async def pid(self) -> int:
        import os

        return os.getpid()

    async def stats(self) -> dict:
        svc = self._svc()
        return {"produce_delayed": svc.produce.delayed, "fetch_delayed": svc.fetch.delayed,
                "partitions": len(svc.progress)}


PurgatoryActorRemote = ray.remote(PurgatoryActor)
