"""CPU accounting for one measured window (Linux /proc only).

On a shared 2-core machine throughput alone is noisy: whatever else runs
takes CPU from the client and the broker. A window records, between start()
and stop(): CPU seconds used by this (client) process, by the broker's
process tree, and by everything else on the machine. "Everything else" well
above a few percent means the figure was disturbed.
"""
from __future__ import annotations

import os
import time

_TICK = os.sysconf("SC_CLK_TCK")


def system_busy_s() -> float:
    """CPU seconds the whole machine has spent not idle since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    total = sum(v[:8])  # guest time is already inside user/nice
    return (total - idle) / _TICK


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                kids.setdefault(int(st[1]), []).append(int(d))
    out, todo = [root], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def tree_cpu_s(root: int) -> float:
    """utime+stime of root and its descendants, plus the time of children
    they already reaped (cutime/cstime), so exits inside a window are not
    counted twice or lost."""
    total = 0
    for pid in process_tree(root):
        st = _stat(pid)
        if st:  # fields 14-17 of /proc/pid/stat (1-based) = st[11:15]
            total += sum(int(x) for x in st[11:15])
    return total / _TICK


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class CpuWindow:
    def __init__(self, broker_pid: int | None):
        self.broker_pid = broker_pid if broker_pid and _stat(broker_pid) else None

    def start(self) -> "CpuWindow":
        self.b0 = tree_cpu_s(self.broker_pid) if self.broker_pid else 0.0
        self.c0 = own_cpu_s()
        self.s0 = system_busy_s()
        self.w0 = time.perf_counter()
        return self

    def stop(self) -> dict:
        wall = time.perf_counter() - self.w0
        sys_busy = system_busy_s() - self.s0
        client = own_cpu_s() - self.c0
        broker = (tree_cpu_s(self.broker_pid) - self.b0) if self.broker_pid else None
        other = sys_busy - client - (broker or 0.0)
        ncpu = len(os.sched_getaffinity(0))
        pct = lambda x: None if x is None or wall <= 0 else round(100 * x / wall, 1)
        return {
            "window_s": round(wall, 4),
            # percentages are of ONE core; the machine has ncpu * 100 %
            "client_cpu_pct": pct(client),
            "broker_cpu_pct": pct(broker),
            "other_cpu_pct": pct(max(other, 0.0)),
            "machine_cpu_pct": pct(sys_busy),
            "ncpu": ncpu,
            "broker_cpu_known": broker is not None,
        }
