"""The edge's logic, without the Ray actor shell: dispatch of decoded requests to
handlers, the metadata cache, and the calls out to replica and controller actors.

Every cross-actor await goes through `call()`, which bounds it with a timeout.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode

from core.config import BrokerConfig
from net import registry
from net.codec import MalformedRequest, decode_request, encode_response, response_schema
from net.metadata_cache import MetadataCache
from net.schema_build import build, nested, ZERO_THROTTLE
from core.local_calls import LocalCallFailed, LocalCallLost
from core.local_channels import LocalChannels
from core.shared_region import SharedRegion
from net.edge_metrics import CURRENT as CURRENT_REQUEST, EdgeMetrics
from net.fetch_local_tail import LocalTail
from net.fetch_read_ahead import FetchReadAhead
from net.fetch_session import FetchSessionCache
from net.file_region import FdBudget, FileRecords, FileRegion, SplicedResponse
from net.server import CloseConnection, Connection

log = logging.getLogger("raykafka.edge")

_BASE_OFFSET = struct.Struct(">q")
# Slices shorter than this are read as bytes even when sendfile could serve
# them: below it the extra event-loop turn of a sendfile costs more than the
# copies it saves.
SENDFILE_MIN_BYTES = 64 * 1024

API_VERSIONS_KEY = 18


class ActorCallFailed(Exception):
    """A replica/controller call timed out or its actor is gone."""

    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error


def _call_failure(exc: BaseException) -> ActorCallFailed | None:
    """What a failed cross-actor call means to the client, or None for an
    error of our own (re-raised). A gone actor (Ray's RayActorError /
    ActorDiedError, or its direct channel lost) is NOT_LEADER_OR_FOLLOWER:
    retriable, the client refreshes metadata; a timeout REQUEST_TIMED_OUT."""
    if isinstance(exc, asyncio.TimeoutError):
        return ActorCallFailed(ErrorCode.request_timed_out, "actor call timed out")
    if isinstance(exc, (LocalCallLost, LocalCallFailed)):
        # The edge closes a channel itself when its replica stops leading
        # here (a metadata update): calls still parked on it end as expected.
        quiet = isinstance(exc, LocalCallLost) and exc.closed_by_caller
        log.log(logging.INFO if quiet else logging.WARNING, "direct actor call failed: %s", str(exc)[:300])
        return ActorCallFailed(ErrorCode.not_leader_or_follower, str(exc))
    if type(exc).__module__.startswith("ray"):
        log.warning("actor call failed: %s", str(exc).splitlines()[0][:300])
        return ActorCallFailed(ErrorCode.not_leader_or_follower, str(exc))
    return None


class RequestContext:
    __slots__ = ("edge", "conn", "header", "api_version")

    def __init__(self, edge: "EdgeService", conn: Connection | None, header: Any, api_version: int):
        self.edge = edge
        self.conn = conn
        self.header = header
        self.api_version = api_version


class PartitionAppender:
    """Coalesces appends for one partition: while one append call is in flight,
    later record sets queue up and go to the replica together in the next call.

    This keeps per-partition order (one call at a time, FIFO) and turns many
    small produce requests into few actor calls (~1.5 ms each).

    Bound on added latency: none is added on purpose (no linger). A record set
    waits only while the previous append call for its partition is in flight,
    i.e. at most one append round trip (measured ~1-3 ms here; bounded by the
    actor call timeout), and one call carries at most MAX_SETS_PER_CALL sets /
    MAX_BYTES_PER_CALL bytes, so the wait cannot grow with load.
    """

    MAX_SETS_PER_CALL = 256
    MAX_BYTES_PER_CALL = 16 * 1024 * 1024

    def __init__(self, edge: "EdgeService", topic: str, partition: int):
        self.edge = edge
        self.topic = topic
        self.partition = partition
        self.queue: collections.deque = collections.deque()
        self.inflight = False
        # Zero-copy path to the leader on this node; None until first used,
        # False once the leader could not use it (then bytes go through Ray).
        self.region: SharedRegion | None | bool = None

    def _shared_region(self) -> SharedRegion | None:
        if self.region is None:
            name = f"raykafka-{os.getpid()}-{self.edge.broker_id}-{self.topic}-{self.partition}"
            try:
                self.region = SharedRegion.create(name, self.MAX_BYTES_PER_CALL)
            except OSError as exc:
                log.warning("no shared memory for %s-%d (%s): sending bytes through Ray", self.topic,
                            self.partition, exc)
                self.region = False
        return self.region or None

    def close(self, disable: bool = True) -> None:
        if self.region:
            self.region.close()
        self.region = False if disable else None

    def append(self, records: bytes, acks: int, timeout_ms: int, leader_epoch: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.queue.append((records, acks, timeout_ms, leader_epoch, future))
        if not self.inflight:
            self._send_next()
        return future

    def _send_next(self) -> None:
        batch = []
        size = 0
        epoch = self.queue[0][3]
        while self.queue and len(batch) < self.MAX_SETS_PER_CALL and self.queue[0][3] == epoch:
            if batch and size + len(self.queue[0][0]) > self.MAX_BYTES_PER_CALL:
                break
            item = self.queue.popleft()
            size += len(item[0])
            batch.append(item)
        self.inflight = True
        asyncio.ensure_future(self._run(batch, epoch))

    async def _run(self, batch: list, leader_epoch: int) -> None:
        try:
            handle = self.edge.leader_handle(self.topic, self.partition)
            if handle is None:
                results = [(int(ErrorCode.not_leader_or_follower), -1, -1, -1, None, -1, -1)] * len(batch)
            else:
                timeout_ms = max(item[2] for item in batch)
                timeout_s = timeout_ms / 1000 + self.edge.call_timeout_s
                region = self._shared_region()
                size = sum(len(item[0]) for item in batch)
                results = None
                local_tail = self.edge.local_tail
                want_tail = local_tail is not None
                if region is not None and size <= region.size:
                    offset, placed = 0, []
                    for records, acks, set_timeout, _epoch, _future in batch:
                        region.write(offset, records)
                        placed.append((offset, len(records), acks, set_timeout))
                        offset += len(records)
                    results = await self.edge.node_call(handle, "append_shared", region.path, placed,
                                                           leader_epoch, want_tail, timeout_s=timeout_s)
                    if results is None:  # the leader cannot map it (another node?): stop trying
                        self.close()
                if results is None:
                    sets = [(item[0], item[1], item[2]) for item in batch]
                    results = await self.edge.call(handle.append.remote(sets, leader_epoch, want_tail),
                                                   timeout_s=timeout_s)
                if want_tail:
                    results, committed = results
                    if committed is not None:
                        local_tail.publish(self.topic, self.partition, *committed)
        except ActorCallFailed as exc:
            # The leader may still be reading the region: never reuse it.
            self.close(disable=False)
            results = [(int(exc.error), -1, -1, -1, str(exc), -1, -1)] * len(batch)
        except Exception as exc:  # never leave a producer without an answer
            log.exception("append to %s-%d failed", self.topic, self.partition)
            results = [(int(ErrorCode.unknown_server_error), -1, -1, -1, str(exc), -1, -1)] * len(batch)
        finally:
            self.inflight = False
        for item, result in zip(batch, results):
            if not item[4].done():
                item[4].set_result(result)
        if self.queue:
            self._send_next()


class EdgeService:
    def __init__(self, config: BrokerConfig, broker_id: int, advertised_host: str, advertised_port: int,
                 node_id: str | None = None):
        self.config = config
        self.broker_id = broker_id
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.metadata = MetadataCache()
        self.metadata_ready = asyncio.Event()
        self.handlers = registry.handlers()
        self.call_timeout_s = config["raykafka.actor.call.timeout.ms"] / 1000
        # Direct channels to the replicas, purgatory and group coordinators of
        # this node (core/local_channels.py); off without the node's id or with
        # raykafka.local.calls=false.
        self.local_channels = LocalChannels(node_id if config["raykafka.local.calls"] else None,
                                            self.call_timeout_s)
        self._leader_handles: dict[tuple[str, int], Any] = {}
        self._appenders: dict[tuple[str, int], PartitionAppender] = {}
        self.controller_handle: Any = None
        self.purgatory: Any = None  # this node's purgatory actor
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"],
                                                config["min.incremental.fetch.session.eviction.ms"])
        self.read_ahead_runs = config["raykafka.fetch.read.ahead"]
        self.read_ahead = FetchReadAhead(ttl_s=config["raykafka.fetch.read.ahead.ttl.ms"] / 1000)
        # Tail fetches answered from this edge's own appends (net/fetch_local_tail.py);
        # the wait for a local append is off with several edges per node.
        local_wait_ms = config["raykafka.fetch.local.tail.wait.ms"]
        self.local_tail: LocalTail | None = (
            LocalTail(wait_s=local_wait_ms / 1000 if config["raykafka.edge.processes"] == 1 else 0.0,
                      ttl_s=config["raykafka.fetch.read.ahead.ttl.ms"] / 1000)
            if local_wait_ms > 0 else None)
        self._fds: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.max_open_fds = 256
        # fds duplicated for file regions of responses not yet written.
        self.region_fds = FdBudget(1024)
        self.fault_hooks: dict[int, Any] = {}  # api_key -> async hook(ctx, request) for tests
        self._coordinators: dict[int, Any] = {}  # __consumer_offsets partition -> group coordinator actor
        self._offsets_topic_creation: asyncio.Future | None = None
        # Kafka's request and topic metrics (net/edge_metrics.py); None: not recorded.
        self.metrics: EdgeMetrics | None = (
            EdgeMetrics(broker_id, {key: h.name for key, h in self.handlers.items()})
            if config["raykafka.metrics.enabled"] else None)

    # ---- metadata from the controller ----------------------------------------------------
    def forget_cached_reads(self, topic: str | None = None, partition: int | None = None) -> None:
        """Drop the fetch answers this edge keeps (read-ahead runs, local tail
        answers): all of them, or those of one topic or partition."""
        caches = (self.read_ahead, self.local_tail) if self.local_tail is not None else (self.read_ahead,)
        for cache in caches:
            if topic is None:
                cache.clear()
            else:
                cache.forget(topic, partition)

    def apply_update_metadata(self, snapshot: dict, leader_handles: dict, controller_handle: Any) -> None:
        before = self.metadata.topics
        self.metadata.update(snapshot)
        if self.metrics is not None and before:
            self.metrics.metadata_changed(before, self.metadata.topics, self.metadata.controller_id, self.broker_id)
        self._leader_handles = dict(leader_handles)
        self.local_channels.keep_only([*self._leader_handles.values(), self.purgatory,
                                       *self._coordinators.values()])
        self.forget_cached_reads()  # leaders may have moved: nothing read before is answered again
        self.controller_handle = controller_handle
        for key in list(self._appenders):
            if key not in self._leader_handles and not self._appenders[key].inflight:
                self._appenders.pop(key).close()
        self.metadata_ready.set()

    def leader_handle(self, topic: str, partition: int):
        return self._leader_handles.get((topic, partition))

    def appender(self, topic: str, partition: int) -> PartitionAppender:
        key = (topic, partition)
        appender = self._appenders.get(key)
        if appender is None:
            appender = self._appenders[key] = PartitionAppender(self, topic, partition)
        return appender

    # ---- cross-actor calls ----------------------------------------------------------------
    async def call(self, ref, timeout_s: float | None = None):
        try:
            return await asyncio.wait_for(ref, timeout_s or self.call_timeout_s)
        except Exception as exc:
            failure = _call_failure(exc)
            if failure is None:
                raise
            raise failure from None

    async def node_call(self, handle, method: str, *args, timeout_s: float | None = None):
        """A call to a replica or the purgatory of this node: over its direct
        channel when the edge has one, else through Ray; failures as in call()."""
        try:
            return await self.local_channels.call(handle, method, args, timeout_s or self.call_timeout_s)
        except Exception as exc:
            failure = _call_failure(exc)
            if failure is None:
                raise
            raise failure from None

    async def delay_produce(self, required: list[tuple[str, int, int]], timeout_ms: int) -> dict:
        """Park a DelayedProduce; -> {(topic, partition): error code}."""
        if self.purgatory is None:
            return {(t, p): int(ErrorCode.request_timed_out) for t, p, _ in required}
        parked = time.perf_counter()
        try:
            return await self.node_call(self.purgatory, "delay_produce", required, timeout_ms,
                                        timeout_s=timeout_ms / 1000 + self.call_timeout_s)
        except ActorCallFailed as exc:
            return {(t, p): int(exc.error) for t, p, _ in required}
        finally:
            _add_remote_time(parked)

    async def delay_fetch(self, known_ends: list[tuple[str, int, int]], isolation_level: int,
                          timeout_ms: int) -> bool:
        """Park a DelayedFetch until a partition's fetchable end moves; False on timeout."""
        if self.purgatory is None or timeout_ms <= 0:
            return False
        parked = time.perf_counter()
        try:
            return await self.node_call(self.purgatory, "delay_fetch", known_ends, isolation_level, timeout_ms,
                                        timeout_s=timeout_ms / 1000 + self.call_timeout_s)
        except ActorCallFailed:
            return False
        finally:
            _add_remote_time(parked)

    async def controller_call(self, method: str, *args, timeout_s: float | None = None):
        if self.controller_handle is None:
            raise ActorCallFailed(ErrorCode.not_controller, "no active controller known")
        try:
            return await self.call(getattr(self.controller_handle, method).remote(*args), timeout_s)
        except ActorCallFailed as exc:
            if exc.error == ErrorCode.not_leader_or_follower:
                # The controller actor is gone (failover under way): admin clients
                # retry NOT_CONTROLLER after refreshing metadata.
                raise ActorCallFailed(ErrorCode.not_controller, str(exc)) from None
            raise

    # ---- consumer-group coordinators (actors/group_coordinator.py) ------------------------------
    def group_partition(self, group_id: str) -> int | None:
        """The __consumer_offsets partition owning a group; None before the topic exists."""
        from cluster.groups import partition_for_group
        from actors.group_coordinator import OFFSETS_TOPIC

        info = self.metadata.topics.get(OFFSETS_TOPIC)
        return partition_for_group(group_id, len(info.partitions)) if info and info.partitions else None

    def leads_offsets_partition(self, partition: int) -> bool:
        from actors.group_coordinator import OFFSETS_TOPIC

        info = self.metadata.partition(OFFSETS_TOPIC, partition)
        return info is not None and info.leader == self.broker_id

    async def coordinator_handle(self, partition: int):
        """This node's coordinator actor of an offsets partition this broker leads, else None."""
        if not self.leads_offsets_partition(partition):
            return None
        handle = self._coordinators.get(partition)
        if handle is None:
            from actors.group_coordinator import coordinator_actor_name

            name, namespace = coordinator_actor_name(partition, self.broker_id), self.config["raykafka.namespace"]

            def lookup():
                import ray

                try:
                    return ray.get_actor(name, namespace=namespace)
                except ValueError:
                    return None

            try:
                handle = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, lookup),
                                                self.call_timeout_s)
            except asyncio.TimeoutError:
                handle = None
            if handle is None:
                return None
            self._coordinators[partition] = handle
        return handle

    async def group_call(self, group_id: str, method: str, *args, timeout_s: float | None = None):
        """Call the coordinator of a group on this node -> (error or None, answer).
        NOT_COORDINATOR when this broker does not lead the group's offsets
        partition (or its coordinator is gone); REQUEST_TIMED_OUT on a timeout."""
        partition = self.group_partition(group_id)
        handle = None if partition is None else await self.coordinator_handle(partition)
        if handle is None:
            return ErrorCode.not_coordinator, None
        try:
            return None, await self.local_channels.call(handle, method, args, timeout_s or self.call_timeout_s)
        except asyncio.TimeoutError:
            return ErrorCode.request_timed_out, None
        except Exception as exc:
            if isinstance(exc, LocalCallFailed) or type(exc).__name__.startswith("RayTaskError"):
                # a bug in the coordinator, not a move
                log.error("group coordinator %s failed: %s", method, str(exc).splitlines()[-1][:300])
                return ErrorCode.unknown_server_error, None
            if not (isinstance(exc, LocalCallLost) or type(exc).__module__.startswith("ray")):
                raise
            # The coordinator actor is gone (its node died, or it moved): rediscover.
            self._coordinators.pop(partition, None)
            return ErrorCode.not_coordinator, None

    async def local_coordinators(self) -> list:
        """Handles of every coordinator of an offsets partition this broker leads."""
        from actors.group_coordinator import OFFSETS_TOPIC

        info = self.metadata.topics.get(OFFSETS_TOPIC)
        partitions = sorted(p for p, s in info.partitions.items() if s.leader == self.broker_id) if info else []
        handles = await asyncio.gather(*(self.coordinator_handle(p) for p in partitions))
        return [(p, h) for p, h in zip(partitions, handles) if h is not None]

    async def ensure_offsets_topic(self) -> ErrorCode | None:
        """Ask the controller to create __consumer_offsets (once; concurrent
        callers share the request). None once it exists."""
        from actors.group_coordinator import OFFSETS_TOPIC

        if OFFSETS_TOPIC in self.metadata.topics:
            return None
        if self._offsets_topic_creation is None or self._offsets_topic_creation.done():
            self._offsets_topic_creation = asyncio.ensure_future(self._create_offsets_topic())
        return await asyncio.shield(self._offsets_topic_creation)

    async def _create_offsets_topic(self) -> ErrorCode | None:
        try:
            code, message = await self.controller_call("ensure_offsets_topic", timeout_s=2 * self.call_timeout_s)
        except ActorCallFailed as exc:
            log.warning("creating __consumer_offsets failed: %s", exc)
            return ErrorCode.coordinator_not_available
        if code not in (0, int(ErrorCode.topic_already_exists)):
            log.warning("creating __consumer_offsets failed: %s (%s)", ErrorCode(code).name, message)
            return ErrorCode.coordinator_not_available
        return None

    # ---- reading log slices the leader points us at ----------------------------------------
    def read_slices(self, slices: list[tuple[str, int, int, int, int]]) -> bytes:
        """pread the (path, position, length, base offset, inode) slices of a local leader's segments.

        A segment may be replaced at its path (compaction swaps a new file in)
        or deleted (retention) between the leader's answer and this read: the
        bytes must come from the very file (inode) the leader named, and start
        with the batch it named; otherwise FileNotFoundError and the caller
        asks the leader again."""
        if len(slices) == 1:
            return self._pread_checked(*slices[0])
        return b"".join(self._pread_checked(*s) for s in slices)

    def read_records(self, slices: list[tuple[str, int, int, int, int]], zero_copy: bool) -> bytes | FileRecords:
        """The records of `slices` as bytes, or, with `zero_copy` (the response
        goes out on a socket that can sendfile), as FileRecords whose large
        slices are regions of the checked files, sent without copying. Same
        checks as read_slices; FileNotFoundError when a slice's file is gone."""
        if not zero_copy:
            return self.read_slices(slices)
        pieces: list = []
        try:
            for path, position, length, base_offset, inode in slices:
                region = None
                if length >= SENDFILE_MIN_BYTES and self.region_fds.try_acquire():
                    try:
                        region = self._region_checked(path, position, length, base_offset, inode)
                    finally:
                        if region is None:
                            self.region_fds.release()
                pieces.append(region if region is not None
                              else self._pread_checked(path, position, length, base_offset, inode))
        except BaseException:
            for piece in pieces:
                if type(piece) is FileRegion:
                    piece.close()
            raise
        if all(type(p) is bytes for p in pieces):
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return FileRecords(pieces)

    def _region_checked(self, path: str, position: int, length: int, base_offset: int,
                        inode: int) -> FileRegion | None:
        """A region of the file the leader named (inode), holding the whole slice
        and starting with the batch it named; sent later from a duplicate fd,
        so neither the fd cache nor a swap at the path can change its file.
        None when no fd can be spared (then bytes are read)."""
        for _attempt in range(2):
            fd, fd_inode = self._open(path)
            if fd_inode == inode:
                try:
                    region_fd = os.dup(fd)
                except OSError:  # out of fds
                    return None
                region = FileRegion(region_fd, position, length, base_offset, self.region_fds)
                if region.intact():
                    return region
                region.budget = None  # the caller releases the budget it acquired
                region.close()
            self.forget_fd(path)  # a cached fd of a replaced file: reopen once
        raise FileNotFoundError(path)

    def _pread_checked(self, path: str, position: int, length: int, base_offset: int, inode: int) -> bytes:
        for _attempt in range(2):
            fd, fd_inode = self._open(path)
            if fd_inode == inode:
                data = os.pread(fd, length, position)
                if len(data) == length and _BASE_OFFSET.unpack_from(data, 0)[0] == base_offset:
                    return data
            self.forget_fd(path)  # a cached fd of a replaced file: reopen once
        raise FileNotFoundError(path)

    def _open(self, path: str) -> tuple[int, int]:
        entry = self._fds.get(path)
        if entry is None:
            fd = os.open(path, os.O_RDONLY)
            entry = self._fds[path] = (fd, os.fstat(fd).st_ino)
            while len(self._fds) > self.max_open_fds:
                _, (old, _ino) = self._fds.popitem(last=False)
                os.close(old)
        else:
            self._fds.move_to_end(path)
        return entry

    def forget_fd(self, path: str) -> None:
        entry = self._fds.pop(path, None)
        if entry is not None:
            os.close(entry[0])

    def close(self) -> None:
        self.local_channels.close()
        for appender in self._appenders.values():
            appender.close()
        for fd, _ino in self._fds.values():
            os.close(fd)
        self._fds.clear()

    # ---- dispatch ------------------------------------------------------------------------
    def dispatch(self, conn: Connection, api_key: int, api_version: int, correlation_id: int,
                 frame: bytes | memoryview):
        """Called in arrival order; returns an awaitable of the encoded response."""
        handler = self.handlers.get(api_key)
        if handler is None:
            raise_later = CloseConnection(f"unknown api key {api_key}")
            return _fail(raise_later)
        if not handler.serves(api_version):
            if api_key == API_VERSIONS_KEY:
                return _done(self.unsupported_api_versions(correlation_id))
            return _fail(CloseConnection(
                f"unsupported version {api_version} of {handler.name} (serving "
                f"{handler.min_version}-{handler.max_version})"))
        try:
            header, request = decode_request(api_key, api_version, frame)
        except MalformedRequest as exc:
            return _fail(CloseConnection(str(exc)))
        ctx = RequestContext(self, conn, header, api_version)
        hook = self.fault_hooks.get(api_key)
        coroutine = handler.handler(ctx, request) if hook is None else hook(ctx, request, handler.handler)
        if self.metrics is not None:
            return _measured(coroutine, correlation_id, self, api_key, request)
        return _encode_when_done(coroutine, correlation_id)

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """UNSUPPORTED_VERSION in the v0 layout, listing what we serve, so the
        client can retry with a version we know (KIP-511)."""
        schema = response_schema(API_VERSIONS_KEY, 0)
        return encode_response(build(
            schema,
            error_code=ErrorCode.unsupported_version,
            api_keys=self.api_versions_entries(nested(schema, "ApiVersion")),
        ), correlation_id)

    def api_versions_entries(self, entry_cls) -> tuple:
        return tuple(
            entry_cls(api_key=h.api_key, min_version=h.advertised_min_version, max_version=h.max_version)
            for h in sorted(self.handlers.values(), key=lambda h: h.api_key)
        )


