"""Idle replicas yield the CPU to busy ones (issue 18).

Every replica is its own process, and Ray's core worker wakes each one
~160 times a second whether its partition has traffic or not. On a node
packed with idle replicas those wake-ups compete, at the same priority, with
the few processes that carry traffic (the edge, busy leaders). This module
moves a replica process that has had no traffic for a while to SCHED_IDLE,
every thread of it (the policy is per thread on Linux), and back to
SCHED_OTHER (its nice value is kept) when traffic arrives.

Cheap on the hot path: the request path calls `touch()`, which sets a flag
and, only when the process is idle-scheduled, switches it back (a
sched_setscheduler per thread, once per idle period). The periodic `tick()`
(the replica's maintenance timer) decides when to go idle.

Going back from SCHED_IDLE needs CAP_SYS_NICE or an RLIMIT_NICE that allows
the thread's nice value (sched(7)); without either a process could drop to
SCHED_IDLE but never return, so `supported()` says no and nothing changes.
"""
from __future__ import annotations

import os
import resource
import time
from typing import Callable

CAP_SYS_NICE = 23


def _has_cap_sys_nice() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_NICE & 1)
    except OSError:
        pass
    return False


def supported() -> bool:
    """Can this process both enter SCHED_IDLE and leave it again?"""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    if _has_cap_sys_nice():
        return True
    # can_nice(): leaving SCHED_IDLE is allowed when 20 - nice <= RLIMIT_NICE.
    soft, _hard = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or 20 - os.getpriority(os.PRIO_PROCESS, 0) <= soft


def thread_ids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def set_policy(policy: int) -> int:
    """Every thread of this process to `policy`; the number of threads changed.
    Threads that exit meanwhile are skipped."""
    changed = 0
    param = os.sched_param(0)
    for tid in thread_ids():
        try:
            os.sched_setscheduler(tid, policy, param)
            changed += 1
        except ProcessLookupError:
            pass
    return changed


class IdlePriority:
    """Idle after `idle_after_s` without a touch(); busy again on the next touch().

    `on_busy` runs after the switch back (the replica restarts its quiet
    timers there). `apply` is the policy switch (tests pass a recorder)."""

    def __init__(self, idle_after_s: float, enabled: bool = True,
                 apply: Callable[[int], int] = set_policy,
                 on_busy: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.idle_after_s = idle_after_s
        self.enabled = enabled
        self._apply = apply
        self._on_busy = on_busy
        self._clock = clock
        self.idle = False
        self._touched = True
        self._last_activity = clock()
        self.switches = 0

    def touch(self) -> None:
        """Traffic: called on every append / read / follower fetch."""
        self._touched = True
        if self.idle:
            self._to_busy()

    def _to_busy(self) -> None:
        self.idle = False
        self._last_activity = self._clock()
        if self.enabled:
            self._apply(os.SCHED_OTHER)
            self.switches += 1
        if self._on_busy is not None:
            self._on_busy()

    def tick(self) -> bool:
        """From the periodic timer: go idle when untouched for idle_after_s.
        Returns whether the process is idle now."""
        now = self._clock()
        if self._touched:
            self._touched = False
            self._last_activity = now
        elif not self.idle and now - self._last_activity >= self.idle_after_s:
            self.idle = True
            if self.enabled:
                self._apply(os.SCHED_IDLE)
                self.switches += 1
        return self.idle

    def next_tick_in(self) -> float:
        """Seconds until tick() could change anything (for a timer that sleeps long)."""
        if self.idle:
            return float("inf")
        return max(0.0, self._last_activity + self.idle_after_s - self._clock())
