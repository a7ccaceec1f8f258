"""Kafka record batch (magic v2) header handling.

The broker treats record batches as opaque bytes: only the fixed 61-byte
header is parsed here.  The layout (all big-endian) is::

    0  base_offset             int64   \\ rewritten by the leader; outside
    8  batch_length            int32    | the CRC, so assigning offsets and
    12 partition_leader_epoch  int32   / epochs needs no re-checksum
    16 magic                   int8
    17 crc                     uint32  CRC-32C of bytes [21, end of batch)
    21 attributes              int16
    23 last_offset_delta       int32
    27 base_timestamp          int64
    35 max_timestamp           int64
    43 producer_id             int64
    51 producer_epoch          int16
    53 base_sequence           int32
    57 record_count            int32
    61 records ...

``batch_length`` counts the bytes after the length field, so a batch
occupies ``batch_length + 12`` bytes.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from storage.errors import InvalidRecordsError, RecordsFault

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "CRC_OFFSET",
    "ATTRIBUTES_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "BatchHeader",
    "InvalidRecordsError",
    "parse_header",
    "unpack_header",
    "validate_batches",
    "assign_offsets",
    "stamp_client_batches",
    "StampedBatches",
    "batch_layout",
    "set_log_append_time",
    "batch_crc",
    "COMPRESSION_NONE",
    "COMPRESSION_GZIP",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD",
]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

LOG_OVERHEAD = 12  # base_offset + batch_length: bytes not counted in batch_length
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a header with no records

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1
MAX_RELATIVE_OFFSET = 0x7FFFFFFF

# base_offset and partition_leader_epoch sit either side of batch_length, so
# one pack writes both without touching the length.
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
# base_offset, batch_length, partition_leader_epoch: the first 16 bytes, so
# one pack stamps offset and epoch (the length is written back unchanged).
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_ATTRS = struct.Struct(">h")

_tuple_new = tuple.__new__


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``; raises RecordsFault.corrupt_message if short."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidRecordsError(
            RecordsFault.corrupt_message,
            f"record batch header truncated: {len(buf) - pos} bytes at position {pos}",
        )
    # tuple.__new__ skips NamedTuple's Python-level __new__: this runs once per
    # batch on the produce path.
    return _tuple_new(BatchHeader, HEADER.unpack_from(buf, pos))


def unpack_header(buf, pos: int = 0) -> BatchHeader:
    """The header at ``pos`` of bytes known to hold a whole one (struct still
    raises on a short buffer): ``parse_header`` without the friendly error."""
    return _tuple_new(BatchHeader, HEADER.unpack_from(buf, pos))


def batch_crc(buf, pos: int, size: int) -> int:
    """CRC-32C of the batch at ``pos`` (attributes through the end)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])


