"""Listeners, TLS and SASL (issue 21, parts 1-3) with real clients.

One broker for the module, five listeners:
  PLAINTEXT (first: the ready line, admin), SSL (client certificates
  requested), MTLS (an SSL listener via listener.security.protocol.map,
  certificates required, principal mapping rules), SASL_PLAINTEXT (PLAIN,
  SCRAM-SHA-256, SCRAM-SHA-512), SASL_SSL (the same three).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("cryptography")

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,  # noqa: E402
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.cli_runner import wait_for  # noqa: E402
from tests.security_certs import make_pki  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
FAIL_DELAY_MS = 300
# Every client authenticates with each mechanism over each SASL protocol.
SASL_CASES = [(listener, mechanism) for listener in ("SASL_PLAINTEXT", "SASL_SSL")
              for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")]


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    base = tmp_path_factory.mktemp("security")
    pki = make_pki(base / "pki", key_password="key-secret")
    ssl_port, mtls_port, sasl_port, sasl_ssl_port = _free_ports(4)
    overrides = {
        "listeners": (f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls_port},"
                      f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}"),
        "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                           "SASL_SSL:SASL_SSL"),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki["broker"]),
        "ssl.key.password": "key-secret",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki["ca"]),
        "listener.name.ssl.ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": JAAS,  # the fallback, for SASL_SSL's PLAIN
        "connection.failed.authentication.delay.ms": str(FAIL_DELAY_MS),
        "offsets.topic.num.partitions": "1",
        "raykafka.replicas.per.node.max": "60",
    }
    process = BrokerProcess(base / "data", overrides=overrides, log_name="security-broker.log").start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "scram-user", ScramCredentialInfo(mechanism, 4096), b"scram-secret")])
        for future in futures.values():
            future.result(30)
    yield {"broker": process, "pki": pki, "ports": {"SSL": ssl_port, "MTLS": mtls_port, "SASL_PLAINTEXT": sasl_port,
                                                     "SASL_SSL": sasl_ssl_port}}
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


def _client_config(secured, listener: str, **extra) -> dict:
    config = {"bootstrap.servers": f"127.0.0.1:{secured['ports'][listener]}"}
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        config.update({"ssl.ca.location": str(secured["pki"]["ca"])})
    protocol = {"SSL": "SSL", "MTLS": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}[listener]
    config["security.protocol"] = protocol
    config.update(extra)
    return config


def _round_trip(config: dict, n: int = 20, timeout_s: float = 60) -> list[bytes]:
    """Create a topic through the listener (auto-create), produce n records, read them back."""
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    producer = Producer({**config, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode())
    left = producer.flush(timeout_s)
    assert left == 0, "records not acknowledged"
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + timeout_s
    try:
        while len(values) < n and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(n)]
    return values


def _metadata_ports(config: dict) -> set[int]:
    metadata = AdminClient(config).list_topics(timeout=30)
    return {b.port for b in metadata.brokers.values()}


def test_ssl_confluent_without_client_certificate(secured):
    config = _client_config(secured, "SSL")
    assert _metadata_ports(config) == {secured["ports"]["SSL"]}  # the listener the client came in on
    _round_trip(config)


def test_mtls_required_client_certificate(secured):
    pki = secured["pki"]
    with_cert = _client_config(secured, "MTLS", **{"ssl.certificate.location": str(pki["client"]),
                                                    "ssl.key.location": str(pki["client-key"])})
    assert _metadata_ports(with_cert) == {secured["ports"]["MTLS"]}
    _round_trip(with_cert, n=5)
    # Without a certificate the handshake is refused: librdkafka reports it
    # through error_cb at once and retries until list_topics' timeout.
    errors = []
    without = AdminClient(_client_config(secured, "MTLS", error_cb=errors.append))
    with pytest.raises(KafkaException):
        without.list_topics(timeout=3)
    wait_for(lambda: without.poll(0.1) is not None and errors, 10, "the refused handshake's error", poll_s=0)
    assert errors and all(e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
                          for e in errors), errors


def test_sasl_plain_confluent(secured):
    config = _client_config(secured, "SASL_PLAINTEXT", **{"sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                                          "sasl.password": "alice-secret"})
    assert _metadata_ports(config) == {secured["ports"]["SASL_PLAINTEXT"]}
    _round_trip(config)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_scram_confluent(secured, mechanism):
    config = _client_config(secured, "SASL_PLAINTEXT", **{"sasl.mechanism": mechanism,
                                                          "sasl.username": "scram-user",
                                                          "sasl.password": "scram-secret"})
    _round_trip(config, n=10)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_confluent(secured, mechanism):
    user, password = ("admin", "admin-secret") if mechanism == "PLAIN" else ("scram-user", "scram-secret")
    config = _client_config(secured, "SASL_SSL", **{"sasl.mechanism": mechanism, "sasl.username": user,
                                                    "sasl.password": password})
    assert _metadata_ports(config) == {secured["ports"]["SASL_SSL"]}
    _round_trip(config, n=10)


@pytest.mark.parametrize("mechanism,user", [("PLAIN", "alice"), ("SCRAM-SHA-256", "scram-user"),
                                            ("SCRAM-SHA-512", "nobody")])
def test_wrong_password_fails(secured, mechanism, user):
    errors = []
    config = _client_config(secured, "SASL_PLAINTEXT", **{"sasl.mechanism": mechanism, "sasl.username": user,
                                                          "sasl.password": "wrong",
                                                          "error_cb": errors.append})
    producer = Producer(config)
    producer.produce("never", b"x")
    # Until librdkafka reports the failed authentication (it would retry the record forever).
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def _sasl_wire(secured) -> WireClient:
    return WireClient(f"127.0.0.1:{secured['ports']['SASL_PLAINTEXT']}", timeout=10)


def test_wrong_password_wire_error_delay_and_close(secured):
    client = _sasl_wire(secured)
    handshake = client.request(17, 1, mechanism="PLAIN")
    assert handshake.error_code.value == 0
    assert set(handshake.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    started = time.monotonic()
    answer = client.request(36, 2, auth_bytes=b"\x00alice\x00wrong")
    elapsed = time.monotonic() - started
    assert answer.error_code.value == 58  # SASL_AUTHENTICATION_FAILED
    assert elapsed >= FAIL_DELAY_MS / 1000 * 0.9
    assert client.recv_frame() is None  # closed
    client.close()


def test_unauthenticated_requests_refused(secured):
    client = _sasl_wire(secured)
    versions = client.request(18, 3, client_software_name="t", client_software_version="1")
    assert versions.error_code.value == 0
    client.correlation_id += 1
    from net.codec import encode_request, request_schema

    client.send_raw(encode_request(request_schema(3, 9)(topics=None, allow_auto_topic_creation=False,
                                                       include_cluster_authorized_operations=False,
                                                       include_topic_authorized_operations=False),
                                   client.correlation_id))
    assert client.recv_frame() is None  # closed, no answer
    client.close()
    # The broker still serves others.
    ok = _sasl_wire(secured)
    assert ok.request(17, 1, mechanism="PLAIN").error_code.value == 0
    assert ok.request(36, 2, auth_bytes=b"\x00alice\x00alice-secret").error_code.value == 0
    assert ok.request(3, 9, topics=None, allow_auto_topic_creation=False,
                      include_cluster_authorized_operations=False,
                      include_topic_authorized_operations=False).brokers
    ok.close()


def test_unknown_mechanism_is_refused(secured):
    client = _sasl_wire(secured)
    answer = client.request(17, 1, mechanism="GSSAPI")
    assert answer.error_code.value == 33  # UNSUPPORTED_SASL_MECHANISM
    assert "SCRAM-SHA-256" in answer.mechanisms
    assert client.recv_frame() is None
    client.close()


def test_oversized_token_fails(secured):
    client = _sasl_wire(secured)
    assert client.request(17, 1, mechanism="PLAIN").error_code.value == 0
    answer = client.request(36, 2, auth_bytes=b"\x00" * (70 * 1024))
    assert answer.error_code.value == 58
    assert client.recv_frame() is None
    client.close()


def test_large_request_before_authentication_closes(secured):
    """sasl.server.max.receive.size (512 KiB): a bigger frame before authenticating closes the connection."""
    import struct

    client = _sasl_wire(secured)
    client.send_raw(struct.pack(">i", 10 * 1024 * 1024) + b"\x00" * 1024)
    assert client.recv_frame() is None
    client.close()


def test_garbage_tls_records_leave_the_broker_serving(secured):
    raw = socket.create_connection(("127.0.0.1", secured["ports"]["SSL"]), timeout=10)
    raw.sendall(b"\x16\x03\x01\x00\x05garbage-not-a-tls-hello" * 10)
    try:
        raw.recv(100)
    except OSError:
        pass
    raw.close()
    assert _metadata_ports(_client_config(secured, "SSL")) == {secured["ports"]["SSL"]}


def test_scram_credentials_admin(secured):
    admin = AdminClient({"bootstrap.servers": secured["broker"].bootstrap})
    described = admin.describe_user_scram_credentials(["scram-user"])
    description = described["scram-user"].result(30)
    assert sorted((i.mechanism, i.iterations) for i in description.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
    # A new user, then its deletion: authentication follows the credential at once.
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "temp-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"temp-secret")])
    futures["temp-user"].result(30)
    config = _client_config(secured, "SASL_PLAINTEXT", **{"sasl.mechanism": "SCRAM-SHA-256",
                                                          "sasl.username": "temp-user",
                                                          "sasl.password": "temp-secret"})
    assert _metadata_ports(config) == {secured["ports"]["SASL_PLAINTEXT"]}
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        "temp-user", ScramMechanism.SCRAM_SHA_256)])["temp-user"].result(30)
    with pytest.raises(KafkaException):
        admin.describe_user_scram_credentials(["temp-user"])["temp-user"].result(30)
    # Too few iterations: UNACCEPTABLE_CREDENTIAL.
    bad = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "weak", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw")])
    with pytest.raises(KafkaException):
        bad["weak"].result(30)


@pytest.mark.parametrize("listener,mechanism", SASL_CASES)
def test_kafka_python_sasl(secured, listener, mechanism):
    kafka = pytest.importorskip("kafka")
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("scram-user", "scram-secret")
    options = dict(bootstrap_servers=f"127.0.0.1:{secured['ports'][listener]}", security_protocol=listener,
                   sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    if listener == "SASL_SSL":
        options.update(ssl_cafile=str(secured["pki"]["ca"]), ssl_check_hostname=False)
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    producer = kafka.KafkaProducer(**options)
    for i in range(5):
        producer.send(topic, f"v{i}".encode()).get(timeout=60)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20000,
                                   group_id=f"g-{topic}", **options)
    values = [m.value for _, m in zip(range(5), consumer)]
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("listener,mechanism", SASL_CASES)
def test_aiokafka_sasl(secured, listener, mechanism):
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    from aiokafka.helpers import create_ssl_context

    user, password = ("admin", "admin-secret") if mechanism == "PLAIN" else ("scram-user", "scram-secret")
    options = dict(bootstrap_servers=f"127.0.0.1:{secured['ports'][listener]}", security_protocol=listener,
                   sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    if listener == "SASL_SSL":
        options["ssl_context"] = create_ssl_context(cafile=str(secured["pki"]["ca"]))
    topic = f"aio-{uuid.uuid4().hex[:8]}"

    async def run():
        producer = aiokafka.AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
        await consumer.start()
        try:
            values = []
            while len(values) < 5:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                values += [m.value for messages in batch.values() for m in messages]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"v{i}".encode() for i in range(5)]


def test_metadata_per_listener_on_two_brokers(tmp_path):
    """Two brokers (--nodes 2), each with PLAINTEXT and SASL_PLAINTEXT: Metadata
    through either listener names both brokers' endpoints on that listener
    (the second listener's from the /brokers/ids registrations)."""
    while True:
        [port] = _free_ports(1)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
                break
            except OSError:
                continue
    cluster = BrokerProcess(tmp_path / "data", extra_args=["--nodes", "2"], log_name="security-two.log", overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "offsets.topic.num.partitions": "1"}).start(timeout_s=240)
    try:
        sasl = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
        deadline = time.monotonic() + 60
        while _metadata_ports(sasl) != {port, port + 1} and time.monotonic() < deadline:
            time.sleep(1)
        assert _metadata_ports(sasl) == {port, port + 1}
        plaintext = _metadata_ports({"bootstrap.servers": cluster.bootstrap})
        assert len(plaintext) == 2 and not plaintext & {port, port + 1}
        _round_trip(sasl, n=10)
    finally:
        cluster.stop()



