"""The time a replica reads: wall-clock milliseconds (record timestamps,
retention, ISR lag) and a monotonic clock in seconds (timers, waits).

Injected rather than read from `time` so that unit tests drive a replica's
time (ManualClock) instead of sleeping. Only stdlib: every replica process
imports this module.
"""
from __future__ import annotations

# One definition of the real clocks: storage's (storage/ imports nothing of ours, so the
# clock lives there and the rest of the broker takes it from here).
from storage.clock import SYSTEM_CLOCK, Clock, SystemClock

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK", "ManualClock"]


class ManualClock:
    """A clock that moves only when told to (tests): both readings advance together."""

    def __init__(self, now_ms: int = 1_700_000_000_000, monotonic_s: float = 1000.0):
        self._now_ms = now_ms
        self._monotonic = monotonic_s

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._monotonic += seconds
        self._now_ms += int(round(seconds * 1000))
