"""The balancer as part of the controller (cluster/controller/balancer.py): the
controller's logic with a fake channel (no Ray), the in-memory ZooKeeper (no
JVM; the console tool's test runs on the real one) and a manual clock.
Replicas catching up are the leader's ISR writes plus the
/isr_change_notification, as a real leader makes them. Balance on join, heal
after the healing delay (and never before), the throttles, pause honoured at
once and across a controller failover, stale replicas deleted on return."""
from __future__ import annotations

import asyncio

import pytest

from cluster.controller.balancer_plan import measure, BrokerView
from metadata.kafka_zk import PartitionState as ZkPartitionState
from metadata.testing import ZkTarget
from tests.unit.controller_harness import (ControllerService, FakeChannel, config, eventually, idle, register,
                                           start_zk, topic_spec)

SETTINGS = {"raykafka.balancer.max.concurrent.moves": "3",
            "raykafka.balancer.throttle.bytes.per.sec": "1000000",
            # The tests drive each step; the timer never fires during one.
            "raykafka.balancer.check.interval.ms": "3600000",
            "raykafka.self.healing.delay.ms": "60000"}


@pytest.fixture
def connect(memory_zookeeper):
    return ZkTarget.on(memory_zookeeper, "balancer")


@pytest.fixture
def real_connect(zookeeper):
    """For the console tool, which opens its own ZooKeeper session from a connect string."""
    return ZkTarget.on(zookeeper, "balancer")


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Cluster:
    def __init__(self, connect: ZkTarget, brokers=(1, 2, 3), **overrides: str):
        self.connect = connect
        self.settings = {**SETTINGS, **overrides}
        self.admin = start_zk(connect)
        for b in brokers:
            register(self.admin, b)
        self.clock = Clock()
        self.services = []
        self.channel = None
        self.service = None
        self.brokers = list(brokers)

    async def start_controller(self, broker_id: int = 1):
        self.channel = FakeChannel(edges=self.brokers)
        self.service = ControllerService(broker_id, config(**self.settings), start_zk(self.connect), "test",
                                         self.connect.connect_string, channel=self.channel)
        self.service.balancer.clock = self.clock
        self.services.append(self.service)
        self.service.start()
        await eventually(lambda: self.service.is_active, what="the controller to be active")
        await idle(self.service)
        return self

    def fail_over(self):
        """The active controller's session ends (its node died)."""
        self.service.stop()
        self.service.zk.close()

    async def create(self, name: str, assignments: dict[int, list[int]], **configs: str) -> None:
        [result] = await self.service.create_topics([topic_spec(name, assignments, **configs)], False)
        assert result.error == 0, result

    async def join(self, broker_id: int) -> None:
        self.channel.edges.add(broker_id)
        self.brokers.append(broker_id)
        register(self.admin, broker_id)
        await eventually(lambda: broker_id in self.service.ctx.brokers, what=f"broker {broker_id} to join")
        await idle(self.service)

    async def lose(self, broker_id: int) -> None:
        self.channel.kill_edge(broker_id)
        self.admin.brokers.deregister(broker_id)
        await eventually(lambda: broker_id not in self.service.ctx.brokers, what=f"broker {broker_id} to go")
        await idle(self.service)

    async def step(self) -> None:
        await self.service.submit(self.service.balancer.tick)

    def moving(self) -> dict:
        return dict(self.service.ctx.reassignments)

    async def catch_up(self) -> None:
        """Every replica being added joins the ISR (the leader's write and notification)."""
        ctx = self.service.ctx
        moving = list(ctx.reassignments.items())
        for (t, p), r in moving:
            state, version = self.admin.partitions.state(t, p)
            isr = [b for b in r.replicas if b in ctx.brokers]
            self.admin.partitions.update_state(t, p, ZkPartitionState(state.leader, state.leader_epoch, isr,
                                                                     state.controller_epoch), version)
        self.admin.isr_changes.add([tp for tp, _ in moving])
        await eventually(lambda: not any(tp in ctx.reassignments for tp, _ in moving), what="moves to complete")
        await idle(self.service)

    def counts(self) -> tuple[dict, dict, dict]:
        """(replicas, preferred leaders, actual leaders) per live broker, from ZooKeeper."""
        replicas = {b: 0 for b in self.service.ctx.brokers}
        preferred = dict(replicas)
        leaders = dict(replicas)
        for t in self.admin.topics.names():
            for p, rs in self.admin.topics.get(t).partitions.items():
                for b in rs:
                    replicas[b] = replicas.get(b, 0) + 1
                preferred[rs[0]] = preferred.get(rs[0], 0) + 1
                leader = self.admin.partitions.state(t, p)[0].leader
                leaders[leader] = leaders.get(leader, 0) + 1
        return replicas, preferred, leaders

    def close(self) -> None:
        for s in self.services:
            s.stop()
            try:
                s.zk.close()
            except Exception:
                pass
        self.admin.close()


