"""Protocol-level behaviour of the running broker: version negotiation, error
codes, DelayedFetch timing, and hostile input that must not hurt other clients."""
from __future__ import annotations

import datetime
import struct
import sys
import time

import psutil
import pytest
from confluent_kafka import Producer
from tests.kafka_admin import create_topic
from kio.schema.errors import ErrorCode

from net import registry
from net.codec import request_schema
from net.schema_build import nested
from storage.records import build_batch
from tests.wire_client import WireClient

MS = datetime.timedelta(milliseconds=1)


def test_api_versions_matches_registry(broker):
    client = WireClient(broker.bootstrap)
    body = client.request(18, 3, client_software_name="raykafka-tests", client_software_version="1")
    client.close()
    assert body.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert advertised == {h.api_key: (h.advertised_min_version, h.max_version)
                          for h in registry.handlers().values()}


def test_api_versions_unknown_version_answers_v0(broker):
    client = WireClient(broker.bootstrap)
    frame = struct.pack(">hhi", 18, 77, 9) + struct.pack(">h", 1) + b"x" + b"\x00"
    client.send_raw(struct.pack(">i", len(frame)) + frame)
    reply = client.recv_frame()
    client.close()
    assert struct.unpack(">i", reply[:4])[0] == 9
    assert struct.unpack(">h", reply[4:6])[0] == ErrorCode.unsupported_version


def _produce(client, topic, records: bytes, partition=0, acks=1):
    schema = request_schema(0, 9)
    topic_cls, part_cls = nested(schema, "TopicProduceData"), nested(schema, "PartitionProduceData")
    body = client.request(0, 9, transactional_id=None, acks=acks, timeout=5000 * MS, topic_data=(
        topic_cls(name=topic, partition_data=(part_cls(index=partition, records=records),)),))
    return body.responses[0].partition_responses[0]


