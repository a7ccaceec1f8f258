"""Transactions through real clients other than librdkafka (issue 19, "Checked
by / Real clients"): kafka-python, aiokafka and kafkajs (npm; a node script,
tests/js/transactions.js, run as a subprocess that prints its observations as
JSON). confluent-kafka is covered in test_transactions.py.

For each client, against the shared session broker, on fresh topics:

- commit / abort / commit: a transactional producer commits a transaction,
  aborts one and commits another, over two partitions. A read_committed
  consumer of that client sees exactly the committed records, in order; a
  read_uncommitted one sees the aborted ones too.
- consume-transform-produce: a read_committed group member reads an input
  topic; the transactional producer writes the transformed records to an
  output topic and sends the member's offsets to the transaction. A first
  round is aborted (the group's offsets stay unset, nothing reaches
  read_committed readers of the output), a second one committed: the group's
  committed offsets then equal the input's end (checked by the client and by
  confluent-kafka's Consumer.committed), and the output holds exactly one
  transformed copy of the input.
- an open transaction holds read_committed consumers at its first offset
  (their position, and read_committed ListOffsets latest = the LSO) although
  a plain record was written after it; read_uncommitted consumers see
  everything. Once the transaction ends, read_committed consumers move on.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests import kafka_admin

REPO = Path(__file__).resolve().parents[2]
JS_DIR = REPO / "tests" / "js"

TXN_PARTITIONS = 2
PER_TXN = 6          # records per transaction (alternating over TXN_PARTITIONS partitions)
INPUT_RECORDS = 10   # consume-transform-produce input, over 2 partitions
TXN_TIMEOUT_MS = 60000
HOLD_S = 3.0         # how long read_committed consumers are watched while a transaction is open


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topics(broker):
    """Fresh topics made by `topics(partitions)`; deleted at the end."""
    made: list[str] = []

    def make(partitions: int, prefix: str = "txc") -> str:
        name = unique(prefix)
        kafka_admin.create_topic(broker.bootstrap, name, partitions)
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            kafka_admin.delete_topic(broker.bootstrap, name)
        except Exception:  # noqa: BLE001 - cleanup only; the test's outcome stands
            pass


def txn_values(tag: str) -> list[tuple[int, str]]:
    """(partition, value) of one transaction's records."""
    return [(i % TXN_PARTITIONS, f"{tag}-{i}") for i in range(PER_TXN)]


def by_partition(rows) -> dict[int, list[str]]:
    """rows: (partition, offset, value) in consumption order -> values per partition, in offset order,
    after checking offsets only increase within a partition."""
    out: dict[int, list[tuple[int, str]]] = {}
    for partition, offset, value in rows:
        out.setdefault(partition, []).append((offset, value))
    for partition, seq in out.items():
        offsets = [o for o, _ in seq]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), \
            f"partition {partition}: offsets out of order or repeated: {offsets}"
    return {p: [v for _, v in seq] for p, seq in out.items()}


def expected_by_partition(*tags: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for tag in tags:
        for partition, value in txn_values(tag):
            out.setdefault(partition, []).append(value)
    return out


def check_isolation(committed_rows, uncommitted_rows) -> None:
    assert by_partition(committed_rows) == expected_by_partition("c1", "c2"), \
        "read_committed must see exactly the two committed transactions"
    assert by_partition(uncommitted_rows) == expected_by_partition("c1", "a", "c2"), \
        "read_uncommitted must see the aborted transaction too"


def seed_input(bootstrap: str, topic: str) -> dict[int, int]:
    """INPUT_RECORDS plain records over partitions 0 and 1; returns each partition's end offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(INPUT_RECORDS):
        producer.produce(topic, key=b"k%d" % i, value=b"in-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    ends = {}
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe")})
    try:
        for p in (0, 1):
            low, high = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
    finally:
        probe.close()
    assert ends == {0: INPUT_RECORDS // 2, 1: INPUT_RECORDS // 2}
    return ends


def confluent_committed(bootstrap: str, group: str, topic: str, partitions) -> dict[int, int]:
    """The group's committed offsets as confluent-kafka reads them (OffsetFetch with require_stable);
    -1001 (OFFSET_INVALID) where none."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.3):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval_s)


def transformed(values) -> list[str]:
    return sorted(v.upper() for v in values)


def input_values() -> list[str]:
    return [f"in-{i}" for i in range(INPUT_RECORDS)]


# ============================================================================ kafka-python
def _kp_producer(bootstrap: str, txn_id: str | None = None):
    from kafka import KafkaProducer

    if txn_id is None:
        return KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    return KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                         transaction_timeout_ms=TXN_TIMEOUT_MS, max_block_ms=60000)


