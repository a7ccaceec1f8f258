"""When `raykafka start` replaces a broker actor whose process died: the
decisions, without Ray (node/supervision.py's Supervisor does the replacing).

Why the starting process supervises the edge rather than Ray's max_restarts:
a restarted edge must do more than run its constructor again (bind the port
its predecessor had actually bound, which may have been an ephemeral one;
delete its predecessor's ZooKeeper registration; be handed its sibling
edges), and the process that created it knows all of that. It is alive in
both modes (a local Ray, or one `raykafka start --ray-address` per node of a
shared cluster), and the edge is owned by it, so edge and supervisor never
outlive each other. The purgatory and the group coordinators hold no state
that outlives their process and need nothing but their constructor, so Ray
restarts them (max_restarts=-1), which keeps their actor handles valid for
everybody holding one; the supervisor only watches the purgatory, to record
its new pid, or to create a new one if Ray gives up on it.

Rules:
- A child whose node is gone is left alone: `kill -HUP` revival (or the
  operator) brings the whole node back, and an actor pinned to a dead node
  would never start.
- Nothing is replaced once the broker is stopping.
- The first death is answered at once; deaths that follow within
  `forget_after_s` back off exponentially (a crash loop does not spin), up to
  `max_backoff_s`. A failed replacement counts as another death.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Hashable


class Action(enum.Enum):
    REPLACE = "replace"  # replace it now
    WAIT = "wait"  # backing off: ask again later
    LEAVE = "leave"  # not ours to replace (node gone, stopping): forget it


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    retry_at: float | None = None  # with WAIT: when the replacement is due


@dataclasses.dataclass
class _Child:
    deaths: list[float]
    due_at: float


class RestartPolicy:
    def __init__(self, base_backoff_s: float = 1.0, max_backoff_s: float = 30.0, forget_after_s: float = 60.0):
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.forget_after_s = forget_after_s
        self._pending: dict[Hashable, _Child] = {}
        self._history: dict[Hashable, list[float]] = {}

    def died(self, key: Hashable, now: float) -> float:
        """The child `key` died (or its replacement failed) at `now`; returns
        when its replacement is due."""
        deaths = [t for t in self._history.get(key, []) if now - t < self.forget_after_s] + [now]
        self._history[key] = deaths
        delay = 0.0 if len(deaths) == 1 else min(self.max_backoff_s,
                                                  self.base_backoff_s * 2 ** (len(deaths) - 2))
        self._pending[key] = _Child(deaths, now + delay)
        return now + delay

    def pending(self) -> list[Hashable]:
        return list(self._pending)

    def decide(self, key: Hashable, now: float, node_alive: bool, stopping: bool) -> Decision:
        child = self._pending.get(key)
        if child is None:
            return Decision(Action.LEAVE, "nothing to replace")
        if stopping:
            return Decision(Action.LEAVE, "the broker is stopping")
        if not node_alive:
            return Decision(Action.LEAVE, "its Ray node is gone (SIGHUP revival replaces the whole node)")
        if now < child.due_at:
            return Decision(Action.WAIT, f"backing off after {len(child.deaths)} deaths in "
                                         f"{self.forget_after_s:.0f} s", child.due_at)
        return Decision(Action.REPLACE, f"death {len(child.deaths)} in {self.forget_after_s:.0f} s")

    def replaced(self, key: Hashable) -> None:
        """The replacement is up: nothing pending (its death history stays, for the backoff)."""
        self._pending.pop(key, None)

    def forget(self, key: Hashable) -> None:
        """Left alone (LEAVE), or its node was revived as a whole."""
        self._pending.pop(key, None)
        self._history.pop(key, None)
