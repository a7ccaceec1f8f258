"""Follower role of a partition replica actor (Kafka's ReplicaFetcherThread,
as one asyncio task per follower replica).

The replica actor (actors/partition_leader.py) is one Ray actor class per
replica; a controller decision flips it between the leader role and this one.
The fetcher pulls from the leader replica actor with long-polled calls
carrying its log end offset and last fetched epoch; the leader answers with a
FollowerFetchResult: record batches, its HW and log start, or a diverging
epoch (KIP-320) that makes the follower truncate first.

Transport: a leader on the same machine (whatever its Ray node) is called
over a direct Unix-socket channel (core/local_channels.py, host scope) and
answers with file slices of its segments, which the follower preads
(storage/slice_reader.py): no Ray call (~1.5 ms of CPU on each side) and no
copy of the bytes through Ray's object store per fetch, which is what made a
follower cost three times its leader (bench/PROFILE.md, issue 27). A leader
on another machine, or before the channel is up, is called through Ray and
answers with bytes. What an answer does to the replica is
cluster.partition.Partition's (apply_fetched, reconcile_with_leader); this
module is the task, its timing and the calls.
"""
from __future__ import annotations

import asyncio
import logging
import time

from cluster.replication_quota import DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_S, UNLIMITED_RATE, ReplicaThrottle
from core.local_channels import LocalChannels
from storage.slice_reader import SliceChangedError, SliceReader

log = logging.getLogger("raykafka.follower")


