"""The controller's logic with a fake channel and the in-memory ZooKeeper: no Ray, no JVM.
Broker death and return, ISR change notifications, topic deletion, partition
increase, the two phases of a reassignment, preferred and controlled-shutdown
elections, and epoch fencing of a deposed controller."""
from __future__ import annotations

import asyncio
import time

import pytest

from cluster.controller.leader_election import ElectionType
from core.controller_messages import (ConfigChange, ConfigOp, ConfigResource, ControlledShutdownResult,
                                      CreatePartitionsSpec, ElectLeadersResult, OngoingReassignment,
                                      PartitionOutcome, PartitionReassignment, TopicOutcome)
from core.error_codes import ErrorCode
from metadata.kafka_zk import ControllerMovedError, PartitionState as ZkPartitionState
from metadata.testing import ZkTarget, expire_session
from tests.unit.controller_harness import (ControllerService, FakeChannel, config, eventually, idle, register,
                                           start_zk, topic_spec)

BROKERS = (1, 2, 3)


@pytest.fixture
def connect(memory_zookeeper):
    return ZkTarget.on(memory_zookeeper, "controller")


class Cluster:
    """Brokers registered by one admin session, a controller with a fake channel."""

    def __init__(self, connect: ZkTarget, brokers=BROKERS, **overrides: str):
        self.connect = connect
        self.admin = start_zk(connect)
        for b in brokers:
            register(self.admin, b)
        self.channel = FakeChannel(edges=brokers)
        self.controller_zk = start_zk(connect)
        self.service = ControllerService(1, config(**overrides), self.controller_zk, "test", connect.connect_string,
                                         channel=self.channel)

    async def start(self) -> "Cluster":
        self.service.start()
        await eventually(lambda: self.service.is_active, what="the controller to be active")
        await idle(self.service)
        return self

    def state(self, topic: str, p: int) -> ZkPartitionState:
        return self.admin.partitions.state(topic, p)[0]

    async def create(self, name: str, assignments: dict[int, list[int]], **configs: str) -> None:
        [result] = await self.service.create_topics([topic_spec(name, assignments, **configs)], False)
        assert result.error == 0, result

    def close(self) -> None:
        self.service.stop()
        self.service.zk.close()  # test teardown, outside the scenario's event loop
        self.admin.close()


def run(connect, scenario, **overrides):
    async def main():
        cluster = await Cluster(connect, **overrides).start()
        try:
            return await scenario(cluster)
        finally:
            cluster.close()

    return asyncio.run(main())


def test_topic_creation_sends_leader_and_isr_and_metadata(connect):
    async def scenario(c: Cluster):
        c.channel.clear()
        await c.create("t", {0: [1, 2, 3], 1: [2, 3, 1]})
        sent = c.channel.leader_and_isr()
        assert {(key, r.leader, r.leader_epoch) for key, r in sent} == {
            (("t", 0, b), 1, 0) for b in BROKERS} | {(("t", 1, b), 2, 0) for b in BROKERS}
        assert all(r.controller_epoch == c.service.ctx.epoch for _, r in sent)
        leaders = [s for s in c.channel.sent if s[0] == "become_leader"]
        assert sorted(s[1] for s in leaders) == [("t", 0, 1), ("t", 1, 2)]
        # The replica was created with its broker's settings.
        spec = c.channel.replicas[("t", 0, 1)]
        assert (spec.topic, spec.partition, spec.broker_id, spec.log_dirs) == ("t", 0, 1, ["/tmp/none"])
        metadata = c.channel.of("update_metadata")
        assert sorted(m[1] for m in metadata) == list(BROKERS)
        assert dict((m[1], m[3]) for m in metadata)[2] == [("t", 1, 2)]
        assert c.channel.coordinator_rounds[-1] == [("t", 0), ("t", 1)]
        assert c.state("t", 0).leader == 1 and c.state("t", 0).isr == [1, 2, 3]

    run(connect, scenario)


