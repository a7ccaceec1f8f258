"""The delayed-operation purgatory actor: one per node.

A thin asyncio shell over delayed/ (Kafka's hierarchical timing wheel with a
delay queue of buckets, and DelayedOperationPurgatory with watch keys per
partition). The actor's event loop is the only thread touching them.

Leader replicas on this node report each partition's progress (high
watermark, last stable offset, ISR size, leadership) with `progress`; that is
what completes parked operations:

- DelayedProduce (acks=-1): every partition's HW has passed the produced
  offsets, or the deadline passes (REQUEST_TIMED_OUT), or leadership moved.
- DelayedFetch (consumers' fetch.min.bytes / max.wait.ms): some watched
  partition's fetchable end moved past what the edge last read.

Follower fetches long-poll inside the leader replica itself (one call, no
extra hop), so they do not come through here.

Nothing here is durable: the actor is created with unlimited Ray restarts
(cli/main.py), and a restarted purgatory starts empty. Operations parked in
the dead process fail at their callers (the edge answers a retriable error);
a partition it has no progress for yet is asked to report, as a quiet one is,
since its leader may have gone quiet towards the dead incarnation.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Hashable

import ray

from core import error_codes
from core.local_calls import LocalCallServer
from core.replica_messages import PartitionOffset, PartitionProgress
from delayed import AsyncTimerDriver, DelayedOperation, DelayedOperationPurgatory, SystemTimer

log = logging.getLogger("raykafka.purgatory")

# Kafka's purge interval (producer/fetch.purgatory.purge.interval.requests).
PURGE_INTERVAL = 1000
# Bound on parked operations: beyond it new ones complete at once.
MAX_PARKED = 100_000

PartitionKey = tuple[str, int]

# What the node's edge and leader replicas may call over the direct channel.
LOCAL_CALL_METHODS = ("delay_produce", "delay_fetch", "progress")
# One connection per leader replica of the node, plus its edges.
MAX_LOCAL_CONNECTIONS = 10_000
# Bound on looking up the leaders asked to report (Ray's GCS).
ASK_TIMEOUT_S = 10.0
# A partition something parked on this recently is not called quiet when its
# last waiter completes: a consumer's next fetch parks again within moments,
# and asking a quiet leader to report again (a Ray call, after a name lookup
# the first time) is where a record appended meanwhile waited (issue 29).
KEEP_REPORTING_S = 5.0


class DelayedProduce(DelayedOperation):
    def __init__(self, delay_ms: int, required: dict[PartitionKey, int], progress: dict, future: asyncio.Future):
        super().__init__(delay_ms)
        self.required = required
        self.progress = progress
        self.status: dict[PartitionKey, int] = {}
        self.future = future

    def try_complete(self) -> bool:
        for key, offset in self.required.items():
            if key in self.status:
                continue
            state = self.progress.get(key)
            if state is None:
                continue
            if not state.is_leader:
                self.status[key] = error_codes.NOT_LEADER_OR_FOLLOWER
            elif state.high_watermark >= offset:
                # Kafka's checkEnoughReplicasReachOffset.
                self.status[key] = 0 if state.isr_size >= state.min_insync_replicas \
                    else error_codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if len(self.status) == len(self.required):
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        for key in self.required:
            self.status.setdefault(key, error_codes.REQUEST_TIMED_OUT)

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.status)


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, known_ends: dict[PartitionKey, int], isolation_level: int, progress: dict,
                 future: asyncio.Future):
        super().__init__(delay_ms)
        self.known_ends = known_ends
        self.isolation_level = isolation_level
        self.progress = progress
        self.future = future
        self.moved = False

    def try_complete(self) -> bool:
        for key, known_end in self.known_ends.items():
            state = self.progress.get(key)
            if state is None:
                continue
            end = state.last_stable_offset if self.isolation_level == 1 else state.high_watermark
            if end > known_end or not state.is_leader:
                self.moved = True
                return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.moved)


class PurgatoryService:
    """The purgatory's logic; the actor below only forwards calls to it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, keep_reporting_s: float = KEEP_REPORTING_S):
        timer = SystemTimer(tick_ms=1, wheel_size=20)
        self.driver = AsyncTimerDriver(timer, loop)
        self.produce = DelayedOperationPurgatory("Produce", timer, purge_interval=PURGE_INTERVAL)
        self.fetch = DelayedOperationPurgatory("Fetch", timer, purge_interval=PURGE_INTERVAL)
        self.progress: dict[PartitionKey, PartitionProgress] = {}
        self.loop = loop
        # Partitions whose leader stopped reporting because nothing waited on
        # them; parking an operation there asks the leader to report again.
        self.quiet: set[PartitionKey] = set()
        # Partitions never reported here whose leaders were asked to report
        # (asked once: a report, or the leader's next leadership change, follows).
        self.asked_unknown: set[PartitionKey] = set()
        self.ask_to_report = None  # callable(list[key]), set by the actor
        # When an operation last parked on each partition (KEEP_REPORTING_S).
        self.last_parked: dict[PartitionKey, float] = {}
        self.keep_reporting_s = keep_reporting_s

    def parked(self) -> int:
        return self.produce.delayed + self.fetch.delayed

    def delay_produce(self, required: dict[PartitionKey, int], timeout_ms: int) -> asyncio.Future:
        future = self.loop.create_future()
        op = DelayedProduce(max(0, timeout_ms), required, self.progress, future)
        if self.parked() >= MAX_PARKED:
            op.on_expiration()
            op.force_complete()
            return future
        self.produce.try_complete_else_watch(op, list(required))
        self._parked_on(required)
        return future

    def delay_fetch(self, known_ends: dict[PartitionKey, int], isolation_level: int, timeout_ms: int) -> asyncio.Future:
        future = self.loop.create_future()
        op = DelayedFetch(max(0, timeout_ms), known_ends, isolation_level, self.progress, future)
        if self.parked() >= MAX_PARKED or not known_ends:
            op.force_complete()
            return future
        self.fetch.try_complete_else_watch(op, list(known_ends))
        self._parked_on(known_ends)
        return future

    def _parked_on(self, keys) -> None:
        now = self.loop.time()
        for key in keys:
            self.last_parked[key] = now
        self._wake_quiet(keys)

    def _wake_quiet(self, keys) -> None:
        """Ask the leaders of these partitions to report if they may not: quiet
        ones, and ones never heard from (this purgatory may be a restarted one,
        and their leaders quiet towards its dead predecessor)."""
        quiet = [k for k in keys if k in self.quiet]
        unknown = [k for k in keys if k not in self.progress and k not in self.asked_unknown]
        if (quiet or unknown) and self.ask_to_report is not None:
            self.quiet.difference_update(quiet)
            self.asked_unknown.update(unknown)
            self.ask_to_report(quiet + unknown)

    def watched(self, key: PartitionKey) -> bool:
        return bool(self.produce.watched_operations(key) or self.fetch.watched_operations(key))

    def report(self, updates: list[PartitionProgress]) -> list[PartitionKey]:
        """Apply progress; returns the keys nothing waits on (their leaders may go quiet)."""
        keys = []
        for raw in updates:
            update = PartitionProgress._make(raw)  # a plain tuple (an older sender's) reads the same
            key = tuple(update.partition)
            keys.append(key)
            current = self.progress.get(key)
            if current is not None and update.leader_epoch < current.leader_epoch:
                continue  # a stale report from a deposed leader
            self.progress[key] = update
            self.asked_unknown.discard(key)
            self.produce.check_and_complete(key)
            self.fetch.check_and_complete(key)
        self.produce.purge_completed()
        self.fetch.purge_completed()
        recent = self.loop.time() - self.keep_reporting_s
        unwatched = [key for key in keys if not self.watched(key) and self.last_parked.get(key, 0.0) < recent]
        for key in unwatched:
            self.last_parked.pop(key, None)
        self.quiet.update(unwatched)
        return unwatched

    def forget(self, keys: list[Hashable]) -> None:
        for key in keys:
            self.progress.pop(tuple(key), None)
            self.asked_unknown.discard(tuple(key))
            self.last_parked.pop(tuple(key), None)


