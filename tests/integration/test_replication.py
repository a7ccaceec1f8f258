"""Replication across Ray nodes: RF=3 on a 3-node cluster (ray.cluster_utils
on one machine, started by `raykafka start --nodes 3`), acks=all, a leader's
node killed with kill -9: a new leader from the ISR, clients carry on, and
no acknowledged record is lost."""
from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess
from tests.kafka_admin import create_topic

PARTITIONS = 3


def produce_all(bootstrap: str, topic: str, start: int, count: int) -> dict[int, set[int]]:
    """acks=all; returns partition -> acknowledged sequence numbers."""
    acked: dict[int, set[int]] = {}
    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60000, "retries": 100})

    def on_delivery(err, msg):
        if err is None:
            acked.setdefault(msg.partition(), set()).add(int(msg.key()))
        else:
            failed.append(err)

    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(90) == 0
    assert not failed, failed[:3]
    return acked


def consume_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "repl", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, int]]] = {}
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 6:
        msgs = consumer.consume(1000, timeout=0.5)
        if msgs:
            idle_since = time.monotonic()
        for m in msgs:
            assert m.error() is None, m.error()
            out.setdefault(m.partition(), []).append((m.offset(), int(m.key())))
    consumer.close()
    return out


def partition_metadata(bootstrap: str, topic: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def test_leader_node_killed_new_leader_from_isr_no_acked_loss(tmp_path):
    cluster = BrokerProcess(tmp_path / "data", extra_args=["--nodes", "3", "--racks", "r1,r2,r3"],
                            overrides={"replica.lag.time.max.ms": "10000"}).start(timeout_s=240)
    try:
        nodes = cluster.nodes()
        assert len(nodes) == 3 and len({n["ray_node_id"] for n in nodes}) == 3
        bootstrap = cluster.bootstrap_all
        topic = "replicated"
        create_topic(bootstrap, topic, PARTITIONS, config={"min.insync.replicas": "2"}, replication_factor=3)

        def all_in_sync():
            md = partition_metadata(bootstrap, topic)
            return all(len(p.isrs) == 3 for p in md.values()) and md

        acked = produce_all(bootstrap, topic, 0, 3000)
        md = wait_for(all_in_sync, 60, "full ISRs")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_cluster().result(timeout=10)
        assert sorted(n.rack for n in described.nodes) == ["r1", "r2", "r3"], "racks from Ray node labels"
        for p in md.values():
            assert sorted(p.replicas) == sorted(n["broker_id"] for n in nodes), "replicas on distinct nodes"

        head = nodes[0]["broker_id"]  # the head node hosts the active controller
        victim = next((p.leader for p in md.values() if p.leader != head), None)
        if victim is None:
            victim = next(n["broker_id"] for n in nodes if n["broker_id"] != head)
        led = [pid for pid, p in md.items() if p.leader == victim]
        killed_at = time.monotonic()
        cluster.kill_node(victim)
        live = ",".join(f"{n['host']}:{n['port']}" for n in nodes if n["broker_id"] != victim)

        def failed_over():
            md = partition_metadata(live, topic)
            ok = all(p.leader not in (victim, -1) and victim not in p.isrs for p in md.values())
            return ok and md

        md = wait_for(failed_over, 60, "a new leader for every partition")
        failover_s = time.monotonic() - killed_at
        for pid in led:
            assert md[pid].leader != victim
        more = produce_all(live, topic, 3000, 2000)
        records = consume_all(live, topic)
        for partition, seqs in list(acked.items()) + list(more.items()):
            present = {seq for _, seq in records.get(partition, [])}
            missing = seqs - present
            assert not missing, f"partition {partition}: {len(missing)} acknowledged records lost"
        for partition, rows in records.items():
            offsets = [o for o, _ in rows]
            assert offsets == list(range(len(offsets))), f"partition {partition}: offsets not contiguous"
        print(f"failover after kill -9 of broker {victim}'s node: {failover_s:.1f}s")

        # A second node down: the ISR shrinks to one < min.insync.replicas=2.
        second = next(n["broker_id"] for n in nodes if n["broker_id"] not in (victim, head))
        cluster.kill_node(second)
        last = f"{nodes[0]['host']}:{nodes[0]['port']}"
        wait_for(lambda: all(p.isrs == [head] for p in partition_metadata(last, topic).values()), 60,
                 "ISR of the last broker only")
        errors = []
        producer = Producer({"bootstrap.servers": last, "acks": "all", "retries": 0})
        producer.produce(topic, key=b"x", value=b"y", partition=0,
                         on_delivery=lambda err, msg: errors.append(err))
        producer.flush(30)
        assert errors and errors[0] is not None and errors[0].name() == "NOT_ENOUGH_REPLICAS", errors
    finally:
        cluster.stop()
