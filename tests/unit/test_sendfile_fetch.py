"""Zero-copy Fetch: record bytes go from segment files to the socket with
sendfile, in frames byte-identical to what kio encodes with the bytes inline;
swapped or truncated files are never served; without sendfile, bytes."""
import asyncio
import datetime
import errno
import os
import socket
import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from core.config import BrokerConfig
from core.controller_messages import BrokerEndpoint, MetadataSnapshot, PartitionSnapshot, TopicSnapshot
from core.replica_messages import FileSlice, ReadResult, ReadRun
from net.codec import decode_response, encode_request, encode_response, request_schema, response_schema
from actors.edge_ports import RayActorCalls
from net.edge_service import EdgeService
from net.file_region import FileRecords, FileRegion, ResponseFrame, SplicedResponse, compact_length
from net.schema_build import nested
from net.server import ConnectionLimits, KafkaServer
from storage.log import Log
from storage.records import SimpleRecord, build_batch

TOPIC = "zc"
TOPIC_ID = uuid.UUID("00000000-0000-0000-0000-00000000abcd")


def batch_at(base_offset: int, size: int = 64) -> bytes:
    return struct.pack(">q", base_offset) + b"\x07" * (size - 8)


# ---- splicing: the frame equals kio's encoding with the bytes inline -------------------------

def fetch_response(version: int, records_per_partition: list) -> object:
    schema = response_schema(1, version)
    topic_cls, part_cls = nested(schema, "FetchableTopicResponse"), nested(schema, "PartitionData")
    from net.schema_build import build

    parts = tuple(build(part_cls, partition_index=i, error_code=ErrorCode.none, high_watermark=10 + i, last_stable_offset=10 + i,
                        log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1, records=r)
                  for i, r in enumerate(records_per_partition))
    topics = (build(topic_cls, topic=TOPIC, topic_id=TOPIC_ID, partitions=parts[:2]),
              build(topic_cls, topic=TOPIC + "2", topic_id=TOPIC_ID, partitions=parts[2:]))
    return build(schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                 responses=topics)


@pytest.mark.parametrize("version", [4, 11, 12, 16, 18])
def test_spliced_frame_is_byte_identical_to_inline_encoding(tmp_path, version):
    # Lengths that cross the compact varint's 1/2/3-byte boundaries.
    blobs = [batch_at(0, 100) + batch_at(1, 26), batch_at(7, 20000), b"", batch_at(9, 300) + batch_at(11, 140)]
    path = tmp_path / "seg.log"
    path.write_bytes(b"".join(blobs))
    fd = os.open(path, os.O_RDONLY)
    try:
        splice = SplicedResponse()
        values, position = [], 0
        for i, blob in enumerate(blobs):
            if not blob:
                values.append(blob)
                continue
            # Partition 3 mixes a region with inline bytes (a small slice read as bytes).
            pieces = [FileRegion(os.dup(fd), position, len(blob) - 140 if i == 3 else len(blob),
                                 struct.unpack_from(">q", blob)[0])]
            if i == 3:
                pieces.append(blob[-140:])
            values.append(splice.placeholder(FileRecords(pieces)))
            position += len(blob)
        splice.response = fetch_response(version, values)
        frame = splice.to_frame(correlation_id=77)
        expected = encode_response(fetch_response(version, blobs), 77)
        assert frame.size == len(expected)
        assert frame.to_bytes() == expected
        assert len(frame.regions()) == 3
        correlation_id, body = decode_response(1, version, expected[4:])
        assert correlation_id == 77 and body.responses[0].partitions[1].records == blobs[1]
        frame.close()
        assert all(region.fd == -1 for region in frame.regions())
    finally:
        os.close(fd)


def test_compact_length_is_an_unsigned_varint_of_length_plus_one():
    assert compact_length(0) == b"\x01"
    assert compact_length(126) == b"\x7f"
    assert compact_length(127) == b"\x80\x01"
    assert compact_length(1 << 20) == b"\x81\x80\x40"


# ---- the edge: regions only from the very file the leader named ----------------------------

def test_region_from_a_swapped_file_is_refused_and_a_checked_region_survives_eviction(tmp_path):
    edge = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    path = tmp_path / "00000000000000000000.log"
    original = batch_at(580, 70000) + batch_at(590, 70000)
    path.write_bytes(original)
    inode = os.stat(path).st_ino
    records = edge.read_records([FileSlice(str(path), 0, len(original), 580, inode)], zero_copy=True)
    assert type(records) is FileRecords and len(records) == len(original)
    assert edge.region_fds.held == 1

    # The cleaner swaps a new file in; the edge's fd cache forgets the path.
    swapped = tmp_path / "swap"
    swapped.write_bytes(batch_at(580, 70000) + batch_at(605, 9))
    os.replace(swapped, path)
    edge.forget_fd(str(path))
    # The region still reads the file that was checked...
    assert records.to_bytes() == original and records.pieces[0].intact()
    # ...and a fresh read of the old inode is refused: the caller asks the leader again.
    with pytest.raises(FileNotFoundError):
        edge.read_records([FileSlice(str(path), 0, len(original), 580, inode)], zero_copy=True)
    new_inode = os.stat(path).st_ino
    with pytest.raises(FileNotFoundError):  # not the batch the leader named
        edge.read_records([FileSlice(str(path), 70000, 9, 999, new_inode)], zero_copy=True)
    records.close()
    assert edge.region_fds.held == 0
    edge.close()