def _kp_consumer(bootstrap: str, isolation: str, group: str | None = None):
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", isolation_level=isolation)


def _kp_send_txn(producer, topic: str, tag: str, commit: bool) -> None:
    producer.begin_transaction()
    futures = [producer.send(topic, value=v.encode(), partition=p) for p, v in txn_values(tag)]
    for f in futures:
        f.get(timeout=60)
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


class QuietRead:
    """The rows (partition, offset, value) of a poll loop that ends `quiet_s`
    after `count` records arrived (to catch extras), or at `timeout_s`."""

    def __init__(self, count: int, timeout_s: float, quiet_s: float):
        self.rows: list[tuple[int, int, str]] = []
        self.count, self.quiet_s = count, quiet_s
        self.deadline = time.monotonic() + timeout_s
        self.quiet_until: float | None = None

    def add(self, polled: dict) -> bool:
        """One poll's {partition: records} (kafka-python and aiokafka alike); True once the read is over."""
        for msgs in polled.values():
            self.rows += [(m.partition, m.offset, m.value.decode()) for m in msgs]
        now = time.monotonic()
        if len(self.rows) >= self.count and self.quiet_until is None:
            self.quiet_until = now + self.quiet_s
        return (self.quiet_until is not None and now >= self.quiet_until) or now > self.deadline


def _kp_read(consumer, count: int, timeout_s: float = 60, quiet_s: float = 1.5) -> list[tuple[int, int, str]]:
    """Poll until `count` records (then `quiet_s` more to catch extras)."""
    read = QuietRead(count, timeout_s, quiet_s)
    while not read.add(consumer.poll(timeout_ms=300)):
        pass
    return read.rows


def test_kafka_python_commit_abort_commit(broker, topics):
    from kafka import TopicPartition as KTP

    topic = topics(TXN_PARTITIONS)
    producer = _kp_producer(broker.bootstrap, unique("kp-txn"))
    try:
        producer.init_transactions()
        _kp_send_txn(producer, topic, "c1", commit=True)
        _kp_send_txn(producer, topic, "a", commit=False)
        _kp_send_txn(producer, topic, "c2", commit=True)
    finally:
        producer.close(timeout=10)
    seen = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = _kp_consumer(broker.bootstrap, isolation)
        try:
            consumer.assign([KTP(topic, p) for p in range(TXN_PARTITIONS)])
            seen[isolation] = _kp_read(consumer, PER_TXN * (2 if isolation == "read_committed" else 3))
        finally:
            consumer.close()
    check_isolation(seen["read_committed"], seen["read_uncommitted"])


