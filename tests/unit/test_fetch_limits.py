"""Fetch size limits (KIP-74): a response holds at most the request's
max_bytes (cut to the broker's fetch.max.bytes) across partitions and
partition_max_bytes per partition, in whole batches; the first batch of the
first non-empty partition is returned whole even when it alone is larger.
Driven through the real edge server over a socket, with leaders answering
from real logs (tests/unit/test_sendfile_fetch.py's harness)."""
import asyncio
import datetime
import errno
import os

import pytest

from core.config import BrokerConfig
from net.apis.n01_fetch import response_max_bytes
from net.codec import decode_response, encode_request, request_schema
from net.schema_build import build, nested
from tests.unit.test_sendfile_fetch import TOPIC, TOPIC_ID, exchange, make_edge

VERSION = 12


def fetch(correlation_id: int, partitions: int, max_bytes: int, partition_max_bytes: int) -> bytes:
    schema = request_schema(1, VERSION)
    topic_cls, part_cls = nested(schema, "FetchTopic"), nested(schema, "FetchPartition")
    parts = tuple(build(part_cls, partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                        log_start_offset=-1, partition_max_bytes=partition_max_bytes) for p in range(partitions))
    request = build(schema, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes,
                    isolation_level=0, session_id=0, session_epoch=-1,
                    topics=(build(topic_cls, topic=TOPIC, topic_id=TOPIC_ID, partitions=parts),),
                    forgotten_topics_data=(), rack_id="")
    return encode_request(request, correlation_id)


def serve(tmp_path, monkeypatch, requests: list[bytes], config=None, sendfile=True, value_size=4096):
    """-> (decoded responses, each partition's whole log bytes, frame sizes)."""
    async def go():
        service, server, logs = make_edge(tmp_path, partitions=3, batches_per_partition=12, value_size=value_size)
        if config is not None:
            service.config = config
        port = await server.start("127.0.0.1", 0)
        if not sendfile:
            def unavailable(*args):
                raise OSError(errno.EINVAL, "sendfile refused (test)")
            monkeypatch.setattr(os, "sendfile", unavailable)
        frames = await exchange(port, b"".join(requests), len(requests))
        held = service.region_fds.held
        await server.stop()
        service.close()
        whole = [log.read_bytes(0, 1 << 30, None, True) for log in logs]
        for log in logs:
            log.close()
        return frames, whole, held

    frames, whole, held = asyncio.run(go())
    assert None not in frames and held == 0
    return [decode_response(1, VERSION, f)[1] for f in frames], whole, [len(f) + 4 for f in frames]


def batch_sizes(records: bytes) -> list[int]:
    sizes, at = [], 0
    while at < len(records):
        size = 12 + int.from_bytes(records[at + 8:at + 12], "big")
        sizes.append(size)
        at += size
    assert at == len(records), "records end in the middle of a batch"
    return sizes


@pytest.mark.parametrize("sendfile", [True, False])
def test_response_fills_max_bytes_across_partitions_in_whole_batches(tmp_path, monkeypatch, sendfile):
    (body,), whole, _ = serve(tmp_path, monkeypatch, [fetch(1, 3, max_bytes=300_000,
                                                            partition_max_bytes=1 << 20)], sendfile=sendfile)
    records = [p.records or b"" for p in body.responses[0].partitions]
    batch = batch_sizes(whole[0])[0]
    assert 300_000 - batch < sum(map(len, records)) <= 300_000
    for got, log_bytes in zip(records, whole):
        assert log_bytes.startswith(got)  # a prefix of the log: whole batches from the fetch offset
        batch_sizes(got)
    assert len(records[0]) > len(records[1]) >= len(records[2]), "filled in request order"


def test_partition_max_bytes_holds_per_partition(tmp_path, monkeypatch):
    (body,), whole, _ = serve(tmp_path, monkeypatch, [fetch(1, 3, max_bytes=50 << 20,
                                                            partition_max_bytes=200_000)])
    for part, log_bytes in zip(body.responses[0].partitions, whole):
        assert 0 < len(part.records) <= 200_000 and log_bytes.startswith(part.records)


def test_oversized_first_batch_is_returned_whole_and_alone(tmp_path, monkeypatch):
    # Each batch is ~82 KB; the consumer asks for 1,000 bytes in all.
    (body,), whole, sizes = serve(tmp_path, monkeypatch, [fetch(1, 3, max_bytes=1000, partition_max_bytes=1000)])
    parts = body.responses[0].partitions
    first_batch = batch_sizes(whole[0])[0]
    assert first_batch > 1000
    assert parts[0].records == whole[0][:first_batch], "KIP-74: the first batch whole, so the consumer progresses"
    assert not parts[1].records and not parts[2].records
    assert sizes[0] < first_batch + 1000


