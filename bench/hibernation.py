"""Idle replicas hibernate (issue 30): the scale table at 1,000 and 3,000
hosted partitions on one node. One command:

    .venv/bin/python -m bench.hibernation [--counts 1000,3000] [--write 1000] \\
        [--hibernate-ms 5000] [--busy-rounds 5] [--busy-s 3] [--out FILE.md]

Starts a single-node broker (a real `raykafka start`, tests/broker_process.py)
with its default settings except raykafka.replica.hibernate.ms (on, and short
so the run is short), and for each count N (cumulative: the node grows):

* create: seconds to create N 1-replica partitions (topics of 4), leaders in
  the metadata for all (no replica actor starts: they are pooled);
* written: --write of them (all, up to N) get one record each (acks=all,
  confluent-kafka, 50 partitions per flush) and are read back, checked;
* max live: the most ReplicaActor processes seen at once while doing it
  (sampled every 0.2 s), against raykafka.replicas.per.node.max;
* idle CPU: the broker tree's CPU over 10 s once they have hibernated;
* busy ratio: a busy 1-partition topic's produce rate then, against its rate
  alone at the start (same run; the machine is shared, so compare ratios):
  the median of --busy-rounds windows of --busy-s seconds each, after a warm-up
  produce (which wakes the topic if it hibernated), with their range;
* wake p50/p99: the first produce (acks=all, long-lived producer) to 40
  hibernated partitions, one at a time (--wake-gap-s apart), each acknowledged.

The replica processes counted include the node's spares (raykafka.replica.spares:
started, empty replica actors a wake adopts; they take slots of the live limit).

    .venv/bin/python -m bench.hibernation --wake-only [--wakes 40] [--spares 0,4] \\
        [--nodes 3 --replication-factor 3]

compares wakes side by side in one run: for each spares setting a fresh broker,
--wakes 1-partition topics written once, hibernated, then the first produce to
each, as above.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.density import BUSY_TOPIC, produce_mb_s, wait_for_leaders  # noqa: E402
from bench.procstat import actor_processes  # noqa: E402

PARTITIONS_PER_TOPIC = 4
WAVE = 50


class LiveSampler:
    def __init__(self, root: int):
        self.root, self.peak = root, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, len(actor_processes(self.root, "ReplicaActor")))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def create(bootstrap: str, first_topic: int, partitions: int) -> list[str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"h-{first_topic + i}" for i in range(partitions // PARTITIONS_PER_TOPIC)]
    for start in range(0, len(names), 50):
        chunk = [NewTopic(n, PARTITIONS_PER_TOPIC, 1) for n in names[start:start + 50]]
        for future in admin.create_topics(chunk, operation_timeout=300, request_timeout=600).values():
            future.result(timeout=900)
    return names


def write_and_read(bootstrap: str, targets: list[tuple[str, int]]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 300000})
    for start in range(0, len(targets), WAVE):
        failed = []
        for topic, p in targets[start:start + WAVE]:
            producer.produce(topic, f"{topic}/{p}".encode(), partition=p,
                             on_delivery=lambda e, m: e and failed.append(e))
        if producer.flush(300) or failed:
            raise RuntimeError(f"produce failed: {failed[:2]}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hibernation-read",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    for start in range(0, len(targets), WAVE):
        wave = targets[start:start + WAVE]
        consumer.assign([TopicPartition(t, p, 0) for t, p in wave])
        want = {(t, p): f"{t}/{p}".encode() for t, p in wave}
        deadline = time.monotonic() + 300
        while want and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                key = (msg.topic(), msg.partition())
                if want.get(key) == msg.value():
                    del want[key]
        if want:
            raise RuntimeError(f"not read back: {list(want)[:3]}")
    consumer.close()


def wait_hibernated(root: int, timeout_s: float, spares: int, nodes: int = 1) -> float:
    started = time.monotonic()
    # __consumer_offsets' 3 partitions stay live (RF = min(3, nodes)), and each node's spares
    while len(actor_processes(root, "ReplicaActor")) > 3 * min(3, nodes) + spares * nodes:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError("replicas did not hibernate")
        time.sleep(0.5)
    return time.monotonic() - started


def tree_cpu(broker) -> float:
    return broker.cpu_seconds()


def wake_latencies(bootstrap: str, root: int, targets: list[tuple[str, int]], gap_s: float = 0.0) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.list_topics(timeout=30)
    out = []
    for topic, p in targets:
        acked = []
        t0 = time.perf_counter()
        producer.produce(topic, b"wake", partition=p, on_delivery=lambda e, m: acked.append(e))
        producer.flush(60)
        if not acked or acked[0] is not None:
            raise RuntimeError(f"wake produce failed: {acked}")
        out.append(time.perf_counter() - t0)
        time.sleep(gap_s)  # independent arrivals, not a burst (a burst past the spares starts cold)
    return out


def wake_only(args) -> str:
    """First produce to a hibernated partition, p50/p99, per spares setting, side by side."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.broker_process import BrokerProcess

    lines = []
    for spares in [int(x) for x in args.spares.split(",")]:
        tmp = tempfile.mkdtemp(prefix="bench-wake-")
        broker = BrokerProcess(Path(tmp) / "data", {"raykafka.replica.hibernate.ms": str(args.hibernate_ms),
                                                    "raykafka.replica.spares": str(spares)},
                               extra_args=["--nodes", str(args.nodes)] if args.nodes > 1 else None)
        broker.start(timeout_s=240)
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            names = [f"wake-{i}" for i in range(args.wakes)]
            rf = args.replication_factor
            # acks=all at RF > 1 with Kafka's production setting: a wake waits for a follower too.
            config = {"min.insync.replicas": "2"} if rf > 1 else {}
            for future in admin.create_topics([NewTopic(n, 1, rf, config=config) for n in names]).values():
                future.result(timeout=300)
            wait_for_leaders(broker.bootstrap, names, 300)
            targets = [(n, 0) for n in names]
            write_and_read(broker.bootstrap, targets)
            wait_hibernated(broker.proc.pid, 600, spares, args.nodes)
            time.sleep(args.settle_s)  # let the write phase's load decay (its spares restart)
            load = os.getloadavg()[0]
            wakes = wake_latencies(broker.bootstrap, broker.proc.pid, targets, args.wake_gap_s)
            lines.append(f"| {spares} | {len(wakes)} | {quantile(wakes, 0.5) * 1000:.0f} | "
                         f"{quantile(wakes, 0.99) * 1000:.0f} | {max(wakes) * 1000:.0f} | {load:.0f} |")
            print(lines[-1], flush=True)
        finally:
            broker.stop()
    return ("first produce (acks=all) to a hibernated partition, one at a time "
            f"{args.wake_gap_s:g} s apart; hibernate.ms={args.hibernate_ms}; {args.nodes} node(s), "
            f"replication factor {args.replication_factor}\n\n"
            "| spares | wakes | p50 ms | p99 ms | max ms | load avg |\n|---|---|---|---|---|---|\n"
            + "\n".join(lines) + "\n")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def main(argv=None) -> int:
    from tests.broker_process import BrokerProcess

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="1000,3000")
    ap.add_argument("--write", type=int, default=1000, help="partitions written and read back per step")
    # Not much shorter than a wake under load: at 5 s on the shared VM (load 50-140) a wave of
    # 50 wakes took ~30 s (4 actor starts at a time), so the first woken hibernated again before
    # the fetch that woke them answered, and 200 partitions cost 900 wakes.
    ap.add_argument("--hibernate-ms", type=int, default=30000)
    ap.add_argument("--busy-rounds", type=int, default=5)
    ap.add_argument("--busy-s", type=float, default=3.0, help="seconds of sending per busy-topic window")
    ap.add_argument("--wakes", type=int, default=40)
    ap.add_argument("--wake-gap-s", type=float, default=1.0)
    ap.add_argument("--spares", default="4", help="raykafka.replica.spares (--wake-only: a list to compare)")
    ap.add_argument("--wake-only", action="store_true")
    ap.add_argument("--nodes", type=int, default=1, help="--wake-only: local nodes (raykafka start --nodes)")
    ap.add_argument("--replication-factor", type=int, default=1, help="--wake-only: of the woken topics")
    ap.add_argument("--settle-s", type=float, default=0.0, help="--wake-only: pause between hibernation and wakes")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.wake_only:
        table = wake_only(args)
        print(table)
        if args.out:
            Path(args.out).write_text(table)
        return 0
    spares = int(args.spares)
    counts = [int(c) for c in args.counts.split(",")]
    rows = []
    tmp = tempfile.mkdtemp(prefix="bench-hibernation-")
    print(f"broker data and log under {tmp} (removed after a clean run)", flush=True)
    if True:
        broker = BrokerProcess(Path(tmp) / "data", {"raykafka.replica.hibernate.ms": str(args.hibernate_ms),
                                                    "raykafka.replica.spares": str(spares)})
        broker.start()
        try:
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            # Bounded on disk: the busy windows write ~1 GB each.
            admin.create_topics([NewTopic(BUSY_TOPIC, 1, 1, config={"retention.bytes": str(1 << 30),
                                                                    "segment.bytes": str(128 << 20)})])[
                BUSY_TOPIC].result(timeout=120)
            wait_for_leaders(broker.bootstrap, [BUSY_TOPIC], 60)
            root = broker.proc.pid
            alone_rates = busy_rates(broker.bootstrap, args.busy_rounds, args.busy_s)
            alone = statistics.median(alone_rates)
            print(f"busy topic alone: {[round(r) for r in alone_rates]} MB/s", flush=True)
            hosted, topics = 0, []
            for count in counts:
                t0 = time.monotonic()
                new = create(broker.bootstrap, len(topics), count - hosted)
                wait_for_leaders(broker.bootstrap, new, 600)
                create_s = time.monotonic() - t0
                topics += new
                hosted = count
                targets = [(t, p) for t in new for p in range(PARTITIONS_PER_TOPIC)][:args.write]
                sampler = LiveSampler(root)
                t0 = time.monotonic()
                write_and_read(broker.bootstrap, targets)
                write_s = time.monotonic() - t0
                settle_s = wait_hibernated(root, 600, spares)
                peak = sampler.stop()
                cpu0 = tree_cpu(broker)
                time.sleep(10)
                idle_cpu = (tree_cpu(broker) - cpu0) / 10
                rates = busy_rates(broker.bootstrap, args.busy_rounds, args.busy_s)
                busy = statistics.median(rates)
                wait_hibernated(root, 600, spares)
                load = os.getloadavg()[0]
                wakes = wake_latencies(broker.bootstrap, root, targets[:args.wakes], args.wake_gap_s)
                rows.append({"hosted": count, "create_s": create_s, "written": len(targets), "write_read_s": write_s,
                             "settle_s": settle_s, "max_live": peak, "idle_cpu": idle_cpu, "busy_mb_s": busy,
                             "busy_range": (min(rates), max(rates)),
                             "ratio": busy / alone, "wake_p50_ms": quantile(wakes, 0.5) * 1000,
                             "wake_p99_ms": quantile(wakes, 0.99) * 1000, "load": load})
                print(rows[-1], flush=True)
        finally:
            broker.stop()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    table = render(rows, alone, alone_rates, args)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    return 0


