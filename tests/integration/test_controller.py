"""The controller on a real 3-node cluster (`raykafka start --nodes 3`:
ray.cluster_utils on one machine, the embedded ZooKeeper) with real clients:
controller failover and epoch fencing, partition reassignment under a reading
consumer, preferred leaders coming back (ElectLeaders and the automatic
rebalance), controlled shutdown on SIGTERM, and CreatePartitions.

One cluster serves the whole module (module-scoped fixture) and tests run in
file order; every test that kills a node revives it before it ends, so the
next test starts with three live brokers. The head node (nodes[0]) hosts
Ray's GCS and the CLI's driver, so it is never the one killed.
"""
from __future__ import annotations

import concurrent.futures
import functools
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ElectionType, KafkaError, KafkaException, Producer, \
    TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cli.admin_client import AdminClient as RaykafkaAdmin
from core.naming import edge_actor_name
from tests.broker_process import REPO, BrokerProcess, _pid_alive, broker_env
from tests.cli_runner import wait_for as shared_wait_for

# Exceptions count as "not yet" (brokers come and go here); polls every 0.2 s unless told.
wait_for = functools.partial(shared_wait_for, retry_errors=True, poll_s=0.2)


STALE_CONTROLLER_EPOCH = 11
NAMESPACE = "raykafka"
# The automatic preferred-leader rebalance acts on any broker that does not lead
# every partition it is preferred for (percentage 0). Short enough for the
# automatic test, long enough that it seldom races the ElectLeaders test.
IMBALANCE_CHECK_INTERVAL_S = 10


# ---- the cluster ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    process = BrokerProcess(
        tmp_path_factory.mktemp("controller") / "data", extra_args=["--nodes", "3"], log_name="controller.log",
        overrides={"replica.lag.time.max.ms": "10000",
                   # One offsets partition: consumers need a coordinator, not 3 x 3 more actors.
                   "offsets.topic.num.partitions": "1",
                   "leader.imbalance.check.interval.seconds": str(IMBALANCE_CHECK_INTERVAL_S),
                   "leader.imbalance.per.broker.percentage": "0"})
    process.start(timeout_s=300)
    yield process
    code = process.stop()
    assert code == 0, f"cluster did not stop cleanly (exit {code}):\n{process.log_tail()}"


@pytest.fixture(scope="module")
def zk(cluster):
    client = KazooClient(hosts=cluster.nodes()[0]["zk_connect"], timeout=10)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def new_topic(cluster):
    """Creates topics that are deleted after the test, passed or failed: every replica
    is an actor process, and a failed test's topic must not disturb the next test."""
    created: list[str] = []

    def create(name: str, **kwargs) -> str:
        create_topic(cluster.bootstrap_all, name, **kwargs)
        created.append(name)
        return name

    yield create
    for name in created:
        delete_topic(live_bootstrap(cluster), name)


def address(node: dict) -> str:
    return f"{node['host']}:{node['port']}"


def live_nodes(cluster: BrokerProcess) -> list[dict]:
    return [n for n in cluster.nodes() if _pid_alive(n.get("raylet_pid"))]


def live_bootstrap(cluster: BrokerProcess) -> str:
    return ",".join(address(n) for n in live_nodes(cluster))


def node_of(cluster: BrokerProcess, broker_id: int) -> dict:
    return next(n for n in cluster.nodes() if n["broker_id"] == broker_id)


def revive_dead_nodes(cluster: BrokerProcess) -> None:
    """After a test that killed a node, even a failed one: the next test gets three brokers."""
    if len(live_nodes(cluster)) < len(cluster.nodes()):
        cluster.revive()


def metadata(bootstrap: str, topics: list[str] | None):
    """Metadata as one broker's edge sees it (cli/admin_client: no client-side caching)."""
    with RaykafkaAdmin(bootstrap, timeout_s=10) as admin:
        return admin.metadata(topics)


def partitions_of(bootstrap: str, topic: str):
    return metadata(bootstrap, [topic]).topics[topic].partitions


