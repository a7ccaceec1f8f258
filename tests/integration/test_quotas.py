"""Client quotas (issue 21 part 5) and `raykafka configs`, with real clients.

One broker for the module, two listeners: PLAINTEXT (first: the ready line)
and SASL_PLAINTEXT with PLAIN users admin and alice (`--command-config`).
A client gets at most one window's worth ahead of its quota before its first
throttle (cluster/quotas/model.py, SampledRate), so the rates below are
measured from the client's first byte.
"""
from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.cli_runner import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer  # noqa: E402

from cli import configs  # noqa: E402
from cli.admin_client import AdminClient  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RAYKAFKA = REPO / ".venv" / "bin" / "raykafka"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
QUOTA = 1048576  # bytes/s
RECORD = b"x" * 10_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("quotas")
    sasl_port = _free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "raykafka.replicas.per.node.max": "40",
    }
    process = BrokerProcess(base / "data", overrides=overrides, log_name="quotas-broker.log").start()
    yield {"broker": process, "sasl_port": sasl_port, "base": base}
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(RAYKAFKA), "configs", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def _set_client_quota(bootstrap: str, client_id: str, **values) -> None:
    with AdminClient(bootstrap) as admin:
        outcome = configs.alter_quotas(admin, [("clients", client_id)], values, [])
    assert outcome.ok, outcome.text()


def _create_topic(bootstrap: str, partitions: int = 1) -> str:
    from cli.admin_client import NewTopic

    topic = f"quota-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        result = admin.create_topics([NewTopic(topic, partitions, 1)])
    assert all(o.ok for o in result.values()), result
    return topic


def test_describe_and_alter_client_quotas(quota_broker):
    bootstrap = quota_broker["broker"].bootstrap
    with AdminClient(bootstrap) as admin:
        assert configs.alter_quotas(admin, [("clients", "described")], {"producer_byte_rate": 2048.0}, []).ok
        assert configs.alter_quotas(admin, [("users", "alice"), ("clients", None)],
                                    {"request_percentage": 12.5}, []).ok
        assert configs.alter_quotas(admin, [("users", None)], {"consumer_byte_rate": 4096.0}, []).ok
        refused = configs.alter_quotas(admin, [("clients", "described")], {"no_such_quota": 1.0}, [])
        assert refused.error == 42 and "Invalid configuration key no_such_quota" in refused.message
        fractional = configs.alter_quotas(admin, [("clients", "described")], {"producer_byte_rate": 1.5}, [])
        assert fractional.error == 42
        found = configs.describe_quotas(admin, [("clients", "described")])
        assert found == [([("client-id", "described")], {"producer_byte_rate": 2048.0})]
        found = configs.describe_quotas(admin, [("users", "alice"), ("clients", None)])
        assert found == [([("user", "alice"), ("client-id", None)], {"request_percentage": 12.5})]
        found = configs.describe_quotas(admin, [("users", None)])
        assert found == [([("user", None)], {"consumer_byte_rate": 4096.0})]
        assert configs.alter_quotas(admin, [("clients", "described")], {}, ["producer_byte_rate"]).ok
        assert configs.describe_quotas(admin, [("clients", "described")]) == []
        assert configs.alter_quotas(admin, [("users", None)], {}, ["consumer_byte_rate"]).ok
        assert configs.alter_quotas(admin, [("users", "alice"), ("clients", None)], {}, ["request_percentage"]).ok


