"""raykafka storage engine: Apache Kafka's on-disk log format in plain Python.

Record batches are handled as opaque bytes; only their 61-byte headers are
parsed on the produce and fetch paths (see ``record_batch``).  ``records``
decodes batch contents for timestamp lookups, tests and compaction.
"""

from storage.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    InvalidRecordsError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from storage.log import AppendInfo, FileSlice, Log, LogConfig
from storage.leader_epoch import LeaderEpochCache

__all__ = [
    "AppendInfo",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "FileSlice",
    "InvalidRecordsError",
    "KafkaStorageError",
    "LeaderEpochCache",
    "Log",
    "LogClosedError",
    "LogConfig",
    "OffsetOutOfRangeError",
    "StorageError",
    "UnexpectedAppendOffsetError",
]
