"""net/frame_receiver.py: frames out of recv_into, with no copy but the kernel's
for large ones, bounded staging, back-pressure, end of stream and timeouts."""
import asyncio
import os
import socket
import struct

import pytest

from net.frame_receiver import FrameReceiver


class StubTransport:
    """Records what the receiver asks of its transport (pure logic tests)."""

    def __init__(self):
        self.paused = False
        self.pauses = 0
        self.closing = False

    def pause_reading(self):
        assert not self.paused
        self.paused = True
        self.pauses += 1

    def resume_reading(self):
        assert self.paused
        self.paused = False

    def is_closing(self):
        return self.closing

    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def close(self):
        self.closing = True


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def make_receiver(staging=64):
    writers = []
    r = FrameReceiver(lambda rec, w: writers.append(w), staging_bytes=staging)
    t = StubTransport()
    r.connection_made(t)
    assert len(writers) == 1
    return r, t


def deliver(r, data: bytes, chunk: int | None = None):
    """What the transport does: recv_into get_buffer(), then buffer_updated(n)."""
    pos = 0
    while pos < len(data):
        buf = r.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, chunk or len(data))
        buf[:n] = data[pos:pos + n]
        r.buffer_updated(n)
        pos += n
    return pos


async def read_frame(r, timeout=1.0):
    size = await r.read_size(timeout)
    return await r.read_body(size)


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_pipelined_small_frames_come_out_in_order(chunk):
    async def run():
        r, t = make_receiver(staging=64)
        bodies = [bytes([i]) * (5 + i) for i in range(6)]
        wire = b"".join(framed(b) for b in bodies)
        got = []

        async def reader():
            for _ in bodies:
                got.append(await read_frame(r))

        task = asyncio.ensure_future(reader())
        await asyncio.sleep(0)
        pos = 0
        while pos < len(wire):  # feed while the reader drains, as the loop would
            if t.paused:
                await asyncio.sleep(0)
                continue
            step = min(chunk or len(wire), len(wire) - pos)
            buf = r.get_buffer(-1)
            step = min(step, len(buf))
            buf[:step] = wire[pos:pos + step]
            r.buffer_updated(step)
            pos += step
            await asyncio.sleep(0)
        await asyncio.wait_for(task, 2)
        assert got == bodies
        assert all(type(b) is bytes for b in got)

    asyncio.run(run())


def test_a_large_frame_is_received_into_its_own_buffer():
    async def run():
        r, t = make_receiver(staging=64)
        body = os.urandom(1000)
        wire = framed(body)
        deliver(r, wire[:40])  # the prefix and the first 36 bytes land in staging
        size = await r.read_size(1)
        assert size == 1000
        task = asyncio.ensure_future(r.read_body(size))
        await asyncio.sleep(0)
        # From now on the transport receives into the frame's buffer: the rest fits in one go.
        buf = r.get_buffer(-1)
        assert len(buf) == 1000 - 36
        buf[:] = wire[40:]
        r.buffer_updated(len(buf))
        assert t.paused  # complete and not yet taken: nowhere to put more bytes
        frame = await asyncio.wait_for(task, 1)
        # a read-only view of the frame's own buffer: no copy, and what kio accepts
        assert type(frame) is memoryview and frame.readonly and frame == body
        # The next frame goes to staging again, and reading resumes once someone waits.
        nxt = asyncio.ensure_future(read_frame(r))
        await asyncio.sleep(0)
        assert not t.paused
        deliver(r, framed(b"after"))
        assert await asyncio.wait_for(nxt, 1) == b"after"

    asyncio.run(run())


def test_reading_pauses_when_staging_is_full_and_resumes_when_read():
    async def run():
        r, t = make_receiver(staging=32)
        wire = b"".join(framed(b"x" * 12) for _ in range(4))  # 64 bytes, twice the staging
        pos = deliver(r, wire[:32])
        assert t.paused and t.pauses == 1
        assert await read_frame(r) == b"x" * 12
        assert not t.paused
        pos += deliver(r, wire[pos:pos + 16])  # the room the first frame left
        assert t.paused and t.pauses == 2
        assert await read_frame(r) == b"x" * 12
        assert await read_frame(r) == b"x" * 12
        deliver(r, wire[pos:])
        assert await read_frame(r) == b"x" * 12
        assert pos + 16 == len(wire)

    asyncio.run(run())


