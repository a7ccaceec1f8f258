"""Debug-only: where a broker process's memory goes (issue 28 item 9).

With RAYKAFKA_TRACEMALLOC_DIR set in the broker's environment, each process
that calls `start_if_asked(role)` starts tracemalloc and, every
RAYKAFKA_TRACEMALLOC_INTERVAL_S (default 30), writes to
<dir>/<role>-<pid>.txt its RSS, the Python heap tracemalloc sees, and the
allocation sites that grew most since the first report. RSS growth that the
traced heap does not show is native (Ray's core worker, OpenTelemetry, gRPC,
kio's Rust decoder) or allocator fragmentation. Off (nothing imported, no
thread) unless the variable is set: tracemalloc slows every allocation.
"""
from __future__ import annotations

import os
import threading
import time

ENV_DIR = "RAYKAFKA_TRACEMALLOC_DIR"
_started = False


def start_if_asked(role: str) -> bool:
    global _started
    directory = os.environ.get(ENV_DIR)
    if not directory or _started:
        return False
    _started = True
    import tracemalloc

    tracemalloc.start(int(os.environ.get("RAYKAFKA_TRACEMALLOC_FRAMES", "8")))
    interval = float(os.environ.get("RAYKAFKA_TRACEMALLOC_INTERVAL_S", "30"))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{role}-{os.getpid()}.txt")
    threading.Thread(target=_report_loop, args=(path, interval), name="raykafka-tracemalloc", daemon=True).start()
    return True


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _report_loop(path: str, interval: float) -> None:
    import tracemalloc

    first = tracemalloc.take_snapshot()
    first_rss, first_traced = _rss_mib(), tracemalloc.get_traced_memory()[0] / 2**20
    started = time.monotonic()
    previous, previous_rss, previous_traced = first, first_rss, first_traced
    while True:
        time.sleep(interval)
        try:
            snapshot = tracemalloc.take_snapshot().filter_traces(
                (tracemalloc.Filter(False, tracemalloc.__file__),))
            rss, traced = _rss_mib(), tracemalloc.get_traced_memory()[0] / 2**20
            lines = [f"t={time.monotonic() - started:.0f}s RSS {rss:.1f} MiB ({rss - first_rss:+.1f}) "
                     f"traced {traced:.1f} MiB ({traced - first_traced:+.1f}) "
                     f"untraced growth {(rss - first_rss) - (traced - first_traced):+.1f} MiB "
                     f"(of which tracemalloc's own {tracemalloc.get_tracemalloc_memory() / 2**20:.1f} MiB)"]
            lines.append(f"since the previous report: RSS {rss - previous_rss:+.1f} MiB, "
                         f"traced {traced - previous_traced:+.1f} MiB; by file:")
            for stat in snapshot.compare_to(previous, "filename")[:10]:
                lines.append(f"  {stat.size_diff / 1024:+.1f} KiB {stat.count_diff:+d} blocks {stat.traceback[0].filename}")
            for stat in snapshot.compare_to(previous, "traceback")[:5]:
                lines.append(f"  {stat.size_diff / 1024:+.1f} KiB {stat.count_diff:+d} blocks at")
                lines.extend("      " + line for line in stat.traceback.format(limit=4))
            previous, previous_rss, previous_traced = snapshot, rss, traced
            lines.append("since the first report, by file:")
            for stat in snapshot.compare_to(first, "filename")[:15]:
                lines.append(f"  {stat.size_diff / 1024:+.1f} KiB {stat.count_diff:+d} blocks {stat.traceback[0].filename}")
            lines.append("since the first report, by allocation site:")
            for stat in snapshot.compare_to(first, "traceback")[:20]:
                lines.append(f"{stat.size_diff / 1024:+.1f} KiB {stat.count_diff:+d} blocks")
                lines.extend("    " + line for line in stat.traceback.format(limit=6))
            with open(path, "a") as out:  # one report after another: growth over time
                out.write("\n".join(lines) + "\n\n")
        except Exception as exc:  # a debug aid never takes the process down
            with open(path, "a") as out:
                out.write(f"report failed: {exc!r}\n")