def test_broker_fetch_max_bytes_caps_a_2_gib_request(tmp_path, monkeypatch):
    config = BrokerConfig.from_sources(overrides=[("fetch.max.bytes", "250000")])
    (body,), whole, sizes = serve(tmp_path, monkeypatch, [fetch(1, 3, max_bytes=(1 << 31) - 1,
                                                            partition_max_bytes=(1 << 31) - 1)], config=config)
    total = sum(len(p.records or b"") for p in body.responses[0].partitions)
    assert 0 < total <= 250_000 and sizes[0] < 250_000 + 1000
    assert sum(map(len, whole)) > 2_000_000


def test_response_max_bytes():
    assert response_max_bytes(1 << 31, 57671680) == 57671680
    assert response_max_bytes(1000, 57671680) == 1000
    assert response_max_bytes(-5, 57671680) == 0


def test_large_fetches_over_tls_are_served_from_regions_in_chunks(tmp_path):
    # TLS cannot sendfile: the regions are read a chunk at a time as the
    # response is written, and the client gets exactly the log's bytes.
    pytest.importorskip("cryptography")
    import ssl
    import struct

    from tests.security_certs import make_pki

    pki = make_pki(tmp_path / "pki")
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(str(pki["broker"]))
    client_ssl = ssl.create_default_context(cafile=str(pki["ca"]))

    async def go():
        service, server, logs = make_edge(tmp_path, partitions=3, batches_per_partition=12, value_size=4096)
        port = await server.start("127.0.0.1", 0, ssl=server_ssl)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                                       server_hostname="localhost")
        requests = [fetch(i, 3, max_bytes=50 << 20, partition_max_bytes=1 << 20) for i in range(1, 4)]
        writer.write(b"".join(requests))
        await writer.drain()
        frames = []
        for _ in requests:
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 20))[0]
            frames.append(await asyncio.wait_for(reader.readexactly(size), 20))
        writer.close()
        stats, held = dict(server.stats), service.region_fds.held
        await server.stop()
        service.close()
        whole = [log.read_bytes(0, 1 << 20, None, True) for log in logs]
        for log in logs:
            log.close()
        return frames, whole, stats, held

    frames, whole, stats, held = asyncio.run(go())
    for frame in frames:
        body = decode_response(1, VERSION, frame)[1]
        records = [p.records for p in body.responses[0].partitions]
        assert records == whole and all(len(r) > 256 * 1024 for r in records)
    assert stats.get("sendfile_bytes", 0) == 0 and held == 0, (stats, held)
    assert stats["region_bytes_written"] == 3 * sum(map(len, whole)), "every record byte from a region"


def test_pipelined_fetches_on_one_connection_are_handled_one_at_a_time(tmp_path):
    # A response may hold up to fetch.max.bytes: the edge reads a
    # connection's next fetch only once the previous one is written, so a
    # client pipelining fetches cannot make it hold many (ApiVersions between
    # them still pipelines).
    from tests.unit.test_sendfile_fetch import api_versions_request

    async def go():
        service, server, logs = make_edge(tmp_path, partitions=1, batches_per_partition=4, value_size=4096)
        leader = next(iter(service.replicas.leader_handles.values()))
        active, most = [0], [0]
        answer_of = leader.remote

        def remote(*args, **kwargs):
            inner = answer_of(*args, **kwargs)

            async def tracked():
                active[0] += 1
                most[0] = max(most[0], active[0])
                try:
                    await asyncio.sleep(0.02)
                    return await inner
                finally:
                    active[0] -= 1
            return tracked()

        leader.remote = remote
        port = await server.start("127.0.0.1", 0)
        requests = [fetch(i, 1, max_bytes=50 << 20, partition_max_bytes=1 << 20) for i in range(1, 7)]
        requests.insert(3, api_versions_request(99))
        frames = await exchange(port, b"".join(requests), len(requests))
        await server.stop()
        service.close()
        for log in logs:
            log.close()
        return frames, most[0], leader.calls

    frames, most, calls = asyncio.run(go())
    assert None not in frames and len(frames) == 7
    assert calls == 6 and most == 1, f"{most} fetches of one connection were handled at once"
