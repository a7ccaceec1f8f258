"""The group coordinator moves with its __consumer_offsets partition: on a
3-node cluster (`raykafka start --nodes 3`, ray.cluster_utils on one
machine) the node leading a group's offsets partition is killed with kill -9;
the controller elects a new leader from the ISR, the coordinator there loads
the partition's log, and the group's member finds it, rejoins and carries on
from the offsets it had committed (acks=-1 commits survive the node)."""
from __future__ import annotations

import functools
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from cluster.groups import partition_for_group
from tests.broker_process import BrokerProcess
from tests.kafka_admin import create_topic
from tests.cli_runner import wait_for as shared_wait_for
from tests.three_nodes import OFFSETS_PARTITIONS  # the shared cluster's offsets.topic.num.partitions
from tests.wire_client import WireClient

# Exceptions count as "not yet": brokers come and go here.
wait_for = functools.partial(shared_wait_for, retry_errors=True)

OFFSETS = "__consumer_offsets"


def coordinator_of(bootstrap: str, group: str):
    client = WireClient(bootstrap.split(",")[0], timeout=10)
    try:
        answer = client.request(10, 3, key=group, key_type=0)
        return answer.node_id if answer.error_code == 0 else None
    finally:
        client.close()


def offsets_metadata(bootstrap: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(OFFSETS, timeout=10).topics[OFFSETS].partitions


def test_coordinator_moves_when_its_node_dies(three_nodes):
    cluster = three_nodes  # the session's shared cluster (tests/three_nodes.py), whole again
    nodes = cluster.nodes()
    head = nodes[0]["broker_id"]  # the head node hosts Ray's GCS and the active controller: not the victim
    bootstrap = cluster.bootstrap_all
    topic = "coordinator-moving"
    create_topic(bootstrap, topic, 1, replication_factor=3)
    wait_for(lambda: coordinator_of(bootstrap, "probe") is not None, 120, "__consumer_offsets")
    md = wait_for(lambda: (m := offsets_metadata(bootstrap)) and all(len(p.isrs) == 3 for p in m.values()) and m,
                  90, "full ISRs of __consumer_offsets")
    assert all(len(p.replicas) == 3 for p in md.values())
    victim_partition = next(p for p, info in md.items() if info.leader != head)
    victim = md[victim_partition].leader
    group = next(f"moving-{i}" for i in range(1000)
                 if partition_for_group(f"moving-{i}", OFFSETS_PARTITIONS) == victim_partition)
    assert coordinator_of(bootstrap, group) == victim

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([topic])
    seen: list[int] = []

    def consume_until(count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(set(seen)) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            seen.append(msg.offset())
            if len(seen) % 50 == 0 or len(set(seen)) == count:
                consumer.commit(asynchronous=False)

    consume_until(150, 90)
    assert len(set(seen)) == 150
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    assert committed == 150

    killed_at = time.monotonic()
    cluster.kill_node(victim)
    live = ",".join(f"{n['host']}:{n['port']}" for n in nodes if n["broker_id"] != victim)
    moved_to = wait_for(lambda: (c := coordinator_of(live, group)) not in (None, victim) and c, 90,
                        "a new coordinator")
    # The member finds the new coordinator and goes on from its committed offset.
    producer = Producer({"bootstrap.servers": live, "acks": "all"})
    for i in range(300, 400):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert producer.flush(60) == 0
    consume_until(400, 120)
    moved_s = time.monotonic() - killed_at
    final = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    consumer.close()
    assert final == 400
    # Everything read once, or again only past the last commit before the kill.
    assert sorted(set(seen)) == list(range(400))
    assert all(o >= committed for o in seen[150:] if seen.count(o) > 1)
    # A fresh member of the group sees the same offsets through the new coordinator.
    check = Consumer({"bootstrap.servers": live, "group.id": group, "enable.auto.commit": False})
    assert check.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 400
    check.close()
    print(f"coordinator moved from broker {victim} to {moved_to}; member caught up {moved_s:.1f}s after kill -9")


def test_committed_offsets_survive_a_broker_restart(tmp_path):
    """A clean restart: the controller's election re-creates each offsets
    partition's coordinator, which loads the groups and offsets from the log."""
    data = tmp_path / "data"
    overrides = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
    broker = BrokerProcess(data, log_name="groups-restart.log", overrides=overrides).start()
    group = "survivor"
    try:
        create_topic(broker.bootstrap, "kept", 2)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("kept", 0, 11), TopicPartition("kept", 1, 22)], asynchronous=False)
        consumer.close()
    finally:
        assert broker.stop() == 0
    broker = BrokerProcess(data, log_name="groups-restart.log", overrides=overrides).start()
    try:
        check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        offsets = wait_for(lambda: check.committed([TopicPartition("kept", 0), TopicPartition("kept", 1)], timeout=10),
                           60, "the coordinator to load")
        assert [tp.offset for tp in offsets] == [11, 22]
        check.close()
    finally:
        assert broker.stop() == 0
