"""Exceptions raised by the storage engine.

Every exception carries the Kafka protocol ``error_code`` the network layer
should put in its response, so request handlers never need to map storage
failures by hand.
"""

from __future__ import annotations

from core.error_codes import ErrorCode

# Aliases of the Kafka error codes the storage layer produces, for the modules
# outside storage that import them by these names.
UNKNOWN_SERVER_ERROR = ErrorCode.unknown_server_error
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range
CORRUPT_MESSAGE = ErrorCode.corrupt_message
MESSAGE_TOO_LARGE = ErrorCode.message_too_large
RECORD_LIST_TOO_LARGE = ErrorCode.record_list_too_large
INVALID_TIMESTAMP = ErrorCode.invalid_timestamp
KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error
UNSUPPORTED_COMPRESSION_TYPE = ErrorCode.unsupported_compression_type
INVALID_RECORD = ErrorCode.invalid_record


class StorageError(Exception):
    """Base class; ``error_code`` is the Kafka error code for responses."""

    error_code = ErrorCode.unknown_server_error

    def __init__(self, message: str, error_code: ErrorCode | None = None):
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class InvalidRecordsError(StorageError):
    """A produce/replication payload failed validation; nothing was appended.

    ``record_errors`` lists ``(batch_index, message)`` for per-record
    failures, what Kafka returns in ProduceResponse v8+ ``record_errors``
    (``batch_index`` is the record's index inside its batch).
    """

    error_code = ErrorCode.corrupt_message

    def __init__(self, error_code: ErrorCode, message: str, record_errors: tuple = ()):
        super().__init__(message, error_code)
        self.record_errors = tuple(record_errors)


class OffsetOutOfRangeError(StorageError):
    error_code = ErrorCode.offset_out_of_range


class UnexpectedAppendOffsetError(StorageError):
    """A follower append does not continue the log at its end offset.

    Replication must truncate or refetch; it is not a client-visible error.
    """

    def __init__(self, message: str, first_offset: int, log_end_offset: int):
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class CorruptIndexError(StorageError):
    """An index file failed its sanity check; the owner rebuilds it from the log."""


class CorruptCheckpointError(StorageError):
    """A checkpoint or properties file cannot be parsed."""

    error_code = ErrorCode.kafka_storage_error


class KafkaStorageError(StorageError):
    """An I/O failure left a log unusable (disk full, EIO, ...)."""

    error_code = ErrorCode.kafka_storage_error


class LogClosedError(StorageError):
    error_code = ErrorCode.kafka_storage_error
