"""How many partition replicas one node holds, and what the idle ones cost
the busy one (issue 18). One command:

    .venv/bin/python -m bench.density [--counts 10,100,300] [--idle-s 30] \\
        [--produce-mib 128] [--override key=value ...] [--out FILE.md]

Starts a single-node broker (tests/broker_process.py, a real `raykafka
start`), a bare Ray actor (`num_cpus=0`, async, doing nothing) in the same
Ray cluster as the yardstick, and a busy 1-partition topic. Its produce rate
is measured first with no idle replicas, then for each count N the node is
brought to N idle replicas (1-replica topics of up to 50 partitions each,
nothing written to them) and it records:

* creation: seconds from CreateTopics to every new replica's process running
  and every partition having a leader in the metadata;
* idle CPU per replica over --idle-s seconds (utime+stime of each replica
  process from /proc/<pid>/stat), and the bare actor's in the same window:
  on this shared 2-core VM absolute figures move with the other engineers'
  load, so the ratio is what to compare;
* wake-ups per second (context switches, voluntary + involuntary, summed
  over every thread of the process), replica and bare actor;
* PSS per replica (mean of /proc/<pid>/smaps_rollup) and the bare actor's;
* produce MB/s of the busy topic (confluent-kafka, --produce-mib of 16 KiB
  records, acks=1, lz4), best of two runs; and the load average;
* where the idle replicas have moved themselves to SCHED_IDLE
  (core/idle_priority.py), the produce rate again with the bench moving them
  back to normal priority for it: an A/B in the same run, since absolute
  rates on this shared VM move ±2x between runs.

Prints a markdown table (and writes it to --out if given).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for key, value in (("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0"), ("RAY_AUTH_MODE", "disabled"),
                   ("RAY_USAGE_STATS_ENABLED", "0")):
    os.environ.setdefault(key, value)

from bench.procstat import _TICK, _stat, actor_processes, process_memory  # noqa: E402

BUSY_TOPIC = "busy"
RECORD_SIZE = 16 * 1024
PARTITIONS_PER_TOPIC = 10


def cpu_ticks(pid: int) -> int | None:
    st = _stat(pid)
    return None if st is None else int(st[11]) + int(st[12])


def wakeups(pid: int) -> int:
    """Context switches of every thread of pid so far (each one a wake-up or a preemption)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def idle_window(replica_pids: list[int], bare_pid: int, seconds: float) -> dict:
    pids = [*replica_pids, bare_pid]
    c0 = {p: cpu_ticks(p) for p in pids}
    w0 = {p: wakeups(p) for p in pids}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    c1 = {p: cpu_ticks(p) for p in pids}
    w1 = {p: wakeups(p) for p in pids}
    ok = [p for p in replica_pids if c0[p] is not None and c1[p] is not None]
    pct = lambda p: 100 * (c1[p] - c0[p]) / _TICK / wall  # noqa: E731
    wps = lambda p: (w1[p] - w0[p]) / wall  # noqa: E731
    return {"replica_cpu_pct": statistics.mean(pct(p) for p in ok) if ok else None,
            "replica_wakeups_s": statistics.mean(wps(p) for p in ok) if ok else None,
            "bare_cpu_pct": pct(bare_pid), "bare_wakeups_s": wps(bare_pid),
            "replica_threads": statistics.median(thread_count(p) for p in ok) if ok else None,
            "bare_threads": thread_count(bare_pid), "window_s": wall, "replicas_measured": len(ok)}


def set_policy_of(pids: list[int], policy: int) -> int:
    """Every thread of these processes to `policy` (needs CAP_SYS_NICE to leave SCHED_IDLE)."""
    changed = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setscheduler(int(tid), policy, os.sched_param(0))
                changed += 1
            except OSError:
                pass
    return changed


def idle_scheduled(pids: list[int]) -> int:
    """How many of these processes run SCHED_IDLE (policy of their main thread)."""
    count = 0
    for pid in pids:
        try:
            count += os.sched_getscheduler(pid) == os.SCHED_IDLE
        except OSError:
            pass
    return count


def mean_pss_mib(pids: list[int]) -> float | None:
    values = [m["pss"] for m in (process_memory(p) for p in pids) if m]
    return statistics.mean(values) / 2**20 if values else None


