"""Consumer-group benchmark: rebalance time for N members joining, and offset
commit throughput, raykafka side by side with Tansu in one run.

    .venv/bin/python -m bench.groups [--members 10] [--commits 2000]

Each member is a confluent-kafka (librdkafka) consumer in its own thread,
subscribing to one topic with as many partitions as members. "Rebalance
time" is from the first subscribe until every member holds exactly one
partition (all in one generation). Commit throughput is synchronous
OffsetCommit calls per second from one member.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.targets import RaykafkaTarget, TansuTarget

RESULTS = Path(__file__).resolve().parent / "results"


def rebalance_seconds(bootstrap: str, topic: str, members: int, timeout_s: float = 120) -> float:
    group = f"bench-{topic}"
    assigned: dict[int, list[int]] = {}
    stop = threading.Event()
    consumers = []

    def member(i: int):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 10000,
                      "partition.assignment.strategy": "range", "enable.auto.commit": False})
        consumers.append(c)

        def on_assign(consumer, partitions):
            assigned[i] = [p.partition for p in partitions]

        def on_revoke(consumer, partitions):
            assigned.pop(i, None)

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set():
            c.poll(0.1)

    started = time.monotonic()
    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(members)]
    for t in threads:
        t.start()
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        owned = sorted(p for parts in list(assigned.values()) for p in parts)
        if len(assigned) == members and owned == list(range(members)):
            elapsed = time.monotonic() - started
            break
        time.sleep(0.02)
    else:
        elapsed = float("nan")
    stop.set()
    for t in threads:
        t.join(10)
    for c in consumers:
        try:
            c.close()
        except Exception:
            pass
    return elapsed


def commits_per_second(bootstrap: str, topic: str, commits: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"commit-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    started = time.monotonic()
    for i in range(commits):
        c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
    elapsed = time.monotonic() - started
    c.close()
    return commits / elapsed


def measure(target, members: int, commits: int) -> dict:
    bootstrap = target.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"groups-{int(time.time())}"
        admin.create_topics([NewTopic(topic, members, 1)])[topic].result(timeout=120)
        # The first group request creates __consumer_offsets: warm it up outside the timing.
        commits_per_second(bootstrap, topic, 5)
        return {"rebalance_s": rebalance_seconds(bootstrap, topic, members),
                "commits_per_s": commits_per_second(bootstrap, topic, commits)}
    finally:
        target.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--start-timeout", type=float, default=240)
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="raykafka-bench-groups-"))
    for sub in ("raykafka", "tansu"):
        (work / sub).mkdir()
    results = {}
    for name, make in (("raykafka", lambda: RaykafkaTarget(work / "raykafka", a.start_timeout)),
                       ("tansu", lambda: TansuTarget(work / "tansu", a.start_timeout))):
        try:
            results[name] = measure(make(), a.members, a.commits)
        except Exception as exc:  # a target that fails is reported, not hidden
            results[name] = {"error": repr(exc)[:300]}
    print(f"{'target':10} {'rebalance s':>12} {'commits/s':>10}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:10} FAIL {r['error']}")
        else:
            print(f"{name:10} {r['rebalance_s']:12.2f} {r['commits_per_s']:10.0f}")
    if all("error" not in r for r in results.values()):
        rk, ta = results["raykafka"], results["tansu"]
        print(f"ratio raykafka/tansu: rebalance time {rk['rebalance_s'] / ta['rebalance_s']:.2f}x "
              f"(lower is better), commits/s {rk['commits_per_s'] / ta['commits_per_s']:.2f}x")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"groups-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"members": a.members, "commits": a.commits, "results": results}, indent=1))
    print(f"results: {out}")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