def test_end_of_stream_between_and_inside_frames():
    async def run():
        r, _ = make_receiver()
        deliver(r, framed(b"whole") + b"\x00\x00")
        assert r.eof_received() is True  # the write side stays open for responses
        assert await read_frame(r) == b"whole"
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await r.read_size(1)
        assert info.value.partial == b"\x00\x00"

        r2, _ = make_receiver(staging=16)
        deliver(r2, framed(b"y" * 40)[:16])
        size = await r2.read_size(1)
        task = asyncio.ensure_future(r2.read_body(size))
        await asyncio.sleep(0)
        r2.connection_lost(None)
        with pytest.raises(asyncio.IncompleteReadError):
            await asyncio.wait_for(task, 1)

    asyncio.run(run())


def test_a_reset_connection_raises_connection_error():
    async def run():
        r, _ = make_receiver()
        task = asyncio.ensure_future(r.read_size(5))
        await asyncio.sleep(0)
        r.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(task, 1)
        with pytest.raises(ConnectionError):
            await r.read_size(1)

    asyncio.run(run())


def test_read_size_times_out_when_idle():
    async def run():
        r, _ = make_receiver()
        with pytest.raises(asyncio.TimeoutError):
            await r.read_size(0.05)
        deliver(r, framed(b"late"))  # the receiver is still usable
        assert await read_frame(r) == b"late"

    asyncio.run(run())


def test_over_a_real_socket_with_a_mix_of_sizes():
    async def run():
        frames: list = []
        done = asyncio.Event()
        expected = [os.urandom(n) for n in (1, 100, 70_000, 5, 300_000, 64 * 1024, 64 * 1024 + 1, 9)]

        async def serve(receiver):
            try:
                while True:
                    frames.append(await read_frame(receiver, timeout=5))
            except asyncio.IncompleteReadError:
                done.set()

        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: FrameReceiver(lambda rec, _writer: asyncio.ensure_future(serve(rec)), staging_bytes=64 * 1024),
            "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = socket.create_connection(("127.0.0.1", port))
        wire = b"".join(framed(b) for b in expected)
        await loop.run_in_executor(None, sock.sendall, wire)
        sock.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(done.wait(), 10)
        sock.close()
        server.close()
        await server.wait_closed()
        assert [bytes(f) for f in frames] == expected

    asyncio.run(run())


def test_read_body_times_out_only_without_progress():
    async def run():
        r, _ = make_receiver(staging=16)
        deliver(r, framed(b"z" * 100)[:10])
        size = await r.read_size(1)
        task = asyncio.ensure_future(r.read_body(size, timeout_s=0.2))
        wire = framed(b"z" * 100)[10:]
        for i in range(0, 60, 10):  # a slow sender: 10 bytes every 0.1 s, 0.6 s in all
            await asyncio.sleep(0.1)
            deliver(r, wire[i:i + 10])
        assert not task.done()
        with pytest.raises(asyncio.TimeoutError):  # then nothing for longer than the timeout
            await asyncio.wait_for(task, 2)

    asyncio.run(run())


@pytest.mark.parametrize("seed", range(5))
def test_random_frames_in_random_chunks_come_out_intact(seed):
    """Frames that straddle the staging buffer's end (compaction), fill it,
    or exceed it, fed in chunks of any size while the reader drains."""
    import random

    rnd = random.Random(seed)

    async def run():
        r, t = make_receiver(staging=256)
        bodies = [rnd.randbytes(rnd.choice([0, 1, 3, 100, 250, 252, 256, 257, 700, 3000])) for _ in range(200)]
        wire = b"".join(framed(b) for b in bodies)
        got = []

        async def reader():
            for _ in bodies:
                got.append(bytes(await read_frame(r)))

        task = asyncio.ensure_future(reader())
        pos = 0
        while pos < len(wire):
            await asyncio.sleep(0)
            if t.paused:
                continue
            buf = r.get_buffer(-1)
            n = min(len(buf), len(wire) - pos, rnd.randint(1, 600))
            buf[:n] = wire[pos:pos + n]
            r.buffer_updated(n)
            pos += n
        await asyncio.wait_for(task, 5)
        assert got == bodies

    asyncio.run(run())