def test_kafka_python_consume_transform_produce(broker, topics):
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    source, sink = topics(2, "txc-in"), topics(1, "txc-out")
    ends = seed_input(broker.bootstrap, source)
    group = unique("kp-ctp")
    consumer = _kp_consumer(broker.bootstrap, "read_committed", group)
    producer = _kp_producer(broker.bootstrap, unique("kp-ctp-txn"))
    try:
        consumer.subscribe([source])
        rows = _kp_read(consumer, INPUT_RECORDS, quiet_s=0.5)
        assert sorted(v for _, _, v in rows) == sorted(input_values())
        offsets = {}
        for partition, offset, _ in rows:
            offsets[partition] = max(offsets.get(partition, -1), offset + 1)
        assert offsets == ends
        producer.init_transactions()
        for commit in (False, True):
            producer.begin_transaction()
            for partition, offset, value in rows:
                producer.send(sink, value=value.upper().encode(), partition=0)
            producer.send_offsets_to_transaction(
                {KTP(source, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()},
                consumer.group_metadata())
            if commit:
                producer.commit_transaction()
                wait_until(lambda: all(consumer.committed(KTP(source, p)) == ends[p] for p in ends), 30,
                           "kafka-python to read the transaction's offsets as committed")
            else:
                producer.abort_transaction()
                time.sleep(1)
                assert [consumer.committed(KTP(source, p)) for p in ends] == [None, None], \
                    "an aborted transaction's offsets must not be committed"
    finally:
        producer.close(timeout=10)
        consumer.close()
    assert confluent_committed(broker.bootstrap, group, source, ends) == ends
    reader = _kp_consumer(broker.bootstrap, "read_committed")
    try:
        reader.assign([KTP(sink, 0)])
        out = _kp_read(reader, INPUT_RECORDS)
    finally:
        reader.close()
    assert sorted(v for _, _, v in out) == transformed(input_values()), \
        "read_committed must see the committed round's output only"


def test_kafka_python_open_transaction_holds_read_committed(broker, topics):
    from kafka import TopicPartition as KTP

    topic = topics(1, "txc-hold")
    tp = KTP(topic, 0)
    producer = _kp_producer(broker.bootstrap, unique("kp-hold"))
    plain = _kp_producer(broker.bootstrap)
    committed = _kp_consumer(broker.bootstrap, "read_committed")
    uncommitted = _kp_consumer(broker.bootstrap, "read_uncommitted")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"before", partition=0).get(timeout=60)
        producer.commit_transaction()
        producer.begin_transaction()
        first = producer.send(topic, value=b"open-0", partition=0).get(timeout=60).offset
        producer.send(topic, value=b"open-1", partition=0).get(timeout=60)
        after = plain.send(topic, value=b"after", partition=0).get(timeout=60).offset
        assert after > first
        for c in (committed, uncommitted):
            c.assign([tp])
        # read_committed: "before" only, then held at the open transaction's first offset.
        held = _kp_read(committed, 1, quiet_s=HOLD_S)
        assert [v for _, _, v in held] == ["before"]
        assert committed.position(tp) == first, "read_committed position must stop at the open transaction"
        assert committed.end_offsets([tp])[tp] == first, "read_committed ListOffsets latest must be the LSO"
        assert uncommitted.end_offsets([tp])[tp] == after + 1
        assert [v for _, _, v in _kp_read(uncommitted, 4)] == ["before", "open-0", "open-1", "after"]
        producer.commit_transaction()
        rest = _kp_read(committed, 3)
        assert [(o, v) for _, o, v in rest] == [(first, "open-0"), (first + 1, "open-1"), (after, "after")]
        assert committed.end_offsets([tp])[tp] > after
    finally:
        for c in (committed, uncommitted):
            c.close()
        plain.close(timeout=10)
        producer.close(timeout=10)


# ============================================================================ aiokafka
def _ai_producer(bootstrap: str, txn_id: str | None = None):
    from aiokafka import AIOKafkaProducer

    if txn_id is None:
        return AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    return AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                            transaction_timeout_ms=TXN_TIMEOUT_MS)


def _ai_consumer(bootstrap: str, isolation: str, group: str | None = None):
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                            auto_offset_reset="earliest", isolation_level=isolation)


async def _ai_send_txn(producer, topic: str, tag: str, commit: bool) -> None:
    await producer.begin_transaction()
    for p, v in txn_values(tag):
        await (await producer.send(topic, value=v.encode(), partition=p))
    if commit:
        await producer.commit_transaction()
    else:
        await producer.abort_transaction()


async def _ai_read(consumer, count: int, timeout_s: float = 60, quiet_s: float = 1.5):
    read = QuietRead(count, timeout_s, quiet_s)
    while not read.add(await consumer.getmany(timeout_ms=300)):
        pass
    return read.rows


def test_aiokafka_commit_abort_commit(broker, topics):
    from aiokafka.structs import TopicPartition as ATP

    topic = topics(TXN_PARTITIONS)

    async def go():
        producer = _ai_producer(broker.bootstrap, unique("ai-txn"))
        await producer.start()
        try:
            await _ai_send_txn(producer, topic, "c1", commit=True)
            await _ai_send_txn(producer, topic, "a", commit=False)
            await _ai_send_txn(producer, topic, "c2", commit=True)
        finally:
            await producer.stop()
        seen = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = _ai_consumer(broker.bootstrap, isolation)
            await consumer.start()
            try:
                consumer.assign([ATP(topic, p) for p in range(TXN_PARTITIONS)])
                seen[isolation] = await _ai_read(consumer, PER_TXN * (2 if isolation == "read_committed" else 3))
            finally:
                await consumer.stop()
        return seen

    seen = asyncio.run(go())
    check_isolation(seen["read_committed"], seen["read_uncommitted"])


