"""CPU and memory accounting of the broker under test (Linux /proc only).

On a shared 2-core machine throughput alone is noisy: whatever else runs
takes CPU from the client and the broker. A window records, between start()
and stop(): CPU seconds used by this (client) process, by the broker's
process tree, and by everything else on the machine. "Everything else" well
above a few percent means the figure was disturbed.

Memory: RSS/PSS/USS of a process tree (smaps_rollup), the Ray actor workers
of one class in it (by process title), and a sampled peak RSS.
"""
from __future__ import annotations

import os
import resource
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK")


def system_busy_s() -> float:
    """CPU seconds the whole machine has spent not idle since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    total = sum(v[:8])  # guest time is already inside user/nice
    return (total - idle) / _TICK


def disk_read_bytes() -> int:
    """Bytes the machine has read from block devices since boot (/proc/vmstat
    pgpgin, KiB). A read phase that should be served by the page cache but
    shows disk reads lost its pages: this VM's host runs a DAMON scheme that
    pages out page-cache pages left unused for about a minute."""
    with open("/proc/vmstat") as f:
        for line in f:
            if line.startswith("pgpgin "):
                return int(line.split()[1]) * 1024
    return 0


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
        self.k0 = os.times().system
        self.f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        self.s0 = system_busy_s()
        self.d0 = disk_read_bytes()
        self.w0 = time.perf_counter()
        return self

    def stop(self) -> dict:
        wall = time.perf_counter() - self.w0
        sys_busy = system_busy_s() - self.s0
        client = own_cpu_s() - self.c0
        client_kernel = os.times().system - self.k0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.f0
        broker = (tree_cpu_s(self.broker_pid) - self.b0) if self.broker_pid else None
        other = sys_busy - client - (broker or 0.0)
        ncpu = len(os.sched_getaffinity(0))
        pct = lambda x: None if x is None or wall <= 0 else round(100 * x / wall, 1)
        return {
            "window_s": round(wall, 4),
            # percentages are of ONE core; the machine has ncpu * 100 %
            "client_cpu_pct": pct(client),
            # The client's kernel time and page faults: on this VM a fault on
            # memory the host has taken back costs ~4 ms per MB (bench.env_costs).
            "client_kernel_cpu_pct": pct(client_kernel),
            "client_page_faults": faults,
            "broker_cpu_pct": pct(broker),
            "other_cpu_pct": pct(max(other, 0.0)),
            "machine_cpu_pct": pct(sys_busy),
            "ncpu": ncpu,
            "broker_cpu_known": broker is not None,
            "disk_read_mb": round((disk_read_bytes() - self.d0) / 1e6, 1),
        }


def cpu_snapshot(broker_pid: int | None) -> dict:
    """CPU seconds so far of the machine, of this process's whole tree (its
    client children, running or reaped, and the broker if it started it),
    and of the broker's tree; for cpu_split()."""
    return {"wall": time.monotonic(), "busy": system_busy_s(),
            "own_tree": tree_cpu_s(os.getpid()),
            "broker": tree_cpu_s(broker_pid) if broker_pid and _stat(broker_pid) else None}


def cpu_split(before: dict, after: dict) -> dict:
    """% of ONE core between two cpu_snapshot()s, seen from a harness whose
    children are the clients and (when it started it) the broker: clients =
    own tree - broker, other = machine busy - own tree (- broker if it is
    not below us, i.e. unknown)."""
    wall = after["wall"] - before["wall"]
    busy = after["busy"] - before["busy"]
    own = after["own_tree"] - before["own_tree"]
    known = before["broker"] is not None and after["broker"] is not None
    broker = after["broker"] - before["broker"] if known else None
    clients = own - broker if known else own
    pct = lambda x: None if x is None or wall <= 0 else round(100 * max(x, 0.0) / wall, 1)
    return {"window_s": round(wall, 3), "clients_cpu_pct": pct(clients),
            "broker_cpu_pct": pct(broker), "other_cpu_pct": pct(busy - own)}


# ------------------------------------------------------------------ memory
# RSS counts a page once in every process that maps it, so summing RSS over
# a process tree counts shared pages (Python, Ray's libraries, the object
# store) many times; PSS divides each shared page among its sharers and sums
# to the tree's real footprint. Both are reported; PSS is the honest total.
_PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """The `Name:  N kB` fields of /proc/<pid>/smaps_rollup, in bytes. The
    first line (the address range of the rollup) is not a field."""
    fields = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith(":") and parts[2] == "kB":
            fields[parts[0][:-1]] = int(parts[1]) * 1024
    return fields


def process_title(pid: int) -> str:
    """What `ps` shows as the command: argv[0]. Ray rewrites it in place
    (setproctitle) to `ray::<ActorClass>` for an idle actor worker and
    `ray::<ActorClass>.<method>` while a method runs, padded with spaces."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode(errors="replace").strip()


def is_actor_process(title: str, actor_class: str) -> bool:
    prefix = f"ray::{actor_class}"
    return title == prefix or title.startswith(prefix + ".")


def process_memory(pid: int) -> dict | None:
    """rss/pss/uss bytes of one process from smaps_rollup (uss = pages only
    this process maps); None if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = parse_smaps_rollup(f.read())
    except OSError:
        return None
    if "Rss" not in fields or "Pss" not in fields:
        return None
    return {"pid": pid, "title": process_title(pid), "rss": fields["Rss"],
            "pss": fields["Pss"],
            "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)}


def sum_memory(procs: list[dict]) -> dict:
    return {"processes": len(procs),
            "rss_bytes": sum(p["rss"] for p in procs),
            "pss_bytes": sum(p["pss"] for p in procs),
            "uss_bytes": sum(p["uss"] for p in procs)}


def tree_memory(root: int) -> dict:
    """RSS, PSS and USS summed over root and all its descendants."""
    procs = [m for m in (process_memory(p) for p in process_tree(root)) if m]
    return sum_memory(procs)


def actor_processes(root: int, actor_class: str) -> list[int]:
    """Pids of the Ray actor workers of one class below root (by title)."""
    return [p for p in process_tree(root) if is_actor_process(process_title(p), actor_class)]


def tree_rss_bytes(root: int) -> int:
    """Cheap RSS sum (statm: no page-table walk), for sampling under load."""
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


class RssSampler:
    """Peak of tree_rss_bytes(root), sampled every `period` seconds in a
    daemon thread between start() and stop()."""

    def __init__(self, root: int, period: float = 1.0):
        self.root, self.period = root, period
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            self.peak = max(self.peak, tree_rss_bytes(self.root))
            self.samples += 1
            if self._stop.wait(self.period):
                return

    def start(self) -> "RssSampler":
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=5)
        # The last second before stop() would otherwise go unsampled.
        self.peak = max(self.peak, tree_rss_bytes(self.root))
        return self.peak
