"""A node states its capacity and refuses creations beyond it, whole per
topic, with POLICY_VIOLATION, and keeps serving: the hosted limit
raykafka.partitions.per.node.max where replicas hibernate (issue 30, the
default), the live limit raykafka.replicas.per.node.max on a node where they
do not (issue 18). Real broker subprocesses, the confluent-kafka AdminClient.

Each broker here is its own (not the session's shared one): the limit must be
hit exactly, which the shared broker's other tests would disturb.
"""
from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from cluster.capacity import CAPACITY_KEY, HOSTED_KEY, node_capacity
from metadata.kafka_zk import KafkaZkClient
from tests.broker_process import BrokerProcess
from tests.wire_client import WireClient

POLICY_VIOLATION = KafkaError.POLICY_VIOLATION  # 44
OP_TIMEOUT = 180  # creating ~90 replica actors on a 2-core node takes ~60-90 s


def admin_client(bootstrap: str) -> AdminClient:
    # librdkafka caps a request's wait at socket.timeout.ms (60 s by default).
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300000})


def _outcomes(futures: dict) -> dict[str, KafkaException | None]:
    out = {}
    for name, future in futures.items():
        try:
            future.result(timeout=OP_TIMEOUT + 30)
            out[name] = None
        except KafkaException as exc:
            out[name] = exc
    return out


def create(admin: AdminClient, topics: list[NewTopic], validate_only: bool = False) -> dict:
    return _outcomes(admin.create_topics(topics, operation_timeout=OP_TIMEOUT, request_timeout=OP_TIMEOUT + 20,
                                         validate_only=validate_only))


def assert_policy_violation(exc: KafkaException | None, limit: int, key: str = CAPACITY_KEY) -> str:
    assert exc is not None, "expected POLICY_VIOLATION, the topic was created"
    err = exc.args[0]
    assert err.code() == POLICY_VIOLATION, err
    message = err.str()
    assert f"{key}={limit}" in message and "add a node or raise the limit" in message, message
    return message


def zk_client(broker: BrokerProcess) -> KafkaZkClient:
    cfg = (broker.data_dir / "zookeeper" / "zoo.cfg").read_text()
    port = re.search(r"clientPort\s*=\s*(\d+)", cfg).group(1)
    zk = KafkaZkClient(f"127.0.0.1:{port}")
    zk.start(ensure_paths=False)
    return zk


def log_dirs_of(broker: BrokerProcess, topic: str) -> list[Path]:
    return [p for p in broker.data_dir.rglob(f"{topic}-*") if p.is_dir() and p.name.rsplit("-", 1)[0] == topic]


def hosted_replicas(admin: AdminClient) -> int:
    md = admin.list_topics(timeout=30)
    return sum(len(p.replicas) for t in md.topics.values() for p in t.partitions.values())


