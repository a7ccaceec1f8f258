"""Direct channels to the actors of a node (core/local_channels.py) and
EdgeService.replicas.node_call, with a stand-in for a Ray actor handle: the direct
path and the Ray path must give the same answers and the same errors."""
from __future__ import annotations

import asyncio
import contextlib

import pytest
from kio.schema.errors import ErrorCode

from core.config import BrokerConfig
from core.local_calls import LocalCallServer
from net.actor_calls import ActorCallFailed
from actors.edge_ports import RayActorCalls
from net.edge_service import EdgeService

NODE = "node-a"


class Replica:
    """The callee: what ReplicaActor's per-request methods look like."""

    def __init__(self, node: str = NODE):
        self.node = node
        self.server: LocalCallServer | None = None
        self.endpoint_asks = 0
        self.release = asyncio.Event()

    async def read_run(self, offset, max_bytes):
        return 0, offset + 10, offset + 10, 0, [(1, [("/d/0.log", 0, max_bytes, offset, 99)])]

    async def parked(self):
        await self.release.wait()
        return "late"

    async def local_call_endpoint(self):
        self.endpoint_asks += 1
        if self.server is None:
            self.server = LocalCallServer("replica", {"read_run": self.read_run, "parked": self.parked})
        address, token = await self.server.start()
        return self.node, address, token, "replica", ("read_run", "parked")


class RayMethod:
    """handle.<method>.remote(*args) -> an awaitable, as Ray's ObjectRef is."""

    def __init__(self, handle: "Handle", name: str):
        self.handle, self.name = handle, name

    def remote(self, *args):
        self.handle.ray_calls.append(self.name)
        if self.handle.dead:
            class ActorDiedError(Exception):
                pass

            ActorDiedError.__module__ = "ray.exceptions"
            return _raise(ActorDiedError("the actor died"))
        return getattr(self.handle.replica, self.name)(*args)


async def _raise(exc):
    raise exc


class Handle:
    def __init__(self, replica: Replica):
        self.replica = replica
        self.ray_calls: list[str] = []
        self.dead = False

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return RayMethod(self, name)


def _edge(node_id: str | None = NODE, **overrides) -> EdgeService:
    config = BrokerConfig.from_sources(overrides={"raykafka.actor.call.timeout.ms": "2000", **overrides})
    return EdgeService(config, 1, "127.0.0.1", 0, calls=RayActorCalls.for_config(config, node_id))


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 20))


async def _until_channel(edge: EdgeService, handle) -> None:
    for _ in range(200):
        if edge.calls.channels.client(handle, "read_run") is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no channel opened")


@contextlib.asynccontextmanager
async def _connected():
    """(edge, replica, handle) with the edge's channel to the replica up;
    both closed afterwards."""
    edge = _edge()
    replica = Replica()
    handle = Handle(replica)
    await edge.replicas.node_call(handle, "read_run", 0, 1)
    await _until_channel(edge, handle)
    try:
        yield edge, replica, handle
    finally:
        edge.close()
        replica.server.close()


def test_first_call_goes_through_ray_then_the_channel_carries_the_same_answers():
    async def scenario():
        edge = _edge()
        replica = Replica()
        handle = Handle(replica)
        through_ray = await edge.replicas.node_call(handle, "read_run", 5, 100)
        assert handle.ray_calls == ["read_run", "local_call_endpoint"]
        await _until_channel(edge, handle)
        direct = await edge.replicas.node_call(handle, "read_run", 5, 100)
        assert direct == through_ray and type(direct[4][0]) is tuple
        assert handle.ray_calls == ["read_run", "local_call_endpoint"]  # no Ray call for the second
        counters = edge.calls.channels.counters
        assert counters["local_calls"] == 1 and counters["ray_calls"] == 1 and counters["channels_opened"] == 1
        edge.close()
        replica.server.close()

    run(scenario())


def test_methods_the_replica_does_not_serve_directly_go_through_ray():
    async def scenario():
        async with _connected() as (edge, replica, handle):
            assert await edge.replicas.node_call(handle, "local_call_endpoint") is not None
            assert handle.ray_calls.count("local_call_endpoint") == 2  # the edge's own ask, then this call

    run(scenario())


