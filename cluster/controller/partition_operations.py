"""Cluster operations of the active controller that change who leads or holds
a partition: CreatePartitions, leader elections (ElectLeaders, the
/admin/preferred_replica_election znode, automatic leader rebalance),
partition reassignment (KIP-455, AlterPartitionReassignments and the
/admin/reassign_partitions znode) and controlled shutdown.

Parts of cluster/controller/controller.Controller (composed, each holding the
controller as `c`): every method here runs as one
event of the controller's queue, so it sees a consistent context and never
interleaves with another decision. The decisions themselves (who may lead,
which replicas a reassignment adds or removes, which brokers are imbalanced)
are the plain functions of cluster/controller/leader_election.py, cluster/controller/reassignment.py
and cluster/controller/leader_imbalance.py; this module does the ZooKeeper writes and the
actor calls around them.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from core.controller_messages import (NOT_CONTROLLER_MESSAGE, AlterReassignmentsResult, ControlledShutdownResult,
                                      CreatePartitionsSpec, ElectLeadersResult, ListReassignmentsResult,
                                      OngoingReassignment, PartitionOutcome, PartitionReassignment, TopicOutcome)
from core.error_codes import ErrorCode

from cluster.controller.channel import ReplicaKey
from cluster.controller.internal_topics import OFFSETS_TOPIC
from cluster.controller.controller_context import NO_LEADER, PartitionState
from cluster.controller.leader_election import (ElectionType, controlled_shutdown_partition_leader,
                                                offline_partition_leader, preferred_replica_partition_leader,
                                                reassign_partition_leader)
from cluster.controller.leader_imbalance import imbalance_ratios, imbalanced_partitions
from cluster.controller.partition_state_machine import PartitionStateName as PS
from cluster.controller.reassignment import ReassignmentError, ReplicaAssignment, build_reassignment
from cluster.controller.replica_state_machine import ReplicaState as RS
from cluster.capacity import HOSTED_KEY, NodeCapacity, always_live, internal_topic_reserve, replicas_per_broker
from cluster.topic_admin import TopicSpecError, assign_within_capacity, check_capacity

log = logging.getLogger("raykafka.controller")



_result = PartitionOutcome


class PartitionOperations:
    """Topic growth and replica capacity. Needs ctx and config (the capacity checks need
    nothing else); create_partitions also `c`, the controller."""

    # ---- CreatePartitions (37) -------------------------------------------------------------------
    async def create_partitions(self, specs: list[CreatePartitionsSpec], validate_only: bool) -> list[TopicOutcome]:
        async def event():
            if not self.c.is_active:
                return [TopicOutcome(s.name, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE) for s in specs]
            results, grown = [], []
            capacity = self._node_capacity()
            for spec in specs:
                name = spec.name
                try:
                    added = self._plan_new_partitions(spec, capacity)
                except TopicSpecError as exc:
                    results.append(TopicOutcome(name, ErrorCode(exc.error), str(exc)))
                    continue
                # Later topics of the same request see these replicas (validate_only too:
                # it must answer what the real request would).
                capacity.add(added, name.startswith("__"))
                if not validate_only:
                    try:
                        merged = await self.c.azk.topics.add_partitions(name, added)
                    except Exception as exc:  # a concurrent writer, or ZooKeeper trouble
                        results.append(TopicOutcome(name, ErrorCode.unknown_server_error, str(exc)))
                        continue
                    self.ctx.topics[name].assignment = {int(p): list(r) for p, r in merged.items()}
                    grown.extend(((name, p), replicas) for p, replicas in added.items())
                    log.info("topic %s grows to %d partitions: %s", name, len(merged), added)
                results.append(TopicOutcome(name))
            if grown:
                await self.c._elect_offline_partitions(grown)  # NewPartition -> OnlinePartition
                await self.c._send_leader_and_isr([tp for tp, _ in grown], new=True)
                await self.c._send_update_metadata()
            return results

        event.__name__ = "create_partitions"
        return await self.c.submit(event)

    def _plan_new_partitions(self, spec: CreatePartitionsSpec, capacity: NodeCapacity | None = None) -> dict[int, list[int]]:
        """Kafka's AdminZkClient.createPartitions checks, with its messages; then
        raykafka.replicas.per.node.max (POLICY_VIOLATION, the whole topic's growth)."""
        ctx = self.ctx
        name, count = spec.name, spec.count
        topic = ctx.topics.get(name)
        if topic is None:
            raise TopicSpecError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        if name in ctx.topics_being_deleted:
            raise TopicSpecError(ErrorCode.invalid_topic_exception, f"The topic '{name}' is queued for deletion.")
        current = len(topic.assignment)
        if count < current:
            raise TopicSpecError(ErrorCode.invalid_partitions,
                                 f"Topic currently has {current} partitions, which is higher than the "
                                 f"requested {count}.")
        if count == current:
            raise TopicSpecError(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
        if count > 100_000:
            raise TopicSpecError(ErrorCode.invalid_partitions,
                                 f"Number of partitions {count} exceeds the limit of 100000")
        rf = len(topic.assignment[0])
        manual = spec.assignments
        if manual:
            if len(manual) != count - current:
                raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                     f"Increasing the number of partitions by {count - current} but "
                                     f"{len(manual)} assignments provided.")
            for replicas in manual:
                if len(set(replicas)) != len(replicas):
                    raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                         f"Duplicate brokers not allowed in replica assignment: {list(replicas)}")
                unknown = [b for b in replicas if b not in ctx.brokers]
                if unknown:
                    raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                         f"Unknown broker(s) in replica assignment: {unknown}.")
                if len(replicas) != rf:
                    raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                         f"Inconsistent replication factor between partitions, partition 0 has "
                                         f"{rf} while partitions [{current}] have replication factors "
                                         f"[{len(replicas)}], respectively.")
            added = {current + i: list(r) for i, r in enumerate(manual)}
            check_capacity(added, capacity, name.startswith("__"))
            return added
        racks = {b: info.rack for b, info in ctx.brokers.items() if info.rack}
        live = ctx.live_broker_ids
        if racks and len(racks) != len(live):
            racks = {}
        fresh = assign_within_capacity(count - current, rf, live, racks, capacity, name.startswith("__"))
        check_capacity(fresh, capacity, name.startswith("__"))
        return {current + p: replicas for p, replicas in fresh.items()}

    # ---- capacity: raykafka.replicas.per.node.max (issue 18) ----------------------------------------------
    def _node_capacity(self) -> NodeCapacity:
        """Each live broker's stated capacity (from its /brokers/ids registration)
        and the replicas assigned to it now, topics being deleted included (their
        actors live until deleted). Until __consumer_offsets exists, room for it
        is kept on every broker, so user topics cannot starve consumer groups."""
        ctx = self.ctx
        capacity = {b: info.replicas_max for b, info in ctx.brokers.items()}
        hosting = replicas_per_broker(t.assignment for t in ctx.topics.values())
        reserved = {}
        if OFFSETS_TOPIC not in ctx.topics:
            reserved = internal_topic_reserve(ctx.brokers, self.config["offsets.topic.num.partitions"],
                                              self.config["offsets.topic.replication.factor"])
        hosted = {b: info.partitions_max for b, info in ctx.brokers.items()}
        if all(v is None for v in hosted.values()):
            return NodeCapacity(capacity, hosting, reserved, OFFSETS_TOPIC)
        # Replicas hibernate (issue 30): CreateTopics is refused past the hosted limit, and
        # past the live one only by the replicas that never hibernate (internal, and RF > 1
        # unless raykafka.replica.hibernate.replicated).
        replicated = bool(self.config["raykafka.replica.hibernate.replicated"])
        live_hosting = replicas_per_broker(
            {p: r for p, r in t.assignment.items() if always_live(r, name.startswith("__"), replicated)}
            for name, t in ctx.topics.items())
        live = NodeCapacity(capacity, live_hosting, reserved, OFFSETS_TOPIC)
        return NodeCapacity(hosted, hosting, reserved, OFFSETS_TOPIC, key=HOSTED_KEY, live=live,
                            replicated_hibernate=replicated)

    def _described_broker_config(self, name: str):
        """The broker config DescribeConfigs shows for broker `name`: this
        controller's, with that broker's own replica capacity (computed on its
        node when not set), so admin tools see each node's limit."""
        try:
            info = self.ctx.brokers.get(int(name)) if self.ctx and name else None
        except ValueError:
            info = None
        if info is None or info.replicas_max is None:
            return self.config
        from cluster.capacity import CAPACITY_KEY
        from core.config import BrokerConfig

        explicit = {k for k in self.config.as_dict() if self.config.is_explicit(k)}
        stated = {CAPACITY_KEY: info.replicas_max}
        if info.partitions_max is not None:  # its replicas hibernate: its hosted limit too (issue 30)
            stated[HOSTED_KEY] = info.partitions_max
        # Keep the source honest: a computed default stays DEFAULT_CONFIG.
        return BrokerConfig({**self.config.as_dict(), **stated}, explicit)



