"""AsyncTimerDriver on a real asyncio loop (real monotonic clock).

Timing bounds are loose enough for a busy CI machine; the structural
assertions (one armed wake-up, few wake-ups) are what prove no polling.
"""

from __future__ import annotations

import asyncio

from delayed.clock import ManualClock, monotonic_ms
from delayed.operation import DelayedOperation, DelayedOperationPurgatory
from delayed.timing_wheel import AsyncTimerDriver, SystemTimer, TimerTask

# "Within a few ms" of when the event loop itself runs a plain call_later set for the
# same moment: on a starved machine both are late together, and only the driver's own
# lateness is the wheel's doing.
LATENESS_BOUND_MS = 15


def loop_reference(loop: asyncio.AbstractEventLoop, delay_ms: int) -> asyncio.Future:
    """When the loop runs a plain callback due in `delay_ms` (monotonic ms)."""
    ran = loop.create_future()
    loop.call_later(delay_ms / 1000, lambda: ran.set_result(monotonic_ms()))
    return ran


async def within_bound(at: int, deadline: int, reference: asyncio.Future) -> bool:
    loop_ran = await asyncio.wait_for(reference, 10.0)
    return deadline <= at <= max(deadline, loop_ran) + LATENESS_BOUND_MS


def test_20ms_task_fires_on_time_with_few_wakeups():
    async def main():
        loop = asyncio.get_running_loop()
        timer = SystemTimer()
        driver = AsyncTimerDriver(timer, loop)
        assert driver.armed_expiration_ms is None  # idle: nothing armed
        fired = loop.create_future()
        added_at = monotonic_ms()
        deadline = added_at + 20
        timer.add(TimerTask(20, lambda: fired.set_result(monotonic_ms())))
        reference = loop_reference(loop, 20)
        assert driver.armed_expiration_ms is not None
        at = await asyncio.wait_for(fired, 10.0)
        assert await within_bound(at, deadline, reference)
        # One wake-up per wheel level involved (20 ms spills into the first
        # overflow wheel), plus at most one early-by-a-fraction-of-a-ms retry.
        assert driver.wakeups <= 3
        assert driver.armed_expiration_ms is None and timer.size == 0
        driver.close()

    asyncio.run(main())


def test_earlier_bucket_rearms_the_single_wakeup():
    async def main():
        loop = asyncio.get_running_loop()
        timer = SystemTimer()
        driver = AsyncTimerDriver(timer, loop)
        late = TimerTask(5_000, lambda: None)
        timer.add(late)
        armed_for_late = driver.armed_expiration_ms
        fired = loop.create_future()
        deadline = monotonic_ms() + 20
        driver.add(TimerTask(20, lambda: fired.set_result(monotonic_ms())))
        reference = loop_reference(loop, 20)
        assert driver.armed_expiration_ms < armed_for_late
        at = await asyncio.wait_for(fired, 10.0)
        assert await within_bound(at, deadline, reference)
        # After firing, the wake-up is re-armed for the remaining far bucket.
        assert driver.armed_expiration_ms == timer.next_expiration_ms() is not None
        assert driver.wakeups <= 3
        late.cancel()
        driver.close()
        assert driver.armed_expiration_ms is None

    asyncio.run(main())


def test_purgatory_on_driven_timer_expires_and_completes():
    class Waiting(DelayedOperation):
        def __init__(self, delay_ms, done):
            super().__init__(delay_ms)
            self.done = done
            self.ready = False
            self.expired = False

        def try_complete(self):
            return self.force_complete() if self.ready else False

        def on_expiration(self):
            self.expired = True

        def on_complete(self):
            self.done.set_result(("expired" if self.expired else "completed", monotonic_ms()))

    async def main():
        loop = asyncio.get_running_loop()
        timer = SystemTimer()
        driver = AsyncTimerDriver(timer, loop)
        purgatory = DelayedOperationPurgatory("fetch", timer)

        times_out = Waiting(30, loop.create_future())
        deadline = monotonic_ms() + 30
        assert purgatory.try_complete_else_watch(times_out, ["p0"]) is False
        reference = loop_reference(loop, 30)

        satisfied = Waiting(10_000, loop.create_future())
        purgatory.try_complete_else_watch(satisfied, ["p1"])
        loop.call_later(0.005, lambda: (setattr(satisfied, "ready", True), purgatory.check_and_complete("p1")))

        kind, at = await asyncio.wait_for(satisfied.done, 1.0)
        assert kind == "completed"
        kind, at = await asyncio.wait_for(times_out.done, 10.0)
        assert kind == "expired" and await within_bound(at, deadline, reference)
        assert purgatory.delayed == 0 and timer.size == 0
        driver.close()

    asyncio.run(main())


def test_driver_with_manual_clock_arms_for_exact_bucket():
    """With the timer on a manual clock the armed expiration is exactly the
    earliest bucket, and waking runs whatever is due by the timer's clock."""

    async def main():
        loop = asyncio.get_running_loop()
        clock = ManualClock(0)
        timer = SystemTimer(clock=clock)
        driver = AsyncTimerDriver(timer, loop)
        ran = []
        timer.add(TimerTask(7, lambda: ran.append(clock())))
        assert driver.armed_expiration_ms == 7
        clock.set(7)
        driver._wake()  # what loop.call_at would invoke
        assert ran == [7] and driver.armed_expiration_ms is None
        driver.close()

    asyncio.run(main())
