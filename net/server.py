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
import os
import time
from typing import Any, Awaitable, Callable

from net.codec import MalformedRequest, peek_header
from net.edge_metrics import CURRENT as CURRENT_REQUEST, RequestTimes
from net.file_region import FileRegion, ResponseFrame
from net.frame_receiver import FrameReceiver

log = logging.getLogger("raykafka.net")

# File regions of a response written without sendfile go out in pieces of
# this size (net/file_region.py: TLS connections read regions at write time).
REGION_CHUNK_BYTES = 256 * 1024
FETCH_API_KEY = 1



class CloseConnection(Exception):
    """A handler asks for the connection to be closed (Kafka's behaviour for bad requests)."""


class TornResponse(Exception):
    """A file region of a response no longer holds the bytes that were checked
    (the segment was truncated in place): the frame must not be completed."""


class ConnectionLimits:
    def __init__(self, max_request_bytes: int, max_inflight_requests: int, max_inflight_bytes: int,
                 max_connections: int, idle_timeout_s: float, max_queued_bytes: int = 512 * 1024 * 1024,
                 one_at_a_time_api_keys: frozenset = frozenset({FETCH_API_KEY})):
        self.max_request_bytes = max_request_bytes
        self.max_inflight_requests = max_inflight_requests
        self.max_inflight_bytes = max_inflight_bytes
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        # Across all connections (Kafka's queued.max.request.bytes).
        self.max_queued_bytes = max_queued_bytes
        # Requests of these APIs are read only once the connection's previous
        # one of them is written. Fetch: a response may hold up to
        # fetch.max.bytes, and consumers send one fetch at a time per broker
        # anyway; a client pipelining fetches must not make the edge hold
        # (or read, over TLS without region fds to spare) hundreds of them.
        self.one_at_a_time_api_keys = one_at_a_time_api_keys


# dispatch(conn, api_key, api_version, correlation_id, frame) -> awaitable of
# the encoded response (bytes, or a ResponseFrame whose file regions are sent
# with sendfile), or None for "no response" (acks=0 produce).
Dispatch = Callable[["Connection", int, int, int, bytes | memoryview], Awaitable[bytes | ResponseFrame | None]]


