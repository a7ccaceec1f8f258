"""A saturated node is slow, not dead (issue 18, part 3).

A single-node broker with 100 idle replicas while other processes hold
every core at 100% for 45 s (past Ray's health-check window): Ray must
not declare the node dead, no ZooKeeper session may expire (a broker's would
re-register it and move leadership), so no leader election happens at all,
and a producer works afterwards. Before, ~240 replicas alone pushed the load
average to 75-160 and Ray's 1.5 s node health check killed the whole broker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

from metadata.kafka_zk import KafkaZkClient
from tests.broker_process import REPO, BrokerProcess, broker_env
from tests.kafka_admin import create_topic

IDLE_TOPICS = {"idle-a": 50, "idle-b": 50}
BUSY_TOPIC = "after"
# Longer than every clock that could declare the node dead under this load:
# Ray's health check (node/ray_cluster.py: 10 consecutive failures, each a 3 s timeout
# then a 1 s period, so at most ~40 s) and, 2.5 times over, the ZooKeeper
# session timeout below (18 s).
BURN_S = 45

RAY_NODES = r"""
import json, sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print("RESULT " + json.dumps([{"alive": n["Alive"], "id": n["NodeID"]} for n in ray.nodes()]), flush=True)
ray.shutdown()
"""


def ray_nodes(address: str) -> list[dict]:
    run = subprocess.run([sys.executable, "-c", RAY_NODES, address], env=broker_env(), cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-2000:]
    return json.loads(lines[-1][len("RESULT "):])


def zk_view(zk: KafkaZkClient) -> dict:
    """Leader epoch and leader of every partition, and the controller epoch."""
    view = {"controller_epoch": zk.controller.epoch()}
    for topic, count in {**IDLE_TOPICS, BUSY_TOPIC: 1}.items():
        for p in range(count):
            found = zk.partitions.state(topic, p)
            assert found is not None, f"{topic}-{p} has no state znode"
            view[f"{topic}-{p}"] = (found[0].leader, found[0].leader_epoch)
    return view


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # Kafka's default session timeout (the broker's too), not the 6 s the
    # other tests use to see a dead broker sooner.
    overrides = {"zookeeper.session.timeout.ms": "18000"}
    from core.config import BROKER_CONFIGS

    if "raykafka.replicas.per.node.max" in BROKER_CONFIGS:
        overrides["raykafka.replicas.per.node.max"] = "200"
    b = BrokerProcess(tmp_path_factory.mktemp("liveness") / "data", overrides=overrides).start()
    try:
        for topic, partitions in IDLE_TOPICS.items():
            create_topic(b.bootstrap, topic, partitions=partitions)
        create_topic(b.bootstrap, BUSY_TOPIC, partitions=1)
        yield b
    finally:
        b.stop()


def produce(bootstrap: str, topic: str, count: int) -> list:
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    for i in range(count):
        p.produce(topic, value=b"v%d" % i, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(90) == 0, "records left undelivered"
    return errors


@pytest.mark.cpu_heavy
def test_saturated_node_stays_up_without_an_election(broker):
    (node,) = broker.nodes()
    zk = KafkaZkClient(node["zk_connect"], session_timeout_ms=18000).start(ensure_paths=False)
    burners: list[subprocess.Popen] = []
    try:
        # Every partition has its leader before the CPU is taken away.
        deadline = time.monotonic() + 120
        while True:
            before = zk_view(zk)
            if all(v[0] >= 0 for k, v in before.items() if k != "controller_epoch"):
                break
            assert time.monotonic() < deadline, "partitions without a leader"
            time.sleep(1)
        assert produce(broker.bootstrap, BUSY_TOPIC, 10) == []
        (ray_node,) = [n for n in ray_nodes(node["ray_address"]) if n["alive"]]

        # Two busy loops per core at nice 0: more runnable work than cores,
        # above every Ray worker's priority (they run at nice 15).
        for _ in range(2 * (os.cpu_count() or 2)):
            burners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        burn_until = time.monotonic() + BURN_S
        while time.monotonic() < burn_until:
            assert broker.proc.poll() is None, "the broker exited under load:\n" + broker.log_tail()
            time.sleep(1)
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait(timeout=30)

    try:
        nodes = ray_nodes(node["ray_address"])
        assert [n["id"] for n in nodes if n["alive"]] == [ray_node["id"]], nodes
        assert produce(broker.bootstrap, BUSY_TOPIC, 100) == []
        assert produce(broker.bootstrap, "idle-a", 10) == []
        after = zk_view(zk)
        assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        assert broker.proc.poll() is None
    finally:
        zk.close()
