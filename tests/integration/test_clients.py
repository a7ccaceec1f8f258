"""Real Kafka clients against a real broker (real Ray, real ZooKeeper).

Each of confluent-kafka (librdkafka), kafka-python and aiokafka produces and
consumes 10k keyed records with headers on a 3-partition topic with every
codec; content must be byte-exact, order per partition kept, offsets
contiguous. Debian's kcat (librdkafka 2.0.2) reads metadata and data too.
"""
from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka_admin

N_RECORDS = 10_000
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    key = f"key-{i % 997}".encode()
    # Varying sizes, partly compressible, deterministic.
    digest = hashlib.sha256(str(i).encode()).digest()
    value = digest * (1 + i % 7) + b"-" * (i % 50)
    headers = [("seq", str(i).encode()), ("digest", digest[:8])]
    return key, value, headers


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, config: dict | None = None) -> None:
    kafka_admin.create_topic(bootstrap, name, partitions, config)


def delete_topic(bootstrap: str, name: str) -> None:
    kafka_admin.delete_topic(bootstrap, name)


def check_consumed(consumed: list[tuple[int, int, bytes, bytes, list]]) -> None:
    """consumed: (partition, offset, key, value, headers) in consumption order."""
    assert len(consumed) == N_RECORDS, f"consumed {len(consumed)} of {N_RECORDS}"
    by_partition: dict[int, list] = {}
    for partition, offset, key, value, headers in consumed:
        by_partition.setdefault(partition, []).append((offset, key, value, headers))
    assert set(by_partition) <= set(range(PARTITIONS)) and len(by_partition) > 1
    seen = set()
    for partition, rows in by_partition.items():
        offsets = [r[0] for r in rows]
        assert offsets == list(range(len(rows))), f"partition {partition}: offsets not contiguous from 0"
        sequence = []
        for offset, key, value, headers in rows:
            header_map = dict(headers)
            i = int(header_map["seq"])
            expect_key, expect_value, expect_headers = record(i)
            assert key == expect_key and value == expect_value, f"record {i} differs"
            assert [(k, bytes(v)) for k, v in headers] == expect_headers
            sequence.append(i)
            seen.add(i)
        assert sequence == sorted(sequence), f"partition {partition}: order not kept"
    assert seen == set(range(N_RECORDS))


# ---------------------------------------------------------------- confluent-kafka (librdkafka)
def confluent_roundtrip(bootstrap: str, topic: str, codec: str) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                         "acks": "all"})
    errors = []
    for i in range(N_RECORDS):
        key, value, headers = record(i)
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers,
                                 on_delivery=lambda err, msg: errors.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    consumed = []
    deadline = time.monotonic() + 120
    while len(consumed) < N_RECORDS and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1.0):
            if msg.error():
                raise KafkaException(msg.error())
            consumed.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or []))
    consumer.close()
    return consumed


# ---------------------------------------------------------------- kafka-python
def kafka_python_roundtrip(bootstrap: str, topic: str, codec: str) -> list:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                             acks=1, linger_ms=5)
    futures = []
    for i in range(N_RECORDS):
        key, value, headers = record(i)
        futures.append(producer.send(topic, key=key, value=value, headers=headers))
    producer.flush(60)
    for f in futures:
        f.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([KTopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    consumed = []
    deadline = time.monotonic() + 120
    while len(consumed) < N_RECORDS and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=1000, max_records=2000).items():
            for m in msgs:
                consumed.append((m.partition, m.offset, m.key, m.value, list(m.headers)))
    consumer.close()
    return consumed


# ---------------------------------------------------------------- aiokafka
def aiokafka_roundtrip(bootstrap: str, topic: str, codec: str) -> list:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def go():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    compression_type=None if codec == "none" else codec, linger_ms=5)
        await producer.start()
        try:
            pending = []
            for i in range(N_RECORDS):
                key, value, headers = record(i)
                pending.append(await producer.send(topic, key=key, value=value, headers=headers))
            await asyncio.gather(*pending)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        consumed = []
        try:
            consumer.assign([ATopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 120
            while len(consumed) < N_RECORDS and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000, max_records=2000)
                for tp, msgs in batches.items():
                    for m in msgs:
                        consumed.append((m.partition, m.offset, m.key, m.value, list(m.headers)))
        finally:
            await consumer.stop()
        return consumed

    return asyncio.run(go())


CLIENTS = {"confluent": confluent_roundtrip, "kafka_python": kafka_python_roundtrip, "aiokafka": aiokafka_roundtrip}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_produce_consume_roundtrip(broker, topic_name, client, codec):
    create_topic(broker.bootstrap, topic_name)
    try:
        consumed = CLIENTS[client](broker.bootstrap, topic_name, codec)
        check_consumed(consumed)
    finally:
        delete_topic(broker.bootstrap, topic_name)


def test_metadata_and_auto_create(broker, topic_name):
    from kafka import KafkaAdminClient

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic_name, b"hello")  # auto-creates (auto.create.topics.enable=true)
    assert producer.flush(30) == 0
    a = admin(broker.bootstrap)
    md = a.list_topics(topic_name, timeout=10)
    assert topic_name in md.topics and len(md.topics[topic_name].partitions) == 1
    assert md.topics[topic_name].partitions[0].leader == md.controller_id
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as kadmin:
        assert topic_name in kadmin.list_topics()
    delete_topic(broker.bootstrap, topic_name)


