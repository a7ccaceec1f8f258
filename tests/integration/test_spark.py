"""The `raykafka` Spark data source against a real broker and a real local
Spark (one SparkSession for the module, the session's shared broker).

Reference data is written and read with confluent-kafka (librdkafka)."""
from __future__ import annotations

import json
import re
import time
import uuid

import pytest

import pyspark  # noqa: F401  (installed by ./dev; a missing pyspark must fail, not skip)
import pyarrow  # noqa: F401

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from tests.kafka_admin import create_topic, delete_topic  # noqa: E402

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def session():
    from spark.session import local_session

    s = local_session(app_name="raykafka-tests",
                      conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield s
    s.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, records, compression: str = "lz4") -> None:
    """records: dicts with value and optional key, partition, headers, timestamp."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": compression})
    errors = []
    for r in records:
        kwargs = {k: r[k] for k in ("key", "partition", "headers", "timestamp") if r.get(k) is not None}
        producer.produce(topic, r["value"], on_delivery=lambda err, _m: err and errors.append(err), **kwargs)
    assert producer.flush(60) == 0 and not errors, errors


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """Every record, as (partition, offset, key, value, timestamp ms, timestamp type, headers)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ref-{topic}", "enable.auto.commit": False})
    ends = {}
    for p in range(partitions):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < sum(ends.values()) and time.monotonic() < deadline:
        for m in consumer.consume(1000, timeout=1.0):
            if m.error():
                raise KafkaException(m.error())
            kind, ts = m.timestamp()
            headers = [(k, v) for k, v in m.headers()] if m.headers() else None
            out.append((m.partition(), m.offset(), m.key(), m.value(), ts, kind - 1, headers))
    consumer.close()
    return sorted(out)


def spark_rows(df) -> list[tuple]:
    out = []
    for r in df.collect():
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]] \
            if "headers" in r and r["headers"] is not None else None
        out.append((r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                    None if r["value"] is None else bytes(r["value"]),
                    round(r["timestamp"].timestamp() * 1000), r["timestampType"], headers))
    return sorted(out)


def read(session, bootstrap: str, **options):
    reader = session.read.format("raykafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def offsets_of(df) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())


def test_batch_read_equals_a_kafka_consumer(session, broker):
    topic = _name("spark-batch")
    create_topic(broker.bootstrap, topic, 3)
    records = [{"value": b"value-%d" % i + b"x" * (i % 50), "key": None if i % 10 == 0 else b"key-%d" % i,
                "partition": i % 3,
                "headers": [("trace", b"%d" % i), ("empty", None)] if i % 5 == 0 else None}
               for i in range(3000)]
    produce(broker.bootstrap, topic, records[:1500], compression="lz4")
    produce(broker.bootstrap, topic, records[1500:], compression="zstd")
    expected = consume_all(broker.bootstrap, topic, 3)
    assert len(expected) == 3000

    df = read(session, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    assert spark_rows(df) == expected
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == {topic}

    plain = read(session, broker.bootstrap, subscribe=topic)
    assert "headers" not in plain.columns
    # Splitting ranges changes the Spark partitions, never the rows.
    split = read(session, broker.bootstrap, subscribe=topic, minPartitions="7")
    assert split.rdd.getNumPartitions() >= 7
    assert offsets_of(split) == [(p, o) for p, o, *_ in expected]
    capped = read(session, broker.bootstrap, subscribe=topic, maxRecordsPerPartition="400")
    assert capped.rdd.getNumPartitions() == 9
    assert capped.count() == 3000


def test_offset_and_timestamp_options_select_rows(session, broker):
    topic = _name("spark-offsets")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [{"value": b"%d-%d" % (p, i), "partition": p, "timestamp": BASE_TS + i * 1000}
                                      for p in range(2) for i in range(50)])
    bs = broker.bootstrap

    def rows(**options):
        return offsets_of(read(session, bs, **{"subscribe": topic, **options}))

    assert rows(startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
                endingOffsets=f'{{"{topic}":{{"0":20,"1":-1}}}}') == \
        [(0, o) for o in range(10, 20)] + [(1, o) for o in range(50)]
    assert rows(startingTimestamp=str(BASE_TS + 25_000), endingTimestamp=str(BASE_TS + 30_500)) == \
        [(p, o) for p in range(2) for o in range(25, 31)]
    assert rows(startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{BASE_TS + 40_000},"1":{BASE_TS + 45_000}}}}}',
                endingOffsetsByTimestamp=f'{{"{topic}":{{"0":{BASE_TS + 10**9},"1":{BASE_TS + 47_000}}}}}') == \
        [(0, o) for o in range(40, 50)] + [(1, o) for o in (45, 46)]
    # Past the last record: an error by default, the latest offset on request.
    with pytest.raises(Exception, match="startingTimestamp"):
        rows(startingTimestamp=str(BASE_TS + 10**9))
    assert rows(startingTimestamp=str(BASE_TS + 10**9), startingOffsetsByTimestampStrategy="latest") == []
    assign = offsets_of(read(session, bs, assign=f'{{"{topic}":[1]}}', startingOffsets=f'{{"{topic}":{{"1":48}}}}'))
    assert assign == [(1, 48), (1, 49)]
    assert len(offsets_of(read(session, bs, subscribePattern=re.escape(topic)))) == 100
    # Timestamps and types come through.
    first = read(session, bs, assign=f'{{"{topic}":[0]}}', endingOffsets=f'{{"{topic}":{{"0":1}}}}').collect()[0]
    assert (round(first["timestamp"].timestamp() * 1000), first["timestampType"], first["value"]) == \
        (BASE_TS, 0, bytearray(b"0-0"))