def run(connect, scenario, brokers=(1, 2, 3), **overrides):
    async def main():
        cluster = await Cluster(connect, brokers, **overrides).start_controller()
        try:
            return await scenario(cluster)
        finally:
            cluster.close()

    return asyncio.run(main())


def spread(partitions: int, rf: int, brokers: list[int]) -> dict[int, list[int]]:
    return {p: [brokers[(p + i) % len(brokers)] for i in range(rf)] for p in range(partitions)}


def spread_of(counts: dict) -> int:
    return max(counts.values()) - min(counts.values())


async def drain(c: Cluster, limit: int = 40) -> int:
    """Catch up and step until nothing moves; -> the most moves seen in flight at once."""
    most = 0
    for _ in range(limit):
        await c.step()
        most = max(most, len(c.moving()))
        if not c.moving():
            await c.step()
            if not c.moving() and not c.service.balancer.plan:
                return most
            continue
        await c.catch_up()
    raise AssertionError(f"the balancer did not settle: plan {c.service.balancer.plan[:5]}")


def test_a_joining_node_gets_an_even_share_through_throttled_bounded_reassignments(connect):
    async def scenario(c: Cluster):
        await c.create("t", spread(30, 2, [1, 2, 3]))
        c.channel.clear()
        await c.join(4)
        # The join starts the first moves: at most max.concurrent.moves, all onto broker 4.
        moving = c.moving()
        assert len(moving) == 3 and all(r.adding == [4] for r in moving.values()), moving
        listed = await c.service.list_partition_reassignments(None)
        assert {(r.topic, r.partition) for r in listed.results} == set(moving)
        # Each copy under Kafka's replication throttle: rates on its replicas, lists naming them.
        throttles = {s[1]: s for s in c.channel.of("update_replication_throttle")}
        for (t, p), r in moving.items():
            sent = throttles[(t, p, 4)]
            assert sent[2] == sent[3] == 1_000_000
            assert f"{p}:4" in sent[4]["follower_throttled_replicas"].split(",")
            assert all(f"{p}:{b}" in sent[4]["leader_throttled_replicas"].split(",") for b in r.original_replicas)
        state = c.admin.balancer.state()
        assert len(state["in_flight"]) == 3 and state["planned_moves"] > 0 and state["imbalance_score"] > 0.1
        c.channel.clear()
        most = await drain(c)
        assert most <= 3
        replicas, preferred, leaders = c.counts()
        assert replicas == {1: 15, 2: 15, 3: 15, 4: 15}
        assert spread_of(preferred) <= 1 and spread_of(leaders) <= 1, (preferred, leaders)
        # Throttles removed once each move completed (back to the broker's unlimited rate).
        assert any(s[2] > 1_000_000 and s[1][2] == 4 for s in c.channel.of("update_replication_throttle"))
        state = c.admin.balancer.state()
        assert state["in_flight"] == [] and state["plan"] == [] and state["imbalance_score"] <= 0.1
        assert not state["balancing"] and state["moves_completed"] == state["moves_started"] >= 15

    run(connect, scenario)


def test_a_broker_that_returns_with_its_replicas_moves_nothing(connect):
    async def scenario(c: Cluster):
        await c.create("t", spread(12, 2, [1, 2, 3]))
        await c.lose(3)
        c.clock.now += 10
        await c.join(3)
        await c.step()
        assert not c.moving() and not c.service.balancer.plan

    run(connect, scenario)


