"""`raykafka transactions` (kafka-transactions.sh) against the shared broker:
an open confluent-kafka transaction listed, described and its producer
described; hanging transactions (a producer id no coordinator handed out,
and a transactional id whose coordinator does not know the partition) found
by Kafka's rules and aborted, after which read_committed readers move on."""
from __future__ import annotations

import contextlib
import datetime
import functools
import io
import random
import time
import uuid

import confluent_kafka
import pytest
from kio.schema.errors import ErrorCode

from cli import transactions as txn
from net.codec import request_schema
from net.schema_build import build, nested
from storage.records import SimpleRecord, build_batch
from tests import cli_runner
from tests.broker_process import BrokerProcess
from tests.cli_runner import CliResult, run_cli, wait_for
from tests.kafka_admin import create_topic
from tests.wire_client import WireClient

MS = datetime.timedelta(milliseconds=1)


def cli(bootstrap: str, *args: str, expect: int | None = 0) -> CliResult:
    """`raykafka transactions ARGS --bootstrap-server ...` in this process."""
    return run_cli(["transactions", *args, "--bootstrap-server", bootstrap], expect)


def rows(result: CliResult, headers: list[str]) -> list[dict[str, str]]:
    """Kafka's table: the header line, then one line per row, tab-separated, values padded."""
    lines = result.stdout.splitlines()
    assert lines and [h.strip() for h in lines[0].split("\t")[:-1]] == headers, result.stdout
    assert all(line.endswith("\t") for line in lines), result.stdout
    return [dict(zip(headers, (v.strip() for v in line.split("\t")[:-1]))) for line in lines[1:]]


wait_for = functools.partial(cli_runner.wait_for, poll_s=0.3)


def txn_producer(bootstrap: str, transactional_id: str) -> confluent_kafka.Producer:
    # A timeout well past the test, so the coordinator does not abort the open transaction under it.
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                     "transaction.timeout.ms": 300000, "message.timeout.ms": 30000})


def only_broker(bootstrap: str) -> int:
    with txn.TransactionsClient(bootstrap) as client:
        [broker_id] = client.metadata([]).brokers
    return broker_id


def produce(client: WireClient, topic: str, batch: bytes, transactional_id: str | None = None) -> int:
    schema = request_schema(0, 9)
    topic_cls, part_cls = nested(schema, "TopicProduceData"), nested(schema, "PartitionProduceData")
    body = client.request(0, 9, transactional_id=transactional_id, acks=-1, timeout=5000 * MS, topic_data=(
        topic_cls(name=topic, partition_data=(part_cls(index=0, records=batch),)),))
    answer = body.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none, answer
    return int(answer.base_offset)


