"""RF=3 replica sets hibernate and wake together (issue 30, raykafka.replica.hibernate.replicated):
three local Ray nodes (`raykafka start --nodes 3`), confluent-kafka at acks=all with
min.insync.replicas=2. The sets hibernate with their ISR whole and the same leaders, wake on
the next produce, hibernate again, then a leader's node is killed while they hibernate: new
leaders are elected from the ISR, woken by the next produce with their surviving followers,
and no acknowledged record is lost. A controller failover (/controller deleted, as Kafka's
operators force one) in between sees the same state and starts no replica outside the pools."""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from tests.broker_process import BrokerProcess, replica_processes
from tests.cli_runner import wait_for
from tests.kafka_admin import create_topic, pool_stats

PARTITIONS = 3
TOPIC = "sleepy"
SPARES = 2  # raykafka.replica.spares: each node's started, empty replica actors for wakes to adopt


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = BrokerProcess(tmp_path_factory.mktemp("hibernation-rf3") / "data", extra_args=["--nodes", "3"],
                      overrides={"raykafka.replica.hibernate.ms": "1500",
                                 "raykafka.replica.hibernate.replicated": "true",
                                 "replica.lag.time.max.ms": "10000",
                                 "raykafka.replica.spares": str(SPARES),
                                 # One offsets partition: the read-back's group needs a coordinator, not 3 x 3 actors.
                                 "offsets.topic.num.partitions": "1"}).start(timeout_s=240)
    yield c
    c.stop()


def node_pool_stats(node: dict) -> dict[str, int]:
    """This broker's replica pool counts, from its own edge."""
    return pool_stats(f"{node['host']}:{node['port']}", node["broker_id"])


def all_hibernated(nodes: list[dict]) -> bool:
    stats = [node_pool_stats(n) for n in nodes]
    return all(s.get("hosted", 0) == PARTITIONS and s.get("live") == 0 for s in stats)


def controller_failover(zk: KazooClient) -> None:
    """Delete /controller and wait for the next controller epoch and every edge to name it."""
    epoch = int(zk.get("/controller_epoch")[0])
    zk.delete("/controller")

    def elected():
        if zk.exists("/controller") is None:
            return None
        return int(zk.get("/controller_epoch")[0]) > epoch and json.loads(zk.get("/controller")[0])["brokerid"]

    wait_for(elected, 60, f"a controller above epoch {epoch}")


