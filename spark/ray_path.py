"""The Ray-native read path.

When the broker runs on a Ray cluster that the Spark application can reach
(Ray-on-Spark: ``spark.ray_on_spark``), Spark's planner — a Python worker on
the driver — connects to that cluster (the ``ray.address`` option, which
``spark.register(spark, ray_address=...)`` and ``RayOnSpark`` set by default)
and asks each partition's leader replica actor — named
``<topic>-<partition>@<broker id>`` in the ``raykafka`` namespace — for the
file slices of its segment files that hold the range
(``read(fetch_offset, max_bytes, isolation, -1)`` -> ``(error, hw, lso,
log_start, [(path, position, length, base offset, inode), ...])``). The Spark
tasks then read those bytes straight from the segment files: no Fetch request,
no edge actor, no socket, no broker CPU.

The slices are only readable on the leader's node, and a segment can be
deleted (retention) or replaced (compaction) between planning and reading, so
the task checks the file (inode, first batch's base offset) and every batch
(magic, CRC, offsets moving forward), and reads over the Kafka protocol from
the first offset it could not read this way.
"""
from __future__ import annotations

import logging
import os
from typing import Iterator

from crc32c import crc32c

from core.error_codes import ErrorCode
from spark.decode import ArrowBuilder
from storage.record_batch import ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, unpack_header
from storage.slice_reader import SliceReader

log = logging.getLogger("raykafka.spark")

Slice = tuple  # (path, position, length[, base offset of the first batch[, inode]])
CHUNK_BYTES = 8 << 20
_ALL = 1 << 62  # max_bytes for a read(): every batch up to the high watermark


class RayPathUnavailable(RuntimeError):
    pass


def connect(address: str | None, auth_token_path: str | None = None) -> bool:
    """Connect this process (Spark's planner, a Python worker) to the Ray
    cluster at ``address`` (the ``ray.address`` option; else $RAY_ADDRESS)
    with the token in ``auth_token_path`` (the ``ray.authTokenPath`` option;
    else this process's RAY_AUTH_* environment); False when there is none to
    connect to, or it refuses us."""
    try:
        import ray
    except ImportError:
        return False
    if ray.is_initialized():
        return True
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        return False
    if not _reachable(address):
        log.warning("Ray at %s is not reachable; reading over the Kafka protocol", address)
        return False
    if auth_token_path:
        from spark.ray_auth import use_token

        use_token(auth_token_path)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 configure_logging=False)
    except Exception as exc:  # unreachable cluster, version mismatch
        log.warning("cannot connect to Ray at %s: %s", address, exc)
        return False
    return True


def _reachable(address: str, timeout_s: float = 2.0) -> bool:
    """A quick TCP check of the GCS address: ray.init would retry for a minute."""
    import socket

    host, _, port = address.rpartition(":")
    if address.startswith(("ray://", "auto")) or not port.isdigit():
        return True
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def _leader_replicas(ray, keys: set[tuple[str, int, int]], namespace: str, timeout_s: float) -> dict:
    """(topic, partition, leader broker) -> the leader replica's actor handle, where
    one is found: by its name, else through its node's edge. With hibernation on
    (issue 30) a hibernated replica has no actor and one a spare adopted has no
    name; the edge's pool knows both and wakes the hibernated one for this read,
    as a Kafka fetch would."""
    from core.naming import edge_actor_name, replica_actor_name

    found: dict[tuple[str, int, int], object] = {}
    missing: dict[int, list[tuple[str, int]]] = {}
    for topic, partition, leader in keys:
        if leader < 0:
            continue
        try:
            found[(topic, partition, leader)] = ray.get_actor(replica_actor_name(topic, partition, leader),
                                                              namespace=namespace)
        except ValueError:
            missing.setdefault(leader, []).append((topic, partition))
    for leader, pooled in missing.items():
        try:
            edge = ray.get_actor(edge_actor_name(leader), namespace=namespace)
            answers = ray.get(edge.pooled_replicas.remote(pooled, True), timeout=timeout_s)
        except Exception as exc:  # no such edge, a wake that failed or took too long: no handle
            log.warning("Ray-native planning: broker %d's edge found no replica for %s: %s", leader, pooled, exc)
            continue
        for (topic, partition), handle in zip(pooled, answers):
            if handle is not None:
                found[(topic, partition, leader)] = handle
    return found