def test_creation_is_answered_within_the_timeout_while_replicas_start(connect):
    """CreateTopics with a timeout (issue 29 item 7): when starting the new
    replicas outlasts half of it, the answer comes once the assignment and
    the leaders' states are durable and every edge has an UpdateMetadata
    naming the topic without its leaders' handles; the replicas finish
    starting afterwards, and a second UpdateMetadata hands the leaders over."""
    async def scenario(c: Cluster):
        release = asyncio.Event()
        become_leader = c.channel.become_leader

        def slow_become_leader(key, request):
            answer = become_leader(key, request)

            async def after_release():
                await release.wait()
                return await answer
            return after_release()

        c.channel.become_leader = slow_become_leader
        c.channel.clear()
        spec = topic_spec("t", {0: [1], 1: [2], 2: [3]})
        [result] = await asyncio.wait_for(c.service.create_topics([spec], False, 400), 5)
        assert result.error == 0, result
        assert [c.state("t", p).leader for p in range(3)] == [1, 2, 3]
        early = c.channel.of("update_metadata")
        assert sorted(m[1] for m in early) == list(BROKERS)
        assert all(m[3] == [] for m in early), "no leader handles while the replicas start"
        release.set()
        await eventually(lambda: len(c.channel.of("update_metadata")) == 2 * len(BROKERS),
                         what="the UpdateMetadata with the started leaders")
        late = {m[1]: m[3] for m in c.channel.of("update_metadata")[len(BROKERS):]}
        assert late == {1: [("t", 0, 1)], 2: [("t", 1, 2)], 3: [("t", 2, 3)]}

    run(connect, scenario)


def test_creation_without_a_timeout_answers_once_the_replicas_are_up(connect):
    async def scenario(c: Cluster):
        c.channel.clear()
        [result] = await c.service.create_topics([topic_spec("t", {0: [1]})], False, 0)
        assert result.error == 0
        # One UpdateMetadata round, after LeaderAndIsr, with the leader's handle.
        assert [m[3] for m in c.channel.of("update_metadata") if m[1] == 1] == [[("t", 0, 1)]]

    run(connect, scenario)


def test_broker_death_moves_leadership_and_shrinks_the_isr(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2, 3], 1: [2, 1, 3]})
        c.channel.clear()
        c.channel.kill_edge(1)
        await eventually(lambda: 1 not in c.service.ctx.brokers, what="broker 1 to be gone")
        await idle(c.service)
        assert c.channel.forgotten_brokers == [1]
        # Partition 0 led by 1: the next live ISR member leads at a new epoch.
        assert (c.state("t", 0).leader, c.state("t", 0).leader_epoch, c.state("t", 0).isr) == (2, 1, [2, 3])
        # Partition 1: its follower 1 leaves the ISR, the leader stays.
        assert (c.state("t", 1).leader, c.state("t", 1).leader_epoch, c.state("t", 1).isr) == (2, 1, [2, 3])
        sent = c.channel.leader_and_isr()
        assert sent and all(key[2] != 1 for key, _ in sent)
        assert {key: r.leader for key, r in sent if key[1] == 0} == {("t", 0, 2): 2, ("t", 0, 3): 2}
        assert sorted(m[1] for m in c.channel.of("update_metadata")) == [2, 3]
        # Its stale registration is not trusted again while it stays in ZooKeeper.
        assert c.admin.brokers.get(1) is not None and 1 not in await c.service._live_registrations()

    run(connect, scenario)


