"""Log management through real clients: topic configs (describe/alter with
confluent-kafka and kafka-python), compaction with tombstones, retention
while a consumer reads, DeleteRecords."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, ResourceType)

from tests.cli_runner import wait_for
from tests.kafka_admin import create_topic, delete_topic


def describe(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=30)


def read_all(bootstrap: str, topic: str, partition: int = 0):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lm", "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    rows = []
    deadline = time.monotonic() + 60
    while (not rows or rows[-1][0] + 1 < high) and high > low:
        assert time.monotonic() < deadline, f"read {len(rows)} rows, HW {high}"
        for m in consumer.consume(500, timeout=0.5):
            assert m.error() is None, m.error()
            rows.append((m.offset(), m.key(), m.value()))
    consumer.close()
    return low, high, rows


def test_describe_and_alter_configs_confluent(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, config={"retention.ms": "3600000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = describe(admin, topic_name)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == str(8 * 1024 * 1024)
    assert configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"

    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    configs = describe(admin, topic_name)
    assert configs["retention.ms"].value == "7200000"
    assert configs["cleanup.policy"].value == "delete,compact"

    bad = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.mss", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(timeout=30)
    assert info.value.args[0].name() == "INVALID_CONFIG" and "retention.mss" in info.value.args[0].str()
    bad_value = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad_value])[bad_value].result(timeout=30)
    assert info.value.args[0].name() == "INVALID_CONFIG" and "retention.ms" in info.value.args[0].str()

    broker_id = admin.describe_cluster().result(timeout=10).nodes[0].id
    broker_resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    broker_configs = admin.describe_configs([broker_resource])[broker_resource].result(timeout=30)
    assert broker_configs["log.segment.bytes"].value == str(8 * 1024 * 1024)
    delete_topic(broker.bootstrap, topic_name)


def test_describe_and_alter_configs_kafka_python(broker, topic_name):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create_topic(broker.bootstrap, topic_name, 1)
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic_name,
                                             configs={"retention.bytes": "123456", "min.insync.replicas": "1"})])
        described = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic_name)])
        # kafka-python 3: {resource type: {resource name: {config key: {config data}}}}
        entries = next(iter(next(iter(described.values())).values()))

        def value(key):
            data = entries[key]
            return data.get("value", data.get("config_value")) if isinstance(data, dict) else data

        assert value("retention.bytes") == "123456"
        assert value("min.insync.replicas") == "1"
    delete_topic(broker.bootstrap, topic_name)


def test_compaction_keeps_latest_per_key_and_drops_tombstones(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1500", "segment.ms": "200"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "compression.type": "lz4"})
    latest = {}
    for version in range(30):
        for k in range(20):
            key, value = f"key-{k}".encode(), f"v{version}-{k}".encode() * 5
            producer.produce(topic_name, key=key, value=value, partition=0)
            latest[key] = value
        producer.flush(10)
    for k in range(5):  # tombstones for five keys
        producer.produce(topic_name, key=f"key-{k}".encode(), value=None, partition=0)
        latest.pop(f"key-{k}".encode())
    producer.flush(10)
    written = 30 * 20 + 5

    def compacted():
        _, _, rows = read_all(broker.bootstrap, topic_name)
        return len(rows) < written / 3 and rows

    rows = wait_for(compacted, 60, "the cleaner to compact the log")
    last = {}
    for _offset, key, value in rows:
        last[key] = value
    assert {k: v for k, v in last.items() if v is not None} == latest
    offsets = [o for o, _, _ in rows]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)

    # Tombstones go once delete.retention.ms has passed and the cleaner runs again.
    for k in range(5, 10):
        producer.produce(topic_name, key=f"key-{k}".encode(), value=b"again", partition=0)
        latest[f"key-{k}".encode()] = b"again"
    producer.flush(10)

    def tombstones_gone():
        # Keep writing: only closed segments are cleaned, and a pass needs new dirty data.
        producer.produce(topic_name, key=b"filler", value=b"f", partition=0)
        producer.flush(10)
        latest[b"filler"] = b"f"
        _, _, rows = read_all(broker.bootstrap, topic_name)
        return not any(v is None for _, _, v in rows) and rows

    rows = wait_for(tombstones_gone, 60, "tombstones removed after delete.retention.ms")
    last = {}
    for _offset, key, value in rows:
        last[key] = value
    assert last == latest
    delete_topic(broker.bootstrap, topic_name)


def test_retention_removes_old_segments_while_a_consumer_reads(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, config={
        "segment.bytes": "2048", "retention.bytes": "8192", "file.delete.delay.ms": "0", "segment.ms": "100000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ret", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    seen = []
    for round_ in range(6):
        for i in range(40):
            producer.produce(topic_name, key=b"k", value=f"{round_}-{i}".encode() * 10, partition=0)
        producer.flush(10)
        deadline = time.monotonic() + 30
        while len(seen) < (round_ + 1) * 40 and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.3):
                assert m.error() is None, m.error()
                seen.append(m.offset())
    assert seen == list(range(240)), "the consumer reads every record while old segments are deleted"
    low = wait_for(lambda: consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)[0], 30,
                   "retention to move the log start")
    assert 0 < low < 240
    segments = sorted((broker.data_dir / "logs" / f"{topic_name}-0").glob("*.log"))
    assert int(segments[0].stem) >= low - 40, "old segment files are gone from disk"
    consumer.close()
    delete_topic(broker.bootstrap, topic_name)


def test_delete_records_moves_log_start(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(50):
        producer.produce(topic_name, key=str(i).encode(), value=b"x", partition=0)
    producer.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.delete_records([TopicPartition(topic_name, 0, 20)])
    deleted = list(result.values())[0].result(timeout=30)
    assert deleted.low_watermark == 20
    low, high, rows = read_all(broker.bootstrap, topic_name)
    assert (low, high) == (20, 50)
    assert [o for o, _, _ in rows] == list(range(20, 50)), "a consumer from earliest starts at the new log start"
    beyond = admin.delete_records([TopicPartition(topic_name, 0, 99)])
    with pytest.raises(KafkaException) as info:
        list(beyond.values())[0].result(timeout=30)
    assert info.value.args[0].name() == "OFFSET_OUT_OF_RANGE"
    delete_topic(broker.bootstrap, topic_name)