class Connection:
    __slots__ = ("peer", "reader", "writer", "inflight", "inflight_bytes", "space", "closed",
                 "last_active", "requests_served", "client_software", "can_sendfile", "socket_fd",
                 "listener", "principal", "sasl", "max_request_bytes", "muted_until", "quota_bound",
                 "one_at_a_time", "produce_gate")

    def __init__(self, reader: FrameReceiver, writer: asyncio.StreamWriter):
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
        # net/listeners.ListenerRuntime (None: a server without one, as in unit tests),
        # the authenticated principal (None until a SASL exchange succeeds), SASL state.
        self.listener = None
        self.principal: str | None = "User:ANONYMOUS"
        self.sasl = None
        # The request size bound: socket.request.max.bytes, or, on a SASL
        # connection until it authenticates, sasl.server.max.receive.size.
        self.max_request_bytes = 0
        # time.monotonic() until which no request is read: a client over its
        # quota is muted for its throttle time (KIP-219, net/client_quotas.py).
        self.muted_until = 0.0
        # Some client quota binds this connection's client: it is read one
        # request at a time, as Kafka reads every connection, so a throttle
        # holds back the very next request (net/client_quotas.py).
        self.quota_bound = False
        # Requests of ConnectionLimits.one_at_a_time_api_keys read but not yet written (0 or 1).
        self.one_at_a_time = 0
        # Produce: set while a request verifies transactional batches (KIP-890)
        # before issuing its appends; later requests wait for it (net/apis/n00_produce.py).
        self.produce_gate: asyncio.Future | None = None
        # sendfile(2) needs the plain socket: not TLS (the kernel would bypass
        # the encryption). Cleared at the first sendfile the kernel refuses.
        sock = writer.get_extra_info("socket")
        self.can_sendfile = (hasattr(os, "sendfile") and writer.get_extra_info("sslcontext") is None
                             and sock is not None)
        self.socket_fd = sock.fileno() if self.can_sendfile else -1
        if self.can_sendfile:
            # drain() then waits until the transport's buffer is empty, which
            # is when file bytes may go to the socket directly (_write_frame).
            writer.transport.set_write_buffer_limits(high=0)


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
        # net/edge_metrics.EdgeMetrics, or None (raykafka.metrics.enabled=false).
        self.metrics = None
        # net/listeners.ListenerRuntime of this server (security, advertised endpoint), or None.
        self.listener = None

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int, reuse_port: bool = False, ssl=None) -> int:
        # reuse_port: several edge processes of one node listen on the same port
        # (raykafka.edge.processes > 1); the kernel spreads connections over them.
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameReceiver(self._connected), host, port, reuse_address=True,
            reuse_port=reuse_port or None, backlog=1024, ssl=ssl
        )
        return self._server.sockets[0].getsockname()[1]

    def _connected(self, reader: FrameReceiver, writer: asyncio.StreamWriter) -> None:
        asyncio.ensure_future(self._serve(reader, writer))

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

    async def _serve(self, reader: FrameReceiver, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._serve_connection(reader, writer)
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)

    async def _serve_connection(self, reader: FrameReceiver, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer)
        conn.max_request_bytes = self.limits.max_request_bytes
        if len(self._connections) >= self.limits.max_connections:
            log.warning("refusing connection from %s: max.connections=%d reached",
                        conn.peer, self.limits.max_connections)
            self.stats["connections_refused"] += 1
            writer.close()
            return
        self._connections.add(conn)
        self.stats["connections_accepted"] += 1
        if self.listener is not None:
            conn.listener = self.listener
            self.listener.on_connect(conn)
        metrics = self.metrics
        if metrics is not None:
            metrics.connection_opened()
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
            if metrics is not None:
                metrics.connection_closed()
            # Requests whose responses were never written still hold budget.
            while conn.inflight:
                item = conn.inflight.popleft()
                if item is not None:
                    _discard(item[0])
                    self._release(item[1])

    async def _read_requests(self, conn: Connection) -> None:
        limits = self.limits
        reader = conn.reader
        while not conn.closed:
            if conn.muted_until:
                muted_s = conn.muted_until - time.monotonic()
                if muted_s > 0:
                    await asyncio.sleep(muted_s)
            try:
                size = await reader.read_size(limits.idle_timeout_s)
            except asyncio.TimeoutError:
                log.info("closing idle connection from %s", conn.peer)
                return
            if size <= 0 or size > conn.max_request_bytes:
                # Includes HTTP ("GET " = 1195725856) and TLS hellos: Kafka
                # logs InvalidReceiveException and closes.
                raise CloseConnection(
                    f"invalid request size {size} (socket.request.max.bytes={limits.max_request_bytes}"
                    f"{'' if conn.principal is not None else f', before SASL authentication {conn.max_request_bytes}'})"
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
                frame = await reader.read_body(size, limits.idle_timeout_s)
            except asyncio.TimeoutError:
                self._release(size)
                log.info("closing connection from %s: no byte of a %d-byte request for %.0f s",
                         conn.peer, size, limits.idle_timeout_s)
                return
            except BaseException:
                self._release(size)
                raise
            conn.last_active = time.monotonic()
            try:
                api_key, api_version, correlation_id = peek_header(frame)
            except MalformedRequest as exc:
                self._release(size)
                raise CloseConnection(str(exc)) from None
            alone = api_key in limits.one_at_a_time_api_keys
            if alone:
                while conn.one_at_a_time and not conn.closed:
                    conn.space.clear()
                    await conn.space.wait()
                if conn.closed:
                    self._release(size)
                    return
                conn.one_at_a_time += 1
            # The handler starts now, in arrival order; it must issue any
            # ordered actor calls (appends) before its first await.
            times = None
            if self.metrics is not None:
                # The handler's task copies this context: it finds its times there.
                times = RequestTimes(api_key, api_version, time.perf_counter())
                CURRENT_REQUEST.set(times)
            try:
                task = asyncio.ensure_future(self._dispatch(conn, api_key, api_version, correlation_id, frame))
            except BaseException:
                self._release(size)
                raise
            conn.inflight.append((task, size, times, alone))
            conn.inflight_bytes += size
            conn.space.set()
            if conn.quota_bound:
                # Until this response is written (and its throttle known).
                while conn.inflight and not conn.closed:
                    conn.space.clear()
                    await conn.space.wait()

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
            task, size, times, alone = item
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
            write_started = time.perf_counter() if times is not None else 0.0
            if type(response) is ResponseFrame:
                try:
                    if not conn.closed:
                        await self._write_frame(conn, response)
                except TornResponse as exc:
                    log.error("closing connection from %s: %s", conn.peer, exc)
                    self.stats["torn_responses"] += 1
                    self._close(conn)
                    return
                except (ConnectionError, OSError):
                    self._close(conn)
                    return
                except Exception:  # a bug must cost one connection, never hang it
                    log.exception("writing a response to %s failed; closing the connection", conn.peer)
                    self._close(conn)
                    return
                finally:
                    response.close()
            elif response is not None and not conn.closed:
                writer.write(response)
            if alone:
                conn.one_at_a_time -= 1
                conn.space.set()
            if times is not None:
                self.metrics.request_done(times, write_started, time.perf_counter())
            if not conn.closed and writer.transport.get_write_buffer_size() > 1 << 20:
                await writer.drain()

    async def _write_frame(self, conn: Connection, frame: ResponseFrame) -> None:
        """Write [bytes][file region][bytes]... in order: bytes through the
        transport, regions with sendfile(2) from the segment file straight to
        the socket, but only while the transport holds nothing back (so the
        order on the wire is the order of the pieces)."""
        # Checked before the first byte: a frame that cannot be completed is never begun.
        for region in frame.regions():
            if not region.intact():
                raise TornResponse(f"a segment was truncated under a fetch response (at {region.position})")
        writer = conn.writer
        transport = writer.transport
        for piece in frame.pieces:
            if transport.is_closing():
                return
            if type(piece) is not FileRegion:
                writer.write(piece)
                continue
            position, left = piece.position, piece.length
            while left and conn.can_sendfile:
                if transport.get_write_buffer_size():
                    await writer.drain()  # until empty (high water mark 0)
                    if transport.is_closing():
                        return
                try:
                    sent = os.sendfile(conn.socket_fd, piece.fd, position, left)
                except BlockingIOError:
                    # Socket full. One byte through the transport makes it wait
                    # for writability, and the drain above waits for that.
                    sent = len(_write_exact(writer, piece, position, 1))
                    self.stats["sendfile_waits"] += 1
                except ConnectionError:
                    raise
                except OSError as exc:  # this socket/file pair cannot sendfile: bytes from here on
                    log.warning("sendfile to %s failed (%s): sending bytes", conn.peer, exc)
                    conn.can_sendfile = False
                    self.stats["sendfile_unavailable"] += 1
                    break
                else:
                    if sent == 0:  # end of file: the segment shrank under us
                        raise TornResponse(
                            f"a segment was truncated while sending ({piece.length - left} of {piece.length} bytes)")
                    self.stats["sendfile_bytes"] += sent
                position += sent
                left -= sent
            # No sendfile (TLS, or the kernel refused it): the region's bytes
            # go through the transport a chunk at a time, each written once
            # the one before has drained, so a connection holds about one
            # chunk of a response in memory, however large the response.
            while left:
                if transport.is_closing():
                    return
                chunk = min(left, REGION_CHUNK_BYTES)
                _write_exact(writer, piece, position, chunk)
                self.stats["region_bytes_written"] += chunk
                position += chunk
                left -= chunk
                if left and transport.get_write_buffer_size() >= REGION_CHUNK_BYTES:
                    await writer.drain()


def _write_exact(writer: asyncio.StreamWriter, region: FileRegion, position: int, length: int) -> bytes:
    data = os.pread(region.fd, length, position)
    if len(data) != length:
        raise TornResponse(f"a segment was truncated under a fetch response (at {position})")
    writer.write(data)
    return data


def _discard(task: asyncio.Future) -> None:
    """Drop a request whose response will not be written, closing any file regions it holds."""
    task.cancel()
    if task.done() and not task.cancelled() and task.exception() is None:
        response = task.result()
        if type(response) is ResponseFrame:
            response.close()