def active_controller(zk: KazooClient) -> tuple[int, int] | None:
    """(broker id in /controller, /controller_epoch), None while no controller is elected."""
    if zk.exists("/controller") is None:
        return None
    try:
        data, _ = zk.get("/controller")
        epoch, _ = zk.get("/controller_epoch")
    except NoNodeError:  # deleted between the two reads
        return None
    return json.loads(data)["brokerid"], int(epoch)


def wait_controller_ready(cluster: BrokerProcess, controller_id: int, timeout_s: float = 60) -> None:
    """A new controller sends LeaderAndIsr to every live replica before its first
    UpdateMetadata, so once every live edge names it, every replica knows its epoch."""
    def named_everywhere():
        return all(metadata(address(n), []).controller_id == controller_id for n in live_nodes(cluster))

    wait_for(named_everywhere, timeout_s, f"every live edge to name controller {controller_id}")


def create_topic(bootstrap: str, topic: str, *, partitions: int = -1, replication_factor: int = -1,
                 assignment: list[list[int]] | None = None, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if assignment is not None:
        # librdkafka wants the partition count with an assignment, and no replication factor.
        new = NewTopic(topic, len(assignment), replica_assignment=assignment, config=config or {})
    else:
        new = NewTopic(topic, partitions, replication_factor, config=config or {})
    admin.create_topics([new], operation_timeout=30)[topic].result(timeout=60)


def delete_topic(bootstrap: str, topic: str) -> None:
    """Frees the topic's replica actors (each is a process) for the tests after."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)


def wait_full_isr(bootstrap: str, topic: str, timeout_s: float = 90):
    def full():
        parts = partitions_of(bootstrap, topic)
        return all(p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) for p in parts.values()) and parts

    return wait_for(full, timeout_s, f"{topic}: every replica in the ISR")


def replica_log_bytes(log_dir: str, topic: str, partition: int) -> bytes:
    directory = Path(log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def same_log_bytes(cluster: BrokerProcess, topic: str, partition: int, a: int, b: int) -> bool:
    ours = replica_log_bytes(node_of(cluster, a)["log_dirs"][0], topic, partition)
    theirs = replica_log_bytes(node_of(cluster, b)["log_dirs"][0], topic, partition)
    return len(ours) > 0 and ours == theirs


class BackgroundProducer:
    """acks=all records from a thread until stopped. Keys are sequence numbers;
    keeps (partition, offset) -> key of every acknowledged record and, per
    partition, when each acknowledgement arrived."""

    def __init__(self, bootstrap: str, topic: str, partitions: list[int] | None = None,
                 records_per_round: int = 20, round_pause_s: float = 0.01, value_size: int = 100,
                 first_key: int = 0):
        self.topic, self.partitions = topic, partitions
        self.first_key = first_key
        self.records_per_round, self.round_pause_s = records_per_round, round_pause_s
        self.value = b"v" * value_size
        self.acked: dict[tuple[int, int], int] = {}
        self.ack_times: dict[int, list[float]] = {}
        self.failures: list = []
        self.sent = 0
        self._left = -1  # records the final flush could not deliver
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                   "message.timeout.ms": 120000, "retries": 1000, "retry.backoff.ms": 50,
                                   "enable.idempotence": False})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failures.append(err)
            return
        self.acked[(msg.partition(), msg.offset())] = int(msg.key())
        self.ack_times.setdefault(msg.partition(), []).append(time.monotonic())

    def _run(self) -> None:
        # Paced: an unbounded producer would take the CPU from the Ray workers (nice 15).
        while not self._stop.is_set():
            for _ in range(self.records_per_round):
                kwargs = {}
                if self.partitions:
                    kwargs["partition"] = self.partitions[self.sent % len(self.partitions)]
                try:
                    self._producer.produce(self.topic, key=str(self.first_key + self.sent).encode(),
                                           value=self.value, on_delivery=self._on_delivery, **kwargs)
                    self.sent += 1
                except BufferError:
                    break
            self._producer.poll(self.round_pause_s)
        self._left = self._producer.flush(120)

    def start(self) -> "BackgroundProducer":
        self._thread.start()
        return self

    def wait_acked(self, count: int, timeout_s: float = 60) -> None:
        wait_for(lambda: len(self.acked) >= count or self.failures, timeout_s, f"{count} acknowledged records")
        assert not self.failures, self.failures[:3]

    def __enter__(self) -> "BackgroundProducer":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._thread.is_alive():  # left early (a failed assertion): stop, without asserting again
            self._stop.set()
            self._thread.join(150)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
        assert not self._thread.is_alive(), "producer did not flush in time"
        assert self._left == 0, f"{self._left} records never acknowledged"
        assert not self.failures, f"{len(self.failures)} records failed: {self.failures[:3]}"


def produce_burst(bootstrap: str, topic: str, count: int, first_key: int = 0) -> dict[tuple[int, int], int]:
    """count acks=all records as fast as the client goes; -> (partition, offset) -> key."""
    acked: dict[tuple[int, int], int] = {}
    failures = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60000, "enable.idempotence": False})

    def on_delivery(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = int(msg.key())
        else:
            failures.append(err)

    for i in range(first_key, first_key + count):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=b"v" * 100, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0, "records left unacknowledged"
    assert not failures, failures[:3]
    return acked


def consume_all(bootstrap: str, topic: str, partitions: list[int], timeout_s: float = 120) -> dict[int, list]:
    """partition -> [(offset, key)] of everything below the high watermark read at the start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: dict[int, list] = {p: [] for p in partitions}
        deadline = time.monotonic() + timeout_s
        while any((out[p][-1][0] + 1 if out[p] else 0) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"consumed {[len(v) for v in out.values()]} of {ends}"
            for m in consumer.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                out[m.partition()].append((m.offset(), int(m.key())))
        return out
    finally:
        consumer.close()


def assert_acked_present(acked: dict[tuple[int, int], int], records: dict[int, list]) -> None:
    seen = {(p, offset): key for p, rows in records.items() for offset, key in rows}
    for p, rows in records.items():
        offsets = [o for o, _ in rows]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous"
    missing = [k for k, key in acked.items() if seen.get(k) != key]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records not at their offsets: {missing[:5]}"


# ---- 1. controller failover and epoch fencing ------------------------------------------------------------
STALE_REQUESTS = r"""
import asyncio, json, sys
import ray
from core.controller_messages import MetadataSnapshot
args = json.loads(sys.argv[1])
ray.init(address=args["ray_address"], namespace=args["namespace"], logging_level="ERROR", log_to_driver=False)
old = args["old_epoch"]
# By name, or through the replica's node's pool (one a spare adopted on a wake has no Ray name).
from actors.replica_lookup import find_replica
follower = asyncio.run(find_replica(args["topic"], args["partition"], args["follower_id"], args["namespace"], True, 30))
leader = asyncio.run(find_replica(args["topic"], args["partition"], args["leader_id"], args["namespace"], True, 30))
edge = ray.get_actor(args["edge"])
out = {
    # Were it obeyed, the follower would lead at a far-future leader epoch (two leaders) ...
    "become_leader": ray.get(follower.become_leader.remote(old, 10**6, [args["follower_id"]], args["replicas"]),
                             timeout=30),
    # ... the leader would close its log ...
    "stop_replica": ray.get(leader.stop_replica.remote(old, False), timeout=30),
    # ... and the edge would forget every broker and topic.
    "update_metadata": ray.get(edge.update_metadata.remote(
        MetadataSnapshot(old, args["old_controller"], "stale", [], {}), {}, None), timeout=30).error,
}
print("RESULT " + json.dumps(out), flush=True)
ray.shutdown()
"""


def move_controller_off(zk: KazooClient, broker_id: int, attempts: int = 12) -> tuple[int, int]:
    """Delete /controller (how Kafka operators force a re-election) until a
    candidate other than broker_id wins; -> (controller, epoch)."""
    current = wait_for(lambda: active_controller(zk), 30, "an active controller")
    elections = 0
    while current[0] == broker_id:
        assert elections < attempts, f"broker {broker_id} won {attempts} elections in a row"
        elections += 1
        epoch = current[1]
        try:
            zk.delete("/controller")
        except NoNodeError:
            pass  # already gone: an election is under way
        current = wait_for(lambda: (c := active_controller(zk)) and c[1] > epoch and c, 30,
                           f"a controller after epoch {epoch}", poll_s=0.05)
    return current


def test_controller_failover_keeps_acked_records_and_fences_old_epoch(cluster, zk, new_topic):
    nodes = cluster.nodes()
    head = nodes[0]["broker_id"]
    bootstrap = cluster.bootstrap_all
    # The first candidate started (on the head node) wins the first election;
    # the head cannot be killed without taking the CLI's driver with it.
    controller, epoch = move_controller_off(zk, head)
    wait_controller_ready(cluster, controller)
    topic = "failover"
    new_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_full_isr(bootstrap, topic)
    try:
        with BackgroundProducer(bootstrap, topic) as producer:
            producer.wait_acked(2000)
            killed_at = cluster.kill_node(controller)
            new_controller, new_epoch = wait_for(
                lambda: (c := active_controller(zk)) and c[1] > epoch and c, 60,
                f"a controller epoch above {epoch}", poll_s=0.01)
            failover_s = time.monotonic() - killed_at
            assert new_controller != controller
            live = live_bootstrap(cluster)
            wait_controller_ready(cluster, new_controller)
            parts = wait_for(lambda: (ps := partitions_of(live, topic)) and all(
                p.leader not in (-1, controller) and controller not in p.isr for p in ps.values()) and ps,
                60, "a live leader for every partition", poll_s=0.05)
            leaders_s = time.monotonic() - killed_at
            producer.wait_acked(len(producer.acked) + 1000)
            producer.stop()
        print(f"\nkill -9 of controller {controller}'s node: controller {new_controller} at epoch {new_epoch} "
              f"visible in ZooKeeper after {failover_s:.2f}s; every partition led by a live broker after "
              f"{leaders_s:.2f}s")

        # Requests stamped with the dead controller's epoch change nothing.
        partition, state = next((p, s) for p, s in sorted(parts.items()) if len(s.isr) >= 2)
        leader = state.leader
        follower = next(r for r in state.isr if r != leader)
        args = {"ray_address": nodes[0]["ray_address"], "namespace": NAMESPACE, "old_epoch": epoch,
                "old_controller": controller, "follower_id": follower, "replicas": list(state.replicas),
                "topic": topic, "partition": partition, "leader_id": leader, "edge": edge_actor_name(leader)}
        run = subprocess.run([sys.executable, "-c", STALE_REQUESTS, json.dumps(args)], env=broker_env(),
                             cwd=REPO, capture_output=True, text=True, timeout=180)
        line = next((x for x in run.stdout.splitlines() if x.startswith("RESULT ")), None)
        assert line is not None, f"stale-epoch requests failed (exit {run.returncode}):\n{run.stderr[-3000:]}"
        answers = json.loads(line[len("RESULT "):])
        assert answers == {"become_leader": STALE_CONTROLLER_EPOCH, "stop_replica": STALE_CONTROLLER_EPOCH,
                           "update_metadata": STALE_CONTROLLER_EPOCH}, answers
        # Nothing changed: the leader's edge still describes the partition the same way,
        # the leader takes acks=all writes (min.insync.replicas=2: the follower must
        # still fetch) and the follower's log keeps matching the leader's.
        leader_address = address(node_of(cluster, leader))
        after = partitions_of(leader_address, topic)[partition]
        assert (after.leader, sorted(after.isr)) == (leader, sorted(state.isr)), after
        with BackgroundProducer(leader_address, topic, partitions=[partition], first_key=10**6) as more:
            more.wait_acked(200, timeout_s=30)
            more.stop()
        wait_for(lambda: same_log_bytes(cluster, topic, partition, follower, leader), 20,
                 f"follower {follower}'s log of {topic}-{partition} to match leader {leader}'s")

        records = consume_all(live, topic, [0, 1, 2])
        assert_acked_present({**producer.acked, **more.acked}, records)
        print(f"{len(producer.acked) + len(more.acked)} acks=all records, none lost; requests at the old epoch "
              f"{epoch} answered {answers}")
    finally:
        revive_dead_nodes(cluster)
    wait_full_isr(bootstrap, topic)


# ---- 2. reassignment while a consumer reads --------------------------------------------------------------
class BackgroundConsumer:
    """Reads one partition from the beginning in a thread until told where the end is."""

    def __init__(self, bootstrap: str, topic: str):
        self.records: list[tuple[int, int]] = []
        self.errors: list = []
        self.end: int | None = None
        self._abandon = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                                   "enable.auto.commit": False})
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._abandon.is_set() and (
                    self.end is None or (self.records[-1][0] + 1 if self.records else 0) < self.end):
                for m in self._consumer.consume(500, timeout=0.2):
                    if m.error() is not None:
                        self.errors.append(m.error())
                        continue
                    self.records.append((m.offset(), int(m.key())))
        finally:
            self._consumer.close()

    def __enter__(self) -> "BackgroundConsumer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._abandon.set()
        self._thread.join(30)

    def finish(self, end: int, timeout_s: float = 120) -> None:
        self.end = end
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the consumer read {len(self.records)} of {end} records in time"


