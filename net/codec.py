"""Request/response (de)serialisation through kio's generated schemas.

Only framing and the first 8 header bytes are read by hand (to route and to
answer requests we cannot decode); every message body goes through kio.
"""
from __future__ import annotations

import functools
import io
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from net.request_bounds import RequestOutOfBounds, check_request

_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_SIZE = struct.Struct(">i")


class MalformedRequest(Exception):
    """The frame cannot be decoded; Kafka closes the connection on these."""


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    if len(frame) < _HEAD.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    return _HEAD.unpack_from(frame, 0)


@functools.cache
def request_schema(api_key: int, api_version: int):
    return load_request_schema(api_key, api_version)


@functools.cache
def response_schema(api_key: int, api_version: int):
    return load_response_schema(api_key, api_version)


@functools.cache
def _reader(schema):
    return entity_reader(schema)


@functools.cache
def _writer(schema):
    return entity_writer(schema)


def decode_request(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[Any, Any]:
    """Return (header, body) decoded with kio; raise MalformedRequest on bad bytes.

    Every count and length is checked against the frame first
    (net/request_bounds.py): kio's native reader would allocate whatever a
    lying count asks for and abort the process.
    """
    schema = request_schema(api_key, api_version)
    header_schema = schema.__header_schema__
    try:
        check_request(header_schema, schema, frame)
    except RequestOutOfBounds as exc:
        raise MalformedRequest(f"api {api_key} v{api_version}: {exc}") from None
    try:
        header, used = _reader(header_schema)(frame, 0)
        body, body_used = _reader(schema)(frame, used)
    except Exception as exc:  # kio raises several types for malformed input
        raise MalformedRequest(f"cannot decode api {api_key} v{api_version}: {exc}") from None
    # Trailing bytes after the body are ignored, as Kafka's own parser does:
    # librdkafka's Metadata v13 carries some.
    return header, body


def encode_response(response: Any, correlation_id: int) -> bytes:
    """Frame = size, response header (v0 or v1 per the schema), body."""
    schema = type(response)
    header_schema = schema.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    _writer(header_schema)(buf, header_schema(correlation_id=correlation_id))
    _writer(schema)(buf, response)
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    data.release()
    return out


def encode_request(request: Any, correlation_id: int, client_id: str | None = "raykafka") -> bytes:
    """Used by tests and tools to speak to a broker with kio's schemas."""
    schema = type(request)
    header_schema = schema.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    header = header_schema(
        request_api_key=schema.__api_key__,
        request_api_version=schema.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    _writer(header_schema)(buf, header)
    _writer(schema)(buf, request)
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    data.release()
    return out


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    schema = response_schema(api_key, api_version)
    header, used = _reader(schema.__header_schema__)(frame, 0)
    body, _ = _reader(schema)(frame, used)
    return header.correlation_id, body
