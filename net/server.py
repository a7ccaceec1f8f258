"""Kafka framing over asyncio TCP: one reader and one in-order writer per connection.

Requests on a connection are handled concurrently (a producer pipelines many),
but responses are written strictly in request order, as Kafka guarantees.
Everything is bounded: frame size, requests and bytes in flight per
connection, number of connections, idle time.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from typing import Any, Awaitable, Callable

from net.codec import MalformedRequest, peek_header

log = logging.getLogger("raykafka.net")

_SIZE = struct.Struct(">i")


class CloseConnection(Exception):
    """A handler asks for the connection to be closed (Kafka's behaviour for bad requests)."""


class ConnectionLimits:
    def __init__(self, max_request_bytes: int, max_inflight_requests: int, max_inflight_bytes: int,
                 max_connections: int, idle_timeout_s: float, max_queued_bytes: int = 512 * 1024 * 1024):
        self.max_request_bytes = max_request_bytes
        self.max_inflight_requests = max_inflight_requests
        self.max_inflight_bytes = max_inflight_bytes
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        # Across all connections (Kafka's queued.max.request.bytes).
        self.max_queued_bytes = max_queued_bytes


# dispatch(conn, api_key, api_version, correlation_id, frame) -> awaitable of
# encoded response bytes, or None for "no response" (acks=0 produce).
Dispatch = Callable[["Connection", int, int, int, bytes], Awaitable[bytes | None]]


class Connection:
    __slots__ = ("peer", "reader", "writer", "inflight", "inflight_bytes", "space", "closed",
                 "last_active", "requests_served", "client_software")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.inflight: collections.deque = collections.deque()
        self.inflight_bytes = 0
        self.space = asyncio.Event()
        self.space.set()
        self.closed = False
        self.last_active = time.monotonic()
        self.requests_served = 0
        self.client_software: tuple[str, str] | None = None


class KafkaServer:
    def __init__(self, dispatch: Dispatch, limits: ConnectionLimits):
        self._dispatch = dispatch
        self.limits = limits
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task] = set()
        self.queued_bytes = 0
        self._queue_space = asyncio.Event()
        self._queue_space.set()
        self.stats = collections.Counter()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._serve, host, port, reuse_address=True, limit=64 * 1024, backlog=1024
        )
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            self._close(conn)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except asyncio.TimeoutError:
                pass

    def _close(self, conn: Connection) -> None:
        if not conn.closed:
            conn.closed = True
            conn.space.set()
            conn.writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._serve_connection(reader, writer)
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer)
        if len(self._connections) >= self.limits.max_connections:
            log.warning("refusing connection from %s: max.connections=%d reached",
                        conn.peer, self.limits.max_connections)
            self.stats["connections_refused"] += 1
            writer.close()
            return
        self._connections.add(conn)
        self.stats["connections_accepted"] += 1
        responder = asyncio.create_task(self._write_responses(conn))
        try:
            await self._read_requests(conn)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", conn.peer, exc)
            self.stats["connections_closed_bad_request"] += 1
        except Exception:  # a bug must cost one connection, never the edge
            log.exception("closing connection from %s after an unexpected error", conn.peer)
        finally:
            # Let in-flight responses drain before closing (an orderly client
            # may half-close after its last request).
            conn.inflight.append(None)
            conn.space.set()
            try:
                await asyncio.wait_for(responder, 30)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                responder.cancel()
            self._close(conn)
            self._connections.discard(conn)
            # Requests whose responses were never written still hold budget.
            while conn.inflight:
                item = conn.inflight.popleft()
                if item is not None:
                    item[0].cancel()
                    self._release(item[1])

    async def _read_requests(self, conn: Connection) -> None:
        limits = self.limits
        reader = conn.reader
        while not conn.closed:
            try:
                size_bytes = await asyncio.wait_for(reader.readexactly(4), limits.idle_timeout_s)
            except asyncio.TimeoutError:
                log.info("closing idle connection from %s", conn.peer)
                return
            (size,) = _SIZE.unpack(size_bytes)
            if size <= 0 or size > limits.max_request_bytes:
                # Includes HTTP ("GET " = 1195725856) and TLS hellos: Kafka
                # logs InvalidReceiveException and closes.
                raise CloseConnection(
                    f"invalid request size {size} (socket.request.max.bytes={limits.max_request_bytes})"
                )
            # Bound memory per connection: wait for responses to drain.
            while (len(conn.inflight) >= limits.max_inflight_requests
                   or (conn.inflight_bytes and conn.inflight_bytes + size > limits.max_inflight_bytes)):
                conn.space.clear()
                await conn.space.wait()
                if conn.closed:
                    return
            # Bound memory across connections too: wait while the edge as a
            # whole holds too many request bytes (one request always fits).
            while self.queued_bytes and self.queued_bytes + size > limits.max_queued_bytes:
                self._queue_space.clear()
                await self._queue_space.wait()
            self.queued_bytes += size
            try:
                frame = await reader.readexactly(size)
            except BaseException:
                self._release(size)
                raise
            conn.last_active = time.monotonic()
            try:
                api_key, api_version, correlation_id = peek_header(frame)
            except MalformedRequest as exc:
                self._release(size)
                raise CloseConnection(str(exc)) from None
            # The handler starts now, in arrival order; it must issue any
            # ordered actor calls (appends) before its first await.
            try:
                task = asyncio.ensure_future(self._dispatch(conn, api_key, api_version, correlation_id, frame))
            except BaseException:
                self._release(size)
                raise
            conn.inflight.append((task, size))
            conn.inflight_bytes += size
            conn.space.set()

    def _release(self, size: int) -> None:
        self.queued_bytes -= size
        self._queue_space.set()

    async def _write_responses(self, conn: Connection) -> None:
        writer = conn.writer
        while True:
            while not conn.inflight:
                conn.space.clear()
                await conn.space.wait()
            item = conn.inflight[0]
            if item is None:
                return
            task, size = item
            try:
                response = await task
            except CloseConnection as exc:
                log.warning("closing connection from %s: %s", conn.peer, exc)
                self.stats["connections_closed_bad_request"] += 1
                self._close(conn)
                return
            except Exception:
                log.exception("request from %s failed; closing the connection", conn.peer)
                self._close(conn)
                return
            finally:
                conn.inflight.popleft()
                conn.inflight_bytes -= size
                self._release(size)
                conn.space.set()
            conn.requests_served += 1
            if response is not None and not conn.closed:
                writer.write(response)
                if writer.transport.get_write_buffer_size() > 1 << 20:
                    await writer.drain()