def test_reassignment_moves_replicas_while_a_consumer_reads(cluster, new_topic):
    bootstrap = cluster.bootstrap_all
    a, b, c = (n["broker_id"] for n in cluster.nodes())
    topic = "reassigned"
    new_topic(topic, assignment=[[a, b]])
    wait_full_isr(bootstrap, topic)
    acked = produce_burst(bootstrap, topic, 30_000)
    with BackgroundConsumer(bootstrap, topic) as consumer, \
            BackgroundProducer(bootstrap, topic, first_key=len(acked)) as producer, \
            RaykafkaAdmin(bootstrap, timeout_s=30) as admin:
        wait_for(lambda: consumer.records, 30, "the consumer's first records")
        producer.wait_acked(100)
        started = time.monotonic()
        outcome = admin.alter_partition_reassignments({(topic, 0): [b, c]})
        assert outcome[(topic, 0)].ok, outcome[(topic, 0)].text()

        def done():
            ongoing = admin.list_partition_reassignments([(topic, 0)])
            return not ongoing and partitions_of(bootstrap, topic)[0].replicas == (b, c)

        wait_for(done, 120, f"{topic}-0 reassigned from [{a}, {b}] to [{b}, {c}]", poll_s=0.1)
        took_s = time.monotonic() - started
        producer.stop()  # it kept producing all through the reassignment
        part = partitions_of(bootstrap, topic)[0]
        assert part.leader in (b, c) and sorted(part.isr) == sorted([b, c]), part

        during = len(producer.acked)
        acked.update(producer.acked)
        end = max(offset for (_, offset) in acked) + 1
        consumer.finish(end)
    assert not consumer.errors, consumer.errors[:3]
    offsets = [o for o, _ in consumer.records]
    assert offsets == list(range(end)), "the consumer saw a gap, a repeat or a reordering"
    seen = dict(consumer.records)
    missing = [k for k, key in acked.items() if seen.get(k[1]) != key]
    assert not missing, f"{len(missing)} acknowledged records not where they were acknowledged"

    # The data is complete on the new replica; the removed one's files are gone.
    c_dir = Path(node_of(cluster, c)["log_dirs"][0]) / f"{topic}-0"
    assert list(c_dir.glob("*.log")), f"no segment files in {c_dir}"
    wait_for(lambda: same_log_bytes(cluster, topic, 0, c, b), 30, f"broker {c}'s log equal to broker {b}'s")
    a_dir = Path(node_of(cluster, a)["log_dirs"][0]) / f"{topic}-0"
    wait_for(lambda: not a_dir.exists(), 30, f"{a_dir} removed")
    print(f"\nreassignment of {topic}-0 [{a}, {b}] -> [{b}, {c}] took {took_s:.1f}s with {end} records "
          f"({during} acknowledged during the run); the consumer read offsets 0..{end - 1} once each, in order "
          f"({end - len(set(seen.values()))} duplicate keys from producer retries)")


