"""The batches of an ``__consumer_offsets`` partition, as a coordinator
replays them (Kafka's GroupMetadataManager.doLoadGroupsAndOffsets).

Replay needs more than the records: a transactional batch's offset commits
(TxnOffsetCommit, KIP-98) stay pending under the batch's producer id until a
control batch of that producer says COMMIT (they become committed offsets)
or ABORT (they are dropped). So each batch is kept with its producer id and
flags, and a control batch with its control record type; from a control
batch only the first record's key is read, as Kafka does
(``ControlRecordType.parse``), and nothing of a data batch but its records'
keys and values.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Optional

from cluster.groups.records import Record, RecordFormatError

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "LogBatch",
    "control_record_type",
    "read_log_batches",
]

# ControlRecordType: a control record's key is (version int16, type int16).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")


class LogBatch(NamedTuple):
    """One batch of the offsets partition, as replay sees it."""

    base_offset: int
    producer_id: int  # -1: none
    transactional: bool
    # Control batches: the type of their (first) control record; COMMIT
    # materializes the producer's pending offsets, any other type drops them
    # (as Kafka's loader). None for data batches.
    control: Optional[int]
    # Data batches: (key, value) in offset order (value None = tombstone).
    records: tuple[Record, ...] = ()

    @classmethod
    def data(cls, records, *, producer_id: int = -1, transactional: bool = False,
             base_offset: int = -1) -> "LogBatch":
        return cls(base_offset, producer_id, transactional, None, tuple(records))

    @classmethod
    def marker(cls, producer_id: int, committed: bool, *, base_offset: int = -1) -> "LogBatch":
        return cls(base_offset, producer_id, True, CONTROL_COMMIT if committed else CONTROL_ABORT, ())


def control_record_type(key: Optional[bytes]) -> int:
    """Kafka's ControlRecordType.parse: the type of a control record's key."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise RecordFormatError(f"control record key of {0 if key is None else len(key)} bytes, expected 4")
    version, kind = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise RecordFormatError(f"control record key version {version}")
    return kind


def read_log_batches(data, start_offset: int, end_offset: int) -> tuple[list[LogBatch], int]:
    """The complete batches of ``data`` (log bytes: trusted, as written by
    the leader) with records in [start_offset, end_offset), and the offset to
    read next (``start_offset`` when ``data`` holds no complete batch).
    A batch that straddles ``start_offset`` keeps only its records from
    there; a control batch below it is skipped."""
    # Here, not at the top: the coordinator imports this module for LogBatch,
    # and the edge imports the coordinator, without the codecs' libraries.
    from storage.record_batch import iter_headers
    from storage.records import iter_batch_records

    batches: list[LogBatch] = []
    next_offset = start_offset
    for pos, header in iter_headers(data):
        following = header.base_offset + header.last_offset_delta + 1
        if following > start_offset and header.base_offset < end_offset:
            if header.is_control:
                if header.base_offset >= start_offset:
                    control = None
                    for record in iter_batch_records(data, pos):
                        control = control_record_type(None if record.key is None else bytes(record.key))
                        break  # Kafka reads the first control record only
                    if control is not None:
                        batches.append(LogBatch(header.base_offset, header.producer_id, header.is_transactional,
                                                control))
            else:
                records = tuple(
                    (None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
                    for r in iter_batch_records(data, pos)
                    if start_offset <= r.offset < end_offset)
                if records:
                    batches.append(LogBatch(header.base_offset, header.producer_id, header.is_transactional,
                                            None, records))
        next_offset = max(next_offset, following)
    return batches, next_offset
