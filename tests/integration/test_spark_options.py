"""The Spark source's pure parts, no Spark session or broker needed: option
parsing and its errors, offset-range planning, read limits, the Arrow decoder,
and the Ray-native path's checked reading of segment-file slices."""
from __future__ import annotations

import os

import pytest

import pyspark  # noqa: F401  (installed by ./dev; a missing pyspark must fail, not skip)
import pyarrow as pa

from spark.decode import ArrowBuilder, arrow_schema  # noqa: E402
from spark.offsets import OffsetRange, plan_ranges, rate_limit  # noqa: E402
from spark.options import OptionError, parse_read_options, parse_write_options  # noqa: E402
from spark.ray_path import read_slices  # noqa: E402
from storage.record_batch import COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_SNAPPY, COMPRESSION_ZSTD  # noqa: E402
from storage.records import SimpleRecord, build_batch  # noqa: E402

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def lower(options: dict) -> dict:
    """Spark hands Python data sources lower-cased option keys."""
    return {k.lower(): v for k, v in options.items()}


@pytest.mark.parametrize("options, streaming, named", [
    ({**BASE, "assign": '{"t":[0]}'}, False, "assign"),
    ({**BASE, "subscribePattern": "t.*"}, False, "subscribePattern"),
    ({"kafka.bootstrap.servers": "h:1"}, False, "subscribe"),
    ({"subscribe": "t"}, False, "kafka.bootstrap.servers"),
    ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets"),
    ({**BASE, "endingTimestamp": "1000"}, True, "endingTimestamp"),
    ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "maxOffsetsPerTrigger"),
    ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets"),
    ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets"),
    ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, False, "startingOffsets"),
    ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, False, "endingOffsets"),
    ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, True, "startingOffsets"),
    ({**BASE, "startingOffsets": "{not json"}, True, "startingOffsets"),
    ({**BASE, "bogusOption": "1"}, False, "bogusoption"),
    ({**BASE, "kafka.auto.offset.reset": "earliest"}, True, "kafka.auto.offset.reset"),
    ({**BASE, "kafka.value.deserializer": "x"}, True, "kafka.value.deserializer"),
    ({**BASE, "kafka.no.such.setting": "x"}, True, "kafka.no.such.setting"),
    ({**BASE, "minPartitions": "0"}, False, "minPartitions"),
    ({**BASE, "maxRecordsPerPartition": "lots"}, False, "maxRecordsPerPartition"),
    ({**BASE, "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
    ({**BASE, "includeHeaders": "yes"}, False, "includeHeaders"),
    ({**BASE, "readPath": "carrier-pigeon"}, False, "readPath"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "guess"}, True, "startingOffsetsByTimestampStrategy"),
    ({**BASE, "startingTimestamp": "yesterday"}, True, "startingTimestamp"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"t":[0]}', "startingOffsets": '{"u":{"0":1}}'}, True,
     "startingOffsets"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "[0,1]"}, False, "assign"),
    ({**BASE, "kafka.security.protocol": "SASL_SSL"}, False, "kafka.security.protocol"),
    ({**BASE, "path": "/data"}, False, "path"),
])
def test_bad_read_options_name_the_option(options, streaming, named):
    with pytest.raises(OptionError) as caught:
        parse_read_options(lower(options), streaming=streaming)
    assert f"'{named}'" in str(caught.value), str(caught.value)


