"""A replica's waiting, on its injected clock: the one asyncio timer of its
periodic duties, and the change signal its long-polled calls wait on.

DutyTimer (Kafka's scheduler, for one replica; issue 18) sleeps until the
earliest duty the ReplicaSchedule holds (cluster/replica_schedule.py) or the
idle check is due, re-plans before every sleep, and can be woken early
(leadership or config changed, traffic after an idle period). What is due is
decided elsewhere (the plan callback: storage.log_manager.LogManager and the
replica).
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Awaitable, Callable

from cluster.replica_schedule import ReplicaSchedule
from core.clock import Clock
from core import idle_priority
from core.idle_priority import IdlePriority

log = logging.getLogger("raykafka.replica")

# A replica with no traffic this long is idle: its timer goes quiet and its
# process yields the CPU to busy ones (core/idle_priority.py, issue 18).
IDLE_AFTER_S = 10.0
# RAYKAFKA_IDLE_PRIORITY=1 moves idle replicas to SCHED_IDLE. Off by default:
# on a quiet 2-core node with 100 idle replicas, a busy topic produced 214 MB/s
# with them at SCHED_IDLE and 527 MB/s with them at normal priority, same run
# (bench.density, 712 MB/s alone; twice, bench/PROFILE.md session 9). Only on
# a machine loaded by other work did SCHED_IDLE measure ahead.
IDLE_PRIORITY_ENV = "RAYKAFKA_IDLE_PRIORITY"


class ChangeSignal:
    """What waiters (DelayedFetch of consumers and followers, DeleteRecords,
    transaction markers) park on until the next append / HW / leadership
    change: one event per generation, re-checked by each waiter on wake."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    async def wait(self, timeout_s: float) -> None:
        """Until the next change, or timeout_s."""
        if self._event is None:
            self._event = asyncio.Event()
        try:
            await asyncio.wait_for(self._event.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    def wake(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None


class DutyTimer:
    def __init__(self, name: str, clock: Clock, idle_after_s: float, plan: Callable[[ReplicaSchedule, float], None],
                 run: Callable[[str], Awaitable[None]], became_idle: Callable[[], Awaitable[None]],
                 stopped: Callable[[], bool]):
        self.name = name
        self.clock = clock
        self.idle = IdlePriority(idle_after_s,
                                 enabled=os.environ.get(IDLE_PRIORITY_ENV, "0") == "1" and idle_priority.supported(),
                                 on_busy=self.poke, clock=clock.monotonic)
        self.plan = plan
        self.run_duty = run
        self.became_idle = became_idle
        self.stopped = stopped
        self.schedule = ReplicaSchedule()
        self._wake: asyncio.Event | None = None

    def poke(self) -> None:
        """Re-plan now."""
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        self._wake = wake = asyncio.Event()
        while not self.stopped():
            now = self.clock.monotonic()
            self.plan(self.schedule, now)
            delay = min(self.schedule.next_delay(now), self.idle.next_tick_in())
            if delay > 0:
                try:
                    await asyncio.wait_for(wake.wait(), None if delay == float("inf") else delay)
                except asyncio.TimeoutError:
                    pass
                wake.clear()
            if self.stopped():  # stopped (or deleted) while this loop slept
                break
            was_idle = self.idle.idle
            if self.idle.tick() and not was_idle:
                await self.became_idle()
            for duty in self.schedule.take_due(self.clock.monotonic()):
                try:
                    await self.run_duty(duty)
                except Exception:
                    log.exception("%s of %s failed", duty, self.name)