class PurgatoryActor:
    def __init__(self, broker_id: int = -1, namespace: str = "raykafka") -> None:
        self.broker_id = broker_id
        self.namespace = namespace
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._service: PurgatoryService | None = None
        self._local_calls: LocalCallServer | None = None

    def _svc(self) -> PurgatoryService:
        if self._service is None:
            self._service = PurgatoryService(asyncio.get_running_loop())
            self._service.ask_to_report = self._ask_to_report
        return self._service

    def _ask_to_report(self, keys: list[PartitionKey]) -> None:
        """Tell quiet leaders that someone waits on them (fire and forget)."""
        asyncio.get_running_loop().create_task(self._ask(list(keys)))

    async def _ask(self, keys: list[PartitionKey]) -> None:
        from actors.replica_lookup import find_replicas

        # A hibernated replica is not woken for it: its wake reports anyway.
        try:
            found = await find_replicas([tuple(k) for k in keys], self.broker_id, self.namespace, False,
                                        ASK_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the next parked operation asks again for quiet ones
            log.warning("asking leaders %s to report failed: %r", keys[:5], exc)
            return
        leaders = [h for h in found if h is not None]
        for leader in leaders:
            leader.report_progress.remote()

    async def delay_produce(self, required: list[PartitionOffset], timeout_ms: int) -> dict:
        """Wait until each (topic, partition)'s HW reaches its offset; -> {(t, p): error}."""
        return await self._svc().delay_produce({(t, p): o for t, p, o in required}, timeout_ms)

    async def delay_fetch(self, known_ends: list[PartitionOffset], isolation_level: int,
                          timeout_ms: int) -> bool:
        """Wait until some partition's fetchable end passes what was read; False on timeout."""
        return await self._svc().delay_fetch({(t, p): e for t, p, e in known_ends}, isolation_level, timeout_ms)

    async def progress(self, updates: list[PartitionProgress]) -> list:
        return self._svc().report(updates)

    async def forget(self, keys: list[tuple[str, int]]) -> None:
        self._svc().forget(keys)

    async def local_call_endpoint(self):
        """(node id, socket address, token, name, methods) of the direct-call
        socket (core/local_calls.py) for the actors of this node."""
        if self._local_calls is None:
            # Every leader replica of the node reports over its own connection,
            # and one edge connection carries all of that edge's parked
            # operations: bounds as wide as the actor's own (MAX_PARKED, Ray's
            # max_concurrency of 100,000).
            self._local_calls = LocalCallServer.serving(f"purgatory@{self.broker_id}", self, LOCAL_CALL_METHODS,
                                                        max_inflight=MAX_PARKED,
                                                        max_connections=MAX_LOCAL_CONNECTIONS)
        return await self._local_calls.endpoint()

    async def park(self) -> None:
        """Never returns: the supervisor in `raykafka start` holds this call
        open so Ray tells it within milliseconds when this process dies."""
        await asyncio.Event().wait()

    async def pid(self) -> int:
        import os

        return os.getpid()

    async def stats(self) -> dict:
        svc = self._svc()
        return {"produce_delayed": svc.produce.delayed, "fetch_delayed": svc.fetch.delayed,
                "partitions": len(svc.progress)}


PurgatoryActorRemote = ray.remote(PurgatoryActor)