def test_read_option_defaults_and_spark_precedence():
    batch = parse_read_options(lower(BASE), streaming=False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers and batch.read_path == "auto"
    stream = parse_read_options(lower(BASE), streaming=True)
    assert stream.starting.kind == "latest"
    # Spark: startingTimestamp > startingOffsetsByTimestamp > startingOffsets
    both = parse_read_options(lower({**BASE, "startingOffsets": "earliest", "startingTimestamp": "5",
                                     "startingOffsetsByTimestamp": '{"t":{"0":7}}'}), streaming=True)
    assert (both.starting.kind, both.starting.timestamp) == ("timestamp", 5)
    by_ts = parse_read_options(lower({**BASE, "startingOffsets": "earliest",
                                      "startingOffsetsByTimestamp": '{"t":{"0":7}}'}), streaming=True)
    assert by_ts.starting.kind == "timestamps" and by_ts.starting.offsets == {("t", 0): 7}
    pattern = parse_read_options(lower({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ev-[0-9]+"}), False)
    assert pattern.subscription.matches("ev-12") and not pattern.subscription.matches("ev-12x")
    mixed = parse_read_options(lower({**BASE, "maxOffsetsPerTrigger": "100", "kafka.session.timeout.ms": "1",
                                      "includeHeaders": "TRUE"}), streaming=True)
    assert mixed.max_offsets_per_trigger == 100 and mixed.include_headers


def test_write_options():
    parsed = parse_write_options(lower({"kafka.bootstrap.servers": "h:1", "topic": "out", "kafka.linger.ms": "7"}))
    assert parsed.topic == "out" and parsed.producer_config == {"bootstrap.servers": "h:1", "linger.ms": "7"}
    for bad, named in [({"topic": "x"}, "kafka.bootstrap.servers"),
                       ({"kafka.bootstrap.servers": "h:1", "kafka.key.serializer": "x"}, "kafka.key.serializer"),
                       ({"kafka.bootstrap.servers": "h:1", "subscribe": "x"}, "subscribe")]:
        with pytest.raises(OptionError, match=f"'{named}'"):
            parse_write_options(lower(bad))


def test_plan_ranges_like_spark():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert plan_ranges(ranges, None, None) == ranges[:2]  # empty ranges dropped
    split = plan_ranges(ranges, None, 300)
    assert [(r.partition, r.start, r.end) for r in split] == [(0, 0, 250), (0, 250, 500), (0, 500, 750),
                                                             (0, 750, 1000), (1, 0, 10)]
    spread = plan_ranges(ranges, 10, None)
    assert sum(r.size for r in spread) == 1010 and len(spread) >= 10
    assert all(r.start < r.end for r in spread)
    covered = sorted((r.partition, r.start, r.end) for r in spread)
    for (p1, _s1, e1), (p2, s2, _e2) in zip(covered, covered[1:]):
        assert p1 != p2 or e1 == s2  # contiguous, no overlap


def test_rate_limit_is_proportional():
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200}
    assert rate_limit(start, latest, 1000) == latest
    limited = rate_limit(start, latest, 100)
    assert limited == {("t", 0): 75, ("t", 1): 125}


def _batches(n: int, per: int, codec: int, headers: bool = False, start: int = 0) -> bytes:
    out = []
    for base in range(start, start + n, per):
        records = [SimpleRecord(None if i % 7 == 0 else b"k%d" % i, None if i % 11 == 0 else b"value-%d" % i,
                                (("h", b"x"), ("n", None)) if headers and i % 2 else (), 1_700_000_000_000 + i)
                   for i in range(base, min(base + per, start + n))]
        out.append(build_batch(records, codec, base_offset=base))
    return b"".join(out)


@pytest.mark.parametrize("codec", [0, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_decoder_fills_spark_kafka_columns(codec):
    blob = _batches(100, 16, codec, headers=True)
    builder = ArrowBuilder("t", 3, include_headers=True)
    next_offset, done = builder.add(blob, 10, 95)
    assert (next_offset, done) == (96, True)  # stops after the batch holding offset 94
    batch = builder.take()
    assert batch.schema == arrow_schema(True)
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == list(range(10, 95))
    r = rows[5]  # offset 15
    assert (r["key"], r["value"], r["topic"], r["partition"], r["timestampType"]) == (b"k15", b"value-15", "t", 3, 0)
    assert r["timestamp"].timestamp() == pytest.approx(1_700_000_000.015)
    assert r["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert rows[2]["headers"] is None  # offset 12: no headers -> null, as Spark's Kafka source
    assert rows[4]["key"] is None and rows[18]["key"] is None and rows[1]["value"] is None  # 14, 28 and 11


def test_decoder_ignores_a_trailing_partial_batch():
    blob = _batches(40, 10, 0)
    builder = ArrowBuilder("t", 0, include_headers=False)
    next_offset, done = builder.add(blob[:-5], 0, 1000)
    assert (next_offset, done) == (30, False)
    assert builder.take().num_rows == 30


def test_ray_slices_read_checked_and_stop_on_a_replaced_file(tmp_path):
    blob = _batches(60, 10, COMPRESSION_LZ4)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(blob)
    builder = ArrowBuilder("t", 0, include_headers=False)
    gen = read_slices(builder, [(str(seg), 0, len(blob), 0)], 5, 55, chunk_bytes=300)
    rows = []
    try:
        while True:
            rows += next(gen).column("offset").to_pylist()
    except StopIteration as stop:
        reached = stop.value
    assert rows == list(range(5, 55)) and reached >= 55
    # The file was replaced under the plan (compaction, retention): the reader
    # stops where the checks fail and reports how far it got.
    inode = os.stat(seg).st_ino
    gen = read_slices(ArrowBuilder("t", 0, False), [(str(seg), 0, len(blob), 0, inode + 1)], 5, 55)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == 5
    gen = read_slices(ArrowBuilder("t", 0, False), [(str(seg), 0, len(blob), 10, inode)], 5, 55)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == 5
    seg.write_bytes(os.urandom(len(blob)))
    gen = read_slices(ArrowBuilder("t", 0, False), [(str(seg), 0, len(blob), 0)], 5, 55)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == 5
    gen = read_slices(ArrowBuilder("t", 0, False), [(str(tmp_path / "gone.log"), 0, 100)], 5, 55)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == 5


def test_decoder_multi_byte_varints():
    # long values and keys, timestamps far from (and before) the batch's base
    records = [SimpleRecord(b"k" * 200, bytes([i]) * (70_000 if i % 2 else 300),
                            (("h" * 100, b"v" * 500),), 1_700_000_000_000 + (-1) ** i * i * 10**7)
               for i in range(6)]
    blob = build_batch(records, COMPRESSION_ZSTD, base_offset=1000)
    builder = ArrowBuilder("t", 0, include_headers=True)
    assert builder.add(blob, 1000, 2000) == (1006, False)
    rows = builder.take().to_pylist()
    assert [r["offset"] for r in rows] == list(range(1000, 1006))
    for i, r in enumerate(rows):
        assert r["value"] == records[i].value and r["key"] == b"k" * 200
        assert r["headers"] == [{"key": "h" * 100, "value": b"v" * 500}]
        assert round(r["timestamp"].timestamp() * 1000) == records[i].timestamp