def test_kafkajs_sasl(secured):
    """kafkajs (node, tests/js/sasl.js) authenticates with PLAIN and SCRAM-SHA-256/512 over
    SASL_PLAINTEXT and SASL_SSL, producing and consuming through each; wrong passwords fail."""
    node = shutil.which("node")
    assert node, "node is not installed (./dev setup installs it)"
    js_dir = Path(__file__).resolve().parents[1] / "js"
    assert (js_dir / "node_modules" / "kafkajs" / "package.json").exists(), \
        "kafkajs is not installed in tests/js (./dev setup runs npm ci there)"
    cases = []
    for listener, mechanism in SASL_CASES:
        user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("scram-user", "scram-secret")
        common = {"broker": f"127.0.0.1:{secured['ports'][listener]}", "mechanism": mechanism, "username": user,
                  "ca": str(secured["pki"]["ca"]) if listener == "SASL_SSL" else None}
        name = f"{listener}-{mechanism}"
        cases.append({**common, "name": name, "password": password, "expectFailure": False})
        cases.append({**common, "name": f"{name}-wrong", "password": "wrong", "expectFailure": True})
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    proc = subprocess.run([node, str(js_dir / "sasl.js"), json.dumps({"cases": cases})], cwd=js_dir, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"kafkajs failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for listener, mechanism in SASL_CASES:
        name = f"{listener}-{mechanism}"
        assert results[name] == {"ok": True, "values": ["v0", "v1", "v2"]}, (name, results[name])
        assert results[f"{name}-wrong"]["ok"], (name, results[f"{name}-wrong"])