class FollowerRole:
    """Mixin: requires self.partition, self.log, self.replica_config, self._wake_waiters, self._after_change,
    self._traffic, self._poke_timer."""

    def _init_follower(self) -> None:
        self._fetcher: asyncio.Task | None = None
        self._fetcher_generation = 0
        self._leader_channels: LocalChannels | None = None  # opened with the first fetcher
        self._slice_reader = SliceReader(max_open_fds=8)
        # Replication quotas for both roles (the leader role reads it in
        # fetch_for_follower). Starting values may come with replica_config
        # (Kafka's key names); changes arrive via update_replication_throttle.
        config = self.replica_config
        self.replication_throttle = ReplicaThrottle(
            self.partition_index, self.broker_id,
            window_num=config.get("replication.quota.window.num", DEFAULT_WINDOW_NUM),
            window_size_s=config.get("replication.quota.window.size.seconds", DEFAULT_WINDOW_SIZE_S))
        try:
            self.replication_throttle.update(
                config.get("leader.replication.throttled.rate", UNLIMITED_RATE),
                config.get("follower.replication.throttled.rate", UNLIMITED_RATE),
                config.get("leader.replication.throttled.replicas"),
                config.get("follower.replication.throttled.replicas"))
        except ValueError as exc:
            log.warning("%s-%d starts unthrottled: %s", self.topic, self.partition_index, exc)

    def _stop_fetcher(self) -> None:
        self._fetcher_generation += 1
        if self._fetcher is not None:
            self._fetcher.cancel()
            self._fetcher = None
        # A leader change means another leader actor: drop the channel and the open segment fds.
        if self._leader_channels is not None:
            self._leader_channels.close()
            self._leader_channels = None
        self._slice_reader.close()

    def _fetch_call(self, leader, args: tuple, timeout_s: float, slices_ok: bool):
        """The fetch over the direct channel (answer as file slices) when the
        leader shares this machine and the channel is up, else through Ray."""
        if self._leader_channels is None:
            self._leader_channels = LocalChannels.on_host(self.replica_config["local.calls"], timeout_s)
        client = self._leader_channels.client(leader, "fetch_for_follower")
        if client is not None:
            return client.call("fetch_for_follower", args + (slices_ok,), timeout_s)
        return asyncio.wait_for(leader.fetch_for_follower.remote(*args), timeout_s)

    async def become_follower(self, controller_epoch: int, leader_id: int, leader_epoch: int,
                              isr: list[int], replicas: list[int], leader_handle=None) -> int:
        self._ensure_background()
        error = self.partition.make_follower(controller_epoch, leader_id, leader_epoch, isr, replicas)
        if error:
            return error
        self._traffic()
        self._poke_timer()  # a follower has no ISR check
        self._stop_fetcher()
        self._after_change(True, leadership=True)  # waiters on this replica as leader must give up
        if leader_handle is not None and leader_id >= 0:
            generation = self._fetcher_generation
            self._fetcher = asyncio.get_running_loop().create_task(
                self._fetch_from_leader(leader_handle, leader_id, leader_epoch, generation))
        log.info("%s-%d follows broker %d, epoch %d", self.topic, self.partition_index, leader_id, leader_epoch)
        return 0

    async def _fetch_from_leader(self, leader, leader_id: int, leader_epoch: int, generation: int) -> None:
        config = self.replica_config
        backoff_ms = config["replica.fetch.backoff.ms"]
        backoff_s = backoff_ms / 1000
        p = self.partition
        throttle = self.replication_throttle
        slices_ok = True  # off for one fetch after slices could not be read
        while generation == self._fetcher_generation and not self._closed:
            if throttle.follower_should_hold_back(p.follower_caught_up):
                # Kafka leaves a throttled partition out of the fetch while the
                # follower quota is exceeded and backs off.
                await asyncio.sleep(throttle.follower_backoff_ms(backoff_ms) / 1000)
                continue
            try:
                result = await self._fetch_call(
                    leader, (self.broker_id, self.log.log_end_offset, p.last_fetched_epoch(), leader_epoch,
                             config["replica.fetch.max.bytes"], config["replica.fetch.wait.max.ms"],
                             self.log.log_start_offset),
                    self.call_timeout_s, slices_ok)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Leader gone or slow: the controller will send a new LeaderAndIsr.
                log.info("%s-%d fetch from broker %d failed: %s", self.topic, self.partition_index, leader_id,
                         str(exc).splitlines()[0][:200])
                await self._leader_unreachable(leader_id, leader_epoch)
                await asyncio.sleep(backoff_s)
                continue
            if generation != self._fetcher_generation:
                return
            slices_ok = True
            received = time.perf_counter()
            size = result.data_size
            self.counters["fetches_sent"] += 1
            self.counters["fetched_bytes"] += size
            if result.error or result.diverging is not None:
                if not p.reconcile_with_leader(result):  # truncated: fetch again at once
                    await asyncio.sleep(backoff_s)
                continue
            records = None
            if result.slices:
                self.counters["fetched_as_slices"] += 1
                try:
                    records = self._slice_reader.read_all(result.slices)
                except (SliceChangedError, OSError) as exc:
                    # The segment was replaced (cleaner) or deleted (retention, the leader
                    # truncating) since the answer: ask again, for bytes this time.
                    log.info("%s-%d: leader's slice unreadable (%s), fetching bytes", self.topic,
                             self.partition_index, exc)
                    slices_ok = False
                    continue
            try:
                if size:
                    self._traffic()  # replicating data: normal priority (a flag unless idle)
                p.apply_fetched(result, records)
                throttle.record_follower(size)
                if size:  # profile: answer received -> next fetch sent
                    self.counters["apply_total_ms"] += (time.perf_counter() - received) * 1000
                    self.counters["apply_count"] += 1
            except Exception:
                log.exception("%s-%d follower append failed", self.topic, self.partition_index)
                await asyncio.sleep(backoff_s)

    async def _leader_unreachable(self, leader_id: int, leader_epoch: int) -> None:
        """A fetch failed: the replica actor may wake a hibernated leader (actors/partition_leader.py)."""

    async def update_replication_throttle(self, leader_rate: int | None, follower_rate: int | None,
                                          leader_throttled_replicas: str | None = None,
                                          follower_throttled_replicas: str | None = None) -> int:
        """Replication quotas changed: the broker's leader/follower.replication.throttled.rate
        (None keeps one) and, when given, the topic's two throttled-replica lists
        (the keyword arguments cluster.log_config.throttled_replicas_for returns).
        Returns 0, or INVALID_CONFIG for a malformed list (nothing is changed then)."""
        try:
            self.replication_throttle.update(leader_rate, follower_rate, leader_throttled_replicas,
                                             follower_throttled_replicas)
        except ValueError as exc:
            log.warning("%s-%d: replication throttle not changed: %s", self.topic, self.partition_index, exc)
            return 40  # INVALID_CONFIG
        return 0