def partition_state(bootstrap: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    return {pid: (p.leader, tuple(sorted(p.isrs))) for pid, p in md.items()}


def produce(bootstrap: str, start: int, count: int) -> dict[int, set[int]]:
    """acks=all; -> partition -> acknowledged sequence numbers (every record must be acknowledged)."""
    acked: dict[int, set[int]] = {}
    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 90000, "retries": 1000, "enable.idempotence": True})

    def on_delivery(err, msg):
        if err is None:
            acked.setdefault(msg.partition(), set()).add(int(msg.key()))
        else:
            failed.append(err)

    for i in range(start, start + count):
        producer.produce(TOPIC, key=str(i).encode(), value=f"value-{i}".encode(), partition=i % PARTITIONS,
                         on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not failed, failed[:3]
    assert sum(len(s) for s in acked.values()) == count
    return acked


def read_back(bootstrap: str) -> dict[int, list[tuple[int, int]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rf3-hibernation", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=60)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while any(out[p][-1][0] + 1 < end if out[p] else end > 0 for p, end in ends.items()):
        assert time.monotonic() < deadline, f"read {[len(v) for v in out.values()]} of {ends}"
        for m in consumer.consume(1000, timeout=0.5):
            assert m.error() is None, m.error()
            out[m.partition()].append((m.offset(), int(m.key())))
    consumer.close()
    return out


@pytest.mark.timeout(900)  # a 3-node cluster, 4 rounds of process starts, a node kill, on a loaded 2-core machine
def test_rf3_sets_hibernate_and_wake_under_acks_all_through_a_node_kill_losing_nothing(cluster):
    nodes = cluster.nodes()
    assert len(nodes) == 3
    bootstrap = cluster.bootstrap_all
    create_topic(bootstrap, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"}, replication_factor=3)
    acked = [produce(bootstrap, 0, 600)]
    full = wait_for(lambda: all(len(isr) == 3 for _, isr in partition_state(bootstrap).values())
                    and partition_state(bootstrap), 60, "full ISRs")

    # The whole sets hibernate (every replica on every node), and nothing a client sees changes.
    wait_for(lambda: all_hibernated(nodes), 90, "every replica of the RF=3 sets to hibernate")
    assert partition_state(bootstrap) == full, "same leaders and ISRs while hibernated"

    # The next produce wakes them (leader, then its followers: acks=all with min.insync.replicas=2
    # needs a follower's fetch); they hibernate again with the ISR still whole.
    acked.append(produce(bootstrap, 600, 600))
    wait_for(lambda: all_hibernated(nodes), 90, "the sets to hibernate again")
    assert partition_state(bootstrap) == full, "no replica fell out of the ISR for hibernating"
    # Two rounds, each waking every replica: 3 leaders and their 6 followers.
    stats = [node_pool_stats(n) for n in nodes]
    wakeups = sum(s["wakeups"] for s in stats)
    assert wakeups >= 2 * PARTITIONS * 3, wakeups
    # Woken replicas of the sets are handed to spares, not started cold each time (3 per node
    # per round against 2 spares a node: some adoptions, the rest wait for or start a process).
    adopted = sum(s["adopted"] for s in stats)
    assert adopted >= PARTITIONS, stats

    # A new controller resends every LeaderAndIsr: the pools keep them, nothing wakes, and no
    # replica actor is started outside them (before any group: no internal topic exists yet).
    zk = KazooClient(hosts=nodes[0]["zk_connect"], timeout=10)
    zk.start(timeout=30)
    try:
        controller_failover(zk)
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        wait_for(lambda: all(AdminClient({"bootstrap.servers": f"{n['host']}:{n['port']}"}).list_topics(
            timeout=10).controller_id == controller for n in nodes), 60, "every edge to name the new controller")
    finally:
        zk.stop()
        zk.close()
    assert partition_state(bootstrap) == full, "the new controller sees the same leaders and ISRs"
    # The replica processes left are each node's spares (started, empty actors a wake adopts:
    # RF=3 sets adopt them too), and only they: none was started outside the pools.
    assert all_hibernated(nodes)
    wait_for(lambda: replica_processes(cluster) == 3 * SPARES, 60, f"{SPARES} spares on each node and no replica")

    # A leader's node dies while its sets hibernate: leaders elected from the hibernating ISRs.
    head = nodes[0]["broker_id"]  # its node hosts the active controller
    victim = next((leader for leader, _ in full.values() if leader != head),
                  next(n["broker_id"] for n in nodes if n["broker_id"] != head))
    cluster.kill_node(victim)
    survivors = [n for n in nodes if n["broker_id"] != victim]
    live = ",".join(f"{n['host']}:{n['port']}" for n in survivors)
    wait_for(lambda: all(leader not in (victim, -1) and victim not in isr
                         for leader, isr in partition_state(live).values()), 90, "new leaders without the victim")
    # The next produce wakes the elected leaders and the surviving followers (min.insync.replicas=2).
    acked.append(produce(live, 1200, 600))
    wait_for(lambda: all_hibernated(survivors), 90, "the surviving sets to hibernate")
    acked.append(produce(live, 1800, 300))

    records = read_back(live)
    for partition, rows in records.items():
        assert [o for o, _ in rows] == list(range(len(rows))), f"partition {partition}: offsets not contiguous"
    total = 0
    for batch in acked:
        for partition, seqs in batch.items():
            present = {seq for _, seq in records[partition]}
            missing = seqs - present
            assert not missing, f"partition {partition}: {len(missing)} acknowledged records lost"
            total += len(seqs)
    print(f"{total} acks=all records acknowledged through 3 hibernations, wakes and a node kill: none lost")
