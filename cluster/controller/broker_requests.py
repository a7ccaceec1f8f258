"""The controller's requests to replicas and edges (Kafka's
ControllerBrokerRequestBatch): LeaderAndIsr rounds (batched, awaited together,
resent to live brokers' replicas that failed), UpdateMetadata rounds to every
live edge, and what a replica is created with (its spec and replica config).
Everything goes through the controller's channel (channel.py); no Ray here.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from cluster.controller.channel import LeaderAndIsr, ReplicaKey, ReplicaSpec
from cluster.controller.metadata_rounds import MetadataRounds, PlannedUpdate
from cluster.log_config import log_config_for, throttled_replicas_for
from core.config import TOPIC_CONFIGS
from core.controller_messages import MetadataApplied
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.controller")

# Wall time a node needs to start one replica actor process, on top of the call
# timeout when a LeaderAndIsr creates replicas: the raylet starts worker
# processes a few at a time (as many as the node has cores), each ~0.55-0.75
# CPU-s (bench/creation.py, README "Capacity"), so a 100-partition topic on a
# 2-core node needs ~40-75 s, past the 30 s call timeout.
ACTOR_START_BUDGET_S = 1.0
# A LeaderAndIsr that failed to a live broker's replica is resent this many
# times, 0.5 s after the failure and doubling up to the cap (~2 min in all).
LEADER_AND_ISR_RETRIES = 10
LEADER_AND_ISR_RETRY_MAX_S = 15.0


class BrokerRequests:
    """One controller's LeaderAndIsr / UpdateMetadata rounds (a part holding the controller, as its others)."""

    def __init__(self, controller: Any):
        self.c = controller
        self.rounds = MetadataRounds()

    def replica_spec(self, key: ReplicaKey) -> ReplicaSpec:
        """How the channel creates a replica it does not know yet."""
        topic, p, broker_id = key
        broker = self.c.ctx.brokers[broker_id]
        configs = self.c.ctx.topics[topic].configs
        min_isr = TOPIC_CONFIGS["min.insync.replicas"].parse(configs["min.insync.replicas"]) \
            if "min.insync.replicas" in configs else self.c.config["min.insync.replicas"]
        return ReplicaSpec(topic, p, broker_id, broker.ray_node_id, broker.log_dirs,
                           log_config_for(configs, self.c.config), min_isr, self.replica_config(broker_id, configs))

    def replica_config(self, broker_id: int, topic_configs: dict) -> dict:
        c = self.c.config
        leader_rate, follower_rate = self.c._throttle_rates(broker_id)
        lists = throttled_replicas_for(topic_configs)
        return {"leader.replication.throttled.rate": leader_rate,
                "follower.replication.throttled.rate": follower_rate,
                "leader.replication.throttled.replicas": lists["leader_throttled_replicas"],
                "follower.replication.throttled.replicas": lists["follower_throttled_replicas"],
                "replication.quota.window.num": c["replication.quota.window.num"],
                "replication.quota.window.size.seconds": c["replication.quota.window.size.seconds"],
                "replica.lag.time.max.ms": c["replica.lag.time.max.ms"],
                "producer.id.expiration.ms": c["producer.id.expiration.ms"],
                "log.retention.check.interval.ms": c["log.retention.check.interval.ms"],
                "log.cleaner.backoff.ms": c["log.cleaner.backoff.ms"],
                "log.cleaner.dedupe.buffer.size": c["log.cleaner.dedupe.buffer.size"],
                "log.cleaner.enable": c["log.cleaner.enable"],
                "replica.fetch.max.bytes": c["replica.fetch.max.bytes"],
                "replica.fetch.wait.max.ms": c["replica.fetch.wait.max.ms"],
                "replica.fetch.backoff.ms": c["replica.fetch.backoff.ms"],
                "actor.call.timeout.ms": c["raykafka.actor.call.timeout.ms"],
                "local.calls": c["raykafka.local.calls"],
                # RF > 1 sets hibernate (issue 30): a follower that finds its leader gone wakes it.
                "hibernate.replicated": (c["raykafka.replica.hibernate.ms"] > 0
                                         and c["raykafka.replica.hibernate.replicated"]),
                # The session a leader opens to commit ISR changes (issue 18: was fixed at 18 s).
                "zookeeper.session.timeout.ms": c["zookeeper.session.timeout.ms"]}

    async def send_leader_and_isr(self, partitions: list[tuple[str, int]],
                                   exclude: frozenset[int] = frozenset(),
                                   only: frozenset[tuple[str, int, int]] | None = None,
                                   attempt: int = 0, new: bool = False) -> None:
        """Batched: all calls issued at once, awaited together. Brokers in `exclude` get none;
        with `only`, just those (topic, partition, broker) replicas get theirs. `new`: the
        partitions were just created (LeaderAndIsr.is_new)."""
        ctx = self.c.ctx
        calls = []
        starting: dict[int, int] = {}  # broker -> replica actors this LeaderAndIsr creates
        for topic, p in partitions:
            state = ctx.states.get((topic, p))
            if state is None:
                continue
            replicas = ctx.topics[topic].assignment[p]
            for broker_id in replicas:
                if broker_id not in ctx.brokers or broker_id in exclude:
                    continue
                if only is not None and (topic, p, broker_id) not in only:
                    continue
                key = ReplicaKey(topic, p, broker_id)
                if not self.c.channel.has_replica(key):
                    starting[broker_id] = starting.get(broker_id, 0) + 1
                request = LeaderAndIsr(ctx.epoch, state.leader, state.leader_epoch, state.isr, replicas,
                                       state.zk_version, is_new=new)
                if broker_id == state.leader:
                    ref = self.c.channel.become_leader(key, request)
                else:
                    leader = ReplicaKey(topic, p, state.leader) if state.leader in ctx.brokers else None
                    ref = self.c.channel.become_follower(key, request, leader)
                calls.append(((topic, p, broker_id), ref))
        # Every node starts its new actors in parallel with the others, its own a few at a time.
        failed = await self.await_all(calls, "LeaderAndIsr", self.c.call_timeout_s
                                       + ACTOR_START_BUDGET_S * max(starting.values(), default=0))
        if failed:
            self.retry_leader_and_isr(frozenset(failed), attempt + 1)
        # Group and transaction coordinators move with the leaders of the internal topics' partitions.
        await self.c.channel.sync_coordinators(ctx, partitions)

    def retry_leader_and_isr(self, targets: frozenset[tuple[str, int, int]], attempt: int) -> None:
        """Resend a LeaderAndIsr that failed to a replica of a live broker, as Kafka's
        controller channel keeps resending to live brokers. The usual cause: a broker
        revived right after its node was killed, before Ray declared the old node dead
        (its health check allows ~10 s, issue 18), so the replica's name still led to
        the dead actor. The failed handle is forgotten, so each try looks the name up
        again and creates the replica anew once Ray knows the old one is gone."""
        if attempt > LEADER_AND_ISR_RETRIES:
            log.error("LeaderAndIsr to %d replicas still failing after %d tries: %s", len(targets),
                      LEADER_AND_ISR_RETRIES, sorted(targets)[:5])
            return
        delay = min(LEADER_AND_ISR_RETRY_MAX_S, 0.5 * 2 ** (attempt - 1))

        def resend():
            async def event():
                live = frozenset(t for t in targets if self.c.is_active and t[2] in self.c.ctx.brokers
                                 and (t[0], t[1]) in self.c.ctx.states)
                if not live:
                    return
                log.info("resending LeaderAndIsr to %d replicas (try %d)", len(live), attempt + 1)
                await self.c._send_leader_and_isr(sorted({(t, p) for t, p, _ in live}), only=live, attempt=attempt)

            event.__name__ = f"retry_leader_and_isr({attempt})"
            return event()

        self.c.loop.call_later(delay, lambda: self.c.enqueue(resend))

    async def await_all(self, calls, what: str, timeout_s: float | None = None) -> list:
        """Await every call; return the targets whose call failed (raised or timed out)."""
        if not calls:
            return []
        timeout_s = self.c.call_timeout_s if timeout_s is None else timeout_s
        results = await asyncio.gather(
            *(asyncio.wait_for(ref, timeout_s) for _, ref in calls), return_exceptions=True)
        failed = []
        for (target, _), result in zip(calls, results):
            if isinstance(result, Exception):
                # A timeout's str() is empty: name its type instead of failing the whole event.
                log.error("%s to %s failed: %s", what, target,
                          (str(result).splitlines() or [type(result).__name__])[0][:300])
                # A dead replica actor is recreated on the next LeaderAndIsr.
                self.c.channel.forget_replica(target)
                failed.append(target)
            elif isinstance(result, int) and result != ErrorCode.none:
                log.warning("%s to %s answered error %d", what, target, result)
        return failed

    async def send_update_metadata(self, without_leaders: frozenset[tuple[str, int]] = frozenset()) -> None:
        """An UpdateMetadata round to every live edge: a delta of what changed
        since the round it acknowledged last, or the whole snapshot
        (metadata_rounds.py). ``without_leaders``: partitions whose leader
        replicas are still starting: in the snapshot, but no handle for them yet
        (the edge answers NOT_LEADER_OR_FOLLOWER for them until the next round)."""
        ctx = self.c.ctx
        snapshot = self.rounds.number(ctx.metadata_snapshot(self.c.broker_id))
        planned = [(broker_id, self.rounds.plan(broker_id, snapshot, self._leaders_on(broker_id, without_leaders)))
                   for broker_id in ctx.live_broker_ids if self.c.channel.has_edge(broker_id)]
        refused = await self._deliver(planned)
        if refused:
            # Edges that do not hold the round a delta was built on (restarted,
            # or a round lost or overtaken): the whole image, as it is now.
            snapshot = self.rounds.number(ctx.metadata_snapshot(self.c.broker_id))
            await self._deliver([(broker_id, self.rounds.full(broker_id, snapshot,
                                                              self._leaders_on(broker_id, without_leaders)))
                                 for broker_id in refused if self.c.channel.has_edge(broker_id)])

    def _leaders_on(self, broker_id: int, without_leaders: frozenset[tuple[str, int]]) -> dict[ReplicaKey, Any]:
        """The leader replicas on ``broker_id`` whose handles its edge gets, each with its handle's identity."""
        ctx = self.c.ctx
        keys = [ReplicaKey(topic, p, broker_id) for (topic, p), state in ctx.states.items()
                if state.leader == broker_id and topic not in ctx.topics_being_deleted
                and (topic, p) not in without_leaders]
        return {key: self.c.channel.leader_identity(key) for key in keys}

    async def _deliver(self, planned: list[tuple[int, PlannedUpdate]]) -> list[int]:
        """Send each edge its update -> the brokers whose edges asked for a whole snapshot."""
        calls = [self.c.channel.update_metadata(broker_id, plan.update, plan.leaders) for broker_id, plan in planned]
        results = await asyncio.gather(*(asyncio.wait_for(ref, self.c.call_timeout_s) for ref in calls),
                                       return_exceptions=True)
        refused = []
        for (broker_id, plan), result in zip(planned, results):
            if isinstance(result, Exception):
                log.error("UpdateMetadata to broker %d failed: %r", broker_id, result)
                self.c.channel.forget_edge(broker_id)
                self.rounds.forget(broker_id)
            elif isinstance(result, MetadataApplied) and result.needs_full:
                self.rounds.forget(broker_id)
                refused.append(broker_id)
            elif isinstance(result, MetadataApplied) and result.error != ErrorCode.none:
                log.warning("UpdateMetadata to broker %d answered %s", broker_id, result.error.name)
                self.rounds.forget(broker_id)
            else:
                self.rounds.delivered(broker_id, plan.image)
        return refused
