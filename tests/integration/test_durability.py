"""Durability: acknowledged records survive kill -9 of the whole broker tree
(Ray workers and ZooKeeper included); a torn last batch is cut at recovery."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.kafka_admin import create_topic

# kill -9 and recovery of a whole broker, twice: both cores busy (tests/conftest.py).
pytestmark = pytest.mark.cpu_heavy


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> dict[int, list[int]]:
    """acks=1; returns partition -> acknowledged offsets (by delivery reports)."""
    acked: dict[int, list[int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 2})

    def on_delivery(err, msg):
        if err is None:
            acked.setdefault(msg.partition(), []).append(msg.offset())

    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode() * 4, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    return acked


def consume_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 120) -> dict[int, list[tuple[int, bytes]]]:
    """Everything below each partition's high watermark (read when we start)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dur", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while any(out[p][-1][0] + 1 < end if out[p] else end > 0 for p, end in ends.items()):
        assert time.monotonic() < deadline, f"consumed {[len(v) for v in out.values()]} of {ends}"
        for m in consumer.consume(1000, timeout=0.5):
            assert m.error() is None, m.error()
            out[m.partition()].append((m.offset(), m.value()))
    consumer.close()
    return out


class CrashedBroker:
    """One data directory whose broker the module's tests kill -9 (the whole
    tree) and restart: each test finds a broker running on it and leaves the
    restarted one running, so the module starts a broker once per crash, not
    twice."""

    def __init__(self, data: Path):
        self.data = data
        self.restarts = 0
        self.broker = BrokerProcess(data).start()

    def kill9(self) -> None:
        self.broker.kill9()

    def restart(self) -> BrokerProcess:
        self.restarts += 1
        self.broker = BrokerProcess(self.data, log_name=f"broker-restart-{self.restarts}.log").start()
        return self.broker


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    crashed = CrashedBroker(tmp_path_factory.mktemp("durability") / "data")
    yield crashed
    assert crashed.broker.stop() == 0, crashed.broker.log_tail()


def test_acked_records_survive_kill9_and_offsets_continue(crashed):
    broker = crashed.broker
    topic = "durable"
    try:
        create_topic(broker.bootstrap, topic, 2)
        acked = produce(broker.bootstrap, topic, 5000)
        assert sum(len(v) for v in acked.values()) == 5000
        tree = broker.tree()
        assert len(tree) > 3, "expected Ray and ZooKeeper processes under the broker"
    finally:
        crashed.kill9()
    broker = crashed.restart()
    records = consume_all(broker.bootstrap, topic, 2)
    for partition, offsets in acked.items():
        present = {o for o, _ in records.get(partition, [])}
        assert set(offsets) <= present, f"partition {partition}: acknowledged records lost"
    more = produce(broker.bootstrap, topic, 100, start=5000)
    for partition, offsets in more.items():
        assert min(offsets) == max(acked[partition]) + 1, "new offsets must continue the log"


def test_torn_last_batch_is_dropped_at_recovery(crashed):
    broker = crashed.broker
    topic = "torn"
    try:
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(10):
            producer.produce(topic, value=f"batch-{i}".encode() * 20, partition=0)
            producer.flush(10)  # one batch per record
    finally:
        crashed.kill9()
    segment = sorted((crashed.data / "logs" / f"{topic}-0").glob("*.log"))[-1]
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.truncate(size - 40)  # cut the last batch in half, as a crash mid-write would
    broker = crashed.restart()
    records = consume_all(broker.bootstrap, topic, 1)[0]
    assert [o for o, _ in records] == list(range(9)), "the torn batch must not be served"
    assert all(v == f"batch-{o}".encode() * 20 for o, v in records)
    more = produce(broker.bootstrap, topic, 1)
    assert more[0] == [9], "the next offset reuses the cut one"
