"""Profile raykafka's produce and fetch paths under load: where the broker's
CPU goes, per process (edge, leader replica) and per thread, and within the
Python code of each (py-spy samples).

    .venv/bin/pip install -c constraints.txt -e '.[bench]'     # py-spy
    flock /tmp/raykafka-heavy.lock .venv/bin/python -m bench.profile [--records N] [--record-size B]

One broker (`raykafka start`, fresh data dir), one topic of --partitions,
then two timed phases with the single workload's clients (bench/client.py):
produce (lz4, acks=1) and consume. During each phase:

* per-thread CPU of every broker process from /proc/<pid>/task/*/stat, so
  the time Ray spends in its C++ threads (which a Python profiler cannot
  see) is counted too;
* `py-spy record --format raw --gil` of the edge and of the topic's leader
  replica: Python stacks of whichever thread holds the GIL, i.e. Python
  actually running (`--nonblocking`: the target is never paused).

Output: a report on stdout (markdown, pasted into bench/PROFILE.md) and the
raw stacks and JSON under bench/results/profile-<run id>/.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.procstat import _TICK, _stat, actor_processes, process_title, process_tree
from bench.matrix_run import run_latency
from bench.phases import Workload, run_phase
from bench.targets import REPO, RaykafkaTarget, kill_tree

RESULTS = REPO / "bench" / "results"


# ------------------------------------------------------------------ threads
def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread of one process, keyed by thread name ("main"
    for the main thread, "actor loop" for the one Ray renames as it runs
    methods); threads of one name (Ray's pools) are summed."""
    out: dict[str, float] = collections.defaultdict(float)
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        if int(tid) == pid:
            name = "main"
        elif name.startswith("ray::"):
            # The thread running the actor's methods (an async actor's event
            # loop): Ray renames it ray::IDLE / ray::<Class> as it works.
            name = "actor loop"
        fields = raw.rsplit(")", 1)[1].split()
        out[name] += (int(fields[11]) + int(fields[12])) / _TICK
    return dict(out)


def tree_thread_cpu(root: int) -> dict[int, dict]:
    out = {}
    for pid in process_tree(root):
        st = _stat(pid)  # after the name: [7] minflt, [12] stime (ticks)
        out[pid] = {"title": process_title(pid), "threads": thread_cpu(pid),
                    "faults": int(st[7]) if st else 0, "sys_s": int(st[12]) / _TICK if st else 0.0}
    return out


def _start_time(pid: int) -> int:
    st = _stat(pid)  # field 22 of /proc/pid/stat (1-based): starttime
    return int(st[19]) if st else 0


def cpu_delta(before: dict[int, dict], after: dict[int, dict]) -> list[dict]:
    """Per process: title, CPU seconds in the window, and per thread name."""
    rows = []
    for pid, a in after.items():
        b = before.get(pid, {"threads": {}})
        threads = {n: round(s - b["threads"].get(n, 0.0), 3) for n, s in a["threads"].items()}
        threads = {n: s for n, s in threads.items() if s > 0}
        total = round(sum(threads.values()), 3)
        if total > 0:
            rows.append({"pid": pid, "title": a["title"][:60], "cpu_s": total,
                         "sys_s": round(a.get("sys_s", 0.0) - b.get("sys_s", 0.0), 3),
                         "faults": a.get("faults", 0) - b.get("faults", 0),
                         "threads": dict(sorted(threads.items(), key=lambda kv: -kv[1]))})
    return sorted(rows, key=lambda r: -r["cpu_s"])


