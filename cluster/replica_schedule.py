"""When each periodic duty of one replica is next due, so that one timer
serves them all (issue 18).

A replica used to run three asyncio loops (maintenance every 1 s,
checkpoints every 5 s, the ISR check every replica.lag.time.max.ms / 2):
~1.3 wake-ups a second per idle replica process, for work that was nearly
always "nothing to do". One timer now sleeps until the earliest due duty,
and duties with nothing to do are not scheduled at all: no ISR check
without another replica to drop, no cleaner pass on a log that is not
compacted, no checkpoint while an idle replica's checkpoints are current.
Retention stays scheduled always (time-based deletion needs no traffic).
"""
from __future__ import annotations

from typing import NamedTuple

from storage.log_manager import CHECKPOINT, CLEAN, RETENTION  # noqa: F401 - the log duties, decided there

ISR = "isr"
IDLE = "idle"


class Duty(NamedTuple):
    name: str
    every_s: float


class ReplicaSchedule:
    def __init__(self) -> None:
        self._every: dict[str, float] = {}
        self._due: dict[str, float] = {}

    def enable(self, name: str, every_s: float, now: float, first_in: float | None = None) -> None:
        """Keep `name` scheduled every `every_s` (an already scheduled duty keeps its due time,
        unless its period shrank below what is left)."""
        self._every[name] = every_s
        due = now + (every_s if first_in is None else first_in)
        if name not in self._due or self._due[name] > due:
            self._due[name] = due

    def disable(self, name: str) -> None:
        self._every.pop(name, None)
        self._due.pop(name, None)

    def set(self, name: str, enabled: bool, every_s: float, now: float) -> None:
        if enabled:
            self.enable(name, every_s, now)
        else:
            self.disable(name)

    def scheduled(self) -> set[str]:
        return set(self._due)

    def take_due(self, now: float) -> list[str]:
        """The duties due at `now`, each rescheduled one period later."""
        due = [name for name, at in self._due.items() if at <= now]
        for name in due:
            self._due[name] = now + self._every[name]
        return sorted(due)

    def next_delay(self, now: float) -> float:
        """Seconds until the earliest duty (inf: none scheduled)."""
        if not self._due:
            return float("inf")
        return max(0.0, min(self._due.values()) - now)
