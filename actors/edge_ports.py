"""net/ports.ActorCalls over Ray: the only place the edge calls another
actor's ``.remote``, or looks one up by name. Calls take the node's direct
channel when one is open (core/local_channels.py), else Ray; every await is
bounded by its timeout."""
from __future__ import annotations

import asyncio
from typing import Any, Iterable, Optional

from core.local_channels import LocalChannels


class RayActorCalls:
    """net/ports.ActorCalls for an edge: ``call`` over the node's direct
    channels (``channels``), ``call_via_runtime`` and ``find`` through Ray."""

    def __init__(self, channels: LocalChannels, namespace: str | None):
        self.channels = channels
        self.namespace = namespace
        self.counters = channels.counters

    @classmethod
    def for_node(cls, node_id: str | None, call_timeout_s: float, namespace: str | None = None) -> "RayActorCalls":
        """Direct channels to the actors of Ray node ``node_id`` (None: none, every call through Ray)."""
        return cls(LocalChannels(node_id, call_timeout_s), namespace)

    @classmethod
    def for_config(cls, config, node_id: str | None = None) -> "RayActorCalls":
        """As the edge builds them from its BrokerConfig: channels to ``node_id``'s actors
        unless raykafka.local.calls is off."""
        return cls.for_node(node_id if config["raykafka.local.calls"] else None,
                            config["raykafka.actor.call.timeout.ms"] / 1000, config["raykafka.namespace"])

    def call(self, ref: Any, method: str, args: tuple, timeout_s: float) -> asyncio.Future:
        return self.channels.call(ref, method, args, timeout_s)

    def call_local(self, ref: Any, method: str, args: tuple, timeout_s: float,
                   later_timeout_s: float) -> Optional[asyncio.Future]:
        return self.channels.call_local(ref, method, args, timeout_s, later_timeout_s)

    def call_via_runtime(self, ref: Any, method: str, args: tuple, timeout_s: float):
        return asyncio.wait_for(getattr(ref, method).remote(*args), timeout_s)

    async def find(self, name: str, timeout_s: float) -> Optional[Any]:
        namespace = self.namespace

        def lookup():
            import ray

            try:
                return ray.get_actor(name, namespace=namespace)
            except ValueError:
                return None

        try:
            return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, lookup), timeout_s)
        except asyncio.TimeoutError:
            return None

    async def find_replicas(self, partitions: list[tuple[str, int]], broker_id: int,
                            timeout_s: float) -> list[Optional[Any]]:
        from actors.replica_lookup import find_replicas

        try:
            return await find_replicas(list(partitions), broker_id, self.namespace, False, timeout_s)
        except Exception:  # noqa: BLE001 - a lookup that failed or took too long finds nothing
            return [None] * len(partitions)

    def keep_only(self, refs: Iterable[Any]) -> None:
        self.channels.keep_only(refs)

    def forget(self, ref: Any) -> None:
        self.channels.forget(ref)

    def client(self, ref: Any, method: str):
        """The open direct channel to ``ref`` serving ``method``, or None (tests, stats)."""
        return self.channels.client(ref, method)

    def close(self) -> None:
        self.channels.close()


__all__ = ["RayActorCalls"]
