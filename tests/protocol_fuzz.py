"""A seeded, structure-aware fuzzer of the Kafka wire protocol.

`RequestGenerator` builds valid requests for any API and version from kio's
schemas, the same ones the broker's codec decodes with. `Mutator` then lies
in the places a decoder trusts: array counts, string/bytes lengths, varints,
tagged-field counts and sizes (found by the broker's own bounds walk,
net/request_bounds.py), record-batch headers, and the frame's size prefix.
`Campaign` sends the results to a broker over plain sockets and watches that
it keeps answering. The suite runs a CI-sized campaign
(tests/integration/test_protocol_fuzz.py); bench/fuzz.py runs a long one.
"""
from __future__ import annotations

import dataclasses
import datetime
import random
import socket
import struct
import time
import uuid
from dataclasses import fields, is_dataclass
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from net.codec import encode_request, request_schema
from net.request_bounds import check_request, unwrap_field_type
from storage.records import SimpleRecord, build_batch

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}
# Fields whose values would make a valid request park or wait for long: kept
# short so that a request the broker answers slowly is not mistaken for a hang.
_SHORT_WAIT_FIELDS = ("timeout", "max_wait", "session_timeout", "rebalance_timeout")
# Names that admin requests may touch: a small pool, so that valid fuzz
# requests create at most a few tiny topics and never touch other tests' data.
_NAME_POOL = ("fz-a", "fz-b", "fz-c")
# Part of the names come from a large space instead: what a broker keeps per
# name a client sends (metadata, metric series, fetch sessions, groups) must
# stay bounded, and only names never seen before show whether it does.
# Admin requests stay dry runs (validate_only) and auto-creation is off in
# the brokers the fuzzer runs against, so no topic is made of them.
_FRESH_NAME_SHARE = 0.3
# Fields that park a request: now and then a long wait, so that parked
# operations of connections the campaign drops (it waits 0.5 s for an
# answer) pile up wherever the broker would keep them.
_PARKING_FIELDS = ("max_wait",)
_LONG_WAIT_SHARE = 0.05
_INTERESTING_32 = (-(2**31), -2, -1, 0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x3FFFFFFF)
_INTERESTING_16 = (-(2**15), -2, -1, 0, 1, 0x7F, 0xFF, 0x7FFF)
# Varints that lie: 2**32 - 1 (compact "count 2**32 - 2"), too long, huge, zero.
_LYING_VARINTS = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80\x80\x01",
                  b"\xfe\xff\xff\xff\x07", b"\xff\xff\x7f", b"\x00", b"\x81\x80\x80\x80\x00")


class FuzzInput(NamedTuple):
    api_key: int
    api_version: int
    mutation: str
    frame: bytes  # with its size prefix, as sent
    # Sent on a connection of its own, half-closed after it: a frame that
    # promises more bytes than it has would otherwise keep its reader waiting.
    alone: bool = False


