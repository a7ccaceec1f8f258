"""Exceptions raised by the storage engine, and why a record set was refused.

storage/ imports nothing else of this project, so it does not speak Kafka's
protocol error codes: a refused append carries a :class:`RecordsFault`
(what is wrong with the records, in storage terms), and the partition layer
(cluster/storage_faults.py) turns faults into ``ErrorCode`` members for
responses. The members are named like the Kafka errors they become, so the
mapping reads one to one.
"""

from __future__ import annotations

import enum


class RecordsFault(enum.Enum):
    """Why a produce, replication or marker append was refused."""

    # The bytes are not well-formed batches: torn, bad CRC, bad lengths, bad magic.
    corrupt_message = "corrupt_message"
    # One batch is larger than max.message.bytes.
    message_too_large = "message_too_large"
    # The whole set is larger than a segment can hold.
    record_list_too_large = "record_list_too_large"
    # A timestamp outside message.timestamp.difference.max.ms.
    invalid_timestamp = "invalid_timestamp"
    # Codec number the broker does not know.
    unsupported_compression_type = "unsupported_compression_type"
    # Well-formed, but not acceptable: no batch, old magic, keyless record on a compacted topic...
    invalid_record = "invalid_record"
    # Producer state checks (idempotence and transactions).
    out_of_order_sequence_number = "out_of_order_sequence_number"
    invalid_producer_epoch = "invalid_producer_epoch"
    invalid_txn_state = "invalid_txn_state"
    transaction_coordinator_fenced = "transaction_coordinator_fenced"


class StorageError(Exception):
    """Base class of everything the storage engine raises on purpose."""


class InvalidRecordsError(StorageError):
    """A produce/replication payload failed validation; nothing was appended.

    ``fault`` says why. ``record_errors`` lists ``(batch_index, message)``
    for per-record failures, what Kafka returns in ProduceResponse v8+
    ``record_errors`` (``batch_index`` is the record's index inside its batch).
    """

    def __init__(self, fault: RecordsFault, message: str, record_errors: tuple = ()):
        super().__init__(message)
        self.fault = fault
        self.record_errors = tuple(record_errors)


class OffsetOutOfRangeError(StorageError):
    """A read or lookup below the log start or beyond the log end."""


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


class KafkaStorageError(StorageError):
    """An I/O failure left a log unusable (disk full, EIO, ...)."""


class LogClosedError(StorageError):
    """The log was closed (or deleted) under the caller."""
