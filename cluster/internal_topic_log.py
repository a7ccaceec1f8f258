"""A coordinator's state kept in an internal topic partition (Kafka's
``__consumer_offsets`` for the group coordinator, ``__transaction_state`` for
the transaction coordinator): the mechanism both coordinator actors share,
with no Ray in it.

* Leadership: the coordinator serves while its broker leads the partition
  (``lead`` / ``resign``, fenced by leader epoch). Every change bumps
  ``generation``, so a load or an append started under the old one notices.
* Loading: every batch of the partition up to its log end offset as of now,
  once the high watermark has reached it (what is below the HW survives a
  leader change; what is above is about to be replicated or truncated),
  read as the file slices the leader names, pread here
  (``storage.slice_reader``), and handed to the coordinator's replay. A
  failed load starts over after LOAD_RETRY_S.
* Appends: to the leader replica's ``append`` with acks=-1 and Kafka's
  AppendOrigin.COORDINATOR, one call in flight at a time (up to
  MAX_SETS_PER_CALL batches each) so they reach the log in call order; each
  is complete once the high watermark has passed it (the node purgatory's
  ``delay_produce``, as Produce does), and completions are delivered in
  append order.
* A restarted coordinator (its process died; nothing tells it to load
  again) asks this node's replica whether it leads, and if so elects itself
  at that leader epoch (``recover``).

The calls to other actors (appends as AppendOrigin.COORDINATOR) are a
``NodeCalls`` the actor injects.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Awaitable, Callable, Optional, Protocol

from core.error_codes import ErrorCode

from cluster.groups.log_batches import LogBatch, read_log_batches
from core.replica_messages import AppendResult, ReadResult
from storage.slice_reader import read_slices

log = logging.getLogger("raykafka.internal_topic_log")

# Appends batched into one replica call at most.
MAX_SETS_PER_CALL = 64
LOAD_RETRY_S = 0.5
# How often a load polls the leader while its high watermark catches up with the log end.
HW_POLL_S = 0.05

AppendDone = Callable[[ErrorCode], None]


class NodeCalls(Protocol):
    """The calls the log makes to actors of its node (Ray, or a node-local
    channel), each bounded by the actor's call timeout."""

    async def find_replica(self) -> Any:
        """This node's replica actor of the partition (restart recovery)."""

    async def replica_state(self, replica: Any) -> dict:
        """The replica's ``state()``: is_leader, leader_epoch, log_end_offset,
        high_watermark, log_start_offset."""

    async def read(self, replica: Any, offset: int, max_bytes: int, leader_epoch: int) -> ReadResult:
        """The leader's read_uncommitted read from ``offset``."""

    async def append(self, replica: Any, batches: list[bytes], leader_epoch: int,
                     timeout_ms: int) -> list[AppendResult]:
        """The leader's acks=-1 append of ``batches`` as AppendOrigin.COORDINATOR."""

    async def delay_produce(self, topic: str, partition: int, offset: int, timeout_ms: int) -> ErrorCode:
        """Wait in the node purgatory until the partition's HW passes ``offset``."""


def first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__