class RequestGenerator:
    """Valid request entities for a schema, from a seeded random source."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def request(self, api_key: int, api_version: int):
        return self.entity(request_schema(api_key, api_version))

    def entity(self, entity_type, depth: int = 0):
        values = {}
        for field in fields(entity_type):
            inner, optional, is_array = unwrap_field_type(field.type)
            tagged = "tag" in field.metadata
            if tagged and self.rng.random() < 0.6:
                continue  # absent: its default
            values[field.name] = self.value(field, inner, optional and not tagged, is_array, depth)
        return entity_type(**values)

    def value(self, field, inner, optional: bool, is_array: bool, depth: int):
        rng = self.rng
        if optional and rng.random() < 0.15:
            return None
        if is_array:
            count = rng.choice((0, 1, 1, 2, 3)) if depth < 3 else 0
            return tuple(self.scalar(field, inner, depth + 1) for _ in range(count))
        return self.scalar(field, inner, depth + 1)

    def scalar(self, field, inner, depth: int):
        rng = self.rng
        if is_dataclass(inner):
            return self.entity(inner, depth)
        kafka_type = field.metadata.get("kafka_type")
        name = field.name
        if kafka_type in _INT_RANGES:
            if any(word in name for word in _SHORT_WAIT_FIELDS):
                if name in _PARKING_FIELDS and rng.random() < _LONG_WAIT_SHARE:
                    return rng.randint(10_000, 600_000)
                return rng.randint(0, 200)
            if name in ("num_partitions", "count", "replication_factor"):
                return rng.choice((-1, 1))
            if name == "acks":
                return rng.choice((-1, 1))  # acks=0 has no response to wait for
            low, high = _INT_RANGES[kafka_type]
            if rng.random() < 0.5:
                return rng.randint(max(low, -2), min(high, 8))
            return rng.randint(low, high)
        if kafka_type == "bool":
            # validate_only wherever there is one: admin requests stay dry runs.
            return True if name == "validate_only" else rng.random() < 0.5
        if kafka_type == "string":
            if name in ("name", "topic", "topic_name", "group_id", "transactional_id"):
                if rng.random() < _FRESH_NAME_SHARE:
                    return f"fz-r-{rng.getrandbits(40):010x}"
                return rng.choice(_NAME_POOL)
            return "".join(rng.choice("abcxyz-._0123") for _ in range(rng.randint(0, 12)))
        if kafka_type == "bytes":
            return rng.randbytes(rng.randint(0, 24))
        if kafka_type == "records":
            return self.records()
        if kafka_type == "uuid":
            return uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.5 else uuid.UUID(int=0)
        if kafka_type == "float64":
            return rng.uniform(-1e6, 1e6)
        if kafka_type == "error_code":
            return ErrorCode.none
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            if name in _PARKING_FIELDS and rng.random() < _LONG_WAIT_SHARE:
                return datetime.timedelta(milliseconds=rng.randint(10_000, 600_000))
            return datetime.timedelta(milliseconds=rng.randint(0, 200))
        if kafka_type == "datetime_i64":
            return datetime.datetime.fromtimestamp(rng.randint(0, 2**31), tz=datetime.timezone.utc)
        raise TypeError(f"no generator for {kafka_type!r} ({name})")

    def records(self) -> bytes:
        rng = self.rng
        timestamp = 1_700_000_000_000 + rng.randrange(10**9)
        return b"".join(
            build_batch([SimpleRecord(key=rng.randbytes(rng.randint(0, 8)), value=rng.randbytes(rng.randint(0, 64)),
                                      timestamp=timestamp + i) for i in range(rng.randint(1, 4))])
            for _ in range(rng.randint(1, 2)))


class Mutator:
    """Turns one valid frame into a hostile one; names what it did."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def mutate(self, api_key: int, api_version: int, frame: bytes) -> tuple[str, bytes]:
        """`frame` is the encoded request with its 4-byte size prefix."""
        rng = self.rng
        body = bytearray(frame[4:])
        schema = request_schema(api_key, api_version)
        sizes: list = []
        check_request(schema.__header_schema__, schema, bytes(body), sizes)
        choice = rng.random()
        if choice < 0.45 and sizes:
            name = self._lie_in_size(body, rng.choice(sizes))
        elif choice < 0.6:
            name = self._batch_header(body)
        elif choice < 0.75:
            name = self._bytes(body)
        elif choice < 0.85:
            return self._frame_size(bytes(body))
        else:
            name = "valid"
        return name, struct.pack(">i", len(body)) + bytes(body)

    def _lie_in_size(self, body: bytearray, site) -> str:
        pos, kind = site
        rng = self.rng
        if kind == "int32":
            body[pos:pos + 4] = struct.pack(">i", rng.choice(_INTERESTING_32))
        elif kind == "int16":
            body[pos:pos + 2] = struct.pack(">h", rng.choice(_INTERESTING_16))
        else:  # a varint: replace it, whatever its length, with a lying one
            end = pos
            while end < len(body) and body[end] & 0x80 and end - pos < 5:
                end += 1
            body[pos:end + 1] = rng.choice(_LYING_VARINTS)
        return f"size:{kind}"

    def _batch_header(self, body: bytearray) -> str:
        """Corrupt a v2 record batch header field where one is in the frame."""
        at = body.find(b"\x02", 16)  # a magic byte candidate
        rng = self.rng
        if at < 16:
            return self._bytes(body)
        start = at - 16  # base offset(8) + length(4) + epoch(4) precede magic
        field_offset, width = rng.choice(((8, 4), (17, 4), (21, 2), (23, 4), (43, 8), (51, 2), (53, 4), (57, 4),
                                          (16, 1)))
        position = start + field_offset
        if position + width > len(body):
            return self._bytes(body)
        value = rng.choice((0, 1, 0xFF, 0x7F, -1 & (2 ** (8 * width) - 1), 2 ** (8 * width - 1)))
        body[position:position + width] = value.to_bytes(width, "big")
        return "batch-header"

    def _bytes(self, body: bytearray) -> str:
        rng = self.rng
        how = rng.randrange(5)
        if how == 0 and len(body) > 8:
            del body[rng.randrange(8, len(body)):]
            return "truncate"
        if how == 1:
            body += rng.randbytes(rng.randint(1, 64))
            return "extend"
        if how == 2 and len(body) > 8:
            position = rng.randrange(8, len(body))
            body[position] ^= 1 << rng.randrange(8)
            return "bitflip"
        if how == 3 and len(body) > 8:
            position = rng.randrange(8, len(body))
            body[position:position] = rng.choice(_LYING_VARINTS)
            return "insert-varint"
        if len(body) > 12:
            position = rng.randrange(8, len(body) - 4)
            body[position:position + 4] = struct.pack(">i", rng.choice(_INTERESTING_32))
            return "int32"
        return "valid"

    def _frame_size(self, body: bytes) -> tuple[str, bytes]:
        rng = self.rng
        lie = rng.choice((0, -1, -(2**31), 2**31 - 1, len(body) + rng.randint(1, 100), max(0, len(body) - 3), 3))
        return "frame-size", struct.pack(">i", lie) + body