def produce_mb_s(bootstrap: str, mib: int | None = None, seconds: float | None = None) -> float:
    """The busy topic's produce rate (acks=1, lz4), MB/s from the first send to the last
    acknowledgement: `mib` of records, or as many as `seconds` of sending takes (a window
    long enough to beat the noise of a shared machine: 64 MiB is ~0.15 s here)."""
    from confluent_kafka import Producer

    from bench.client import make_payloads

    pool = make_payloads(RECORD_SIZE)
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "compression.type": "lz4", "linger.ms": 5,
                  "batch.size": 1000000, "delivery.report.only.error": True, "message.timeout.ms": 120000})
    p.list_topics(BUSY_TOPIC, timeout=30)
    n = mib * 2**20 // RECORD_SIZE if mib is not None else None
    failed = []
    t0 = time.perf_counter()
    deadline = t0 + (seconds or 0.0)
    i = 0
    while (i < n) if n is not None else (i & 255 or time.perf_counter() < deadline):
        while True:
            try:
                p.produce(BUSY_TOPIC, pool[i % len(pool)], None, 0, on_delivery=lambda e, m: e and failed.append(e))
                break
            except BufferError:
                p.poll(0.005)
        if not i & 255:
            p.poll(0)
        i += 1
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left or failed:
        raise RuntimeError(f"produce failed: {left} undelivered, {len(failed)} errors ({failed[:1]})")
    return i * RECORD_SIZE / elapsed / 1e6


def create_idle(bootstrap: str, first_index: int, partitions: int) -> list[str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics, index = [], first_index
    while partitions > 0:
        n = min(PARTITIONS_PER_TOPIC, partitions)
        topics.append(NewTopic(f"idle-{index}", n, 1))
        partitions -= n
        index += 1
    # One small topic per request: a controller creates each request's
    # replicas together, and on a loaded node 50 at once outran its
    # LeaderAndIsr timeout.
    for topic in topics:
        admin.create_topics([topic], operation_timeout=300, request_timeout=600)[topic.topic].result(timeout=900)
    return [t.topic for t in topics]


def wait_for_leaders(bootstrap: str, topics: list[str], timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=30)
        missing = [t for t in topics if t not in md.topics or md.topics[t].error
                   or any(p.leader < 0 for p in md.topics[t].partitions.values())]
        if not missing:
            return
        time.sleep(0.5)
    raise RuntimeError(f"no leaders after {timeout_s}s for {missing[:3]}...")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="10,100,300")
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--settle-s", type=float, default=10.0)
    ap.add_argument("--produce-mib", type=int, default=128)
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--min-free-mib-per-replica", type=int, default=60,
                    help="skip a count whose new replicas would not fit in MemAvailable")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    counts = sorted(int(c) for c in a.counts.split(","))

    import ray

    from core.worker_setup import BROKER_RUNTIME_ENV
    from tests.broker_process import BrokerProcess
    from tests.kafka_admin import create_topic

    overrides = dict(kv.split("=", 1) for kv in a.override)
    workdir = Path(tempfile.mkdtemp(prefix="rk-density-"))
    broker = BrokerProcess(workdir / "data", overrides=overrides)
    rows, baseline = [], None
    t_start = time.monotonic()
    try:
        broker.start()
        address = broker.nodes()[0]["ray_address"]
        ray.init(address=address, namespace="density-bench", runtime_env=BROKER_RUNTIME_ENV,
                 logging_level="WARNING", log_to_driver=False)

        @ray.remote(num_cpus=0)
        class Bare:
            async def ping(self):
                return os.getpid()

        bare = Bare.remote()
        bare_pid = ray.get(bare.ping.remote(), timeout=120)
        create_topic(broker.bootstrap, BUSY_TOPIC, partitions=1)
        wait_for_leaders(broker.bootstrap, [BUSY_TOPIC], 60)
        produce_mb_s(broker.bootstrap, 16)  # warm-up (connections, first segment)
        baseline = max(produce_mb_s(broker.bootstrap, a.produce_mib) for _ in range(2))
        print(f"busy topic alone: {baseline:.1f} MB/s", flush=True)
        root = broker.proc.pid
        busy_pids = set(actor_processes(root, "ReplicaActor"))
        have, next_index = 0, 0
        for n in counts:
            with open("/proc/meminfo") as f:
                avail = next(int(l.split()[1]) for l in f if l.startswith("MemAvailable")) // 1024
            if (n - have) * a.min_free_mib_per_replica > avail:
                print(f"skipping {n}: {avail} MiB available", flush=True)
                rows.append({"replicas": n, "skipped": f"{avail} MiB available"})
                continue
            t0 = time.monotonic()
            topics = create_idle(broker.bootstrap, next_index, n - have)
            next_index += len(topics)
            deadline = time.monotonic() + 60 + 3 * (n - have)
            while len(set(actor_processes(root, "ReplicaActor")) - busy_pids) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {len(set(actor_processes(root, 'ReplicaActor')) - busy_pids)}"
                                       f" of {n} replica processes")
                time.sleep(0.5)
            wait_for_leaders(broker.bootstrap, topics, 300)
            created = time.monotonic() - t0
            have = n
            idle_pids = sorted(set(actor_processes(root, "ReplicaActor")) - busy_pids)
            time.sleep(a.settle_s)
            window = idle_window(idle_pids, bare_pid, a.idle_s)
            load = os.getloadavg()
            sched_idle = idle_scheduled(idle_pids)
            mb_s = max(produce_mb_s(broker.bootstrap, a.produce_mib) for _ in range(2))
            normal_mb_s = None
            if sched_idle:
                # Same run, same replicas: the idle ones at normal priority (what
                # they were before issue 18), then back to SCHED_IDLE. They get
                # no traffic, so they do not switch back by themselves meanwhile.
                set_policy_of(idle_pids, os.SCHED_OTHER)
                try:
                    normal_mb_s = max(produce_mb_s(broker.bootstrap, a.produce_mib) for _ in range(2))
                finally:
                    set_policy_of(idle_pids, os.SCHED_IDLE)
            row = {"replicas": n, "create_s": created, "create_s_per_replica": created / (n - (rows[-1]["replicas"]
                   if rows and "skipped" not in rows[-1] else 0)),
                   **window, "replica_pss_mib": mean_pss_mib(idle_pids), "bare_pss_mib": mean_pss_mib([bare_pid]),
                   "produce_mb_s": mb_s, "produce_ratio": mb_s / baseline, "loadavg_1m": load[0],
                   "sched_idle_replicas": sched_idle, "produce_mb_s_idle_at_normal_priority": normal_mb_s}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        try:
            ray.shutdown()
        except Exception:
            pass
        broker.stop()
    table = render(rows, baseline, time.monotonic() - t_start)
    print(table)
    if a.out:
        Path(a.out).write_text(table)
    return 0


