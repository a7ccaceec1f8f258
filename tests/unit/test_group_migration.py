"""Online migration between classic and consumer groups without Ray
(cluster/groups/consumer/migration.py): the downgrade of a consumer group
to a classic group when its last consumer-protocol member leaves, is fenced,
or is replaced by a classic static member; the migration policy; empty groups
changing kind; the classic protocols a mixed group accepts. Offsets stay with
the group through every conversion, and the log replays into the same group."""
from __future__ import annotations

from typing import Optional

import pytest

from cli.groups import decode_assignment
from cluster.groups import LeavingMember, PartitionCommit, TopicPartition
from cluster.groups.consumer.coordinator import ConsumerGroupConfig
from cluster.groups.consumer_protocol import encode_subscription
from core.error_codes import ErrorCode
from tests.unit.test_group_consumer_protocol import IMAGE, T1, Client, Cluster
from tests.unit.test_group_support import Reply, range_protocols

E = ErrorCode
TP0 = TopicPartition("t1", 0)


class Classic:
    """A classic (eager, range) consumer; its requests go where the edge's
    would: to the consumer group while the group is one, else to the classic
    coordinator."""

    def __init__(self, cl: Cluster, member_id: str, generation: int, owned: set,
                 instance_id: Optional[str] = None, protocols=None) -> None:
        self.cl, self.member_id, self.generation, self.owned = cl, member_id, generation, owned
        self.instance_id = instance_id
        self.protocols = protocols or [("range", encode_subscription(["t1"]))]

    @property
    def in_consumer_group(self) -> bool:
        return self.cl.cg.owns("g")

    def heartbeat(self) -> ErrorCode:
        if self.in_consumer_group:
            return self.cl.cg.classic_heartbeat("g", self.member_id, self.instance_id, self.generation)
        return self.cl.h.heartbeat("g", self.member_id, self.generation, self.instance_id)

    def join(self) -> Reply:
        """JoinGroup as an eager member: everything revoked first."""
        self.owned = set()
        reply = Reply()
        if self.cl.cg.takes_classic_join("g"):
            self.cl.cg.classic_join("g", self.member_id, self.instance_id, "c", "/h", 60000, 10000, "consumer",
                                    self.protocols, 9, reply, IMAGE)
        else:
            self.cl.h.coordinator.join_group("g", self.member_id, self.instance_id, "c", "/h", 60000, 10000,
                                             "consumer", self.protocols, reply, api_version=9)
        return reply

    def sync(self, generation: int, assignments: Optional[dict] = None):
        if self.in_consumer_group:
            synced = self.cl.cg.classic_sync("g", generation, self.member_id, self.instance_id, "consumer", "range")
        else:
            reply = Reply()
            self.cl.h.coordinator.sync_group("g", generation, self.member_id, self.instance_id, "consumer",
                                             "range", assignments or {}, reply)
            synced = reply.value
        assert synced.error == E.none, synced
        self.generation = generation
        self.owned = set(decode_assignment(synced.assignment).get("t1", ()))
        return synced


def mixed_group(cl: Cluster, *, static_new: Optional[str] = None) -> tuple[list[Classic], Client]:
    """Two classic members (one partition each, an offset committed), then a
    consumer-protocol member upgrades the group; rounds until it is Stable."""
    h = cl.h
    results = h.form_group("g", 2)
    classic_group = h.coordinator.group("g")
    classics = [Classic(cl, r.member_id, r.generation_id,
                        set(decode_assignment(classic_group.members[r.member_id].assignment)["t1"]))
                for r in results]
    committed = h.commit("g", {("t1", 0): 42}, member_id=results[0].member_id, generation=results[0].generation_id)
    assert committed.value == {TP0: E.none}
    new = Client(cl, "new", instance=static_new)
    new.beat()
    assert cl.cg.owns("g")
    settle(cl, classics, new)
    return classics, new


def settle(cl: Cluster, classics: list[Classic], new: Optional[Client] = None, rounds: int = 8) -> None:
    for _ in range(rounds):
        for c in classics:
            if c.in_consumer_group and c.heartbeat() == E.rebalance_in_progress:
                joined = c.join().value
                assert joined.error == E.none, joined
                c.sync(joined.generation_id)
        if new is not None and cl.cg.owns("g"):
            new.beat()
        check_no_double_ownership(classics, new)


def check_no_double_ownership(classics, new=None) -> dict:
    seen = {}
    for c in classics:
        for p in c.owned:
            assert p not in seen, f"partition {p} owned by {seen[p]} and {c.member_id}"
            seen[p] = c.member_id
    if new is not None:
        for p in new.owned.get(T1, ()):
            assert p not in seen, f"partition {p} owned by {seen[p]} and {new.member_id}"
            seen[p] = new.member_id
    return seen


