"""Request dispatch, Kafka's KafkaApis role: a decoded request goes to its
API's handler (net/apis/, by api key) with a RequestContext, and the
handler's answer comes back encoded for the connection's correlation id.

A request the edge cannot serve (unknown api key, unsupported version, a
malformed body) closes the connection, as Kafka does, except ApiVersions,
which answers UNSUPPORTED_VERSION with the versions served (KIP-511).
"""
from __future__ import annotations

import time
from typing import Any

from core.error_codes import ErrorCode

from net.client_quotas import enforce as enforce_client_quotas
from net.codec import MalformedRequest, decode_request, encode_response, response_schema
from net.edge_metrics import CURRENT as CURRENT_REQUEST, EdgeMetrics
from net.file_region import SplicedResponse
from net.schema_build import build, nested
from net.server import CloseConnection, Connection

API_VERSIONS_KEY = 18


class RequestContext:
    """What a handler gets besides its request: the edge (its routers and
    caches), the connection it came on (None in tests), its header and version."""

    __slots__ = ("edge", "conn", "header", "api_version")

    def __init__(self, edge: Any, conn: Connection | None, header: Any, api_version: int):
        self.edge = edge
        self.conn = conn
        self.header = header
        self.api_version = api_version


class RequestDispatch:
    def __init__(self, edge: Any, handlers: dict, metrics: EdgeMetrics | None):
        self.edge = edge  # what handlers see as ctx.edge
        self.handlers = handlers  # api_key -> net.registry handler
        self.metrics = metrics  # Kafka's request metrics; None: not recorded
        self.fault_hooks: dict[int, Any] = {}  # api_key -> async hook(ctx, request, handler) for tests

    def dispatch(self, conn: Connection, api_key: int, api_version: int, correlation_id: int,
                 frame: bytes | memoryview):
        """Called in arrival order; returns an awaitable of the encoded response."""
        handler = self.handlers.get(api_key)
        if handler is None:
            return _fail(CloseConnection(f"unknown api key {api_key}"))
        if not handler.serves(api_version):
            if api_key == API_VERSIONS_KEY:
                return _done(self.unsupported_api_versions(correlation_id))
            return _fail(CloseConnection(
                f"unsupported version {api_version} of {handler.name} (serving "
                f"{handler.min_version}-{handler.max_version})"))
        try:
            header, request = decode_request(api_key, api_version, frame)
        except MalformedRequest as exc:
            return _fail(CloseConnection(str(exc)))
        ctx = RequestContext(self.edge, conn, header, api_version)
        hook = self.fault_hooks.get(api_key)
        coroutine = handler.handler(ctx, request) if hook is None else hook(ctx, request, handler.handler)
        coroutine = enforce_client_quotas(ctx, api_key, request, coroutine)
        if self.metrics is not None:
            return _measured(coroutine, correlation_id, self.metrics, self.edge.metadata, api_key, request)
        return _encode_when_done(coroutine, correlation_id)

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """UNSUPPORTED_VERSION in the v0 layout, listing what we serve, so the
        client can retry with a version we know (KIP-511)."""
        schema = response_schema(API_VERSIONS_KEY, 0)
        return encode_response(build(
            schema,
            error_code=ErrorCode.unsupported_version,
            api_keys=self.api_versions_entries(nested(schema, "ApiVersion")),
        ), correlation_id)

    def api_versions_entries(self, entry_cls) -> tuple:
        return tuple(
            entry_cls(api_key=h.api_key, min_version=h.advertised_min_version, max_version=h.max_version)
            for h in sorted(self.handlers.values(), key=lambda h: h.api_key)
        )


async def _encode_when_done(coroutine, correlation_id: int):
    response = await coroutine
    if response is None:
        return None
    if type(response) is SplicedResponse:  # Fetch with file regions: -> ResponseFrame
        return response.to_frame(correlation_id)
    return encode_response(response, correlation_id)


async def _measured(coroutine, correlation_id: int, metrics: EdgeMetrics, metadata, api_key: int, request):
    """_encode_when_done, noting when the handler starts and ends (the
    server's RequestTimes for this request, when it made one) and handing the
    answer to the edge's metrics."""
    times = CURRENT_REQUEST.get()
    if times is not None:
        times.started = time.perf_counter()
    response = await coroutine
    if times is not None:
        times.handled = time.perf_counter()
    metrics.response_ready(api_key, request, response, metadata)
    if response is None:
        return None
    if type(response) is SplicedResponse:  # Fetch with file regions: -> ResponseFrame
        return response.to_frame(correlation_id)
    return encode_response(response, correlation_id)


async def _done(value):
    return value


async def _fail(exc: Exception):
    raise exc
