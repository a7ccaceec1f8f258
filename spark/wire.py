"""A small blocking Kafka client for the Spark source: Metadata, ListOffsets and
Fetch over the wire protocol (kio schemas via net.codec).

Why not a general client: the source needs exactly these three calls, raw
record-batch bytes out of Fetch (decoded straight into Arrow by
``spark.decode``), and no consumer group. It works against any Kafka broker
serving Metadata v12, ListOffsets v7 and Fetch v12 (Kafka 2.8 and later,
raykafka).
"""
from __future__ import annotations

import datetime
import random
import socket
import struct
import time
from dataclasses import dataclass, field

from core.error_codes import ErrorCode

from net.codec import decode_response, encode_request, request_schema
from net.schema_build import nested

METADATA = (3, 12)
LIST_OFFSETS = (2, 7)
FETCH = (1, 12)

EARLIEST = -2
LATEST = -1

_SIZE = struct.Struct(">i")
_MS = datetime.timedelta(milliseconds=1)

# Errors after which a refreshed metadata view (a new leader) may succeed.
RETRIABLE = {
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.request_timed_out,
    ErrorCode.not_enough_replicas, ErrorCode.replica_not_available,
    ErrorCode.kafka_storage_error, ErrorCode.offset_not_available,
}


class KafkaError(RuntimeError):
    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