async def _encode_when_done(coroutine, correlation_id: int):
    response = await coroutine
    if response is None:
        return None
    if type(response) is SplicedResponse:  # Fetch with file regions: -> ResponseFrame
        return response.to_frame(correlation_id)
    return encode_response(response, correlation_id)


async def _measured(coroutine, correlation_id: int, service: "EdgeService", api_key: int, request):
    """_encode_when_done, noting when the handler starts and ends (the
    server's RequestTimes for this request, when it made one) and handing the
    answer to the edge's metrics."""
    times = CURRENT_REQUEST.get()
    if times is not None:
        times.started = time.perf_counter()
    response = await coroutine
    if times is not None:
        times.handled = time.perf_counter()
    service.metrics.response_ready(api_key, request, response, service.metadata)
    if response is None:
        return None
    if type(response) is SplicedResponse:  # Fetch with file regions: -> ResponseFrame
        return response.to_frame(correlation_id)
    return encode_response(response, correlation_id)


def _add_remote_time(since: float) -> None:
    """Time a request spent parked in the purgatory (Kafka's RemoteTimeMs)."""
    times = CURRENT_REQUEST.get()
    if times is not None:
        times.remote += time.perf_counter() - since


async def _done(value):
    return value


async def _fail(exc: Exception):
    raise exc


__all__ = ["EdgeService", "RequestContext", "ActorCallFailed", "ZERO_THROTTLE", "build", "nested"]