def test_fail_on_data_loss_batch(session, broker):
    topic = _name("spark-loss")
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"%d" % i} for i in range(10)])
    beyond = f'{{"{topic}":{{"0":1000}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(session, broker.bootstrap, subscribe=topic, endingOffsets=beyond).count()
    assert read(session, broker.bootstrap, subscribe=topic, endingOffsets=beyond, failOnDataLoss="false").count() == 10


def _run_available_now(df, sink_format: str, checkpoint: str, timeout_s: float = 120, **sink_options):
    writer = df.writeStream.format(sink_format).option("checkpointLocation", checkpoint)
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(timeout_s), "the availableNow query did not finish"
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return query.recentProgress


def test_stream_restarts_from_its_checkpoint_exactly_once(session, broker, tmp_path):
    topic = _name("spark-stream")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [{"value": b"a-%d" % i, "partition": i % 2} for i in range(300)])
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def stream():
        return (session.readStream.format("raykafka").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "100").load()
                .selectExpr("partition", "offset", "CAST(value AS STRING) AS value"))

    batches = _run_available_now(stream(), "parquet", checkpoint, path=out)
    assert [b["numInputRows"] for b in batches if b["numInputRows"]] == [100, 100, 100]  # 3 triggers at the limit
    assert json.loads(batches[-1]["sources"][0]["endOffset"]) == {topic: {"0": 150, "1": 150}}

    # A crash after the last batch was written but before Spark committed it:
    # the restarted query replays that batch (same offsets, idempotent sink).
    for name in ("2", ".2.crc"):  # the checksum too, or Spark sees the commit as taken by another query
        (tmp_path / "checkpoint" / "commits" / name).unlink(missing_ok=True)
    produce(broker.bootstrap, topic, [{"value": b"b-%d" % i, "partition": i % 2} for i in range(200)])
    batches = _run_available_now(stream(), "parquet", checkpoint, path=out)
    assert batches[0]["batchId"] == 2, "the uncommitted batch runs again"
    assert json.loads(batches[0]["sources"][0]["startOffset"]) == {topic: {"0": 100, "1": 100}}
    assert sum(b["numInputRows"] for b in batches[1:]) == 200

    rows = session.read.parquet(out).collect()
    keys = [(r["partition"], r["offset"]) for r in rows]
    assert len(keys) == len(set(keys)) == 500, "every record exactly once"
    assert sorted(r["value"] for r in rows) == sorted([f"a-{i}" for i in range(300)] + [f"b-{i}" for i in range(200)])


