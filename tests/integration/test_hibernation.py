"""Idle replicas hibernate and wake on demand (issue 30): a real broker
subprocess, confluent-kafka clients. Each test module starts its own broker,
with a short raykafka.replica.hibernate.ms and a small live limit so the
pool evicts and wakes within seconds.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, replica_processes
from tests.cli_runner import wait_for
from tests.kafka_admin import pool_stats

# Replica processes started and stopped over and over (12 partitions through 4 live
# slots), then a kill -9 and recovery: both cores busy (tests/conftest.py).
pytestmark = pytest.mark.cpu_heavy

LIVE_MAX = 4
# Started, empty replica actors a wake adopts (raykafka.replica.spares): they are replica
# processes too, and take slots of the live limit.
SPARES = 1
TOPICS, PARTITIONS = 3, 4  # 12 partitions hosted, at most 4 live


def internal_replicas(broker: BrokerProcess) -> int:
    """Replicas that never hibernate: the internal topics' (RF=1 on one node)."""
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
    return sum(len(t.partitions) for name, t in md.topics.items() if name.startswith("__"))


def wait_all_hibernated(broker: BrokerProcess) -> None:
    """Only the internal topics' replicas and the spares are left."""
    wait_for(lambda: replica_processes(broker) == internal_replicas(broker) + SPARES, 60,
             "idle replicas to hibernate")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("hibernation") / "data",
                      {"raykafka.replica.hibernate.ms": "1500", "raykafka.replicas.per.node.max": str(LIVE_MAX),
                       "raykafka.replica.spares": str(SPARES), "raykafka.metrics.report.interval.ms": "1000",
                       "transaction.state.log.num.partitions": "1"})
    b.start()
    yield b
    b.stop()


def produce_one(bootstrap: str, topic: str, partition: int, value: bytes) -> float:
    """Seconds until the record is acknowledged (acks=all)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    acked = []
    started = time.monotonic()
    producer.produce(topic, value, partition=partition,
                     on_delivery=lambda err, msg: acked.append((err, time.monotonic())))
    producer.flush(60)
    assert acked and acked[0][0] is None, acked
    return acked[0][1] - started


def read_all(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < expected and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    return values


def test_partitions_past_the_live_limit_are_hosted_written_and_read_back(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    names = [f"hib-{uuid.uuid4().hex[:6]}-{i}" for i in range(TOPICS)]
    futures = admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names], operation_timeout=120)
    for future in futures.values():
        future.result(timeout=150)
    seen_live = [replica_processes(broker)]
    for name in names:
        for p in range(PARTITIONS):
            produce_one(broker.bootstrap, name, p, f"{name}/{p}".encode())
            seen_live.append(replica_processes(broker))
    for name in names:
        for p in range(PARTITIONS):
            assert read_all(broker.bootstrap, name, p, 1) == [f"{name}/{p}".encode()]
            seen_live.append(replica_processes(broker))
    md = admin.list_topics(timeout=30)
    for name in names:
        assert all(md.topics[name].partitions[p].leader >= 0 for p in range(PARTITIONS))
    # Internal topics' replicas (__consumer_offsets, 3 here) never hibernate and are not pooled.
    offsets_replicas = len(md.topics["__consumer_offsets"].partitions) if "__consumer_offsets" in md.topics else 0
    assert max(seen_live) <= LIVE_MAX + offsets_replicas, seen_live
    # Idle ones hibernate: only the internal topic's replicas stay live.
    wait_all_hibernated(broker)


def test_first_produce_to_a_hibernated_partition_is_acked_and_nothing_is_lost(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"wake-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=120)[name].result(timeout=150)
    produce_one(broker.bootstrap, name, 0, b"before")
    times = []
    for i in range(3):
        wait_all_hibernated(broker)
        times.append(produce_one(broker.bootstrap, name, 0, f"after-{i}".encode()))
    assert read_all(broker.bootstrap, name, 0, 4) == [b"before", b"after-0", b"after-1", b"after-2"]
    print(f"first produce to a hibernated partition: {[round(t * 1000) for t in times]} ms")


def test_a_transaction_commits_on_a_woken_partition(broker):
    """A spare adopts the woken partition and has no actor name: the transaction
    coordinator finds it through the node's edge for its markers."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"txn-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=120)[name].result(timeout=150)
    produce_one(broker.bootstrap, name, 0, b"plain")
    wait_all_hibernated(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"t-{name}"})
    producer.init_transactions(120)  # creates __transaction_state
    for i in range(2):
        wait_all_hibernated(broker)
        producer.begin_transaction()
        producer.produce(name, f"txn-{i}".encode(), partition=i % 2)
        if i == 0:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(name, 0, 0), TopicPartition(name, 1, 0)])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    assert sorted(values) == [b"plain", b"txn-1"], values