# ---- 3. preferred leaders after a node returns ---------------------------------------------------------------
def rotated_assignment(brokers: list[int], partitions: int) -> list[list[int]]:
    return [brokers[i % len(brokers):] + brokers[:i % len(brokers)] for i in range(partitions)]


def victim_for(cluster: BrokerProcess, zk: KazooClient) -> int:
    """A broker whose node can be killed without losing the CLI's driver (not the
    head) or the controller (a failover would blur what is measured)."""
    controller = active_controller(zk)[0]
    head = cluster.nodes()[0]["broker_id"]
    return next(n["broker_id"] for n in cluster.nodes() if n["broker_id"] not in (head, controller))


def kill_and_wait_failover(cluster: BrokerProcess, topic: str, victim: int) -> None:
    cluster.kill_node(victim)
    live = live_bootstrap(cluster)
    wait_for(lambda: all(p.leader not in (-1, victim) and victim not in p.isr
                         for p in partitions_of(live, topic).values()), 60,
             f"{topic}: leaders and ISRs without broker {victim}")


def all_preferred(bootstrap: str, topic: str):
    parts = partitions_of(bootstrap, topic)
    return all(p.leader == p.replicas[0] for p in parts.values()) and parts


def preferred_topic(cluster, zk, new_topic, topic: str) -> tuple[str, int]:
    """`topic` with 3 partitions whose preferred leaders rotate over the brokers, fully
    in sync and led by their preferred replicas; returns (bootstrap, the broker to kill)."""
    bootstrap = cluster.bootstrap_all
    brokers = [n["broker_id"] for n in cluster.nodes()]
    new_topic(topic, assignment=rotated_assignment(brokers, 3))
    wait_full_isr(bootstrap, topic)
    wait_for(lambda: all_preferred(bootstrap, topic), 30, "preferred leaders at creation")
    return bootstrap, victim_for(cluster, zk)


