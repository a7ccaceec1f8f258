"""Producer throughput before, during and after a rebalance (issue 31), one run.

    flock /tmp/raykafka-heavy.lock .venv/bin/python -m bench.rebalance
        [--partitions 30] [--preload-mib 60] [--window-s 20] [--record-size 1024]
        [--max-moves 2] [--throttle-mib 10]

`raykafka start --nodes 3` on this machine; a topic of --partitions at RF=2
preloaded with --preload-mib (so every move copies a log); one acks=all
producer (confluent-kafka, flat out, one thread) runs throughout. Phases:
'before' (--window-s on 3 nodes), 'during' (a 4th node joins, SIGUSR1, until
/balancer/state shows no move planned or in flight), 'after' (--window-s on 4
balanced nodes). Reports MB/s acknowledged per phase and the ratios during/before
and after/before: figures from one run on one machine, so only the ratios
compare. A failed delivery or a rebalance that does not finish is FAIL.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from metadata.kafka_zk import KafkaZkClient
from tests.broker_process import BrokerProcess
from tests.kafka_admin import create_topic

TOPIC = "rebalance-bench"


class Meter:
    """Acknowledged bytes with their times, from one flat-out acks=all producer."""

    def __init__(self, bootstrap: str, record_size: int):
        self.value = b"x" * record_size
        self.acks: list[tuple[float, int]] = []
        self.failures: list = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                   "batch.size": 262144, "message.timeout.ms": 120000,
                                   "queue.buffering.max.kbytes": 65536, "enable.idempotence": False})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failures.append(err)
        else:
            self.acks.append((time.monotonic(), len(msg.value())))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(TOPIC, key=str(n).encode(), value=self.value, on_delivery=self._on_delivery)
                n += 1
            except BufferError:
                self._producer.poll(0.01)
                continue
            if n % 100 == 0:
                self._producer.poll(0)
        self._producer.flush(120)

    def start(self) -> "Meter":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)

    def mb_per_s(self, start: float, end: float) -> float:
        acked = sum(size for t, size in list(self.acks) if start <= t < end)
        return acked / max(end - start, 1e-9) / 1e6


def preload(bootstrap: str, mib: int, record_size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1048576,
                         "enable.idempotence": False})
    value = b"p" * record_size
    for n in range(mib * 1024 * 1024 // record_size):
        while True:
            try:
                producer.produce(TOPIC, key=str(n).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError("preload not acknowledged")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rebalance")
    ap.add_argument("--partitions", type=int, default=30)
    ap.add_argument("--preload-mib", type=int, default=60)
    ap.add_argument("--window-s", type=float, default=20)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--max-moves", type=int, default=2)
    ap.add_argument("--throttle-mib", type=float, default=10)
    ap.add_argument("--rebalance-timeout-s", type=float, default=600)
    a = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="rk-rebalance-"))
    cluster = BrokerProcess(workdir / "data", extra_args=["--nodes", "3"], log_name="rebalance.log", overrides={
        "offsets.topic.num.partitions": "1",
        "raykafka.balancer.max.concurrent.moves": str(a.max_moves),
        "raykafka.balancer.throttle.bytes.per.sec": str(int(a.throttle_mib * 1024 * 1024)),
        "raykafka.balancer.check.interval.ms": "1000"})
    cluster.start(timeout_s=300)
    result: dict = {"partitions": a.partitions, "preload_mib": a.preload_mib, "max_moves": a.max_moves,
                    "throttle_mib_per_s": a.throttle_mib}
    zk = KafkaZkClient(cluster.nodes()[0]["zk_connect"], session_timeout_ms=10_000).start()
    try:
        bootstrap = cluster.bootstrap_all
        create_topic(bootstrap, TOPIC, a.partitions, replication_factor=2)
        preload(bootstrap, a.preload_mib, a.record_size)
        meter = Meter(bootstrap, a.record_size).start()
        time.sleep(5)  # the producer's connections and batches settle before the first window
        before = (time.monotonic(), time.monotonic() + a.window_s)
        time.sleep(a.window_s)
        cluster.add_node()
        joined = time.monotonic()
        deadline = joined + a.rebalance_timeout_s
        while True:
            state = zk.balancer.state() or {}
            if state.get("moves_started") and not state.get("in_flight") and not state.get("plan"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"rebalance not done in {a.rebalance_timeout_s} s: {json.dumps(state)[:500]}")
            time.sleep(0.5)
        balanced = time.monotonic()
        time.sleep(a.window_s)
        after = (balanced, time.monotonic())
        meter.stop()
        if meter.failures:
            raise RuntimeError(f"{len(meter.failures)} records failed: {meter.failures[:3]}")
        rates = {"before": meter.mb_per_s(*before), "during": meter.mb_per_s(joined, balanced),
                 "after": meter.mb_per_s(*after)}
        result.update({f"{k}_mb_s": round(v, 2) for k, v in rates.items()})
        result.update({"during_over_before": round(rates["during"] / rates["before"], 2),
                       "after_over_before": round(rates["after"] / rates["before"], 2),
                       "rebalance_s": round(balanced - joined, 1), "moves": state.get("moves_completed")})
        print(f"rebalance onto a 4th node ({result['moves']} moves in {result['rebalance_s']} s, "
              f"{a.max_moves} at a time at {a.throttle_mib} MiB/s each): producer MB/s before "
              f"{rates['before']:.2f}, during {rates['during']:.2f}, after {rates['after']:.2f}; "
              f"during/before {result['during_over_before']}, after/before {result['after_over_before']}")
        print(json.dumps(result))
        return 0
    except Exception as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        print(cluster.log_tail(), file=sys.stderr)
        return 1
    finally:
        zk.close()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
