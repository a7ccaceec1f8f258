"""Fetch responses within the client's and the broker's size limits (KIP-74),
seen by real clients: librdkafka drops a connection whose response exceeds
receive.message.max.bytes, so a consumer only progresses when every response
holds at most its fetch.max.bytes (plus framing), except the one batch KIP-74
returns whole."""
from __future__ import annotations

import datetime
import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from net.codec import request_schema
from net.schema_build import nested
from tests.cli_runner import wait_for
from tests.kafka_admin import create_topic, delete_topic
from tests.wire_client import WireClient

MS = datetime.timedelta(milliseconds=1)
BROKER_FETCH_MAX_BYTES = 57671680  # fetch.max.bytes, Kafka's default (55 MiB)


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int, **config) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **config})
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, value=os.urandom(size), key=b"%d" % i, partition=p)
            producer.poll(0)
    assert producer.flush(120) == 0


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float, **config) -> tuple:
    errors = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                         "error_cb": errors.append, **config})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while sum(got.values()) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            assert message.offset() == got.get(message.partition(), 0), "every record once, in order"
            got[message.partition()] = message.offset() + 1
    finally:
        consumer.close()
    return got, errors


def _fetch_all(client: WireClient, topic: str, partitions: int, max_bytes: int, partition_max_bytes: int):
    schema = request_schema(1, 12)
    topic_cls, part_cls = nested(schema, "FetchTopic"), nested(schema, "FetchPartition")
    body = client.request(1, 12, replica_id=-1, max_wait=100 * MS, min_bytes=1, max_bytes=max_bytes,
                          isolation_level=0, session_id=0, session_epoch=-1,
                          topics=(topic_cls(topic=topic, partitions=tuple(part_cls(
                              partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                              for p in range(partitions))),),
                          forgotten_topics_data=(), rack_id="")
    return [p.records or b"" for p in body.responses[0].partitions]


def _batch_sizes(records: bytes) -> list[int]:
    sizes, at = [], 0
    while at < len(records):
        sizes.append(12 + int.from_bytes(records[at + 8:at + 12], "big"))
        at += sizes[-1]
    assert at == len(records), "a response ends inside a batch"
    return sizes


@pytest.mark.parametrize("partition_max", [1_048_576, 20_000_000])
def test_consumer_with_1_mb_fetch_max_bytes_reads_three_partitions(broker, topic_name, partition_max):
    # Three partitions of 30 records of ~215 KB (the shape of issue 29's report: 19 MB in one response).
    create_topic(broker.bootstrap, topic_name, 3)
    _produce(broker.bootstrap, topic_name, 3, 30, 215_000)
    fetch_max = 1_048_576
    # librdkafka refuses a response over receive.message.max.bytes (and needs it >= fetch.max.bytes + 512).
    got, errors = _consume_all(broker.bootstrap, topic_name, 3, 90, 90, **{
        "fetch.max.bytes": fetch_max, "max.partition.fetch.bytes": partition_max,
        "receive.message.max.bytes": fetch_max + 512})
    assert got == {0: 30, 1: 30, 2: 30}, (got, errors)
    assert not errors, errors

    client = WireClient(broker.bootstrap)
    try:
        records = _fetch_all(client, topic_name, 3, fetch_max, partition_max)
        assert 0 < sum(map(len, records)) <= fetch_max
        for part in records:
            _batch_sizes(part)
        # KIP-74: 1,000 bytes asked, the first batch of the first partition comes whole, and nothing else.
        records = _fetch_all(client, topic_name, 3, 1000, 1000)
        sizes = _batch_sizes(records[0])
        assert len(sizes) == 1 and sizes[0] > 1000 and not records[1] and not records[2]
    finally:
        client.close()
    delete_topic(broker.bootstrap, topic_name)


def test_oversized_first_batch_lets_a_small_fetch_progress(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    _produce(broker.bootstrap, topic_name, 3, 4, 300_000, **{"batch.size": 1_000_000})
    # fetch.max.bytes far below one batch: each response carries one whole batch (KIP-74) and the consumer
    # still reads everything. (librdkafka raises fetch.max.bytes to its message.max.bytes: lowered here.)
    got, errors = _consume_all(broker.bootstrap, topic_name, 3, 12, 90, **{
        "fetch.max.bytes": 1024, "message.max.bytes": 1000, "max.partition.fetch.bytes": 1024,
        "receive.message.max.bytes": 2_000_000})
    assert got == {0: 4, 1: 4, 2: 4}, (got, errors)
    delete_topic(broker.bootstrap, topic_name)


def test_a_2_gib_fetch_gets_at_most_the_broker_fetch_max_bytes(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    _produce(broker.bootstrap, topic_name, 1, 70, 900_000, **{"batch.size": 1_000_000})
    client = WireClient(broker.bootstrap, timeout=120)
    try:
        # Until the edge's answers of its own last appends expire (net/fetch_local_tail.py: those hold the
        # data of one append), after which the read fills the response.
        records = wait_for(lambda: [r for r in _fetch_all(client, topic_name, 1, (1 << 31) - 1, (1 << 31) - 1)
                                    if len(r) > 2_000_000], 30, "a fetch answered from the log")
    finally:
        client.close()
    total = sum(map(len, records))
    assert BROKER_FETCH_MAX_BYTES - 1_100_000 < total <= BROKER_FETCH_MAX_BYTES, total
    _batch_sizes(records[0])
    # The same through librdkafka asking 2 GiB per fetch: it reads everything.
    got, errors = _consume_all(broker.bootstrap, topic_name, 1, 70, 120, **{
        "fetch.max.bytes": 2147483135, "max.partition.fetch.bytes": 1_000_000_000,
        "receive.message.max.bytes": 2147483647})
    assert got == {0: 70}, (got, errors)
    delete_topic(broker.bootstrap, topic_name)
