"""KIP-848 consumer groups without Ray: the assignors, the records, and the
coordinator's heartbeats driven on a manual clock (reconciliation never
gives a partition to two members; epochs fence; static members; sessions;
reload from the records)."""
from __future__ import annotations

import uuid
from typing import Optional

import pytest

from cluster.groups.consumer import records as R
from cluster.groups.consumer.api import ConsumerHeartbeat, TopicsImage
from cluster.groups.consumer.assignors import AssignmentSpec, RangeAssignor, UniformAssignor
from cluster.groups.consumer.coordinator import ConsumerGroupConfig, ConsumerGroupCoordinator, to_assignment
from cluster.groups.consumer.model import MemberState
from core.error_codes import ErrorCode
from tests.unit.test_group_support import Harness, Reply

E = ErrorCode
T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
IMAGE = TopicsImage(1, (("t1", T1, 6), ("t2", T2, 3)))


def test_uniform_balances_and_sticks():
    spec = AssignmentSpec({"a": frozenset({T1}), "b": frozenset({T1}), "c": frozenset({T1})}, {T1: 6}, {})
    first = UniformAssignor().assign(spec)
    assert sorted(len(a[T1]) for a in first.values()) == [2, 2, 2]
    spec = AssignmentSpec({m: frozenset({T1}) for m in "abcd"}, {T1: 6}, first)
    second = UniformAssignor().assign(spec)
    assert sorted(len(a.get(T1, ())) for a in second.values()) == [1, 1, 2, 2]
    moved = sum(len(first[m][T1] - second[m].get(T1, frozenset())) for m in "abc")
    assert moved == 1  # only what the newcomer needs
    every = [p for a in second.values() for p in a.get(T1, ())]
    assert sorted(every) == list(range(6))


def test_uniform_heterogeneous_and_range():
    spec = AssignmentSpec({"a": frozenset({T1, T2}), "b": frozenset({T2})}, {T1: 6, T2: 3}, {})
    out = UniformAssignor().assign(spec)
    assert out["b"] == {T2: frozenset({0, 1, 2})} or len(out["b"][T2]) >= 2
    assert sum(len(ps) for a in out.values() for ps in a.values()) == 9
    out = RangeAssignor().assign(AssignmentSpec({"a": frozenset({T1}), "b": frozenset({T1})}, {T1: 5}, {}))
    assert out == {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4})}}


def test_records_round_trip():
    values = [
        (R.GROUP_METADATA, None, R.GroupMetadataValue(7)),
        (R.PARTITION_METADATA, None, R.PartitionMetadataValue((R.TopicMetadata(T1, "t1", 6),), 7)),
        (R.MEMBER_METADATA, "m", R.MemberMetadataValue("i", None, "c", "/h", ("t1",), "t.*", 300, "uniform",
                                                        (("range", b"\x00\x01"),))),
        (R.MEMBER_METADATA, "m", R.MemberMetadataValue(None, None, "c", "/h", ("t1",), None, 300, None)),
        (R.TARGET_ASSIGNMENT_METADATA, None, R.TargetAssignmentMetadataValue(7)),
        (R.TARGET_ASSIGNMENT_MEMBER, "m", R.TargetAssignmentMemberValue({T1: frozenset({1, 2})})),
        (R.CURRENT_MEMBER_ASSIGNMENT, "m", R.CurrentMemberAssignmentValue(7, 6, 1, {T1: frozenset({1})},
                                                                          {T2: frozenset({0})})),
    ]
    for record_type, member, value in values:
        key, data = R.record(record_type, "g", member, value)
        assert R.decode_key(key) == R.ConsumerGroupKey(record_type, "g", member)
        assert R.decode_value(record_type, data) == value
    # the layout Kafka writes: int16 type, then the non-flexible key fields
    assert R.encode_key(R.ConsumerGroupKey(R.GROUP_METADATA, "g")) == b"\x00\x03\x00\x01g"
    assert R.encode_value(R.GroupMetadataValue(5)) == b"\x00\x00\x00\x00\x00\x05\x00"


