"""core.local_calls: direct calls over a Unix socket, without Ray."""
from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

import pytest

from core.local_calls import (FollowUp, LocalCallClient, LocalCallFailed, LocalCallLost, LocalCallServer,
                              TOKEN_BYTES, TwoPartAnswer)


class Target:
    def __init__(self):
        self.running = 0
        self.most_running = 0
        self.release = asyncio.Event()

    async def echo(self, *args):
        return args

    async def slow(self, value):
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return value

    async def fail(self):
        raise RuntimeError("broken on purpose")

    async def big(self, n):
        return b"x" * n

    async def two_part(self, first, fail_later=False):
        async def later():
            await self.release.wait()
            if fail_later:
                raise RuntimeError("second part broke")
            return ("later", first)

        return FollowUp(("first", first), later())


def _methods(target: Target) -> dict:
    return {name: getattr(target, name) for name in ("echo", "slow", "fail", "big", "two_part")}


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 20))


@contextlib.asynccontextmanager
async def _pair(target: Target, client_token: bytes | None = None, **server_options):
    """(server, client) connected to each other (the client sending
    ``client_token`` instead of the server's, if given); both closed afterwards."""
    server = LocalCallServer("target", _methods(target), **server_options)
    address, token = await server.start()
    client = await LocalCallClient.connect("target", address, client_token or token)
    try:
        yield server, client
    finally:
        client.close()
        server.close()


def test_results_keep_their_types():
    async def scenario():
        async with _pair(Target()) as (server, client):
            value = (1, None, "s", b"\x00\xff", [(2, 3)], {"k": (4,)})
            assert await client.call("echo", value, 5) == value
            answer = await client.call("echo", ([("path", 0, 10, 5, 7)],), 5)
            assert answer == ([("path", 0, 10, 5, 7)],) and type(answer[0][0]) is tuple

    run(scenario())


def test_calls_run_concurrently_and_answer_as_they_finish():
    async def scenario():
        target = Target()
        async with _pair(target) as (server, client):
            slow = client.call("slow", ("late",), 5)
            fast = await client.call("echo", ("early",), 5)
            assert fast == ("early",) and not slow.done()  # the parked call did not hold the other up
            target.release.set()
            assert await slow == "late"

    run(scenario())


def test_a_raising_method_fails_only_its_call():
    async def scenario():
        async with _pair(Target()) as (server, client):
            with pytest.raises(LocalCallFailed, match="RuntimeError: broken on purpose"):
                await client.call("fail", (), 5)
            with pytest.raises(LocalCallFailed, match="no local method"):
                await client.call("nope", (), 5)
            with pytest.raises(LocalCallFailed, match="TypeError"):
                await client.call("slow", (1, 2, 3), 5)
            assert await client.call("echo", (1,), 5) == (1,)  # the connection still serves

    run(scenario())


def test_timeout_then_the_late_answer_is_ignored():
    async def scenario():
        target = Target()
        async with _pair(target) as (server, client):
            with pytest.raises(asyncio.TimeoutError):
                await client.call("slow", ("late",), 0.05)
            target.release.set()
            await asyncio.sleep(0.05)
            assert await client.call("echo", (2,), 5) == (2,)
            assert not client._pending

    run(scenario())


def test_server_close_fails_pending_calls_and_later_ones():
    async def scenario():
        async with _pair(Target()) as (server, client):
            pending = client.call("slow", (1,), 5)
            await asyncio.sleep(0.05)
            server.close()
            with pytest.raises(LocalCallLost):
                await pending
            assert client.closed
            with pytest.raises(LocalCallLost):
                await client.call("echo", (1,), 5)

    run(scenario())


def test_wrong_token_is_refused():
    async def scenario():
        async with _pair(Target(), client_token=bytes(TOKEN_BYTES)) as (server, client):
            with pytest.raises(LocalCallLost):
                await client.call("echo", (1,), 5)
            assert not server.connections

    run(scenario())


def test_oversized_or_malformed_request_closes_the_connection():
    async def scenario():
        server = LocalCallServer("target", _methods(Target()), max_request_bytes=1024)
        address, token = await server.start()
        for frame in (struct.pack(">I", 4096) + b"\x00" * 16, struct.pack(">I", 5) + b"junk!"):
            reader, writer = await asyncio.open_unix_connection(address)
            writer.write(token + frame)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
            writer.close()
        client = await LocalCallClient.connect("target", address, token)  # the server goes on serving
        assert await client.call("echo", (3,), 5) == (3,)
        client.close()
        server.close()

    run(scenario())


def test_reading_pauses_at_the_inflight_bound():
    async def scenario():
        target = Target()
        async with _pair(target, max_inflight=2) as (server, client):
            calls = [client.call("slow", (i,), 5) for i in range(6)]
            await asyncio.sleep(0.1)
            assert target.running == 2
            target.release.set()
            assert await asyncio.gather(*calls) == list(range(6))
            assert target.most_running == 2

    run(scenario())


def test_answer_over_the_limit_is_a_failed_call(monkeypatch):
    import core.local_calls as local_calls

    monkeypatch.setattr(local_calls, "MAX_ANSWER_BYTES", 1000)

    async def scenario():
        async with _pair(Target()) as (server, client):
            assert await client.call("big", (100,), 5) == b"x" * 100
            with pytest.raises(LocalCallFailed, match="over the limit"):
                await client.call("big", (5000,), 5)

    run(scenario())


def test_the_socket_is_abstract_and_leaves_no_file():
    async def scenario():
        server = LocalCallServer("target", _methods(Target()))
        address, _token = await server.start()
        assert address.startswith("\0")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(address)
        probe.close()
        server.close()

    run(scenario())


def test_a_two_part_answer_comes_at_once_and_its_second_part_later():
    async def scenario():
        target = Target()
        async with _pair(target, max_inflight=2) as (server, client):
            answer = await client.call("two_part", (7,), 5, later_timeout_s=5)
            assert type(answer) is TwoPartAnswer and answer.answer == ("first", 7)
            assert not answer.later.done()
            # The second part still counts against the bound; other calls are served meanwhile.
            assert await client.call("echo", (1,), 5) == (1,)
            target.release.set()
            assert await answer.later == ("later", 7)
            assert await client.call("echo", (2,), 5) == (2,)

    run(scenario())


def test_a_second_part_fails_times_out_or_is_lost_with_the_connection():
    async def scenario():
        target = Target()
        async with _pair(target) as (server, client):
            failing = await client.call("two_part", (1, True), 5)
            expiring = await client.call("two_part", (2,), 5, later_timeout_s=0.05)
            with pytest.raises(asyncio.TimeoutError):
                await expiring.later
            target.release.set()
            with pytest.raises(LocalCallFailed, match="second part broke"):
                await failing.later
            target.release.clear()
            lost = await client.call("two_part", (3,), 5)
            server.close()
            with pytest.raises(LocalCallLost):
                await asyncio.wait_for(lost.later, 5)
            assert not server.connections

    run(scenario())
