"""What a Kafka client's own integration suite checks, through real clients
(issue 29): per-record errors (KIP-467), the deprecated configuration keys
Kafka 3.9 still accepts, a cooperative-sticky group shrinking with one
assignment callback (KIP-429), and CreateTopics of many partitions within the
client's operation timeout."""
from __future__ import annotations

import datetime
import logging
import re
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

from core.error_codes import ErrorCode
from net.codec import request_schema
from net.schema_build import nested
from storage.records import build_batch
from tests.cli_runner import wait_for
from tests.wire_client import WireClient
from tests.kafka_admin import create_topic, delete_topic


def describe(admin: AdminClient, resource: ConfigResource) -> dict:
    return admin.describe_configs([resource])[resource].result(timeout=30)


# ---------------------------------------------------------------- 1. KIP-467 record errors
def test_keyless_records_on_a_compacted_topic_fail_by_name(broker, topic_name):
    """One batch of keyed and keyless records on a compacted topic: Kafka
    rejects the batch with INVALID_RECORD, naming each keyless record
    (batch index + message); librdkafka fails the named records with the
    broker's message and the others of the batch as failed by a neighbour,
    and nothing of the batch is written."""
    create_topic(broker.bootstrap, topic_name, 1, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200, "retries": 0,
                         "enable.idempotence": False, "batch.num.messages": 100})
    reports: dict[int, KafkaError | None] = {}

    def delivered(index):
        return lambda err, _msg: reports.__setitem__(index, err)

    keyless = {1, 4}
    for i in range(6):
        producer.produce(topic_name, value=f"v{i}".encode(), key=None if i in keyless else f"k{i}".encode(),
                         partition=0, on_delivery=delivered(i))
    assert producer.flush(30) == 0
    assert len(reports) == 6 and all(err is not None for err in reports.values()), reports
    for i in keyless:
        assert reports[i].code() == KafkaError.INVALID_RECORD, reports[i]
    for i in set(range(6)) - keyless:
        # librdkafka's name for "failed because another record of its batch was invalid"
        assert reports[i].code() == KafkaError._INVALID_DIFFERENT_RECORD, reports[i]

    # The response itself, as Kafka words it (the Python binding does not
    # expose the per-message text librdkafka keeps).
    client = WireClient(broker.bootstrap)
    schema = request_schema(0, 9)
    topic_cls, part_cls = nested(schema, "TopicProduceData"), nested(schema, "PartitionProduceData")
    batch = build_batch([(None if i in keyless else b"k", b"v", []) for i in range(6)], compression=0)
    body = client.request(0, 9, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                          topic_data=(topic_cls(name=topic_name, partition_data=(
                              part_cls(index=0, records=batch),)),))
    client.close()
    answer = body.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in answer.record_errors] == sorted(keyless)
    assert all(e.batch_index_error_message ==
               f"Compacted topic cannot accept message without key in topic partition {topic_name}-0."
               for e in answer.record_errors)
    assert answer.error_message.startswith("One or more records have been rejected due to 2 record errors")

    # A batch of keyed records alone is accepted.
    producer.produce(topic_name, key=b"k", value=b"v", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=30)
    consumer.close()
    assert (low, high) == (0, 1)
    delete_topic(broker.bootstrap, topic_name)


# ---------------------------------------------------------------- 2. deprecated configuration keys
DEPRECATED_TOPIC_KEYS = {"message.format.version": "0.10.0", "message.timestamp.difference.max.ms": "60000",
                         "message.downconversion.enable": "false"}