def test_broker_return_rejoins_as_follower_and_gets_metadata(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        c.admin.brokers.deregister(1)  # the broker's session ends
        await eventually(lambda: 1 not in c.service.ctx.brokers, what="broker 1 to leave")
        await idle(c.service)
        assert c.state("t", 0).leader == 2 and c.state("t", 0).isr == [2]
        c.channel.clear()
        c.channel.edges.add(1)
        register(c.admin, 1)
        await eventually(lambda: 1 in c.service.ctx.brokers, what="broker 1 to return")
        await idle(c.service)
        sent = dict(c.channel.leader_and_isr())
        assert sent[("t", 0, 1)].leader == 2  # a follower of the current leader
        assert c.channel.of("become_follower")[0][3] == ("t", 0, 2)
        assert 1 in {m[1] for m in c.channel.of("update_metadata")}

    run(connect, scenario)


def test_isr_change_notification_refreshes_state_and_metadata(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2, 3]})
        c.channel.clear()
        state, version = c.admin.partitions.state("t", 0)
        # The leader shrinks its ISR (a conditional write), then notifies.
        c.admin.partitions.update_state("t", 0, ZkPartitionState(1, state.leader_epoch, [1, 2],
                                                                 state.controller_epoch), version)
        c.admin.isr_changes.add([("t", 0)])
        await eventually(lambda: c.service.ctx.states[("t", 0)].isr == [1, 2], what="the ISR change")
        await eventually(lambda: not c.admin.isr_changes.pending(), what="the notification to go")
        await idle(c.service)
        assert c.channel.of("update_metadata")
        assert c.service.ctx.states[("t", 0)].zk_version == version + 1
        assert not c.channel.leader_and_isr()  # the leader made the change: nothing to tell replicas

    run(connect, scenario)


def test_topic_deletion_stops_and_deletes_every_replica_then_the_znodes(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2], 1: [2, 3]})
        c.channel.clear()
        outcome = await c.service.delete_topics(["t", "missing"])
        assert outcome == [TopicOutcome("t"), TopicOutcome("missing", ErrorCode.unknown_topic_or_partition,
                                                            "This server does not host this topic-partition.")]
        stops = c.channel.of("stop_replica")
        assert sorted(s[1] for s in stops) == [("t", 0, 1), ("t", 0, 2), ("t", 1, 2), ("t", 1, 3)]
        assert all(s[3] is True and s[2] == c.service.ctx.epoch for s in stops)
        assert sorted(c.channel.removed) == sorted(s[1] for s in stops)
        assert "t" not in c.service.ctx.topics and c.admin.topics.get("t") is None
        assert not c.admin.admin.topics_marked_for_deletion()

    run(connect, scenario)


def test_topic_deletion_waits_for_a_dead_broker_and_finishes_when_it_returns(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 3]})
        c.admin.brokers.deregister(3)
        await eventually(lambda: 3 not in c.service.ctx.brokers, what="broker 3 to leave")
        await idle(c.service)
        await c.service.delete_topics(["t"])
        assert c.admin.topics.get("t") is not None and "t" in c.service.ctx.topics_being_deleted
        c.channel.clear()
        c.channel.edges.add(3)
        register(c.admin, 3)
        await eventually(lambda: c.admin.topics.get("t") is None, what="the deletion to finish")
        assert [s[1] for s in c.channel.of("stop_replica")] == [("t", 0, 3)]

    run(connect, scenario)


