"""Issue 22 on the session's shared broker: Kafka's metrics on Ray's
Prometheus endpoint, and the console producer and consumer."""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer

from tests.broker_process import REPO, broker_env
from tests.cli_runner import wait_for
from tests.kafka_admin import create_topic

RAYKAFKA = str(REPO / ".venv" / "bin" / "raykafka")
METRICS_URL = re.compile(r"raykafka metrics on (http://\S+)")


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _metrics_url(broker) -> str:
    found = METRICS_URL.search(broker.log_path.read_text(errors="replace"))
    assert found, "raykafka start printed no metrics URL"
    return found.group(1)


def _scrape(url: str) -> dict[str, list[tuple[dict, float]]]:
    """name -> [(labels, value)] of the raykafka series (Ray prefixes ray_)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    series: dict[str, list] = {}
    for line in text.splitlines():
        if not line.startswith("ray_kafka_"):
            continue
        match = re.match(r"(\w+)\{(.*)\} (\S+)$", line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2)))
        series.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return series


API_NAMES_SEEN = {"Produce", "Fetch", "Metadata", "JoinGroup", "OffsetCommit"}


def requests_seen(series) -> set[str]:
    return {labels["request"] for labels, _v in series.get("ray_kafka_network_requestmetrics_requests_total", [])}


def test_metrics_endpoint_after_2mb(broker):
    from confluent_kafka import Consumer, Producer

    topic = _topic("metrics")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(2048):
        producer.produce(topic, key=str(i).encode(), value=os.urandom(1024))
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 120
    while got < 2048 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == 2048, f"consumed {got} of 2048"

    url = _metrics_url(broker)
    mib2 = 2 * 1024 * 1024

    def of_topic(series, name):
        return sum(v for labels, v in series.get(name, []) if labels.get("topic") == topic)

    def settled(series):
        # Produce-side and fetch-side counters are flushed in different 5 s periods.
        return (of_topic(series, "ray_kafka_server_brokertopicmetrics_bytesin_total") >= mib2
                and of_topic(series, "ray_kafka_server_brokertopicmetrics_bytesout_total") >= mib2
                and of_topic(series, "ray_kafka_server_brokertopicmetrics_messagesin_total") >= 2048
                and of_topic(series, "ray_kafka_log_log_size") >= mib2
                and [v for labels, v in series.get("ray_kafka_log_log_logendoffset", [])
                     if labels.get("topic") == topic] == [2048]
                and API_NAMES_SEEN <= requests_seen(series))

    # Local counters reach Ray every 5 s, Ray's workers report every 5 s. A scrape
    # Ray's exporter answers with a 5xx is scraped again, as Prometheus would at its
    # next interval (one did, once in a full run on the session's broker); only a
    # deadline without one good scrape that shows everything fails.
    deadline = time.monotonic() + 120
    refused: list[str] = []

    def scrape() -> dict:
        try:
            return _scrape(url)
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                raise
            refused.append(f"HTTP {exc.code}: {exc.read()[-2000:].decode(errors='replace')}")
            print(f"metrics scrape refused: {refused[-1]}")
            return {}

    series = scrape()
    while not settled(series) and time.monotonic() < deadline:
        time.sleep(2)
        series = scrape()
    assert series, f"no good scrape in 120 s; the endpoint answered: {refused[-3:]}"
    assert of_topic(series, "ray_kafka_server_brokertopicmetrics_bytesin_total") >= mib2
    assert [v for labels, v in series.get("ray_kafka_log_log_logendoffset", [])
            if labels.get("topic") == topic] == [2048]
    assert of_topic(series, "ray_kafka_server_brokertopicmetrics_messagesin_total") == 2048
    assert of_topic(series, "ray_kafka_server_brokertopicmetrics_bytesout_total") >= mib2
    assert of_topic(series, "ray_kafka_log_log_size") >= mib2
    assert API_NAMES_SEEN <= requests_seen(series)
    for name in ("ray_kafka_network_requestmetrics_totaltimems_bucket",
                 "ray_kafka_network_requestmetrics_requestqueuetimems_count",
                 "ray_kafka_network_requestmetrics_localtimems_count",
                 "ray_kafka_network_requestmetrics_remotetimems_count",
                 "ray_kafka_server_replicamanager_underreplicatedpartitions",
                 "ray_kafka_server_replicamanager_underminisrpartitioncount",
                 "ray_kafka_server_replicamanager_leadercount",
                 "ray_kafka_server_replicamanager_partitioncount",
                 "ray_kafka_controller_kafkacontroller_activecontrollercount",
                 "ray_kafka_controller_kafkacontroller_controllerepoch",
                 "ray_kafka_controller_kafkacontroller_offlinepartitionscount",
                 "ray_kafka_server_delayedoperationpurgatory_purgatorysize",
                 "ray_kafka_log_log_logstartoffset",
                 "ray_kafka_server_replicafetchermanager_maxlag",
                 "ray_kafka_server_socketservermetrics_connectioncount",
                 "ray_kafka_server_socketservermetrics_connectioncreation_total",
                 "ray_kafka_coordinator_group_groupmetadatamanager_numgroups",
                 "ray_kafka_server_groupcoordinatormetrics_groupcompletedrebalance_total",
                 "ray_kafka_server_groupcoordinatormetrics_offsetcommit_total"):
        assert name in series, f"{name} missing from {url}"
    assert max(v for _l, v in series["ray_kafka_controller_kafkacontroller_activecontrollercount"]) == 1


def _run(args, **kwargs):
    return subprocess.run([RAYKAFKA, *args], env=broker_env(), capture_output=True, timeout=120, **kwargs)


def test_console_producer_to_console_consumer(broker):
    topic = _topic("console")
    lines = [f"h{i}:x{i}\tkey-{i}:value {i} \u00e9" for i in range(50)]
    produced = _run(["console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                     "--property", "parse.key=true", "--property", "key.separator=:",
                     "--property", "parse.headers=true", "--compression-codec", "lz4",
                     "--request-required-acks", "all"], input="\n".join(lines).encode() + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = _run(["console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                     "--from-beginning", "--max-messages", "50", "--timeout-ms", "60000",
                     "--property", "print.key=true", "--property", "print.headers=true",
                     "--property", "print.offset=true", "--property", "key.separator=|"])
    assert consumed.returncode == 0, consumed.stderr.decode()
    out = consumed.stdout.decode().splitlines()
    assert out == [f"Offset:{i}|h{i}:x{i}|key-{i}|value {i} \u00e9" for i in range(50)], consumed.stderr.decode()
    assert "Processed a total of 50 messages" in consumed.stderr.decode()


def _first_line(proc: subprocess.Popen, timeout_s: float) -> bytes:
    """The first line `proc` writes to stdout within `timeout_s` (b"" if none)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline() if ready else b""