def test_small_slices_and_an_exhausted_fd_budget_give_bytes(tmp_path):
    edge = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    path = tmp_path / "00000000000000000000.log"
    data = batch_at(0, 100) + batch_at(1, 200000)
    path.write_bytes(data)
    inode = os.stat(path).st_ino
    slices = [FileSlice(str(path), 0, 100, 0, inode), FileSlice(str(path), 100, 200000, 1, inode)]
    mixed = edge.read_records(slices, zero_copy=True)
    assert [type(p) for p in mixed.pieces] == [bytes, FileRegion] and mixed.to_bytes() == data
    edge.region_fds.limit = 1
    assert edge.read_records(slices, zero_copy=True) == data  # budget spent: plain bytes
    assert edge.read_records(slices, zero_copy=False) == data
    mixed.close()
    assert edge.region_fds.held == 0
    edge.close()


# ---- the server: in-order frames over a real socket, sendfile or not -----------------------

class FakeLeader:
    """A leader replica's `read_run`, answered from a real Log as the replica actor does."""

    def __init__(self, log: Log):
        self.log = log
        self.read_run = self
        self.calls = 0

    def remote(self, fetch_offset, max_bytes, isolation_level, current_leader_epoch, min_bytes=0, max_wait_ms=0,
               count=1):
        # These tests' fetches ask for data already there (or none at all with
        # max_wait 0), so the parked wait of the real replica never applies.
        self.calls += 1

        async def answer():
            end = self.log.log_end_offset
            runs, offset = [], fetch_offset
            while len(runs) < count and offset < end:
                found = self.log.read_with_inodes(offset, max_bytes, end, min_one_batch=True)
                runs.append(ReadRun(offset, [FileSlice(s.path, s.position, s.length, s.base_offset, ino)
                                             for s, ino in found]))
                offset = found[-1][0].next_offset
            return ReadResult(0, end, end, 0, runs)
        return answer()


