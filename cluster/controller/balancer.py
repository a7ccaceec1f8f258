"""The balancer (issue 31): partitions follow the nodes. A part of the
controller (cluster/controller/controller.Controller, as `c`); every method
here runs as one event of the controller's queue.

- Balance on join: when a broker registers with fewer replicas than the
  mean by more than raykafka.balancer.imbalance.threshold (and by more than
  one), the balancer plans moves until replica counts and preferred leaders
  differ by at most one across live brokers (balancer_plan.py's goals).
- Heal on loss: a broker that holds replicas and has been absent for
  raykafka.self.healing.delay.ms is given up on; each of its replicas is
  re-created on a live broker with room. Nothing acknowledged can be lost on
  the way: a move is a KIP-455 reassignment, so the new replica is added
  first, and the old one leaves the assignment only once every target replica
  is in the ISR (Reassignments._maybe_complete_reassignment); the ISR never
  shrinks for it, so min.insync.replicas holds throughout. A lost broker's
  replicas go to pending deletion (ReplicaDeletionIneligible), kept in
  /balancer/state across controller failovers, and are deleted, not
  resurrected, when the broker comes back.
- Moves run through the operators' reassignment path (ListPartitionReassignments
  shows them), at most raykafka.balancer.max.concurrent.moves at a time, each
  copying under Kafka's replication throttle (KIP-73: the rates and the
  leader/follower throttled-replica lists, on the moving partition's replicas
  only, removed when it completes) at raykafka.balancer.throttle.bytes.per.sec.
- Operators: /balancer/paused (`raykafka balancer --pause/--resume`) stops new
  moves at once (moves in flight finish: cancelling one would throw away a
  copy that is nearly done) and survives failover; /balancer/state holds the
  plan, the moves in flight, the bytes left, the imbalance score, and when each
  absent broker was last seen, for `--status` and for the next controller.

The plan is recomputed at every step from what is assigned then (moves in
flight count at their targets), so a step after a failover, a join or a loss
needs no stored plan to be right; the stored one is for operators.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from cluster.controller.balancer_plan import (HARD_REASONS, LEADER, REPLICA, BrokerView, Imbalance, Move, measure,
                                              plan)
from cluster.controller.leader_election import ElectionType
from cluster.log_config import throttled_replicas_for
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.balancer")

# /balancer/state lists at most this many planned moves (the rest are counted).
PUBLISHED_PLAN_MOVES = 200
# Replica state calls for the bytes left: bounded wait each.
STATE_CALL_TIMEOUT_S = 5.0


def _merge_lists(configured: str, ours: list[str]) -> str:
    """A topic's throttled-replica list with this move's entries added ("*" already covers them)."""
    if configured == "*":
        return "*"
    entries = [e for e in configured.split(",") if e] if configured else []
    return ",".join(dict.fromkeys([*entries, *ours]))


class Balancer:
    """Plans and carries out replica moves; a part of the controller `c`."""

    def __init__(self, controller: Any, clock: Callable[[], float] = time.time):
        self.c = controller
        # Wall-clock seconds: absence times are persisted and read by the next controller.
        self.clock = clock
        self.paused = False
        self.balancing = False  # a join found the cluster unbalanced: soft goals until the plan is done
        self.plan: list[Move] = []
        self.in_flight: dict[tuple[str, int], Move] = {}
        self.absent_since: dict[int, float] = {}
        self.bytes_left = 0
        self.imbalance: Imbalance | None = None
        self.moves_started = 0
        self.moves_completed = 0
        # Partitions whose preferred leader the balancer changed and that are not led by it yet.
        self._preferred_due: set[tuple[str, int]] = set()
        self._task: asyncio.Task | None = None
        self._published: dict | None = None
        self._published_ms = 0
        self._pause_watch = None

    # ---- settings ------------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return bool(self.c.config["raykafka.balancer.enabled"])

    @property
    def max_moves(self) -> int:
        return int(self.c.config["raykafka.balancer.max.concurrent.moves"])

    @property
    def throttle(self) -> int:
        return int(self.c.config["raykafka.balancer.throttle.bytes.per.sec"])

    @property
    def threshold(self) -> float:
        return float(self.c.config["raykafka.balancer.imbalance.threshold"])

    @property
    def healing_delay_s(self) -> float:
        return self.c.config["raykafka.self.healing.delay.ms"] / 1000

    # ---- controller hooks -------------------------------------------------------------------------------
    async def on_elected(self) -> None:
        """This controller became active: take over the balancer's state from ZooKeeper."""
        azk, ctx = self.c.azk, self.c.ctx
        state = await azk.balancer.state() or {}
        self.paused = await azk.balancer.paused()
        if self._pause_watch is None:
            self._pause_watch = await azk.balancer.watch_paused(
                lambda _paused: self.c.from_zk_thread(self._on_paused_znode))
        self._published = None  # a new controller publishes at once
        self.absent_since = {int(b): ms / 1000 for b, ms in (state.get("absent_since_ms") or {}).items()}
        self.in_flight = {}
        for body in state.get("in_flight") or []:
            move = Move.from_json(body)
            if move.tp in ctx.reassignments:  # still running: resumed by the reassignment path
                self.in_flight[move.tp] = move
        self.balancing = bool(state.get("balancing"))
        if self.balancing or state.get("in_flight"):
            # A move started just before the last controller went, before it published
            # /balancer/state: one replica in, one out is the balancer's shape. Adopted so
            # its throttle is lifted when it completes.
            for tp, r in ctx.reassignments.items():
                if tp not in self.in_flight and len(r.adding) == 1 and len(r.removing) == 1:
                    self.in_flight[tp] = Move(tp[0], tp[1], r.removing[0], r.adding[0], REPLICA, "resumed")
        for t, p, b in state.get("stale_replicas") or []:
            if t in ctx.topics and b not in ctx.topics[t].assignment.get(p, ()):
                ctx.pending_replica_deletions.add((t, p, b))
        if state.get("stale_replicas"):
            # Brokers already back while no controller was there to delete them.
            await self.c.reassignment._retry_replica_deletions([b for _t, _p, b in state["stale_replicas"]
                                                               if b in ctx.brokers])
        log.info("balancer: %s, %d moves in flight resumed, absent brokers %s",
                 "paused" if self.paused else "running", len(self.in_flight), sorted(self.absent_since))
        self._start_ticking()
        await self.tick()

    async def on_brokers_changed(self, joined: list[int], gone: list[int]) -> None:
        """After the controller processed brokers joining and leaving."""
        if not self.c.is_active or not self.enabled:
            return
        try:
            self._note_absences()
            if joined and self._emptier_broker_joined(joined):
                self.balancing = True
            await self.step()
        except Exception:  # the balancer never fails the controller's own handling of the event
            log.exception("balancer: step after brokers %s joined / %s left failed", joined, gone)

    async def on_reassignments_checked(self) -> None:
        """After ISR changes let reassignments complete: start the next moves at once."""
        if self.in_flight and any(tp not in self.c.ctx.reassignments for tp in self.in_flight):
            await self.tick()

    async def tick(self) -> None:
        try:
            await self.step()
        except Exception:
            log.exception("balancer: step failed")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _start_ticking(self) -> None:
        if self._task is not None:
            return
        interval = self.c.config["raykafka.balancer.check.interval.ms"] / 1000

        async def loop():
            try:
                while self.c.is_active:
                    await asyncio.sleep(interval)
                    if self.c.is_active:
                        self.c.enqueue(self.tick)
            finally:
                self._task = None

        self._task = self.c.loop.create_task(loop())

    async def _on_paused_znode(self) -> None:
        if not self.c.is_active:
            return
        paused = await self.c.azk.balancer.paused()
        if paused != self.paused:
            self.paused = paused
            log.info("balancer %s", "paused: no new moves" if paused else "resumed")
            await self.step()

    # ---- operators (through the controller's queue; the CLI writes ZooKeeper) ---------------------------------
    async def set_paused(self, paused: bool) -> dict:
        async def event():
            await self.c.azk.balancer.set_paused(paused)
            self.paused = paused
            await self.step()
            return self.status()

        event.__name__ = "balancer_pause" if paused else "balancer_resume"
        return await self.c.submit(event)

    def status(self) -> dict:
        """What /balancer/state holds (and `raykafka balancer --status` prints)."""
        m = self.imbalance
        return {
            "version": 1,
            "controller": self.c.broker_id,
            "controller_epoch": self.c.ctx.epoch if self.c.ctx else None,
            "enabled": self.enabled,
            "paused": self.paused,
            "balancing": self.balancing,
            "updated_ms": int(self.clock() * 1000),
            "plan": [mv.to_json() for mv in self.plan[:PUBLISHED_PLAN_MOVES]],
            "planned_moves": len(self.plan),
            "in_flight": [mv.to_json() for mv in self.in_flight.values()],
            "bytes_left": self.bytes_left,
            "imbalance_score": round(m.score, 4) if m else 0.0,
            "replicas": {str(b): n for b, n in (m.replicas if m else {}).items()},
            "preferred_leaders": {str(b): n for b, n in (m.leaders if m else {}).items()},
            "absent_since_ms": {str(b): int(t * 1000) for b, t in self.absent_since.items()},
            "healing_delay_ms": int(self.healing_delay_s * 1000),
            "stale_replicas": sorted([list(r) for r in self.c.ctx.pending_replica_deletions]) if self.c.ctx else [],
            "moves_started": self.moves_started,
            "moves_completed": self.moves_completed,
        }

    # ---- one step -------------------------------------------------------------------------------------
    async def step(self) -> None:
        """Reap finished moves, replan, start what the limits allow, publish."""
        c = self.c
        if not c.is_active or not self.enabled:
            return
        self._note_absences()
        await self._reap()
        lost = self._lost()
        self.plan = self._plan(lost)
        if not self.paused:
            await self._start_moves(lost)
            if self._preferred_due:
                await self._elect_preferred()
            self.plan = self._plan(lost)
        if self.balancing and not self.in_flight and not any(mv.reason not in HARD_REASONS for mv in self.plan):
            log.info("balancer: balanced (%d moves started so far)", self.moves_started)
            self.balancing = False
        await self._measure_bytes_left()
        self._report_metrics()
        await self._publish()

    def _assignments(self) -> dict[tuple[str, int], list[int]]:
        ctx = self.c.ctx
        return {tp: self.c._target_replicas(*tp) for tp, _ in ctx.all_partitions()
                if tp[0] not in ctx.topics_being_deleted}

    def _live_views(self) -> dict[int, BrokerView]:
        ctx = self.c.ctx
        return {b: BrokerView(info.rack, info.replicas_max) for b, info in ctx.brokers.items()
                if b not in ctx.shutting_down}

    def _note_absences(self) -> None:
        """Brokers named in an assignment but not live: since when (kept across failovers)."""
        ctx = self.c.ctx
        assigned = {b for tp, _ in ctx.all_partitions() for b in ctx.topics[tp[0]].assignment[tp[1]]}
        now = self.clock()
        for b in assigned - set(ctx.brokers):
            if b not in self.absent_since:
                log.info("balancer: broker %d is absent; healed after %.0f s unless it returns", b,
                         self.healing_delay_s)
                self.absent_since[b] = now
        for b in list(self.absent_since):
            if b in ctx.brokers or b not in assigned:
                del self.absent_since[b]

    def _lost(self) -> set[int]:
        now = self.clock()
        return {b for b, since in self.absent_since.items() if now - since >= self.healing_delay_s}

    def _emptier_broker_joined(self, joined: list[int]) -> bool:
        """A joining broker holds fewer replicas than the mean by more than the threshold (and by
        more than one): a new node, or one whose replicas were healed away while it was gone."""
        m = measure(self._live_views(), self._assignments())
        if not m.replicas:
            return False
        mean = sum(m.replicas.values()) / len(m.replicas)
        for b in joined:
            n = m.replicas.get(b)
            if n is not None and mean - n > 1 and mean - n > self.threshold * mean:
                log.info("balancer: broker %d joined with %d replicas (mean %.1f, score %.2f): balancing", b, n,
                         mean, m.score)
                return True
        return False

    def _plan(self, lost: set[int]) -> list[Move]:
        ctx = self.c.ctx
        assignments = self._assignments()
        brokers = self._live_views()
        frozen = set(ctx.reassignments)
        for tp, replicas in assignments.items():
            state = ctx.states.get(tp)
            if state is None or state.leader not in ctx.brokers:
                frozen.add(tp)  # offline: nothing to copy from
            elif any(r not in ctx.brokers and r not in lost for r in replicas):
                frozen.add(tp)  # a replica's broker may still come back
        self.imbalance = measure(brokers, assignments, lost)
        return plan(brokers, assignments, lost=lost, frozen=frozen, balance=self.balancing)

    async def _start_moves(self, lost: set[int]) -> None:
        ctx = self.c.ctx
        replica_moves = [mv for mv in self.plan if mv.kind == REPLICA]
        # Every reassignment in progress counts, the operators' and any a previous controller
        # started without publishing it: the bound is on copies, whoever asked for them.
        room = self.max_moves - max(len(self.in_flight), len(ctx.reassignments))
        touched: set[tuple[str, int]] = set()
        for move in replica_moves:
            if room <= 0:
                break
            if move.tp in touched:
                continue  # one move per partition at a time; the next plan has the rest
            touched.add(move.tp)
            if await self._start_replica_move(move):
                room -= 1
        if replica_moves or self.in_flight:
            return
        # Leadership last, once the replicas are where the plan wants them (a replica
        # move hands the preferred role to its destination). Cheap: no data moves.
        leader_moves = [mv for mv in self.plan if mv.kind == LEADER][:self.max_moves]
        if leader_moves:
            await self._move_leaders(leader_moves)

    async def _start_replica_move(self, move: Move) -> bool:
        ctx = self.c.ctx
        topic = ctx.topics.get(move.topic)
        if topic is None or move.tp in ctx.reassignments:
            return False
        replicas = topic.assignment.get(move.partition)
        if replicas is None or not move.applies_to(replicas) or move.destination not in ctx.brokers:
            return False
        target = move.target(replicas)
        [result] = await self.c.reassignment._alter_reassignments([(move.topic, move.partition, target)])
        if result.error != ErrorCode.none:
            log.warning("balancer: %s refused: %s", move.describe(), result.message)
            return False
        self.moves_started += 1
        log.info("balancer: started %s", move.describe())
        if move.tp not in ctx.reassignments:
            self.moves_completed += 1  # complete at once (nothing to catch up)
            return True
        self.in_flight[move.tp] = move
        await self._throttle(move)
        return True

    async def _move_leaders(self, moves: list[Move]) -> None:
        ctx = self.c.ctx
        moved = []
        for move in moves:
            topic = ctx.topics.get(move.topic)
            replicas = topic.assignment.get(move.partition) if topic is not None else None
            if replicas is None or move.tp in ctx.reassignments or not move.applies_to(replicas):
                continue
            [result] = await self.c.reassignment._alter_reassignments(
                [(move.topic, move.partition, move.target(replicas))])
            if result.error == ErrorCode.none:
                moved.append(move.tp)
                log.info("balancer: %s", move.describe())
        if moved:
            self._preferred_due.update(moved)
            await self._elect_preferred()

    async def _elect_preferred(self) -> None:
        """Preferred election for the partitions the balancer gave a new preferred leader,
        once that leader is in the ISR (retried at each step until it leads)."""
        ctx = self.c.ctx
        due = []
        for tp in sorted(self._preferred_due):
            topic, state = ctx.topics.get(tp[0]), ctx.states.get(tp)
            replicas = topic.assignment.get(tp[1]) if topic is not None else None
            if not replicas or state is None or tp in ctx.reassignments or state.leader == replicas[0]:
                self._preferred_due.discard(tp)
            elif replicas[0] in state.isr and replicas[0] in ctx.brokers:
                due.append(tp)
        if due:
            results = await self.c.elections._elect_leaders(ElectionType.PREFERRED, due)
            self._preferred_due.difference_update(
                (r.topic, r.partition) for r in results if r.error == ErrorCode.none)

    async def _reap(self) -> None:
        ctx = self.c.ctx
        for tp, move in list(self.in_flight.items()):
            if tp in ctx.reassignments:
                continue
            del self.in_flight[tp]
            self.moves_completed += 1
            log.info("balancer: done %s", move.describe())
            await self._unthrottle(tp)

    # ---- replication throttles (KIP-73) on the moving partition ------------------------------------------
    async def _throttle(self, move: Move) -> None:
        ctx = self.c.ctx
        reassignment = ctx.reassignments.get(move.tp)
        if reassignment is None:
            return
        p = move.partition
        configured = throttled_replicas_for(ctx.topics[move.topic].configs)
        lists = {
            # The replicas that serve the copy (Kafka's tool lists every existing replica) ...
            "leader_throttled_replicas": _merge_lists(configured["leader_throttled_replicas"],
                                                      [f"{p}:{b}" for b in reassignment.original_replicas]),
            # ... and the one that copies.
            "follower_throttled_replicas": _merge_lists(configured["follower_throttled_replicas"],
                                                        [f"{p}:{b}" for b in reassignment.adding]),
        }
        rate = self.throttle
        calls = [((move.topic, p, b), self.c.channel.update_replication_throttle(
            _key(move.topic, p, b), rate, rate, **lists)) for b in reassignment.replicas if b in ctx.brokers]
        await self.c._await_all(calls, "balancer throttle")

    async def _unthrottle(self, tp: tuple[str, int]) -> None:
        ctx = self.c.ctx
        topic = ctx.topics.get(tp[0])
        if topic is None:
            return
        lists = throttled_replicas_for(topic.configs)
        calls = []
        for b in topic.assignment.get(tp[1], ()):
            if b in ctx.brokers:
                leader_rate, follower_rate = self.c._throttle_rates(b)
                calls.append(((tp[0], tp[1], b), self.c.channel.update_replication_throttle(
                    _key(tp[0], tp[1], b), leader_rate, follower_rate, **lists)))
        await self.c._await_all(calls, "balancer unthrottle")

    # ---- what operators see ----------------------------------------------------------------------------
    async def _measure_bytes_left(self) -> None:
        """Per move in flight: the leader's log size minus the new replica's (what is left to
        copy), from the replicas' own state. Planned moves are not sized: asking would wake
        idle replicas; --status shows their count."""
        ctx = self.c.ctx
        asks = []
        for tp, move in self.in_flight.items():
            state = ctx.states.get(tp)
            if state is None or state.leader not in ctx.brokers:
                continue
            leader = self.c.channel.replica_state(_key(tp[0], tp[1], state.leader))
            copy = self.c.channel.replica_state(_key(tp[0], tp[1], move.destination))
            if leader is not None and copy is not None:
                asks.append((leader, copy))
        if not asks:
            self.bytes_left = 0
            return
        results = await asyncio.gather(*(asyncio.wait_for(ref, STATE_CALL_TIMEOUT_S) for pair in asks
                                         for ref in pair), return_exceptions=True)
        left = 0
        for leader, copy in zip(results[::2], results[1::2]):
            if isinstance(leader, dict) and isinstance(copy, dict):
                left += max(0, int(leader.get("size_bytes", 0)) - int(copy.get("size_bytes", 0)))
        self.bytes_left = left

    def _report_metrics(self) -> None:
        from core.metrics import registry

        tags = (str(self.c.broker_id),)
        metrics = registry()
        metrics.gauge("kafka_controller_balancer_movesinflight").set(tags, len(self.in_flight))
        metrics.gauge("kafka_controller_balancer_plannedmoves").set(tags, len(self.plan))
        metrics.gauge("kafka_controller_balancer_bytesleft").set(tags, self.bytes_left)
        metrics.gauge("kafka_controller_balancer_imbalancescore").set(
            tags, self.imbalance.score if self.imbalance else 0.0)

    async def _publish(self) -> None:
        """Write /balancer/state when something in it changed (or a minute passed: --status
        shows how fresh it is), not at every tick of an idle cluster."""
        status = self.status()
        unchanged = {k: v for k, v in status.items() if k != "updated_ms"}
        if unchanged == self._published and status["updated_ms"] - self._published_ms < 60_000:
            return
        try:
            await self.c.azk.balancer.set_state(status, expected_controller_epoch_zk_version=self.c.epoch_zk_version)
        except Exception as exc:  # a deposed controller's fenced write, or ZooKeeper trouble
            log.warning("balancer: cannot publish /balancer/state: %r", exc)
            return
        self._published, self._published_ms = unchanged, status["updated_ms"]


def _key(topic: str, partition: int, broker: int):
    from cluster.controller.channel import ReplicaKey

    return ReplicaKey(topic, partition, broker)