def test_deprecated_topic_keys_are_accepted_and_described(broker, topic_name):
    """Kafka 3.9 accepts message.format.version (deprecated since 3.0, value
    ignored) and its other deprecated topic keys in CreateTopics,
    AlterConfigs and IncrementalAlterConfigs, and returns them in
    DescribeConfigs; an invalid version is still INVALID_CONFIG."""
    create_topic(broker.bootstrap, topic_name, 1, config={"message.format.version": "2.8"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic_name)
    assert describe(admin, resource)["message.format.version"].value == "2.8"

    legacy = ConfigResource(ResourceType.TOPIC, topic_name, set_config=DEPRECATED_TOPIC_KEYS)
    admin.alter_configs([legacy])[legacy].result(timeout=30)
    described = describe(admin, resource)
    for key, value in DEPRECATED_TOPIC_KEYS.items():
        assert described[key].value == value, (key, described[key])

    incremental = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("message.format.version", "3.0-IV1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([incremental])[incremental].result(timeout=30)
    assert describe(admin, resource)["message.format.version"].value == "3.0-IV1"

    bad = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("message.format.version", "banana", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(timeout=30)
    assert info.value.args[0].name() == "INVALID_CONFIG"

    # The records still go through (the value is ignored: batches stay v2).
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic_name, key=b"k", value=b"v")
    assert producer.flush(30) == 0

    broker_id = admin.describe_cluster().result(timeout=10).nodes[0].id
    broker_configs = describe(admin, ConfigResource(ResourceType.BROKER, str(broker_id)))
    assert broker_configs["log.message.format.version"].value == "3.0-IV1"
    delete_topic(broker.bootstrap, topic_name)


def _percentiles_ms(values_s: list[float]) -> str:
    values = sorted(v * 1000 for v in values_s)
    return f"p50 {values[len(values) // 2]:.1f} ms, p99 {values[int(0.99 * (len(values) - 1))]:.1f} ms, " \
           f"max {values[-1]:.1f} ms"


# ---------------------------------------------------------------- 3. EndTxn's order
def test_back_to_back_one_record_transactions(broker, topic_name):
    """One-record transactions committed back to back (linger.ms=1), as a
    client's own suite times them: each commit succeeds (EndTxn answered
    once PrepareCommit is durable; the next AddPartitionsToTxn may wait with
    CONCURRENT_TRANSACTIONS while the markers are written) and a
    read_committed consumer reads every record once, in order. The latency
    is printed; its target lives in bench/tails.py."""
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1,
                         "transactional.id": f"{topic_name}-txn"})
    producer.init_transactions(60)
    commits = []
    for i in range(100):
        producer.begin_transaction()
        producer.produce(topic_name, value=b"%d" % i, partition=0)
        started = time.perf_counter()
        producer.commit_transaction(30)
        commits.append(time.perf_counter() - started)
    print(f"commit_transaction(): {_percentiles_ms(commits)}")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    values = []

    def read_all():
        for message in consumer.consume(100, timeout=0.5):
            assert message.error() is None, message.error()
            values.append(int(message.value()))
        return len(values) >= 100

    wait_for(read_all, 60, "the 100 committed records", poll_s=0)
    consumer.close()
    assert values == list(range(100))
    delete_topic(broker.bootstrap, topic_name)


# ---------------------------------------------------------------- 4. a parked fetch returns on data
def test_parked_fetch_returns_on_data_not_on_its_wait(broker, topic_name):
    """A consumer of four partitions parked in a fetch (fetch.min.bytes=1,
    fetch.wait.max.ms=5000) gets each new record when it is appended, not
    when its wait runs out: every record, produced one at a time after the
    previous one was consumed, arrives in far less than the wait. The
    distribution is printed; its target lives in bench/tails.py."""
    create_topic(broker.bootstrap, topic_name, 4)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    consumer.subscribe([topic_name])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": 1})

    def round_trip(value: bytes, partition: int, timeout_s: float) -> float:
        sent = time.perf_counter()
        producer.produce(topic_name, value=value, partition=partition)
        producer.poll(0)
        while time.perf_counter() - sent < timeout_s:
            message = consumer.poll(0.05)
            if message is not None:
                assert message.error() is None, message.error()
                if message.value() == value:
                    return time.perf_counter() - sent
        raise AssertionError(f"{value!r} not consumed within {timeout_s} s")

    round_trip(b"warm-up", 0, 60)  # the group formed, the consumer at the end of all four
    latencies = []
    for i in range(40):
        time.sleep(0.05)  # the consumer's next fetch reaches the broker and parks
        latencies.append(round_trip(b"%d" % i, i % 4, 10))
    consumer.close()
    print(f"produce -> consume with a parked fetch: {_percentiles_ms(latencies)}")
    late = [round(t, 3) for t in latencies if t >= 2.5]
    assert not late, f"records that waited for the fetch's max wait (5 s) rather than their append: {late}"
    delete_topic(broker.bootstrap, topic_name)


# ---------------------------------------------------------------- 7. CreateTopics within its timeout
@pytest.mark.cpu_heavy
def test_create_topics_of_100_partitions_within_the_operation_timeout(broker, topic_name):
    """An admin client creating a 100-partition topic with a 15 s operation
    timeout gets its answer in time, as from Kafka: once the assignment is
    durable and the leaders are elected (the replica actors, ~0.35 s of CPU
    each, may still be starting). The topic shows its 100 partitions in
    Metadata at once, and every partition takes a record once its leader is
    up (until then NOT_LEADER_OR_FOLLOWER, which the producer retries)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    started = time.monotonic()
    futures = admin.create_topics([NewTopic(topic_name, 100, 1)], operation_timeout=15, request_timeout=20)
    futures[topic_name].result(timeout=30)  # the client's own request timeout (20 s) fails it otherwise
    print(f"CreateTopics of 100 partitions answered in {time.monotonic() - started:.1f} s")
    metadata = admin.list_topics(topic_name, timeout=10)
    assert len(metadata.topics[topic_name].partitions) == 100

    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 180000, "linger.ms": 5})
    failures = []
    for p in range(100):
        producer.produce(topic_name, value=b"%d" % p, partition=p,
                         on_delivery=lambda err, msg: err is not None and failures.append((msg.partition(), err)))
    assert producer.flush(200) == 0
    assert failures == []
    delete_topic(broker.bootstrap, topic_name)


# ---------------------------------------------------------------- 6. cooperative-sticky: one callback
class _Generations(logging.Handler):
    """The generations librdkafka's debug log (debug=cgrp) reports in its JoinGroup responses."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"JoinGroup response: GenerationId (\d+)", record.getMessage())
        if found:
            self.seen.append(int(found.group(1)))