def classic_rebalance(cl: Cluster, classics: list[Classic]) -> int:
    """Every classic member sees the rebalance, rejoins; the leader assigns
    range-style; everyone syncs. -> the new generation."""
    assert all(c.heartbeat() == E.rebalance_in_progress for c in classics)
    replies = [c.join() for c in classics]
    results = [r.value for r in replies]
    assert all(r.error == E.none for r in results), results
    leader = next(r for r in results if r.leader_id == r.member_id)
    from cluster.groups.consumer_protocol import encode_assignment
    ids = sorted(r.member_id for r in results)
    share = 6 // len(ids)
    assignments = {m: encode_assignment({"t1": list(range(i * share, (i + 1) * share))}) for i, m in enumerate(ids)}
    syncs = [Reply() for _ in classics]
    for c, r, reply in zip(classics, results, syncs):
        cl.h.coordinator.sync_group("g", r.generation_id, c.member_id, c.instance_id, "consumer", "range",
                                    assignments if r is leader else {}, reply)
    for c, r, reply in zip(classics, results, syncs):
        assert reply.value.error == E.none, reply.value
        c.generation = r.generation_id
        c.owned = set(decode_assignment(reply.value.assignment)["t1"])
    return results[0].generation_id


def reloaded(cl: Cluster) -> Cluster:
    again = Cluster()
    again.h.coordinator.manager.other_records = again.cg.replay
    again.h.coordinator.begin_loading()
    again.cg.begin_loading()
    again.h.coordinator.replay(cl.h.log)
    again.h.coordinator.complete_loading()
    again.cg.complete_loading()
    return again


def test_last_consumer_member_leaving_downgrades_to_a_classic_group():
    cl = Cluster()
    classics, new = mixed_group(cl)
    group = cl.cg.groups["g"]
    epoch = group.group_epoch
    targets = {c.member_id: set(group.target[c.member_id].get(T1, ())) for c in classics}
    left = cl.beat("new", -1)
    assert (left.error, left.member_epoch) == (E.none, -1)
    # A classic group now, at the consumer group's epoch, each member holding its target assignment.
    assert not cl.cg.owns("g") and group.dead
    classic = cl.h.coordinator.group("g")
    assert set(classic.members) == {c.member_id for c in classics}
    assert (classic.generation_id, classic.protocol_type, classic.protocol_name) == (epoch, "consumer", "range")
    assert classic.state.value == "PreparingRebalance"  # the leaver's partitions go out in a classic rebalance
    assert {m: set(decode_assignment(member.assignment)["t1"]) for m, member in classic.members.items()} == targets
    assert cl.h.fetch("g", [TP0]).partitions[TP0].offset == 42
    assert [listing.group_type for listing in cl.h.coordinator.list_groups()[1]] == ["classic"]
    assert cl.cg.listings() == []
    [described] = cl.cg.describe(["g"])
    assert described.error == E.group_id_not_found
    # The log holds the conversion: a reload finds the classic group and no consumer group.
    again = reloaded(cl)
    assert not again.cg.owns("g")
    assert set(again.h.coordinator.group("g").members) == set(classic.members)
    assert again.h.coordinator.group("g").generation_id == epoch
    assert again.h.fetch("g", [TP0]).partitions[TP0].offset == 42
    # The classic members rejoin and carry on as a classic group.
    generation = classic_rebalance(cl, classics)
    assert generation == epoch + 1 and cl.h.state("g") == "Stable"
    assert sorted(p for c in classics for p in c.owned) == list(range(6))
    assert all(c.heartbeat() == E.none for c in classics)
    committed = cl.h.commit("g", {("t1", 1): 7}, member_id=classics[0].member_id, generation=generation)
    assert committed.value == {TopicPartition("t1", 1): E.none}


def test_consumer_member_fenced_by_its_session_downgrades_the_group():
    cl = Cluster()
    classics, new = mixed_group(cl)
    epoch = cl.cg.groups["g"].group_epoch
    for _ in range(40):  # only the classic members keep heartbeating
        cl.h.advance(100)
        for c in classics:
            assert c.heartbeat() in (E.none, E.rebalance_in_progress)
    assert not cl.cg.owns("g")
    assert cl.h.coordinator.group("g").generation_id == epoch
    classic_rebalance(cl, classics)
    assert cl.h.state("g") == "Stable"


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_no_downgrade_unless_the_policy_allows_it(policy):
    cl = Cluster(ConsumerGroupConfig(heartbeat_interval_ms=100, session_timeout_ms=3000, migration_policy="upgrade"))
    classics, new = mixed_group(cl)
    cl.cg.config = ConsumerGroupConfig(heartbeat_interval_ms=100, session_timeout_ms=3000, migration_policy=policy)
    assert cl.beat("new", -1).error == E.none
    # Still a consumer group, of classic members only, and they keep going.
    assert cl.cg.owns("g") and cl.h.coordinator.group("g").size == 0
    settle(cl, classics)
    assert sorted(p for c in classics for p in c.owned) == list(range(6))
    assert cl.cg.groups["g"].state.value == "Stable"