def render(rows: list[dict], baseline: float | None, took_s: float) -> str:
    head = ("| idle replicas | create s (per replica) | replica CPU % | bare CPU % | ratio | replica wake/s "
            "| bare wake/s | threads (replica/bare) | PSS MiB replica / bare | produce MB/s (× alone) "
            "| SCHED_IDLE replicas; produce MB/s with them at normal priority | load 1m |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['replicas']} | skipped: {r['skipped']} ||||||||||| |")
            continue
        lines.append(
            f"| {r['replicas']} | {r['create_s']:.0f} ({r['create_s_per_replica']:.2f}) "
            f"| {r['replica_cpu_pct']:.2f} | {r['bare_cpu_pct']:.2f} "
            f"| {r['replica_cpu_pct'] / max(r['bare_cpu_pct'], 1e-9):.2f} "
            f"| {r['replica_wakeups_s']:.0f} | {r['bare_wakeups_s']:.0f} "
            f"| {r['replica_threads']:.0f}/{r['bare_threads']} "
            f"| {r['replica_pss_mib']:.1f} / {r['bare_pss_mib']:.1f} "
            f"| {r['produce_mb_s']:.0f} ({r['produce_ratio']:.2f}) "
            f"| {r.get('sched_idle_replicas', 0)}; "
            f"{'-' if r.get('produce_mb_s_idle_at_normal_priority') is None else '%.0f' % r['produce_mb_s_idle_at_normal_priority']} "
            f"| {r['loadavg_1m']:.1f} |")
    base = f"busy 1-partition topic alone: {baseline:.0f} MB/s" if baseline else "no baseline"
    return head + "\n".join(lines) + f"\n\n{base}; run took {took_s:.0f} s\n"


if __name__ == "__main__":
    sys.exit(main())