def validate_batches(
    buf,
    max_batch_bytes: int | None,
    *,
    from_client: bool = True,
    allow_partial_tail: bool = False,
) -> list[BatchHeader]:
    """Check every batch in ``buf`` and return their headers.

    ``buf`` is a produce request's (or a fetch response's) records blob.
    Error codes follow Kafka's broker:

    * no batch at all -> RecordsFault.invalid_record (Kafka's
      ``ProduceRequest.validateRecords``: "must have at least one record batch")
    * batch_length < 49, a torn trailing batch, or a CRC mismatch ->
      RecordsFault.corrupt_message; magic outside 0..2 -> RecordsFault.corrupt_message
    * magic 0 or 1 -> RecordsFault.invalid_record (only v2 is accepted, as for produce v3+)
    * a batch larger than ``max_batch_bytes`` -> RecordsFault.message_too_large
      (``max_batch_bytes=None`` disables the check, as Kafka does for
      replication because the leader already enforced it)
    * compression codec 5..7 -> RecordsFault.unsupported_compression_type
    * with ``from_client`` (leader appends of producer data, Kafka's
      ``AppendOrigin.CLIENT``): record_count < 1, last_offset_delta !=
      record_count - 1, control batches, or a producer id without a base
      sequence -> RecordsFault.invalid_record.  Replicated data may legitimately hold
      empty batches (compaction keeps them), so followers only need
      last_offset_delta >= 0.

    ``allow_partial_tail`` silently ignores an incomplete last batch, as Kafka
    does for replication where a fetch response may end mid-batch; the
    returned headers then cover only the complete batches.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    if end == 0:
        raise InvalidRecordsError(RecordsFault.invalid_record, "records contain no record batch")
    unpack = HEADER.unpack_from
    headers: list[BatchHeader] = []
    append = headers.append
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_SIZE:
            # Even a batch that is too short to hold a header states its
            # length and magic first; report a bad length as such.
            if remaining >= LOG_OVERHEAD:
                length = _EPOCH.unpack_from(mv, pos + LENGTH_OFFSET)[0]
                if length < MIN_BATCH_LENGTH:
                    raise InvalidRecordsError(
                        RecordsFault.corrupt_message,
                        f"record batch at position {pos} has length {length} < {MIN_BATCH_LENGTH}",
                    )
            if allow_partial_tail:
                break
            raise InvalidRecordsError(
                RecordsFault.corrupt_message,
                f"truncated record batch: {remaining} trailing bytes at position {pos}",
            )
        h = unpack(mv, pos)
        (_, batch_length, _, magic, crc, attributes, last_offset_delta, _, _, producer_id, _, base_sequence,
         record_count) = h
        if batch_length < MIN_BATCH_LENGTH:
            raise InvalidRecordsError(
                RecordsFault.corrupt_message,
                f"record batch at position {pos} has length {batch_length} < {MIN_BATCH_LENGTH}",
            )
        if magic != 2:
            if 0 <= magic < 2:
                raise InvalidRecordsError(
                    RecordsFault.invalid_record,
                    f"record batch magic {magic} not supported: only magic v2 record batches are accepted",
                )
            raise InvalidRecordsError(RecordsFault.corrupt_message, f"invalid record batch magic {magic}")
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            if allow_partial_tail:
                break
            raise InvalidRecordsError(
                RecordsFault.corrupt_message,
                f"truncated record batch at position {pos}: needs {size} bytes, {remaining} left",
            )
        if max_batch_bytes is not None and size > max_batch_bytes:
            raise InvalidRecordsError(
                RecordsFault.message_too_large,
                f"record batch of {size} bytes exceeds the maximum of {max_batch_bytes}",
            )
        if crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) != crc:
            raise InvalidRecordsError(
                RecordsFault.corrupt_message, f"record batch at position {pos} failed its CRC check (stored crc {crc})"
            )
        if attributes & COMPRESSION_MASK > COMPRESSION_ZSTD:
            raise InvalidRecordsError(
                RecordsFault.unsupported_compression_type,
                f"unknown compression codec {attributes & COMPRESSION_MASK}",
            )
        if from_client:
            if record_count < 1:
                raise InvalidRecordsError(RecordsFault.invalid_record, f"invalid record count {record_count}")
            if last_offset_delta != record_count - 1:
                raise InvalidRecordsError(
                    RecordsFault.invalid_record,
                    f"inconsistent batch: last_offset_delta {last_offset_delta} with {record_count} records",
                )
            if attributes & CONTROL_MASK:
                raise InvalidRecordsError(RecordsFault.invalid_record, "clients may not write control batches")
            if producer_id >= 0 and base_sequence < 0:
                raise InvalidRecordsError(
                    RecordsFault.invalid_record, f"invalid base sequence {base_sequence} for producer id {producer_id}"
                )
        elif last_offset_delta < 0 or record_count < 0:
            raise InvalidRecordsError(
                RecordsFault.corrupt_message,
                f"invalid batch: last_offset_delta {last_offset_delta}, record count {record_count}",
            )
        append(_tuple_new(BatchHeader, h))
        pos += size
    return headers


def assign_offsets(buf: bytearray, headers, base_offset: int, leader_epoch: int) -> int:
    """Stamp contiguous offsets and the leader epoch into each batch, in place.

    Both fields precede the CRC'd region, so checksums stay valid.  Returns
    the last offset assigned.
    """
    pack_offset = _OFFSET.pack_into
    pack_epoch = _EPOCH.pack_into
    pos = 0
    next_offset = base_offset
    for h in headers:
        pack_offset(buf, pos, next_offset)
        pack_epoch(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        next_offset += h.last_offset_delta + 1
        pos += h.batch_length + LOG_OVERHEAD
    return next_offset - 1


class StampedBatches(NamedTuple):
    """What ``stamp_client_batches`` learnt while stamping."""

    last_offset: int
    batches: int
    max_timestamp: int
    offset_of_max_timestamp: int
    # (size in bytes, last offset, max timestamp) of each batch in order:
    # the segment builds its index entries from these instead of reading
    # every header a second time.
    layout: list[tuple[int, int, int]]
    # (position, header as stamped) of each batch that names a producer id:
    # the log checks producer state from these instead of parsing again.
    producer_batches: list[tuple[int, BatchHeader]]


def stamp_client_batches(
    buf: bytearray, base_offset: int, leader_epoch: int, max_batch_bytes: int, codec: int | None = None
) -> StampedBatches | None:
    """Validate and stamp a producer's batches in one pass: the produce path's
    common case, where ``validate_batches`` then ``assign_offsets`` would walk
    the headers twice.

    Accepts only what ``validate_batches(..., from_client=True)`` accepts
    (and, when ``codec`` is given, only batches already in that codec, so no
    conversion is due).  Anything else returns None *without naming the
    fault*: the caller then takes the exact path, which reports Kafka's error
    code.  Batches before the faulty one are stamped by then; that is
    harmless, because offsets and epochs lie outside the CRC and the exact
    path writes them again.
    """
    mv = memoryview(buf)
    end = len(mv)
    if end == 0:
        return None
    unpack = HEADER.unpack_from
    stamp = _OFFSET_LENGTH_EPOCH.pack_into
    pos = 0
    next_offset = base_offset
    max_ts, offset_of_max_ts = -1, base_offset - 1
    layout: list[tuple[int, int, int]] = []
    note = layout.append
    producer_batches: list[tuple[int, BatchHeader]] = []
    while pos < end:
        if end - pos < HEADER_SIZE:
            return None
        # Unpacked into locals, not a BatchHeader: this runs once per batch
        # on the produce path, and local reads are the cheapest field access.
        (_, length, _, magic, crc, attributes, last_offset_delta, base_ts, ts, producer_id, producer_epoch,
         base_sequence, count) = unpack(mv, pos)
        size = length + LOG_OVERHEAD
        if (
            length < MIN_BATCH_LENGTH
            or magic != 2
            or size > end - pos
            or size > max_batch_bytes
            or attributes & CONTROL_MASK
            or (codec is not None and attributes & COMPRESSION_MASK != codec)
            or attributes & COMPRESSION_MASK > COMPRESSION_ZSTD
            or count < 1
            or last_offset_delta != count - 1
            or (producer_id >= 0 and base_sequence < 0)
            or crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) != crc
        ):
            return None
        stamp(buf, pos, next_offset, length, leader_epoch)
        if producer_id >= 0:
            producer_batches.append((pos, _tuple_new(BatchHeader, (
                next_offset, length, leader_epoch, magic, crc, attributes, last_offset_delta, base_ts, ts,
                producer_id, producer_epoch, base_sequence, count))))
        next_offset += count
        note((size, next_offset - 1, ts))
        if ts > max_ts:
            max_ts, offset_of_max_ts = ts, next_offset - 1
        pos += size
    return StampedBatches(next_offset - 1, len(layout), max_ts, offset_of_max_ts, layout, producer_batches)


def set_log_append_time(buf: bytearray, header_pos: int, timestamp_ms: int) -> None:
    """Mark the batch at ``header_pos`` LogAppendTime with ``timestamp_ms``.

    Mirrors Kafka's ``DefaultRecordBatch.setMaxTimestamp``: consumers then
    report ``max_timestamp`` as every record's timestamp.  Attributes and
    max_timestamp are inside the CRC, so the checksum is recomputed.
    """
    attributes = _ATTRS.unpack_from(buf, header_pos + ATTRIBUTES_OFFSET)[0]
    current_ts = _OFFSET.unpack_from(buf, header_pos + MAX_TIMESTAMP_OFFSET)[0]
    if attributes & TIMESTAMP_TYPE_MASK and current_ts == timestamp_ms:
        return
    _ATTRS.pack_into(buf, header_pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _OFFSET.pack_into(buf, header_pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    size = _EPOCH.unpack_from(buf, header_pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
    _CRC.pack_into(buf, header_pos + CRC_OFFSET, batch_crc(buf, header_pos, size))


def batch_layout(buf) -> list[tuple[int, int, int]]:
    """``(size in bytes, last offset, max timestamp)`` of each batch of
    trusted, already validated and stamped bytes, in order (what
    ``stamp_client_batches`` returns as ``layout``)."""
    return [
        (h.batch_length + LOG_OVERHEAD, h.base_offset + h.last_offset_delta, h.max_timestamp)
        for _, h in iter_headers(buf)
    ]


def iter_headers(buf, pos: int = 0, end: int | None = None):
    """Yield ``(position, BatchHeader)`` for trusted, already validated bytes."""
    if end is None:
        end = len(buf)
    unpack = HEADER.unpack_from
    while pos + HEADER_SIZE <= end:
        h = _tuple_new(BatchHeader, unpack(buf, pos))
        size = h.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > end:
            return
        yield pos, h
        pos += size