class PartitionGrowth(PartitionOperations):
    """CreatePartitions, a part of the controller `c`."""

    def __init__(self, controller: Any):
        self.c = controller

    @property
    def ctx(self):
        return self.c.ctx

    @property
    def config(self):
        return self.c.config


class Elections:
    """ElectLeaders, /admin/preferred_replica_election, the automatic leader rebalance and
    controlled shutdown: a part of the controller `c`."""

    def __init__(self, controller: Any):
        self.c = controller
        self._rebalance_task: asyncio.Task | None = None

    # ---- leader elections: ElectLeaders (43), /admin/preferred_replica_election, auto rebalance -----------
    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None,
                            timeout_ms: int = 0) -> ElectLeadersResult:
        async def event():
            if not self.c.is_active:
                return ElectLeadersResult(ErrorCode.not_controller)
            results = await self._elect_leaders(ElectionType(election_type), partitions)
            return ElectLeadersResult(ErrorCode.none, results)

        event.__name__ = "elect_leaders"
        return await self.c.submit(event)

    async def _elect_leaders(self, election_type: ElectionType,
                             partitions: list[tuple[str, int]] | None) -> list[PartitionOutcome]:
        ctx = self.c.ctx
        requested_all = partitions is None
        if requested_all:
            partitions = [tp for tp, _ in ctx.all_partitions() if tp[0] not in ctx.topics_being_deleted]
        results, changed = [], []
        for topic, p in partitions:
            t = ctx.topics.get(topic)
            state = ctx.states.get((topic, p))
            if t is None or p not in t.assignment or state is None or topic in ctx.topics_being_deleted:
                results.append(_result(topic, p, ErrorCode.unknown_topic_or_partition,
                                       "The partition does not exist."))
                continue
            assignment = self.c._target_replicas(topic, p)
            live = set(ctx.brokers) - ctx.shutting_down
            if election_type == ElectionType.PREFERRED:
                if state.leader == assignment[0]:
                    results.append(_result(topic, p, ErrorCode.election_not_needed,
                                           "Leader election not needed for topic partition."))
                    continue
                outcome = preferred_replica_partition_leader(assignment, state.isr, live)
                if not outcome.elected:
                    results.append(_result(topic, p, ErrorCode.preferred_leader_not_available,
                                           f"Failed to elect leader for partition {topic}-{p} under strategy "
                                           f"PreferredReplicaPartitionLeaderElectionStrategy"))
                    continue
                isr = list(state.isr)
            else:
                if state.leader in live:
                    results.append(_result(topic, p, ErrorCode.election_not_needed,
                                           "Leader election not needed for topic partition."))
                    continue
                outcome = offline_partition_leader(assignment, state.isr, live, True)
                if not outcome.elected:
                    results.append(_result(topic, p, ErrorCode.eligible_leaders_not_available,
                                           f"Failed to elect leader for partition {topic}-{p} under strategy "
                                           f"OfflinePartitionLeaderElectionStrategy(true)"))
                    continue
                isr = list(outcome.isr)
                if outcome.unclean:
                    log.warning("unclean election of %s-%d: broker %d leads, data may be lost", topic, p,
                                outcome.leader)
            await self.c._write_state(topic, p, PartitionState(outcome.leader, state.leader_epoch + 1, isr, ctx.epoch,
                                                             state.zk_version))
            ctx.partition_sm.transition([(topic, p)], PS.ONLINE_PARTITION)
            changed.append((topic, p))
            results.append(_result(topic, p))
        if changed:
            log.info("%s election moved leaders of %s", election_type.name.lower(), changed)
            await self.c._send_leader_and_isr(changed)
            await self.c._send_update_metadata()
        if requested_all:
            # Kafka answers a null-topics request only for partitions where something happened.
            results = [r for r in results if r.error != ErrorCode.election_not_needed]
        return results

    async def _on_preferred_replica_election(self) -> None:
        """/admin/preferred_replica_election written by an admin tool: elect, then delete it."""
        if not self.c.is_active:
            return
        try:
            partitions = await self.c.azk.admin.preferred_replica_election()
        except Exception:
            log.exception("cannot read the preferred replica election request")
            return
        if partitions is None or partitions == []:
            return
        results = await self._elect_leaders(ElectionType.PREFERRED, list(partitions))
        failed = [r for r in results if r.error not in (ErrorCode.none, ErrorCode.election_not_needed)]
        if failed:
            log.warning("preferred replica election: %d partitions failed: %s", len(failed), failed[:10])
        await self.c.azk.admin.delete_preferred_replica_election()

    async def _auto_leader_rebalance(self) -> None:
        """auto.leader.rebalance.enable: move leadership back to preferred replicas of
        brokers whose share of lost leaderships exceeds leader.imbalance.per.broker.percentage."""
        ctx = self.c.ctx
        if not self.c.is_active or ctx.shutting_down:
            return
        assignments, leaders, isrs = {}, {}, {}
        for tp, _replicas in ctx.all_partitions():
            if tp[0] in ctx.topics_being_deleted or tp in ctx.reassignments:
                continue
            state = ctx.states.get(tp)
            if state is None:
                continue
            assignments[tp] = self.c._target_replicas(*tp)
            leaders[tp] = state.leader
            isrs[tp] = state.isr
        live = set(ctx.brokers)
        percentage = self.c.config["leader.imbalance.per.broker.percentage"]
        by_broker = imbalanced_partitions(assignments, leaders, live, percentage)
        candidates = [tp for partitions in by_broker.values() for tp in partitions
                      if assignments[tp][0] in isrs[tp]]
        if candidates:
            log.info("leader imbalance %s above %d%%: preferred election for %d partitions",
                     {b: round(r, 2) for b, r in imbalance_ratios(assignments, leaders, live).items() if r},
                     percentage, len(candidates))
            await self._elect_leaders(ElectionType.PREFERRED, candidates)

    def _start_auto_rebalance(self) -> None:
        if not self.c.config["auto.leader.rebalance.enable"] or getattr(self, "_rebalance_task", None):
            return
        interval = max(self.c.config["leader.imbalance.check.interval.seconds"], 1)

        async def loop():
            while self.c.is_active:
                await asyncio.sleep(interval)
                if self.c.is_active:
                    self.c.enqueue(self._auto_leader_rebalance)
            self._rebalance_task = None

        self._rebalance_task = self.c.loop.create_task(loop())

    # ---- controlled shutdown ---------------------------------------------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1) -> ControlledShutdownResult:
        """Kafka's ControlledShutdown for one broker: lead elsewhere, leave the ISRs;
        answers the partitions it still leads."""
        async def event():
            if not self.c.is_active:
                return ControlledShutdownResult(ErrorCode.not_controller)
            ctx = self.c.ctx
            if broker_id not in ctx.brokers:
                return ControlledShutdownResult(ErrorCode.broker_not_available)
            ctx.shutting_down.add(broker_id)
            log.info("controlled shutdown of broker %d (shutting down: %s)", broker_id, sorted(ctx.shutting_down))
            moved, followers = [], []
            live = set(ctx.brokers)
            for (topic, p), replicas in ctx.all_partitions():
                if broker_id not in replicas or topic in ctx.topics_being_deleted:
                    continue
                state = ctx.states.get((topic, p))
                if state is None:
                    continue
                if state.leader == broker_id:
                    if len(replicas) < 2:
                        continue  # nowhere to go: stays until the broker stops
                    outcome = controlled_shutdown_partition_leader(replicas, state.isr, live, ctx.shutting_down)
                    if not outcome.elected:
                        continue
                    await self.c._write_state(topic, p, PartitionState(outcome.leader, state.leader_epoch + 1,
                                                                     list(outcome.isr), ctx.epoch, state.zk_version))
                    moved.append((topic, p))
                elif broker_id in state.isr:
                    # OnlineReplica -> OfflineReplica for its followers: out of the ISR now,
                    # so acks=all stops waiting for a broker that is going away.
                    isr = [r for r in state.isr if r != broker_id]
                    await self.c._write_state(topic, p, PartitionState(state.leader, state.leader_epoch + 1, isr,
                                                                     ctx.epoch, state.zk_version))
                    followers.append((topic, p))
            ctx.replica_sm.transition([(t, p, broker_id) for t, p in moved + followers], RS.OFFLINE_REPLICA)
            if moved or followers:
                # OfflineReplica means StopReplica (no deletion) for the shutting-down broker's
                # replicas, as in Kafka, not a LeaderAndIsr: as followers they would keep
                # fetching, the new leaders would put them straight back into the ISRs, and
                # acks=all would then wait replica.lag.time.max.ms for them once the broker exits.
                stops = [((t, p, broker_id),
                          self.c.channel.stop_replica(ReplicaKey(t, p, broker_id), ctx.epoch, False))
                         for t, p in moved + followers]
                await asyncio.gather(self.c._send_leader_and_isr(moved + followers, exclude=frozenset({broker_id})),
                                     self.c._await_calls(stops))
                await self.c._send_update_metadata()
            remaining = [tp for tp, state in ctx.states.items()
                         if state.leader == broker_id and tp[0] not in ctx.topics_being_deleted]
            log.info("controlled shutdown of broker %d: %d leaders moved, left %d ISRs, %d partitions remain "
                     "led by it", broker_id, len(moved), len(followers), len(remaining))
            return ControlledShutdownResult(ErrorCode.none, remaining)

        event.__name__ = f"controlled_shutdown({broker_id})"
        return await self.c.submit(event)