def last_stable_offset(client: WireClient, topic: str) -> int:
    """ListOffsets latest with read_committed: the LSO."""
    schema = request_schema(2, 7)
    topic_cls, part_cls = nested(schema, "ListOffsetsTopic"), nested(schema, "ListOffsetsPartition")
    body = client.request(2, 7, replica_id=-1, isolation_level=1, topics=(
        topic_cls(name=topic, partitions=(part_cls(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    answer = body.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none, answer
    return int(answer.offset)


def init_producer_id(client: WireClient, transactional_id: str) -> tuple[int, int]:
    """InitProducerId for a transactional id, straight on the wire (the bootstrap broker is the only
    coordinator): (producer id, epoch)."""
    schema = request_schema(22, 3)

    def attempt():
        answer = client.request(22, 3, **{k: v for k, v in dict(
            transactional_id=transactional_id, transaction_timeout=datetime.timedelta(minutes=5),
            transaction_timeout_ms=300000, producer_id=-1, producer_epoch=-1).items()
            if k in schema.__dataclass_fields__})
        return answer if answer.error_code == ErrorCode.none else None

    answer = wait_for(attempt, 30, f"InitProducerId for {transactional_id}")
    return int(answer.producer_id), int(answer.producer_epoch)


def read_committed(bootstrap: str, topic: str, until: bytes, timeout_s: float = 40) -> list[bytes]:
    """The values a read_committed consumer gets from the start of partition 0 until `until`."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout_s
        while until not in seen and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    seen.append(msg.value())
    finally:
        consumer.close()
    return seen


# ---- the pieces of Kafka's logic, no broker --------------------------------------------------------------------
def _state(pid: int, start: int | None, last_ts: int) -> txn.ProducerState:
    return txn.ProducerState(pid, 0, 3, last_ts, None, start)


def test_find_hanging_rules_and_table():
    now = 10_000_000
    producers = {("t", 0): [_state(1, 5, now - 61_000), _state(2, None, 0), _state(3, 7, now - 1000)],
                 ("t", 1): [_state(1, 9, now - 61_000), _state(4, 2, now - 120_000), _state(5, 4, now - 90_000)]}
    # Older than one minute, with an open transaction: 1 (both partitions), 4 and 5; 3 is too recent.
    candidates = txn.open_transactions(producers, now, 60_000)
    assert sorted((c.partition, c.producer.producer_id) for c in candidates) == \
        [(("t", 0), 1), (("t", 1), 1), (("t", 1), 4), (("t", 1), 5)]
    described = {"a": txn.TransactionDescription(1, "a", 1, 0, "Ongoing", 60000, now - 61_000, (("t", 0),)),
                 "b": None}
    # 1 on t-0: its coordinator expects to write that marker; 1 on t-1: not among its partitions;
    # 4: no transactional id lists it; 5: its id is unknown to the coordinator.
    found = txn.hanging(candidates, {1: "a", 5: "b"}, described)
    assert sorted((c.partition, c.producer.producer_id) for c in found) == [(("t", 1), 1), (("t", 1), 4),
                                                                            (("t", 1), 5)]
    assert txn.table(["A", "Bee"], [["long value", "1"]]) == ["A         \tBee\t", "long value\t1  \t"]
    assert txn.hanging_rows([found[1]], now)[0][-1] == "2"  # Duration(min), rounded down
    spec = txn.abort_spec_at(producers[("t", 1)], ("t", 1), 2)
    assert (spec.producer_id, spec.producer_epoch, spec.coordinator_epoch) == (4, 0, 0)  # no epoch yet: 0


def test_describe_transactions_response_read_with_and_without_an_open_transaction():
    """kio refuses a negative timestamp; an id with no transaction open is described with start time -1."""
    from net.codec import encode_response, response_schema

    schema = response_schema(65, 0)
    state_cls, topic_cls = nested(schema, "TransactionState"), nested(schema, "TopicData")

    def at(ms):
        return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)

    frame = encode_response(build(schema, throttle_time=datetime.timedelta(0), transaction_states=(
        build(state_cls, error_code=ErrorCode.none, transactional_id="idle", transaction_state="Empty",
              transaction_timeout=datetime.timedelta(seconds=60), transaction_start_time=at(-1),
              producer_id=1 << 40, producer_epoch=3, topics=()),
        build(state_cls, error_code=ErrorCode.none, transactional_id="busy", transaction_state="Ongoing",
              transaction_timeout=datetime.timedelta(seconds=90), transaction_start_time=at(1_700_000_000_123),
              producer_id=7, producer_epoch=0, topics=(build(topic_cls, topic="b", partitions=(2, 0)),
                                                       build(topic_cls, topic="a", partitions=(5,)))),
        build(state_cls, error_code=ErrorCode.transactional_id_not_found, transactional_id="gone",
              transaction_state="", transaction_timeout=datetime.timedelta(0), transaction_start_time=at(-1),
              producer_id=-1, producer_epoch=-1, topics=()))), 42)
    correlation_id, (idle, busy, gone) = txn.decode_describe_transactions(frame[4:])
    assert correlation_id == 42
    assert (idle.state, idle.timeout_ms, idle.start_time_ms, idle.producer_id, idle.producer_epoch,
            idle.partitions) == ("Empty", 60000, -1, 1 << 40, 3, ())
    assert (busy.transactional_id, busy.start_time_ms, busy.partitions) == \
        ("busy", 1_700_000_000_123, (("a", 5), ("b", 0), ("b", 2)))
    assert gone.error_code == ErrorCode.transactional_id_not_found


# ---- against the shared broker -----------------------------------------------------------------------------------
def test_list_describe_and_describe_producers_of_an_open_transaction(broker, topic_name):
    bootstrap = broker.bootstrap
    broker_id = only_broker(bootstrap)
    create_topic(bootstrap, topic_name, 2)
    tid = f"cli-open-{uuid.uuid4().hex[:6]}"
    producer = txn_producer(bootstrap, tid)
    producer.init_transactions(60)
    before_ms = int(time.time() * 1000)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic_name, value=b"p0-%d" % i, partition=0)
    producer.produce(topic_name, value=b"p1", partition=1)
    assert producer.flush(30) == 0
    open_ = True
    try:
        [listed] = [r for r in rows(cli(bootstrap, "list"), txn.LIST_HEADERS) if r["TransactionalId"] == tid]
        assert (listed["Coordinator"], listed["TransactionState"]) == (str(broker_id), "Ongoing")
        pid = listed["ProducerId"]

        [described] = rows(cli(bootstrap, "describe", "--transactional-id", tid), txn.DESCRIBE_HEADERS)
        assert (described["CoordinatorId"], described["TransactionalId"], described["ProducerId"],
                described["ProducerEpoch"], described["TransactionState"], described["TransactionTimeoutMs"]) == \
            (str(broker_id), tid, pid, "0", "Ongoing", "300000")
        assert described["TopicPartitions"] == f"{topic_name}-0,{topic_name}-1"
        assert before_ms - 1000 <= int(described["CurrentTransactionStartTimeMs"]) <= time.time() * 1000
        assert int(described["TransactionDurationMs"]) >= 0

        # Kafka's option position works too: --bootstrap-server before the command.
        from cli.main import main

        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert main(["transactions", "--bootstrap-server", bootstrap, "describe-producers",
                         "--topic", topic_name, "--partition", "0"]) == 0
        [producer_row] = rows(CliResult(0, out.getvalue(), ""), txn.PRODUCERS_HEADERS)
        assert (producer_row["ProducerId"], producer_row["ProducerEpoch"], producer_row["LatestCoordinatorEpoch"],
                producer_row["LastSequence"], producer_row["CurrentTransactionStartOffset"]) == \
            (pid, "0", "-1", "2", "0")
        assert before_ms - 1000 <= int(producer_row["LastTimestamp"]) <= time.time() * 1000
        on_replica = rows(cli(bootstrap, "describe-producers", "--topic", topic_name, "--partition", "1",
                              "--broker-id", str(broker_id)), txn.PRODUCERS_HEADERS)
        assert [(r["ProducerId"], r["LastSequence"], r["CurrentTransactionStartOffset"]) for r in on_replica] == \
            [(pid, "0", "0")]

        # Open for longer than a 0-minute timeout, but its coordinator expects to write its markers: not hanging.
        time.sleep(0.05)
        assert rows(cli(bootstrap, "find-hanging", "--topic", topic_name, "--max-transaction-timeout", "0"),
                    txn.HANGING_HEADERS) == []
        assert pid not in {r["ProducerId"] for r in rows(cli(
            bootstrap, "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0"),
            txn.HANGING_HEADERS)}

        missing = cli(bootstrap, "describe", "--transactional-id", f"no-such-{tid}", expect=1)
        assert "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr and "Failed to describe transaction state" in \
            missing.stderr
        gone = cli(bootstrap, "describe-producers", "--topic", f"{topic_name}-none", "--partition", "0", expect=1)
        assert "UNKNOWN_TOPIC_OR_PARTITION" in gone.stderr
        assert "--topic or --broker-id" in cli(bootstrap, "find-hanging", expect=2).stderr

        producer.abort_transaction(30)
        open_ = False
        wait_for(lambda: [r for r in rows(cli(bootstrap, "list"), txn.LIST_HEADERS)
                          if r["TransactionalId"] == tid and r["TransactionState"] == "CompleteAbort"], 30,
                 "the transaction to be listed CompleteAbort")
        [closed] = rows(cli(bootstrap, "describe-producers", "--topic", topic_name, "--partition", "0"),
                        txn.PRODUCERS_HEADERS)
        assert closed["CurrentTransactionStartOffset"] == "None" and int(closed["LatestCoordinatorEpoch"]) >= 0
        [described] = rows(cli(bootstrap, "describe", "--transactional-id", tid), txn.DESCRIBE_HEADERS)
        assert (described["TransactionState"], described["TopicPartitions"]) == ("CompleteAbort", "")
    finally:
        if open_:
            producer.abort_transaction(30)


@pytest.fixture(scope="module")
def unverified_broker(tmp_path_factory):
    """A broker that appends transactional batches without asking their coordinator
    (transaction.partition.verification.enable=false, KIP-890's switch): the only way
    a client can leave a hanging transaction for find-hanging and abort to find."""
    process = BrokerProcess(tmp_path_factory.mktemp("unverified") / "data", overrides={
        "transaction.partition.verification.enable": "false", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1"}, log_name="unverified-broker.log").start()
    yield process
    assert process.stop() == 0, process.log_tail()


def test_find_hanging_and_abort_so_read_committed_moves_on(unverified_broker, topic_name):
    bootstrap = unverified_broker.bootstrap
    broker_id = only_broker(bootstrap)
    create_topic(bootstrap, topic_name, 1)
    live_tid, known_tid = f"cli-live-{uuid.uuid4().hex[:6]}", f"cli-known-{uuid.uuid4().hex[:6]}"
    live = txn_producer(bootstrap, live_tid)
    live.init_transactions(60)
    client = WireClient(bootstrap)
    try:
        assert produce(client, topic_name, build_batch([(b"k", b"before", [])])) == 0
        # A transaction no coordinator knows: its producer id was never handed out (ids come in blocks of
        # 1000 from 0). Its batch is stamped 20 minutes ago, past find-hanging's default 15-minute bound.
        ghost = random.randrange(1 << 40, 1 << 41)
        twenty_min_ago = int(time.time() * 1000) - 20 * 60_000
        assert produce(client, topic_name, build_batch(
            [SimpleRecord(b"k", b"ghost-1", (), twenty_min_ago), SimpleRecord(b"k", b"ghost-2", (), twenty_min_ago)],
            producer_id=ghost, producer_epoch=0, base_sequence=0, is_transactional=True), "never-initialized") == 1
        assert produce(client, topic_name, build_batch([(b"k", b"after", [])])) == 3
        # A live transaction on the same partition: open, known to its coordinator.
        live.begin_transaction()
        live.produce(topic_name, value=b"live", partition=0)
        assert live.flush(30) == 0
        # A transactional id its coordinator knows, but not with this partition in a transaction
        # (no AddPartitionsToTxn): hanging too, by Kafka's rules.
        known_pid, known_epoch = init_producer_id(client, known_tid)
        [idle] = rows(cli(bootstrap, "describe", "--transactional-id", known_tid), txn.DESCRIBE_HEADERS)
        assert (idle["ProducerId"], idle["TransactionState"], idle["CurrentTransactionStartTimeMs"],
                idle["TransactionDurationMs"], idle["TopicPartitions"]) == (str(known_pid), "Empty", "None", "None", "")
        known_offset = produce(client, topic_name, build_batch(
            [(b"k", b"unregistered", [])], producer_id=known_pid, producer_epoch=known_epoch, base_sequence=0,
            is_transactional=True), known_tid)
        assert known_offset == 5
        assert produce(client, topic_name, build_batch([(b"k", b"end", [])])) == 6
        live_pid = next(r["ProducerId"] for r in rows(cli(bootstrap, "list"), txn.LIST_HEADERS)
                        if r["TransactionalId"] == live_tid)
        open_txns = {r["ProducerId"]: r["CurrentTransactionStartOffset"] for r in rows(cli(
            bootstrap, "describe-producers", "--topic", topic_name, "--partition", "0"), txn.PRODUCERS_HEADERS)}
        assert open_txns == {str(ghost): "1", live_pid: "4", str(known_pid): "5"}
        assert last_stable_offset(client, topic_name) == 1

        # Default bound (15 minutes): only the 20-minute-old one is a candidate, and it is hanging.
        [hung] = rows(cli(bootstrap, "find-hanging", "--topic", topic_name), txn.HANGING_HEADERS)
        assert (hung["Topic"], hung["Partition"], hung["ProducerId"], hung["ProducerEpoch"],
                hung["CoordinatorEpoch"], hung["StartOffset"], hung["LastTimestamp"]) == \
            (topic_name, "0", str(ghost), "0", "-1", "1", str(twenty_min_ago))
        assert 20 <= int(hung["Duration(min)"]) <= 21
        # No bound: all three are candidates; the live one is not hanging.
        time.sleep(0.05)
        found = rows(cli(bootstrap, "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0"),
                     txn.HANGING_HEADERS)
        mine = {r["ProducerId"]: r["StartOffset"] for r in found if r["Topic"] == topic_name}
        assert mine == {str(ghost): "1", str(known_pid): "5"}
        assert {r["ProducerId"]: r["StartOffset"] for r in rows(cli(
            bootstrap, "find-hanging", "--topic", topic_name, "--partition", "0", "--max-transaction-timeout", "0"),
            txn.HANGING_HEADERS)} == mine

        live.commit_transaction(30)
        assert last_stable_offset(client, topic_name) == 1  # still held by the hanging ones

        nothing = cli(bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "2", expect=1)
        assert f"Could not find any open transactions starting at offset 2 on partition {topic_name}-0" in \
            nothing.stderr
        assert cli(bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "1").stdout == ""
        # Now held by the unregistered one, once the live transaction's COMMIT marker is in: its
        # coordinator writes it after answering EndTxn, as Kafka's does (a woken replica's first
        # marker takes a lookup through its node's pool, ~0.5 s here).
        wait_for(lambda: last_stable_offset(client, topic_name) == 5, 30, "LSO 5 after the abort and the commit",
                 poll_s=0.1)
        assert [r["ProducerId"] for r in rows(cli(bootstrap, "find-hanging", "--topic", topic_name,
                                                  "--max-transaction-timeout", "0"), txn.HANGING_HEADERS)] == \
            [str(known_pid)]
        # Kafka's older-broker form: producer id, epoch and coordinator epoch given.
        cli(bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--producer-id", str(known_pid),
            "--producer-epoch", str(known_epoch), "--coordinator-epoch", "-1")
        # 0 before, 1-2 ghost, 3 after, 4 live, 5 unregistered, 6 end, 7 live's COMMIT, 8 and 9 the ABORTs
        assert last_stable_offset(client, topic_name) == 10
        assert {r["ProducerId"]: r["CurrentTransactionStartOffset"] for r in rows(cli(
            bootstrap, "describe-producers", "--topic", topic_name, "--partition", "0"), txn.PRODUCERS_HEADERS)} == \
            {str(ghost): "None", live_pid: "None", str(known_pid): "None"}
        assert rows(cli(bootstrap, "find-hanging", "--topic", topic_name, "--max-transaction-timeout", "0"),
                    txn.HANGING_HEADERS) == []
    finally:
        client.close()
    assert read_committed(bootstrap, topic_name, until=b"end") == [b"before", b"after", b"live", b"end"]
