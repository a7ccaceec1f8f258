"""The sink: DataFrame rows -> Kafka records through a Kafka producer
(confluent-kafka / librdkafka).

Columns as Spark's Kafka sink: ``value`` (string or binary, required), ``key``
(string or binary), ``topic`` (string; the ``topic`` option wins when both are
given), ``partition`` (int; null lets the partitioner choose), ``headers``
(array<struct<key:string,value:binary>>). Other columns are ignored (as
Spark's sink does); a missing value column or a wrong type is an error.
``kafka.*`` options go to the producer with the prefix removed; keyed records
are partitioned by murmur2 like the Java producer's default unless
``kafka.partitioner`` says otherwise. Delivery is at least once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from spark.options import OptionError, WriteOptions

_ALLOWED = {"topic", "key", "value", "partition", "headers"}


class SchemaError(ValueError):
    pass


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    # Other columns are ignored, as Spark's Kafka sink does.
    names = {f.name.lower(): f for f in schema.fields if f.name.lower() in _ALLOWED}
    if "value" not in names:
        raise SchemaError("raykafka sink: required attribute 'value' not found")
    for col in ("key", "value"):
        if col in names and not isinstance(names[col].dataType, (StringType, BinaryType)):
            raise SchemaError(f"raykafka sink: {col} attribute type must be a string or binary, "
                              f"got {names[col].dataType.simpleString()}")
    if "topic" in names and not isinstance(names["topic"].dataType, StringType):
        raise SchemaError(f"raykafka sink: topic attribute type must be a string, "
                          f"got {names['topic'].dataType.simpleString()}")
    if "partition" in names and not isinstance(names["partition"].dataType, IntegerType):
        raise SchemaError(f"raykafka sink: partition attribute type must be an int, "
                          f"got {names['partition'].dataType.simpleString()}")
    if "headers" in names:
        expected = "array<struct<key:string,value:binary>>"
        if names["headers"].dataType.simpleString() != expected:
            raise SchemaError(f"raykafka sink: headers attribute type must be {expected}, "
                              f"got {names['headers'].dataType.simpleString()}")
    if options.topic is None and "topic" not in names:
        raise OptionError("topic", "is required when the DataFrame has no 'topic' column")


# Java producer settings librdkafka spells differently (or has no use for).
_JAVA_ONLY = {
    "buffer.memory": lambda v: {"queue.buffering.max.kbytes": max(1, int(v) // 1024)},
    "max.request.size": lambda v: {"message.max.bytes": int(v)},
    "max.block.ms": lambda v: {},
    "key.serializer": lambda v: {},
    "value.serializer": lambda v: {},
}


def producer_config(options: WriteOptions) -> dict:
    config = {"partitioner": "murmur2_random", "linger.ms": 5, "client.id": "raykafka-spark"}
    for key, value in options.producer_config.items():
        if key in _JAVA_ONLY:
            config.update(_JAVA_ONLY[key](value))
        else:
            config[key] = value
    return config


def validate_producer_config(options: WriteOptions) -> None:
    """librdkafka checks its settings when a producer is created: do it on the
    driver so a bad kafka.* option fails the query before any task runs."""
    from confluent_kafka import KafkaException, Producer

    config = producer_config(options)
    config.pop("bootstrap.servers", None)  # check the settings only: no connections, no log noise
    config["log_level"] = 0
    try:
        Producer(config)
    except KafkaException as exc:
        message = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        bad = next((k for k in options.producer_config if f'"{k}"' in message or k in message), None)
        raise OptionError(f"kafka.{bad}" if bad else "kafka.*", f"rejected by the Kafka producer: {message}") from None


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    records: int


def write_batches(batches: Iterator, options: WriteOptions) -> KafkaCommitMessage:
    from confluent_kafka import KafkaException, Producer

    producer = Producer(producer_config(options))
    failures: list[str] = []

    def delivered(err, _msg):
        if err is not None and len(failures) < 10:
            failures.append(str(err))

    produce = producer.produce
    poll = producer.poll
    count = 0
    fixed_topic = options.topic
    for batch in batches:
        columns = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)
                   if name.lower() in _ALLOWED}
        n = batch.num_rows
        values = columns["value"]
        keys = columns.get("key") or [None] * n
        topics = [fixed_topic] * n if fixed_topic else columns["topic"]
        parts = columns.get("partition") or [None] * n
        headers = columns.get("headers") or [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError("raykafka sink: null topic in the 'topic' column and no 'topic' option")
            kwargs = {}
            if parts[i] is not None:
                kwargs["partition"] = parts[i]
            if headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    produce(topic, values[i], keys[i], on_delivery=delivered, **kwargs)
                    break
                except BufferError:
                    poll(0.05)
            count += 1
        poll(0)
        if failures:
            break
    remaining = producer.flush(300)
    if failures:
        raise KafkaException(f"raykafka sink: {len(failures)}+ records were not delivered: {failures[0]}")
    if remaining:
        raise TimeoutError(f"raykafka sink: {remaining} records still undelivered after 300 s")
    return KafkaCommitMessage(count)