def served_versions() -> list[tuple[int, int]]:
    """(api key, version) for every version the broker decodes."""
    from net import registry

    return [(h.api_key, v) for h in sorted(registry.handlers().values(), key=lambda h: h.api_key)
            for v in range(h.min_version, h.max_version + 1)]


def generate_inputs(seed: int, count: int, versions: list[tuple[int, int]] | None = None):
    """`count` hostile or valid inputs, the same ones for the same seed."""
    rng = random.Random(seed)
    generator, mutator = RequestGenerator(rng), Mutator(rng)
    versions = versions or served_versions()
    for index in range(count):
        api_key, api_version = versions[index % len(versions)] if index < len(versions) else rng.choice(versions)
        request = generator.request(api_key, api_version)
        frame = encode_request(request, correlation_id=index & 0x7FFFFFFF, client_id="fuzz")
        mutation, hostile = mutator.mutate(api_key, api_version, frame)
        yield FuzzInput(api_key, api_version, mutation, hostile, alone=mutation == "frame-size")


@dataclasses.dataclass
class CampaignResult:
    inputs: int = 0
    answered: int = 0
    closed: int = 0
    unanswered: int = 0  # no answer within the read timeout, connection left open
    probes: int = 0
    hangs: int = 0  # a fresh connection's ApiVersions not answered in time
    crashes: int = 0  # connection refused: nothing listens any more
    seconds: float = 0.0
    by_mutation: dict = dataclasses.field(default_factory=dict)