def _produce_flat_out(bootstrap: str, client_id: str, topic: str, stop: threading.Event, result: dict) -> None:
    """Produce until `stop`; result: acknowledged bytes per second since the first throttle (or start)."""
    throttles = []
    acked = []

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": 65536, "queue.buffering.max.kbytes": 4096, "acks": 1,
                         "throttle_cb": lambda event: throttles.append((time.monotonic(), event.throttle_time))})
    while not stop.is_set():
        try:
            producer.produce(topic, value=RECORD, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.flush(5)
    producer.purge()  # what the throttled client still queues is not measured
    producer.flush(5)
    result["acked"], result["throttles"] = acked, throttles


def _wait_until_quotas_applied(bootstrap: str) -> None:
    """Set a tiny quota on a fresh probe client id and produce with it until a
    response says it is throttled: then the edge has applied every quota
    written before it (each change notification reloads them all)."""
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    topic = _create_topic(bootstrap)
    _set_client_quota(bootstrap, probe, producer_byte_rate=1024.0)
    throttles = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": probe, "linger.ms": 0,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})

    def throttled():
        producer.produce(topic, value=RECORD)
        producer.poll(0.2)
        return any(t > 0 for t in throttles)

    wait_for(throttled, 30, "the edge to apply the new quotas", poll_s=0.1)
    producer.purge()
    producer.flush(5)


def test_producer_byte_rate_holds_from_the_first_byte(quota_broker):
    bootstrap = quota_broker["broker"].bootstrap
    topic = _create_topic(bootstrap)
    _set_client_quota(bootstrap, "slow-producer", producer_byte_rate=float(QUOTA))
    _wait_until_quotas_applied(bootstrap)
    stop = threading.Event()
    slow, fast = {}, {}
    threads = [threading.Thread(target=_produce_flat_out, args=(bootstrap, "slow-producer", topic, stop, slow)),
               threading.Thread(target=_produce_flat_out, args=(bootstrap, "fast-producer", topic, stop, fast))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    # Wait for the clock, not for a condition: the measurement is the 16 s that follow the first byte.
    stop.wait(16)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert slow["throttles"], "the throttled client never saw throttle_time_ms"
    assert max(t for _, t in slow["throttles"]) > 0
    first_12s = sum(n for at, n in slow["acked"] if at < started + 12) / 12
    fast_end = max(at for at, _ in fast["acked"])
    fast_rate = sum(n for _, n in fast["acked"]) / max(fast_end - started, 1)
    print(f"producer quota {QUOTA} B/s: throttled client {first_12s:.0f} B/s over its first 12 s "
          f"({first_12s / QUOTA:.3f} of the quota), other client {fast_rate:.0f} B/s, "
          f"longest throttle {max(t for _, t in slow['throttles']):.2f} s (librdkafka's ThrottleEvent, seconds)")
    assert first_12s <= 1.2 * QUOTA, f"throttled client sent {first_12s / QUOTA:.2f}x its quota over 12 s"
    assert first_12s >= 0.5 * QUOTA, f"throttled client sent only {first_12s / QUOTA:.2f}x its quota"
    assert not fast["throttles"] or max(t for _, t in fast["throttles"]) == 0
    assert fast_rate > 2 * max(first_12s, QUOTA / 2), (fast_rate, first_12s)


def _consume(bootstrap: str, client_id: str, topic: str, seconds: float,
             until_bytes: int | None = None) -> tuple[int, list]:
    """Bytes read in `seconds` (or until `until_bytes` were read), and the throttles seen."""
    throttles = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{client_id}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 262144,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    received, deadline = 0, time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and (until_bytes is None or received < until_bytes):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received += len(message.value())
    finally:
        consumer.close()
    return received, throttles


def test_consumer_byte_rate_throttles_fetches(quota_broker):
    bootstrap = quota_broker["broker"].bootstrap
    topic = _create_topic(bootstrap)
    # Small batches: a fetch returns at least one whole batch.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 65536})
    for _ in range(300):  # 3 MB
        producer.produce(topic, value=RECORD)
        producer.poll(0)
    assert producer.flush(60) == 0
    _set_client_quota(bootstrap, "slow-consumer", consumer_byte_rate=102400.0)
    _wait_until_quotas_applied(bootstrap)
    fast_bytes, _ = _consume(bootstrap, "fast-consumer", topic, 8, until_bytes=300 * len(RECORD))
    assert fast_bytes == 300 * len(RECORD)
    slow_bytes, throttles = _consume(bootstrap, "slow-consumer", topic, 5)
    assert throttles and max(throttles) > 0, "the throttled consumer never saw throttle_time_ms"
    # 5 s at 100 KiB/s, one window's worth ahead, and the one fetch that crosses the bound
    # (~0.9 MB of the topic's 3 MB).
    assert slow_bytes <= 1.2 * 102400 * 5 + 262144, f"throttled consumer read {slow_bytes} bytes in 5 s"


def test_configs_cli_clients_users_topics(quota_broker):
    bootstrap = quota_broker["broker"].bootstrap
    b = ["--bootstrap-server", bootstrap]
    done = _cli(*b, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                "--entity-type", "clients", "--entity-name", "cli-client")
    assert done.returncode == 0, done.stderr
    assert "Completed updating config for client cli-client." in done.stdout
    described = _cli(*b, "--describe", "--entity-type", "clients", "--entity-name", "cli-client")
    assert described.returncode == 0, described.stderr
    assert ("Quota configs for client-id 'cli-client' are consumer_byte_rate=2097152.0, "
            "producer_byte_rate=1048576.0") in described.stdout
    # A user: a SCRAM credential and a quota in the same znode, neither clobbering the other.
    done = _cli(*b, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]",
                "--entity-type", "users", "--entity-name", "alice")
    assert done.returncode == 0, done.stderr
    done = _cli(*b, "--alter", "--add-config", "producer_byte_rate=4096", "--entity-type", "users",
                "--entity-name", "alice")
    assert done.returncode == 0, done.stderr
    described = _cli(*b, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "Quota configs for user-principal 'alice' are producer_byte_rate=4096.0" in described.stdout
    assert "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192" \
        in described.stdout
    # The credential works: a SCRAM client authenticates on the SASL listener.
    scram = Producer({"bootstrap.servers": f"127.0.0.1:{quota_broker['sasl_port']}",
                      "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                      "sasl.username": "alice", "sasl.password": "alice-secret"})
    assert scram.list_topics(timeout=30).brokers
    done = _cli(*b, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "users",
                "--entity-name", "alice")
    assert done.returncode == 0, done.stderr
    described = _cli(*b, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "Quota configs" not in described.stdout and "SCRAM-SHA-256=iterations=8192" in described.stdout
    # Defaults and a (user, client id) pair.
    done = _cli(*b, "--alter", "--add-config", "request_percentage=50", "--entity-type", "users",
                "--entity-default", "--entity-type", "clients", "--entity-name", "app")
    assert done.returncode == 0, done.stderr
    described = _cli(*b, "--describe", "--user-defaults", "--client", "app")
    assert "Quota configs for the default user-principal, client-id 'app' are request_percentage=50.0" \
        in described.stdout
    bad = _cli(*b, "--alter", "--add-config", "retention.ms=1", "--entity-type", "clients", "--entity-name", "x")
    assert bad.returncode == 2 and "Invalid config(s): retention.ms" in bad.stderr
    # Topics: IncrementalAlterConfigs / DescribeConfigs.
    topic = _create_topic(bootstrap)
    done = _cli(*b, "--alter", "--add-config", "retention.ms=3600000,cleanup.policy=compact",
                "--entity-type", "topics", "--entity-name", topic)
    assert done.returncode == 0, done.stderr
    assert f"Completed updating config for topic {topic}." in done.stdout
    described = _cli(*b, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert f"Dynamic configs for topic {topic} are:" in described.stdout
    assert "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}" \
        in described.stdout
    done = _cli(*b, "--alter", "--delete-config", "retention.ms", "--topic", topic)
    assert done.returncode == 0, done.stderr
    described = _cli(*b, "--describe", "--topic", topic)
    assert "retention.ms" not in described.stdout and "cleanup.policy=compact" in described.stdout


def test_command_config_sasl_plain(quota_broker, tmp_path):
    sasl = f"127.0.0.1:{quota_broker['sasl_port']}"
    good = tmp_path / "admin.properties"
    good.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="admin" password="admin-secret";\n')
    done = _cli("--bootstrap-server", sasl, "--command-config", str(good), "--alter", "--add-config",
                "producer_byte_rate=65536", "--entity-type", "clients", "--entity-name", "sasl-client")
    assert done.returncode == 0, done.stderr
    described = _cli("--bootstrap-server", sasl, "--command-config", str(good), "--describe",
                     "--entity-type", "clients", "--entity-name", "sasl-client")
    assert "producer_byte_rate=65536.0" in described.stdout, described.stderr
    topics = subprocess.run([str(RAYKAFKA), "topics", "--bootstrap-server", sasl, "--command-config", str(good),
                             "--list"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert topics.returncode == 0, topics.stderr
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                   "sasl.password=wrong\n")
    refused = _cli("--bootstrap-server", sasl, "--command-config", str(bad), "--describe",
                   "--entity-type", "clients")
    assert refused.returncode == 1 and "authentication" in refused.stderr
    # Without the file, the SASL listener does not answer a plain client.
    plain = _cli("--bootstrap-server", sasl, "--describe", "--entity-type", "clients", timeout=90)
    assert plain.returncode == 1


def test_quotas_survive_a_restart(quota_broker):
    broker = quota_broker["broker"]
    _set_client_quota(broker.bootstrap, "kept-client", producer_byte_rate=8192.0)
    assert broker.stop() == 0
    broker.start()
    with AdminClient(broker.bootstrap) as admin:
        found = configs.describe_quotas(admin, [("clients", "kept-client")])
    assert found == [([("client-id", "kept-client")], {"producer_byte_rate": 8192.0})]
