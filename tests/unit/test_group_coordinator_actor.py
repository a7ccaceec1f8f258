"""actors/group_coordinator.py without Ray: the actor class driven on an
asyncio loop against a real partition (cluster.partition.Partition over a
storage.log.Log) posing as the leader replica actor. Loading from the log,
appends in call order, elect/resign with epochs, state surviving a move."""
from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from actors.group_coordinator import OFFSETS_TOPIC, GroupCoordinatorActor, offsets_topic_spec
from cluster.groups import partition_for_group
from cluster.groups.consumer_protocol import encode_assignment, encode_subscription
from cluster.groups.records import OffsetCommitKey, OffsetCommitValue, decode_key, offset_commit_record
from core.config import BrokerConfig
from core.group_messages import (DescribeGroups, Heartbeat, JoinGroup, OffsetCommit, OffsetFetch, OffsetToCommit,
                                 SyncGroup)
from storage.records import iter_records
from tests.unit.coordinator_fakes import BROKER, FakePurgatory, FakeReplica, make_partition
from tests.unit.coordinator_fakes import make_replica as make_offsets_replica

E = ErrorCode
PARTITIONS = 3


def make_replica(tmp_path, p: int, epoch: int = 0) -> FakeReplica:
    return make_offsets_replica(tmp_path, OFFSETS_TOPIC, p, epoch)


def make_actor(p: int) -> GroupCoordinatorActor:
    config = BrokerConfig.from_sources(overrides=[("group.initial.rebalance.delay.ms", "0")]).as_dict()
    return GroupCoordinatorActor(p, BROKER, PARTITIONS, config)


def group_on(p: int, prefix: str = "g") -> str:
    return next(f"{prefix}{i}" for i in range(1000) if partition_for_group(f"{prefix}{i}", PARTITIONS) == p)