class Cluster:
    """A ConsumerGroupCoordinator beside a classic one on the harness log."""

    def __init__(self, config: Optional[ConsumerGroupConfig] = None) -> None:
        self.h = Harness()
        self.cg = ConsumerGroupCoordinator(self.h.coordinator, self.h.timer, self.h.append,
                                           config or ConsumerGroupConfig(heartbeat_interval_ms=100,
                                                                         session_timeout_ms=3000))

    def beat(self, member_id: str, epoch: int, *, owned=None, topics=None, regex=None, instance=None,
             group="g", image=IMAGE, assignor=None):
        reply = Reply()
        wire_owned = None if owned is None else tuple((t, tuple(ps)) for t, ps in owned.items())
        self.cg.heartbeat(ConsumerHeartbeat(group, member_id, epoch, instance_id=instance,
                                            rebalance_timeout_ms=60000 if epoch == 0 else -1,
                                            subscribed_topic_names=topics, subscribed_topic_regex=regex,
                                            server_assignor=assignor,
                                            owned=wire_owned if epoch != 0 else (), client_id="c",
                                            client_host="/h"), image, reply)
        return reply.value


class Client:
    """What a consumer believes it owns; it follows the answers as librdkafka does."""

    def __init__(self, cluster: Cluster, member_id: str, topics=("t1",), instance=None) -> None:
        self.cluster, self.member_id, self.topics, self.instance = cluster, member_id, topics, instance
        self.epoch = 0
        self.owned: dict = {}

    def beat(self):
        result = self.cluster.beat(self.member_id, self.epoch, owned=self.owned,
                                   topics=self.topics if self.epoch == 0 else None, instance=self.instance)
        assert result.error == E.none, result
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = to_assignment(result.assignment)  # revoke what is gone, take what is new
        return result


def owners(clients) -> dict:
    seen = {}
    for c in clients:
        for t, ps in c.owned.items():
            for p in ps:
                assert (t, p) not in seen, f"{t}-{p} owned by {seen[(t, p)]} and {c.member_id}"
                seen[(t, p)] = c.member_id
    return seen


def run_rounds(clients, rounds=10):
    for _ in range(rounds):
        for c in clients:
            c.beat()
            owners(clients)


def test_join_reconcile_no_double_ownership():
    cl = Cluster()
    clients = [Client(cl, f"m{i}") for i in range(3)]
    run_rounds(clients)
    assert len(owners(clients)) == 6 and all(len(c.owned[T1]) == 2 for c in clients)
    group = cl.cg.groups["g"]
    assert group.state.value == "Stable"
    newcomer = Client(cl, "m3")
    clients.append(newcomer)
    run_rounds(clients)
    assert len(owners(clients)) == 6 and sorted(len(c.owned.get(T1, ())) for c in clients) == [1, 1, 2, 2]
    assert group.state.value == "Stable"
    # m0 leaves
    leave = cl.beat("m0", -1)
    assert leave.error == E.none and leave.member_epoch == -1
    clients = clients[1:]
    run_rounds(clients)
    assert len(owners(clients)) == 6 and all(len(c.owned[T1]) == 2 for c in clients)


def test_epochs_fence_and_errors():
    cl = Cluster()
    a = Client(cl, "a")
    a.beat()
    assert cl.beat("a", a.epoch + 5, owned=a.owned).error == E.fenced_member_epoch
    assert cl.beat("zzz", 3, owned={}).error == E.unknown_member_id
    assert cl.beat("b", 0, topics=("t1",), assignor="sticky").error == E.unsupported_assignor
    assert cl.beat("b", 0, regex="(").error == E.invalid_regular_expression
    assert cl.beat("", 0, topics=("t1",)).error == E.invalid_request
    # a lost answer: the previous epoch is accepted while it owns nothing new
    b = Client(cl, "b")
    b.beat()
    run_rounds([a, b])
    member = cl.cg.groups["g"].members["a"]
    assert cl.beat("a", member.previous_member_epoch, owned=a.owned).error == E.none


def test_session_timeout_fences_member():
    cl = Cluster()
    a, b = Client(cl, "a"), Client(cl, "b")
    run_rounds([a, b])
    for _ in range(40):  # only b keeps heartbeating
        cl.h.advance(100)
        b.beat()
    assert "a" not in cl.cg.groups["g"].members
    assert b.owned == {T1: frozenset(range(6))}


def test_static_member_replaced_without_rebalance():
    cl = Cluster()
    a, b = Client(cl, "a", instance="ia"), Client(cl, "b", instance="ib")
    run_rounds([a, b])
    epoch = cl.cg.groups["g"].group_epoch
    assert cl.beat("a2", 0, topics=("t1",), instance="ia").error == E.unreleased_instance_id
    left = cl.beat("a", -2, instance="ia")
    assert left.member_epoch == -2
    again = cl.beat("a2", 0, topics=("t1",), instance="ia")
    assert again.error == E.none and to_assignment(again.assignment) == a.owned
    assert cl.cg.groups["g"].group_epoch == epoch
    assert cl.beat("a", 5, owned={}, instance="ia").error == E.fenced_instance_id