def make_edge(tmp_path, partitions: int, batches_per_partition: int, value_size: int):
    service = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    service.metadata.update(MetadataSnapshot(1, 1, "c1", [BrokerEndpoint(1, "127.0.0.1", 1)], {
        TOPIC: TopicSnapshot(str(TOPIC_ID), {p: PartitionSnapshot(1, 0, [1], [1]) for p in range(partitions)})}))
    logs = []
    for p in range(partitions):
        log = Log(str(tmp_path / f"{TOPIC}-{p}"))
        for b in range(batches_per_partition):
            values = [SimpleRecord(key=b"%d" % i, value=bytes([p, b]) * (value_size // 2)) for i in range(20)]
            log.append_as_leader(build_batch(values, 0), 0)
        logs.append(log)
    service.replicas.leader_handles = {(TOPIC, p): FakeLeader(log) for p, log in enumerate(logs)}
    limits = ConnectionLimits(max_request_bytes=1 << 20, max_inflight_requests=8, max_inflight_bytes=1 << 22,
                              max_connections=4, idle_timeout_s=30)
    return service, KafkaServer(service.dispatch, limits), logs


def fetch_request(version: int, partitions: int, correlation_id: int, partition_max_bytes=1 << 20,
                  fetch_offset: int = 0, max_wait_ms: int = 0) -> bytes:
    schema = request_schema(1, version)
    topic_cls, part_cls = nested(schema, "FetchTopic"), nested(schema, "FetchPartition")
    from net.schema_build import build

    parts = tuple(build(part_cls, partition=p, current_leader_epoch=-1, fetch_offset=fetch_offset, last_fetched_epoch=-1,
                        log_start_offset=-1, partition_max_bytes=partition_max_bytes) for p in range(partitions))
    topic = build(topic_cls, topic=TOPIC, topic_id=TOPIC_ID, partitions=parts)
    request = build(schema, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=50 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,), forgotten_topics_data=(),
                    rack_id="")
    return encode_request(request, correlation_id)


def api_versions_request(correlation_id: int) -> bytes:
    return encode_request(request_schema(18, 0)(), correlation_id)


async def exchange(port: int, payload: bytes, frames: int) -> list:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    try:
        writer.write(payload)
        await writer.drain()
        for _ in range(frames):
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
            out.append(await asyncio.wait_for(reader.readexactly(size), 10))
    except (asyncio.IncompleteReadError, ConnectionResetError):
        out.append(None)  # closed by the broker
    writer.close()
    return out


@pytest.mark.parametrize("version", [11, 16])
@pytest.mark.parametrize("sendfile", [True, False])
def test_pipelined_fetches_are_served_in_order_with_exact_records(tmp_path, monkeypatch, version, sendfile):
    async def go():
        service, server, logs = make_edge(tmp_path, partitions=3, batches_per_partition=12, value_size=4096)
        port = await server.start("127.0.0.1", 0)
        if not sendfile:  # a socket/file pair the kernel cannot sendfile between: the same frames, as bytes
            def unavailable(*args):
                raise OSError(errno.EINVAL, "sendfile refused (test)")
            monkeypatch.setattr(os, "sendfile", unavailable)
        # Fetch, ApiVersions, Fetch with a smaller partition budget, pipelined on one connection.
        payload = (fetch_request(version, 3, 1) + api_versions_request(2)
                   + fetch_request(version, 3, 3, partition_max_bytes=100_000))
        frames = await exchange(port, payload, 3)
        stats = dict(server.stats)
        held = service.region_fds.held
        await server.stop()
        service.close()
        expected = ([log.read_bytes(0, 1 << 20, None, True) for log in logs],
                    [log.read_bytes(0, 100_000, None, True) for log in logs])
        for log in logs:
            log.close()
        return (frames, stats, held) + expected

    frames, stats, held, whole, limited = asyncio.run(go())
    assert None not in frames
    for frame, correlation_id, expected in ((frames[0], 1, whole), (frames[2], 3, limited)):
        got_id, body = decode_response(1, version, frame)
        assert got_id == correlation_id
        records = [p.records for p in body.responses[0].partitions]
        assert records == expected and all(len(r) > 65536 for r in records)
    assert decode_response(18, 0, frames[1])[0] == 2
    if sendfile:
        assert stats["sendfile_bytes"] == sum(map(len, whole)) + sum(map(len, limited))
    else:
        assert stats.get("sendfile_bytes", 0) == 0 and stats["sendfile_unavailable"] == 1
    assert held == 0, "every region's fd is closed once written"


def test_a_slow_reader_makes_sendfile_wait_for_the_socket_without_reordering(tmp_path):
    async def go():
        service, server, logs = make_edge(tmp_path, partitions=3, batches_per_partition=12, value_size=4096)
        port = await server.start("127.0.0.1", 0)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills the socket fast
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(fetch_request(16, 3, 1) + api_versions_request(2) + fetch_request(16, 3, 3))
        await writer.drain()
        await asyncio.sleep(0.3)  # the edge meets a full socket
        frames = []
        for _ in range(3):
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
            frames.append(await asyncio.wait_for(reader.readexactly(size), 10))
            await asyncio.sleep(0.05)
        writer.close()
        stats, held = dict(server.stats), service.region_fds.held
        await server.stop()
        service.close()
        expected = [log.read_bytes(0, 1 << 20, None, True) for log in logs]
        for log in logs:
            log.close()
        return frames, stats, held, expected

    frames, stats, held, expected = asyncio.run(go())
    for frame, correlation_id in ((frames[0], 1), (frames[2], 3)):
        got_id, body = decode_response(1, 16, frame)
        assert got_id == correlation_id and [p.records for p in body.responses[0].partitions] == expected
    assert decode_response(18, 0, frames[1])[0] == 2
    assert stats["sendfile_waits"] > 0, "the socket never filled: the waiting path was not exercised"
    # All but the byte handed to the transport at each wait went by sendfile.
    assert stats["sendfile_bytes"] + stats["sendfile_waits"] == 2 * sum(map(len, expected))
    assert held == 0


def test_a_file_truncated_before_sending_closes_the_connection_instead_of_a_torn_frame(tmp_path):
    async def go():
        service, server, logs = make_edge(tmp_path, partitions=1, batches_per_partition=12, value_size=4096)

        async def truncate_first(ctx, request, handler):
            response = await handler(ctx, request)
            # The leader truncates the segment (a deposed leader) after the edge checked the region.
            region = response.blobs[0][1].pieces[0]
            os.truncate(logs[0].segments[0].log_path, region.position + region.length // 2)
            return response

        service.fault_hooks[1] = truncate_first
        port = await server.start("127.0.0.1", 0)
        frames = await exchange(port, fetch_request(12, 1, 1), 1)
        held = service.region_fds.held
        await server.stop()
        service.close()
        logs[0].close()
        return frames, held, dict(server.stats)

    frames, held, stats = asyncio.run(go())
    assert frames == [None]
    assert stats["torn_responses"] == 1 and held == 0


def test_frame_regions_are_closed_when_the_response_is_never_written(tmp_path):
    path = tmp_path / "seg.log"
    path.write_bytes(batch_at(3, 1000))
    fd = os.open(path, os.O_RDONLY)
    region = FileRegion(os.dup(fd), 0, 1000, 3)
    frame = ResponseFrame([b"\x00\x00\x03\xe8", region], 1004)
    dup_fd = region.fd
    del frame, region  # dropped unsent
    with pytest.raises(OSError):
        os.fstat(dup_fd)
    os.close(fd)
