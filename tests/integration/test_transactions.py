"""Transactions end to end with confluent-kafka (librdkafka): commit, abort,
consume-transform-produce, what read_committed and read_uncommitted
consumers see, fencing, the coordinator's timeout, and a kill -9 of the
whole broker with committed, aborted and open transactions in the log."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.kafka_admin import create_topic


def txn_producer(bootstrap: str, transactional_id: str | None = None, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "transactional.id": transactional_id or f"tid-{uuid.uuid4().hex[:8]}", **extra})
    producer.init_transactions(60)
    return producer


def produce_in_txn(producer: Producer, topic: str, values: list[bytes], commit: bool, partition: int = 0) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=partition)
    if commit:
        producer.commit_transaction(60)
    else:
        # librdkafka purges what it has not sent yet on abort: send it first,
        # so the aborted records really are in the log.
        assert producer.flush(60) == 0
        producer.abort_transaction(60)


def read(bootstrap: str, topic: str, isolation: str, partitions: int = 1, settle_s: float = 0.0,
         expect: int | None = None, timeout_s: float = 60) -> list[bytes]:
    """Values from the start of every partition: until ``expect`` records
    arrived (then ``settle_s`` more, to catch extra ones), or for ``settle_s``
    when no count is given."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settle_until = None if expect is not None else time.monotonic() + settle_s
    try:
        while time.monotonic() < deadline:
            if settle_until is None and expect is not None and len(values) >= expect:
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            for m in consumer.consume(500, 0.3):
                if m.error() is None:
                    values.append(m.value())
    finally:
        consumer.close()
    return values


def test_commit_abort_and_what_each_isolation_level_sees(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = txn_producer(broker.bootstrap)
    produce_in_txn(producer, topic_name, [b"c1-%d" % i for i in range(10)], commit=True)
    produce_in_txn(producer, topic_name, [b"a-%d" % i for i in range(10)], commit=False)
    produce_in_txn(producer, topic_name, [b"c2-%d" % i for i in range(10)], commit=True)
    committed = [b"c1-%d" % i for i in range(10)] + [b"c2-%d" % i for i in range(10)]
    assert read(broker.bootstrap, topic_name, "read_committed", expect=20, settle_s=1.5) == committed
    everything = read(broker.bootstrap, topic_name, "read_uncommitted", expect=30, settle_s=1.0)
    assert everything == committed[:10] + [b"a-%d" % i for i in range(10)] + committed[10:]


def test_consume_transform_produce_commits_offsets_with_the_output(broker, topic_name):
    source, sink, group = topic_name + "-in", topic_name + "-out", topic_name + "-g"
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        plain.produce(source, value=b"%d" % i, partition=0)
    assert plain.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(source, 0, OFFSET_BEGINNING)])
    producer = txn_producer(broker.bootstrap)

    def transform(count: int, commit: bool) -> None:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got += [m for m in consumer.consume(count - len(got), 0.5) if m.error() is None]
        assert len(got) == count
        producer.begin_transaction()
        for m in got:
            producer.produce(sink, value=b"x" + m.value(), partition=0)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(60)
        else:
            assert producer.flush(60) == 0
            producer.abort_transaction(60)

    transform(10, commit=True)
    transform(5, commit=False)  # these offsets and outputs must not count
    consumer.close()

    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    [committed] = checker.committed([TopicPartition(source, 0)], timeout=30)
    checker.close()
    assert committed.offset == 10
    assert read(broker.bootstrap, sink, "read_committed", expect=10, settle_s=1.5) == \
        [b"x%d" % i for i in range(10)]


def test_open_transaction_holds_read_committed_consumers(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = txn_producer(broker.bootstrap)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic_name, value=b"t%d" % i, partition=0)
    producer.flush(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        plain.produce(topic_name, value=b"p%d" % i, partition=0)
    assert plain.flush(30) == 0
    # The LSO stays at the open transaction's first offset: nothing after it is readable committed.
    assert read(broker.bootstrap, topic_name, "read_committed", settle_s=3) == []
    assert len(read(broker.bootstrap, topic_name, "read_uncommitted", expect=10, settle_s=0.5)) == 10
    producer.commit_transaction(60)
    assert read(broker.bootstrap, topic_name, "read_committed", expect=10, settle_s=1.0) == \
        [b"t%d" % i for i in range(5)] + [b"p%d" % i for i in range(5)]


def test_a_second_producer_fences_the_first(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    tid = f"fenced-{uuid.uuid4().hex[:6]}"
    first = txn_producer(broker.bootstrap, tid)
    first.begin_transaction()
    for i in range(5):
        first.produce(topic_name, value=b"zombie-%d" % i, partition=0)
    first.flush(30)
    second = txn_producer(broker.bootstrap, tid)  # bumps the epoch and aborts the first's transaction
    with pytest.raises(KafkaException) as exc:
        first.commit_transaction(30)
    error = exc.value.args[0]
    assert error.fatal() or error.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), error
    produce_in_txn(second, topic_name, [b"real"], commit=True)
    assert read(broker.bootstrap, topic_name, "read_committed", expect=1, settle_s=1.5) == [b"real"]


def test_a_transaction_left_open_is_aborted_after_its_timeout(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = txn_producer(broker.bootstrap, **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic_name, value=b"left-open-%d" % i, partition=0)
    producer.flush(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic_name, value=b"after", partition=0)
    assert plain.flush(30) == 0
    # The coordinator aborts it (the shared broker checks every second): read_committed moves past it.
    assert read(broker.bootstrap, topic_name, "read_committed", expect=1, settle_s=1.0, timeout_s=30) == [b"after"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)


def test_transactions_survive_kill9_of_the_whole_broker(tmp_path):
    data = tmp_path / "data"
    overrides = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
    broker = BrokerProcess(data, overrides=overrides).start()
    topic = "txn-crash"
    try:
        create_topic(broker.bootstrap, topic, 1)
        producer = txn_producer(broker.bootstrap, "crash-committer")
        produce_in_txn(producer, topic, [b"committed-%d" % i for i in range(5)], commit=True)
        produce_in_txn(producer, topic, [b"aborted-%d" % i for i in range(5)], commit=False)
        left_open = txn_producer(broker.bootstrap, "crash-open", **{"transaction.timeout.ms": 5000})
        left_open.begin_transaction()
        for i in range(5):
            left_open.produce(topic, value=b"open-%d" % i, partition=0)
        left_open.flush(30)
    finally:
        broker.kill9()
    broker = BrokerProcess(data, overrides=overrides, log_name="broker-restarted.log").start()
    try:
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce(topic, value=b"after-restart", partition=0)
        assert plain.flush(60) == 0
        # The recovered coordinator aborts the open transaction once its timeout passes.
        seen = read(broker.bootstrap, topic, "read_committed", expect=6, settle_s=1.5, timeout_s=90)
        assert seen == [b"committed-%d" % i for i in range(5)] + [b"after-restart"]
        everything = read(broker.bootstrap, topic, "read_uncommitted", expect=16, settle_s=1.0)
        assert len(everything) == 16
        # The committed producer's id still works after the restart.
        producer = txn_producer(broker.bootstrap, "crash-committer")
        produce_in_txn(producer, topic, [b"again"], commit=True)
        assert read(broker.bootstrap, topic, "read_committed", expect=7, settle_s=1.0)[-1] == b"again"
    finally:
        assert broker.stop() == 0