def test_regex_subscription_evaluated_by_the_coordinator():
    cl = Cluster()
    result = cl.beat("a", 0, regex="t.*")
    assignment = to_assignment(result.assignment)
    assert assignment == {T1: frozenset(range(6)), T2: frozenset(range(3))}
    # a new topic matching the regex joins the subscription on the next heartbeat
    t3 = uuid.UUID(int=3)
    image = TopicsImage(2, IMAGE.topics + (("t3", t3, 2),))
    result = cl.beat("a", result.member_epoch, owned=assignment, image=image)
    assert to_assignment(result.assignment)[t3] == frozenset({0, 1})


def test_reload_keeps_groups():
    cl = Cluster()
    clients = [Client(cl, f"m{i}") for i in range(3)]
    run_rounds(clients)
    before = cl.cg.groups["g"]
    reloaded = Cluster()
    reloaded.h.coordinator.manager.other_records = reloaded.cg.replay
    reloaded.h.coordinator.begin_loading()
    reloaded.cg.begin_loading()
    reloaded.h.coordinator.replay(cl.h.log)
    reloaded.h.coordinator.complete_loading()
    reloaded.cg.complete_loading()
    after = reloaded.cg.groups["g"]
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.members == before.members and after.target == before.target
    for c in clients:
        c.cluster = reloaded
    run_rounds(clients)  # members carry on with their epochs
    assert len(owners(clients)) == 6


def test_offsets_with_member_epoch_and_admin():
    from cluster.groups import PartitionCommit, TopicPartition
    cl = Cluster()
    a = Client(cl, "a")
    run_rounds([a])
    reply = Reply()
    commit = {TopicPartition("t1", 0): PartitionCommit(offset=5)}
    assert cl.cg.commit_offsets("g", "a", None, a.epoch, commit, reply, api_version=9)
    assert reply.value == {TopicPartition("t1", 0): E.none}
    reply = Reply()
    cl.cg.commit_offsets("g", "a", None, a.epoch + 1, commit, reply, api_version=9)
    assert reply.value == {TopicPartition("t1", 0): E.stale_member_epoch}
    assert cl.cg.validate_fetch("g", None, -1) is None
    assert cl.cg.validate_fetch("g", "a", a.epoch) is None
    assert cl.cg.validate_fetch("g", "a", a.epoch + 1) == E.stale_member_epoch
    assert cl.cg.validate_fetch("g", "nobody", 3) == E.unknown_member_id
    # An older epoch (KIP-1251): accepted for partitions the member has held
    # since that epoch or before, stale for any other.
    first_epoch = a.epoch
    b = Client(cl, "b")
    run_rounds([a, b])
    group = cl.cg.groups["g"]
    assert a.epoch > first_epoch
    kept = next(p for p in range(6) if group.holder(T1, p) == "a")
    theirs = next(p for p in range(6) if group.holder(T1, p) == "b")

    def commit_at(epoch, partition, producer=None):
        reply = Reply()
        cl.cg.commit_offsets("g", "a", None, epoch, {TopicPartition("t1", partition): PartitionCommit(offset=5)},
                             reply, api_version=9, producer=producer)
        return reply.value[TopicPartition("t1", partition)]

    assert commit_at(first_epoch, kept) == E.none  # a commit that raced the epoch bump
    assert commit_at(first_epoch - 1, kept) == E.stale_member_epoch  # from before it got the partition
    assert commit_at(first_epoch, theirs) == E.stale_member_epoch  # someone else's
    cl.beat("b", -1)
    second_epoch = a.epoch
    run_rounds([a])
    assert group.holder(T1, theirs) == "a" and a.epoch > second_epoch
    # the partition came (back) to it at the newest epoch: a zombie commit of an older epoch is fenced
    assert commit_at(second_epoch, theirs) == E.stale_member_epoch
    assert commit_at(a.epoch, theirs) == E.none
    from cluster.groups import TxnProducer
    assert commit_at(first_epoch - 1, kept, TxnProducer(1, 0)) == E.illegal_generation  # TxnOffsetCommit's code
    commit_at(a.epoch, 0)
    fetched = cl.h.coordinator.fetch_offsets("g", [TopicPartition("t1", 0)])
    assert fetched.partitions[TopicPartition("t1", 0)].offset == 5
    [listing] = cl.cg.listings()
    assert (listing.group_type, listing.protocol_type, listing.state) == ("consumer", "consumer", "Stable")
    assert cl.cg.delete_groups(["g"]) == {"g": E.non_empty_group}
    assert cl.cg.subscribed_topics("g") == {"t1"}  # OffsetDelete keeps these (GROUP_SUBSCRIBED_TO_TOPIC)
    cl.beat("a", -1)
    assert cl.cg.delete_groups(["g"]) == {"g": E.none}
    [described] = cl.cg.describe(["g"])
    assert described.error == E.group_id_not_found