def test_a_consumer_group_resumes_on_hibernated_partitions_from_its_committed_offsets(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"group-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=120)[name].result(timeout=150)
    for i in range(4):
        produce_one(broker.bootstrap, name, i % 2, f"r{i}".encode())
    group = f"g-{uuid.uuid4().hex[:6]}"
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest"}
    consumer = Consumer(config)
    consumer.subscribe([name])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got.append(msg)
            consumer.commit(msg, asynchronous=False)
    consumer.close()
    assert len(got) == 2
    wait_all_hibernated(broker)
    for i in range(4, 6):
        produce_one(broker.bootstrap, name, i % 2, f"r{i}".encode())
    wait_all_hibernated(broker)
    consumer = Consumer(config)
    consumer.subscribe([name])
    rest = []
    deadline = time.monotonic() + 60
    while len(rest) < 4 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            rest.append(msg.value())
    consumer.close()
    # Every record not committed before, none of those committed (one per partition was
    # read and committed first).
    assert len(rest) == 4 and not set(rest) & {m.value() for m in got}, (rest, [m.value() for m in got])


def test_acked_records_survive_kill9_while_replicas_hibernate(broker):
    """Some partitions hibernated, some woken and live, then kill -9 of the
    whole broker tree: after a restart on the same data every acknowledged
    record is there and new offsets continue the logs. It crashes the module's
    broker (one start saved), so it stays the module's last test."""
    from tests.integration.test_durability import consume_all, produce

    topic = "hibernating"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a destroyed client fails its futures
        admin.create_topics([NewTopic(topic, 6, 1)], operation_timeout=120)[topic].result(timeout=150)
        acked = produce(broker.bootstrap, topic, 600)
        wait_all_hibernated(broker)
        for partition in (0, 1):  # woken again, live at the kill
            produce_one(broker.bootstrap, topic, partition, b"live")
        assert replica_processes(broker) >= 1
        # Each produce and fetch of 6 partitions wakes more replicas at once than the live
        # limit of 4: the wakes took turns within it, none waited out the slot wait and
        # started over it.
        assert pool_stats(broker.bootstrap, broker.nodes()[0]["broker_id"])["over_limit"] == 0
    finally:
        broker.kill9()
    broker = BrokerProcess(broker.data_dir, broker.overrides, log_name="broker-restarted.log").start()
    try:
        records = consume_all(broker.bootstrap, topic, 6)
        # Likewise one consumer reading the 6 partitions, all hibernated after the restart.
        assert pool_stats(broker.bootstrap, broker.nodes()[0]["broker_id"])["over_limit"] == 0
        for partition, offsets in acked.items():
            present = {o for o, _ in records.get(partition, [])}
            assert set(offsets) <= present, f"partition {partition}: acknowledged records lost"
        assert all(records[p][-1][1] == b"live" for p in (0, 1))
        more = produce(broker.bootstrap, topic, 60, start=600)
        for partition, offsets in more.items():
            assert min(offsets) == records[partition][-1][0] + 1, "new offsets must continue the log"
    finally:
        assert broker.stop() == 0
