"""The controller's ZooKeeper calls run off its event loop (cluster/controller/zk.py):
a slow ZooKeeper answer no longer stalls the actor's other calls."""
from __future__ import annotations

import asyncio
import threading
import time

from cluster.controller.zk import AsyncZk


class _SlowZk:
    def __init__(self):
        self.threads: list[int] = []

    def get_topics(self, prefix: str = "", *, delay_s: float = 0.2) -> list[str]:
        self.threads.append(threading.get_ident())
        time.sleep(delay_s)  # kazoo waiting for the server
        return [prefix + "t"]


def test_calls_run_in_another_thread_and_the_loop_keeps_running():
    async def scenario():
        zk = _SlowZk()
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.get_running_loop().create_task(ticker())
        result = await AsyncZk(zk).get_topics("a-", delay_s=0.2)
        task.cancel()
        return result, zk.threads, ticks

    result, threads, ticks = asyncio.run(scenario())
    assert result == ["a-t"]
    assert threads and threads[0] != threading.get_ident()
    assert ticks >= 5  # the loop ran other work while ZooKeeper answered


def test_independent_calls_are_in_flight_together():
    async def scenario():
        zk = _SlowZk()
        started = time.monotonic()
        results = await asyncio.gather(*(AsyncZk(zk).get_topics(str(i), delay_s=0.2) for i in range(4)))
        return results, time.monotonic() - started

    results, elapsed = asyncio.run(scenario())
    assert results == [["0t"], ["1t"], ["2t"], ["3t"]]
    assert elapsed < 0.6  # four 0.2 s calls, not one after another (0.8 s)
