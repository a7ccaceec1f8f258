"""OffsetCommit / OffsetFetch / OffsetDelete / DeleteGroups / ListGroups and
offset expiration."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.groups import GroupConfig, LeavingMember, OffsetFetchPartition, PartitionCommit, TopicPartition
from cluster.groups.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from tests.unit.test_group_support import SESSION_MS, Harness

E = ErrorCode
T0 = TopicPartition("t1", 0)
T1 = TopicPartition("t1", 1)
U0 = TopicPartition("t2", 0)
DAY = 24 * 60 * 60 * 1000


def tombstones(h: Harness) -> list:
    return [decode_key(k) for k, v in h.log if v is None]


# -- commit / fetch ------------------------------------------------------------------


def test_commit_and_fetch_round_trip_with_metadata():
    h = Harness()
    leader, a = h.form_group("g", 2)
    reply = h.commit("g", {
        T0: PartitionCommit(10, leader_epoch=3, metadata="first"),
        T1: PartitionCommit(20, metadata=None),
        U0: PartitionCommit(30, metadata="ünïcødé"),
    }, member_id=a.member_id, generation=1)
    assert reply.value == {T0: E.none, T1: E.none, U0: E.none}

    fetched = h.fetch("g", [T0, T1, U0, TopicPartition("t9", 0)])
    assert fetched.error == E.none
    assert fetched.partitions == {
        T0: OffsetFetchPartition(10, 3, "first"),
        T1: OffsetFetchPartition(20, -1, ""),
        U0: OffsetFetchPartition(30, -1, "ünïcødé"),
        TopicPartition("t9", 0): OffsetFetchPartition(-1, -1, ""),
    }
    # None = all committed partitions
    assert set(h.fetch("g").partitions) == {T0, T1, U0}
    # The records: version 3 values with the coordinator's clock as commit time.
    values = {decode_key(k): decode_offset_commit_value(v) for k, v in h.log if isinstance(decode_key(k), OffsetCommitKey)}
    assert values[OffsetCommitKey("g", "t1", 0)].commit_timestamp == h.clock()
    assert values[OffsetCommitKey("g", "t1", 0)].leader_epoch == 3
    # Unknown group: no offsets, no error.
    assert h.fetch("nope", [T0]).partitions == {T0: OffsetFetchPartition()}
    assert h.fetch("nope").partitions == {}


def test_metadata_size_limit():
    h = Harness(GroupConfig(offset_metadata_max_bytes=4))
    reply = h.commit("g", {T0: PartitionCommit(1, metadata="1234"), T1: PartitionCommit(2, metadata="12345")})
    assert reply.value == {T0: E.none, T1: E.offset_metadata_too_large}
    assert h.fetch("g", [T0, T1]).partitions[T1] == OffsetFetchPartition()
    # Java length: a non-BMP character counts twice.
    assert h.commit("g", {T0: PartitionCommit(1, metadata="ab\U0001F600")}).value == {T0: E.none}
    assert h.commit("g", {T0: PartitionCommit(1, metadata="abc\U0001F600")}).value == {T0: E.offset_metadata_too_large}
    appends = h.append_calls
    everything_too_large = h.commit("g", {T0: PartitionCommit(1, metadata="x" * 5)})
    assert everything_too_large.value == {T0: E.offset_metadata_too_large}
    assert h.append_calls == appends  # nothing written


def test_default_metadata_limit_is_4096():
    h = Harness()
    assert h.commit("g", {T0: PartitionCommit(1, metadata="x" * 4096)}).value == {T0: E.none}
    assert h.commit("g", {T0: PartitionCommit(1, metadata="x" * 4097)}).value == {T0: E.offset_metadata_too_large}


def test_commit_generation_and_membership_rules():
    h = Harness()
    # Unknown group: standalone commits (generation -1) create it; others are stale.
    assert h.commit("simple", {T0: 5}).value == {T0: E.none}
    assert h.state("simple") == "Empty"
    assert h.coordinator.group("simple").protocol_type is None
    assert h.commit("gone", {T0: 5}, member_id="m", generation=3).value == {T0: E.illegal_generation}
    assert h.coordinator.group("gone") is None

    leader, a = h.form_group("g", 2)
    assert h.commit("g", {T0: 1}, member_id=a.member_id, generation=1).value == {T0: E.none}
    assert h.commit("g", {T0: 1}, member_id=a.member_id, generation=0).value == {T0: E.illegal_generation}
    assert h.commit("g", {T0: 1}, member_id="stranger", generation=1).value == {T0: E.unknown_member_id}
    # A standalone commit into a group with members is refused.
    assert h.commit("g", {T0: 1}).value == {T0: E.unknown_member_id}

    # During a rebalance: allowed while preparing (members commit before rejoining)...
    h.join("g", leader.member_id)
    assert h.commit("g", {T0: 2}, member_id=a.member_id, generation=1).value == {T0: E.none}
    # ...but not between JoinGroup and SyncGroup of the new generation.
    rejoin = h.join("g", a.member_id)
    assert rejoin.value.generation_id == 2
    assert h.commit("g", {T0: 3}, member_id=a.member_id, generation=2).value == {T0: E.rebalance_in_progress}
    assert h.fetch("g", [T0]).partitions[T0].offset == 2


def test_commit_answers_after_append_and_require_stable():
    h = Harness(auto_complete=False)
    reply = h.commit("g", {T0: 7})
    assert not reply.done
    assert h.fetch("g", [T0], require_stable=True).partitions[T0].error == E.unstable_offset_commit
    assert h.fetch("g", [T0]).partitions[T0] == OffsetFetchPartition()  # not visible until durable
    h.complete_appends()
    assert reply.value == {T0: E.none}
    assert h.fetch("g", [T0], require_stable=True).partitions[T0] == OffsetFetchPartition(7, -1, "")


def test_failed_commit_append_is_reported_and_not_applied():
    h = Harness(auto_complete=False)
    reply = h.commit("g", {T0: 7})
    h.complete_appends(E.not_leader_or_follower)
    assert reply.value == {T0: E.not_coordinator}
    assert h.fetch("g", [T0], require_stable=True).partitions[T0] == OffsetFetchPartition()
    reply = h.commit("g", {T0: 8})
    h.complete_appends(E.message_too_large)
    assert reply.value == {T0: E.invalid_commit_offset_size}


def test_later_append_wins_whatever_the_completion_order():
    h = Harness(auto_complete=False)
    first = h.commit("g", {T0: 1})
    second = h.commit("g", {T0: 2})
    records, completion = h.pending.pop(1)  # complete the second append first
    h.log.extend(records)
    completion.complete()
    assert h.fetch("g", [T0]).partitions[T0].offset == 2
    h.complete_appends()
    assert first.value == {T0: E.none} and second.value == {T0: E.none}
    assert h.fetch("g", [T0]).partitions[T0].offset == 2


def test_commit_with_explicit_expire_timestamp_writes_v1():
    h = Harness()
    h.commit("g", {T0: PartitionCommit(1, leader_epoch=4, expire_timestamp_ms=h.clock() + 1000)})
    key, value = h.log[-1]
    assert value[:2] == b"\x00\x01"
    assert decode_offset_commit_value(value).expire_timestamp == h.clock() + 1000


def test_commit_during_load_and_after_unload():
    h = Harness(load=False)
    assert h.commit("g", {T0: 1}).value == {T0: E.not_coordinator}
    h.coordinator.begin_loading()
    assert h.commit("g", {T0: 1}).value == {T0: E.coordinator_load_in_progress}
    h.coordinator.complete_loading()
    # The empty group id is allowed for commits and fetches (old clients).
    assert h.commit("", {T0: 1}).value == {T0: E.none}
    assert h.fetch("", [T0]).partitions[T0].offset == 1


# -- OffsetDelete (KIP-496) ----------------------------------------------------------------


def test_offset_delete_rules():
    h = Harness()
    # Empty group: anything goes.
    h.commit("simple", {T0: 1, U0: 2})
    error, partitions = h.coordinator.delete_offsets("simple", [T0])
    assert (error, partitions) == (E.none, {T0: E.none})
    assert OffsetCommitKey("simple", "t1", 0) in tombstones(h)
    assert h.fetch("simple", [T0]).partitions[T0] == OffsetFetchPartition()

    # Consumer group with members: not the topics they subscribe to.
    leader, a = h.form_group("g", 2, topics=["t1"])
    h.commit("g", {T0: 1, T1: 1, U0: 1}, member_id=a.member_id, generation=1)
    error, partitions = h.coordinator.delete_offsets("g", [T0, U0])
    assert error == E.none
    assert partitions == {T0: E.group_subscribed_to_topic, U0: E.none}
    assert set(h.fetch("g").partitions) == {T0, T1}

    # Another protocol type with members: refused as a whole.
    j = h.join_new("connect-group", protocol_type="connect", protocols=[("default", b"\x01")])
    h.advance(h.config.group_initial_rebalance_delay_ms)
    assert j.value.error == E.none
    assert h.coordinator.delete_offsets("connect-group", [T0]) == (E.non_empty_group, {})

    assert h.coordinator.delete_offsets("nope", [T0]) == (E.group_id_not_found, {})
    assert h.coordinator.delete_offsets("", [T0]) == (E.invalid_group_id, {})


def test_offset_delete_of_last_offsets_of_empty_group_removes_it():
    h = Harness()
    h.commit("simple", {T0: 1})
    assert h.coordinator.delete_offsets("simple", [T0]) == (E.none, {T0: E.none})
    assert h.coordinator.group("simple") is None
    # generation 0 never wrote group metadata, so no metadata tombstone
    assert GroupMetadataKey("simple") not in tombstones(h)


def test_offset_delete_drops_a_pending_commit_of_that_partition():
    h = Harness(auto_complete=False)
    h.commit("simple", {U0: 1})
    h.complete_appends()
    reply = h.commit("simple", {T0: 1})
    h.coordinator.delete_offsets("simple", [T0])
    h.complete_appends()  # the commit's record, then the tombstone
    assert reply.value == {T0: E.none}
    assert h.fetch("simple", [T0]).partitions[T0] == OffsetFetchPartition()


# -- DeleteGroups -------------------------------------------------------------------------


def test_delete_groups():
    h = Harness()
    leader, a = h.form_group("busy", 2)
    leader2, = h.form_group("idle", 1)
    h.commit("idle", {T0: 5}, member_id=leader2.member_id, generation=1)
    h.leave("idle", LeavingMember(leader2.member_id))
    assert h.state("idle") == "Empty"
    h.commit("simple", {T0: 1})

    result = h.coordinator.delete_groups(["busy", "idle", "simple", "nope", ""])
    assert result == {
        "busy": E.non_empty_group,
        "idle": E.none,
        "simple": E.none,
        "nope": E.group_id_not_found,
        "": E.group_id_not_found,
    }
    assert h.coordinator.group("idle") is None and h.coordinator.group("simple") is None
    dead = tombstones(h)
    assert OffsetCommitKey("idle", "t1", 0) in dead and GroupMetadataKey("idle") in dead
    assert OffsetCommitKey("simple", "t1", 0) in dead and GroupMetadataKey("simple") not in dead
    assert h.fetch("idle", [T0]).partitions[T0] == OffsetFetchPartition()
    assert h.coordinator.describe_group("idle").state == "Dead"
    assert h.coordinator.delete_groups(["idle"]) == {"idle": E.group_id_not_found}
    # A deleted group id can be used afresh.
    assert h.join("idle").value.error == E.member_id_required


# -- ListGroups (KIP-518) -------------------------------------------------------------------


def test_list_groups_with_state_filter():
    h = Harness()
    h.form_group("stable", 1)
    h.commit("simple", {T0: 1})
    h.join_new("joining")
    listed = lambda states=None: sorted(  # noqa: E731
        (g.group_id, g.protocol_type, g.state) for g in h.coordinator.list_groups(states)[1])
    assert listed() == [
        ("joining", "consumer", "PreparingRebalance"),
        ("simple", "", "Empty"),
        ("stable", "consumer", "Stable"),
    ]
    assert listed(["Stable"]) == [("stable", "consumer", "Stable")]
    assert listed(["empty", "preparingrebalance"]) == [
        ("joining", "consumer", "PreparingRebalance"), ("simple", "", "Empty")]
    assert listed(["Dead"]) == []
    assert listed([]) == listed()


# -- expiration --------------------------------------------------------------------------------


def test_standalone_offsets_expire_by_commit_timestamp():
    h = Harness(GroupConfig(offsets_retention_ms=DAY))
    h.commit("simple", {T0: 1})
    h.clock.advance(DAY // 2)
    h.commit("simple", {T1: 1})
    assert h.coordinator.expire_offsets(h.clock() + DAY // 2 - 1) == 0
    assert h.coordinator.expire_offsets(h.clock() + DAY // 2) == 1  # T0 is a day old
    assert set(h.fetch("simple").partitions) == {T1}
    assert OffsetCommitKey("simple", "t1", 0) in tombstones(h)
    assert h.coordinator.expire_offsets(h.clock() + DAY) == 1
    assert h.coordinator.group("simple") is None  # nothing left: gone


def test_consumer_group_offsets_expire_only_after_group_is_empty_for_retention():
    h = Harness(GroupConfig(offsets_retention_ms=DAY))
    leader, = h.form_group("g", 1, topics=["t1"])
    h.commit("g", {T0: 1, U0: 1}, member_id=leader.member_id, generation=1)
    # Stable: the subscribed topic's offset never expires; an unsubscribed one does.
    assert h.coordinator.expire_offsets(h.clock() + 10 * DAY) == 1
    assert set(h.fetch("g").partitions) == {T0}

    # The group empties much later; retention counts from then, not from the commit.
    h.advance(SESSION_MS - 1)
    assert h.heartbeat("g", leader.member_id, 1) == E.none
    h.clock.advance(2 * DAY)
    h.leave("g", LeavingMember(leader.member_id))
    emptied_at = h.clock()
    assert h.state("g") == "Empty"
    assert h.coordinator.expire_offsets(emptied_at + DAY - 1) == 0
    assert h.coordinator.expire_offsets(emptied_at + DAY) == 1
    assert h.coordinator.group("g") is None
    dead = tombstones(h)
    assert OffsetCommitKey("g", "t1", 0) in dead and GroupMetadataKey("g") in dead


def test_nothing_expires_while_rebalancing_and_subscribed_topics_never_expire():
    h = Harness(GroupConfig(offsets_retention_ms=DAY))
    leader, a = h.form_group("g", 2, topics=["t1"])
    h.commit("g", {U0: 1, T1: PartitionCommit(1, expire_timestamp_ms=h.clock() + 1000)},
             member_id=leader.member_id, generation=1)
    j_leader = h.join("g", leader.member_id)
    assert h.state("g") == "PreparingRebalance"
    assert h.coordinator.expire_offsets(h.clock() + 10 * DAY) == 0
    j_a = h.join("g", a.member_id)
    assert h.state("g") == "CompletingRebalance"
    assert h.coordinator.expire_offsets(h.clock() + 10 * DAY) == 0
    h.sync("g", 2, leader.member_id, {})
    h.sync("g", 2, a.member_id)
    assert h.state("g") == "Stable"
    # Stable: the unsubscribed topic's offset goes; the subscribed one stays,
    # even though its explicit expire timestamp has passed.
    assert h.coordinator.expire_offsets(h.clock() + 10 * DAY) == 1
    assert set(h.fetch("g").partitions) == {T1}
    assert j_leader.value.generation_id == j_a.value.generation_id == 2


def test_explicit_expire_timestamp_of_standalone_commit():
    h = Harness(GroupConfig(offsets_retention_ms=DAY))
    h.commit("simple", {T0: PartitionCommit(1, expire_timestamp_ms=h.clock() + 1000), T1: 1})
    assert h.coordinator.expire_offsets(h.clock() + 999) == 0
    assert h.coordinator.expire_offsets(h.clock() + 1000) == 1
    assert set(h.fetch("simple").partitions) == {T1}


def test_pending_commits_do_not_expire_and_keep_empty_group_alive():
    h = Harness(GroupConfig(offsets_retention_ms=DAY), auto_complete=False)
    reply = h.commit("simple", {T0: 1})
    assert h.coordinator.expire_offsets(h.clock() + 10 * DAY) == 0
    assert h.coordinator.group("simple") is not None
    h.complete_appends()
    assert reply.value == {T0: E.none}


def test_periodic_expiration_on_the_timer():
    h = Harness(GroupConfig(offsets_retention_ms=DAY, offsets_retention_check_interval_ms=60_000),
                expire_offsets_periodically=True, load=False)
    h.coordinator.load([])
    h.commit("simple", {T0: 1})
    h.advance(DAY - 1)
    assert h.fetch("simple", [T0]).partitions[T0].offset == 1
    h.advance(60_000)  # the first sweep at or after a day since the commit
    assert h.fetch("simple", [T0]).partitions[T0] == OffsetFetchPartition()
    h.coordinator.unload()
    assert h.timer.size == 0


# -- what append_records may return ---------------------------------------------------------


def _coordinator_with(append):
    from cluster.groups import GroupCoordinator
    from delayed.clock import ManualClock
    from delayed.timing_wheel import SystemTimer

    clock = ManualClock(1_700_000_000_000)
    coordinator = GroupCoordinator(SystemTimer(clock=clock), append, GroupConfig(), clock,
                                   expire_offsets_periodically=False)
    coordinator.load([])
    return coordinator


def _commit(coordinator, offset):
    from tests.unit.test_group_support import Reply

    reply = Reply()
    coordinator.commit_offsets("g", "", None, -1, {T0: PartitionCommit(offset)}, reply)
    return reply


def test_append_may_return_a_future_none_or_raise():
    import concurrent.futures

    futures = []

    def append_with_futures(records):
        futures.append(concurrent.futures.Future())
        return futures[-1]

    c = _coordinator_with(append_with_futures)
    ok, refused, broken = _commit(c, 1), _commit(c, 2), _commit(c, 3)
    assert not ok.done
    futures[0].set_result(None)                     # None = durable
    futures[1].set_result(E.not_enough_replicas)    # a produce error
    futures[2].set_exception(RuntimeError("actor died"))
    assert ok.value == {T0: E.none}
    assert refused.value == {T0: E.coordinator_not_available}
    assert broken.value == {T0: E.coordinator_not_available}
    assert c.fetch_offsets("g", [T0]).partitions[T0].offset == 1

    # None: the records are already durable.
    assert _commit(_coordinator_with(lambda records: None), 5).value == {T0: E.none}

    def failing_append(records):
        raise RuntimeError("no log")

    c = _coordinator_with(failing_append)
    assert _commit(c, 5).value == {T0: E.coordinator_not_available}
    assert c.fetch_offsets("g", [T0], require_stable=True).partitions[T0] == OffsetFetchPartition()
