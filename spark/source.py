"""The ``raykafka`` PySpark data source (Python Data Source API, pyspark >= 4.0;
streaming read limits need 4.2+): batch and streaming reads, batch and
streaming writes, with the columns and options of Spark's Kafka source/sink.

    from spark import register
    register(spark)
    df = (spark.read.format("raykafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())
"""
from __future__ import annotations

import logging
from typing import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark.offsets import (
    OffsetRange,
    OffsetResolver,
    from_json_offsets,
    plan_ranges,
    rate_limit,
    report_data_loss,
    to_json_offsets,
)
from spark.options import OptionError, ReadOptions, include_headers, parse_read_options, parse_write_options
from spark.read import KafkaInputPartition, read_partition

log = logging.getLogger("raykafka.spark")


def spark_schema(with_headers: bool) -> StructType:
    """The columns of Spark's Kafka source (matching spark.decode.arrow_schema)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if with_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


class RayKafkaDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("raykafka")``."""

    @classmethod
    def name(cls) -> str:
        return "raykafka"

    def schema(self) -> StructType:
        return spark_schema(include_headers(self.options))

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema is not None and schema.simpleString().lower() != expected.simpleString().lower():
            raise OptionError("schema", "the raykafka source has a fixed schema and cannot be set with a custom one "
                                        f"(got {schema.simpleString()}, the source gives {expected.simpleString()})")

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        return RayKafkaBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return RayKafkaStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        return RayKafkaBatchWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool):
        return RayKafkaStreamWriter(self._write_options(schema, overwrite))

    def _write_options(self, schema: StructType, overwrite: bool):
        from spark.write import check_write_schema, validate_producer_config

        if overwrite:
            raise OptionError("mode", "save mode overwrite is not allowed for Kafka; use append")
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        validate_producer_config(options)
        return options


def with_defaults(defaults: dict[str, str]) -> type[RayKafkaDataSource]:
    """A ``raykafka`` data source whose options default to ``defaults`` (e.g.
    ``ray.address``). Defined in a function, the class is pickled by value, so
    Spark's Python workers get the defaults with it."""
    fixed = {str(k): str(v) for k, v in defaults.items()}

    class RayKafkaDataSourceWithDefaults(RayKafkaDataSource):
        def __init__(self, options):
            super().__init__(options)
            for key, value in fixed.items():
                if key not in self.options:
                    self.options[key] = value

    return RayKafkaDataSourceWithDefaults


# ---- planning shared by batch and streaming ----------------------------------------------------


def _input_partitions(options: ReadOptions, resolver: OffsetResolver, ranges: list[OffsetRange]) -> list:
    ranges = plan_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    slices = [None] * len(ranges)
    if ranges and options.read_path in ("ray", "auto"):
        from spark.ray_path import authorize_slices, plan_slices

        md = resolver.client.metadata(sorted({r.topic for r in ranges})).topics
        leaders = {(t, p): leader for t, parts in md.items() for p, leader in parts.items()}
        slices = plan_slices(ranges, leaders, options.ray_namespace, options.isolation_level,
                             required=options.read_path == "ray", address=options.ray_address,
                             auth_token_path=options.ray_auth_token_path)
        slices = authorize_slices(resolver.client, ranges, slices, required=options.read_path == "ray")
    return [KafkaInputPartition(i, r.topic, r.partition, r.start, r.end, s)
            for i, (r, s) in enumerate(zip(ranges, slices))]


class RayKafkaBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions):
        self.options = options

    def partitions(self):
        options = self.options
        resolver = OffsetResolver(options)
        try:
            tps = resolver.topic_partitions()
            if options.subscription.kind == "assign":
                missing = tps - resolver.existing(tps)
                if missing:
                    t, p = sorted(missing)[0]
                    raise OptionError("assign", f"assigns {t}-{p}, which does not exist")
            if not tps:
                return []
            start = resolver.resolve(options.starting, tps, starting=True)
            end = resolver.resolve(options.ending, tps, starting=False)
            ranges = []
            for tp in sorted(tps):
                s, e = start[tp], end[tp]
                if s > e:
                    raise OptionError(options.starting.option,
                                      f"starts {tp[0]}-{tp[1]} at offset {s}, after where {options.ending.option} "
                                      f"ends it ({e})")
                ranges.append(OffsetRange(tp[0], tp[1], s, e))
            return _input_partitions(options, resolver, ranges)
        finally:
            resolver.close()

    def read(self, partition: KafkaInputPartition) -> Iterator:
        if isinstance(partition, KafkaInputPartition):  # Spark reads one placeholder when there are none
            yield from read_partition(partition, self.options)


class RayKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions):
        self.options = options
        self._resolver: OffsetResolver | None = None
        self._latest: dict | None = None
        self._target: dict | None = None  # Trigger.AvailableNow: offsets not to go past

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_resolver"] = None
        return state

    @property
    def resolver(self) -> OffsetResolver:
        if self._resolver is None:
            self._resolver = OffsetResolver(self.options)
        return self._resolver

    def _partitions_now(self) -> set:
        tps = self.resolver.topic_partitions()
        if self.options.subscription.kind == "assign":
            tps = self.resolver.existing(tps)
        return tps

    def initialOffset(self) -> dict:
        tps = self._partitions_now()
        if self.options.subscription.kind == "assign" and len(tps) < len(self.options.subscription.assigned):
            t, p = sorted(set(self.options.subscription.assigned) - tps)[0]
            raise OptionError("assign", f"assigns {t}-{p}, which does not exist")
        if not tps:
            return {}
        return to_json_offsets(self.resolver.resolve(self.options.starting, tps, starting=True))

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._partitions_now()
        self._target = self.resolver.latest(tps) if tps else {}

    def latestOffset(self, start: dict, limit) -> dict:
        begin = from_json_offsets(start or {})
        tps = self._partitions_now()
        lost = sorted(set(begin) - tps)
        if lost:
            report_data_loss(self.options, "Partitions " + ", ".join(f"{t}-{p}" for t, p in lost)
                             + " are gone (topic deleted?)")
            for tp in lost:
                begin.pop(tp)
        new = tps - set(begin)
        if new:
            begin.update(self.resolver.earliest(new))
        latest = self.resolver.latest(tps) if tps else {}
        if self._target is not None:
            latest = {tp: min(off, self._target.get(tp, begin.get(tp, off))) for tp, off in latest.items()}
        for tp, off in latest.items():
            if off < begin[tp]:
                report_data_loss(self.options, f"{tp[0]}-{tp[1]}'s offsets went back from {begin[tp]} to {off} "
                                               "(topic recreated or log truncated)")
        self._latest = latest
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            log.debug("read limit %r is not supported; reading all available", limit)
        return to_json_offsets(latest)

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self):
        return to_json_offsets(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict):
        begin = from_json_offsets(start or {})
        until = from_json_offsets(end or {})
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.resolver.earliest(new))
        ranges = []
        for tp in sorted(until):
            s, e = begin[tp], until[tp]
            if e < s:
                report_data_loss(self.options, f"{tp[0]}-{tp[1]}: the end offset {e} is before the start offset {s}")
                continue
            if e > s:
                ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return _input_partitions(self.options, self.resolver, ranges)

    def read(self, partition: KafkaInputPartition) -> Iterator:
        if isinstance(partition, KafkaInputPartition):  # Spark reads one placeholder when there are none
            yield from read_partition(partition, self.options)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; nothing is committed to Kafka.
        pass

    def stop(self) -> None:
        if self._resolver is not None:
            self._resolver.close()
            self._resolver = None


# ---- sink ----------------------------------------------------------------------------------------


class RayKafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        from spark.write import write_batches

        return write_batches(iterator, self.options)

    def commit(self, messages) -> None:
        pass

    def abort(self, messages) -> None:
        pass


class RayKafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        from spark.write import write_batches

        return write_batches(iterator, self.options)

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
