"""A broker actor whose process dies comes back (issue 23): kill -9 of the
node's edge, or of its purgatory, and a confluent-kafka client produces and
consumes again on the same port within seconds, with every record it had
acknowledged still there.

One broker for the module. Its ZooKeeper session timeout is longer than the
10 s the client gets: a replacement edge that waited for the dead edge's
registration to expire would fail the test.
"""
from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.broker_process import BrokerProcess, wait_gone
from tests.kafka_admin import create_topic

BACK_WITHIN_S = 10.0
PARTITIONS = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("supervision") / "data",
                            overrides={"zookeeper.session.timeout.ms": "30000",
                                       "offsets.topic.num.partitions": "1"})
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


def node(broker: BrokerProcess) -> dict:
    return json.loads((broker.data_dir / "nodes.json").read_text())[0]


class Ledger:
    """A producer (acks=all) that remembers what the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value
        self.errors: list = []
        # A client that reconnects promptly (librdkafka's default backoff grows to 10 s).
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                                  "retry.backoff.ms": 50, "retry.backoff.max.ms": 500})
        self.sent = 0

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            self.errors.append(err)

    def send(self, count: int) -> None:
        for _ in range(count):
            self.producer.produce(self.topic, value=f"{self.topic}-{self.sent}".encode(), on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        return self.producer.flush(timeout_s)


def consume_everything(bootstrap: str, topic: str, timeout_s: float = 30) -> dict[tuple[int, int], bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + timeout_s
        while any(end > 0 and (p, end - 1) not in seen for p, end in ends.items()):
            assert time.monotonic() < deadline, f"consumed {len(seen)} records of {ends}"
            for m in consumer.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                seen[(m.partition(), m.offset())] = m.value()
        return seen
    finally:
        consumer.close()


def back_within(broker: BrokerProcess, ledger: Ledger, killed_at: float) -> float:
    """Seconds from the kill until a record produced after it is acknowledged."""
    before = len(ledger.acked)
    ledger.send(1)
    while time.monotonic() - killed_at < 60:
        ledger.producer.poll(0.05)
        if len(ledger.acked) > before:
            return time.monotonic() - killed_at
    raise AssertionError(f"no produce acknowledged 60 s after the kill:\n{broker.log_tail()}")


def kill9(pid: int) -> float:
    proc = psutil.Process(pid)
    proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_gone([proc], 10)
    return killed_at


def check_all_acknowledged_present(broker: BrokerProcess, ledger: Ledger) -> int:
    assert ledger.flush(60) == 0
    assert not ledger.errors, f"deliveries failed for good: {ledger.errors[:5]}"
    present = consume_everything(broker.bootstrap, ledger.topic)
    lost = {k: v for k, v in ledger.acked.items() if present.get(k) != v}
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    return len(ledger.acked)


def test_a_killed_edge_is_replaced_on_the_same_port(broker):
    topic = "supervised-edge"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    ledger = Ledger(broker.bootstrap, topic)
    ledger.send(2000)
    assert ledger.flush(60) == 0 and len(ledger.acked) == 2000
    before = node(broker)

    killed_at = kill9(before["edge_pid"])
    ledger.send(200)  # in flight across the outage: retried by the client, not lost
    took = back_within(broker, ledger, killed_at)
    print(f"edge kill -9: produce acknowledged again after {took:.2f} s")
    assert took < BACK_WITHIN_S, f"the client produced again only after {took:.1f} s"

    after = node(broker)
    assert after["edge_pid"] != before["edge_pid"] and psutil.pid_exists(after["edge_pid"])
    assert (after["host"], after["port"]) == (before["host"], before["port"]) == (broker.host, broker.port)
    ledger.send(500)
    count = check_all_acknowledged_present(broker, ledger)
    print(f"edge kill -9: {count} acknowledged records all present")
    assert count == ledger.sent == 2701


def test_a_killed_purgatory_comes_back_and_acks_all_works_again(broker):
    topic = "supervised-purgatory"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    ledger = Ledger(broker.bootstrap, topic)
    ledger.send(2000)
    assert ledger.flush(60) == 0 and len(ledger.acked) == 2000
    before = node(broker)

    # A consumer tailing partition 0 long-polls: its fetches park in the purgatory
    # for up to fetch.wait.max.ms, and only a progress report there ends them early.
    tail = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tail", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 20000, "reconnect.backoff.max.ms": 500})
    end = tail.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    tail.assign([TopicPartition(topic, 0, end)])
    assert tail.consume(10, timeout=1.0) == []  # a fetch is parked now

    ledger.send(200)  # some of these are in flight when it dies
    killed_at = kill9(before["purgatory_pid"])
    took = back_within(broker, ledger, killed_at)
    print(f"purgatory kill -9: acks=all produce acknowledged again after {took:.2f} s")
    assert took < BACK_WITHIN_S, f"acks=all produce worked again only after {took:.1f} s"

    # New parked fetches reach the restarted purgatory, and the leader reports to it.
    try:
        time.sleep(1.0)  # the consumer's fetch is parked again, now in the new purgatory
        sent_at = time.monotonic()
        ledger.producer.produce(topic, value=b"wake-up", partition=0, on_delivery=ledger._report)
        ledger.sent += 1
        ledger.producer.flush(10)
        got = []
        while not any(m.value() == b"wake-up" for m in got):
            assert time.monotonic() - sent_at < 10, "the tailing consumer never got the new record"
            got += [m for m in tail.consume(100, timeout=0.2) if m.error() is None]
        waited = time.monotonic() - sent_at
        print(f"purgatory kill -9: a parked fetch woke {waited:.2f} s after the produce")
        assert waited < 5, "the parked fetch was not woken by the partition's progress"
    finally:
        tail.close()

    deadline = time.monotonic() + 10
    while node(broker)["purgatory_pid"] == before["purgatory_pid"]:
        assert time.monotonic() < deadline, "nodes.json never named the restarted purgatory"
        time.sleep(0.2)
    assert psutil.pid_exists(node(broker)["purgatory_pid"])
    assert node(broker)["edge_pid"] == before["edge_pid"], "the edge itself was not touched"
    ledger.send(500)
    count = check_all_acknowledged_present(broker, ledger)
    print(f"purgatory kill -9: {count} acknowledged records all present")
    assert count == ledger.sent == 2702


def coordinator_pids(broker: BrokerProcess) -> list[int]:
    pids = []
    for proc in broker.tree():
        try:
            if "GroupCoordinatorActor" in " ".join(proc.cmdline()):
                pids.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


def test_a_killed_group_coordinator_comes_back_with_its_committed_offsets(broker):
    from confluent_kafka import KafkaException

    topic = "supervised-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    ledger = Ledger(broker.bootstrap, topic)
    ledger.send(100)
    assert ledger.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "supervised", "enable.auto.commit": False,
                         "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50})
    try:
        tps = [TopicPartition(topic, p, 7 + p) for p in range(PARTITIONS)]
        consumer.commit(offsets=tps, asynchronous=False)
        [pid] = coordinator_pids(broker)
        killed_at = kill9(pid)
        # The restarted coordinator has reloaded the group's offsets from the log.
        while True:
            try:
                committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=2)
                if all(tp.error is None for tp in committed):
                    break
            except KafkaException:
                pass
            assert time.monotonic() - killed_at < 30, broker.log_tail()
        took = time.monotonic() - killed_at
        print(f"group coordinator kill -9: committed offsets served again after {took:.2f} s")
        assert took < BACK_WITHIN_S
        assert [(tp.partition, tp.offset) for tp in committed] == [(p, 7 + p) for p in range(PARTITIONS)]
        consumer.commit(offsets=[TopicPartition(topic, p, 20) for p in range(PARTITIONS)], asynchronous=False)
        assert [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                                       timeout=10)] == [20] * PARTITIONS
        new_pids = coordinator_pids(broker)
        assert len(new_pids) == 1 and new_pids != [pid], "Ray restarted the coordinator in a new process"
    finally:
        consumer.close()