class InternalTopicLog:
    def __init__(self, topic: str, partition: int, calls: NodeCalls, *, load_buffer_bytes: int,
                 append_timeout_ms: int, owner: str, restarted: bool = False):
        self.topic = topic
        self.partition = partition
        self.calls = calls
        self.load_buffer_bytes = load_buffer_bytes
        self.append_timeout_ms = append_timeout_ms
        self.owner = owner  # for the log lines: "group coordinator", "transaction coordinator"
        self.leader_epoch = -1
        self.leading = False
        self.replica: Any = None
        self.generation = 0  # bumped by every lead/resign: stale loads and appends notice
        self.known_end = -1  # log end offset as far as our loads and appends know it
        self.counters: collections.Counter = collections.Counter()
        self._load_task: Optional[asyncio.Task] = None
        self._queue: collections.deque[tuple[bytes, AppendDone]] = collections.deque()
        self._sending = False
        self._last_step: Optional[asyncio.Future] = None
        self._appends_started = 0
        # Restarted after its process died: reclaim leadership on first use.
        self._needs_recovery = restarted
        self._recovery: Optional[asyncio.Task] = None

    # ---- leadership ------------------------------------------------------------------------------
    def lead(self, leader_epoch: int, replica: Any) -> None:
        """Lead at ``leader_epoch`` with a log to load: what was queued or
        loading under the previous leadership is dropped."""
        self.leader_epoch = leader_epoch
        self.replica = replica
        self.leading = True
        self._stop(ErrorCode.not_leader_or_follower)

    def keep_leading(self, leader_epoch: int, replica: Any) -> None:
        """Same leader, new epoch (an ISR change): the log stays ours as loaded."""
        self.leader_epoch = leader_epoch
        self.replica = replica

    def resign(self, leader_epoch: int, unload: Optional[Callable[[], None]] = None) -> None:
        """Leadership is gone: ``unload`` the coordinator's state, then fail
        what is still queued (its callbacks see the state unloaded)."""
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        self.leading = False
        self.replica = None
        self._stop(ErrorCode.not_leader_or_follower, unload)

    def _stop(self, error: ErrorCode, unload: Optional[Callable[[], None]] = None) -> None:
        self.generation += 1
        if self._load_task is not None:
            self._load_task.cancel()
            self._load_task = None
        if unload is not None:
            unload()
        queued, self._queue = list(self._queue), collections.deque()
        for _batch, done in queued:
            done(error)

    def appending(self) -> bool:
        return bool(self._queue) or self._sending

    async def still_own_log(self, replica: Any) -> bool:
        """True when no append is under way and nobody else wrote the partition
        since we loaded it (its log end is where our own appends left it), so
        the state in memory is current."""
        if self.appending():
            return False
        started = self._appends_started
        try:
            state = await self.calls.replica_state(replica)
        except Exception:  # noqa: BLE001 - unknown: load again
            return False
        return (started == self._appends_started and not self.appending()
                and state["is_leader"] and state["log_end_offset"] == self.known_end)

    def recover_if_restarted(self, elect: Callable[[int, Any], Awaitable[int]]) -> None:
        """On each use of a restarted coordinator, until it has asked once:
        ``elect`` at the leader epoch of this node's replica if it leads."""
        if self._needs_recovery and self._recovery is None:
            self._recovery = asyncio.get_running_loop().create_task(self._recover(elect))

    async def _recover(self, elect: Callable[[int, Any], Awaitable[int]]) -> None:
        try:
            replica = await self.calls.find_replica()
            state = await self.calls.replica_state(replica)
        except Exception as exc:  # noqa: BLE001 - no replica here (yet): the next use tries again
            log.warning("restarted %s for %s-%d: no leader replica to recover from (%s)", self.owner, self.topic,
                        self.partition, first_line(exc))
            await asyncio.sleep(LOAD_RETRY_S)
            self._recovery = None
            return
        self._needs_recovery = False
        if self.leader_epoch >= 0 or not state["is_leader"]:
            return  # the controller spoke meanwhile, or another broker leads: nothing to reclaim
        log.info("restarted %s for %s-%d reloads at leader epoch %d", self.owner, self.topic, self.partition,
                 state["leader_epoch"])
        await elect(state["leader_epoch"], replica)

    # ---- loading ---------------------------------------------------------------------------------
    def start_load(self, replay: Callable[[list[LogBatch], int], str], restart: Callable[[], None]) -> None:
        """Load the partition and ``replay(batches, log end)`` (-> a summary for
        the log line); after a failure ``restart()`` (a clean slate) and try
        again, until done or leadership changes."""
        if self._load_task is not None:
            self._load_task.cancel()
        self._load_task = asyncio.get_running_loop().create_task(self._load(self.generation, replay, restart))

    async def _load(self, generation: int, replay: Callable[[list[LogBatch], int], str],
                    restart: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while generation == self.generation:
            try:
                batches, end = await self.read_to_end(generation)
                if generation != self.generation:
                    return
                summary = replay(batches, end)
                self.known_end = end
                log.info("%s for %s-%d loaded %d batches up to offset %d in %.0f ms: %s (leader epoch %d)",
                         self.owner, self.topic, self.partition, len(batches), end, (loop.time() - started) * 1000,
                         summary, self.leader_epoch)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a moved file, a read error: start over
                if generation != self.generation:
                    return
                log.warning("loading %s-%d failed (%s); retrying", self.topic, self.partition, first_line(exc))
                restart()
                await asyncio.sleep(LOAD_RETRY_S)

    async def read_to_end(self, generation: int) -> tuple[list[LogBatch], int]:
        """Every batch of the partition (``cluster.groups.log_batches``) up to
        its log end offset as of now, once the high watermark has reached it."""
        replica, epoch = self.replica, self.leader_epoch
        state = await self.calls.replica_state(replica)
        target = state["log_end_offset"]
        while state["high_watermark"] < target:
            if generation != self.generation:
                return [], target
            if not state["is_leader"]:
                raise RuntimeError("the replica is not the leader")
            await asyncio.sleep(HW_POLL_S)
            state = await self.calls.replica_state(replica)
        offset = state["log_start_offset"]
        batches: list[LogBatch] = []
        while offset < target:
            result = await self.calls.read(replica, offset, self.load_buffer_bytes, epoch)
            if result.error:
                raise RuntimeError(f"read at offset {offset} failed: {ErrorCode(result.error).name}")
            if offset < result.log_start_offset:
                offset = result.log_start_offset
                continue
            if not result.slices:
                break  # nothing more below the HW
            # A slice replaced under us (a cleaner swap) raises: the load starts over.
            read, following = read_log_batches(read_slices(result.slices), offset, target)
            if following <= offset:
                raise RuntimeError(f"no complete batch at offset {offset}")
            batches.extend(read)
            offset = following
        return batches, target

    # ---- appends: coordinator -> leader replica (acks=-1, in call order) -------------------------------
    def append(self, batch: bytes, done: AppendDone) -> None:
        """Append ``batch``; ``done(error)`` once it is durable or failed,
        exactly once, after every earlier append's."""
        if not self.leading or self.replica is None:
            done(ErrorCode.not_leader_or_follower)
            return
        self._queue.append((batch, done))
        self._appends_started += 1
        if not self._sending:
            self._sending = True
            asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        try:
            while self._queue:
                items = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_SETS_PER_CALL))]
                replica, epoch = self.replica, self.leader_epoch
                if replica is None:
                    results = [_failed(ErrorCode.not_leader_or_follower)] * len(items)
                else:
                    try:
                        results = await self.calls.append(replica, [batch for batch, _ in items], epoch,
                                                          self.append_timeout_ms)
                    except asyncio.TimeoutError:
                        results = [_failed(ErrorCode.request_timed_out)] * len(items)
                    except Exception as exc:  # noqa: BLE001 - the replica actor is gone, or moving
                        log.warning("append to %s-%d failed: %s", self.topic, self.partition, first_line(exc))
                        results = [_failed(ErrorCode.not_leader_or_follower)] * len(items)
                self.counters["append_calls"] += 1
                self.counters["appends"] += len(items)
                previous = self._last_step
                self._last_step = asyncio.get_running_loop().create_task(self._complete(items, results, previous))
        finally:
            self._sending = False

    async def _complete(self, items: list, results: list, previous: Optional[asyncio.Future]) -> None:
        """Wait for the HW to pass this call's records, then complete them,
        after the previous call's (append order). Never raises: every
        completion is completed exactly once."""
        try:
            errors = await self._durability(results)
        except Exception:  # noqa: BLE001
            log.exception("append to %s-%d: waiting for durability failed", self.topic, self.partition)
            errors = [ErrorCode.request_timed_out] * len(items)
        if previous is not None:
            try:
                await previous
            except Exception:  # noqa: BLE001 - it completed its own items
                pass
        for (_batch, done), error in zip(items, errors):
            try:
                done(error)
            except Exception:  # noqa: BLE001
                log.exception("%s append callback failed", self.owner)

    async def _durability(self, results: list) -> list[ErrorCode]:
        errors = []
        need = -1
        for result in map(AppendResult._make, results):
            error = ErrorCode(result.error)
            if error in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch):
                error = ErrorCode.not_leader_or_follower  # our view of the epoch is behind: rediscover
            errors.append(error)
            if error == ErrorCode.none:
                self.known_end = max(self.known_end, result.last_offset + 1)
                if result.high_watermark < result.last_offset + 1:
                    need = max(need, result.last_offset + 1)
        if need >= 0:
            status = await self._wait_for_high_watermark(need)
            errors = [status if e == ErrorCode.none else e for e in errors]
        return errors

    async def _wait_for_high_watermark(self, offset: int) -> ErrorCode:
        try:
            return await self.calls.delay_produce(self.topic, self.partition, offset, self.append_timeout_ms)
        except asyncio.TimeoutError:
            return ErrorCode.request_timed_out
        except Exception as exc:  # noqa: BLE001
            log.warning("waiting for the HW of %s-%d failed: %s", self.topic, self.partition, first_line(exc))
            return ErrorCode.request_timed_out


def _failed(error: ErrorCode) -> AppendResult:
    return AppendResult(error, -1, -1, -1, None, -1, -1)