def test_partition_increase_creates_states_and_leaders(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        c.channel.clear()
        [result] = await c.service.create_partitions([CreatePartitionsSpec("t", 3, [[2, 3], [3, 1]])],
                                                     False)
        assert result.error == 0, result
        assert c.admin.topics.get("t").partitions == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
        assert (c.state("t", 1).leader, c.state("t", 2).leader) == (2, 3)
        assert sorted(key for key, _ in c.channel.leader_and_isr()) == [("t", 1, 2), ("t", 1, 3), ("t", 2, 1),
                                                                       ("t", 2, 3)]
        [refused] = await c.service.create_partitions([CreatePartitionsSpec("t", 2)], False)
        assert refused.error != 0

    run(connect, scenario)


def test_reassignment_adds_then_catches_up_then_moves_the_leader_and_removes(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        c.channel.clear()
        answer = await c.service.alter_partition_reassignments([PartitionReassignment("t", 0, [2, 3])])
        assert answer.error == 0 and answer.results[0].error == 0
        # Phase 1: the full set, 3 added as a follower at a new leader epoch; nothing removed yet.
        assert c.admin.topics.get("t").partitions[0] == [2, 3, 1]
        listed = await c.service.list_partition_reassignments(None)
        assert listed.results == [OngoingReassignment("t", 0, [2, 3, 1], [3], [1])]
        sent = dict(c.channel.leader_and_isr())
        assert sent[("t", 0, 3)].replicas == [2, 3, 1] and sent[("t", 0, 3)].leader_epoch == 1
        assert not c.channel.of("stop_replica")
        # Replica 3 catches up: the leader adds it to the ISR and notifies.
        c.channel.clear()
        state, version = c.admin.partitions.state("t", 0)
        c.admin.partitions.update_state("t", 0, ZkPartitionState(state.leader, state.leader_epoch, [1, 2, 3],
                                                                 state.controller_epoch), version)
        c.admin.isr_changes.add([("t", 0)])
        await eventually(lambda: ("t", 0) not in c.service.ctx.reassignments, what="phase 2")
        await idle(c.service)
        # Phase 2: leadership onto a target replica, the set shrinks, 1 is stopped and deleted.
        final = c.state("t", 0)
        assert final.leader == 2 and final.isr == [2, 3] and final.leader_epoch == 2
        assert c.admin.topics.get("t").partitions[0] == [2, 3]
        assert [(s[1], s[3]) for s in c.channel.of("stop_replica")] == [(("t", 0, 1), True)]
        assert ("t", 0, 1) in c.channel.removed
        assert (await c.service.list_partition_reassignments(None)).results == []

    run(connect, scenario)


def test_preferred_election_moves_leadership_back(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        c.admin.brokers.deregister(1)
        await eventually(lambda: 1 not in c.service.ctx.brokers, what="broker 1 to leave")
        c.channel.edges.add(1)
        register(c.admin, 1)
        await eventually(lambda: 1 in c.service.ctx.brokers, what="broker 1 to return")
        await idle(c.service)
        assert c.state("t", 0).leader == 2
        # Not back in the ISR yet: the preferred replica cannot lead.
        answer = await c.service.elect_leaders(int(ElectionType.PREFERRED), [("t", 0)])
        assert answer.results[0].error != 0 and c.state("t", 0).leader == 2
        state, version = c.admin.partitions.state("t", 0)
        c.admin.partitions.update_state("t", 0, ZkPartitionState(2, state.leader_epoch, [2, 1],
                                                                 state.controller_epoch), version)
        c.admin.isr_changes.add([("t", 0)])
        await eventually(lambda: c.service.ctx.states[("t", 0)].isr == [2, 1], what="the ISR change")
        c.channel.clear()
        answer = await c.service.elect_leaders(int(ElectionType.PREFERRED), [("t", 0)])
        assert answer == ElectLeadersResult(ErrorCode.none, [PartitionOutcome("t", 0)])
        assert c.state("t", 0).leader == 1
        assert [s[1] for s in c.channel.of("become_leader")] == [("t", 0, 1)]
        again = await c.service.elect_leaders(int(ElectionType.PREFERRED), [("t", 0)])
        assert again.results[0].message == "Leader election not needed for topic partition."

    run(connect, scenario)


def test_controlled_shutdown_moves_leaders_and_takes_the_broker_out_of_isrs(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2, 3], 1: [2, 1, 3]})
        await c.create("solo", {0: [1]})
        c.channel.clear()
        answer = await c.service.controlled_shutdown(1)
        assert answer == ControlledShutdownResult(ErrorCode.none, [("solo", 0)])  # a single replica has nowhere to go
        assert (c.state("t", 0).leader, c.state("t", 0).isr) == (2, [2, 3])
        assert (c.state("t", 1).leader, c.state("t", 1).isr) == (2, [2, 3])
        stops = c.channel.of("stop_replica")
        assert sorted((s[1], s[3]) for s in stops) == [(("t", 0, 1), False), (("t", 1, 1), False)]
        assert all(key[2] != 1 for key, _ in c.channel.leader_and_isr())
        assert c.channel.of("update_metadata")

    run(connect, scenario)


def test_a_deposed_controller_is_fenced_and_the_new_one_sends_a_higher_epoch(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        old = c.service
        old_epoch = old.ctx.epoch
        # Another candidate takes over once /controller goes (the old one's session is cut off
        # from it; it still believes it is active).
        successor_channel = FakeChannel(edges=BROKERS)
        successor = ControllerService(2, config(), start_zk(c.connect), "test", c.connect.connect_string,
                                      channel=successor_channel)
        successor.start()
        await asyncio.sleep(0.2)
        assert not successor.is_active
        # The old controller misses its notifications (stalled, or cut off): it still believes it leads.
        old.from_zk_thread = lambda event: None
        assert c.controller_zk.controller.resign()
        await eventually(lambda: successor.is_active, what="the successor to take over")
        await idle(successor)
        assert successor.ctx.epoch == old_epoch + 1
        requests = [r for _, r in successor_channel.leader_and_isr()]
        assert requests and {r.controller_epoch for r in requests} == {old_epoch + 1}
        # The old controller's ZooKeeper writes fail: fenced on /controller_epoch's version.
        state = old.ctx.states[("t", 0)]
        from cluster.controller.controller_context import PartitionState

        with pytest.raises(ControllerMovedError):
            await old._write_state("t", 0, PartitionState(2, state.leader_epoch + 1, [2], old.ctx.epoch,
                                                    state.zk_version))
        assert c.state("t", 0).leader == 1
        await successor.close()

    run(connect, scenario)


def test_a_controller_whose_session_expires_is_elected_again_at_a_higher_epoch(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        old_epoch = c.service.ctx.epoch
        c.channel.clear()
        # A long partition: ZooKeeper ends the session and /controller goes with it; kazoo opens a
        # new session, the controller's /controller watch fires, and it is the only candidate.
        expire_session(c.controller_zk)
        await eventually(lambda: c.service.is_active and c.service.ctx.epoch == old_epoch + 1,
                         what="the controller to be elected again")
        await idle(c.service)
        assert c.admin.controller.id() == 1 and c.admin.controller.epoch()[0] == old_epoch + 1
        requests = [r for _, r in c.channel.leader_and_isr()]
        assert requests and {r.controller_epoch for r in requests} == {old_epoch + 1}
        # Its watches work on the new session: a broker leaving still moves leadership,
        # and is handled once (the first term's watches, re-armed by kazoo, are cancelled).
        c.channel.clear()
        broker_changes = []
        on_broker_change = c.service._on_broker_change

        async def counted_broker_change():
            broker_changes.append(time.monotonic())
            await on_broker_change()

        c.service._on_broker_change = counted_broker_change
        c.admin.brokers.deregister(1)
        await eventually(lambda: 1 not in c.service.ctx.brokers, what="broker 1 to leave")
        await idle(c.service)
        assert c.state("t", 0).leader == 2 and c.state("t", 0).controller_epoch == old_epoch + 1
        assert len(broker_changes) == 1, f"the broker change was handled {len(broker_changes)} times"

    run(connect, scenario)


def test_config_changes_reach_running_replicas(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        c.channel.clear()
        [result] = await c.service.alter_topic_configs([ConfigChange("t", [ConfigOp("min.insync.replicas", 0, "2")])],
                                                       False)
        assert result.error == 0, result
        assert c.admin.configs.topic("t") == {"min.insync.replicas": "2"}
        assert sorted((s[1], s[3]) for s in c.channel.of("update_log_config")) == [(("t", 0, 1), 2),
                                                                                    (("t", 0, 2), 2)]
        c.channel.clear()
        [result] = await c.service.alter_broker_configs(
            [ConfigChange("2", [ConfigOp("leader.replication.throttled.rate", 0, "1000")])], False)
        assert result.error == 0, result
        throttles = {s[1]: (s[2], s[3]) for s in c.channel.of("update_replication_throttle")}
        assert throttles[("t", 0, 2)][0] == 1000 and throttles[("t", 0, 1)][0] != 1000
        [refused] = await c.service.alter_broker_configs([ConfigChange("2", [ConfigOp("log.retention.ms", 0, "1")])],
                                                         False)
        assert refused.error == ErrorCode.invalid_request
        [described] = await c.service.describe_configs([ConfigResource(2, "t")])
        assert any(e for e in described.entries)

    run(connect, scenario)


def test_a_failed_stop_replica_is_retried_after_a_backoff(connect, monkeypatch):
    import cluster.controller.topic_deletion as topic_deletion

    monkeypatch.setattr(topic_deletion, "TOPIC_DELETION_RETRY_BACKOFF_S", 0.05)

    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        c.channel.outcomes[("stop_replica", ("t", 0, 2))] = 57  # KAFKA_STORAGE_ERROR, once
        c.channel.clear()
        await c.service.delete_topics(["t"])
        assert c.admin.topics.get("t") is not None and ("t", 0, 1) in c.channel.removed
        c.channel.outcomes.clear()
        await eventually(lambda: c.admin.topics.get("t") is None, what="the retried deletion")
        assert [s[1] for s in c.channel.of("stop_replica")] == [("t", 0, 1), ("t", 0, 2), ("t", 0, 2)]

    run(connect, scenario)


async def _broker_1_back_in_the_isr_of_t0_but_not_leading(c: Cluster) -> None:
    await c.create("t", {0: [1, 2]})
    c.admin.brokers.deregister(1)
    await eventually(lambda: 1 not in c.service.ctx.brokers, what="broker 1 to leave")
    c.channel.edges.add(1)
    register(c.admin, 1)
    await eventually(lambda: 1 in c.service.ctx.brokers, what="broker 1 to return")
    state, version = c.admin.partitions.state("t", 0)
    c.admin.partitions.update_state("t", 0, ZkPartitionState(2, state.leader_epoch, [2, 1], state.controller_epoch),
                                   version)
    c.admin.isr_changes.add([("t", 0)])
    await eventually(lambda: c.service.ctx.states[("t", 0)].isr == [2, 1], what="the ISR change")
    assert c.state("t", 0).leader == 2


def test_the_automatic_rebalance_moves_leadership_back(connect):
    async def scenario(c: Cluster):
        await _broker_1_back_in_the_isr_of_t0_but_not_leading(c)
        await eventually(lambda: c.state("t", 0).leader == 1, timeout_s=15, what="the automatic rebalance")

    run(connect, scenario, **{"auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "1",
                              "leader.imbalance.per.broker.percentage": "0"})


def test_the_preferred_replica_election_znode_is_acted_on_and_removed(connect):
    async def scenario(c: Cluster):
        await _broker_1_back_in_the_isr_of_t0_but_not_leading(c)
        c.admin.admin.create_preferred_replica_election([("t", 0)])
        await eventually(lambda: c.state("t", 0).leader == 1, what="the preferred election")
        await eventually(lambda: not c.admin.admin.preferred_replica_election(), what="the znode to go")

    run(connect, scenario)


def test_the_reassign_partitions_znode_starts_a_reassignment(connect):
    async def scenario(c: Cluster):
        await c.create("t", {0: [1, 2]})
        c.admin.admin.set_reassignment({("t", 0): [2, 3]})
        await eventually(lambda: ("t", 0) in c.service.ctx.reassignments, what="the reassignment to start")
        assert c.admin.topics.get("t").partitions[0] == [2, 3, 1]
        assert c.admin.admin.reassignment() == {("t", 0): [2, 3]}  # until it completes

    run(connect, scenario)
