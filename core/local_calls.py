"""Direct calls between two actors on one node, over a Unix socket.

A Ray actor call costs ~1.1-1.6 ms of CPU on each side here (see
bench/PROFILE.md, "The Ray call floor"), whatever it carries. The edge makes
one per produce request and per fetch it cannot answer itself, so at a few
hundred requests a second the calls alone keep a core busy. The same call over
a Unix socket between the two processes costs a frame, a pickle and an event
loop turn on each side.

Ray still creates, places, names and restarts the actors; it also hands out
the channel: the callee's Ray method returns the socket's address and a
one-off token, and only a peer that sends that token first is served. The
socket is in Linux's abstract namespace, so nothing is left on disk when a
process dies and only processes of the same host (the same network namespace)
can reach it.

Frames are a 4-byte big-endian length and a pickle: requests
``(call id, method, args)``, answers ``(call id, status, value)`` with ``value``
the method's result (status ANSWERED) or a one-line description of the error
(FAILED). Calls on one connection run concurrently on the callee's event loop,
as Ray runs an async actor's methods, and answers go back as they finish.

A method may answer in two parts (its result a ``FollowUp``): the answer at
once (status ANSWERED_MORE_TO_COME), and a second frame for the same call id
when the follow-up is done (LATER or LATER_FAILED); the caller gets a
``TwoPartAnswer`` whose ``later`` future takes the second. This is what a
Ray call cannot do: the leader answers an acks=all append at once, so the
edge's next append is not held, and tells the edge when the high watermark
passed it, without the edge asking again (issue 27).

Limits: frame size per direction, calls in flight per connection (reading
pauses at the bound), connections per server; every call on the caller's side
has a timeout.
"""
from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import os
import pickle
import secrets
import socket
import struct
from typing import Any, Awaitable, Callable, Iterable, NamedTuple

log = logging.getLogger("raykafka.local_calls")

_LENGTH = struct.Struct(">I")
TOKEN_BYTES = 32
MAX_REQUEST_BYTES = 1 << 20
MAX_ANSWER_BYTES = 16 << 20
MAX_INFLIGHT_PER_CONNECTION = 10_000
MAX_CONNECTIONS = 64


def current_node_id() -> str | None:
    """The Ray node this process runs on; None outside a Ray worker."""
    import ray

    # Asking the runtime context outside a Ray process would start a local Ray.
    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()


_HOST_ID: str | None = None


def current_host_id() -> str:
    """Who can reach this process's abstract Unix sockets and read the files
    it names: the kernel boot and the network and mount namespaces. Ray nodes
    started on one machine (ray.cluster_utils, or several raylets) have
    different node ids but the same host id."""
    global _HOST_ID
    if _HOST_ID is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip()
            _HOST_ID = f"{boot}/{os.stat('/proc/self/ns/net').st_ino}/{os.stat('/proc/self/ns/mnt').st_ino}"
        except OSError:
            _HOST_ID = f"pid-{os.getpid()}"  # nothing to compare: this process alone
    return _HOST_ID


# Answer frames' status (an int: pickled False/True from older peers read as FAILED/ANSWERED).
FAILED = 0
ANSWERED = 1
ANSWERED_MORE_TO_COME = 2
LATER = 3
LATER_FAILED = 4


class FollowUp(NamedTuple):
    """A served method's result in two parts: ``answer`` goes back at once,
    ``later``'s result (or failure) as a second frame when it is done. Only
    for calls over a channel: the caller asked for it (a Ray call could not
    carry the second part)."""
    answer: Any
    later: Awaitable


class TwoPartAnswer(NamedTuple):
    """What a caller gets for a FollowUp: the answer, and a future of the
    second part (LocalCallFailed, LocalCallLost or asyncio.TimeoutError after
    the call's ``later_timeout_s``)."""
    answer: Any
    later: asyncio.Future


class LocalCallLost(ConnectionError):
    """The connection closed (the callee's process died or closed the server,
    or the caller closed it) before the answer came: the call may or may not
    have run."""

    def __init__(self, message: str, closed_by_caller: bool = False):
        super().__init__(message)
        self.closed_by_caller = closed_by_caller


