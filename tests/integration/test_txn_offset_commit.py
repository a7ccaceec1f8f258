"""TxnOffsetCommit end to end (KIP-98, KIP-447): a consume-transform-produce
loop with confluent-kafka. The transactional producer sends the consumer's
offsets to its transaction (``send_offsets_to_transaction`` with the
consumer's group metadata: TxnOffsetCommit v3 carrying member id and
generation); committing the transaction makes them the group's committed
offsets, aborting it leaves the group's offsets as they were.

The client tests need the transaction coordinator (InitProducerId,
AddOffsetsToTxn, EndTxn) as well as the group coordinator's TxnOffsetCommit;
the wire test needs only the latter: a pending transactional offset is
UNSTABLE_OFFSET_COMMIT to require_stable OffsetFetches (KIP-447).

They run on the session's broker (tests/conftest.py): one offsets and one
transaction-state partition, immediate initial rebalances."""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kio.schema.errors import ErrorCode

from net.codec import request_schema
from net.schema_build import nested
from tests.kafka_admin import create_topic
from tests.wire_client import WireClient

RECORDS = 10


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def input_topic(bootstrap: str) -> str:
    topic = unique("in")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    return topic


def consume_all(bootstrap: str, topic: str, group: str) -> Consumer:
    """A group member that has read every record (and committed nothing)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    read, deadline = 0, time.monotonic() + 60
    while read < RECORDS:
        assert time.monotonic() < deadline, f"read {read} of {RECORDS} records"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read += 1
    return consumer


def run_transaction(bootstrap: str, consumer: Consumer, topic: str, output: str, commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn"),
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(output, key=b"k", value=b"transformed", partition=0)
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, RECORDS)], consumer.consumer_group_metadata(), 60)
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)


def committed_offset(bootstrap: str, topic: str, group: str) -> int:
    """The group's committed offset of partition 0, as a new client of the
    group reads it (librdkafka asks with require_stable under read_committed)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                [tp] = reader.committed([TopicPartition(topic, 0)], timeout=10)
                return tp.offset
            except KafkaException:
                # UNSTABLE_OFFSET_COMMIT while the marker is on its way: retried.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        reader.close()


def test_offsets_sent_to_a_committed_transaction(broker):
    bootstrap = broker.bootstrap
    topic, group = input_topic(bootstrap), unique("g")
    output = unique("out")
    create_topic(bootstrap, output, 1)
    consumer = consume_all(bootstrap, topic, group)
    try:
        assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset < 0
        run_transaction(bootstrap, consumer, topic, output, commit=True)
        # The member sees them too (OffsetFetch from the group's member).
        deadline = time.monotonic() + 30
        while consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset != RECORDS:
            assert time.monotonic() < deadline, "the transaction's offsets never became committed"
            time.sleep(0.2)
    finally:
        consumer.close()
    assert committed_offset(bootstrap, topic, group) == RECORDS


def test_offsets_sent_to_an_aborted_transaction(broker):
    bootstrap = broker.bootstrap
    topic, group = input_topic(bootstrap), unique("g")
    output = unique("out")
    create_topic(bootstrap, output, 1)
    consumer = consume_all(bootstrap, topic, group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        run_transaction(bootstrap, consumer, topic, output, commit=False)
        assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 3
    finally:
        consumer.close()
    assert committed_offset(bootstrap, topic, group) == 3


def test_pending_offsets_are_unstable_on_the_wire(broker):
    """TxnOffsetCommit v3 by hand, no transaction coordinator involved: the
    offsets are written (a transactional batch of producer 4242 in
    __consumer_offsets) and stay pending, as no marker ever comes."""
    bootstrap = broker.bootstrap
    topic, group = input_topic(bootstrap), unique("g")
    schema = request_schema(28, 3)
    topic_cls, part_cls = nested(schema, "TxnOffsetCommitRequestTopic"), nested(schema, "TxnOffsetCommitRequestPartition")
    client = WireClient(bootstrap)
    try:
        retriable = {ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                     ErrorCode.coordinator_load_in_progress}
        deadline = time.monotonic() + 60
        while True:
            client.request(10, 3, key=group, key_type=0)  # creates __consumer_offsets on first use
            answer = client.request(28, 3, transactional_id="tx", group_id=group, producer_id=4242, producer_epoch=0,
                                    generation_id=-1, member_id="", group_instance_id=None, topics=(
                                        topic_cls(name=topic, partitions=(
                                            part_cls(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                                     committed_metadata="m"),)),))
            [[error]] = [[p.error_code for p in t.partitions] for t in answer.topics]
            if error not in retriable or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert error == ErrorCode.none
        fetch_schema = request_schema(9, 7)
        fetch_topic = nested(fetch_schema, "OffsetFetchRequestTopic")
        for require_stable, expected in ((True, (-1, ErrorCode.unstable_offset_commit)), (False, (-1, ErrorCode.none))):
            answer = client.request(9, 7, group_id=group, require_stable=require_stable,
                                    topics=(fetch_topic(name=topic, partition_indexes=(0,)),))
            assert answer.error_code == ErrorCode.none
            [[row]] = [[(p.committed_offset, p.error_code) for p in t.partitions] for t in answer.topics]
            assert row == expected
    finally:
        client.close()
