"""What this machine charges for two things no raykafka broker can avoid,
each measured alone, in one command:

    flock /tmp/raykafka-heavy.lock .venv/bin/python -m bench.env_costs \\
        [--calls-per-s 300] [--call-seconds 6] [--write-mib 512] [--dir DIR]

* **A Ray actor call** on one node, the edge -> replica hop (one per produce
  request, one per fetch that is not served from read-ahead): CPU per call in
  the callee and in the caller, read from /proc/<pid>/stat, at a paced rate
  (an idle machine, so the figure is the call's own cost, not queueing), for
  an async caller and callee as in the broker. Arguments and result are as
  small as an append's (offsets, a few ints).
* **A page-cache write into fresh pages versus recycled ones**: 1 MiB
  ``os.write`` calls, timed per 256 MiB step, (a) for a long write (3 GiB)
  that runs past the free memory the host still backs, and (b) right after
  deleting it, into the pages it just freed. A VM whose host takes free
  memory back (free page reporting, ballooning) charges a host fault on the
  first touch of each such page; a broker appending to its log keeps
  touching fresh pages, so the slow steps of (a) are what its writes cost
  until memory fills with page cache.

Prints a table; writes JSON to bench/results/env-costs-<run id>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from bench.procstat import _TICK, _stat

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
MIB = 1 << 20


def process_cpu_s(pid: int) -> float:
    """utime + stime of one process, in seconds."""
    st = _stat(pid)
    if st is None:
        raise RuntimeError(f"process {pid} is gone")
    return (int(st[11]) + int(st[12])) / _TICK


# ------------------------------------------------------------------ Ray call
def measure_ray_call(calls_per_s: float, seconds: float) -> dict:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        @ray.remote(num_cpus=0)
        class Callee:
            async def append(self, placed, leader_epoch, timeout_ms):
                return [(0, 41, -1, 0, None, -1, 41)]

            def pid(self):
                return os.getpid()

        @ray.remote(num_cpus=0)
        class Caller:
            def __init__(self, callee):
                self.callee = callee

            def pid(self):
                return os.getpid()

            async def run(self, n: int, rate: float) -> float:
                import asyncio

                start = time.monotonic()
                for i in range(n):
                    await self.callee.append.remote([(0, 1024, 1, 30000)], 0, 30000)
                    delay = start + (i + 1) / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                return time.monotonic() - start

        callee = Callee.remote()
        caller = Caller.remote(callee)
        callee_pid, caller_pid = ray.get([callee.pid.remote(), caller.pid.remote()])
        ray.get(caller.run.remote(200, 1000.0))  # warm-up: connections, first-call imports
        n = max(1, int(calls_per_s * seconds))
        before = process_cpu_s(callee_pid), process_cpu_s(caller_pid)
        elapsed = ray.get(caller.run.remote(n, calls_per_s))
        after = process_cpu_s(callee_pid), process_cpu_s(caller_pid)
        return {"calls": n, "elapsed_s": round(elapsed, 3), "achieved_per_s": round(n / elapsed, 1),
                "callee_cpu_ms_per_call": round((after[0] - before[0]) / n * 1000, 3),
                "caller_cpu_ms_per_call": round((after[1] - before[1]) / n * 1000, 3)}
    finally:
        ray.shutdown()


# ------------------------------------------------------------------ page cache
STEP_MIB = 256


def _write_steps(path: str, mib: int, block: memoryview) -> list[float]:
    """Write ``mib`` 1 MiB blocks to a new file (no fsync); MB/s of each
    STEP_MIB-sized step, in order."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    steps = []
    try:
        done = 0
        while done < mib:
            n = min(STEP_MIB, mib - done)
            start = time.perf_counter()
            for _ in range(n):
                written = os.write(fd, block)
                while written < len(block):
                    written += os.write(fd, block[written:])
            steps.append(n * MIB / 1e6 / (time.perf_counter() - start))
            done += n
        return steps
    finally:
        os.close(fd)


def measure_page_cache(directory: str, mib: int, recycled_mib: int) -> dict:
    """One long write (``mib``; it runs past whatever free memory the host
    still backs, into fresh pages), then, right after deleting it, a write of
    ``recycled_mib`` into the pages just freed. The slowest step of the long
    write is the fresh-page cost; the recycled write is the cost of the copy
    alone."""
    block = memoryview(bytearray(os.urandom(MIB)))
    path = os.path.join(directory, "env-costs.bin")
    long_steps = _write_steps(path, mib, block)
    os.unlink(path)
    recycled_steps = _write_steps(path, recycled_mib, block)
    os.unlink(path)
    fresh = min(long_steps)
    recycled = max(recycled_steps)
    return {"step_mib": STEP_MIB, "long_write_mib": mib, "long_write_steps_mb_s": [round(x, 1) for x in long_steps],
            "recycled_write_mib": recycled_mib, "recycled_steps_mb_s": [round(x, 1) for x in recycled_steps],
            "fresh_mb_s": round(fresh, 1), "recycled_mb_s": round(recycled, 1),
            "fresh_ms_per_mb": round(1000 / fresh, 3), "recycled_ms_per_mb": round(1000 / recycled, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.env_costs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls-per-s", type=float, default=300.0)
    ap.add_argument("--call-seconds", type=float, default=6.0)
    ap.add_argument("--write-mib", type=int, default=3072,
                    help="the long write (page cache it fills is freed at the end)")
    ap.add_argument("--recycled-mib", type=int, default=512)
    ap.add_argument("--dir", default=None, help="where to write (default: bench/results, i.e. the repo's disk)")
    a = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(dir=a.dir or str(RESULTS)) as d:
        pages = measure_page_cache(d, a.write_mib, a.recycled_mib)
    call = measure_ray_call(a.calls_per_s, a.call_seconds)
    doc = {"run_id": run_id, "machine": {"cores": os.cpu_count(), "kernel": platform.release()},
           "ray_call": call, "page_cache_write": pages}
    print(f"Ray actor call, async -> async, one node, {call['calls']} calls at {call['achieved_per_s']:.0f}/s:")
    print(f"  CPU per call: callee {call['callee_cpu_ms_per_call']:.2f} ms, "
          f"caller {call['caller_cpu_ms_per_call']:.2f} ms")
    print(f"Page-cache write, 1 MiB os.write calls, MB/s per {STEP_MIB} MiB step:")
    print(f"  {pages['long_write_mib']} MiB into a new file: " + " ".join(f"{x:.0f}" for x in pages["long_write_steps_mb_s"]))
    print(f"  {pages['recycled_write_mib']} MiB right after deleting it: "
          + " ".join(f"{x:.0f}" for x in pages["recycled_steps_mb_s"]))
    print(f"  fresh pages (slowest step) {pages['fresh_ms_per_mb']:.2f} ms/MB; "
          f"recycled (fastest) {pages['recycled_ms_per_mb']:.2f} ms/MB")
    out = RESULTS / f"env-costs-{run_id}.json"
    out.write_text(json.dumps(doc, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
