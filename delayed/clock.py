"""Millisecond clocks for the delayed-operation timer.

The timer works in whole milliseconds, like Kafka's SystemTimer. Integer
milliseconds keep bucket arithmetic exact (no float rounding deciding which
bucket a task lands in) and make "never fires early" a checkable property:
a task is run only once the clock reads at least its deadline.
"""

from __future__ import annotations

import time


def monotonic_ms() -> int:
    """Whole milliseconds from the monotonic clock, truncated.

    Uses the same clock as asyncio's default event loop (``loop.time()`` is
    ``time.monotonic()``), so an asyncio driver can translate timer deadlines
    into ``loop.call_at`` times without any offset bookkeeping.
    """
    return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to, for deterministic tests.

    Callable like ``monotonic_ms``; ``sleep`` advances the clock instead of
    waiting, so ``SystemTimer.advance_clock(timeout_ms)`` can be tested without
    real time passing.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> int:
        if delta_ms < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        self.now_ms += delta_ms
        return self.now_ms

    def set(self, now_ms: int) -> None:
        if now_ms < self.now_ms:
            raise ValueError("a monotonic clock cannot go backwards")
        self.now_ms = now_ms

    def sleep(self, delta_ms: int) -> None:
        self.advance(max(0, delta_ms))