def _records_in(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{topic}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    except Exception:  # noqa: BLE001 - the topic not created yet
        return 0
    finally:
        consumer.close()


@pytest.mark.parametrize("tool", ["console-consumer", "console-producer"])
def test_console_tools_exit_cleanly_on_ctrl_c(broker, tool):
    topic = _topic("ctrlc")
    args = [RAYKAFKA, tool, "--bootstrap-server", broker.bootstrap, "--topic", topic]
    if tool == "console-consumer":
        # One record already there: the consumer printing it shows it connected,
        # joined its group and is polling for more.
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, value=b"first")
        assert producer.flush(60) == 0
        args += ["--group", f"g-{topic}", "--from-beginning"]
    proc = subprocess.Popen(args, env=broker_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        if tool == "console-consumer":
            assert _first_line(proc, 120) == b"first\n", "the console consumer printed no record"
        else:
            proc.stdin.write(b"one\ntwo\n")
            proc.stdin.flush()
            # Both lines acknowledged: the producer waits for more input now.
            wait_for(lambda: _records_in(broker.bootstrap, topic) == 2, 120, "both lines produced")
        assert proc.poll() is None, "the tool exited before Ctrl-C"
    except BaseException:
        proc.kill()  # not left running after a failed wait
        proc.wait(30)
        raise
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err
    if tool == "console-producer":
        consumed = _run(["console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                         "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000"])
        assert consumed.stdout.decode().splitlines() == ["one", "two"]