class LocalCallTooLarge(ValueError):
    """The request would not fit in a frame (raised by call() at once, before
    anything is sent): the caller takes another way."""


class LocalCallFailed(Exception):
    """The callee's method raised; the message names the error."""


class _FrameTooLarge(Exception):
    pass


def _take_frame(buffer: bytearray, limit: int) -> bytes | None:
    """The payload of the complete frame at the head of ``buffer`` (consumed
    from it), or None while it is incomplete; _FrameTooLarge if it announces
    more than ``limit`` bytes."""
    if len(buffer) < 4:
        return None
    (length,) = _LENGTH.unpack_from(buffer, 0)
    if length > limit:
        raise _FrameTooLarge(length)
    if len(buffer) - 4 < length:
        return None
    payload = bytes(buffer[4:4 + length])
    del buffer[:4 + length]
    return payload


def _frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


class _ServerConnection(asyncio.Protocol):
    def __init__(self, server: "LocalCallServer"):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.authenticated = False
        self.inflight = 0
        self.paused = False
        self.closed = False
        self.follow_ups: set[asyncio.Future] = set()  # second parts still to send

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and hasattr(socket, "SO_PEERCRED"):
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.getuid():
                self._drop(f"peer uid {uid} is not ours")
                return
        if len(self.server.connections) >= self.server.max_connections:
            self._drop("too many connections")
            return
        self.server.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for later in list(self.follow_ups):  # nobody to send them to
            later.cancel()

    def _drop(self, why: str) -> None:
        log.warning("local call connection to %s closed: %s", self.server.name, why)
        self.closed = True
        self.buffer.clear()
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.buffer += data
        if not self.authenticated:
            if len(self.buffer) < TOKEN_BYTES:
                return
            if not hmac.compare_digest(bytes(self.buffer[:TOKEN_BYTES]), self.server.token):
                self._drop("wrong token")
                return
            del self.buffer[:TOKEN_BYTES]
            self.authenticated = True
        self._process()

    def _process(self) -> None:
        """Start the calls whose frames are complete, up to the in-flight bound;
        the rest wait in the buffer (reading pauses) until calls finish."""
        while not self.closed and self.inflight < self.server.max_inflight:
            try:
                payload = _take_frame(self.buffer, self.server.max_request_bytes)
            except _FrameTooLarge:
                self._drop("request frame over the size limit")
                return
            if payload is None:
                break
            try:
                call_id, method, args = pickle.loads(payload)
            except Exception as exc:  # noqa: BLE001 - any malformed frame ends the connection
                self._drop(f"malformed request ({type(exc).__name__})")
                return
            self._start(call_id, method, args)
        if not self.closed and self.inflight >= self.server.max_inflight and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def _start(self, call_id: int, method: str, args: tuple) -> None:
        target = self.server.methods.get(method)
        if target is None:
            self._answer(call_id, FAILED, f"no local method {method!r}")
            return
        try:
            coroutine = target(*args)
        except Exception as exc:  # noqa: BLE001 - wrong arguments: the caller's bug, answered
            self._answer(call_id, FAILED, f"{type(exc).__name__}: {exc}")
            return
        self.inflight += 1
        task = asyncio.ensure_future(coroutine)
        task.add_done_callback(lambda t, call_id=call_id: self._finished(call_id, t))

    def _finished(self, call_id: int, task: asyncio.Future) -> None:
        if task.cancelled():
            self._call_done()
            self._answer(call_id, FAILED, "cancelled")
            return
        exc = task.exception()
        if exc is not None:
            self._call_done()
            log.warning("local call to %s failed: %s: %s", self.server.name, type(exc).__name__, exc)
            self._answer(call_id, FAILED, f"{type(exc).__name__}: {exc}")
            return
        result = task.result()
        if type(result) is not FollowUp:
            self._call_done()
            self._answer(call_id, ANSWERED, result)
            return
        # The call stays in flight (counted against the bound) until its second part is sent.
        self._answer(call_id, ANSWERED_MORE_TO_COME, result.answer)
        later = asyncio.ensure_future(result.later)
        if self.closed:  # nobody to send it to
            later.cancel()
        self.follow_ups.add(later)
        later.add_done_callback(lambda t, call_id=call_id: self._follow_up_done(call_id, t))

    def _follow_up_done(self, call_id: int, later: asyncio.Future) -> None:
        self.follow_ups.discard(later)
        self._call_done()
        if later.cancelled():
            self._answer(call_id, LATER_FAILED, "cancelled")
        elif later.exception() is not None:
            exc = later.exception()
            log.warning("follow-up of a local call to %s failed: %s: %s", self.server.name, type(exc).__name__, exc)
            self._answer(call_id, LATER_FAILED, f"{type(exc).__name__}: {exc}")
        else:
            self._answer(call_id, LATER, later.result())

    def _call_done(self) -> None:
        self.inflight -= 1
        if self.paused and self.inflight < self.server.max_inflight and not self.closed:
            self.paused = False
            self.transport.resume_reading()
            self._process()

    def _answer(self, call_id: int, status: int, value: Any) -> None:
        if self.closed:
            return
        failed = LATER_FAILED if status in (LATER, LATER_FAILED) else FAILED
        try:
            payload = pickle.dumps((call_id, status, value), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result is a failed call
            payload = pickle.dumps((call_id, failed, f"answer not serialisable: {exc}"))
        if len(payload) > MAX_ANSWER_BYTES:
            payload = pickle.dumps((call_id, failed, f"answer of {len(payload)} bytes over the limit"))
        self.transport.write(_frame(payload))


class LocalCallServer:
    """Serves ``methods`` (name -> coroutine function) to peers that know the token."""

    def __init__(self, name: str, methods: dict[str, Callable], max_inflight: int = MAX_INFLIGHT_PER_CONNECTION,
                 max_connections: int = MAX_CONNECTIONS, max_request_bytes: int = MAX_REQUEST_BYTES):
        self.name = name
        self.methods = dict(methods)
        self.max_inflight = max_inflight
        self.max_connections = max_connections
        self.max_request_bytes = max_request_bytes
        self.token = secrets.token_bytes(TOKEN_BYTES)
        # Abstract namespace: no file to clean up, unreachable from other hosts.
        self.address = f"\0raykafka-{os.getpid()}-{secrets.token_hex(8)}"
        self.connections: set[_ServerConnection] = set()
        self._server: asyncio.AbstractServer | None = None

    @classmethod
    def serving(cls, name: str, target: Any, method_names: tuple[str, ...], **limits) -> "LocalCallServer":
        """A server for these coroutine methods of ``target`` (an actor)."""
        return cls(name, {method: getattr(target, method) for method in method_names}, **limits)

    async def start(self) -> tuple[str, bytes]:
        if self._server is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_unix_server(lambda: _ServerConnection(self), self.address)
        return self.address, self.token

    async def endpoint(self, scope: str = "node") -> tuple:
        """What an actor's ``local_call_endpoint()`` answers (core/local_channels.py):
        (node id, address, token, name, method names); starts serving. With
        scope "host" the first item is current_host_id() instead: callers on
        other Ray nodes of the same machine can connect too."""
        address, token = await self.start()
        where = current_host_id() if scope == "host" else current_node_id()
        return where, address, token, self.name, tuple(self.methods)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for connection in list(self.connections):
            connection.closed = True
            connection.transport.close()
        self.connections.clear()


class _ClientConnection(asyncio.Protocol):
    def __init__(self, client: "LocalCallClient"):
        self.client = client
        self.buffer = bytearray()

    def connection_lost(self, exc) -> None:
        self.client._lost("connection closed" if exc is None else str(exc))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.client.closed:
            try:
                payload = _take_frame(self.buffer, MAX_ANSWER_BYTES)
            except _FrameTooLarge:
                self.client._lost("answer frame over the size limit")
                return
            if payload is None:
                return
            try:
                call_id, ok, value = pickle.loads(payload)
            except Exception as exc:  # noqa: BLE001
                self.client._lost(f"malformed answer ({type(exc).__name__})")
                return
            self.client._answered(call_id, ok, value)


class LocalCallClient:
    """One connection to a LocalCallServer; ``call`` is safe to use concurrently."""

    def __init__(self, name: str):
        self.name = name
        self.transport: asyncio.Transport | None = None
        # call id -> (answer future, its timer, how long a second part may take)
        self._pending: dict[int, tuple[asyncio.Future, asyncio.TimerHandle, float]] = {}
        # call id -> (second part's future, its timer): calls answered in two parts
        self._later: dict[int, tuple[asyncio.Future, asyncio.TimerHandle]] = {}
        self._ids = itertools.count(1)
        self.closed = False
        self.closed_by_caller = False
        self.methods: frozenset[str] = frozenset()  # what the server said it serves, if it said

    @classmethod
    async def connect(cls, name: str, address: str, token: bytes, timeout_s: float = 5.0) -> "LocalCallClient":
        client = cls(name)
        loop = asyncio.get_running_loop()
        transport, _protocol = await asyncio.wait_for(
            loop.create_unix_connection(lambda: _ClientConnection(client), address), timeout_s)
        client.transport = transport
        transport.write(token)
        return client

    def call(self, method: str, args: Iterable[Any], timeout_s: float,
             later_timeout_s: float | None = None) -> asyncio.Future:
        """A future of the answer: the result, or LocalCallFailed (the method
        raised), LocalCallLost (the connection went), asyncio.TimeoutError.
        Raises LocalCallTooLarge at once for a request over the frame limit.
        A method that answers in two parts (FollowUp) gives a TwoPartAnswer,
        whose second part times out ``later_timeout_s`` (default ``timeout_s``)
        after the first came."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self.closed:
            future.set_exception(LocalCallLost(f"connection to {self.name} is closed"))
            return future
        call_id = next(self._ids)
        payload = pickle.dumps((call_id, method, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) > MAX_REQUEST_BYTES:
            raise LocalCallTooLarge(f"request of {len(payload)} bytes over the {MAX_REQUEST_BYTES}-byte limit")
        self._pending[call_id] = (future, loop.call_later(timeout_s, self._expire, call_id),
                                  timeout_s if later_timeout_s is None else later_timeout_s)
        self.transport.write(_frame(payload))
        return future

    def close(self) -> None:
        if not self.closed:
            self.closed_by_caller = True
        if self.transport is not None:
            self.transport.close()
        self._lost("closed by the caller")

    def _answered(self, call_id: int, status: int, value: Any) -> None:
        if status == LATER or status == LATER_FAILED:
            entry = self._later.pop(call_id, None)
            if entry is None:  # the caller's wait for it ended meanwhile
                return
            later, timer = entry
            timer.cancel()
            if not later.done():
                if status == LATER:
                    later.set_result(value)
                else:
                    later.set_exception(LocalCallFailed(f"{self.name}: {value}"))
            return
        entry = self._pending.pop(call_id, None)
        if entry is None:  # timed out meanwhile
            return
        future, timer, later_timeout_s = entry
        timer.cancel()
        if future.done():
            return
        if status == ANSWERED:
            future.set_result(value)
        elif status == ANSWERED_MORE_TO_COME:
            loop = future.get_loop()
            later = loop.create_future()
            later.add_done_callback(_retrieve)
            self._later[call_id] = (later, loop.call_later(later_timeout_s, self._expire_later, call_id))
            future.set_result(TwoPartAnswer(value, later))
        else:
            future.set_exception(LocalCallFailed(f"{self.name}: {value}"))

    def _expire(self, call_id: int) -> None:
        entry = self._pending.pop(call_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(asyncio.TimeoutError())

    def _expire_later(self, call_id: int) -> None:
        entry = self._later.pop(call_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(asyncio.TimeoutError())

    def _lost(self, why: str) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        pending, self._pending = self._pending, {}
        later, self._later = self._later, {}
        for future, timer, *_ in [*pending.values(), *later.values()]:
            timer.cancel()
            if not future.done():
                future.set_exception(LocalCallLost(f"{self.name}: {why}", self.closed_by_caller))


def _retrieve(future: asyncio.Future) -> None:
    """A second part nobody awaited (its caller answered by other means) logs no 'never retrieved'."""
    if not future.cancelled():
        future.exception()
