"""Receiving Kafka's length-prefixed request frames without copying them around.

asyncio's StreamReader copies every received byte twice more than the
kernel does: the transport reads into a fresh ``bytes``, ``feed_data``
appends it to the reader's buffer, and ``readexactly`` copies the frame out
and shifts what is left to the front. A produce request of several hundred
KiB paid all three, plus a pause and a resume of reading for every 128 KiB
past the reader's limit (bench/PROFILE.md: ``readexactly`` and
``feed_data`` were the edge's top two Python frames).

``FrameReceiver`` is a buffered protocol (``recv_into``): small frames
arrive, several at a time, in one fixed staging buffer and are sliced out
of it; once a frame is known to be larger than what the staging buffer
holds, the rest of it is received straight into a buffer of the frame's own
size, which the handler then gets as it is. The kernel's copy is the only
one.

Memory per connection is bounded: the staging buffer, plus the frame being
received (whose size the server checks before asking for its body). When
the staging buffer is full and nobody reads, reading pauses, as
StreamReader does past its limit.
"""
from __future__ import annotations

import asyncio
import struct
from asyncio.streams import FlowControlMixin  # drain() support for StreamWriter
from typing import Callable

_SIZE = struct.Struct(">i")

STAGING_BYTES = 64 * 1024


class FrameReceiver(FlowControlMixin, asyncio.BufferedProtocol):
    """One connection's receiving side; ``connected(receiver, writer)`` is
    called once the transport is up (the server starts its task there)."""

    def __init__(self, connected: Callable[["FrameReceiver", asyncio.StreamWriter], None],
                 staging_bytes: int = STAGING_BYTES):
        super().__init__()
        self._connected = connected
        self._staging = bytearray(staging_bytes)
        self._staging_view = memoryview(self._staging)
        self._start = 0  # unread bytes are _staging[_start:_end]
        self._end = 0
        self._body: memoryview | None = None  # a large frame being received into its own buffer
        self._body_filled = 0
        self._waiter: asyncio.Future | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_data = 0.0  # loop time of the last bytes received (for the inactivity timeout)
        self._eof = False
        self._error: BaseException | None = None
        self._reading_paused = False
        self.transport: asyncio.Transport | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._closed = self._loop.create_future()

    # ---- asyncio protocol ------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        # Held here for the connection's life: a StreamWriter closes its
        # transport when it is garbage collected.
        self.writer = asyncio.StreamWriter(transport, self, None, asyncio.get_running_loop())
        self._connected(self, self.writer)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._body_filled:]
        if self._end == len(self._staging):
            self._compact()
        return self._staging_view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._last_data = self._loop.time()
        if self._body is not None:
            # The reader wakes once, when the frame is complete; until it takes
            # it there is nowhere to put more bytes (get_buffer must not
            # return an empty buffer).
            self._body_filled += nbytes
            if self._body_filled == len(self._body):
                self._pause()
                self._wake()
            return
        self._end += nbytes
        self._wake()
        if self._end == len(self._staging) and self._start == 0:
            # Full and unread: wait for the reader, as StreamReader does at its limit.
            self._pause()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return True  # keep the write side open: in-flight responses still go out

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)  # wakes drain()
        if exc is not None:
            self._error = exc
        self._eof = True
        self._wake()
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream) -> asyncio.Future:  # StreamWriter.wait_closed()
        return self._closed

    # ---- reading ---------------------------------------------------------------------
    async def read_size(self, timeout_s: float) -> int:
        """The next frame's size prefix; asyncio.TimeoutError after
        ``timeout_s`` without one, IncompleteReadError at end of stream."""
        while self._end - self._start < 4:
            await self._wait_for_data(timeout_s)
        (size,) = _SIZE.unpack_from(self._staging, self._start)
        self._start += 4
        return size

    async def read_body(self, size: int, timeout_s: float | None = None) -> bytes | memoryview:
        """The ``size`` bytes after the prefix (the server has checked
        ``size``); asyncio.TimeoutError when no byte of it arrives for
        ``timeout_s``."""
        if size <= len(self._staging):
            while self._end - self._start < size:
                if self._end == len(self._staging):
                    self._compact()
                await self._wait_for_data(timeout_s)
            frame = bytes(self._staging_view[self._start:self._start + size])
            self._start += size
            self._resume()
            return frame
        have = self._end - self._start
        body = bytearray(size)
        body[:have] = self._staging_view[self._start:self._end]
        self._start = self._end = 0
        self._body, self._body_filled = memoryview(body), have
        try:
            self._resume()
            while self._body_filled < size:
                await self._wait_for_data(timeout_s)
        finally:
            self._body = None
        # Read-only, as a received frame is: kio's decoders refuse writable buffers.
        return memoryview(body).toreadonly()

    # ---- internals -------------------------------------------------------------------
    def _compact(self) -> None:
        unread = self._end - self._start
        if self._start:
            # Through a copy: a slice assignment from a view of the same
            # buffer is a memcpy of overlapping bytes.
            self._staging[:unread] = bytes(self._staging_view[self._start:self._end])
            self._start, self._end = 0, unread

    def _pause(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = False
            self.transport.resume_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait_for_data(self, timeout_s: float | None) -> None:
        if self._error is not None:
            raise ConnectionResetError(str(self._error)) from self._error
        if self._eof:
            partial = bytes(self._staging_view[self._start:self._end])
            raise asyncio.IncompleteReadError(partial, None)
        if self._end == len(self._staging) and self._start == 0 and self._body is None:
            raise RuntimeError("frame receiver: staging buffer full while waiting for more")
        self._resume()
        loop = self._loop
        self._waiter = waiter = loop.create_future()
        if timeout_s is not None:
            self._last_data = loop.time()
            self._idle_timer = loop.call_later(timeout_s, self._check_idle, waiter, timeout_s)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None

    def _check_idle(self, waiter: asyncio.Future, timeout_s: float) -> None:
        """TimeoutError for the waiter after ``timeout_s`` without a byte;
        bytes that did not complete what it waits for only move the deadline."""
        if waiter.done():
            return
        idle = self._loop.time() - self._last_data
        if idle >= timeout_s:
            waiter.set_exception(asyncio.TimeoutError())
        else:
            self._idle_timer = self._loop.call_later(timeout_s - idle, self._check_idle, waiter, timeout_s)