def test_elect_leaders_api_restores_preferred_leaders_after_a_node_returns(cluster, zk, new_topic):
    topic = "preferred-api"
    bootstrap, victim = preferred_topic(cluster, zk, new_topic, topic)

    # The automatic rebalance (every IMBALANCE_CHECK_INTERVAL_S, on for the whole
    # module) puts preferred leaders back too, so "all preferred in the end" alone
    # would not show that the API did anything. Both decide in the controller's
    # single event queue, from the ISR it holds. So from before the victim returns
    # until every partition answers success or ELECTION_NOT_NEEDED, an ElectLeaders
    # request is sent every 20 ms without waiting for the answers (the queue stalls
    # for seconds while a broker rejoins; requests that waited for their answers
    # would arrive in bunches). Requests queued before the victim's ISR change are
    # answered PREFERRED_LEADER_NOT_AVAILABLE; the first one queued after it moves
    # the leader. For the periodic rebalance to get there first, its tick would have
    # to be queued in the ~20 ms after the ISR change: odds of ~1 in 500 with a 10 s
    # interval. The test asserts that the API itself moved a leader.
    tps = [TopicPartition(topic, p) for p in range(3)]
    answers: list[dict[int, int]] = []
    problems: list = []
    finished = threading.Event()

    def record(future):
        try:
            result = future.result()
        except Exception as exc:  # e.g. a broker of the bootstrap list down
            problems.append(exc)
            return
        codes = {tp.partition: 0 if err is None else err.code() for tp, err in result.items()}
        answers.append(codes)
        if all(code in (0, KafkaError.ELECTION_NOT_NEEDED) for code in codes.values()):
            finished.set()

    def stream_elect_leaders():
        admin = AdminClient({"bootstrap.servers": bootstrap})
        sent = []
        deadline = time.monotonic() + 150
        while not finished.is_set() and time.monotonic() < deadline:
            # No request_timeout/operation_timeout: confluent-kafka 2.16's elect_leaders
            # fails with SystemError on any keyword argument.
            future = admin.elect_leaders(ElectionType.PREFERRED, tps)
            future.add_done_callback(record)
            sent.append(future)
            finished.wait(0.02)
        concurrent.futures.wait(sent, timeout=60)

    streamer = threading.Thread(target=stream_elect_leaders, daemon=True)
    try:
        kill_and_wait_failover(cluster, topic, victim)
        streamer.start()
        cluster.revive()
        streamer.join(220)
    finally:
        finished.set()
        revive_dead_nodes(cluster)
    assert any(all(code in (0, KafkaError.ELECTION_NOT_NEEDED) for code in codes.values()) for codes in answers), \
        f"ElectLeaders never succeeded; last answers {answers[-3:]}, errors {problems[-3:]}"
    allowed = {0, KafkaError.ELECTION_NOT_NEEDED, KafkaError.PREFERRED_LEADER_NOT_AVAILABLE}
    assert all(code in allowed for codes in answers for code in codes.values()), answers[-5:]
    moved = sorted({p for codes in answers for p, code in codes.items() if code == 0})
    assert moved, f"ElectLeaders never moved a leader (the automatic rebalance got there first?): {answers[-5:]}"
    parts = all_preferred(bootstrap, topic)
    assert parts, f"not every partition led by its preferred replica: {partitions_of(bootstrap, topic)}"
    wait_full_isr(bootstrap, topic)
    print(f"\nElectLeaders(PREFERRED) after broker {victim} returned: it moved the leaders of partitions {moved} "
          f"({len(answers)} requests)")