def test_stream_fail_on_data_loss_when_the_topic_is_recreated(session, broker, tmp_path):
    topic = _name("spark-gone")
    bs = broker.bootstrap
    create_topic(bs, topic, 1)
    produce(bs, topic, [{"value": b"old-%d" % i} for i in range(20)])

    def stream(fail: str):
        return (session.readStream.format("raykafka").option("kafka.bootstrap.servers", bs)
                .option("subscribe", topic).option("startingOffsets", "earliest").option("failOnDataLoss", fail)
                .load().selectExpr("offset", "CAST(value AS STRING) AS value"))

    strict, lenient = str(tmp_path / "strict"), str(tmp_path / "lenient")
    _run_available_now(stream("true"), "parquet", strict + "-cp", path=strict)
    _run_available_now(stream("false"), "parquet", lenient + "-cp", path=lenient)
    delete_topic(bs, topic)
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topic(bs, topic, 1)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    produce(bs, topic, [{"value": b"new-%d" % i} for i in range(5)])
    with pytest.raises(Exception, match="failOnDataLoss"):
        _run_available_now(stream("true"), "parquet", strict + "-cp", path=strict)
    _run_available_now(stream("false"), "parquet", lenient + "-cp", path=lenient)  # offsets 20 -> 5: skipped
    produce(bs, topic, [{"value": b"new-%d" % i} for i in range(5, 8)])
    _run_available_now(stream("false"), "parquet", lenient + "-cp", path=lenient)
    values = sorted(r["value"] for r in session.read.parquet(lenient).collect())
    assert values == sorted([f"old-{i}" for i in range(20)] + ["new-5", "new-6", "new-7"])


def test_write_then_read_round_trips(session, broker, tmp_path):
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

    bs = broker.bootstrap
    topic, other, copy = _name("spark-write"), _name("spark-write2"), _name("spark-copy")
    for t in (topic, other, copy):
        create_topic(bs, t, 2)
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())])))])
    data = [(None if i % 4 == 0 else f"k{i}", b"v%d" % i, i % 2,
             [("n", b"%d" % i)] if i % 3 == 0 else None) for i in range(200)]
    df = session.createDataFrame(data, schema)
    df.write.format("raykafka").option("kafka.bootstrap.servers", bs).option("topic", topic).mode("append").save()

    got = read(session, bs, subscribe=topic, includeHeaders="true").collect()

    def as_written(r):
        headers = None if r["headers"] is None else [(h["key"], bytes(h["value"])) for h in r["headers"]]
        return (None if r["key"] is None else bytes(r["key"]).decode(), bytes(r["value"]), r["partition"], headers)

    assert sorted(map(as_written, got), key=repr) == sorted(data, key=repr)

    # The topic column routes rows; the topic option, when given, wins.
    routed = session.createDataFrame([(topic if i % 2 else other, f"r{i}") for i in range(20)], ["topic", "value"])
    routed.write.format("raykafka").option("kafka.bootstrap.servers", bs).mode("append").save()
    assert read(session, bs, subscribe=other).count() == 10
    assert read(session, bs, subscribe=topic).count() == 210

    # Streaming write: copy one topic into another.
    copied = (session.readStream.format("raykafka").option("kafka.bootstrap.servers", bs)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .selectExpr("key", "value", "partition"))
    _run_available_now(copied, "raykafka", str(tmp_path / "copy-cp"), **{"kafka.bootstrap.servers": bs,
                                                                         "topic": copy})
    source = sorted(((r["partition"], r["key"], r["value"]) for r in read(session, bs, subscribe=topic).collect()),
                    key=repr)
    target = sorted(((r["partition"], r["key"], r["value"]) for r in read(session, bs, subscribe=copy).collect()),
                    key=repr)
    assert target == source and len(target) == 210

    with pytest.raises(Exception, match="'mode'"):
        df.write.format("raykafka").option("kafka.bootstrap.servers", bs).option("topic", topic) \
            .mode("overwrite").save()
    with pytest.raises(Exception, match="'topic'"):
        df.write.format("raykafka").option("kafka.bootstrap.servers", bs).mode("append").save()
    with pytest.raises(Exception, match="'kafka.no.such.setting'"):
        df.write.format("raykafka").option("kafka.bootstrap.servers", bs).option("topic", topic) \
            .option("kafka.no.such.setting", "1").mode("append").save()


@pytest.mark.parametrize("options, streaming, named", [
    ({"subscribe": "a", "subscribePattern": "b"}, False, "subscribePattern"),
    ({"subscribe": "a", "endingOffsets": "latest"}, True, "endingOffsets"),
    ({"subscribe": "a", "noSuchOption": "1"}, False, "nosuchoption"),
    ({"subscribe": "a", "startingOffsets": "latest"}, False, "startingOffsets"),
])
def test_option_errors_name_the_option(session, broker, options, streaming, named):
    if streaming:
        reader = session.readStream.format("raykafka").option("kafka.bootstrap.servers", broker.bootstrap)
    else:
        reader = session.read.format("raykafka").option("kafka.bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as caught:
        df = reader.load()
        if streaming:
            query = df.writeStream.format("noop").start()
            try:
                query.awaitTermination(60)
            finally:
                query.stop()
        else:
            df.count()
    assert f"'{named}'" in str(caught.value)
