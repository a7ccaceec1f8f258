"""One 3-node cluster (`raykafka start --nodes 3`) for the
tests that need "three brokers on three Ray nodes" and no settings of their
own: a cluster start and stop (about a minute on this machine) each, saved.

Those tests kill nodes (kill -9, a machine crash). Before each of them the
cluster is made whole again (`restore`): dead nodes revived with SIGHUP, the
same broker ids and log dirs, every partition's ISR full, and every partition
led by its preferred replica, so what a test finds is what a fresh cluster
has. They run last in the session (tests/conftest.py orders them), one after
the other, so the cluster is started once and lives only while they run.
"""
from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess, _pid_alive
from tests.wire_client import WireClient

NODES = 3
# Cluster-wide settings of the internal topics, which the tests that use them read.
OFFSETS_PARTITIONS = 2
TXN_STATE_PARTITIONS = 3
OVERRIDES = {
    "replica.lag.time.max.ms": "10000",
    "group.initial.rebalance.delay.ms": "500",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "transaction.state.log.num.partitions": str(TXN_STATE_PARTITIONS),
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "raykafka.replicas.per.node.max": "200",
}


def start(data_dir: Path, timeout_s: float = 300) -> BrokerProcess:
    """The cluster, with __consumer_offsets and __transaction_state created while
    every node is up (so each has three replicas whatever the first test does)."""
    cluster = BrokerProcess(data_dir, extra_args=["--nodes", str(NODES)],
                            log_name="three-nodes.log", overrides=OVERRIDES)
    try:
        cluster.start(timeout_s=timeout_s)
    except RuntimeError as exc:
        # Five tests share this start: one more try when Ray's raylet registration
        # (a fixed 30 s wait) timed out on a loaded machine, the failure seen there.
        if "timed out during startup" not in str(exc):
            raise
        print(f"shared 3-node cluster: Ray node start timed out, starting again:\n{exc}")
        cluster.kill9()  # whatever of the first try is left (its ZooKeeper, Ray's GCS)
        cluster = BrokerProcess(data_dir.parent / "data-retry", extra_args=cluster.extra_args,
                                log_name="three-nodes-retry.log", overrides=OVERRIDES).start(timeout_s=timeout_s)
    try:
        head = cluster.nodes()[0]
        for key_type in (0, 1):  # FindCoordinator(GROUP), (TRANSACTION): the internal topic is created
            _wait(lambda: _coordinator_found(f"{head['host']}:{head['port']}", key_type), 120,
                  f"FindCoordinator(key_type={key_type})")
        restore(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def restore(cluster: BrokerProcess, timeout_s: float = 240) -> None:
    """Every node alive, every partition's ISR full and led by its preferred replica."""
    deadline = time.monotonic() + timeout_s
    if any(not _pid_alive(n.get("raylet_pid")) for n in cluster.nodes()):
        cluster.revive(timeout_s=timeout_s)
    left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
    _wait(lambda: len(_metadata(cluster).brokers) == NODES, left(), f"{NODES} brokers registered")
    _wait(lambda: all(sorted(p.isrs) == sorted(p.replicas) for p in _partitions(cluster)), left(),
          "every partition's ISR full")
    _wait(lambda: _preferred_leaders(cluster), left(), "every partition led by its preferred replica")


def _preferred_leaders(cluster: BrokerProcess) -> bool:
    """Whether every partition is led by its preferred replica; if not, ask for that election."""
    metadata = _metadata(cluster)
    off = [TopicPartition(topic, p.id) for topic, t in metadata.topics.items() for p in t.partitions.values()
           if p.leader != p.replicas[0]]
    if off:
        # The client is kept until the answer: a destroyed client never completes its futures.
        # (No keyword arguments: confluent-kafka 2.16's elect_leaders rejects its own timeouts.)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_all})
        admin.elect_leaders(ElectionType.PREFERRED, off).result(timeout=60)
    return not off


def _metadata(cluster: BrokerProcess):
    return AdminClient({"bootstrap.servers": cluster.bootstrap_all}).list_topics(timeout=10)


def _partitions(cluster: BrokerProcess):
    return [p for t in _metadata(cluster).topics.values() for p in t.partitions.values()]


def _coordinator_found(bootstrap: str, key_type: int) -> bool:
    client = WireClient(bootstrap, timeout=10)
    try:
        return client.request(10, 3, key="three-nodes-probe", key_type=key_type).error_code == 0
    finally:
        client.close()


def _wait(condition, timeout_s: float, what: str) -> None:
    """Poll `condition` until it holds; errors of brokers still coming up count as not yet."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception as exc:  # noqa: BLE001 - a node restarting refuses connections for a while
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"shared 3-node cluster: timed out waiting for {what}; last error: {last!r}")
