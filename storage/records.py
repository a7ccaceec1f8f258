"""Decoding and encoding of the records inside a v2 record batch.

This is the only module that looks inside batches.  The produce and fetch
paths never call it; it serves timestamp lookups (ListOffsets), tests, and
later log compaction.

Record layout (v2, varints are zig-zag encoded)::

    length varint | attributes int8 | timestamp_delta varlong |
    offset_delta varint | key_length varint | key | value_length varint |
    value | header_count varint | headers (key_length varint, key utf8,
    value_length varint, value)*

A length of -1 encodes null.
"""

from __future__ import annotations

import struct
import time
import zlib
from typing import Iterable, Iterator, NamedTuple

import cramjam
import lz4.frame
import zstandard
from crc32c import crc32c

from storage.errors import InvalidRecordsError, RecordsFault
from storage.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    parse_header,
    unpack_header,
)

__all__ = [
    "Record",
    "SimpleRecord",
    "decode_batch",
    "iter_batch_records",
    "iter_records",
    "find_offset_for_timestamp",
    "offset_of_max_timestamp",
    "build_batch",
    "compress",
    "decompress",
    "RawRecord",
    "batch_payload",
    "scan_records",
    "pack_batch",
    "reencode_timestamp_delta",
    "recompress_batch",
    "keyless_records",
]


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple  # of (str, bytes | None)


class SimpleRecord(NamedTuple):
    """Input to :func:`build_batch`.  ``timestamp=None`` means "now"."""

    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    timestamp: int | None = None
    offset_delta: int | None = None


# --------------------------------------------------------------------------
# compression

# Java clients (snappy-java's SnappyOutputStream) wrap snappy in this framing;
# librdkafka and others send raw snappy blocks.  Both occur on the wire.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")


def _snappy_decompress(data) -> bytes:
    data = bytes(data)
    if data[:8] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = 16  # magic + version int32 + compatible-version int32
    out = []
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise ValueError("truncated xerial snappy block length")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise ValueError("truncated xerial snappy block")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)


def _zstd_decompress(data) -> bytes:
    # Java's zstd-jni streams frames without a content size, which
    # ZstdDecompressor.decompress() refuses; a decompressobj handles both and
    # the loop covers several concatenated frames.
    out = []
    remaining = bytes(data)
    dctx = zstandard.ZstdDecompressor()
    while remaining:
        dobj = dctx.decompressobj()
        out.append(dobj.decompress(remaining))
        if not dobj.eof:
            raise ValueError("truncated zstd frame")
        remaining = dobj.unused_data
    return b"".join(out)


def decompress(codec: int, data) -> bytes:
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            # wbits 47 = auto-detect gzip or zlib headers
            return zlib.decompress(data, 47)
        if codec == COMPRESSION_SNAPPY:
            return _snappy_decompress(data)
        if codec == COMPRESSION_LZ4:
            return lz4.frame.decompress(bytes(data))
        if codec == COMPRESSION_ZSTD:
            return _zstd_decompress(data)
    except InvalidRecordsError:
        raise
    except Exception as exc:  # codec libraries raise assorted types
        raise InvalidRecordsError(RecordsFault.corrupt_message, f"cannot decompress record batch: {exc}") from exc
    raise InvalidRecordsError(RecordsFault.unsupported_compression_type, f"unknown compression codec {codec}")


def compress(codec: int, data: bytes, *, level: int | None = None, xerial_snappy: bool = True) -> bytes:
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        # wbits 31 = gzip container, what Java's GZIPOutputStream produces
        co = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return co.compress(data) + co.flush()
    if codec == COMPRESSION_SNAPPY:
        if not xerial_snappy:
            return bytes(cramjam.snappy.compress_raw(data))
        parts = [_XERIAL_HEADER]
        mv = memoryview(data)
        for i in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK]))
            parts.append(_I32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == COMPRESSION_LZ4:
        # Kafka's KafkaLZ4BlockOutputStream: independent 64 KB blocks, no
        # checksums, no content size; older Java readers reject linked blocks.
        return lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == COMPRESSION_ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise InvalidRecordsError(RecordsFault.unsupported_compression_type, f"unknown compression codec {codec}")


# --------------------------------------------------------------------------
# varints


def read_varint(buf, i: int) -> tuple[int, int]:
    """Zig-zag varint at ``buf[i]``; returns (value, next index)."""
    b = buf[i]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), i + 1
    result = b & 0x7F
    shift = 7
    i += 1
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), i
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _write_varint(out: bytearray, value: int) -> None:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