def test_produce_errors(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    client = WireClient(broker.bootstrap)
    good = build_batch([(b"k", b"v", [])], compression=0)
    ok = _produce(client, topic_name, good)
    assert ok.error_code == ErrorCode.none and ok.base_offset == 0
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert _produce(client, topic_name, bytes(corrupt)).error_code == ErrorCode.corrupt_message
    huge = build_batch([(b"k", b"x" * 1_100_000, [])], compression=0)
    assert _produce(client, topic_name, huge).error_code == ErrorCode.message_too_large
    assert _produce(client, topic_name + "-nope", good).error_code == ErrorCode.unknown_topic_or_partition
    assert _produce(client, topic_name, good, partition=5).error_code == ErrorCode.unknown_topic_or_partition
    assert _produce(client, topic_name, good, acks=2).error_code == ErrorCode.invalid_required_acks
    assert _produce(client, topic_name, good + good).error_code == ErrorCode.invalid_record
    assert _produce(client, topic_name, b"").error_code == ErrorCode.invalid_record
    again = _produce(client, topic_name, good)
    assert again.error_code == ErrorCode.none and again.base_offset == 1, "failed appends must not use offsets"
    client.close()


def _fetch(client, topic, offset, min_bytes, max_wait_ms):
    schema = request_schema(1, 12)
    topic_cls, part_cls = nested(schema, "FetchTopic"), nested(schema, "FetchPartition")
    body = client.request(1, 12, replica_id=-1, max_wait=max_wait_ms * MS, min_bytes=min_bytes,
                          max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                          topics=(topic_cls(topic=topic, partitions=(part_cls(
                              partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                          forgotten_topics_data=(), rack_id="")
    return body.responses[0].partitions[0]


def test_fetch_waits_for_min_bytes(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    client = WireClient(broker.bootstrap)
    started = time.monotonic()
    empty = _fetch(client, topic_name, 0, min_bytes=1, max_wait_ms=600)
    waited = time.monotonic() - started
    assert empty.error_code == ErrorCode.none and not empty.records
    assert 0.5 <= waited < 5, f"an empty fetch should wait max_wait (600 ms), waited {waited:.2f}s"

    import threading
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    threading.Timer(0.3, lambda: (producer.produce(topic_name, b"wake", partition=0), producer.flush(5))).start()
    started = time.monotonic()
    woke = _fetch(client, topic_name, 0, min_bytes=1, max_wait_ms=10_000)
    waited = time.monotonic() - started
    assert woke.records and woke.high_watermark == 1
    assert waited < 5, f"the fetch should complete when data arrives, took {waited:.2f}s"
    out_of_range = _fetch(client, topic_name, 99, min_bytes=1, max_wait_ms=0)
    assert out_of_range.error_code == ErrorCode.offset_out_of_range
    client.close()


HOSTILE = [
    b"\x00\x00\x00\x10" + b"\xff" * 16,
    struct.pack(">i", -1) + b"abcd",
    struct.pack(">i", 2**31 - 1) + b"abcd",
    b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    struct.pack(">i", 10) + struct.pack(">hhi", 32000, 0, 1) + b"\x00\x00",
    struct.pack(">i", 10) + struct.pack(">hhi", 1, 99, 1) + b"\x00\x00",
    (lambda f: struct.pack(">i", len(f)) + f)(struct.pack(">hhi", 0, 9, 1) + b"\x00\x03abc" + b"\xff" * 9),
]


def test_hostile_input_is_refused_and_broker_keeps_serving(broker):
    def edge_rss_mb():
        # The edge processes parse and refuse the frames: a per-connection leak shows there. Not
        # the whole tree, where a replica pool's spare starting meanwhile adds a process (~90 MiB).
        total = 0
        for node in broker.nodes():
            for pid in node["edge_pids"]:
                try:
                    total += psutil.Process(pid).memory_info().rss
                except psutil.NoSuchProcess:
                    pass
        return total / 2**20

    good = WireClient(broker.bootstrap)
    assert good.request(18, 3, client_software_name="t", client_software_version="1").error_code == 0
    for _round in range(3):
        for payload in HOSTILE:
            bad = WireClient(broker.bootstrap, timeout=10)
            bad.send_raw(payload)
            assert bad.recv_frame() is None, f"expected the broker to close the connection for {payload[:12]!r}"
            bad.close()
        if _round == 0:
            baseline = edge_rss_mb()
    # Repeat many times: memory must stay flat (no per-connection leak).
    for _ in range(30):
        for payload in HOSTILE:
            bad = WireClient(broker.bootstrap, timeout=10)
            bad.send_raw(payload)
            bad.recv_frame()
            bad.close()
    grown = edge_rss_mb() - baseline
    assert grown < 100, f"broker memory grew {grown:.0f} MiB under hostile input"
    assert good.request(18, 3, client_software_name="t", client_software_version="1").error_code == 0
    good.close()
    assert broker.wait_for_log("closing connection", lines=2000)


def test_offset_for_leader_epoch(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    client = WireClient(broker.bootstrap)
    for i in range(3):
        _produce(client, topic_name, build_batch([(b"k", f"v{i}".encode(), [])], compression=0))
    schema = request_schema(23, 4)
    topic_cls, part_cls = nested(schema, "OffsetForLeaderTopic"), nested(schema, "OffsetForLeaderPartition")

    def ask(leader_epoch, current_leader_epoch=-1, topic=topic_name):
        body = client.request(23, 4, replica_id=-1, topics=(topic_cls(topic=topic, partitions=(part_cls(
            partition=0, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch),)),))
        return body.topics[0].partitions[0]

    latest = ask(0)
    assert (latest.error_code, latest.leader_epoch, latest.end_offset) == (ErrorCode.none, 0, 3)
    assert ask(7).end_offset == -1, "an epoch above every known one is undefined"
    assert ask(0, current_leader_epoch=9).error_code == ErrorCode.unknown_leader_epoch
    assert ask(0, topic=topic_name + "-x").error_code == ErrorCode.unknown_topic_or_partition
    client.close()


def test_empty_long_poll_keeps_the_broker_near_idle(broker, topic_name):
    """A consumer long-polling an empty partition parks in the purgatory: the
    broker's CPU stays near its idle level (no busy loop). The broker tree is
    shared with the session's other work (an idle replica hibernating, a spare
    process starting: ~0.75 CPU-s each), which can land in one 3 s window; a busy
    loop lands in every one, so the pair of windows is measured up to three times
    and one quiet pair passes."""
    create_topic(broker.bootstrap, topic_name, 1)
    client = WireClient(broker.bootstrap)
    _fetch(client, topic_name, 0, min_bytes=1, max_wait_ms=100)  # warm the path up
    measured = []
    for _ in range(3):
        before = broker.cpu_seconds()
        time.sleep(3)
        idle = broker.cpu_seconds() - before
        before = broker.cpu_seconds()
        started = time.monotonic()
        fetches = 0
        while time.monotonic() - started < 3:
            empty = _fetch(client, topic_name, 0, min_bytes=1, max_wait_ms=500)
            assert not empty.records
            fetches += 1
        polling = broker.cpu_seconds() - before
        assert 4 <= fetches <= 8, f"each fetch should wait ~max_wait (500 ms): {fetches} in 3 s"
        measured.append((round(polling - idle, 2), round(idle, 2)))
        if polling - idle < 0.45:
            break
    client.close()
    extra, idle = measured[-1]
    assert extra < 0.45, f"long-polling cost {extra:.2f} CPU-seconds over 3 s on top of idle {idle:.2f} " \
                         f"in each of {len(measured)} tries (extra, idle): {measured}"