def test_a_lost_broker_is_healed_after_the_delay_and_its_stale_replicas_deleted_on_return(connect):
    async def scenario(c: Cluster):
        await c.create("t", spread(6, 2, [1, 2, 3]), **{"min.insync.replicas": "1"})
        on_3 = {(t, p) for (t, p), r in c.service.ctx.all_partitions() if 3 in r}
        await c.lose(3)
        c.clock.now += 59
        await c.step()
        assert not c.moving(), "healed before raykafka.self.healing.delay.ms"
        c.clock.now += 2
        await c.step()
        moving = c.moving()
        assert set(moving) <= on_3 and len(moving) == 3
        for (t, p), r in moving.items():
            # The lost replica stays assigned until its replacement is in the ISR.
            assert r.removing == [3] and 3 in c.admin.topics.get(t).partitions[p]
            assert c.admin.partitions.state(t, p)[0].isr == [b for b in r.replicas if b not in (3, *r.adding)]
        await drain(c)
        for (t, p), rs in c.service.ctx.all_partitions():
            assert len(rs) == 2 and 3 not in rs
            assert sorted(c.admin.partitions.state(t, p)[0].isr) == sorted(rs)
        stale = {tuple(r) for r in c.admin.balancer.state()["stale_replicas"]}
        assert stale == {(t, p, 3) for t, p in on_3}
        # Broker 3 comes back: its stale replicas are deleted, none is made a leader or follower.
        c.channel.clear()
        await c.join(3)
        deleted = {s[1] for s in c.channel.of("stop_replica") if s[3]}
        assert deleted == {(t, p, 3) for t, p in on_3}
        # It joined emptier than the rest, so it fills up again; a partition it held before
        # comes back only as a new replica, after the stale one was deleted.
        sent = c.channel.sent
        for i, s in enumerate(sent):
            if s[0] in ("become_leader", "become_follower") and s[1][2] == 3 and (s[1][0], s[1][1]) in on_3:
                assert ("stop_replica", s[1], c.service.ctx.epoch, True) in sent[:i]
                assert c.service.ctx.reassignments[(s[1][0], s[1][1])].adding == [3]
        await drain(c)
        replicas, _preferred, _leaders = c.counts()
        assert spread_of(replicas) <= 1 and replicas[3] >= 3

    run(connect, scenario)


def test_pause_stops_new_moves_at_once_and_a_new_controller_resumes_the_plan(connect):
    async def scenario(c: Cluster):
        await c.create("t", spread(18, 2, [1, 2, 3]))
        await c.join(4)
        first = set(c.moving())
        assert len(first) == 3
        c.admin.balancer.set_paused(True)
        await eventually(lambda: c.service.balancer.paused, what="the pause to be seen")
        await c.catch_up()
        await c.step()
        assert not c.moving(), "a move started while paused"
        state = c.admin.balancer.state()
        assert state["paused"] and state["planned_moves"] > 0
        # Failover while paused and mid-plan: the next controller stays paused.
        c.fail_over()
        await c.start_controller(2)
        await c.step()
        assert c.service.balancer.paused and not c.moving()
        c.admin.balancer.set_paused(False)
        await eventually(lambda: len(c.moving()) == 3, what="moves to start after --resume")
        # Failover with moves in flight: they resume through the reassignment path.
        in_flight = set(c.moving())
        c.fail_over()
        await c.start_controller(3)
        assert set(c.moving()) == in_flight and set(c.service.balancer.in_flight) == in_flight
        await drain(c)
        replicas, preferred, leaders = c.counts()
        assert spread_of(replicas) <= 1 and spread_of(leaders) <= 1

    run(connect, scenario)


def test_absence_survives_a_controller_failover(connect):
    async def scenario(c: Cluster):
        await c.create("t", spread(6, 2, [1, 2, 3]))
        await c.lose(3)
        c.clock.now += 40
        c.fail_over()
        await c.start_controller(2)
        await c.step()
        assert not c.moving()
        c.clock.now += 21  # 61 s since broker 3 left, whichever controller saw it
        await c.step()
        assert c.moving()

    run(connect, scenario)


def test_disabled_balancer_does_nothing(connect):
    async def scenario(c: Cluster):
        await c.create("t", spread(12, 2, [1, 2, 3]))
        await c.join(4)
        await c.step()
        assert not c.moving() and c.admin.balancer.state() is None

    run(connect, scenario, **{"raykafka.balancer.enabled": "false"})


def test_the_balancer_command_shows_the_plan_and_pauses(real_connect, capsys):
    from cli.main import main

    async def cli(*argv: str) -> tuple[int, str]:
        code = await asyncio.get_running_loop().run_in_executor(
            None, lambda: main(["balancer", "--zookeeper", real_connect.connect_string, *argv]))
        return code, capsys.readouterr().out

    async def scenario(c: Cluster):
        await c.create("t", spread(12, 2, [1, 2, 3]))
        code, out = await cli("--dry-run")
        assert code == 0 and "Proposed plan: 0 moves" in out
        await c.join(4)
        code, out = await cli("--status")
        assert code == 0 and "Moves in flight: 3" in out and out.count("in flight: t-") == 3, out
        assert "Broker: 4  Replicas: 3" in out  # counted at the targets of the moves in flight
        code, out = await cli("--pause")
        assert code == 0 and "Balancer paused." in out
        await eventually(lambda: c.service.balancer.paused, what="the controller to see the pause")
        code, out = await cli("--status")
        assert "Balancer: paused" in out
        code, out = await cli("--resume")
        assert code == 0 and "Balancer resumed." in out
        await eventually(lambda: not c.service.balancer.paused, what="the controller to see the resume")

    run(real_connect, scenario)