def test_create_and_delete_topics(broker, topic_name):
    a = admin(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, partitions=2, config={"retention.ms": "3600000"})
    again = a.create_topics([NewTopic(topic_name, 1, 1)])[topic_name]
    with pytest.raises(KafkaException) as info:
        again.result(timeout=30)
    assert info.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    bad_rf = a.create_topics([NewTopic(topic_name + "-rf", 1, 3)])[topic_name + "-rf"]
    with pytest.raises(KafkaException) as info:
        bad_rf.result(timeout=30)
    assert info.value.args[0].name() == "INVALID_REPLICATION_FACTOR"
    bad_config = a.create_topics([NewTopic(topic_name + "-cfg", 1, 1, config={"no.such": "1"})])
    with pytest.raises(KafkaException) as info:
        bad_config[topic_name + "-cfg"].result(timeout=30)
    assert info.value.args[0].name() == "INVALID_CONFIG"
    validated = a.create_topics([NewTopic(topic_name + "-v", 4, 1)], validate_only=True)
    validated[topic_name + "-v"].result(timeout=30)
    assert topic_name + "-v" not in a.list_topics(timeout=10).topics
    assert len(a.list_topics(timeout=10).topics[topic_name].partitions) == 2
    delete_topic(broker.bootstrap, topic_name)
    assert topic_name not in a.list_topics(timeout=10).topics
    log_dir = broker.data_dir / "logs"
    assert not any(p.name.startswith(topic_name + "-") for p in log_dir.iterdir()), "partition dirs left behind"
    missing = a.delete_topics([topic_name])[topic_name]
    with pytest.raises(KafkaException) as info:
        missing.result(timeout=30)
    assert info.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_admin_describe_cluster(broker):
    a = admin(broker.bootstrap)
    result = a.describe_cluster(request_timeout=10).result(timeout=10)
    nodes = result.nodes
    assert len(nodes) == 1 and nodes[0].port == broker.port
    assert result.controller.id == nodes[0].id
    assert result.cluster_id


def test_list_offsets_by_timestamp(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(30):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=0, timestamp=base + i * 1000)
        producer.flush(10)  # one batch per record: the time index sees every step
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ts"})
    found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 10_500)], timeout=10)
    assert found[0].offset == 11
    earliest, latest = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
    assert (earliest, latest) == (0, 30)
    beyond = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 10**9)], timeout=10)
    assert beyond[0].offset == -1  # no record at or after that time: latest/-1 as Kafka answers
    consumer.close()
    delete_topic(broker.bootstrap, topic_name)


def test_kcat_lists_metadata_and_consumes(broker, topic_name):
    assert shutil.which("kcat"), "kcat missing: ./dev installs Debian's kcat"
    create_topic(broker.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4"})
    expected = {}
    for i in range(2000):
        producer.produce(topic_name, key=f"k{i}".encode(), value=f"value-{i}".encode())
        expected[f"k{i}"] = f"value-{i}"
    assert producer.flush(30) == 0
    listing = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-t", topic_name],
                             capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert f'topic "{topic_name}" with {PARTITIONS} partitions' in listing.stdout
    consumed = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e",
                               "-f", "%p %o %k %s\\n"], capture_output=True, text=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr
    got = {}
    offsets: dict[str, list[int]] = {}
    for line in consumed.stdout.splitlines():
        partition, offset, key, value = line.split(" ", 3)
        got[key] = value
        offsets.setdefault(partition, []).append(int(offset))
    assert got == expected
    for partition, seen in offsets.items():
        assert seen == list(range(len(seen)))
    delete_topic(broker.bootstrap, topic_name)