def plan_slices(ranges, leaders: dict[tuple[str, int], int], namespace: str, isolation_level: int = 0,
                timeout_s: float = 60.0, required: bool = False,
                address: str | None = None, auth_token_path: str | None = None) -> list[list[Slice] | None]:
    """File slices covering each range from its start, or None where the
    replica actor cannot be asked (``required`` turns that into an error).

    read_committed reads go over the Kafka protocol, whose fetch answers
    list the aborted transactions to skip; file slices do not carry them."""
    if isolation_level == 1:
        if required:
            raise RayPathUnavailable("readPath=ray reads read_uncommitted only: with "
                                     "kafka.isolation.level=read_committed use readPath=kafka or auto")
        return [None] * len(ranges)
    if not connect(address, auth_token_path):
        if required:
            raise RayPathUnavailable("readPath=ray needs the address of the broker's Ray cluster: set the option "
                                     "'ray.address' (or RAY_ADDRESS in the Spark workers' environment)")
        return [None] * len(ranges)
    import ray

    from core.naming import replica_actor_name

    handles = _leader_replicas(ray, {(r.topic, r.partition, leaders.get((r.topic, r.partition), -1))
                                     for r in ranges}, namespace, timeout_s)
    refs = []
    for r in ranges:
        leader = leaders.get((r.topic, r.partition), -1)
        handle = handles.get((r.topic, r.partition, leader))
        if handle is None:
            if required:
                name = replica_actor_name(r.topic, r.partition, leader)
                raise RayPathUnavailable(f"readPath=ray: no replica actor {name!r} in Ray namespace {namespace!r} "
                                         "(is this driver connected to the broker's Ray cluster?)")
            refs.append(None)
            continue
        refs.append(handle.read.remote(r.start, _ALL, isolation_level, -1))
    live = [ref for ref in refs if ref is not None]
    try:
        answers = iter(ray.get(live, timeout=timeout_s)) if live else iter(())
    except Exception as exc:  # actor died, timeout: the Kafka path still works
        if required:
            raise RayPathUnavailable(f"readPath=ray: replica actors did not answer: {exc}") from exc
        log.warning("Ray-native planning failed, reading over the Kafka protocol: %s", exc)
        return [None] * len(ranges)
    out: list[list[Slice] | None] = []
    for ref in refs:
        if ref is None:
            out.append(None)
            continue
        error, _hw, _lso, _log_start, slices = next(answers)
        out.append([tuple(s) for s in slices] if error == ErrorCode.none else None)
    return out


def authorize_slices(client, ranges, slices: list[list[Slice] | None],
                     required: bool = False) -> list[list[Slice] | None]:
    """The Ray-native path reads segment files, past the broker's TLS, SASL,
    ACLs and quotas; so it serves only what the broker would serve the
    reading principal. Before any file slice is used, the broker is asked
    over the Kafka protocol, as the principal the Kafka path reads as (the
    source's own connection), for a Fetch of each partition at the end of
    its range: Kafka's READ check on the topic comes first in a Fetch.
    TOPIC_AUTHORIZATION_FAILED fails the query, as it would over the Kafka
    path; a partition the broker did not answer for reads over the Kafka
    protocol (``required``: readPath=ray fails instead)."""
    positions = {(r.topic, r.partition): r.end for r, s in zip(ranges, slices) if s is not None}
    if not positions:
        return slices
    answers = client.read_access(positions)
    out: list[list[Slice] | None] = []
    for r, planned in zip(ranges, slices):
        if planned is None:
            out.append(None)
            continue
        code = answers.get((r.topic, r.partition), ErrorCode.unknown_server_error)
        if code == ErrorCode.topic_authorization_failed:
            from spark.wire import KafkaError

            raise KafkaError(f"Not authorized to read topic {r.topic} (TOPIC_AUTHORIZATION_FAILED)", code)
        if code in (ErrorCode.none, ErrorCode.offset_out_of_range):
            out.append(planned)
        elif required:
            raise RayPathUnavailable(f"readPath=ray: the broker did not confirm READ on {r.topic}-{r.partition} "
                                     f"({ErrorCode(code).name.upper()})")
        else:
            out.append(None)
    return out