async def wait_active(actor: GroupCoordinatorActor, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (await actor.state())["status"] != "active":
        assert time.monotonic() < deadline, "coordinator did not load"
        await asyncio.sleep(0.01)


async def form_group(actor: GroupCoordinatorActor, group: str, topic: str = "t") -> tuple[str, int]:
    """One member (JoinGroup v3: no KIP-394 round trip), synced; -> (member id, generation)."""
    joined = await actor.join_group(JoinGroup(group, "", None, "client", "/127.0.0.1", 10_000, 6000, "consumer",
                                              [("range", encode_subscription([topic]))], 3))
    assert joined.error == E.none, joined
    synced = await actor.sync_group(SyncGroup(group, joined.generation_id, joined.member_id, None, None, None,
                                              {joined.member_id: encode_assignment({topic: [0, 1]})}))
    assert synced.error == E.none
    return joined.member_id, joined.generation_id


def commit(actor: GroupCoordinatorActor, group: str, member: str, instance, generation: int, offsets: dict):
    """OffsetCommit of {(topic, partition): (offset, leader epoch, metadata, expiry)}."""
    return actor.commit_offsets(OffsetCommit(group, member, instance, generation,
                                             {tp: OffsetToCommit(*o) for tp, o in offsets.items()}))


def fetch(actor: GroupCoordinatorActor, group: str, partitions):
    return actor.fetch_offsets(OffsetFetch(group, partitions))


def committed_keys(replica: FakeReplica) -> list:
    log = replica.partition.log
    data = log.read_bytes(log.log_start_offset, 1 << 24, None, min_one_batch=True)
    return [decode_key(bytes(r.key)) for r in iter_records(data)]


def test_load_serve_and_move_keeps_groups_and_offsets(tmp_path):
    p = 1
    group = group_on(p)

    async def scenario():
        replica = make_replica(tmp_path, p)
        first = make_actor(p)
        assert await first.elect(0, replica) == 0
        await wait_active(first)
        member, generation = await form_group(first, group)
        answer = await commit(first, group, member, None, generation, {("t", 0): (42, 3, "m", None),
                                                                              ("t", 1): (7, -1, None, None)})
        assert {tuple(k): v for k, v in answer.items()} == {("t", 0): E.none, ("t", 1): E.none}
        before = await first.snapshot()

        # Leadership moves: the old coordinator unloads, a new one loads the same log.
        assert await first.resign(1) == 0
        assert (await first.heartbeat(Heartbeat(group, member, None, generation))) == E.not_coordinator
        second = make_actor(p)
        assert await second.elect(1, replica) == 0
        replica.partition.make_leader(1, 1, [BROKER], [BROKER])
        await wait_active(second)
        after = await second.snapshot()
        # The state timestamp is the one the record was written with (as in
        # Kafka: the group turned Stable a moment after that).
        for snap in (before, after):
            assert abs(snap[group].pop("current_state_timestamp") - time.time() * 1000) < 60_000
        assert after == before
        fetched = await fetch(second, group, [("t", 0), ("t", 1), ("t", 2)])
        assert fetched.error == E.none
        assert {tuple(k): (v.offset, v.leader_epoch, v.metadata) for k, v in fetched.partitions.items()} == {
            ("t", 0): (42, 3, "m"), ("t", 1): (7, -1, ""), ("t", 2): (-1, -1, "")}
        # The loaded member keeps its session and generation.
        assert await second.heartbeat(Heartbeat(group, member, None, generation)) == E.none
        described = (await second.describe_groups(DescribeGroups([group])))[0]
        assert described.state == "Stable" and [m.member_id for m in described.members] == [member]

    asyncio.run(scenario())


def test_groups_of_other_partitions_are_not_ours(tmp_path):
    async def scenario():
        actor = make_actor(0)
        replica = make_replica(tmp_path, 0)
        foreign = group_on(2)
        # Before election: nothing is ours.
        assert await actor.heartbeat(Heartbeat(group_on(0), "m", None, 1)) == E.not_coordinator
        await actor.elect(0, replica)
        await wait_active(actor)
        assert await actor.heartbeat(Heartbeat(foreign, "m", None, 1)) == E.not_coordinator
        assert (await actor.list_groups()) == (E.none, [])

    asyncio.run(scenario())


def test_appends_reach_the_log_in_call_order(tmp_path):
    p = 2
    group = group_on(p)

    async def scenario():
        replica = make_replica(tmp_path, p)
        actor = make_actor(p)
        await actor.elect(0, replica)
        await wait_active(actor)
        # Standalone commits (generation -1), issued together: many share one append call.
        answers = await asyncio.gather(*(commit(actor, group, "", None, -1, {("t", i % 4): (i, -1, "", None)})
                                         for i in range(40)))
        assert all(v == E.none for a in answers for v in a.values())
        keys = committed_keys(replica)
        assert [k.partition for k in keys if isinstance(k, OffsetCommitKey)] == [i % 4 for i in range(40)]
        fetched = await fetch(actor, group, None)
        assert {k.partition: v.offset for k, v in fetched.partitions.items()} == {0: 36, 1: 37, 2: 38, 3: 39}
        assert (await actor.state())["append_calls"] < 40

    asyncio.run(scenario())


def test_epochs_fence_and_same_leader_keeps_state(tmp_path):
    p = 0
    group = group_on(p)

    async def scenario():
        replica = make_replica(tmp_path, p, epoch=3)
        actor = make_actor(p)
        await actor.elect(3, replica)
        await wait_active(actor)
        member, generation = await form_group(actor, group)
        assert await actor.elect(2, replica) == E.fenced_leader_epoch
        # Same leader, new epoch, nobody else wrote: no reload (the loaded counter stays).
        replica.partition.make_leader(1, 4, [BROKER], [BROKER])
        assert await actor.elect(4, replica) == 0
        assert (await actor.state())["status"] == "active"
        assert await actor.heartbeat(Heartbeat(group, member, None, generation)) == E.none
        answer = await commit(actor, group, member, None, generation, {("t", 0): (5, -1, "", None)})
        assert list(answer.values()) == [E.none]
        # Another writer appended while we were not looking: reload from the log.
        other = make_actor(p)
        other.state_log.lead(4, replica)
        other._ensure()
        done = asyncio.get_running_loop().create_future()
        other._append_records([offset_commit_record(group, "t", 3, OffsetCommitValue(99))]).add_callback(
            done.set_result)
        assert await done == E.none
        replica.partition.make_leader(1, 5, [BROKER], [BROKER])
        await actor.elect(5, replica)
        await wait_active(actor)
        fetched = await fetch(actor, group, [("t", 0), ("t", 3)])
        assert {k.partition: v.offset for k, v in fetched.partitions.items()} == {0: 5, 3: 99}
        # Resign: everything answers NOT_COORDINATOR, appends fail.
        await actor.resign(6)
        assert await actor.heartbeat(Heartbeat(group, member, None, generation)) == E.not_coordinator
        answer = await commit(actor, group, member, None, generation, {("t", 0): (6, -1, "", None)})
        assert list(answer.values()) == [E.not_coordinator]

    asyncio.run(scenario())


def test_offsets_topic_spec_caps_replication_and_is_compacted():
    config = BrokerConfig.from_sources()
    spec = offsets_topic_spec(config, live_brokers=1)
    assert spec.name == OFFSETS_TOPIC and spec.replication_factor == 1
    assert spec.num_partitions == config["offsets.topic.num.partitions"]
    assert spec.configs["cleanup.policy"] == "compact"
    assert spec.configs["segment.bytes"] == str(100 * 1024 * 1024)
    assert offsets_topic_spec(config, live_brokers=5).replication_factor == 3


def test_appends_wait_for_the_high_watermark(tmp_path):
    """acks=-1: with a follower in the ISR a commit is answered once the HW
    passes it (the purgatory's DelayedProduce), else REQUEST_TIMED_OUT."""
    p = 1
    group = group_on(p)

    async def scenario():
        replica = FakeReplica(make_partition(tmp_path, OFFSETS_TOPIC, p, isr=(BROKER, 2)))
        actor = make_actor(p)
        await actor.elect(0, replica)
        await wait_active(actor)
        actor.node_calls.purgatory = FakePurgatory(replica, 2, catch_up=True)
        answer = await commit(actor, group, "", None, -1, {("t", 0): (1, -1, "", None)})
        assert list(answer.values()) == [E.none]
        [(required, timeout_ms)] = actor.node_calls.purgatory.calls
        assert required == [(OFFSETS_TOPIC, p, 1)] and timeout_ms == 5000
        actor.node_calls.purgatory = FakePurgatory(replica, 2, catch_up=False)
        answer = await commit(actor, group, "", None, -1, {("t", 0): (2, -1, "", None)})
        assert list(answer.values()) == [E.request_timed_out]
        assert (await fetch(actor, group, [("t", 0)])).partitions[("t", 0)].offset == 1

    asyncio.run(scenario())


def test_consumer_heartbeat_asks_for_the_topics_image_it_does_not_hold(tmp_path):
    """The edge sends a reference to its topics image while the coordinator
    holds that version; a coordinator without it (here: a new one) answers
    TopicsImageWanted before doing anything, and serves the whole image."""
    import uuid

    from cluster.groups.consumer import ConsumerHeartbeat, TopicsImage, TopicsImageWanted

    p = 2
    group = group_on(p, "kip848-")
    topic_id = uuid.UUID(int=7)
    whole = TopicsImage(3, (("t", topic_id, 2),), source="edge-1")
    reference = TopicsImage(3, None, source="edge-1")

    async def scenario():
        actor = make_actor(p)
        assert await actor.elect(0, make_replica(tmp_path, p)) == 0
        await wait_active(actor)
        join = ConsumerHeartbeat(group, "m1", 0, rebalance_timeout_ms=30000, subscribed_topic_names=("t",),
                                 owned=(), client_id="c", client_host="/h")
        assert await actor.consumer_group_heartbeat(join, reference) == TopicsImageWanted(-1)
        assert not actor.consumer_groups.owns(group)  # nothing was done
        joined = await actor.consumer_group_heartbeat(join, whole)
        assert joined.error == E.none and joined.assignment == ((topic_id, (0, 1)),), joined
        again = ConsumerHeartbeat(group, "m1", joined.member_epoch, owned=((topic_id, (0, 1)),))
        beat = await actor.consumer_group_heartbeat(again, reference)
        assert beat.error == E.none and beat.member_epoch == joined.member_epoch
        # A classic JoinGroup for the consumer group: the same rule.
        wanted = await actor.join_group(JoinGroup(group, "", None, "c", "/h", 30000, 10000, "consumer",
                                                  [("range", encode_subscription(["t"]))], 9, None),
                                        TopicsImage(4, None, source="edge-1"))
        assert wanted == TopicsImageWanted(3)

    asyncio.run(scenario())