def test_automatic_rebalance_restores_preferred_leaders_after_a_node_returns(cluster, zk, new_topic):
    topic = "preferred-auto"
    bootstrap, victim = preferred_topic(cluster, zk, new_topic, topic)
    try:
        kill_and_wait_failover(cluster, topic, victim)
        assert not all_preferred(live_bootstrap(cluster), topic)
        revived_at = time.monotonic()
        cluster.revive()
    finally:
        revive_dead_nodes(cluster)
    wait_full_isr(bootstrap, topic)
    in_isr_at = time.monotonic()
    # No ElectLeaders: the controller's periodic check alone must put them back.
    wait_for(lambda: all_preferred(bootstrap, topic), 30, "the automatic rebalance to restore preferred leaders")
    now = time.monotonic()
    print(f"\nautomatic rebalance: preferred leaders back {now - in_isr_at:.1f}s after broker {victim} rejoined "
          f"the ISRs ({now - revived_at:.1f}s after the revive began; check interval {IMBALANCE_CHECK_INTERVAL_S}s)")


# ---- 4. SIGTERM: controlled shutdown moves leaders first -------------------------------------------------
JOINED_BROKER_ID = 999  # Kafka-valid: not above reserved.broker.max.id (1000); generated ids are above it


def test_sigterm_moves_leaders_before_the_broker_exits(cluster, tmp_path, new_topic):
    nodes = cluster.nodes()
    joined = BrokerProcess(tmp_path / "joined" / "data", log_name="joined.log", extra_args=[
        "--ray-address", nodes[0]["ray_address"]], overrides={
        "zookeeper.connect": nodes[0]["zk_connect"], "broker.id": str(JOINED_BROKER_ID),
        # The embedded ZooKeeper's generated credentials: its znodes are the brokers' only.
        "raykafka.zookeeper.digest.file": nodes[0]["zk_digest_file"], "zookeeper.set.acl": "true",
        "controlled.shutdown.retry.backoff.ms": "500"})
    joined.start(timeout_s=180)
    try:
        bootstrap = cluster.bootstrap_all
        wait_for(lambda: JOINED_BROKER_ID in metadata(bootstrap, []).brokers, 60, "the joined broker in Metadata")
        others = [n["broker_id"] for n in nodes]
        topic = "shutdown"
        new_topic(topic, assignment=[[JOINED_BROKER_ID, other] for other in others])
        wait_full_isr(bootstrap, topic)
        parts = wait_for(lambda: all_preferred(bootstrap, topic), 30, "the joined broker leading every partition")
        assert all(p.leader == JOINED_BROKER_ID for p in parts.values())

        partitions = sorted(parts)
        # A steady acks=all stream on every partition; its acknowledgement times show the outage.
        with BackgroundProducer(f"{bootstrap},{joined.bootstrap}", topic, partitions=partitions,
                                records_per_round=6, round_pause_s=0.005) as producer:
            producer.wait_acked(1500)
            sigterm_at = time.monotonic()
            code = joined.stop(timeout_s=120)
            exited_at = time.monotonic()
            assert code == 0, f"joined broker exit code {code}:\n{joined.log_tail()}"
            log_text = joined.log_path.read_text(errors="replace")
            assert f"controlled shutdown of broker {JOINED_BROKER_ID} succeeded" in log_text, joined.log_tail()
            after = partitions_of(bootstrap, topic)
            assert all(p.leader in others for p in after.values()), after
            producer.wait_acked(len(producer.acked) + 600)
            producer.stop()
    finally:
        joined.stop()

    records = consume_all(bootstrap, topic, partitions)
    assert_acked_present(producer.acked, records)
    windows = {}
    for p in partitions:
        times = [t for t in producer.ack_times[p] if sigterm_at - 1 <= t]
        assert times and times[-1] > exited_at, f"partition {p}: no acknowledgement after the broker exited"
        windows[p] = max(b - a for a, b in zip(times, times[1:]))
    print(f"\nSIGTERM of broker {JOINED_BROKER_ID}: exit 0 after {exited_at - sigterm_at:.2f}s; leaders now "
          f"{ {p: s.leader for p, s in sorted(after.items())} }; unavailability (largest gap between acks) "
          f"per partition: " + ", ".join(f"{p}: {w * 1000:.0f} ms" for p, w in sorted(windows.items())))
    # The target is under 1 s; a performance target is reported, not asserted.
    assert max(windows.values()) < 10, windows