def busy_rates(bootstrap: str, rounds: int, seconds: float) -> list[float]:
    """The busy topic's produce rate, MB/s, in `rounds` windows of `seconds` each, after a
    warm-up produce that wakes it (a wake is not what this measures)."""
    produce_mb_s(bootstrap, mib=16)
    return [produce_mb_s(bootstrap, seconds=seconds) for _ in range(rounds)]


def render(rows: list[dict], alone: float, alone_rates: list[float], args) -> str:
    head = ("| hosted | create s | written+read | write+read s | max live replica processes | idle CPU (cores) "
            "| busy MB/s: median (range), ratio to alone | wake p50 / p99 ms | load avg at wakes |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['hosted']} | {r['create_s']:.0f} | {r['written']} | {r['write_read_s']:.0f} | {r['max_live']} "
        f"| {r['idle_cpu']:.2f} | {r['busy_mb_s']:.0f} ({r['busy_range'][0]:.0f}-{r['busy_range'][1]:.0f}), "
        f"**{r['ratio']:.2f}x** | {r['wake_p50_ms']:.0f} / "
        f"{r['wake_p99_ms']:.0f} | {r.get('load', 0):.0f} |\n" for r in rows)
    return (f"busy topic alone: median {alone:.0f} MB/s (range {min(alone_rates):.0f}-{max(alone_rates):.0f}) over "
            f"{len(alone_rates)} windows of {args.busy_s:g} s; raykafka.replica.hibernate.ms={args.hibernate_ms}, "
            f"raykafka.replica.spares={args.spares}, other settings default\n\n" + head + body)


if __name__ == "__main__":
    sys.exit(main())
