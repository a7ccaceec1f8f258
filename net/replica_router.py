"""The edge's way to the replicas of its node (net/ports.Leaders and
net/ports.Purgatory): which leader replica serves a partition (from the
controller's UpdateMetadata), calls to it and to the node's purgatory through
the edge's ActorCalls (the direct channel when there is one), and the
produce appender that coalesces a partition's record sets into few calls,
placing their bytes in shared memory when it can. Handlers reach a leader
only through ``ReplicaRouter``'s typed methods (``append``, ``read_run``,
``list_offsets``, ...), all routed by ``call``.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from typing import Any, NamedTuple

from core.error_codes import ErrorCode

from core.pooled_replica import PooledReplica
from core.local_calls import TwoPartAnswer
from core.replica_messages import (AppendRequest, PartitionOffset, SharedAppendRequest, failed_append,
                                   first_uncommitted)
from core.shared_region import SharedRegion
from net.actor_calls import ActorCallFailed, call_failure, kafka_message, settle
from net.edge_metrics import CURRENT as CURRENT_REQUEST
from net.fetch_local_tail import LocalTail
from net.ports import ActorCalls

log = logging.getLogger("raykafka.edge")


class QueuedAppend(NamedTuple):
    """A produce request's record set for one partition, waiting in its
    PartitionAppender's queue: what append() sends, the leader epoch the
    request was routed with, and the future its AppendResult goes to."""
    records: bytes
    acks: int
    timeout_ms: int
    leader_epoch: int
    answer: asyncio.Future


class PendingCommitNotice(NamedTuple):
    """The second part an acks=all append call over the direct channel brings
    (core.replica_messages.CommitNotice): due once the HW reaches
    ``first_offset`` (the call's first set not committed when it answered)."""
    leader_epoch: int
    first_offset: int
    notice: asyncio.Future


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
    # Commit notices kept for the acks=all produces about to wait on them; a
    # produce whose notice fell out asks the leader as before.
    MAX_NOTICES = 64

    def __init__(self, router: "ReplicaRouter", topic: str, partition: int):
        self.router = router
        self.topic = topic
        self.partition = partition
        self.queue: collections.deque[QueuedAppend] = collections.deque()
        self.inflight = False
        # Zero-copy path to the leader on this node; None until first used,
        # False once the leader could not use it (then bytes go through Ray).
        self.region: SharedRegion | None | bool = None
        self.notices: collections.deque[PendingCommitNotice] = collections.deque(maxlen=self.MAX_NOTICES)

    def _shared_region(self) -> SharedRegion | None:
        if self.region is None:
            name = f"raykafka-{os.getpid()}-{self.router.broker_id}-{self.topic}-{self.partition}"
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
        """-> a future of the set's core.replica_messages.AppendResult."""
        future = asyncio.get_running_loop().create_future()
        self.queue.append(QueuedAppend(records, acks, timeout_ms, leader_epoch, future))
        if not self.inflight:
            self._send_next()
        return future

    def _send_next(self) -> None:
        batch = []
        size = 0
        queue = self.queue
        epoch = queue[0].leader_epoch
        while queue and len(batch) < self.MAX_SETS_PER_CALL and queue[0].leader_epoch == epoch:
            if batch and size + len(queue[0].records) > self.MAX_BYTES_PER_CALL:
                break
            item = queue.popleft()
            size += len(item.records)
            batch.append(item)
        self.inflight = True
        asyncio.ensure_future(self._run(batch, epoch))

    async def _run(self, batch: list[QueuedAppend], leader_epoch: int) -> None:
        router = self.router
        try:
            async with router.pinned(router.leader_handle(self.topic, self.partition)) as handle:
                results = await self._call(handle, batch, leader_epoch)
        except ActorCallFailed as exc:
            # The leader may still be reading the region: never reuse it.
            self.close(disable=False)
            results = [failed_append(exc.error, message=str(exc))] * len(batch)
        except Exception as exc:  # never leave a producer without an answer
            log.exception("append to %s-%d failed", self.topic, self.partition)
            results = [failed_append(ErrorCode.unknown_server_error, message=kafka_message(-1))] * len(batch)
        finally:
            self.inflight = False
        for item, result in zip(batch, results):
            if not item.answer.done():
                item.answer.set_result(result)
        if self.queue:
            self._send_next()

    async def _call(self, handle, batch: list[QueuedAppend], leader_epoch: int) -> list:
        router = self.router
        if handle is None:
            return [failed_append(ErrorCode.not_leader_or_follower)] * len(batch)
        timeout_ms = max(item.timeout_ms for item in batch)
        timeout_s = timeout_ms / 1000 + router.call_timeout_s
        region = self._shared_region()
        size = sum(len(item.records) for item in batch)
        answer = None
        local_tail = router.local_tail
        want_tail = local_tail is not None
        if region is not None and size <= region.size:
            offset, offsets, lengths = 0, [], []
            for item in batch:
                records = item.records
                region.write(offset, records)
                offsets.append(offset)
                lengths.append(len(records))
                offset += len(records)
            acks = [item.acks for item in batch]
            request = SharedAppendRequest(region.path, offsets, lengths, acks, [item.timeout_ms for item in batch],
                                          leader_epoch, want_tail)
            # acks=all over the direct channel: the leader answers at once and
            # sends the commit notice when the HW passes (no second call).
            pending = None
            if -1 in acks:
                later_s = max(item.timeout_ms for item in batch if item.acks == -1) / 1000 + router.call_timeout_s
                pending = router.calls.call_local(handle, "append_shared", (request._replace(commit_notice=True),),
                                                  timeout_s, later_s)
            if pending is not None:
                answer = await settle(pending)
                if type(answer) is TwoPartAnswer:
                    self._expect_notice(answer.later, leader_epoch, answer.answer.results, acks)
                    answer = answer.answer
            else:
                answer = await router.node_call(handle, "append_shared", request, timeout_s=timeout_s)
            if answer is None:  # the leader cannot map it (another node?): stop trying
                self.close()
        if answer is None:
            request = AppendRequest([item.records for item in batch], [item.acks for item in batch],
                                    [item.timeout_ms for item in batch], leader_epoch, want_tail)
            answer = await settle(router.calls.call_via_runtime(handle, "append", (request,), timeout_s))
        if want_tail and answer.committed_tail is not None:
            local_tail.publish(self.topic, self.partition, answer.committed_tail)
        return answer.results

    def _expect_notice(self, notice: asyncio.Future, leader_epoch: int, results: list, acks: list[int]) -> None:
        first = first_uncommitted(results, acks)
        if first is not None:
            self.notices.append(PendingCommitNotice(leader_epoch, first, notice))

    def notice_for(self, offset: int, leader_epoch: int) -> asyncio.Future | None:
        """The commit notice of the append call that wrote the set ending before
        ``offset`` under ``leader_epoch`` (the latest one due at or before it), or None."""
        for pending in reversed(self.notices):
            if pending.leader_epoch == leader_epoch and pending.first_offset <= offset:
                return pending.notice
        return None


class ReplicaRouter:
    """Leader replicas of this node by partition, and the calls to them and
    to the node's purgatory. Failures of those calls are ActorCallFailed
    (net/actor_calls.py)."""

    def __init__(self, broker_id: int, call_timeout_s: float, calls: ActorCalls, local_tail: LocalTail | None):
        self.broker_id = broker_id
        self.call_timeout_s = call_timeout_s
        self.calls = calls
        # Tail fetches answered from this edge's own appends (net/fetch_local_tail.py); None: off.
        self.local_tail = local_tail
        # (topic, partition) -> handle of its leader replica, when this broker leads it
        self.leader_handles: dict[tuple[str, int], Any] = {}
        self._appenders: dict[tuple[str, int], PartitionAppender] = {}
        self.purgatory: Any = None  # this node's purgatory actor
        # Live and hibernated replicas of this node (cluster/replica_pool.py, issue 30);
        # None: hibernation off, every leader handle is a live actor's.
        self.pool = None

    def set_leaders(self, leader_handles: dict) -> None:
        """The leader replicas of the latest UpdateMetadata; appenders of
        partitions no longer led here close once idle."""
        self.leader_handles = dict(leader_handles)
        for key in list(self._appenders):
            if key not in self.leader_handles and not self._appenders[key].inflight:
                self._appenders.pop(key).close()

    def leader_handle(self, topic: str, partition: int):
        return self.leader_handles.get((topic, partition))

    def leads(self, topic: str, partition: int) -> bool:
        """A leader replica of the partition is on this node (per the latest UpdateMetadata)."""
        return (topic, partition) in self.leader_handles

    def append(self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
               leader_epoch: int) -> asyncio.Future:
        """Queue a record set for the partition's leader -> a future of its AppendResult."""
        return self.appender(topic, partition).append(records, acks, timeout_ms, leader_epoch)

    # ---- the one route to a leader replica ------------------------------------------------------
    async def call(self, topic: str, partition: int, method: str, *args, timeout_s: float | None = None):
        """``method`` on the partition's leader replica here (woken if it hibernates);
        ActorCallFailed(NOT_LEADER_OR_FOLLOWER) when this node has none."""
        handle = self.leader_handles.get((topic, partition))
        if handle is None:
            raise ActorCallFailed(ErrorCode.not_leader_or_follower)
        return await self.node_call(handle, method, *args, timeout_s=timeout_s)

    def read_run(self, topic: str, partition: int, offset: int, max_bytes: int, isolation: int, leader_epoch: int,
                 min_bytes: int, wait_ms: int, runs: int, timeout_s: float):
        """Fetch: up to ``runs`` consecutive reads (the first answers this fetch)."""
        return self.call(topic, partition, "read_run", offset, max_bytes, isolation, leader_epoch, min_bytes,
                         wait_ms, runs, timeout_s=timeout_s)

    def list_offsets(self, topic: str, partition: int, timestamp: int, isolation: int, leader_epoch: int):
        return self.call(topic, partition, "list_offsets", timestamp, isolation, leader_epoch)

    def offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int, leader_epoch: int):
        return self.call(topic, partition, "offset_for_leader_epoch", current_leader_epoch, leader_epoch)

    def delete_records(self, topic: str, partition: int, offset: int, timeout_ms: int):
        """-> (error, low watermark), answered once the in-sync replicas moved their log start."""
        return self.call(topic, partition, "delete_records", offset, -1, timeout_ms,
                         timeout_s=timeout_ms / 1000 + self.call_timeout_s)

    def describe_producers(self, topic: str, partition: int):
        return self.call(topic, partition, "describe_producers")

    def write_txn_markers(self, topic: str, partition: int, markers: list, timeout_ms: int):
        """-> a result per marker (core.txn_messages), written with acks=all."""
        return self.call(topic, partition, "write_txn_markers", markers, timeout_ms,
                         timeout_s=timeout_ms / 1000 + self.call_timeout_s)

    def appender(self, topic: str, partition: int) -> PartitionAppender:
        key = (topic, partition)
        appender = self._appenders.get(key)
        if appender is None:
            appender = self._appenders[key] = PartitionAppender(self, topic, partition)
        return appender

    def live_handles(self) -> list:
        """Handles of the live leader replicas (pooled ones resolved, hibernated ones left out)."""
        out = []
        for handle in self.leader_handles.values():
            if type(handle) is PooledReplica:
                handle = self.pool.live_handle((handle.topic, handle.partition)) if self.pool is not None else None
            if handle is not None:
                out.append(handle)
        return out

    @contextlib.asynccontextmanager
    async def pinned(self, handle, timeout_s: float | None = None):
        """A live handle for `handle` while the block runs: a pooled replica is
        woken if it hibernates (the request waits, within its timeout) and not
        hibernated before the block ends. Other handles (and None) pass through."""
        if type(handle) is not PooledReplica:
            yield handle
            return
        if self.pool is None:
            yield None  # pooled by a controller whose edge has no pool (hibernation off here)
            return
        key = (handle.topic, handle.partition)
        try:
            live = await asyncio.wait_for(self.pool.acquire(key), timeout_s or self.call_timeout_s)
        except KeyError:
            yield None
            return
        except asyncio.TimeoutError:
            raise ActorCallFailed(ErrorCode.request_timed_out, f"waking {key[0]}-{key[1]} timed out") from None
        except ActorCallFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - the wake failed: as if the leader had gone
            failure = call_failure(exc)
            raise (failure or ActorCallFailed(ErrorCode.not_leader_or_follower, repr(exc))) from None
        try:
            yield live
        except ActorCallFailed as exc:
            if exc.actor_gone:  # the next request starts it again (not when the edge closed its channel)
                self.pool.lost(key, live)
            raise
        finally:
            self.pool.release(key)

    async def node_call(self, handle, method: str, *args, timeout_s: float | None = None):
        """A call to a replica or the purgatory of this node: over its direct
        channel when the edge has one, else through the runtime; failures as
        ActorCallFailed (net/actor_calls.call_failure).
        A pooled replica is woken first if it hibernates (pinned())."""
        if type(handle) is PooledReplica:
            async with self.pinned(handle, timeout_s) as live:
                if live is None:
                    raise ActorCallFailed(ErrorCode.not_leader_or_follower, "no such replica here")
                return await self.node_call(live, method, *args, timeout_s=timeout_s)
        try:
            return await self.calls.call(handle, method, args, timeout_s or self.call_timeout_s)
        except Exception as exc:
            failure = call_failure(exc)
            if failure is None:
                raise
            raise failure from None

    async def wait_committed(self, required: list[tuple[str, int, int, int]], timeout_ms: int) -> dict:
        """acks=all: wait at each partition's leader replica until its HW passes the offset
        (``(topic, partition, offset, leader epoch of the append)``; cluster/commit_waiters.py):
        the leader answers in the step that moves its HW, with no purgatory between.
        -> {(topic, partition): error code}."""
        parked = time.perf_counter()
        try:
            keys = [(t, p) for t, p, _, _ in required]
            waits = [self._wait_committed(t, p, offset, epoch, timeout_ms) for t, p, offset, epoch in required]
            return dict(zip(keys, await asyncio.gather(*waits)))
        finally:
            _add_remote_time(parked)

    async def _wait_committed(self, topic: str, partition: int, offset: int, leader_epoch: int,
                              timeout_ms: int) -> ErrorCode:
        appender = self._appenders.get((topic, partition))
        notice = appender.notice_for(offset, leader_epoch) if appender is not None else None
        if notice is not None:
            try:
                answer = await asyncio.wait_for(asyncio.shield(notice), timeout_ms / 1000 + self.call_timeout_s)
            except asyncio.TimeoutError:
                return ErrorCode.request_timed_out
            except Exception:  # noqa: BLE001 - the channel went, or the leader's wait failed: ask, as without one
                answer = None
            if answer is not None:
                error = ErrorCode(answer.error)
                if answer.high_watermark >= offset:
                    if error != ErrorCode.request_timed_out:
                        return error
                    # Its wait (for the call's last set) timed out after the HW had
                    # passed this set; the leader says whether it is committed: ask.
                elif error not in _COMMITTED:
                    return error
                # Otherwise a notice of an earlier call (this set's own brought none): ask.
        try:
            async with self.pinned(self.leader_handle(topic, partition)) as handle:
                if handle is None:
                    return ErrorCode.not_leader_or_follower
                return ErrorCode(await self.node_call(handle, "wait_committed", offset, leader_epoch, timeout_ms,
                                                      timeout_s=timeout_ms / 1000 + self.call_timeout_s))
        except ActorCallFailed as exc:
            return exc.error

    async def delay_fetch(self, known_ends: list[PartitionOffset], isolation_level: int,
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

    def close(self) -> None:
        for appender in self._appenders.values():
            appender.close()


# A commit notice with these says the HW reached the set it was due for.
_COMMITTED = (ErrorCode.none, ErrorCode.not_enough_replicas_after_append)


def _add_remote_time(since: float) -> None:
    """Time a request spent parked in the purgatory (Kafka's RemoteTimeMs)."""
    times = CURRENT_REQUEST.get()
    if times is not None:
        times.remote += time.perf_counter() - since