# ---- 5. CreatePartitions --------------------------------------------------------------------------------
def test_create_partitions_grows_a_topic_and_new_partitions_serve(cluster, new_topic):
    bootstrap = cluster.bootstrap_all
    topic = "grown"
    new_topic(topic, partitions=2, replication_factor=2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=30)[topic].result(timeout=60)
    parts = wait_full_isr(bootstrap, topic)
    assert sorted(parts) == [0, 1, 2, 3], parts
    live = {n["broker_id"] for n in cluster.nodes()}
    for p in (2, 3):
        assert parts[p].leader in live and len(parts[p].replicas) == 2, parts[p]

    acked: dict[tuple[int, int], int] = {}
    failures = []

    def on_delivery(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = int(msg.key())
        else:
            failures.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(200):
        producer.produce(topic, key=str(i).encode(), value=b"x", partition=2 + i % 2, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert not failures and len(acked) == 200, failures[:3]
    assert_acked_present(acked, consume_all(bootstrap, topic, [2, 3]))

    for count in (4, 3):
        future = admin.create_partitions([NewPartitions(topic, count)], operation_timeout=30)[topic]
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=60)
        assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS, refused.value
    assert sorted(partitions_of(bootstrap, topic)) == [0, 1, 2, 3]


# ---- 6. The cluster's own Ray processes ---------------------------------------------------------------------
def test_local_nodes_run_no_autoscaler(cluster):
    """`--nodes` starts local Ray nodes and has nothing to scale: no autoscaler
    monitor runs (it ignored SIGTERM and held every stop for Ray's 1 s grace)."""
    import psutil

    commands = []
    for p in cluster.tree():
        try:
            commands.append(" ".join(p.cmdline()))
        except psutil.NoSuchProcess:
            pass
    assert sum("raylet/raylet" in c for c in commands) >= 3, commands  # the tree holds the cluster's Ray nodes
    assert [c for c in commands if "autoscaler/_private/monitor.py" in c] == []