def test_aiokafka_consume_transform_produce(broker, topics):
    from aiokafka.structs import OffsetAndMetadata
    from aiokafka.structs import TopicPartition as ATP

    source, sink = topics(2, "txc-in"), topics(1, "txc-out")
    ends = seed_input(broker.bootstrap, source)
    group = unique("ai-ctp")

    async def committed_offsets(consumer):
        return {p: await consumer.committed(ATP(source, p)) for p in ends}

    async def go():
        consumer = _ai_consumer(broker.bootstrap, "read_committed", group)
        producer = _ai_producer(broker.bootstrap, unique("ai-ctp-txn"))
        await consumer.start()
        await producer.start()
        try:
            consumer.subscribe([source])
            rows = await _ai_read(consumer, INPUT_RECORDS, quiet_s=0.5)
            assert sorted(v for _, _, v in rows) == sorted(input_values())
            offsets = {}
            for partition, offset, _ in rows:
                offsets[partition] = max(offsets.get(partition, -1), offset + 1)
            assert offsets == ends
            for commit in (False, True):
                await producer.begin_transaction()
                for partition, offset, value in rows:
                    await producer.send(sink, value=value.upper().encode(), partition=0)
                await producer.send_offsets_to_transaction(
                    {ATP(source, p): OffsetAndMetadata(o, "") for p, o in offsets.items()}, group)
                if commit:
                    await producer.commit_transaction()
                    deadline = time.monotonic() + 30
                    while await committed_offsets(consumer) != ends:
                        assert time.monotonic() < deadline, \
                            f"aiokafka reads committed offsets {await committed_offsets(consumer)}, expected {ends}"
                        await asyncio.sleep(0.3)
                else:
                    await producer.abort_transaction()
                    await asyncio.sleep(1)
                    assert await committed_offsets(consumer) == {0: None, 1: None}, \
                        "an aborted transaction's offsets must not be committed"
        finally:
            await producer.stop()
            await consumer.stop()
        reader = _ai_consumer(broker.bootstrap, "read_committed")
        await reader.start()
        try:
            reader.assign([ATP(sink, 0)])
            return await _ai_read(reader, INPUT_RECORDS)
        finally:
            await reader.stop()

    out = asyncio.run(go())
    assert confluent_committed(broker.bootstrap, group, source, ends) == ends
    assert sorted(v for _, _, v in out) == transformed(input_values()), \
        "read_committed must see the committed round's output only"


def test_aiokafka_open_transaction_holds_read_committed(broker, topics):
    """As kafka-python's, but the open transaction is aborted: read_committed consumers then skip it."""
    from aiokafka.structs import TopicPartition as ATP

    topic = topics(1, "txc-hold")
    tp = ATP(topic, 0)

    async def go():
        producer = _ai_producer(broker.bootstrap, unique("ai-hold"))
        plain = _ai_producer(broker.bootstrap)
        committed = _ai_consumer(broker.bootstrap, "read_committed")
        uncommitted = _ai_consumer(broker.bootstrap, "read_uncommitted")
        for c in (producer, plain, committed, uncommitted):
            await c.start()
        try:
            await producer.begin_transaction()
            await (await producer.send(topic, value=b"before", partition=0))
            await producer.commit_transaction()
            await producer.begin_transaction()
            first = (await (await producer.send(topic, value=b"open-0", partition=0))).offset
            await (await producer.send(topic, value=b"open-1", partition=0))
            after = (await (await plain.send(topic, value=b"after", partition=0))).offset
            assert after > first
            for c in (committed, uncommitted):
                c.assign([tp])
            held = await _ai_read(committed, 1, quiet_s=HOLD_S)
            assert [v for _, _, v in held] == ["before"]
            assert await committed.position(tp) == first, \
                "read_committed position must stop at the open transaction"
            assert (await committed.end_offsets([tp]))[tp] == first, \
                "read_committed ListOffsets latest must be the LSO"
            assert committed.last_stable_offset(tp) == first, "Fetch must answer the LSO"
            assert (await uncommitted.end_offsets([tp]))[tp] == after + 1
            assert [v for _, _, v in await _ai_read(uncommitted, 4)] == ["before", "open-0", "open-1", "after"]
            await producer.abort_transaction()
            rest = await _ai_read(committed, 1)
            assert [(o, v) for _, o, v in rest] == [(after, "after")], \
                "after the abort read_committed must skip the aborted records and reach the plain one"
            assert (await committed.end_offsets([tp]))[tp] > after
        finally:
            for c in (committed, uncommitted, plain, producer):
                await c.stop()

    asyncio.run(go())