@pytest.mark.parametrize("leaver,settle_s", [("follower", 5), ("leader", 5), ("follower", 0)])
def test_cooperative_sticky_member_leaving_gives_one_assignment_callback(broker, topic_name, leaver, settle_s):
    """KIP-429 with librdkafka's cooperative-sticky: two consumers share a
    four-partition topic; when one unsubscribes, the remaining one gets its
    partitions in a single rebalance: one assignment callback (with exactly
    the partitions it had not), no revocation, as with Kafka, and the group
    goes through exactly one more generation (its JoinGroup answers, from the
    client's own cgrp debug log). Both the group leader (the first member) and
    the follower leaving are checked, and a follower leaving right after it got
    its partitions (settle 0): then the remaining member's callback of that
    earlier round (its empty incremental assignment of the generation before
    the leave, already answered by the broker) may only be served by the
    application's next poll, after the leave: the second callback a client's
    suite saw was that one, not a second rebalance round."""
    create_topic(broker.bootstrap, topic_name, 4)
    events: list[tuple[str, str, tuple]] = []
    lock = threading.Lock()
    generations = {"first": _Generations(), "second": _Generations()}

    def consumer(name: str) -> Consumer:
        logger = logging.getLogger(f"rdkafka.{topic_name}.{name}")
        logger.addHandler(generations[name])
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                      "partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": 1000,
                      "session.timeout.ms": 10000, "debug": "cgrp"}, logger=logger)

        def record(kind):
            def callback(_consumer, partitions):
                with lock:
                    events.append((name, kind, tuple(sorted(p.partition for p in partitions))))
            return callback

        c.subscribe([topic_name], on_assign=record("assign"), on_revoke=record("revoke"))
        return c

    def owned(name: str) -> set:
        held: set = set()
        for who, kind, parts in events:
            if who == name:
                held = held | set(parts) if kind == "assign" else held - set(parts)
        return held

    first = consumer("first")
    wait_for(lambda: first.poll(0.2) is None and owned("first") == {0, 1, 2, 3}, 60, "the first consumer's "
             "assignment", poll_s=0)
    second = consumer("second")

    def shared():
        first.poll(0.1)
        second.poll(0.1)
        return owned("first") and owned("second") and owned("first") | owned("second") == {0, 1, 2, 3}

    wait_for(shared, 60, "both consumers assigned", poll_s=0)
    # Let the second rebalance round (the first consumer rejoining after its
    # revocation) finish and its callbacks be served.
    settle = time.monotonic() + settle_s
    while time.monotonic() < settle:
        first.poll(0.1)
        second.poll(0.1)
    leaving, staying = (first, second) if leaver == "leader" else (second, first)
    staying_name = "second" if leaver == "leader" else "first"
    before = owned(staying_name)
    mark = len(events)
    leaving.unsubscribe()

    def all_back():
        leaving.poll(0.1)
        staying.poll(0.1)
        return owned(staying_name) == {0, 1, 2, 3}

    wait_for(all_back, 60, "the remaining consumer to own every partition", poll_s=0)
    settle = time.monotonic() + 6  # a second rebalance round, if any, would show within this
    while time.monotonic() < settle:
        staying.poll(0.1)
        leaving.poll(0.1)
    after = [e for e in events[mark:] if e[0] == staying_name]
    leaving.close()
    staying.close()
    # One more generation: the broker ran one rebalance round for the leave.
    # (The leaver's last JoinGroup answer is the generation it left; its log,
    # like the callbacks, is served by poll(), and it was polled to the end.)
    leaving_name = "first" if staying_name == "second" else "second"
    generation_before = max(generations[leaving_name].seen)
    assert [g for g in generations[staying_name].seen if g > generation_before] == [generation_before + 1], \
        (generations[staying_name].seen, generation_before)
    if settle_s == 0 and after[:1] == [(staying_name, "assign", ())]:
        after = after[1:]  # the earlier generation's empty callback, served late by the application
    assert after == [(staying_name, "assign", tuple(sorted({0, 1, 2, 3} - before)))], after
    delete_topic(broker.bootstrap, topic_name)
