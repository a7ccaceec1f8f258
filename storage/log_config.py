"""A log's settings (Kafka's per-topic LogConfig) and the timestamp and
compression names they use."""

from __future__ import annotations

import random
from dataclasses import dataclass

from storage.record_batch import (COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY,
                                  COMPRESSION_ZSTD)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

LONG_MAX = 9223372036854775807

# topic compression.type -> codec id (None: keep the producer's codec)
COMPRESSION_TYPES = {
    "producer": None,
    "uncompressed": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}



@dataclass
class LogConfig:
    """Per-topic log settings; names and defaults are Kafka's topic configs."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms
    segment_index_bytes: int = 10485760  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_message_bytes: int = 1048588  # max.message.bytes
    flush_messages: int | None = None  # flush.messages; None = never (Long.MAX)
    flush_ms: int | None = None  # flush.ms; None = never (Long.MAX)
    message_timestamp_type: str = CREATE_TIME  # message.timestamp.type
    cleanup_policy: str = "delete"  # cleanup.policy: delete, compact, or both
    segment_jitter_ms: int = 0  # segment.jitter.ms
    retention_ms: int = 604800000  # retention.ms; -1 = unlimited
    retention_bytes: int = -1  # retention.bytes; -1 = unlimited
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    delete_retention_ms: int = 86400000  # delete.retention.ms (tombstones)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    compression_type: str = "producer"  # compression.type

    @property
    def compacted(self) -> bool:
        """Compacted logs legitimately have offset gaps between batches."""
        return "compact" in self.cleanup_policy

    @property
    def has_delete_policy(self) -> bool:
        """Time and size retention apply (Kafka's ``LogConfig.delete``)."""
        return "delete" in self.cleanup_policy

    @property
    def compression_codec(self) -> int | None:
        """Codec the broker converts batches to, or None for "producer"."""
        return COMPRESSION_TYPES[self.compression_type]

    @property
    def max_segment_ms(self) -> int:
        """Kafka's ``LogConfig.maxSegmentMs``: a compacted topic also rolls by
        max.compaction.lag.ms so its records become cleanable in time."""
        if self.compacted and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def random_segment_jitter(self, rng: random.Random | None = None) -> int:
        """Kafka's ``LogConfig.randomSegmentJitter``: uniform in
        [0, min(segment.jitter.ms, segment.ms))."""
        if self.segment_jitter_ms <= 0:
            return 0
        return (rng or random).randrange(min(self.segment_jitter_ms, self.max_segment_ms))

    def __post_init__(self) -> None:
        # Positions in the offset index are int32, hence Kafka's Int range.
        if not 14 <= self.segment_bytes <= 0x7FFFFFFF:
            raise ValueError(f"segment_bytes must be in [14, 2147483647], got {self.segment_bytes}")
        if self.segment_index_bytes < 12:
            raise ValueError(f"segment_index_bytes must be >= 12, got {self.segment_index_bytes}")
        if self.index_interval_bytes < 0 or self.max_message_bytes < 0 or self.segment_ms < 1:
            raise ValueError("index_interval_bytes and max_message_bytes must be >= 0, segment_ms >= 1")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"unknown message_timestamp_type {self.message_timestamp_type!r}")
        policies = {p.strip() for p in self.cleanup_policy.split(",")}
        if not policies or not policies <= {"delete", "compact"}:
            raise ValueError(f"unknown cleanup_policy {self.cleanup_policy!r}")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"unknown compression_type {self.compression_type!r}")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention_ms and retention_bytes must be >= -1")
        if min(self.segment_jitter_ms, self.file_delete_delay_ms, self.delete_retention_ms, self.min_compaction_lag_ms) < 0:
            raise ValueError("segment_jitter_ms, file_delete_delay_ms, delete_retention_ms, min_compaction_lag_ms must be >= 0")
        if self.max_compaction_lag_ms < 1:
            raise ValueError("max_compaction_lag_ms must be >= 1")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError("min_cleanable_dirty_ratio must be in [0, 1]")