# ---- mixed groups: classic members in a consumer group, online upgrade -------------------------------

class ClassicClient:
    """An eager classic consumer (range) driven through the consumer group's classic APIs."""

    def __init__(self, cluster: Cluster, member_id: str, generation: int, owned: dict) -> None:
        self.cluster, self.member_id, self.generation, self.owned = cluster, member_id, generation, owned

    def heartbeat(self):
        return self.cluster.cg.classic_heartbeat("g", self.member_id, None, self.generation)

    def rejoin(self):
        from cluster.groups.consumer_protocol import encode_subscription
        from cli.groups import decode_assignment

        self.owned = {}  # eager: everything is revoked before joining
        reply = Reply()
        self.cluster.cg.classic_join("g", self.member_id, None, "c", "/h", 60000, 10000, "consumer",
                                     [("range", encode_subscription(["t1"]))], 9, reply, IMAGE)
        joined = reply.value
        assert joined.error == E.none and joined.leader_id == "" and not joined.members, joined
        self.generation = joined.generation_id
        synced = self.cluster.cg.classic_sync("g", self.generation, self.member_id, None, "consumer", "range")
        assert synced.error == E.none, synced
        self.owned = {T1: frozenset(decode_assignment(synced.assignment).get("t1", ()))}
        self.owned = {t: ps for t, ps in self.owned.items() if ps}


def test_online_upgrade_classic_and_consumer_members_share_a_group():
    cl = Cluster()
    h = cl.h
    results = h.form_group("g", 2)  # classic: each member has one partition of t1
    classic_group = h.coordinator.group("g")
    generation = classic_group.generation_id
    classics = [ClassicClient(cl, r.member_id, r.generation_id, {T1: frozenset({i})})
                for i, r in enumerate(sorted(results, key=lambda r: r.member_id))]
    # the classic members own what the leader assigned
    from cli.groups import decode_assignment
    for c in classics:
        c.owned = {T1: frozenset(decode_assignment(classic_group.members[c.member_id].assignment)["t1"])}
    new = Client(cl, "new")
    first = new.beat()  # converts the group
    group = cl.cg.groups["g"]
    assert group.group_epoch == generation + 1 and set(group.members) == {c.member_id for c in classics} | {"new"}
    assert h.coordinator.group("g").size == 0  # the classic group is now only the holder of offsets
    assert first.error == E.none
    everyone = classics + [new]

    def check():
        seen = {}
        for c in everyone:
            for t, ps in c.owned.items():
                for p in ps:
                    assert (t, p) not in seen, f"{p} owned by {seen[(t, p)]} and {c.member_id}"
                    seen[(t, p)] = c.member_id
        return seen

    for _ in range(8):
        for c in classics:
            if c.heartbeat() == E.rebalance_in_progress:
                c.rejoin()
            check()
        new.beat()
        check()
    assert len(check()) == 6 and all(len(c.owned.get(T1, ())) == 2 for c in everyone)
    assert group.state.value == "Stable"
    # a classic member leaves with LeaveGroup
    from cluster.groups import LeavingMember
    left = cl.cg.classic_leave("g", [LeavingMember(classics[0].member_id)])
    assert left.error == E.none and left.members[0].error == E.none
    everyone = everyone[1:]
    classics = classics[1:]
    for _ in range(8):
        for c in classics:
            if c.heartbeat() == E.rebalance_in_progress:
                c.rejoin()
            check()
        new.beat()
        check()
    assert len(check()) == 6
    # the log replays into the same mixed group
    reloaded = Cluster()
    reloaded.h.coordinator.manager.other_records = reloaded.cg.replay
    reloaded.h.coordinator.begin_loading()
    reloaded.cg.begin_loading()
    reloaded.h.coordinator.replay(h.log)
    reloaded.h.coordinator.complete_loading()
    reloaded.cg.complete_loading()
    assert reloaded.cg.groups["g"].members == group.members
    assert reloaded.h.coordinator.group("g") is not None and reloaded.h.coordinator.group("g").size == 0