def test_a_replica_on_another_node_gets_no_channel():
    async def scenario():
        edge = _edge()
        replica = Replica(node="node-b")
        handle = Handle(replica)
        for _ in range(3):
            await edge.replicas.node_call(handle, "read_run", 0, 1)
            await asyncio.sleep(0.02)
        assert handle.ray_calls.count("read_run") == 3
        assert replica.endpoint_asks == 1  # refused once, not asked on every call
        assert edge.calls.channels.counters["channels_refused"] == 1
        edge.close()
        replica.server.close()

    run(scenario())


def test_off_by_config_or_without_a_node_every_call_goes_through_ray():
    async def scenario():
        for edge in (_edge(**{"raykafka.local.calls": "false"}), _edge(node_id=None)):
            handle = Handle(Replica())
            await edge.replicas.node_call(handle, "read_run", 0, 1)
            await asyncio.sleep(0.02)
            await edge.replicas.node_call(handle, "read_run", 0, 1)
            assert handle.ray_calls == ["read_run", "read_run"]

    run(scenario())


def test_a_lost_channel_is_a_gone_actor_and_the_next_call_uses_ray():
    async def scenario():
        async with _connected() as (edge, replica, handle):
            parked = asyncio.ensure_future(edge.replicas.node_call(handle, "parked"))
            await asyncio.sleep(0.05)
            replica.server.close()  # the replica process died (or closed its socket)
            with pytest.raises(ActorCallFailed) as failed:
                await parked
            assert failed.value.error == ErrorCode.not_leader_or_follower
            ray_calls = len(handle.ray_calls)
            assert await edge.replicas.node_call(handle, "read_run", 0, 1)  # through Ray now
            await asyncio.sleep(0.05)
            assert handle.ray_calls[ray_calls:] == ["read_run"]  # the same actor is not asked again at once
            assert replica.endpoint_asks == 1
            handle.dead = True
            with pytest.raises(ActorCallFailed) as failed:  # Ray now says the actor is gone, same code
                await edge.replicas.node_call(handle, "read_run", 0, 1)
            assert failed.value.error == ErrorCode.not_leader_or_follower

    run(scenario())


def test_a_timed_out_direct_call_is_request_timed_out():
    async def scenario():
        async with _connected() as (edge, replica, handle):
            with pytest.raises(ActorCallFailed) as failed:
                await edge.replicas.node_call(handle, "parked", timeout_s=0.05)
            assert failed.value.error == ErrorCode.request_timed_out

    run(scenario())


def test_metadata_updates_close_channels_of_replicas_no_longer_leading_here():
    async def scenario():
        async with _connected() as (edge, replica, handle):
            client = edge.calls.channels.client(handle, "read_run")
            edge.calls.channels.keep_only([handle])
            assert not client.closed
            edge.calls.channels.keep_only([])
            assert client.closed and edge.calls.channels.client(handle, "read_run") is None

    run(scenario())


def test_a_channel_forgotten_while_opening_is_closed_not_kept():
    async def scenario():
        edge = _edge()
        replica = Replica()
        handle = Handle(replica)
        await edge.replicas.node_call(handle, "read_run", 0, 1)  # starts opening the channel
        edge.calls.channels.keep_only([])  # the leader moved before the channel was up
        for _ in range(100):
            await asyncio.sleep(0.01)
            if replica.server is not None and not replica.server.connections and not edge.calls.channels._opening:
                break
        assert replica.endpoint_asks == 1
        assert not edge.calls.channels._clients and not edge.calls.channels._opening
        assert not replica.server.connections  # the connection it got was closed again
        edge.close()
        replica.server.close()

    run(scenario())


def test_a_request_too_large_for_a_frame_goes_through_ray(monkeypatch):
    import core.local_calls as local_calls

    monkeypatch.setattr(local_calls, "MAX_REQUEST_BYTES", 4096)

    async def scenario():
        async with _connected() as (edge, replica, handle):
            before = len(handle.ray_calls)
            assert await edge.replicas.node_call(handle, "read_run", 0, 100) is not None  # small: direct
            assert len(handle.ray_calls) == before
            big = await edge.replicas.node_call(handle, "read_run", 0, b"x" * 10_000)  # pickled > 4096 bytes
            assert handle.ray_calls[before:] == ["read_run"] and big[4][0][1][0][2] == b"x" * 10_000

    run(scenario())