class _Stale(Exception):
    pass


def read_slices(builder: ArrowBuilder, slices: list[Slice], start: int, end: int,
                chunk_bytes: int = CHUNK_BYTES) -> Iterator:
    """Yield RecordBatches of offsets [start, end) read from the slices; the
    generator's return value is the offset reached (< end when the rest must be
    read over the Kafka protocol)."""
    offset = start
    last_seen = -1
    try:
        with SliceReader(max_open_fds=4) as reader:
            for piece in slices:
                if offset >= end:
                    break
                path, position, length = piece[0], piece[1], piece[2]
                base_offset = piece[3] if len(piece) > 3 and piece[3] is not None else -1
                inode = piece[4] if len(piece) > 4 else None
                fd = None
                pos, stop = position, position + length
                while pos < stop and offset < end:
                    want = min(chunk_bytes, stop - pos)
                    if fd is None:
                        # The slice's first chunk through the checked reader: from the
                        # file planned (inode), whole, starting with the batch planned
                        # (else SliceChangedError, an OSError); the rest from its fd.
                        buf = reader.read(path, pos, want, base_offset, inode)
                        fd = reader.open(path)[0]
                    else:
                        buf = os.pread(fd, want, pos)
                    if len(buf) < HEADER_SIZE:
                        raise _Stale(f"{path}: short read at {pos}")
                    size = unpack_header(buf).batch_length + LOG_OVERHEAD
                    if size > len(buf):  # one batch larger than the chunk
                        if pos + size > stop:
                            raise _Stale(f"{path}: batch at {pos} overruns its slice")
                        buf = os.pread(fd, size, pos)
                        if len(buf) < size:
                            raise _Stale(f"{path}: short read at {pos}")
                    good, last_seen = _checked_prefix(buf, last_seen, offset, path, pos)
                    if good < len(buf):
                        buf = buf[:good]
                    offset, done = builder.add(buf, offset, end)
                    batch = builder.take()
                    if batch is not None:
                        yield batch
                    pos += good
                    if done:
                        return offset
    except (OSError, _Stale) as exc:
        log.info("Ray-native read of %s-%d stopped at offset %d (%s); continuing over the Kafka protocol",
                 builder.topic, builder.partition, offset, exc)
    return offset


def _checked_prefix(buf: bytes, last_seen: int, offset: int, path: str, pos: int) -> tuple[int, int]:
    """Length of the run of whole, valid batches at the start of ``buf``."""
    at = 0
    total = len(buf)
    mv = memoryview(buf)
    while total - at >= HEADER_SIZE:
        h = unpack_header(buf, at)
        size = h.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or at + size > total:
            break
        base, last = h.base_offset, h.base_offset + h.last_offset_delta
        if h.magic != 2 or base <= last_seen or (last_seen < 0 and last < offset):
            raise _Stale(f"{path}: unexpected batch (offsets {base}..{last}) at {pos + at}")
        if crc32c(mv[at + ATTRIBUTES_OFFSET: at + size]) != h.crc:
            raise _Stale(f"{path}: CRC mismatch at {pos + at}")
        last_seen = last
        at += size
    if at == 0:
        raise _Stale(f"{path}: no whole batch at {pos}")
    return at, last_seen