class Campaign:
    """Send inputs over few connections; probe the broker with a fresh
    ApiVersions every `probe_every` inputs. A probe that is refused is a
    crash; one not answered within `probe_timeout_s` is a hang."""

    def __init__(self, host: str, port: int, *, read_timeout_s: float = 0.5, probe_every: int = 200,
                 probe_timeout_s: float = 10.0):
        self.address = (host, port)
        self.read_timeout_s = read_timeout_s
        self.probe_every = probe_every
        self.probe_timeout_s = probe_timeout_s
        self.sock: socket.socket | None = None

    def run(self, inputs, result: CampaignResult | None = None) -> CampaignResult:
        result = result or CampaignResult()
        started = time.monotonic()
        try:
            for fuzz_input in inputs:
                self._send(fuzz_input, result)
                result.inputs += 1
                result.by_mutation[fuzz_input.mutation] = result.by_mutation.get(fuzz_input.mutation, 0) + 1
                if result.inputs % self.probe_every == 0:
                    self.probe(result)
            self.probe(result)
        finally:
            self._drop()
            result.seconds += time.monotonic() - started
        return result

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=self.probe_timeout_s)
            self.sock.settimeout(self.read_timeout_s)
        return self.sock

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _send(self, fuzz_input: FuzzInput, result: CampaignResult) -> None:
        if fuzz_input.alone:
            self._drop()
        try:
            sock = self._connect()
            sock.sendall(fuzz_input.frame)
            if fuzz_input.alone:
                sock.shutdown(socket.SHUT_WR)
            head = _recv_exactly(sock, 4)
            if head is None:
                result.closed += 1
                self._drop()
                return
            size = struct.unpack(">i", head)[0]
            if _recv_exactly(sock, size) is None:
                result.closed += 1
                self._drop()
                return
            result.answered += 1
            if fuzz_input.alone:
                self._drop()
        except socket.timeout:
            # No answer yet (acks=0, a parked request, or a frame still
            # waiting for bytes that will never come): start afresh.
            result.unanswered += 1
            self._drop()
        except ConnectionRefusedError:
            result.crashes += 1
            self._drop()
            raise
        except OSError:
            result.closed += 1
            self._drop()

    def probe(self, result: CampaignResult) -> None:
        result.probes += 1
        schema = request_schema(18, 3)
        frame = encode_request(schema(client_software_name="fuzz-probe", client_software_version="1"),
                               correlation_id=7)
        try:
            with socket.create_connection(self.address, timeout=self.probe_timeout_s) as sock:
                sock.sendall(frame)
                head = _recv_exactly(sock, 4)
                if head is None or _recv_exactly(sock, struct.unpack(">i", head)[0]) is None:
                    result.hangs += 1
        except ConnectionRefusedError:
            result.crashes += 1
            raise
        except (socket.timeout, OSError):
            result.hangs += 1


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# Ray actor classes whose processes the fuzzer weighs (Ray titles an actor's
# worker process "ray::<class>"), by the role they play.
ROLE_CLASSES = {"controller": "ControllerActor", "purgatory": "PurgatoryActor",
                "group coordinator": "GroupCoordinatorActor"}


def role_processes(broker) -> dict:
    """{role: psutil.Process} of a tests.broker_process.BrokerProcess's first
    node: its edge (from nodes.json) and the processes of ROLE_CLASSES (the
    first of each found in the broker's process tree). Each is measured on
    its own: the tree's total hides which one grows."""
    import psutil

    found = {"edge": psutil.Process(broker.nodes()[0]["edge_pid"])}
    for process in broker.tree():
        try:
            title = " ".join(process.cmdline())
        except psutil.Error:
            continue
        for role, cls in ROLE_CLASSES.items():
            if role not in found and f"ray::{cls}" in title:
                found[role] = process
    return found


def rss_mib(processes: dict) -> dict:
    """{role: RSS in MiB, or None when the process is gone}."""
    import psutil

    out = {}
    for role, process in processes.items():
        try:
            out[role] = process.memory_info().rss / 2**20
        except psutil.Error:
            out[role] = None
    return out
