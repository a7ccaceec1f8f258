"""A follower replica's fetch loop (Kafka's ReplicaFetcherThread, one asyncio
task per follower replica), with its transport passed in: no Ray here.

The loop pulls from the leader with long-polled fetches carrying this
replica's log end offset and last fetched epoch; the leader answers with a
FollowerFetchResult: record batches (or file slices of its segments, when it
shares this machine), its HW and log start, or a diverging epoch (KIP-320)
that makes the follower truncate first. What an answer does to the replica
(HW, truncation, leader epochs) is cluster.partition.Partition's
(apply_fetched, reconcile_with_leader); this module is the loop, its timing
(backoff, replication quota) and what it counts. actors/follower.py gives it
the calls (a direct channel, or Ray).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from cluster.partition import Partition
from cluster.replication_quota import (DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_S, UNLIMITED_RATE,
                                       ReplicaThrottle)
from core.replica_messages import FollowerFetchResult
from storage.slice_reader import SliceChangedError, SliceReader

log = logging.getLogger("raykafka.follower")


@dataclass(frozen=True)
class FollowerFetch:
    """One fetch the follower sends its leader (the leader replica's
    fetch_for_follower arguments, in order, less ``as_slices``)."""
    follower_id: int
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    max_bytes: int
    max_wait_ms: int
    follower_log_start: int

    def args(self) -> tuple:
        return (self.follower_id, self.fetch_offset, self.last_fetched_epoch, self.current_leader_epoch,
                self.max_bytes, self.max_wait_ms, self.follower_log_start)


class FetchTransport(Protocol):
    """How a follower reaches its leader (actors/follower.py: a direct channel or Ray)."""

    def fetch(self, request: FollowerFetch, timeout_s: float, slices_ok: bool) -> Awaitable[FollowerFetchResult]:
        """The leader's answer; ``slices_ok``: the answer may name file slices instead of carrying bytes."""


def throttle_from_config(partition: int, broker_id: int, config: dict, name: str = "") -> ReplicaThrottle:
    """A replica's replication quotas from its replica config (Kafka's key names);
    a malformed throttled-replica list leaves it unthrottled rather than failing its start."""
    throttle = ReplicaThrottle(
        partition, broker_id,
        window_num=config.get("replication.quota.window.num", DEFAULT_WINDOW_NUM),
        window_size_s=config.get("replication.quota.window.size.seconds", DEFAULT_WINDOW_SIZE_S))
    try:
        throttle.update(config.get("leader.replication.throttled.rate", UNLIMITED_RATE),
                        config.get("follower.replication.throttled.rate", UNLIMITED_RATE),
                        config.get("leader.replication.throttled.replicas"),
                        config.get("follower.replication.throttled.replicas"))
    except ValueError as exc:
        log.warning("%s starts unthrottled: %s", name or f"partition {partition}", exc)
    return throttle


class ReplicaFetcher:
    """The fetch loop of one follower replica for one leadership (leader id and
    epoch); a new leadership gets a new fetcher. ``run`` returns once stopped."""

    def __init__(self, name: str, partition: Partition, broker_id: int, leader_id: int, leader_epoch: int,
                 config: dict, call_timeout_s: float, throttle: ReplicaThrottle, transport: FetchTransport,
                 slice_reader: SliceReader, counters: dict[str, Any], traffic: Callable[[], None],
                 leader_unreachable: Callable[[int, int], Awaitable[None]],
                 closed: Callable[[], bool] = lambda: False):
        self.name = name
        self.partition = partition
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.config = config
        self.call_timeout_s = call_timeout_s
        self.throttle = throttle
        self.transport = transport
        self.slice_reader = slice_reader
        self.counters = counters
        # Replicating data is traffic (normal priority unless idle); the host's flag.
        self.traffic = traffic
        # A fetch failed: the host may wake a hibernated leader (actors/follower.py).
        self.leader_unreachable = leader_unreachable
        self.closed = closed
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def next_fetch(self) -> FollowerFetch:
        p, config = self.partition, self.config
        return FollowerFetch(self.broker_id, p.log.log_end_offset, p.last_fetched_epoch(), self.leader_epoch,
                             config["replica.fetch.max.bytes"], config["replica.fetch.wait.max.ms"],
                             p.log.log_start_offset)

    async def run(self) -> None:
        backoff_ms = self.config["replica.fetch.backoff.ms"]
        backoff_s = backoff_ms / 1000
        p = self.partition
        throttle = self.throttle
        counters = self.counters
        slices_ok = True  # off for one fetch after slices could not be read
        while not self.stopped and not self.closed():
            if throttle.follower_should_hold_back(p.follower_caught_up):
                # Kafka leaves a throttled partition out of the fetch while the
                # follower quota is exceeded and backs off.
                await asyncio.sleep(throttle.follower_backoff_ms(backoff_ms) / 1000)
                continue
            try:
                result = await self.transport.fetch(self.next_fetch(), self.call_timeout_s, slices_ok)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Leader gone or slow: the controller will send a new LeaderAndIsr.
                log.info("%s fetch from broker %d failed: %s", self.name, self.leader_id,
                         str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                await self.leader_unreachable(self.leader_id, self.leader_epoch)
                await asyncio.sleep(backoff_s)
                continue
            if self.stopped:
                return
            slices_ok = True
            received = time.perf_counter()
            size = result.data_size
            counters["fetches_sent"] += 1
            counters["fetched_bytes"] += size
            if result.error or result.diverging is not None:
                if not p.reconcile_with_leader(result):  # truncated: fetch again at once
                    await asyncio.sleep(backoff_s)
                continue
            records = None
            if result.slices:
                counters["fetched_as_slices"] += 1
                try:
                    records = self.slice_reader.read_all(result.slices)
                except (SliceChangedError, OSError) as exc:
                    # The segment was replaced (cleaner) or deleted (retention, the leader
                    # truncating) since the answer: ask again, for bytes this time.
                    log.info("%s: leader's slice unreadable (%s), fetching bytes", self.name, exc)
                    slices_ok = False
                    continue
            try:
                if size:
                    self.traffic()  # replicating data: normal priority (a flag unless idle)
                p.apply_fetched(result, records)
                throttle.record_follower(size)
                if size:  # profile: answer received -> next fetch sent
                    counters["apply_total_ms"] += (time.perf_counter() - received) * 1000
                    counters["apply_count"] += 1
            except Exception:
                log.exception("%s follower append failed", self.name)
                await asyncio.sleep(backoff_s)