def leaders_ready(admin: AdminClient, names: list[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(timeout=30)
        missing = [n for n in names if n not in md.topics or md.topics[n].error is not None
                   or any(p.leader < 0 for p in md.topics[n].partitions.values())]
        if not missing:
            return
        assert time.monotonic() < deadline, f"no leaders for {missing[:5]}"
        time.sleep(0.5)


def roundtrip(bootstrap: str, topic: str, n: int = 20) -> None:
    """Produce n records and read them back through a consumer group (so the
    group coordinator and __consumer_offsets take part). The bounds are generous:
    right after a fill, the topic's replicas may still be queued behind dozens of
    replica processes that Ray starts a few at a time, slower still when the
    other test worker has the cores (flush returns as soon as all is delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(120) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 120
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(n))


# ---- (a) an explicit hosted limit of 50, replicas hibernating (the default) ----------------------------------------
LIMIT = 50


@pytest.fixture(scope="class")
def limited(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("capacity-50") / "data",
                            overrides={HOSTED_KEY: str(LIMIT), "offsets.topic.num.partitions": "1"})
    process.start()
    yield process
    assert process.stop() == 0, process.log_tail()


@pytest.mark.cpu_heavy  # fills a node to 50 replicas
class TestExplicitLimit:
    def test_fills_to_the_limit_then_refuses(self, limited):
        admin = admin_client(limited.bootstrap)
        # Until __consumer_offsets exists, room for its 1 replica is kept: user topics reach 49.
        results = create(admin, [NewTopic("fill-0", 7, 1)])
        assert results == {"fill-0": None}
        roundtrip(limited.bootstrap, "fill-0")  # creates __consumer_offsets: 8 replicas now
        assert hosted_replicas(admin) == 8
        results = create(admin, [NewTopic(f"fill-{i}", 7, 1) for i in range(1, 7)])
        assert results == {f"fill-{i}": None for i in range(1, 7)}
        assert hosted_replicas(admin) == LIMIT

        # The 51st replica: refused, with validate_only answering the same.
        message = assert_policy_violation(create(admin, [NewTopic("one-more", 1, 1)], validate_only=True)["one-more"],
                                          LIMIT, HOSTED_KEY)
        assert "holding 50 of" in message
        assert_policy_violation(create(admin, [NewTopic("one-more", 1, 1)])["one-more"], LIMIT, HOSTED_KEY)
        # Growing a topic and auto-creation are held to the same limit.
        grow = admin.create_partitions([NewPartitions("fill-1", 8)], operation_timeout=30)
        assert_policy_violation(_outcomes(grow)["fill-1"], LIMIT, HOSTED_KEY)
        client = WireClient(limited.bootstrap)
        try:
            md = _metadata_auto_create(client, "auto-x")
        finally:
            client.close()
        assert md == POLICY_VIOLATION
        zk = zk_client(limited)
        try:
            for name in ("one-more", "auto-x"):
                assert zk.topics.get(name) is None
                assert log_dirs_of(limited, name) == []
            assert len(zk.topics.get("fill-1").partitions) == 7
        finally:
            zk.close()
        assert hosted_replicas(admin) == LIMIT

    def test_a_topic_straddling_the_limit_is_refused_whole(self, limited):
        admin = admin_client(limited.bootstrap)
        admin.delete_topics(["fill-6"], operation_timeout=30)["fill-6"].result(timeout=60)
        deadline = time.monotonic() + 30
        while hosted_replicas(admin) != LIMIT - 7:
            assert time.monotonic() < deadline, "fill-6 not deleted"
            time.sleep(0.5)
        # 43 hosted: "fits" (5) is created, "straddles" (5 more: 53) is refused as a whole.
        results = create(admin, [NewTopic("fits", 5, 1), NewTopic("straddles", 5, 1)])
        assert results["fits"] is None
        message = assert_policy_violation(results["straddles"], LIMIT, HOSTED_KEY)
        assert "would place 5 replicas on broker" in message and "holding 48 of" in message
        zk = zk_client(limited)
        try:
            assert zk.topics.get("straddles") is None
        finally:
            zk.close()
        assert log_dirs_of(limited, "straddles") == []
        assert "straddles" not in admin.list_topics(timeout=30).topics
        # The broker keeps serving, new and old topics alike.
        leaders_ready(admin, ["fits"])
        roundtrip(limited.bootstrap, "fits")
        roundtrip(limited.bootstrap, "fill-2")

    def test_describe_shows_usage_and_capacity_per_broker(self, limited):
        import subprocess

        from tests.broker_process import RAYKAFKA, REPO, broker_env

        out = subprocess.run([str(RAYKAFKA), "topics", "--bootstrap-server", limited.bootstrap, "--describe",
                              "--topic", "fits"], capture_output=True, text=True, env=broker_env(), cwd=REPO,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        [usage] = [line for line in out.stdout.splitlines() if line.startswith("Broker: ")]
        fields = usage.split("\t")
        assert fields[1:3] == ["Replicas: 48", f"Capacity: {LIMIT}"], usage
        # The live limit (the node's computed default) bounds live replica processes only.
        live = node_capacity(None)
        assert any(f.startswith("Live: ") and f.endswith(f"/{live}") for f in fields), usage
        admin = admin_client(limited.bootstrap)
        broker_id = next(iter(admin.list_topics(timeout=30).brokers))
        [described] = admin.describe_configs([ConfigResource("BROKER", str(broker_id))]).values()
        configs = described.result(timeout=30)
        assert configs[HOSTED_KEY].value == str(LIMIT)
        assert configs[CAPACITY_KEY].value == str(live)


def _metadata_auto_create(client: WireClient, name: str) -> int:
    """Metadata v9 asking for an unknown topic with auto-creation allowed: its error code."""
    from net.codec import request_schema
    from net.schema_build import build, nested

    topic_cls = nested(request_schema(3, 9), "MetadataRequestTopic")
    md = client.request(3, 9, topics=(build(topic_cls, name=name),), allow_auto_topic_creation=True,
                        include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    [topic] = [t for t in md.topics if t.name == name]
    return int(topic.error_code)


# ---- (b) the default live capacity, replicas not hibernating, asked for far more --------------------------------
@pytest.mark.cpu_heavy
def test_default_capacity_refuses_cleanly_and_the_node_survives(tmp_path):
    capacity = node_capacity(None)  # what the broker computes on this machine
    # A node whose replicas never hibernate: every hosted replica is a live process, so its
    # live limit is the one creations are refused past.
    broker = BrokerProcess(tmp_path / "data", overrides={"raykafka.replica.hibernate.ms": "0"})
    broker.start()
    try:
        admin = admin_client(broker.bootstrap)
        [node] = broker.nodes()
        before = {k: node.get(k) for k in ("raylet_pid", "edge_pid")}
        [described] = admin.describe_configs([ConfigResource("BROKER", str(node["broker_id"]))]).values()
        assert described.result(timeout=30)[CAPACITY_KEY].value == str(capacity)
        # 3 partitions like the others, so the node can fill to exactly its capacity.
        assert create(admin, [NewTopic("first", 3, 1)]) == {"first": None}
        roundtrip(broker.bootstrap, "first")  # __consumer_offsets (3 partitions) exists from here on

        names = [f"many-{i:03d}" for i in range(100)]
        results = create(admin, [NewTopic(n, 3, 1) for n in names])
        created = [n for n in names if results[n] is None]
        for name in names:
            if results[name] is not None:
                assert_policy_violation(results[name], capacity)
        hosted = hosted_replicas(admin)
        assert capacity - 3 < hosted <= capacity  # filled: no room left for another 3-partition topic
        if capacity >= 90:
            assert hosted >= 90
        leaders_ready(admin, created)
        md = admin.list_topics(timeout=30)
        assert set(created) <= set(md.topics)
        assert not set(names) - set(created) & set(md.topics)  # refused topics left nothing behind
        # The node was never declared dead: same raylet and edge, no broker loss in the log.
        [node] = broker.nodes()
        assert {k: node.get(k) for k in ("raylet_pid", "edge_pid")} == before
        log = broker.log_path.read_text(errors="replace")
        assert "is gone" not in log and "edge died" not in log
        roundtrip(broker.bootstrap, created[-1])
    finally:
        assert broker.stop() == 0, broker.log_tail()
