"""A broker whose ZooKeeper session expires registers again (Kafka's broker
does, on the new session): a starved or paused edge process loses its
ephemeral /brokers/ids/<id>, the controller takes the broker for dead and
its partitions offline, and once the edge runs again the broker is back in
the cluster, its partitions led again, every acknowledged record there.

Seen in the suite before the fix: test_liveness's saturated node starved the
shared broker's edge past its session timeout, and every later test on that
broker got "Replication factor: 1 larger than available brokers: 0".

One broker of its own, with a short session timeout; the edge is paused with
SIGSTOP until ZooKeeper has dropped its registration.
"""
from __future__ import annotations

import signal
import time

import psutil
import pytest
from confluent_kafka import Producer

from metadata.kafka_zk import KafkaZkClient
from tests.broker_process import BrokerProcess
from tests.integration.test_controller import wait_for
from tests.integration.test_supervision import consume_everything
from tests.kafka_admin import create_topic

SESSION_TIMEOUT_MS = 6000
PARTITIONS = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("zk-session") / "data",
                            overrides={"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                                       "offsets.topic.num.partitions": "1"})
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


def produce(bootstrap: str, topic: str, values: list[bytes], timeout_s: float = 60) -> dict:
    """acks=all; -> {(partition, offset): value} of what the broker acknowledged."""
    acked, errors = {}, []

    def report(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "reconnect.backoff.max.ms": 500, "retry.backoff.max.ms": 500,
                         "message.timeout.ms": int(timeout_s * 1000)})
    for value in values:
        producer.produce(topic, value=value, on_delivery=report)
        producer.poll(0)
    assert producer.flush(timeout_s + 5) == 0
    assert not errors, errors[:5]
    return acked


def test_an_edge_whose_session_expired_registers_again_and_serves(broker):
    topic = "session-expiry"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce(broker.bootstrap, topic, [b"before-%d" % i for i in range(500)])
    node = broker.nodes()[0]
    broker_id, edge = node["broker_id"], psutil.Process(node["edge_pid"])
    zk = KafkaZkClient(node["zk_connect"], session_timeout_ms=10_000).start()
    try:
        assert broker_id in zk.brokers.ids()
        edge.send_signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        try:
            wait_for(lambda: broker_id not in zk.brokers.ids(), 3 * SESSION_TIMEOUT_MS / 1000 + 10,
                     "ZooKeeper to drop the paused edge's registration")
            expired_after = time.monotonic() - paused_at
        finally:
            edge.send_signal(signal.SIGCONT)
        print(f"registration gone {expired_after:.1f} s after the pause")
        wait_for(lambda: broker_id in zk.brokers.ids(), 60, "the broker to register again")
        assert psutil.Process(broker.nodes()[0]["edge_pid"]).pid == edge.pid, "the same edge, not a replacement"
    finally:
        zk.close()
    # The edge's log reaches the broker's through Ray's log forwarding, a moment later.
    wait_for(lambda: "registered again after its ZooKeeper session expired" in broker.log_tail(2000), 15,
             "the edge to log that it registered again")
    # The controller elected leaders again: acks=all produces are acknowledged, nothing is lost.
    acked.update(produce(broker.bootstrap, topic, [b"after-%d" % i for i in range(500)]))
    present = consume_everything(broker.bootstrap, topic)
    lost = {k: v for k, v in acked.items() if present.get(k) != v}
    assert not lost and len(acked) == 1000, f"{len(lost)} acknowledged records lost"