# --------------------------------------------------------------------------
# decoding


def _decode_records(h: BatchHeader, data: bytes, min_offset: int | None = None) -> Iterator[Record]:
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append_time = h.attributes & TIMESTAMP_TYPE_MASK
    max_ts = h.max_timestamp
    read = read_varint
    i = 0
    end = len(data)
    for _ in range(h.record_count):
        length, i = read(data, i)
        record_end = i + length
        if length < 0 or record_end > end:
            raise ValueError(f"record length {length} overruns the batch")
        i += 1  # record attributes: unused in v2
        ts_delta, i = read(data, i)
        offset_delta, i = read(data, i)
        key_len, i = read(data, i)
        if key_len < 0:
            key = None
        else:
            key = data[i : i + key_len]
            i += key_len
        value_len, i = read(data, i)
        if value_len < 0:
            value = None
        else:
            value = data[i : i + value_len]
            i += value_len
        header_count, i = read(data, i)
        if header_count < 0:
            raise ValueError(f"negative header count {header_count}")
        headers = []
        for _h in range(header_count):
            hk_len, i = read(data, i)
            if hk_len < 0:
                raise ValueError("null header key")
            hkey = data[i : i + hk_len].decode("utf-8", "surrogateescape")
            i += hk_len
            hv_len, i = read(data, i)
            if hv_len < 0:
                hval = None
            else:
                hval = data[i : i + hv_len]
                i += hv_len
            headers.append((hkey, hval))
        if i != record_end:
            raise ValueError(f"record fields end at {i}, record length says {record_end}")
        offset = base_offset + offset_delta
        if min_offset is not None and offset < min_offset:
            continue
        yield Record(offset, max_ts if log_append_time else base_ts + ts_delta, key, value, tuple(headers))
    if i != end:
        raise ValueError(f"{end - i} bytes left after {h.record_count} records")


def iter_batch_records(batch, pos: int = 0, *, verify_crc: bool = False) -> Iterator[Record]:
    """Yield the records of the single batch starting at ``batch[pos]``."""
    h = parse_header(batch, pos)
    size = h.size
    if size < HEADER_SIZE or len(batch) - pos < size:
        raise InvalidRecordsError(RecordsFault.corrupt_message, "truncated record batch")
    mv = memoryview(batch)
    if verify_crc and crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) != h.crc:
        raise InvalidRecordsError(RecordsFault.corrupt_message, "record batch failed its CRC check")
    data = decompress(h.attributes & COMPRESSION_MASK, mv[pos + HEADER_SIZE : pos + size])
    try:
        yield from _decode_records(h, data)
    except (IndexError, ValueError) as exc:
        raise InvalidRecordsError(
            RecordsFault.corrupt_message, f"malformed records in batch at offset {h.base_offset}: {exc}"
        ) from exc


def decode_batch(batch, pos: int = 0, *, verify_crc: bool = False) -> tuple[BatchHeader, list[Record]]:
    return parse_header(batch, pos), list(iter_batch_records(batch, pos, verify_crc=verify_crc))


def iter_records(blob, *, verify_crc: bool = False) -> Iterator[Record]:
    """Yield the records of every complete batch in ``blob``."""
    pos = 0
    end = len(blob)
    while end - pos >= HEADER_SIZE:
        size = unpack_header(blob, pos).batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > end:
            break
        yield from iter_batch_records(blob, pos, verify_crc=verify_crc)
        pos += size


def find_offset_for_timestamp(batch, target_ts: int, start_offset: int | None = None) -> tuple[int, int] | None:
    """First record of the batch with timestamp >= ``target_ts`` (and offset
    >= ``start_offset``), as ``(offset, timestamp)``; None when none qualifies.
    """
    h = parse_header(batch)
    if h.max_timestamp < target_ts:
        return None
    for r in iter_batch_records(batch):
        if r.timestamp >= target_ts and (start_offset is None or r.offset >= start_offset):
            return r.offset, r.timestamp
    return None


