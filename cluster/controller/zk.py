"""KafkaZkClient's calls, awaited off the controller's event loop.

kazoo blocks its caller until ZooKeeper answers (~1-5 ms a write with its
fsync, longer under load, up to the session timeout while disconnected); on
the actor's loop that stalled every other call of the actor. Each call runs in
the default executor instead, so independent reads and writes can also be in
flight together (pipelined, as Kafka's controller does at failover)."""
from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable


class AsyncZk:
    def __init__(self, zk: Any):
        self._zk = zk

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._zk, name)
        if not callable(method):
            # A znode family (zk.brokers, zk.topics, ...): its calls are awaited the same way.
            return AsyncZk(method)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.get_running_loop().run_in_executor(None, functools.partial(method, *args, **kwargs))

        call.__name__ = name
        return call
