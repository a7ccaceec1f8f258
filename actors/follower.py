"""Follower role of a partition replica actor (Kafka's ReplicaFetcherThread,
as one asyncio task per follower replica).

The replica actor (actors/partition_leader.py) is one Ray actor class per
replica; a controller decision flips it between the leader role and this one.
The actor composes one Follower and hands it what it needs by name (its
partition, config, counters and a few callbacks); become_follower is the
Follower's.

The loop itself is cluster/replica_fetcher.py's (no Ray, driven by unit
tests); what an answer does to the replica is cluster.partition.Partition's.
This module is the role's lifecycle (one fetcher per leadership, stopped on
any change), the calls to the leader, and waking a hibernated leader.

Transport: a leader on the same machine (whatever its Ray node) is called
over a direct Unix-socket channel (core/local_channels.py, host scope) and
answers with file slices of its segments, which the follower preads
(storage/slice_reader.py): no Ray call (~1.5 ms of CPU on each side) and no
copy of the bytes through Ray's object store per fetch, which is what made a
follower cost three times its leader (bench/PROFILE.md, issue 27). A leader
on another machine, or before the channel is up, is called through Ray and
answers with bytes.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable

from cluster.partition import Partition
from cluster.replica_fetcher import FollowerFetch, ReplicaFetcher
from cluster.replication_quota import ReplicaThrottle
from core.error_codes import ErrorCode
from core.local_channels import LocalChannels
from core.pooled_replica import HibernateAnswer
from storage.slice_reader import SliceReader

log = logging.getLogger("raykafka.follower")


@dataclass(frozen=True)
class ReplicaHooks:
    """What the follower role asks of its replica actor."""
    # Hot-path traffic: back to normal priority once per idle period.
    traffic: Callable[[], None]
    # Re-plan the actor's duties (a follower has no ISR check).
    poke_timer: Callable[[], None]
    # Leadership changed: fail acks=all waiters, wake long-polls, report to the purgatory.
    after_change: Callable[..., None]
    # Whether the replica is closed (stopped, hibernated, shut down).
    closed: Callable[[], bool]


class LeaderCalls:
    """The fetch to one leader replica actor: over the direct channel (an
    answer of file slices) when the leader shares this machine and the
    channel is up, else through Ray."""

    def __init__(self, leader, channels: Callable[[], LocalChannels]):
        self.leader = leader
        self.channels = channels  # the follower's, opened on the first fetch

    def fetch(self, request: FollowerFetch, timeout_s: float, slices_ok: bool):
        client = self.channels().client(self.leader, "fetch_for_follower")
        if client is not None:
            return client.call("fetch_for_follower", request.args() + (slices_ok,), timeout_s)
        return asyncio.wait_for(self.leader.fetch_for_follower.remote(*request.args()), timeout_s)


class Follower:
    """The follower role of one replica: its fetcher task, the channel to its leader, open segment fds."""

    def __init__(self, topic: str, partition_index: int, broker_id: int, namespace: str, partition: Partition,
                 replica_config: dict, call_timeout_s: float, counters: dict[str, Any], hooks: ReplicaHooks):
        self.topic = topic
        self.partition_index = partition_index
        self.broker_id = broker_id
        self.namespace = namespace
        self.partition = partition
        self.replica_config = replica_config
        self.call_timeout_s = call_timeout_s
        self.counters = counters
        self.hooks = hooks
        self._fetcher: ReplicaFetcher | None = None
        self._task: asyncio.Task | None = None
        self._leader_channels: LocalChannels | None = None  # opened with the first fetcher
        self._slice_reader = SliceReader(max_open_fds=8)

    @property
    def fetching(self) -> bool:
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        """Stop fetching (a leadership change, a stop or close of the replica)."""
        if self._fetcher is not None:
            self._fetcher.stop()
            self._fetcher = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
        # A leader change means another leader actor: drop the channel and the open segment fds.
        if self._leader_channels is not None:
            self._leader_channels.close()
            self._leader_channels = None
        self._slice_reader.close()

    def _channels(self) -> LocalChannels:
        if self._leader_channels is None:
            self._leader_channels = LocalChannels.on_host(self.replica_config["local.calls"], self.call_timeout_s)
        return self._leader_channels

    def become_follower(self, controller_epoch: int, leader_id: int, leader_epoch: int, isr: list[int],
                        replicas: list[int], leader_handle, throttle: ReplicaThrottle) -> ErrorCode:
        """LeaderAndIsr naming another replica the leader: follow it (``leader_handle``, its actor)
        under ``throttle`` (the replica's replication quotas)."""
        error = self.partition.make_follower(controller_epoch, leader_id, leader_epoch, isr, replicas)
        if error:
            return error
        hooks = self.hooks
        hooks.traffic()
        hooks.poke_timer()  # a follower has no ISR check
        self.stop()
        hooks.after_change(True, leadership=True)  # waiters on this replica as leader must give up
        if leader_handle is not None and leader_id >= 0:
            self._fetcher = ReplicaFetcher(
                f"{self.topic}-{self.partition_index}", self.partition, self.broker_id, leader_id, leader_epoch,
                self.replica_config, self.call_timeout_s, throttle,
                LeaderCalls(leader_handle, self._channels), self._slice_reader, self.counters,
                hooks.traffic, self._leader_unreachable, hooks.closed)
            self._task = asyncio.get_running_loop().create_task(self._fetcher.run())
        log.info("%s-%d follows broker %d, epoch %d", self.topic, self.partition_index, leader_id, leader_epoch)
        return ErrorCode.none

    def hibernate_answer(self, leader_epoch: int, high_watermark: int, log_end_offset: int) -> HibernateAnswer:
        """Whether this follower may close with its leader's set hibernating at ``log_end_offset``
        (= the leader's HW): only holding exactly that log at that epoch, and then it takes the HW."""
        p = self.partition
        if p.is_leader or p.leader_epoch != leader_epoch:
            return HibernateAnswer(False, "not a follower of that leader epoch")
        if p.log.log_end_offset != log_end_offset:
            return HibernateAnswer(False, "not at the leader's log end")
        p.take_leader_high_watermark(high_watermark)
        return HibernateAnswer(True, "", leader_epoch, p.high_watermark, p.log.log_end_offset)

    async def _leader_unreachable(self, leader_id: int, leader_epoch: int) -> None:
        """A fetch failed. If the leader's actor is gone while this follower still follows it, the
        set hibernated while this one was away (or kept it live by refusing): ask the leader's
        node to wake it (issue 30); the woken leader gives this follower its new actor. A leader
        that is not pooled (or another epoch) is left to the controller, as before."""
        if not self.replica_config.get("hibernate.replicated"):
            return
        from actors.replica_lookup import find_replicas, named_actor
        from core.naming import edge_actor_name

        namespace = self.namespace
        loop = asyncio.get_running_loop()
        try:
            # Live under its name, or adopted by a spare of its node's pool: not hibernated.
            if (await find_replicas([(self.topic, self.partition_index)], leader_id, namespace, False,
                                    self.call_timeout_s))[0] is not None:
                return
            edge = await loop.run_in_executor(None, named_actor, edge_actor_name(leader_id), namespace)
            if edge is not None:
                await asyncio.wait_for(edge.pool_wake_leader.remote(self.topic, self.partition_index, leader_epoch),
                                       self.call_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the next failed fetch asks again
            log.info("%s-%d: waking leader %d: %r", self.topic, self.partition_index, leader_id, exc)