def offset_of_max_timestamp(batch) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record carrying the batch's max
    timestamp, as Kafka's ``RecordBatch.offsetOfMaxTimestamp``."""
    h = parse_header(batch)
    target = h.max_timestamp
    for r in iter_batch_records(batch):
        if r.timestamp == target:
            return r.offset, r.timestamp
    return None


# --------------------------------------------------------------------------
# encoding


def _encode_record(out: bytearray, offset_delta: int, ts_delta: int, key, value, headers) -> None:
    body = bytearray(b"\x00")  # attributes
    _write_varint(body, ts_delta)
    _write_varint(body, offset_delta)
    if key is None:
        _write_varint(body, -1)
    else:
        _write_varint(body, len(key))
        body += key
    if value is None:
        _write_varint(body, -1)
    else:
        _write_varint(body, len(value))
        body += value
    _write_varint(body, len(headers))
    for hkey, hval in headers:
        kb = hkey.encode("utf-8", "surrogateescape") if isinstance(hkey, str) else bytes(hkey)
        _write_varint(body, len(kb))
        body += kb
        if hval is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(hval))
            body += hval
    _write_varint(out, len(body))
    out += body


def build_batch(
    records: Iterable,
    compression: int = COMPRESSION_NONE,
    base_offset: int = 0,
    *,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: int | None = None,
    base_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
    xerial_snappy: bool = True,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode a complete v2 batch with a valid CRC.

    ``records`` holds :class:`SimpleRecord` (or plain ``(key, value)`` tuples)
    or decoded :class:`Record` objects, whose offsets and timestamps are kept
    (as compaction needs).  ``log_append_time`` marks the batch LogAppendTime
    with that max timestamp.  ``last_offset_delta`` overrides the default
    ``len(records) - 1`` (compaction keeps a batch's original offset span).
    """
    now = int(time.time() * 1000)
    items = []
    for idx, r in enumerate(records):
        if isinstance(r, Record):
            items.append((r.offset - base_offset, r.timestamp, r.key, r.value, r.headers))
        else:
            if not isinstance(r, SimpleRecord):
                r = SimpleRecord(*r)
            items.append(
                (
                    idx if r.offset_delta is None else r.offset_delta,
                    now if r.timestamp is None else r.timestamp,
                    r.key,
                    r.value,
                    r.headers,
                )
            )
    if not items and last_offset_delta is None:
        raise ValueError("an empty batch needs an explicit last_offset_delta")
    if base_timestamp is None:
        base_timestamp = items[0][1] if items else now
    max_ts = max((it[1] for it in items), default=base_timestamp)
    body = bytearray()
    for offset_delta, ts, key, value, headers in items:
        _encode_record(body, offset_delta, ts - base_timestamp, key, value, headers)
    payload = compress(compression, bytes(body), level=compression_level, xerial_snappy=xerial_snappy)

    attributes = compression & COMPRESSION_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        # KIP-534: the base timestamp field holds the delete horizon
        attributes |= DELETE_HORIZON_MASK
        if base_timestamp != delete_horizon_ms:
            raise ValueError("a batch with a delete horizon uses it as its base timestamp")
    if log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_MASK
        max_ts = log_append_time
    if last_offset_delta is None:
        last_offset_delta = max(it[0] for it in items)
    batch = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        2,
        0,  # crc, filled below
        attributes,
        last_offset_delta,
        base_timestamp,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(items),
    )
    batch[HEADER_SIZE:] = payload
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


# --------------------------------------------------------------------------
# raw record access (compaction, key validation, compression conversion)


class RawRecord(NamedTuple):
    """One record located inside an uncompressed records payload.

    ``data[start:end]`` is the complete encoded record (length varint
    included), so it can be copied into another batch with the same base
    offset and base timestamp without re-encoding.
    """

    start: int
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    has_value: bool
    ts_start: int  # where the timestamp delta varint starts
    ts_end: int  # where it ends (the offset delta follows)


def batch_payload(buf, pos: int, h) -> bytes:
    """The decompressed records payload of the batch at ``buf[pos]``."""
    size = h.batch_length + LOG_OVERHEAD
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return decompress(h.attributes & COMPRESSION_MASK, mv[pos + HEADER_SIZE : pos + size])


def scan_records(data, count: int, *, want_keys: bool = True) -> list[RawRecord]:
    """Walk ``count`` records of an uncompressed payload; ValueError or
    IndexError when they are malformed or do not fill the payload exactly.
    With ``want_keys=False`` keys are reported as ``b""`` / None only."""
    read = read_varint
    out: list[RawRecord] = []
    append = out.append
    i = 0
    end = len(data)
    for _ in range(count):
        start = i
        length, i = read(data, i)
        record_end = i + length
        if length < 0 or record_end > end:
            raise ValueError(f"record length {length} overruns the batch")
        i += 1  # attributes
        ts_start = i
        ts_delta, i = read(data, i)
        ts_end = i
        offset_delta, i = read(data, i)
        key_len, i = read(data, i)
        if key_len < 0:
            key = None
        else:
            key = bytes(data[i : i + key_len]) if want_keys else b""
            i += key_len
        value_len, i = read(data, i)
        if value_len >= 0:
            i += value_len
        # headers are skipped: the record length bounds them
        header_count, j = read(data, i)
        if header_count < 0 or i > record_end:
            raise ValueError("malformed record")
        append(RawRecord(start, record_end, offset_delta, ts_delta, key, value_len >= 0, ts_start, ts_end))
        i = record_end
    if i != end:
        raise ValueError(f"{end - i} bytes left after {count} records")
    return out


def reencode_timestamp_delta(data, r: RawRecord, new_delta: int) -> bytes:
    """The record ``r`` of payload ``data`` with its timestamp delta replaced
    (the batch's base timestamp changed), everything else byte-identical."""
    body = bytearray()
    body += data[r.ts_start - 1 : r.ts_start]  # attributes
    _write_varint(body, new_delta)
    body += data[r.ts_end : r.end]
    out = bytearray()
    _write_varint(out, len(body))
    out += body
    return bytes(out)


def keyless_records(buf, pos: int, h) -> list[int]:
    """Indexes within the batch of the records without a key.

    Kafka decodes keys on append to compacted topics (LogValidator.validateKey);
    this is that check.  Raises RecordsFault.corrupt_message for malformed records."""
    try:
        data = batch_payload(buf, pos, h)
        return [idx for idx, r in enumerate(scan_records(data, h.record_count, want_keys=False)) if r.key is None]
    except (IndexError, ValueError) as exc:
        raise InvalidRecordsError(RecordsFault.corrupt_message, f"malformed records in record batch: {exc}") from exc


def pack_batch(
    payload: bytes,
    codec: int,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    compression_level: int | None = None,
) -> bytes:
    """A v2 batch around an uncompressed records ``payload``, compressed with
    ``codec`` (the codec bits of ``attributes`` are replaced), CRC computed."""
    body = compress(codec, payload, level=compression_level) if record_count else b""
    attributes = (attributes & ~COMPRESSION_MASK) | (codec & COMPRESSION_MASK)
    batch = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    batch[HEADER_SIZE:] = body
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def recompress_batch(buf, pos: int, h, codec: int, *, check_keys: bool = False):
    """Kafka's broker-side compression conversion of one client batch.

    Records are decoded (which validates them: inner offsets must be
    0, 1, 2 ... as Kafka requires) and the unchanged record bytes are
    re-encoded with ``codec``; producer id/epoch/sequence, timestamps and
    flags are kept.  Returns ``(new_batch, keyless)``: with ``check_keys``
    the indexes of records without a key.
    """
    try:
        data = batch_payload(buf, pos, h)
        recs = scan_records(data, h.record_count, want_keys=False)
    except (IndexError, ValueError) as exc:
        raise InvalidRecordsError(RecordsFault.corrupt_message, f"malformed records in record batch: {exc}") from exc
    keyless = []
    for idx, r in enumerate(recs):
        if r.offset_delta != idx:
            raise InvalidRecordsError(
                RecordsFault.invalid_record,
                f"inner record at index {idx} of the record batch does not have incremental offsets: "
                f"offset delta {r.offset_delta}",
            )
        if check_keys and r.key is None:
            keyless.append(idx)
    new = pack_batch(
        data,
        codec,
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        attributes=h.attributes,
        last_offset_delta=h.last_offset_delta,
        base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        record_count=h.record_count,
    )
    return new, keyless
