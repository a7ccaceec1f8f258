"""The time storage reads, passed in by its owner (storage imports nothing of
this project): any object with ``now_ms()`` (wall clock, milliseconds) and
``monotonic()`` (seconds) will do, so tests hand in a manual clock."""
from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clocks."""

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def monotonic() -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()