def error_name(code: ErrorCode | int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


@dataclass
class Metadata:
    brokers: dict[int, tuple[str, int]]
    # topic -> {partition: leader id}; topics that do not exist are absent
    topics: dict[str, dict[int, int]]
    internal: set[str] = field(default_factory=set)


@dataclass
class FetchResult:
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes
    # read_committed: (producer id, first offset) of the aborted transactions in the records
    aborted: tuple = ()


class _Connection:
    def __init__(self, host: str, port: int, timeout_s: float, client_id: str):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation_id = 0
        self.pending: list[tuple[int, int, int]] = []  # (api_key, version, correlation id)

    def send(self, api: tuple[int, int], **fields) -> None:
        self.correlation_id += 1
        schema = request_schema(*api)
        self.sock.sendall(encode_request(schema(**fields), self.correlation_id, client_id=self.client_id))
        self.pending.append((api[0], api[1], self.correlation_id))

    def receive(self):
        api_key, version, expected = self.pending.pop(0)
        frame = self._frame()
        correlation_id, body = decode_response(api_key, version, frame)
        if correlation_id != expected:
            raise KafkaError(f"response correlation id {correlation_id}, expected {expected}")
        return body

    def request(self, api: tuple[int, int], **fields):
        self.send(api, **fields)
        return self.receive()

    def _frame(self) -> bytes:
        head = self._exactly(4)
        return self._exactly(_SIZE.unpack(head)[0])

    def _exactly(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise KafkaError("connection closed by the broker")
            got += k
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class KafkaWireClient:
    """Blocking, single-threaded. Connections are opened on first use."""

    def __init__(self, bootstrap_servers: str, client_id: str = "raykafka-spark", timeout_s: float = 30.0,
                 retries: int = 10, retry_backoff_s: float = 0.2):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._by_id: dict[int, _Connection] = {}
        self._any: _Connection | None = None
        self.metadata_cache: Metadata | None = None

    # ---- connections ------------------------------------------------------------------------
    def _bootstrap_connection(self) -> _Connection:
        if self._any is not None:
            return self._any
        errors = []
        for host, port in random.sample(self.bootstrap, len(self.bootstrap)):
            try:
                self._any = _Connection(host, port, self.timeout_s, self.client_id)
                return self._any
            except OSError as exc:
                errors.append(f"{host}:{port}: {exc}")
        raise KafkaError("cannot connect to any bootstrap server: " + "; ".join(errors))

    def _broker(self, broker_id: int) -> _Connection:
        conn = self._by_id.get(broker_id)
        if conn is None:
            md = self.metadata_cache or self.metadata()
            if broker_id not in md.brokers:
                md = self.metadata()
            if broker_id not in md.brokers:
                raise KafkaError(f"broker {broker_id} is not in the cluster metadata",
                                 ErrorCode.leader_not_available)
            host, port = md.brokers[broker_id]
            conn = self._by_id[broker_id] = _Connection(host, port, self.timeout_s, self.client_id)
        return conn

    def _drop(self, broker_id: int | None) -> None:
        if broker_id is None:
            if self._any is not None:
                self._any.close()
            self._any = None
            return
        conn = self._by_id.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._by_id.values():
            conn.close()
        self._by_id.clear()
        self._drop(None)

    # ---- metadata ----------------------------------------------------------------------------
    def metadata(self, topics: list[str] | None = None) -> Metadata:
        """All topics (None) or the named ones. Absent topics are simply missing."""
        schema = request_schema(*METADATA)
        topic_cls = nested(schema, "MetadataRequestTopic")
        requested = None if topics is None else tuple(topic_cls(topic_id=None, name=t) for t in topics)
        last: Exception | None = None
        for attempt in range(self.retries):
            try:
                body = self._bootstrap_connection().request(
                    METADATA, topics=requested, allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
                break
            except (OSError, KafkaError) as exc:
                last = exc
                self._drop(None)
                time.sleep(self.retry_backoff_s)
        else:
            raise KafkaError(f"metadata request failed: {last}")
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in body.brokers}
        found: dict[str, dict[int, int]] = {}
        internal = set()
        for t in body.topics:
            if t.error_code != ErrorCode.none or t.name is None:
                continue
            found[t.name] = {int(p.partition_index): int(p.leader_id) for p in t.partitions}
            if t.is_internal:
                internal.add(t.name)
        md = Metadata(brokers, found, internal)
        if topics is None:
            self.metadata_cache = md
        else:
            cache = self.metadata_cache or Metadata({}, {})
            cache.brokers = brokers
            cache.topics.update(found)
            for t in topics:
                if t not in found:
                    cache.topics.pop(t, None)
            self.metadata_cache = cache
        return md

    def partitions_for(self, topics: list[str]) -> dict[str, dict[int, int]]:
        return self.metadata(topics).topics

    def leader(self, topic: str, partition: int, refresh: bool = False) -> int:
        md = self.metadata_cache
        if refresh or md is None or partition not in md.topics.get(topic, {}):
            md = self.metadata([topic])
        if partition not in md.topics.get(topic, {}):
            raise KafkaError(f"{topic}-{partition} does not exist", ErrorCode.unknown_topic_or_partition)
        leader = md.topics[topic][partition]
        if leader < 0:
            raise KafkaError(f"{topic}-{partition} has no leader", ErrorCode.leader_not_available)
        return leader

    # ---- offsets -----------------------------------------------------------------------------
    def list_offsets(self, wanted: dict[tuple[str, int], int], isolation_level: int = 0) -> dict[tuple[str, int], int]:
        """{(topic, partition): timestamp or -2/-1} -> {(topic, partition): offset}.
        A timestamp with no record at or after it maps to -1 (Kafka's answer)."""
        result: dict[tuple[str, int], int] = {}
        todo = dict(wanted)
        schema = request_schema(*LIST_OFFSETS)
        topic_cls, part_cls = nested(schema, "ListOffsetsTopic"), nested(schema, "ListOffsetsPartition")
        for attempt in range(self.retries):
            if not todo:
                return result
            if attempt > 0:
                self.metadata(sorted({t for t, _ in todo}))
            by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
            failures: list[str] = []
            for (topic, partition), ts in todo.items():
                try:
                    leader = self.leader(topic, partition)
                except KafkaError as exc:  # not in the metadata (yet): retried below
                    failures.append(str(exc))
                    continue
                by_leader.setdefault(leader, {}).setdefault(topic, []).append((partition, ts))
            for leader, topics in by_leader.items():
                request_topics = tuple(
                    topic_cls(name=t, partitions=tuple(part_cls(partition_index=p, current_leader_epoch=-1,
                                                                timestamp=ts) for p, ts in parts))
                    for t, parts in topics.items())
                try:
                    body = self._broker(leader).request(LIST_OFFSETS, replica_id=-1, isolation_level=isolation_level,
                                                        topics=request_topics)
                except (OSError, KafkaError) as exc:
                    self._drop(leader)
                    failures.append(str(exc))
                    continue
                for t in body.topics:
                    for p in t.partitions:
                        key = (t.name, int(p.partition_index))
                        code = ErrorCode(p.error_code)
                        if code == ErrorCode.none:
                            result[key] = int(p.offset)
                            todo.pop(key, None)
                        elif code not in RETRIABLE:
                            raise KafkaError(f"ListOffsets for {key[0]}-{key[1]} failed: {error_name(code)}", code)
                        else:
                            failures.append(f"{key[0]}-{key[1]}: {error_name(code)}")
            if todo:
                time.sleep(self.retry_backoff_s * (attempt + 1))
        raise KafkaError(f"ListOffsets did not succeed for {sorted(todo)}: {failures}")

    # ---- fetch -------------------------------------------------------------------------------
    def _fetch_fields(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
                      isolation_level: int) -> dict:
        schema = request_schema(*FETCH)
        topic_cls, part_cls = nested(schema, "FetchTopic"), nested(schema, "FetchPartition")
        return dict(replica_id=-1, max_wait=max_wait_ms * _MS, min_bytes=1, max_bytes=max_bytes,
                    isolation_level=isolation_level, session_id=0, session_epoch=-1,
                    topics=(topic_cls(topic=topic, partitions=(part_cls(
                        partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                        log_start_offset=-1, partition_max_bytes=max_bytes),)),),
                    forgotten_topics_data=(), rack_id="")

    def send_fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 8 << 20,
                   max_wait_ms: int = 500, isolation_level: int = 0) -> int:
        """Send a Fetch to the partition's leader without waiting; returns the leader id
        to pass to :meth:`receive_fetch` (requests to one broker are answered in order)."""
        leader = self.leader(topic, partition)
        self._broker(leader).send(FETCH, **self._fetch_fields(topic, partition, offset, max_bytes, max_wait_ms,
                                                              isolation_level))
        return leader

    def receive_fetch(self, leader: int) -> FetchResult:
        body = self._by_id[leader].receive()
        if body.error_code != ErrorCode.none:
            return FetchResult(ErrorCode(body.error_code), -1, -1, b"")
        p = body.responses[0].partitions[0]
        aborted = tuple((int(t.producer_id), int(t.first_offset)) for t in (p.aborted_transactions or ()))
        return FetchResult(ErrorCode(p.error_code), int(p.high_watermark), int(p.log_start_offset), p.records or b"",
                           aborted)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 8 << 20, max_wait_ms: int = 500,
              isolation_level: int = 0) -> FetchResult:
        """One Fetch, retried on connection loss and leader changes."""
        last, last_code = None, None
        for attempt in range(self.retries):
            leader = None
            try:
                leader = self.send_fetch(topic, partition, offset, max_bytes, max_wait_ms, isolation_level)
                result = self.receive_fetch(leader)
            except (OSError, KafkaError) as exc:
                last, last_code = str(exc), getattr(exc, "code", None)
                self._drop(leader)
                self.metadata_cache = None
                time.sleep(self.retry_backoff_s * (attempt + 1))
                continue
            if result.error in RETRIABLE:
                last, last_code = error_name(result.error), result.error
                self.metadata_cache = None
                time.sleep(self.retry_backoff_s * (attempt + 1))
                continue
            return result
        raise KafkaError(f"Fetch of {topic}-{partition} at offset {offset} failed: {last}", last_code)

    def read_access(self, positions: dict[tuple[str, int], int]) -> dict[tuple[str, int], ErrorCode]:
        """What the broker answers this client's principal for a Fetch of each
        partition at the given offset (one request per leader, no waiting, at
        most a byte asked for): TOPIC_AUTHORIZATION_FAILED without READ on the
        topic (Kafka checks it before anything else), NONE or
        OFFSET_OUT_OF_RANGE when reading is allowed, other codes where the
        question got no answer (a leader moved, a connection failed)."""
        schema = request_schema(*FETCH)
        topic_cls, part_cls = nested(schema, "FetchTopic"), nested(schema, "FetchPartition")
        answers: dict[tuple[str, int], ErrorCode] = {}
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
        for (topic, partition), offset in positions.items():
            try:
                leader = self.leader(topic, partition)
            except KafkaError as exc:
                answers[(topic, partition)] = ErrorCode(exc.code if exc.code is not None else
                                                        ErrorCode.leader_not_available)
                continue
            by_leader.setdefault(leader, {}).setdefault(topic, []).append((partition, offset))
        for leader, topics in by_leader.items():
            request_topics = tuple(topic_cls(topic=t, partitions=tuple(part_cls(
                partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1) for p, offset in parts)) for t, parts in topics.items())
            try:
                body = self._broker(leader).request(
                    FETCH, replica_id=-1, max_wait=0 * _MS, min_bytes=0, max_bytes=1, isolation_level=0,
                    session_id=0, session_epoch=-1, topics=request_topics, forgotten_topics_data=(), rack_id="")
            except (OSError, KafkaError):
                self._drop(leader)
                for t, parts in topics.items():
                    answers.update({(t, p): ErrorCode.network_exception for p, _ in parts})
                continue
            for t in body.responses:
                for p in t.partitions:
                    code = body.error_code or p.error_code
                    answers[(t.topic, int(p.partition_index))] = ErrorCode(code)
        return answers

    def discard_pending(self) -> None:
        """Drop connections with requests in flight (an abandoned pipelined fetch)."""
        for broker_id, conn in list(self._by_id.items()):
            if conn.pending:
                self._drop(broker_id)