# ------------------------------------------------------------------ py-spy
def pyspy_bin() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def start_pyspy(pid: int, out: Path, duration: int, rate: int, native: bool = False) -> subprocess.Popen | None:
    exe = pyspy_bin()
    if exe is None:
        return None
    # --gil: only the thread holding the GIL (Python running). --native instead
    # samples every running thread with its C/C++ frames (Ray's core worker,
    # os.write, crc32c), which pauses the target to unwind it.
    mode = ["--native", "--idle"] if native else ["--nonblocking", "--gil"]
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--output", str(out),
                             "--duration", str(duration), "--rate", str(rate), *mode],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _frame_name(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'func (file.py)' (lines merged)."""
    if " (" in frame and frame.endswith(")"):
        func, where = frame[:-1].split(" (", 1)
        path = where.rsplit(":", 1)[0]
        parts = Path(path).parts
        short = "/".join(parts[-2:]) if len(parts) >= 2 else path
        return f"{func} ({short})"
    return frame


def summarize_stacks(raw_path: Path, top: int = 15) -> dict:
    """Self and inclusive sample shares per function from py-spy's raw
    (collapsed) output: one 'frame;frame;... count' line per stack."""
    self_counts: collections.Counter = collections.Counter()
    incl_counts: collections.Counter = collections.Counter()
    total = 0
    if not raw_path.exists():
        return {"samples": 0, "self": [], "inclusive": []}
    for line in raw_path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        # The first frame is the thread ("thread (0x...)" / "process ..."): skip it.
        frames = [f for f in frames if not f.startswith(("thread (", "process "))]
        if not frames:
            continue
        total += n
        self_counts[frames[-1]] += n
        for f in set(frames):
            incl_counts[f] += n
    share = lambda c: [(name, round(100 * k / total, 1)) for name, k in c.most_common(top)] if total else []
    return {"samples": total, "self": share(self_counts), "inclusive": share(incl_counts)}


# ------------------------------------------------------------------ run
def profile_phase(phase: str, target: RaykafkaTarget, topic: str, wl: Workload, a, out_dir: Path) -> dict:
    root = target.proc.pid
    edges = actor_processes(root, "EdgeActor")
    # The topic's replica is the newest ReplicaActor (the offsets replicas came first).
    replicas = sorted(actor_processes(root, "ReplicaActor"), key=_start_time, reverse=True)
    sampled = [("edge", edges[:1]), ("replica", replicas[:1])]
    if phase == "latency":
        # a consumer at the tail parks its fetches there
        sampled.append(("purgatory", actor_processes(root, "PurgatoryActor")[:1]))
    spies = []
    for label, pids in sampled:
        for pid in pids:
            raw = out_dir / f"{phase}-{label}-{pid}.txt"
            p = start_pyspy(pid, raw, a.duration, a.rate, a.native)
            if p is not None:
                spies.append((label, pid, raw, p))
    time.sleep(0.5)  # py-spy attaches
    before = tree_thread_cpu(root)
    w0 = time.perf_counter()
    if phase == "latency":
        result = run_latency(target, topic, a.latency_rate, a)
        if result.get("ok"):
            x = result["consume"]["latency"]
            result.update(p50_ms=x["p50_ms"], p99_ms=x["p99_ms"], records_s=result["produce"]["achieved_rate"])
    else:
        result = run_phase(phase, target.bootstrap, topic, wl, a, out_dir, broker_pid=root)
    wall = time.perf_counter() - w0
    after = tree_thread_cpu(root)
    stacks = {}
    for label, pid, raw, p in spies:
        try:
            p.wait(timeout=a.duration + 30)
        except subprocess.TimeoutExpired:
            kill_tree(p, grace=2)
        stacks[label] = {"pid": pid, **summarize_stacks(raw)}
    return {"phase": phase, "result": result, "window_s": round(wall, 2),
            "cpu": cpu_delta(before, after), "stacks": stacks}


def print_phase(doc: dict) -> None:
    r = doc["result"]
    latency = f", p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms" if "p99_ms" in r else ""
    print(f"\n### {doc['phase']}: {r.get('mb_s', 0):.1f} MB/s, {r.get('records_s', 0):.0f} records/s{latency} "
          f"(client window {doc['window_s']} s){'' if r.get('ok') else '  FAILED: ' + str(r.get('error'))[:200]}")
    print("\nBroker CPU in the window (seconds; threads by name):\n")
    print("| process | CPU s | % of window | of it kernel s | page faults | top threads |")
    print("|---|---|---|---|---|---|")
    for row in doc["cpu"][:8]:
        threads = ", ".join(f"{n} {s:.2f}" for n, s in list(row["threads"].items())[:4])
        print(f"| {row['title']} | {row['cpu_s']:.2f} | {100 * row['cpu_s'] / doc['window_s']:.0f}% "
              f"| {row.get('sys_s', 0):.2f} | {row.get('faults', 0)} | {threads} |")
    for label, s in doc["stacks"].items():
        print(f"\npy-spy, {label} (pid {s['pid']}, {s['samples']} samples of running Python):\n")
        print("| self % | function | | inclusive % | function |")
        print("|---|---|---|---|---|")
        for (sn, sp), (inn, ip) in zip(s["self"], s["inclusive"]):
            print(f"| {sp} | `{sn}` | | {ip} | `{inn}` |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.profile")
    ap.add_argument("--records", type=int, default=1500000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--duration", type=int, default=12, help="seconds py-spy samples each phase")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true",
                    help="py-spy --native: C/C++ frames too, every thread (slows the broker down)")
    ap.add_argument("--phase-timeout", type=float, default=120.0)
    ap.add_argument("--idle-timeout", type=float, default=30.0)
    ap.add_argument("--start-timeout", type=float, default=180.0)
    ap.add_argument("--raykafka-cmd", metavar="CMD",
                    help="command prefix that starts raykafka (default .venv/bin/raykafka): another tree, for A/B")
    ap.add_argument("--latency-rate", type=float, default=None,
                    help="profile bench.run's latency phase at this many records/s (1 KiB, acks=1, "
                         "subscribed consumer) instead of the produce and consume phases")
    ap.add_argument("--latency-warmup-s", type=float, default=5.0)
    ap.add_argument("--latency-window-s", type=float, default=15.0)
    a = ap.parse_args(argv)
    if pyspy_bin() is None:
        print("bench.profile: py-spy not found (.venv/bin/pip install -c constraints.txt -e '.[bench]'); "
              "per-thread CPU only", file=sys.stderr)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    out_dir = RESULTS / f"profile-{run_id}"
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"raykafka-profile-{run_id}-"))
    target = RaykafkaTarget(workdir, a.start_timeout, cmd=a.raykafka_cmd)
    wl = Workload(a.records, a.record_size, a.partitions, "1")
    docs = []
    try:
        target.start()
        topic = f"profile-{run_id}"
        # __consumer_offsets and its coordinators are set up on first use:
        # before the topic (its replica is then the newest) and any timed window.
        run_phase("warmup", target.bootstrap, topic, wl, a, out_dir)
        created = run_phase("create", target.bootstrap, topic, wl, a, out_dir)
        if not created.get("ok"):
            print(f"create failed: {created}", file=sys.stderr)
            return 1
        time.sleep(2)  # the replica actor settles
        for phase in (("latency",) if a.latency_rate else ("produce", "consume")):
            docs.append(profile_phase(phase, target, topic, wl, a, out_dir))
    finally:
        target.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    (out_dir / "profile.json").write_text(json.dumps(docs, indent=1))
    print(f"## bench.profile run {run_id}: {a.records} x {a.record_size} B records, lz4, acks=1, "
          f"{a.partitions} partition(s)")
    for doc in docs:
        print_phase(doc)
    print(f"\nraw stacks and JSON: {out_dir}")
    return 0 if all(d["result"].get("ok") for d in docs) else 1


if __name__ == "__main__":
    sys.exit(main())
