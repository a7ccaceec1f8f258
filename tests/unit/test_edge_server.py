"""The edge's framing and dispatch over real sockets, without Ray: hostile
input, version negotiation, in-order responses, limits."""
import asyncio
import socket
import struct

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.errors import ErrorCode

from core.config import BrokerConfig
from core.controller_messages import BrokerEndpoint, MetadataSnapshot
from net import registry
from net.codec import decode_response, encode_request, request_schema
from actors.edge_ports import RayActorCalls
from net.edge_service import EdgeService
from net.server import ConnectionLimits, KafkaServer


def make_server(**limit_overrides):
    config = BrokerConfig.from_sources()
    service = EdgeService(config, broker_id=1, advertised_host="127.0.0.1", advertised_port=0,
                          calls=RayActorCalls.for_config(config))
    service.metadata.update(MetadataSnapshot(1, 1, "c1", [BrokerEndpoint(1, "127.0.0.1", 1)], {}))
    limits = dict(max_request_bytes=1 << 20, max_inflight_requests=8, max_inflight_bytes=1 << 22,
                  max_connections=4, idle_timeout_s=30)
    limits.update(limit_overrides)
    return service, KafkaServer(service.dispatch, ConnectionLimits(**limits))


async def _send_recv(port, payload: bytes, read_frames=1, timeout=5.0):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frames = []
    try:
        writer.write(payload)
        await writer.drain()
        for _ in range(read_frames):
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))[0]
            frames.append(await asyncio.wait_for(reader.readexactly(size), timeout))
    except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
        frames.append(None)  # the broker closed the connection
    writer.close()
    return frames


def api_versions_request(version: int, correlation_id: int) -> bytes:
    schema = request_schema(18, version)
    kwargs = {}
    if version >= 3:
        kwargs = dict(client_software_name="test", client_software_version="1")
    return encode_request(schema(**kwargs), correlation_id)


def run(coro):
    return asyncio.run(coro)


def test_api_versions_lists_the_registry_and_produce_from_v0():
    async def go():
        service, server = make_server()
        port = await server.start("127.0.0.1", 0)
        [frame] = await _send_recv(port, api_versions_request(3, 7))
        await server.stop()
        return frame

    correlation_id, body = decode_response(18, 3, run(go()))
    assert correlation_id == 7 and body.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    expected = {h.api_key: (h.advertised_min_version, h.max_version) for h in registry.handlers().values()}
    assert advertised == expected
    assert advertised[0][0] == 0  # KAFKA-18659


def test_unknown_api_versions_version_is_answered_in_v0_layout():
    async def go():
        service, server = make_server()
        port = await server.start("127.0.0.1", 0)
        # ApiVersions v99 with a v2 header: body unreadable, so answered in v0.
        frame = struct.pack(">hhi", 18, 99, 42) + struct.pack(">h", 4) + b"test" + b"\x00\x00\x00"
        [reply] = await _send_recv(port, struct.pack(">i", len(frame)) + frame)
        await server.stop()
        return reply

    reply = run(go())
    correlation_id = struct.unpack(">i", reply[:4])[0]
    from kio.serial import entity_reader
    body, _ = entity_reader(ApiVersionsV0)(reply, 4)
    assert correlation_id == 42
    assert body.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 18 for k in body.api_keys)


HOSTILE = {
    "garbage": b"\x00\x00\x00\x10" + b"\xff" * 16,
    "negative_length": struct.pack(">i", -5) + b"abc",
    "absurd_length": struct.pack(">i", 2**31 - 1) + b"abc",
    "zero_length": struct.pack(">i", 0),
    "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "unknown_api_key": struct.pack(">i", 10) + struct.pack(">hhi", 9999, 0, 1) + b"\x00\x00",
    "unsupported_version": struct.pack(">i", 10) + struct.pack(">hhi", 3, 99, 1) + b"\x00\x00",
    "produce_v0_advertised_not_served": struct.pack(">i", 10) + struct.pack(">hhi", 0, 0, 1) + b"\x00\x00",
    "malformed_body": (lambda f: struct.pack(">i", len(f)) + f)(
        struct.pack(">hhi", 3, 12, 1) + b"\x00\x01\x00\x05\xff\xff\xff"),
    "short_header": struct.pack(">i", 3) + b"\x00\x03\x00",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_closes_connection_and_keeps_serving(name, caplog):
    async def go():
        service, server = make_server()
        port = await server.start("127.0.0.1", 0)
        [reply] = await _send_recv(port, HOSTILE[name])
        # Another client is still served.
        [ok] = await _send_recv(port, api_versions_request(3, 1))
        await server.stop()
        return reply, ok

    with caplog.at_level("WARNING"):
        reply, ok = run(go())
    assert reply is None, "the connection should have been closed"
    assert decode_response(18, 3, ok)[1].error_code == ErrorCode.none
    assert any("closing connection" in r.getMessage() for r in caplog.records)


def test_responses_in_request_order_when_handlers_finish_out_of_order():
    async def go():
        service, server = make_server()
        delays = iter([0.3, 0.0, 0.1, 0.0])

        async def slow_api_versions(ctx, request, handler):
            await asyncio.sleep(next(delays))
            return await handler(ctx, request)

        service.fault_hooks[18] = slow_api_versions
        port = await server.start("127.0.0.1", 0)
        payload = b"".join(api_versions_request(3, cid) for cid in (10, 11, 12, 13))
        frames = await _send_recv(port, payload, read_frames=4)
        await server.stop()
        return frames

    frames = run(go())
    assert [decode_response(18, 3, f)[0] for f in frames] == [10, 11, 12, 13]


def test_connection_limit():
    async def go():
        service, server = make_server(max_connections=1)
        port = await server.start("127.0.0.1", 0)
        first = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.05)
        [refused] = await _send_recv(port, api_versions_request(3, 1))
        first[1].close()
        await server.stop()
        return refused, server.stats["connections_refused"]

    refused, count = run(go())
    assert refused is None and count == 1


