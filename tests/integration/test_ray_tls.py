"""Ray's TLS (RAY_USE_TLS) on a local multi-node cluster: `raykafka start
--nodes 2` with Ray's token and TLS on every Ray process, an RF=2 topic whose
replication crosses the two Ray nodes over TLS, and drivers without the TLS
settings or without the token kept out (README, Security)."""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess
from tests.cli_runner import wait_for
from tests.integration.test_default_security import ATTACH, NO_RAY_AUTH
from tests.kafka_admin import create_topic
from tests.security_certs import make_pki


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("ray-tls")
    pki = make_pki(base / "pki")  # the node certificate names 127.0.0.1; Ray uses it for both ends
    tls = {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": str(pki["broker-chain"]),
           "RAY_TLS_SERVER_KEY": str(pki["broker-key"]), "RAY_TLS_CA_CERT": str(pki["ca"])}
    broker = BrokerProcess(base / "data", extra_args=["--nodes", "2"], env_changes={**NO_RAY_AUTH, **tls},
                           overrides={"default.replication.factor": "2", "offsets.topic.num.partitions": "1",
                                      "transaction.state.log.num.partitions": "1"})
    broker.start(timeout_s=300)
    yield broker, tls, base
    code = broker.stop()
    assert code == 0, broker.log_tail()


def _attach(address: str, home, timeout_s: float, **env_changes) -> str:
    env = {k: v for k, v in os.environ.items() if k not in NO_RAY_AUTH and not k.startswith("RAY_TLS")}
    env.pop("RAY_USE_TLS", None)
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", **env_changes)
    try:
        done = subprocess.run([sys.executable, "-c", ATTACH, address], env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "TIMED OUT"  # a driver that neither got in nor gave up
    return done.stdout


def test_replication_over_tls_and_drivers_without_tls_or_token_kept_out(tls_cluster):
    broker, tls, base = tls_cluster
    nodes = broker.nodes()
    assert len(nodes) == 2
    bootstrap = broker.bootstrap_all
    create_topic(bootstrap, "over-tls", 2, replication_factor=2)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def full_isr():
        parts = admin.list_topics("over-tls", timeout=20).topics["over-tls"].partitions
        return all(len(p.isrs) == 2 for p in parts.values()) and len(parts) == 2

    wait_for(full_isr, 90, "both replicas of each partition in the ISR")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(500):
        producer.produce("over-tls", b"v%d" % i, partition=i % 2)
    assert producer.flush(60) == 0
    assert full_isr()  # the followers kept up over Ray's TLS channels
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "over-tls", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["over-tls"])
    values = set()
    try:
        wait_for(lambda: _poll_into(consumer, values) >= 500, 90, "the 500 records consumed")
    finally:
        consumer.close()
    assert values == {b"v%d" % i for i in range(500)}

    address, token = nodes[0]["ray_address"], nodes[0]["ray_auth_token_path"]
    with ThreadPoolExecutor(3) as pool:
        # Without TLS a driver never gets an answer from the GCS. Ray's connect and reconnect
        # timeouts (60 s by default) are shortened for all three drivers, so that one kept out
        # gives up by itself (~20 s: "GCS may have been killed") instead of using up our whole
        # wait; the admitted driver shows the short timeouts are enough to get in.
        short = {"RAY_gcs_server_request_timeout_seconds": "10", "RAY_gcs_rpc_server_connect_timeout_s": "5",
                 "RAY_gcs_rpc_server_reconnect_timeout_s": "10"}
        both = pool.submit(_attach, address, base, 150, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token, **tls,
                           **short)
        # A refused driver also retries its whole connect about once a second for 20 s
        # (ray's NUM_REDIS_GET_RETRIES): one try shows the refusal as well. The driver
        # without TLS gives up after 3 s without an answer (8 s in all, not 21).
        once = {"RAY_gcs_server_port_wait_time_s": "1"}
        no_token = pool.submit(_attach, address, base, 150, **tls, **short, **once)
        shorter = {**short, "RAY_gcs_rpc_server_connect_timeout_s": "2", "RAY_gcs_rpc_server_reconnect_timeout_s": "3",
                   "RAY_gcs_server_request_timeout_seconds": "3"}
        no_tls = pool.submit(_attach, address, base, 60, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token, **shorter,
                             **once)
        admitted = both.result()
        # It sees the broker's named actors (the edges; a replica a spare adopted has no Ray name).
        assert "ATTACHED" in admitted and f"edge@{nodes[0]['broker_id']}" in admitted, admitted
        for refused in (no_token.result(), no_tls.result()):
            assert "ATTACHED" not in refused, refused


def _poll_into(consumer, values: set) -> int:
    for message in consumer.consume(num_messages=500, timeout=1):
        if message.error() is None:
            values.add(message.value())
    return len(values)
