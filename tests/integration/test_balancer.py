"""Partitions follow the nodes (issue 31) on a real cluster: `raykafka start
--nodes 3` (ray.cluster_utils on one machine, the embedded ZooKeeper), 12
partitions at RF=2, an acks=all producer and a two-member consumer group
running the whole time (confluent-kafka).

1. Paused, a 4th node joins (SIGUSR1 to the CLI): the balancer plans but moves
   nothing. Resumed: ListPartitionReassignments shows its moves, and within
   BALANCE_BOUND_S replica counts per node differ by at most 1, leaders too.
2. A node is killed for good: after raykafka.self.healing.delay.ms (10 s here)
   every partition is back to RF=2, its ISR on live nodes, within
   HEAL_BOUND_S.
Across both: no acknowledged record lost, every one consumed by the group, no
partition owned by two members at once, only retriable errors at the clients.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from cli.admin_client import AdminClient as RaykafkaAdmin
from cli.main import main as raykafka
from metadata.kafka_zk import KafkaZkClient
from tests.broker_process import BrokerProcess, _pid_alive
from tests.integration.test_controller import BackgroundProducer, wait_for

TOPIC = "elastic"
# 12 partitions at RF=2 on 3 nodes: 8 replicas and 4 leaders each; a 4th node takes 6
# replicas (6 moves) and 3 leaderships. Each replica is an actor to start (~0.7 CPU-s
# here), so the count is what this test's time is made of (30 partitions took ~4 min).
PARTITIONS = 12
HEALING_DELAY_MS = 10_000
# Bounds stated for this 2-core machine shared with other work: a move creates one
# replica actor (~0.7 CPU-s) and copies a few hundred KiB; 6+ moves, 4 at a time.
BALANCE_BOUND_S = 300
HEAL_BOUND_S = HEALING_DELAY_MS / 1000 + 300


class GroupMember:
    """One consumer of the group in its own thread; records what it owns and reads."""

    def __init__(self, name: str, bootstrap: str, group: "Group"):
        self.name, self.group = name, group
        self.errors: list = []
        self._stop = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "elastic-readers", "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "auto.commit.interval.ms": 1000, "session.timeout.ms": 45000,
            "error_cb": self.errors.append})
        self._consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked,
                                 on_lost=self._revoked)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _assigned(self, _consumer, partitions) -> None:
        with self.group.lock:
            for tp in partitions:
                owner = self.group.owners.get(tp.partition)
                if owner not in (None, self.name):
                    self.group.violations.append((tp.partition, owner, self.name))
                self.group.owners[tp.partition] = self.name

    def _revoked(self, _consumer, partitions) -> None:
        with self.group.lock:
            for tp in partitions:
                if self.group.owners.get(tp.partition) == self.name:
                    del self.group.owners[tp.partition]

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for m in self._consumer.consume(500, timeout=0.2):
                    if m.error() is not None:
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            self.errors.append(m.error())
                        continue
                    with self.group.lock:
                        self.group.consumed.add(int(m.key()))
        finally:
            self._consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class Group:
    def __init__(self, bootstrap: str, members: int = 2):
        self.lock = threading.Lock()
        self.owners: dict[int, str] = {}
        self.violations: list = []
        self.consumed: set[int] = set()
        self.members = [GroupMember(f"m{i}", bootstrap, self) for i in range(members)]

    def __enter__(self) -> "Group":
        for m in self.members:
            m.start()
        return self

    def __exit__(self, *exc) -> None:
        for m in self.members:
            m.stop()


def all_partitions(bootstrap: str) -> dict[tuple[str, int], object]:
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return {(t, p): md for t, tmd in topics.items() for p, md in tmd.partitions.items()}


def per_node(partitions: dict, brokers: list[int]) -> tuple[Counter, Counter]:
    replicas = Counter({b: 0 for b in brokers})
    leaders = Counter({b: 0 for b in brokers})
    for md in partitions.values():
        replicas.update(md.replicas)
        leaders[md.leader] += 1
    return replicas, leaders


def spread(counts: Counter) -> int:
    return max(counts.values()) - min(counts.values())


def live_bootstrap(cluster: BrokerProcess) -> str:
    return ",".join(f"{n['host']}:{n['port']}" for n in cluster.nodes() if _pid_alive(n.get("raylet_pid")))


def balancer(cluster: BrokerProcess, *args: str) -> int:
    return raykafka(["balancer", "--data-dir", str(cluster.data_dir), *args])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    process = BrokerProcess(
        tmp_path_factory.mktemp("balancer") / "data", extra_args=["--nodes", "3"], log_name="balancer.log",
        overrides={"replica.lag.time.max.ms": "10000",
                   "offsets.topic.num.partitions": "1",
                   "raykafka.self.healing.delay.ms": str(HEALING_DELAY_MS),
                   "raykafka.balancer.check.interval.ms": "1000",
                   "raykafka.balancer.max.concurrent.moves": "4"})
    process.start(timeout_s=300)
    yield process
    process.stop()


@pytest.mark.timeout(1500)  # two rounds of replica moves on a loaded 2-core machine
def test_a_node_joins_and_fills_then_a_lost_node_is_healed_with_clients_running(cluster, capsys):
    bootstrap = cluster.bootstrap_all
    # 24 replica actors to start (~0.7 CPU-s each on this shared 2-core machine): past
    # the client's own timeout at times, so wait for them rather than for the answer.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 2)], operation_timeout=120)
    wait_for(lambda: sum(len(md.isrs) == 2 and md.leader >= 0 for tp, md in all_partitions(bootstrap).items()
                         if tp[0] == TOPIC) == PARTITIONS, 300, "every partition led with a full ISR")
    zk = KafkaZkClient(cluster.nodes()[0]["zk_connect"], session_timeout_ms=10_000).start()
    producer = BackgroundProducer(bootstrap, TOPIC, records_per_round=20, round_pause_s=0.02, value_size=200)
    try:
        with Group(bootstrap) as group, producer:
            producer.wait_acked(2000, timeout_s=120)
            wait_for(lambda: len(group.owners) == PARTITIONS, 120, "the group to own every partition")

            # ---- 1. a node joins while the balancer is paused, then resumed ---------------------------
            assert balancer(cluster, "--pause") == 0
            joined = cluster.add_node()
            new_id = joined["broker_id"]
            joined_at = time.monotonic()

            def planned():
                state = zk.balancer.state() or {}
                return state.get("paused") and state.get("planned_moves", 0) > 0 and state

            state = wait_for(planned, 60, "a plan published while paused")
            assert state["in_flight"] == [] and str(new_id) in state["replicas"]
            assert not any(a.adding_replicas for a in zk.topics.assignments().values()), "moved while paused"
            assert balancer(cluster, "--resume") == 0
            with RaykafkaAdmin(bootstrap, timeout_s=30) as admin:
                seen = wait_for(lambda: admin.list_partition_reassignments(), 60, "moves listed by the controller")
            assert all(new_id in r.adding for r in seen.values()), seen
            brokers = [n["broker_id"] for n in cluster.nodes()]

            def balanced():
                replicas, leaders = per_node(all_partitions(live_bootstrap(cluster)), brokers)
                state = zk.balancer.state() or {}
                done = not state.get("in_flight") and not state.get("plan")
                return done and spread(replicas) <= 1 and spread(leaders) <= 1 and (replicas, leaders)

            replicas, leaders = wait_for(balanced, BALANCE_BOUND_S, "replicas and leaders even across 4 nodes")
            balance_s = time.monotonic() - joined_at
            assert balancer(cluster, "--status") == 0
            status = capsys.readouterr().out
            assert "Balancer: running" in status and "Moves in flight: 0" in status, status

            # ---- 2. a node is lost for good and healed ---------------------------------------------------
            controller = zk.controller.id()
            victim = next(b for b in brokers[1:] if b != controller and b != new_id)
            acked_before_kill = len(producer.acked)
            cluster.kill_node(victim)
            killed_at = time.monotonic()
            live = [b for b in brokers if b != victim]

            def healed():
                parts = {tp: md for tp, md in all_partitions(live_bootstrap(cluster)).items() if tp[0] == TOPIC}
                ok = len(parts) == PARTITIONS and all(
                    len(md.replicas) == 2 and victim not in md.replicas and sorted(md.isrs) == sorted(md.replicas)
                    and set(md.isrs) <= set(live) for md in parts.values())
                return ok and parts

            wait_for(healed, HEAL_BOUND_S, "every partition back to RF=2 with its ISR on live nodes")
            heal_s = time.monotonic() - killed_at
            assert heal_s >= HEALING_DELAY_MS / 1000, "healed before the healing delay"
            wait_for(lambda: len(producer.acked) > acked_before_kill + 2000, 120, "the producer to carry on")
            producer.stop()
            keys = set(producer.acked.values())
            wait_for(lambda: keys <= group.consumed, 180,
                     "the group to consume every acknowledged record")
        assert not group.violations, f"partitions owned by two members: {group.violations[:5]}"
        errors = [e for m in group.members for e in m.errors]
        assert not [e for e in errors if e.fatal()], errors
        assert all(e.retriable() or e.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                                                 KafkaError._RESOLVE, KafkaError._TIMED_OUT)
                   for e in errors), [str(e) for e in errors][:5]
        print(f"4th node: replicas {dict(replicas)}, leaders {dict(leaders)} even {balance_s:.0f} s after it "
              f"joined (bound {BALANCE_BOUND_S} s); broker {victim} killed: RF=2 again after {heal_s:.0f} s "
              f"(delay {HEALING_DELAY_MS / 1000:.0f} s); {len(keys)} acks=all records, none lost, all consumed; "
              f"{len(errors)} retriable client errors")
    finally:
        zk.close()
