"""Replication across Ray nodes: RF=3 on a 3-node cluster (ray.cluster_utils
on one machine, started by `raykafka start --nodes 3`; the stream test on the session's
shared one, tests/three_nodes.py, made whole before each test), acks=all, a leader's
node killed with kill -9: a new leader from the ISR, clients carry on, and
no acknowledged record is lost."""
from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess
from tests.cli_runner import wait_for
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


def consume_all(bootstrap: str, topic: str, timeout_s: float = 120) -> dict[int, list[tuple[int, int]]]:
    """Everything below each partition's high watermark (read when we start)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "repl", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout_s
    while any(out[p][-1][0] + 1 < end if out[p] else end > 0 for p, end in ends.items()):
        assert time.monotonic() < deadline, f"consumed {[len(v) for v in out.values()]} of {ends}"
        for m in consumer.consume(1000, timeout=0.5):
            assert m.error() is None, m.error()
            out[m.partition()].append((m.offset(), int(m.key())))
    consumer.close()
    return out


def partition_metadata(bootstrap: str, topic: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions


def test_leader_node_killed_new_leader_from_isr_no_acked_loss(tmp_path):
    # A cluster of its own, not the shared one: it checks the racks a fresh
    # cluster reports (after a SIGHUP revival a broker showed another node's rack).
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
        consumer = Consumer({"bootstrap.servers": last, "group.id": "lo"})
        before = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        errors = []
        producer = Producer({"bootstrap.servers": last, "acks": "all", "retries": 0})
        producer.produce(topic, key=b"x", value=b"y", partition=0,
                         on_delivery=lambda err, msg: errors.append(err))
        producer.flush(30)
        assert errors and errors[0] is not None and errors[0].name() == "NOT_ENOUGH_REPLICAS", errors
        after = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.close()
        assert after == before, "a refused acks=all produce must append nothing"
    finally:
        cluster.stop()


def replica_log_bytes(log_dir: str, topic: str, partition: int) -> bytes:
    from pathlib import Path

    directory = Path(log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_acks_all_stream_survives_leader_kill_and_the_old_leader_rejoins(three_nodes):
    """>= 100k acks=all records from an idempotent producer while the leader's
    node is SIGKILLed: none lost, none duplicated, each partition in order.
    Then the node comes back, truncates by leader epoch if it diverged,
    catches up and rejoins the ISR, and its log matches the leader's."""
    import threading

    cluster = three_nodes
    nodes = cluster.nodes()
    bootstrap = cluster.bootstrap_all
    topic = "stream"
    create_topic(bootstrap, topic, PARTITIONS, config={"min.insync.replicas": "2"}, replication_factor=3)
    md = wait_for(lambda: all(len(p.isrs) == 3 for p in partition_metadata(bootstrap, topic).values())
                  and partition_metadata(bootstrap, topic), 60, "full ISRs")
    head = nodes[0]["broker_id"]
    victim = next((p.leader for p in md.values() if p.leader != head),
                  next(n["broker_id"] for n in nodes if n["broker_id"] != head))

    total = 100_000
    acked: dict[tuple[int, int], int] = {}
    failures = []
    progress = threading.Event()

    def produce():
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 120000, "retries": 1000, "enable.idempotence": True})

        def on_delivery(err, msg):
            if err is not None:
                failures.append(err)
            else:
                acked[(msg.partition(), msg.offset())] = int(msg.key())
                if len(acked) >= total // 3:
                    progress.set()

        for i in range(total):
            while True:
                try:
                    producer.produce(topic, key=str(i).encode(), value=b"v" * 100 + str(i).encode(),
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush(180)

    thread = threading.Thread(target=produce)
    thread.start()
    assert progress.wait(120), "producer made no progress"
    cluster.kill_node(victim)
    thread.join(240)
    assert not thread.is_alive()
    assert not failures, failures[:3]
    assert len(acked) == total

    live = ",".join(f"{n['host']}:{n['port']}" for n in nodes if n["broker_id"] != victim)
    records = consume_all(live, topic)
    seen: dict[tuple[int, int], int] = {}
    for partition, rows in records.items():
        for offset, key in rows:
            seen[(partition, offset)] = key
        assert [o for o, _ in rows] == list(range(len(rows))), "offsets contiguous"
    missing = [k for k in acked if seen.get(k) != acked[k]]
    assert not missing, f"{len(missing)} acknowledged records not found at their offsets"
    keys = list(seen.values())
    duplicates = len(keys) - len(set(keys))
    print(f"{total} acks=all records from an idempotent producer through a leader kill: none lost, "
          f"{duplicates} duplicates")
    # Idempotence: retried batches the old leader had already replicated are
    # recognised by the new leader (the producer state travels with the data).
    assert duplicates == 0, f"{duplicates} duplicates despite enable.idempotence"
    for partition, rows in records.items():
        in_partition = [key for _, key in rows]
        assert in_partition == sorted(in_partition), f"partition {partition} out of order"

    # The dead node comes back as the same broker: it catches up and rejoins every ISR.
    cluster.revive()
    revived = next(n for n in cluster.nodes() if n["broker_id"] == victim)
    wait_for(lambda: all(victim in p.isrs for p in partition_metadata(bootstrap, topic).values()), 90,
             "the revived broker back in every ISR")
    produce_all(bootstrap, topic, total, 300)
    leaders = {pid: p.leader for pid, p in partition_metadata(bootstrap, topic).items()}
    for pid, leader in leaders.items():
        leader_dir = next(n for n in cluster.nodes() if n["broker_id"] == leader)["log_dirs"][0]

        def same():
            ours = replica_log_bytes(revived["log_dirs"][0], topic, pid)
            theirs = replica_log_bytes(leader_dir, topic, pid)
            return len(ours) == len(theirs) and ours == theirs

        wait_for(same, 30, f"partition {pid}: the revived replica's log equal to the leader's")
    truncations = cluster.log_tail(5000).count(" truncated ")
    print(f"revived broker {victim} rejoined all ISRs; follower truncations logged: {truncations}")