class Reassignments:
    """Partition reassignment (KIP-455) and the replica deletions it leaves pending:
    a part of the controller `c`."""

    def __init__(self, controller: Any):
        self.c = controller

    # ---- partition reassignment (KIP-455) ---------------------------------------------------------------
    def _target_replicas(self, topic: str, p: int) -> list[int]:
        reassignment = self.c.ctx.reassignments.get((topic, p))
        if reassignment is not None:
            return reassignment.target_replicas
        return list(self.c.ctx.topics[topic].assignment[p])

    async def alter_partition_reassignments(self, reassignments: list[PartitionReassignment],
                                            timeout_ms: int = 0) -> AlterReassignmentsResult:
        async def event():
            if not self.c.is_active:
                return AlterReassignmentsResult(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
            results = await self._alter_reassignments([(t, p, None if r is None else list(r))
                                                       for t, p, r in reassignments])
            return AlterReassignmentsResult(ErrorCode.none, None, results)

        event.__name__ = "alter_partition_reassignments"
        return await self.c.submit(event)

    async def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None,
                                           timeout_ms: int = 0) -> ListReassignmentsResult:
        async def event():
            if not self.c.is_active:
                return ListReassignmentsResult(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
            wanted = set(map(tuple, partitions)) if partitions is not None else None
            results = []
            for (topic, p), r in sorted(self.c.ctx.reassignments.items()):
                if wanted is None or (topic, p) in wanted:
                    results.append(OngoingReassignment(topic, p, list(r.replicas), list(r.adding), list(r.removing)))
            return ListReassignmentsResult(ErrorCode.none, None, results)

        event.__name__ = "list_partition_reassignments"
        return await self.c.submit(event)

    async def _alter_reassignments(self, requests: list[tuple[str, int, list[int] | None]]
                                   ) -> list[PartitionOutcome]:
        ctx = self.c.ctx
        results, started = [], []
        for topic, p, target in requests:
            t = ctx.topics.get(topic)
            if t is None or p not in t.assignment or topic in ctx.topics_being_deleted:
                results.append(_result(topic, p, ErrorCode.unknown_topic_or_partition,
                                       "The partition does not exist."))
                continue
            current = ctx.reassignments.get((topic, p)) or ReplicaAssignment(list(t.assignment[p]))
            try:
                new = build_reassignment(current, target, ctx.brokers.keys())
            except ReassignmentError as exc:
                results.append(_result(topic, p, exc.error, str(exc)))
                continue
            if new == current:
                results.append(_result(topic, p))
                continue
            try:
                await self._start_reassignment(topic, p, current, new)
            except Exception as exc:
                log.exception("reassignment of %s-%d to %s failed to start", topic, p, target)
                results.append(_result(topic, p, ErrorCode.unknown_server_error, str(exc)))
                continue
            started.append((topic, p))
            results.append(_result(topic, p))
        if started:
            await self.c._send_update_metadata()
            for topic, p in started:
                await self._maybe_complete_reassignment(topic, p)
        return results

    async def _start_reassignment(self, topic: str, p: int, current: ReplicaAssignment,
                                  new: ReplicaAssignment) -> None:
        """Phase 1 of KIP-455: the full replica set (target + original) is written,
        new replicas start as followers, and the leader learns of them through a
        new leader epoch. Removed-before-complete replicas (a cancel or a changed
        target) are stopped and deleted."""
        ctx = self.c.ctx
        t = ctx.topics[topic]
        old_full = list(current.replicas)
        t.assignment[p] = list(new.replicas)
        if new.is_being_reassigned:
            ctx.reassignments[(topic, p)] = new
        else:
            ctx.reassignments.pop((topic, p), None)
        await self._write_topic_assignment(topic)
        log.info("reassignment of %s-%d: replicas %s (adding %s, removing %s)", topic, p, new.replicas,
                 new.adding, new.removing)
        adding = [r for r in new.replicas if r not in old_full]
        ctx.replica_sm.transition([(topic, p, r) for r in adding], RS.NEW_REPLICA)
        dropped = [r for r in old_full if r not in new.replicas]
        state = ctx.states.get((topic, p))
        if state is not None:
            live = set(ctx.brokers)
            isr = [r for r in state.isr if r in new.replicas] or list(state.isr)
            leader = state.leader
            if leader not in new.replicas or leader not in live:
                outcome = reassign_partition_leader(new.replicas, isr, live)
                leader = outcome.leader if outcome.elected else leader
            await self.c._write_state(topic, p, PartitionState(leader, state.leader_epoch + 1, isr, ctx.epoch,
                                                             state.zk_version))
        await self.c._send_leader_and_isr([(topic, p)])
        ctx.replica_sm.transition([(topic, p, r) for r in adding if r in ctx.brokers], RS.ONLINE_REPLICA)
        if dropped:
            await self._delete_replicas(topic, p, dropped)

    async def _write_topic_assignment(self, topic: str) -> None:
        """/brokers/topics/<t> with the adding/removing maps of partitions in flight."""
        from metadata.kafka_zk import TopicAssignment

        t = self.c.ctx.topics[topic]
        adding = {p: list(r.adding) for (tn, p), r in self.c.ctx.reassignments.items() if tn == topic and r.adding}
        removing = {p: list(r.removing) for (tn, p), r in self.c.ctx.reassignments.items()
                    if tn == topic and r.removing}
        found = await self.c.azk.topics.get_with_version(topic)
        if found is None:
            raise RuntimeError(f"topic {topic} vanished from ZooKeeper")
        znode, version = found
        updated = TopicAssignment({p: list(r) for p, r in t.assignment.items()}, znode.topic_id, adding, removing)
        await self.c.azk.topics.set_assignment(topic, updated, version,
                                            expected_controller_epoch_zk_version=self.c.epoch_zk_version)

    async def _maybe_complete_reassignment(self, topic: str, p: int) -> bool:
        """Phase 2 once every target replica is in the ISR: leadership onto a target
        replica, the replica set shrinks to the target, removed replicas are
        stopped and deleted, and the znodes forget the reassignment."""
        ctx = self.c.ctx
        reassignment = ctx.reassignments.get((topic, p))
        state = ctx.states.get((topic, p))
        if reassignment is None or state is None or not reassignment.is_complete(state.isr):
            return False
        target = reassignment.target_replicas
        removing = list(reassignment.removing)
        live = set(ctx.brokers)
        isr = [r for r in state.isr if r in target]
        leader = state.leader
        if leader not in target or leader not in live:
            outcome = reassign_partition_leader(target, isr, live)
            if not outcome.elected:
                log.warning("reassignment of %s-%d: no live target replica in ISR %s yet", topic, p, state.isr)
                return False
            leader = outcome.leader
        ctx.topics[topic].assignment[p] = list(target)
        del ctx.reassignments[(topic, p)]
        await self.c._write_state(topic, p, PartitionState(leader, state.leader_epoch + 1, isr, ctx.epoch,
                                                         state.zk_version))
        await self._write_topic_assignment(topic)
        await self.c._send_leader_and_isr([(topic, p)])
        if removing:
            await self._delete_replicas(topic, p, removing)
        await self._forget_znode_reassignment(topic, p)
        await self.c._send_update_metadata()
        log.info("reassignment of %s-%d complete: replicas %s, leader %d", topic, p, target, leader)
        return True

    async def _forget_znode_reassignment(self, topic: str, p: int) -> None:
        try:
            pending = await self.c.azk.admin.reassignment()
        except Exception:
            log.exception("cannot read /admin/reassign_partitions")
            return
        if (topic, p) in pending:
            del pending[(topic, p)]
            await self.c.azk.admin.set_reassignment(pending)  # an empty map deletes the znode

    async def _delete_replicas(self, topic: str, p: int, brokers: list[int]) -> None:
        """OnlineReplica -> OfflineReplica -> ReplicaDeletionStarted -> ReplicaDeletionSuccessful
        -> NonExistentReplica; a replica on a dead broker becomes ReplicaDeletionIneligible
        and its files stay until that broker returns (Kafka does the same)."""
        ctx = self.c.ctx
        replicas = [(topic, p, b) for b in brokers]
        ctx.replica_sm.transition(replicas, RS.OFFLINE_REPLICA)
        reachable = [r for r in replicas if r[2] in ctx.brokers]
        unreachable = [r for r in replicas if r[2] not in ctx.brokers]
        ctx.replica_sm.transition(reachable, RS.REPLICA_DELETION_STARTED)
        calls = [((t, q, b), self.c.channel.stop_replica(ReplicaKey(t, q, b), ctx.epoch, True))
                 for t, q, b in reachable]
        outcomes = await self._await_calls(calls)
        for replica, outcome in outcomes.items():
            if outcome == ErrorCode.none:
                ctx.replica_sm.transition([replica], RS.REPLICA_DELETION_SUCCESSFUL)
                ctx.replica_sm.transition([replica], RS.NON_EXISTENT_REPLICA)
                self.c.channel.remove_replica(ReplicaKey(*replica))
            else:
                ctx.replica_sm.transition([replica], RS.REPLICA_DELETION_INELIGIBLE)
                log.warning("deleting replica %s failed (%s); retried when its broker returns", replica, outcome)
        ctx.replica_sm.transition(unreachable, RS.REPLICA_DELETION_INELIGIBLE)
        ctx.pending_replica_deletions.update(unreachable)
        ctx.pending_replica_deletions.update(r for r, o in outcomes.items() if o != ErrorCode.none)

    async def _await_calls(self, calls: list[tuple[Any, Any]]) -> dict:
        """Like _await_all, but returns each target's outcome (an error code, ErrorCode.none on success, or
        the exception)."""
        if not calls:
            return {}
        results = await asyncio.gather(*(asyncio.wait_for(ref, self.c.call_timeout_s) for _, ref in calls),
                                       return_exceptions=True)
        out = {}
        for (target, _), result in zip(calls, results):
            if isinstance(result, BaseException):
                log.error("call to %s failed: %s", target, str(result).splitlines()[0][:300] if str(result) else
                          type(result).__name__)
                self.c.channel.forget_replica(target)
            out[target] = result
        return out

    async def _retry_replica_deletions(self, broker_ids: list[int]) -> None:
        """Replicas left ReplicaDeletionIneligible on brokers that came back: delete them now."""
        ctx = self.c.ctx
        due = [r for r in ctx.pending_replica_deletions if r[2] in broker_ids]
        for topic, p, b in due:
            ctx.pending_replica_deletions.discard((topic, p, b))
            if topic in ctx.topics and b in ctx.topics[topic].assignment.get(p, ()):
                continue  # assigned there again since: keep it
            ctx.replica_sm.transition([(topic, p, b)], RS.OFFLINE_REPLICA)
            await self._delete_replicas(topic, p, [b])

    async def _on_reassign_partitions_znode(self) -> None:
        """/admin/reassign_partitions (the pre-KIP-455 admin path): start what it asks."""
        if not self.c.is_active:
            return
        try:
            wanted = await self.c.azk.admin.reassignment()
        except Exception:
            log.exception("cannot read /admin/reassign_partitions")
            return
        if not wanted:
            return
        fresh = [(t, p, list(r)) for (t, p), r in sorted(wanted.items())
                 if (t, p) not in self.c.ctx.reassignments
                 or self.c.ctx.reassignments[(t, p)].target_replicas != list(r)]
        if not fresh:
            return
        results = await self._alter_reassignments(fresh)
        failed = {(r.topic, r.partition) for r in results if r.error != ErrorCode.none}
        if failed:
            log.warning("/admin/reassign_partitions: refused %s", sorted(failed))
        # Kafka removes entries it cannot act on; finished ones leave as they complete.
        remaining = {tp: r for tp, r in wanted.items()
                     if tp not in failed and (tp in self.c.ctx.reassignments)}
        if remaining != wanted:
            await self.c.azk.admin.set_reassignment(remaining)

    async def _check_reassignments(self, partitions) -> None:
        for topic, p in list(partitions):
            if (topic, p) in self.c.ctx.reassignments:
                await self._maybe_complete_reassignment(topic, p)
