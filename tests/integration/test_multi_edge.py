"""Several edge processes on one node (raykafka.edge.processes = 2): both bind
the Kafka port with SO_REUSEPORT, the kernel spreads connections over them,
and both serve clients with the same metadata (the primary edge forwards the
controller's UpdateMetadata to its sibling).

Which edge a connection lands on is a hash of its addresses, so the tests open
enough connections (16 or more) that all of them landing on one edge would be
a ~1 in 30,000 event.
"""
from __future__ import annotations

import socket
import struct
import time
import uuid

import psutil
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.cli_runner import wait_for
from tests.kafka_admin import pool_stats

EDGES = 2
PARTITIONS = 4
PRODUCERS = 8
RECORDS_PER_PRODUCER = 2_500  # 20,000 in all
API_VERSIONS = 18
HIBERNATE_MS = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("multi-edge") / "data", log_name="multi-edge.log",
                            overrides={"raykafka.edge.processes": str(EDGES),
                                       "offsets.topic.num.partitions": "1",
                                       # Short, so that the pooled replicas hibernate within the test.
                                       "raykafka.replica.hibernate.ms": str(HIBERNATE_MS)})
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


def edge_pids(broker: BrokerProcess) -> list[int]:
    (node,) = broker.nodes()
    return node["edge_pids"]


def served_by(pid: int, port: int) -> int:
    """Established connections the process `pid` accepted on `port`."""
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port)


def api_versions(sock: socket.socket, correlation_id: int) -> int:
    """Send ApiVersions v0; returns the error code of the answer."""
    client_id = b"multi-edge-test"
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    answer = recv_exactly(sock, size)
    got_id, error_code = struct.unpack(">ih", answer[:6])
    assert got_id == correlation_id
    return error_code


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "broker closed the connection"
        data += chunk
    return data


def test_every_edge_listens_on_the_port_and_serves_connections(broker):
    pids = edge_pids(broker)
    assert len(pids) == EDGES and len(set(pids)) == EDGES
    assert all(psutil.pid_exists(pid) for pid in pids)
    sockets = [socket.create_connection((broker.host, broker.port), timeout=10) for _ in range(16)]
    try:
        for i, sock in enumerate(sockets):
            assert api_versions(sock, correlation_id=1000 + i) == 0
        counts = {pid: served_by(pid, broker.port) for pid in pids}
        assert sum(counts.values()) >= len(sockets), counts
        assert all(n > 0 for n in counts.values()), f"connections per edge pid: {counts}"
    finally:
        for sock in sockets:
            sock.close()


def test_produce_and_consume_across_edges_is_complete_and_ordered(broker):
    topic = f"multi-edge-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)

    producers = [Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all",
                           "client.id": f"producer-{i}"}) for i in range(PRODUCERS)]
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    for seq in range(RECORDS_PER_PRODUCER):
        for i, producer in enumerate(producers):
            producer.produce(topic, key=f"{i}".encode(), value=f"{i}:{seq}".encode(),
                             partition=(i + seq) % PARTITIONS, on_delivery=delivered)
        if seq % 500 == 0:
            for producer in producers:
                producer.poll(0)
    for producer in producers:
        assert producer.flush(60) == 0
    assert not failures, failures[:5]

    consumers = []
    for p in range(PARTITIONS):
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}-{p}",
                             "enable.auto.commit": False, "client.id": f"consumer-{p}"})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        consumers.append(consumer)
    expected_per_partition = PRODUCERS * RECORDS_PER_PRODUCER // PARTITIONS
    received: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(len(v) < expected_per_partition for v in received.values()):
        for p, consumer in enumerate(consumers):
            for msg in consumer.consume(1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                producer_index, seq = map(int, msg.value().decode().split(":"))
                received[msg.partition()].append((producer_index, seq))

    # With producers and consumers connected, both edges hold some of the connections.
    counts = {pid: served_by(pid, broker.port) for pid in edge_pids(broker)}
    for consumer in consumers:
        consumer.close()
    assert all(n > 0 for n in counts.values()), f"connections per edge pid: {counts}"

    for p in range(PARTITIONS):
        assert len(received[p]) == expected_per_partition, (p, len(received[p]))
        for i in range(PRODUCERS):
            seqs = [seq for producer_index, seq in received[p] if producer_index == i]
            assert seqs == [s for s in range(RECORDS_PER_PRODUCER) if (i + s) % PARTITIONS == p], \
                f"partition {p}, producer {i}: records missing or out of order"


def node_pool_stats(broker: BrokerProcess) -> dict[str, int]:
    """The node's replica pool counts: the primary edge's own, or a sibling's copy (~2 s old)."""
    (node,) = broker.nodes()
    return pool_stats(broker.bootstrap, node["broker_id"])


def produce_round(broker: BrokerProcess, topic: str, round_no: int) -> dict[int, int]:
    """PRODUCERS producers (connections spread over both edges), acks=all; -> per-edge connections seen."""
    producers = [Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all",
                           "client.id": f"round-{round_no}-{i}"}) for i in range(PRODUCERS)]
    failures = []
    for i, producer in enumerate(producers):
        for seq in range(100):
            producer.produce(topic, value=f"{round_no}:{i}:{seq}".encode(), partition=(i + seq) % PARTITIONS,
                             on_delivery=lambda err, _m: err is not None and failures.append(err))
    for producer in producers:
        assert producer.flush(60) == 0
    assert not failures, failures[:5]
    counts = {pid: served_by(pid, broker.port) for pid in edge_pids(broker)}
    del producers
    return counts


def test_pooled_replicas_hibernate_and_wake_through_every_edge(broker):
    """Issue 30 with raykafka.edge.processes = 2: the primary edge keeps the pool and the sibling
    leases replicas from it (cluster/replica_leases.py). Both edges' requests wake hibernated
    partitions and are acknowledged; once idle on both, every replica hibernates (the sibling
    gave its leases back)."""
    topic = f"sleepy-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    seen = {pid: 0 for pid in edge_pids(broker)}
    for round_no in range(2):
        counts = produce_round(broker, topic, round_no)
        seen = {pid: max(seen[pid], n) for pid, n in counts.items()}
        wait_for(lambda: (s := node_pool_stats(broker)).get("hosted", 0) >= PARTITIONS and s.get("live") == 0, 60,
                 "every pooled replica to hibernate, the sibling's leases given back")
    assert all(n > 0 for n in seen.values()), f"producer connections per edge pid: {seen}"
    assert node_pool_stats(broker)["wakeups"] >= 2 * PARTITIONS

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    values, deadline = set(), time.monotonic() + 120
    while len(values) < 2 * PRODUCERS * 100 and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=0.5):
            assert msg.error() is None, msg.error()
            values.add(msg.value())
    consumer.close()
    assert len(values) == 2 * PRODUCERS * 100
