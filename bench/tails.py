"""Latency tails a client's own test suite notices (issue 29 items 3 and 4),
on an idle single-node raykafka, with confluent-kafka (librdkafka):

  commit   --commits one-record transactions (linger.ms=1), each begin,
           produce, commit_transaction(); p50/p99/max of commit_transaction()
           and of the whole transaction. Kafka answers EndTxn once
           PREPARE_COMMIT is durable and writes the markers after; the next
           transaction's AddPartitionsToTxn waits (CONCURRENT_TRANSACTIONS)
           until they are written.
  fetch    a consumer parked in a long fetch (fetch.wait.max.ms=500,
           fetch.min.bytes=1) on a --partitions topic (4, as a client's own
           suite runs with num.partitions=4); a producer (acks=1,
           linger.ms=0) sends --records records one at a time, each only
           after the previous one was consumed, so every record meets a
           parked fetch; p50/p99/max of produce() -> poll() returning it.

    flock /tmp/raykafka-heavy.lock .venv/bin/python -m bench.tails
        [--commits 1000] [--records 500] [--partitions 4] [--only commit|fetch]
        [--raykafka-bootstrap HOST:PORT] [--raykafka-cmd CMD] [--override KEY=VALUE ...]

Figures are printed, never asserted (issue 29's target: commit p99 <= 30 ms,
parked fetch p99 within a few ms). Times on this shared 2-core machine are
noisy: compare figures of one run, or runs minutes apart on a quiet machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.run import add_raykafka_options
from bench.targets import RaykafkaTarget


def summary_ms(values_s: list[float]) -> str:
    values = sorted(v * 1000 for v in values_s)
    if not values:
        return "n/a"
    p99 = values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
    return (f"n={len(values)} p50={statistics.median(values):.1f} ms p99={p99:.1f} ms "
            f"max={values[-1]:.1f} ms")


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=60)[name].result(timeout=90)


def commit_latency(bootstrap: str, commits: int) -> tuple[list[float], list[float]]:
    topic = f"tails-commit-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1,
                         "transactional.id": f"tails-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(60)
    for _ in range(20):  # warm-up: coordinator found, leader connections open
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"warm-up")
        producer.commit_transaction(60)
    commit_s, whole_s = [], []
    for i in range(commits):
        began = time.perf_counter()
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"%d" % i)
        committing = time.perf_counter()
        producer.commit_transaction(60)
        done = time.perf_counter()
        commit_s.append(done - committing)
        whole_s.append(done - began)
    return commit_s, whole_s


def parked_fetch_latency(bootstrap: str, records: int, partitions: int) -> list[float]:
    topic = f"tails-fetch-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 500, "fetch.min.bytes": 1, "enable.auto.commit": False})
    consumer.subscribe([topic])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})

    def round_trip(value: bytes, timeout_s: float, partition: int = 0) -> float | None:
        sent = time.perf_counter()
        producer.produce(topic, value=value, partition=partition)
        producer.poll(0)
        deadline = sent + timeout_s
        while time.perf_counter() < deadline:
            message = consumer.poll(0.1)
            if message is None:
                producer.poll(0)
                continue
            if message.error():
                raise KafkaException(message.error())
            if message.value() == value:
                return time.perf_counter() - sent
        return None

    if round_trip(b"warm-up", 60) is None:  # the group formed and the consumer is at the end
        raise RuntimeError("the warm-up record never arrived")
    latencies = []
    for i in range(records):
        # Let the consumer's next fetch reach the broker and park there.
        time.sleep(0.02)
        latency = round_trip(b"%d" % i, 10, i % partitions)
        if latency is None:
            raise RuntimeError(f"record {i} not consumed within 10 s")
        latencies.append(latency)
    producer.flush(10)
    consumer.close()
    return latencies


class _Target(RaykafkaTarget):
    """RaykafkaTarget with --override settings on its start command."""
    overrides: list[str] = []

    def _spawn(self, cmd, pattern, env=None, cwd=None):
        return super()._spawn(cmd + self.overrides, pattern, env=env, cwd=cwd)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=4,
                    help="partitions of the fetch phase's topic (one consumer fetches them all; each record "
                         "goes to the next partition)")
    ap.add_argument("--only", choices=("commit", "fetch"))
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker setting for the raykafka this run starts")
    ap.add_argument("--start-timeout", type=float, default=180)
    add_raykafka_options(ap)
    a = ap.parse_args(argv)
    target = _Target(Path(tempfile.mkdtemp(prefix="raykafka-tails-")), a.start_timeout,
                     a.raykafka_bootstrap, a.raykafka_cmd)
    target.overrides = [x for kv in a.override for x in ("--override", kv)]
    bootstrap = target.start()
    try:
        print(f"raykafka at {bootstrap}{' (started here)' if not a.raykafka_bootstrap else ''}", flush=True)
        if a.only in (None, "commit"):
            commit_s, whole_s = commit_latency(bootstrap, a.commits)
            print(f"commit_transaction()            {summary_ms(commit_s)}", flush=True)
            print(f"begin+produce+commit            {summary_ms(whole_s)}", flush=True)
        if a.only in (None, "fetch"):
            latencies = parked_fetch_latency(bootstrap, a.records, a.partitions)
            print(f"produce -> consume, parked fetch {summary_ms(latencies)}", flush=True)
    finally:
        target.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
