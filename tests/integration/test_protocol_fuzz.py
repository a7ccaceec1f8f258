"""Hostile frames against a real broker: the LeaveGroup frame whose member
count varint asks kio for 32 GiB, and a seeded, CI-sized fuzz campaign over
every served API and version (tests/protocol_fuzz.py). After each, the same
edge process answers a real client, and neither the edge's memory nor the
controller's (each measured on its own, not the tree's) has grown.

The broker is this module's own: valid fuzz requests include admin APIs
(CreateTopics, DeleteRecords, ...), and mutated ones can ask for anything, so
they must not run against the broker the other tests share.
"""
from __future__ import annotations

import socket
import time
import uuid

import psutil
import pytest
from confluent_kafka import Consumer, Producer

from tests import kafka_admin
from tests.broker_process import BrokerProcess
from tests.protocol_fuzz import Campaign, generate_inputs, role_processes, rss_mib as roles_rss_mib, served_versions

# The frame from issue 23: LeaveGroup v5, Members count = varint ff ff ff ff 0f.
LEAVE_GROUP_LYING_COUNT = bytes.fromhex(
    "00000046000d00050000005700056b66757a7a000e667a2d6a2d3030303030303536ffffffff0f07667a2d6d2d31"
    "000566757a7a00010a667a2d696e73742d310000000534c04b1604a6")
CAMPAIGN_SEED = 20261125
CAMPAIGN_INPUTS = 3000
RSS_GROWTH_LIMIT_MIB = 50


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "data", log_name="fuzz-broker.log",
                            overrides={"auto.create.topics.enable": "false",
                                       "offsets.topic.num.partitions": "1",
                                       "num.partitions": "1"})
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


def edge_process(broker: BrokerProcess) -> psutil.Process:
    return psutil.Process(broker.nodes()[0]["edge_pid"])


def rss_mib(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def assert_real_client_round_trip(bootstrap: str, records: int = 200) -> None:
    topic = f"after-fuzz-{uuid.uuid4().hex[:8]}"
    kafka_admin.create_topic(bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acknowledged = []
    for i in range(records):
        producer.produce(topic, value=f"v{i}".encode(),
                         on_delivery=lambda err, msg: acknowledged.append(err is None))
    assert producer.flush(30) == 0
    assert len(acknowledged) == records and all(acknowledged)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) == records:
                break
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(records)]


def test_lying_leave_group_count_on_a_thousand_connections(fuzz_broker):
    edge = edge_process(fuzz_broker)
    host, port = fuzz_broker.host, fuzz_broker.port
    # Warm up: the first requests load the codec's schemas.
    assert_real_client_round_trip(fuzz_broker.bootstrap, records=20)
    before = rss_mib(edge)
    for _ in range(1000):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(LEAVE_GROUP_LYING_COUNT)
            # Kafka's answer to an undecodable request: the connection closes.
            assert sock.recv(4) == b""
    grown = rss_mib(edge) - before
    assert edge.is_running() and edge.pid == edge_process(fuzz_broker).pid, "the edge process was replaced"
    assert grown < RSS_GROWTH_LIMIT_MIB, f"edge RSS grew {grown:.1f} MiB"
    assert_real_client_round_trip(fuzz_broker.bootstrap)
    assert fuzz_broker.wait_for_log("tried to allocate a collection of size 4294967294")


def test_seeded_campaign_over_every_served_api_version(fuzz_broker):
    edge = edge_process(fuzz_broker)
    versions = served_versions()
    inputs = list(generate_inputs(CAMPAIGN_SEED, CAMPAIGN_INPUTS, versions))
    assert {(i.api_key, i.api_version) for i in inputs} == set(versions)
    mutations = {i.mutation for i in inputs}
    assert {"size:int32", "size:uvarint", "batch-header", "frame-size", "valid"} <= mutations
    processes = role_processes(fuzz_broker)
    assert {"edge", "controller"} <= set(processes), processes
    before = roles_rss_mib(processes)
    result = Campaign(fuzz_broker.host, fuzz_broker.port).run(inputs)
    after = roles_rss_mib(processes)
    assert result.inputs == CAMPAIGN_INPUTS
    assert result.crashes == 0 and result.hangs == 0, result
    # Valid inputs are answered; hostile ones closed: both happen.
    assert result.answered > 0 and result.closed > 0, result
    assert edge.is_running() and edge.pid == edge_process(fuzz_broker).pid, "the edge process was replaced"
    for role in ("edge", "controller"):
        assert after[role] is not None, f"the {role} process is gone"
        grown = after[role] - before[role]
        assert grown < RSS_GROWTH_LIMIT_MIB, f"{role} RSS grew {grown:.1f} MiB over {result.inputs} inputs"
    assert_real_client_round_trip(fuzz_broker.bootstrap)
