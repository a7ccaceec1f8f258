"""The idempotent producer against the running broker: sequence checks and
duplicates on the wire, DescribeProducers, and real clients with
enable.idempotence (InitProducerId, then exactly-once appends per partition)."""
from __future__ import annotations

import datetime
import time

from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from net.codec import request_schema
from net.schema_build import nested
from storage.records import build_batch
from tests.kafka_admin import create_topic
from tests.wire_client import WireClient

MS = datetime.timedelta(milliseconds=1)
PID = 987_654


def _produce(client, topic, records: bytes, partition=0, acks=-1):
    schema = request_schema(0, 9)
    topic_cls, part_cls = nested(schema, "TopicProduceData"), nested(schema, "PartitionProduceData")
    body = client.request(0, 9, transactional_id=None, acks=acks, timeout=5000 * MS, topic_data=(
        topic_cls(name=topic, partition_data=(part_cls(index=partition, records=records),)),))
    return body.responses[0].partition_responses[0]


def _batch(n, seq, epoch=0, pid=PID):
    return build_batch([(b"k%d" % i, b"v%d" % i, []) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def _latest_offset(client, topic):
    schema = request_schema(2, 7)
    topic_cls, part_cls = nested(schema, "ListOffsetsTopic"), nested(schema, "ListOffsetsPartition")
    body = client.request(2, 7, replica_id=-1, isolation_level=0, topics=(
        topic_cls(name=topic, partitions=(part_cls(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    return body.topics[0].partitions[0].offset


def test_sequences_and_duplicates_on_the_wire(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    client = WireClient(broker.bootstrap)
    first = _produce(client, topic_name, _batch(3, 0))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    second = _produce(client, topic_name, _batch(2, 3))
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 3)
    # A retry of the first batch (its response was lost): success, original offset, nothing appended.
    retry = _produce(client, topic_name, _batch(3, 0))
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
    assert _latest_offset(client, topic_name) == 5
    gap = _produce(client, topic_name, _batch(1, 9))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    bumped = _produce(client, topic_name, _batch(1, 0, epoch=1))
    assert (bumped.error_code, bumped.base_offset) == (ErrorCode.none, 5)
    stale = _produce(client, topic_name, _batch(1, 5, epoch=0))
    assert stale.error_code == ErrorCode.invalid_producer_epoch
    assert _latest_offset(client, topic_name) == 6
    client.close()


def test_describe_producers(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    client = WireClient(broker.bootstrap)
    assert _produce(client, topic_name, _batch(4, 0, pid=PID + 1)).error_code == ErrorCode.none
    schema = request_schema(61, 0)
    body = client.request(61, 0, topics=(nested(schema, "TopicRequest")(name=topic_name, partition_indexes=(0, 7)),))
    client.close()
    ok, missing = body.topics[0].partitions
    assert ok.error_code == ErrorCode.none
    [producer] = ok.active_producers
    assert (producer.producer_id, producer.producer_epoch, producer.last_sequence,
            producer.current_txn_start_offset) == (PID + 1, 0, 3, -1)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


def test_idempotent_confluent_producer(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.num.messages": 500})
    errors = []
    count = 20_000
    for i in range(count):
        producer.produce(topic_name, key=b"%d" % (i % 3), value=b"%d" % i, partition=i % 3,
                         on_delivery=lambda err, msg: err and errors.append(err))
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic_name])
    seen = {0: [], 1: [], 2: []}
    deadline = time.monotonic() + 60
    while sum(map(len, seen.values())) < count and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                seen[msg.partition()].append(int(msg.value()))
    consumer.close()
    for p, values in seen.items():
        assert values == list(range(p, count, 3)), f"partition {p}: lost, duplicated or reordered records"
