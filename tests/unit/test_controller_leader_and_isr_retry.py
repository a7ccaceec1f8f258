"""A LeaderAndIsr that fails to a live broker's replica is resent, with backoff,
until it lands (a name that still led to the actor of a node Ray had not yet
declared dead), and only to the replicas it failed for."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import cluster.controller.broker_requests as requests_module
from actors.controller import ControllerService
from core.config import BrokerConfig


def _service_with_state(live_brokers):
    service = ControllerService(1001, BrokerConfig.from_sources(), zk=None, namespace="t")
    service.ctx = SimpleNamespace(brokers={b: object() for b in live_brokers},
                                  states={("t", 0): object(), ("t", 1): object()})
    service.stopped = False
    return service


def test_failed_replicas_are_resent_with_backoff_until_the_retries_run_out(monkeypatch):
    monkeypatch.setattr(requests_module, "LEADER_AND_ISR_RETRIES", 3)
    monkeypatch.setattr(requests_module, "LEADER_AND_ISR_RETRY_MAX_S", 0.02)

    async def scenario():
        service = _service_with_state([1001, 1002])
        service.loop = asyncio.get_running_loop()
        queued, sends = [], []
        service.enqueue = lambda event, future=None: queued.append(event)

        async def send(partitions, exclude=frozenset(), only=None, attempt=0):
            sends.append((partitions, only, attempt))
            # Every try fails again for the same replica: the next one is scheduled.
            service._retry_leader_and_isr(only, attempt + 1)

        service._send_leader_and_isr = send
        # Broker 1003 is not live: a replica of it is not retried.
        service._retry_leader_and_isr(frozenset({("t", 1, 1002), ("t", 0, 1003)}), attempt=1)
        for _ in range(10):
            await asyncio.sleep(0.05)
            while queued:
                await queued.pop(0)()
        return sends

    sends = asyncio.run(scenario())
    assert [attempt for _, _, attempt in sends] == [1, 2, 3]
    assert all(partitions == [("t", 1)] and only == frozenset({("t", 1, 1002)}) for partitions, only, _ in sends)


def test_nothing_is_resent_once_this_controller_is_no_longer_active():
    async def scenario():
        service = _service_with_state([1002])
        service.loop = asyncio.get_running_loop()
        queued, sends = [], []
        service.enqueue = lambda event, future=None: queued.append(event)

        async def send(*args, **kwargs):
            sends.append(args)

        service._send_leader_and_isr = send
        service._retry_leader_and_isr(frozenset({("t", 0, 1002)}), attempt=1)
        service.stopped = True  # resigned before the retry came due
        await asyncio.sleep(0.7)
        while queued:
            await queued.pop(0)()
        return sends

    assert asyncio.run(scenario()) == []
