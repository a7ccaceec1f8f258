"""Worker side of the source: one Spark partition = one offset range of one
topic-partition, read into Arrow RecordBatches."""
from __future__ import annotations

import logging
import time
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark.decode import AbortedTransactions, ArrowBuilder, next_fetch_offset
from spark.offsets import report_data_loss
from spark.options import EARLIEST, LATEST, ReadOptions
from core.error_codes import ErrorCode
from spark.wire import RETRIABLE, KafkaError, KafkaWireClient, error_name

log = logging.getLogger("raykafka.spark")


class KafkaInputPartition(InputPartition):
    """Offsets [start, end) of topic-partition; ``slices`` are the leader's file
    slices when the Ray-native path was planned (None: Kafka protocol)."""

    def __init__(self, index: int, topic: str, partition: int, start: int, end: int, slices=None):
        super().__init__(index)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.slices = slices

    def __repr__(self) -> str:
        path = "ray" if self.slices is not None else "kafka"
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}) via {path})"


def read_partition(part: KafkaInputPartition, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    if part.end <= part.start:
        return
    builder = ArrowBuilder(part.topic, part.partition, options.include_headers)
    offset = part.start
    if part.slices:
        from spark.ray_path import read_slices

        offset = yield from read_slices(builder, part.slices, part.start, part.end)
    if offset < part.end:
        yield from _fetch_range(builder, part.topic, part.partition, offset, part.end, options)


def _fetch_range(builder: ArrowBuilder, topic: str, partition: int, offset: int, end: int,
                 options: ReadOptions) -> Iterator[pa.RecordBatch]:
    client = KafkaWireClient(options.bootstrap_servers, client_id=options.client_id,
                             timeout_s=options.request_timeout_ms / 1000)
    max_bytes = options.fetch_max_bytes
    wait_ms = options.fetch_max_wait_ms
    isolation = options.isolation_level
    if isolation == 1 and builder.aborted is None:
        builder.aborted = AbortedTransactions()
    deadline = None
    pending: tuple[int, int] | None = None  # (leader, offset) of a fetch in flight
    out_of_range = 0
    try:
        while offset < end:
            result = None
            if pending is not None and pending[1] == offset:
                try:
                    result = client.receive_fetch(pending[0])
                except (OSError, KafkaError):
                    result = None
                    client.discard_pending()
            elif pending is not None:
                client.discard_pending()
            pending = None
            if result is None or result.error in RETRIABLE:
                try:
                    result = client.fetch(topic, partition, offset, max_bytes, wait_ms, isolation)
                except KafkaError as exc:
                    if exc.code != ErrorCode.unknown_topic_or_partition:
                        raise
                    report_data_loss(options, f"Cannot fetch offsets [{offset}, {end}) of {topic}-{partition}: "
                                              "the partition no longer exists (topic deleted?)")
                    return
            if result.error == ErrorCode.offset_out_of_range:
                out_of_range += 1
                if out_of_range > 20:
                    raise KafkaError(f"Fetch of {topic}-{partition} at offset {offset} keeps failing with "
                                     "OFFSET_OUT_OF_RANGE although the offset is in range", result.error)
                offset = _out_of_range(client, topic, partition, offset, end, options)
                continue
            if result.error:
                raise KafkaError(f"Fetch of {topic}-{partition} at offset {offset} failed: "
                                 f"{error_name(result.error)}", result.error)
            records = result.records
            if records:
                following = next_fetch_offset(records, offset)
                if offset < following < end:
                    # Pipeline: the broker prepares the next response while this one is decoded.
                    try:
                        pending = (client.send_fetch(topic, partition, following, max_bytes, wait_ms, isolation),
                                   following)
                    except (OSError, KafkaError):
                        pending = None
                        client.discard_pending()
                before = offset
                if builder.aborted is not None:
                    builder.aborted.add(result.aborted)
                offset, done = builder.add(records, offset, end)
                batch = builder.take()
                if batch is not None:
                    yield batch
                if done:
                    return
                if offset > before:
                    deadline = None
                    continue
                if max_bytes < (1 << 30):
                    max_bytes *= 2  # only part of one batch came back: it is larger than the fetch size
                    continue
            if result.high_watermark <= offset:
                # The log ends before the range does: truncated, or the range was planned past its end.
                report_data_loss(options, f"Cannot fetch offsets [{offset}, {end}) of {topic}-{partition}: the log "
                                          f"ends at {result.high_watermark}")
                return
            if deadline is None:
                deadline = time.monotonic() + options.poll_timeout_ms / 1000
            elif time.monotonic() > deadline:
                raise TimeoutError(f"no records from {topic}-{partition} at offset {offset} for "
                                   f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")
            time.sleep(0.05)
    finally:
        client.close()


def _out_of_range(client: KafkaWireClient, topic: str, partition: int, offset: int, end: int,
                  options: ReadOptions) -> int:
    tp = (topic, partition)
    earliest = client.list_offsets({tp: EARLIEST})[tp]
    latest = client.list_offsets({tp: LATEST})[tp]
    if offset < earliest:
        report_data_loss(options, f"Cannot fetch offset {offset} of {topic}-{partition}: the earliest available "
                                  f"offset is {earliest}")
        return min(earliest, end)
    if offset > latest:
        report_data_loss(options, f"Cannot fetch offset {offset} of {topic}-{partition}: the log ends at {latest}")
        return end
    # In range again (a leader change raced the fetch): retry at the same offset.
    time.sleep(0.1)
    return offset