def test_downgrade_policy_does_not_upgrade():
    cl = Cluster(ConsumerGroupConfig(heartbeat_interval_ms=100, session_timeout_ms=3000, migration_policy="downgrade"))
    cl.h.form_group("g", 2)
    refused = cl.beat("new", 0, topics=("t1",))
    assert refused.error == E.group_id_not_found
    assert cl.h.coordinator.group("g").size == 2


def test_a_group_of_one_consumer_member_leaving_stays_an_empty_consumer_group_until_a_classic_join():
    cl = Cluster()
    a = Client(cl, "a")
    a.beat()
    reply = Reply()
    assert cl.cg.commit_offsets("g", "a", None, a.epoch, {TP0: PartitionCommit(offset=9)}, reply)
    assert reply.value == {TP0: E.none}
    assert cl.beat("a", -1).error == E.none
    assert cl.cg.owns("g") and cl.cg.groups["g"].state.value == "Empty"
    # A classic JoinGroup: the empty consumer group's records go, the group
    # continues as a classic one with its offsets (whatever the policy).
    cl.cg.config = ConsumerGroupConfig(migration_policy="disabled")
    before = len(cl.h.log)
    assert not cl.cg.takes_classic_join("g")
    assert not cl.cg.owns("g")
    tombstones = cl.h.log[before:]
    assert tombstones and all(value is None for _, value in tombstones)
    [joined] = cl.h.form_group("g", 1)
    assert joined.error == E.none and cl.h.state("g") == "Stable"
    assert cl.h.fetch("g", [TP0]).partitions[TP0].offset == 9
    again = reloaded(cl)
    assert not again.cg.owns("g") and again.h.coordinator.group("g").size == 1
    assert again.h.fetch("g", [TP0]).partitions[TP0].offset == 9


def test_classic_member_needs_a_protocol_every_classic_member_supports():
    cl = Cluster()
    mixed_group(cl)
    from cluster.groups.consumer_protocol import encode_subscription as sub
    odd = Classic(cl, "", 0, set(), protocols=[("roundrobin", sub(["t1"]))])
    refused = odd.join().value
    assert refused.error == E.inconsistent_group_protocol
    wrong_type = Reply()
    cl.cg.classic_join("g", "", None, "c", "/h", 60000, 10000, "connect", [("range", sub(["t1"]))], 9,
                       wrong_type, IMAGE)
    assert wrong_type.value.error == E.inconsistent_group_protocol
    both = Classic(cl, "", 0, set(), protocols=[("roundrobin", sub(["t1"])), ("range", sub(["t1"]))])
    first = both.join().value
    assert first.error == E.member_id_required
    both.member_id = first.member_id
    assert both.join().value.error == E.none


def test_classic_static_member_replacing_the_last_consumer_member_downgrades_without_rebalance():
    cl = Cluster()
    classics, new = mixed_group(cl, static_new="instance-n")
    group = cl.cg.groups["g"]
    epoch = group.group_epoch
    target = set(group.target["new"].get(T1, ()))
    assert target
    newcomer = Classic(cl, "", 0, set(), instance_id="instance-n")
    joined = newcomer.join().value
    assert joined.error == E.none and joined.generation_id == epoch
    assert not cl.cg.owns("g")
    classic = cl.h.coordinator.group("g")
    assert classic.state.value == "Stable" and classic.generation_id == epoch
    assert set(classic.members) == {c.member_id for c in classics} | {joined.member_id}
    assert classic.static_members == {"instance-n": joined.member_id}
    newcomer.member_id = joined.member_id
    newcomer.sync(joined.generation_id)
    assert newcomer.owned == target  # its predecessor's partitions, no rebalance
    assert all(c.heartbeat() == E.none for c in classics + [newcomer])
    # the one that was replaced finds no consumer group (Kafka: "Group g is not a consumer group")
    assert cl.beat("new", new.epoch, owned=new.owned, instance="instance-n").error == E.group_id_not_found


def test_classic_leave_of_a_mixed_group_never_downgrades():
    cl = Cluster()
    classics, new = mixed_group(cl)
    left = cl.cg.classic_leave("g", [LeavingMember(classics[0].member_id)])
    assert left.error == E.none
    assert cl.cg.owns("g")  # the consumer-protocol member is still there
    settle(cl, classics[1:], new)
    assert sorted(check_no_double_ownership(classics[1:], new)) == list(range(6))


def test_migration_policy_config():
    from core.config import BrokerConfig, ConfigError
    assert ConsumerGroupConfig().migration_policy == "bidirectional"  # Kafka 4.0's default
    config = BrokerConfig.from_sources({"group.consumer.migration.policy": "DOWNGRADE"})
    assert ConsumerGroupConfig.from_broker_config(config).migration_policy == "downgrade"
    with pytest.raises(ConfigError):
        BrokerConfig.from_sources({"group.consumer.migration.policy": "sideways"})
    assert range_protocols()  # (the harness's classic protocols are "range")