# ============================================================================ kafkajs (node)
def run_kafkajs(broker, scenario: str, **args) -> dict:
    """Run tests/js/transactions.js <scenario> <json args>; its stdout is one JSON object."""
    node = shutil.which("node")
    assert node, "node is not installed (./dev setup installs it)"
    assert (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists(), \
        "kafkajs is not installed in tests/js (./dev setup runs npm ci there)"
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    payload = json.dumps({"brokers": [broker.bootstrap], "perTxn": PER_TXN, "partitions": TXN_PARTITIONS,
                          "txnTimeoutMs": TXN_TIMEOUT_MS, "holdMs": int(HOLD_S * 1000), **args})
    proc = subprocess.run([node, str(JS_DIR / "transactions.js"), scenario, payload], cwd=JS_DIR, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (f"kafkajs {scenario} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}\n"
                                  f"stdout: {proc.stdout[-2000:]}\nbroker log:\n{broker.log_tail(40)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _rows(js_rows) -> list[tuple[int, int, str]]:
    return [(r["partition"], int(r["offset"]), r["value"]) for r in js_rows]


def test_kafkajs_commit_abort_commit(broker, topics):
    topic = topics(TXN_PARTITIONS)
    result = run_kafkajs(broker, "commit-abort-commit", topic=topic, transactionalId=unique("js-txn"))
    check_isolation(_rows(result["readCommitted"]), _rows(result["readUncommitted"]))


def test_kafkajs_consume_transform_produce(broker, topics):
    source, sink = topics(2, "txc-in"), topics(1, "txc-out")
    ends = seed_input(broker.bootstrap, source)
    group = unique("js-ctp")
    result = run_kafkajs(broker, "consume-transform-produce", source=source, sink=sink, groupId=group,
                         transactionalId=unique("js-ctp-txn"), inputRecords=INPUT_RECORDS)
    assert sorted(v for _, _, v in _rows(result["consumed"])) == sorted(input_values())
    # admin.fetchOffsets after the aborted round, then after the committed one: -1 = none
    assert {int(p["partition"]): int(p["offset"]) for p in result["committedAfterAbort"]} == {0: -1, 1: -1}, \
        "an aborted transaction's offsets must not be committed"
    assert {int(p["partition"]): int(p["offset"]) for p in result["committedAfterCommit"]} == ends
    assert confluent_committed(broker.bootstrap, group, source, ends) == ends
    assert sorted(v for _, _, v in _rows(result["output"])) == transformed(input_values()), \
        "read_committed must see the committed round's output only"


def test_kafkajs_open_transaction_holds_read_committed(broker, topics):
    topic = topics(1, "txc-hold")
    result = run_kafkajs(broker, "open-transaction", topic=topic, transactionalId=unique("js-hold"))
    first, after = int(result["firstOpenOffset"]), int(result["afterOffset"])
    assert after > first
    assert [v for _, _, v in _rows(result["heldReadCommitted"])] == ["before"], \
        "read_committed must not get past the open transaction"
    assert [v for _, _, v in _rows(result["readUncommitted"])] == ["before", "open-0", "open-1", "after"]
    rest = [(o, v) for _, o, v in _rows(result["readCommittedAfterEnd"])]
    assert rest[:3] == [(first, "open-0"), (first + 1, "open-1"), (after, "after")] and len(rest) == 3