def test_inflight_limit_applies_backpressure_without_losing_requests():
    async def go():
        service, server = make_server(max_inflight_requests=2)
        gate = asyncio.Event()
        seen = []

        async def gated(ctx, request, handler):
            seen.append(ctx.header.correlation_id)
            await gate.wait()
            return await handler(ctx, request)

        service.fault_hooks[18] = gated
        port = await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(api_versions_request(3, cid) for cid in range(6)))
        await writer.drain()
        await asyncio.sleep(0.2)
        admitted_while_blocked = len(seen)
        gate.set()
        ids = []
        for _ in range(6):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            ids.append(decode_response(18, 3, await reader.readexactly(size))[0])
        writer.close()
        await server.stop()
        return admitted_while_blocked, ids

    admitted, ids = run(go())
    assert admitted == 2
    assert ids == list(range(6))


def test_metadata_without_topics_lists_brokers():
    async def go():
        service, server = make_server()
        port = await server.start("127.0.0.1", 0)
        schema = request_schema(3, 12)
        req = schema(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        [frame] = await _send_recv(port, encode_request(req, 5))
        await server.stop()
        return frame

    correlation_id, body = decode_response(3, 12, run(go()))
    assert correlation_id == 5
    assert [(b.node_id, b.host) for b in body.brokers] == [(1, "127.0.0.1")]
    assert body.cluster_id == "c1" and body.controller_id == 1 and body.topics == ()


def test_global_queued_bytes_budget_is_released_after_each_connection():
    async def go():
        service, server = make_server(max_queued_bytes=4096)
        port = await server.start("127.0.0.1", 0)
        for name in ("garbage", "malformed_body", "unknown_api_key"):
            await _send_recv(port, HOSTILE[name])
        frames = []
        for cid in range(20):  # more bytes in total than the budget, one at a time
            frames += await _send_recv(port, api_versions_request(3, cid))
        await asyncio.sleep(0.05)
        queued = server.queued_bytes
        await server.stop()
        return frames, queued

    frames, queued = run(go())
    assert all(f is not None for f in frames)
    assert queued == 0


def test_a_produce_request_larger_than_the_receive_staging_is_decoded():
    """Frames past net/frame_receiver.py's staging buffer arrive in their own
    buffer; the edge must decode them like any other (kio reads them)."""
    import datetime

    from net.frame_receiver import STAGING_BYTES
    from net.schema_build import nested

    schema = request_schema(0, 9)
    records = bytes(range(256)) * (4 * STAGING_BYTES // 256)  # opaque to the edge for an unknown topic
    request = schema(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
        nested(schema, "TopicProduceData")(name="no-such-topic", partition_data=(
            nested(schema, "PartitionProduceData")(index=0, records=records),)),))
    payload = encode_request(request, 11)
    assert len(payload) > 4 * STAGING_BYTES

    async def go():
        service, server = make_server()
        port = await server.start("127.0.0.1", 0)
        frames = await _send_recv(port, payload + api_versions_request(3, 12), read_frames=2)
        await server.stop()
        return frames

    produced, versions = run(go())
    assert produced is not None, "the edge closed the connection instead of answering"
    correlation_id, body = decode_response(0, 9, produced)
    assert correlation_id == 11
    [topic] = body.responses
    assert topic.name == "no-such-topic"
    assert [p.error_code for p in topic.partition_responses] == [ErrorCode.unknown_topic_or_partition]
    # and the connection goes on with the next (small) request
    assert decode_response(18, 3, versions)[0] == 12
