"""JoinGroup / SyncGroup / Heartbeat / LeaveGroup: the rebalance protocol,
driven by a ManualClock timer."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.groups import GroupConfig, LeavingMember, TopicPartition
from cluster.groups.consumer_protocol import encode_assignment, encode_subscription
from cluster.groups import CoordinatorStatus
from cluster.groups.records import GroupMetadataKey, decode_group_metadata_value, decode_key, partition_for_group
from tests.unit.test_group_support import REBALANCE_MS, SESSION_MS, Harness, range_protocols

E = ErrorCode
DELAY = 3000  # group.initial.rebalance.delay.ms default


def group_records(h: Harness, group: str = "g"):
    return [decode_group_metadata_value(v) for k, v in h.log
            if v is not None and decode_key(k) == GroupMetadataKey(group)]


# -- the basic flow ---------------------------------------------------------------


def test_three_members_join_sync_and_heartbeat():
    h = Harness()
    # KIP-394: a v4+ client's first join only gets a member id.
    first = h.join("g", api_version=4)
    assert first.value.error == E.member_id_required
    assert first.value.member_id.startswith("client-")
    assert h.state("g") == "Empty"

    subs = [encode_subscription(["t1"]), encode_subscription(["t1", "t2"]), encode_subscription(["t2"])]
    joins = [h.join("g", first.value.member_id, protocols=[("range", subs[0])], api_version=4)]
    for sub in subs[1:]:
        joins.append(h.join_new("g", protocols=[("range", sub)], api_version=4))
    assert h.state("g") == "PreparingRebalance"
    assert not any(j.done for j in joins)

    # The initial delay ran twice (new members arrived during the first).
    h.advance(2 * DELAY)
    results = [j.value for j in joins]
    leader, *followers = results
    assert all(r.error == E.none for r in results)
    assert {r.generation_id for r in results} == {1}
    assert {r.leader_id for r in results} == {leader.member_id}
    assert all(r.protocol_type == "consumer" and r.protocol_name == "range" for r in results)
    # The leader gets everyone's metadata, in join order; followers none.
    assert [(m.member_id, m.metadata) for m in leader.members] == [(r.member_id, s) for r, s in zip(results, subs)]
    assert all(r.members == () for r in followers)
    assert h.state("g") == "CompletingRebalance"

    # Followers sync first and wait for the leader's assignment.
    assignments = {r.member_id: encode_assignment({"t1": [i]}) for i, r in enumerate(results)}
    follower_syncs = [h.sync("g", 1, r.member_id) for r in followers]
    assert not any(s.done for s in follower_syncs)
    leader_sync = h.sync("g", 1, leader.member_id, assignments)
    for r, s in zip(results, [leader_sync] + follower_syncs):
        assert s.value.error == E.none
        assert s.value.assignment == assignments[r.member_id]
        assert s.value.protocol_type == "consumer" and s.value.protocol_name == "range"
    assert h.state("g") == "Stable"

    # What was persisted: generation 1, all members, their assignments.
    [record] = group_records(h)
    assert record.generation == 1 and record.protocol == "range" and record.leader == leader.member_id
    assert [(m.member_id, m.subscription, m.assignment) for m in record.members] == [
        (r.member_id, s, assignments[r.member_id]) for r, s in zip(results, subs)]

    # Heartbeats keep everyone in, well past the session timeout.
    for _ in range(5):
        h.advance(SESSION_MS - 1000)
        assert [h.heartbeat("g", r.member_id, 1) for r in results] == [E.none] * 3
    assert h.state("g") == "Stable"
    assert len(h.coordinator.group("g").members) == 3


def test_member_that_stops_heartbeating_is_removed_and_group_rebalances():
    h = Harness()
    leader, a, b = h.form_group("g", 3)
    # b goes silent.
    h.advance(SESSION_MS // 2)
    assert h.heartbeat("g", leader.member_id, 1) == E.none
    assert h.heartbeat("g", a.member_id, 1) == E.none
    h.advance(SESSION_MS // 2)
    assert h.state("g") == "PreparingRebalance"
    assert not h.coordinator.group("g").has(b.member_id)
    # The others learn of the rebalance from their heartbeats...
    assert h.heartbeat("g", leader.member_id, 1) == E.rebalance_in_progress
    assert h.heartbeat("g", b.member_id, 1) == E.unknown_member_id
    # ... and rejoin; once both have, the join completes with generation 2.
    j1 = h.join("g", leader.member_id)
    assert not j1.done
    j2 = h.join("g", a.member_id)
    assert j1.value.generation_id == j2.value.generation_id == 2
    assert {m.member_id for m in j1.value.members} == {leader.member_id, a.member_id}

    # Old generation: refused everywhere it is checked.
    assert h.sync("g", 1, a.member_id).value.error == E.illegal_generation
    assert h.heartbeat("g", a.member_id, 1) == E.illegal_generation
    assert h.commit("g", {("t1", 0): 1}, member_id=a.member_id, generation=1).value == {
        TopicPartition("t1", 0): E.illegal_generation}
    # The removed member can only start over.
    assert h.sync("g", 2, b.member_id).value.error == E.unknown_member_id
    rejoin = h.join("g", b.member_id)
    assert rejoin.value.error == E.unknown_member_id


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    h = Harness()
    leader, a, b = h.form_group("g", 3)
    # The leader rejoining forces a rebalance.
    j_leader = h.join("g", leader.member_id, rebalance_ms=REBALANCE_MS)
    assert h.state("g") == "PreparingRebalance"
    j_a = h.join("g", a.member_id)
    # b keeps heartbeating but never rejoins.
    for _ in range(REBALANCE_MS // 5000 - 1):
        h.advance(5000)
        assert h.heartbeat("g", b.member_id, 1) == E.rebalance_in_progress
        assert not j_leader.done
    h.advance(5000)
    assert j_leader.value.error == E.none and j_a.value.error == E.none
    assert j_leader.value.generation_id == 2
    assert not h.coordinator.group("g").has(b.member_id)
    assert h.heartbeat("g", b.member_id, 2) == E.unknown_member_id


def test_new_member_joining_stable_group_sends_waiting_syncs_back_to_rejoin():
    h = Harness()
    leader, a = h.form_group("g", 2)
    h.join("g", leader.member_id)
    j_a = h.join("g", a.member_id)
    assert j_a.value.generation_id == 2
    # a syncs, the leader has not yet; a new member arrives.
    waiting = h.sync("g", 2, a.member_id)
    assert not waiting.done
    newcomer = h.join_new("g")
    assert waiting.value.error == E.rebalance_in_progress
    assert h.state("g") == "PreparingRebalance"
    assert not newcomer.done


def test_followers_rejoining_unchanged_get_current_generation_without_rebalance():
    h = Harness()
    leader, a = h.form_group("g", 2)
    again = h.join("g", a.member_id)
    assert again.value.error == E.none and again.value.generation_id == 1 and again.value.members == ()
    assert h.state("g") == "Stable"
    # Changed metadata forces a rebalance though.
    changed = h.join("g", a.member_id, protocols=range_protocols("t9"))
    assert not changed.done
    assert h.state("g") == "PreparingRebalance"


def test_join_during_completing_rebalance_with_same_metadata_is_answered_again():
    h = Harness()
    j1 = h.join_new("g")
    j2 = h.join_new("g")
    h.advance(2 * DELAY)
    leader = j1.value
    again = h.join("g", leader.member_id)
    assert again.value.generation_id == 1
    assert len(again.value.members) == 2  # still the leader
    assert h.state("g") == "CompletingRebalance"


# -- sync errors and persistence ---------------------------------------------------------


def test_sync_errors_where_kafka_returns_them():
    h = Harness()
    assert h.sync("nope", 1, "m").value.error == E.unknown_member_id
    h.join_new("g")
    assert h.sync("g", 0, "stranger").value.error == E.unknown_member_id
    member_id = h.coordinator.group("g").leader_id
    # PreparingRebalance
    assert h.sync("g", 0, member_id).value.error == E.rebalance_in_progress
    h.advance(DELAY)
    assert h.sync("g", 7, member_id).value.error == E.illegal_generation
    assert h.sync("g", 1, member_id, protocol_type="other").value.error == E.inconsistent_group_protocol
    assert h.sync("g", 1, member_id, protocol_name="roundrobin").value.error == E.inconsistent_group_protocol
    ok = h.sync("g", 1, member_id, {member_id: b"x"}, protocol_type="consumer", protocol_name="range")
    assert ok.value.error == E.none and ok.value.assignment == b"x"
    assert h.sync("", 1, member_id).value.error == E.invalid_group_id


def test_assignment_is_persisted_before_anyone_is_answered():
    h = Harness(auto_complete=False)
    j1 = h.join_new("g")
    j2 = h.join_new("g")
    h.advance(2 * DELAY)
    leader, follower = j1.value, j2.value
    f_sync = h.sync("g", 1, follower.member_id)
    l_sync = h.sync("g", 1, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"})
    assert not l_sync.done and not f_sync.done
    assert h.state("g") == "CompletingRebalance"
    assert len(h.pending) == 1
    h.complete_appends()
    assert l_sync.value.assignment == b"L" and f_sync.value.assignment == b"F"
    assert h.state("g") == "Stable"


def test_failed_assignment_write_fails_the_syncs_and_rebalances():
    h = Harness(auto_complete=False)
    j1 = h.join_new("g")
    j2 = h.join_new("g")
    h.advance(2 * DELAY)
    f_sync = h.sync("g", 1, j2.value.member_id)
    l_sync = h.sync("g", 1, j1.value.member_id, {j1.value.member_id: b"L"})
    h.complete_appends(E.request_timed_out)
    # REQUEST_TIMED_OUT from the log becomes COORDINATOR_NOT_AVAILABLE for group clients
    assert l_sync.value.error == E.coordinator_not_available
    assert f_sync.value.error == E.coordinator_not_available
    assert h.state("g") == "PreparingRebalance"


def test_member_missing_from_leader_assignment_gets_empty_one():
    h = Harness()
    j1 = h.join_new("g")
    j2 = h.join_new("g")
    h.advance(2 * DELAY)
    f_sync = h.sync("g", 1, j2.value.member_id)
    h.sync("g", 1, j1.value.member_id, {j1.value.member_id: b"L", "stranger": b"?"})
    assert f_sync.value.error == E.none and f_sync.value.assignment == b""


def test_member_that_never_syncs_is_removed_after_rebalance_timeout():
    h = Harness()
    j1 = h.join_new("g")
    j2 = h.join_new("g")
    h.advance(2 * DELAY)
    leader, follower = j1.value, j2.value
    h.sync("g", 1, leader.member_id, {leader.member_id: b"L"})
    assert h.state("g") == "Stable"
    # The follower got its JoinGroup answer but never sends SyncGroup (it
    # keeps heartbeating, so its session stays alive).
    for _ in range(REBALANCE_MS // 5000):
        h.advance(5000)
        h.heartbeat("g", leader.member_id, 1)
        h.heartbeat("g", follower.member_id, 1)
    assert not h.coordinator.group("g").has(follower.member_id)
    assert h.state("g") == "PreparingRebalance"


# -- initial rebalance delay, max size, KIP-394 details --------------------------------------


def test_initial_rebalance_delay_extends_while_members_keep_arriving():
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    j1 = h.join_new("g")
    h.advance(2000)
    j2 = h.join_new("g")          # arrives during the first delay
    h.advance(999)
    assert not j1.done            # t=2999
    h.advance(1)                  # t=3000: first delay over, but someone new came: wait again
    assert not j1.done
    h.advance(2999)
    assert not j1.done            # t=5999
    h.advance(1)                  # t=6000
    assert j1.value.error == E.none and j2.value.error == E.none
    assert j1.value.generation_id == 1 and len(j1.value.members) == 2


def test_initial_delay_bounded_by_rebalance_timeout():
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    j1 = h.join_new("g", rebalance_ms=4000)
    h.advance(1000)
    h.join_new("g", rebalance_ms=4000)
    h.advance(2000)               # t=3000: remaining = 4000-3000 = 1000 -> one more round of min(3000, 1000)
    assert not j1.done
    h.advance(1000)               # t=4000
    assert j1.value.error == E.none


def test_no_initial_delay_when_configured_zero():
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0))
    j1 = h.join_new("g")
    assert j1.value.error == E.none and j1.value.generation_id == 1


def test_group_max_size():
    h = Harness(GroupConfig(group_max_size=2))
    leader, a = h.form_group("g", 2)
    # Checked before anything else, so even before a member id is handed out.
    third = h.join("g")
    assert third.value.error == E.group_max_size_reached
    assert third.value.member_id == ""
    assert h.state("g") == "Stable"
    # Existing members may still rejoin.
    assert h.join("g", a.member_id).value.error == E.none


def test_group_max_size_counts_rejoined_members_during_rebalance():
    h = Harness(GroupConfig(group_max_size=2))
    j1 = h.join_new("g")
    j2 = h.join_new("g")
    j3 = h.join("g")
    assert j3.value.error == E.group_max_size_reached
    h.advance(2 * DELAY)
    assert j1.value.error == j2.value.error == E.none


def test_member_id_required_only_from_v4():
    h = Harness()
    old = h.join("g", api_version=3)
    assert not old.done
    h.advance(DELAY)
    assert old.value.error == E.none and old.value.member_id.startswith("client-")


def test_pending_member_id_expires_after_session_timeout():
    h = Harness()
    first = h.join("g")
    assert first.value.error == E.member_id_required
    h.advance(SESSION_MS)
    late = h.join("g", first.value.member_id)
    assert late.value.error == E.unknown_member_id


def test_pending_member_holds_up_rebalance_until_it_joins():
    h = Harness()
    leader, = h.form_group("g", 1)
    pending = h.join("g")   # MEMBER_ID_REQUIRED
    j_leader = h.join("g", leader.member_id)
    assert not j_leader.done  # waits for the pending member id to come back
    j_new = h.join("g", pending.value.member_id)
    assert j_leader.value.generation_id == j_new.value.generation_id == 2


def test_join_validation_errors():
    h = Harness(GroupConfig(group_min_session_timeout_ms=6000, group_max_session_timeout_ms=60_000))
    assert h.join("", api_version=3).value.error == E.invalid_group_id
    assert h.join("g", session_ms=5999).value.error == E.invalid_session_timeout
    assert h.join("g", session_ms=60_001).value.error == E.invalid_session_timeout
    assert h.join("unknown", "some-member").value.error == E.unknown_member_id
    assert h.join("g", protocols=[]).value.error == E.inconsistent_group_protocol
    assert h.join("g", protocol_type="").value.error == E.inconsistent_group_protocol


# -- protocol selection ---------------------------------------------------------------------------


def test_protocol_selected_by_votes_of_members():
    h = Harness()
    s = encode_subscription(["t1"])
    j1 = h.join_new("g", protocols=[("range", s), ("roundrobin", s), ("sticky", s)])
    j2 = h.join_new("g", protocols=[("roundrobin", s), ("range", s)])
    j3 = h.join_new("g", protocols=[("sticky", s), ("roundrobin", s), ("range", s)])
    h.advance(2 * DELAY)
    # Candidates (supported by all): range, roundrobin. Votes: range, roundrobin, roundrobin.
    assert {j.value.protocol_name for j in (j1, j2, j3)} == {"roundrobin"}
    assert [m.metadata for m in j1.value.members] == [s, s, s]


def test_joiner_without_a_common_protocol_is_refused():
    h = Harness()
    s = encode_subscription(["t1"])
    h.form_group("g", 2)
    bad = h.join("g", protocols=[("roundrobin", s)])
    assert bad.value.error == E.inconsistent_group_protocol
    other_type = h.join("g", protocol_type="connect", protocols=[("range", s)])
    assert other_type.value.error == E.inconsistent_group_protocol


# -- static membership (KIP-345) ------------------------------------------------------------


def test_static_member_restart_within_session_timeout_keeps_assignment_without_rebalance():
    h = Harness()
    leader, b = h.form_group("g", 2, instance_ids=["inst-a", "inst-b"])
    assert leader.member_id.startswith("inst-a-")  # static ids start with the instance id
    b_assignment = h.coordinator.group("g").get(b.member_id).assignment
    records_before = len(group_records(h))

    h.advance(SESSION_MS // 2)  # restart, well within the session timeout
    h.heartbeat("g", leader.member_id, 1, "inst-a")
    restarted = h.join("g", instance_id="inst-b", api_version=8)
    result = restarted.value
    assert result.error == E.none
    assert result.member_id != b.member_id and result.member_id.startswith("inst-b-")
    assert result.generation_id == 1                  # no rebalance
    assert result.leader_id == leader.member_id
    assert result.members == ()
    assert h.state("g") == "Stable"
    # The new member id was persisted.
    assert len(group_records(h)) == records_before + 1
    assert result.member_id in {m.member_id for m in group_records(h)[-1].members}
    # The restarted member syncs the same generation and gets its old assignment.
    sync = h.sync("g", 1, result.member_id, instance_id="inst-b")
    assert sync.value.error == E.none and sync.value.assignment == b_assignment

    # The previous incarnation is fenced everywhere.
    assert h.heartbeat("g", b.member_id, 1, "inst-b") == E.fenced_instance_id
    assert h.sync("g", 1, b.member_id, instance_id="inst-b").value.error == E.fenced_instance_id
    assert h.join("g", b.member_id, instance_id="inst-b").value.error == E.fenced_instance_id
    assert h.commit("g", {("t1", 0): 1}, member_id=b.member_id, generation=1, instance_id="inst-b").value == {
        TopicPartition("t1", 0): E.fenced_instance_id}
    # The old member id's session timer expires without effect.
    for _ in range(3):
        h.advance(SESSION_MS // 2)
        assert h.heartbeat("g", leader.member_id, 1, "inst-a") == E.none
        assert h.heartbeat("g", result.member_id, 1, "inst-b") == E.none
    assert h.state("g") == "Stable"
    assert h.coordinator.group("g").generation_id == 1


def test_static_leader_restart_v9_is_told_to_skip_assignment():
    h = Harness()
    leader, b = h.form_group("g", 2, instance_ids=["inst-a", "inst-b"])
    restarted = h.join("g", instance_id="inst-a", api_version=9).value
    assert restarted.error == E.none and restarted.generation_id == 1
    assert restarted.leader_id == restarted.member_id
    assert restarted.skip_assignment is True
    assert len(restarted.members) == 2
    # Before v9 the old leader id comes back instead, so it does not assign.
    again = h.join("g", instance_id="inst-a", api_version=8).value
    assert again.leader_id == restarted.member_id != again.member_id
    assert again.skip_assignment is False and again.members == ()


def test_static_member_restart_with_changed_protocol_rebalances():
    h = Harness()
    leader, b = h.form_group("g", 2, instance_ids=["inst-a", "inst-b"])
    s = encode_subscription(["t1"])
    # A protocol no other member supports is refused outright.
    refused = h.join("g", instance_id="inst-b", protocols=[("roundrobin", s)])
    assert refused.value.error == E.inconsistent_group_protocol
    # Make "roundrobin" a common second choice (one rebalance, "range" still wins).
    h.join("g", leader.member_id, instance_id="inst-a", protocols=[("range", s), ("roundrobin", s)])
    h.join("g", b.member_id, instance_id="inst-b", protocols=[("range", s), ("roundrobin", s)])
    j = h.coordinator.group("g")
    assert j.state.value == "CompletingRebalance"
    h.sync("g", 2, j.leader_id, {})
    assert h.state("g") == "Stable"
    # b restarts preferring roundrobin: the vote ties 1:1 and the first
    # protocol to reach the top count ("range", a's vote) stays, so no rebalance...
    restarted = h.join("g", instance_id="inst-b", protocols=[("roundrobin", s), ("range", s)])
    assert restarted.value.generation_id == 2
    assert h.state("g") == "Stable"
    # ... but a restart that swings the vote to roundrobin does rebalance.
    restarted2 = h.join("g", instance_id="inst-a", protocols=[("roundrobin", s), ("range", s)])
    assert not restarted2.done
    assert h.state("g") == "PreparingRebalance"


def test_static_member_not_rejoining_keeps_its_place_through_the_rebalance():
    h = Harness()
    timeouts = dict(session_ms=20_000, rebalance_ms=5000)
    ja = h.join("g", instance_id="inst-a", **timeouts)
    jb = h.join("g", instance_id="inst-b", **timeouts)
    h.advance(5000)  # initial delay, cut short by the 5 s rebalance timeout
    a, b = ja.value, jb.value
    h.sync("g", 1, a.member_id, {}, instance_id="inst-a")
    h.sync("g", 1, b.member_id, instance_id="inst-b")

    j = h.join("g", a.member_id, instance_id="inst-a", **timeouts)
    h.advance(5000)  # t=10000: rebalance timeout; b (static) did not rejoin but is not dropped
    assert j.value.error == E.none and j.value.generation_id == 2
    assert h.coordinator.group("g").has(b.member_id)
    assert [m.member_id for m in j.value.members] == [a.member_id, b.member_id]
    h.sync("g", 2, a.member_id, {}, instance_id="inst-a")
    # But it owes a SyncGroup for generation 2 within the rebalance timeout,
    # static or not.
    h.advance(4999)
    assert h.coordinator.group("g").has(b.member_id)
    h.advance(1)
    assert not h.coordinator.group("g").has(b.member_id)
    assert h.state("g") == "PreparingRebalance"


def test_administrative_leave_by_instance_id_and_batched_leave():
    h = Harness()
    leader, b, c = h.form_group("g", 3, instance_ids=["inst-a", "inst-b", None])
    result = h.leave("g", LeavingMember("", "inst-b"), LeavingMember(c.member_id), LeavingMember("ghost"),
                     LeavingMember("", "inst-ghost"), LeavingMember(leader.member_id, "inst-wrong"))
    assert result.error == E.none
    assert [m.error for m in result.members] == [
        E.none, E.none, E.unknown_member_id, E.unknown_member_id, E.unknown_member_id]
    assert list(h.coordinator.group("g").members) == [leader.member_id]
    assert h.state("g") == "PreparingRebalance"
    assert h.leave("", LeavingMember("x")).error == E.invalid_group_id
    assert [m.error for m in h.leave("nope", LeavingMember("x")).members] == [E.unknown_member_id]


def test_last_member_leaving_empties_group_and_persists_it():
    h = Harness()
    leader, a = h.form_group("g", 2)
    h.leave("g", LeavingMember(a.member_id))
    h.leave("g", LeavingMember(leader.member_id))
    assert h.state("g") == "Empty"
    g = h.coordinator.group("g")
    assert g.generation_id == 2 and g.protocol_name is None and g.leader_id is None
    record = group_records(h)[-1]
    assert (record.generation, record.protocol, record.leader, record.members) == (2, None, None, ())
    assert record.protocol_type == "consumer"
    assert record.current_state_timestamp == h.clock()


# -- coordinator status ----------------------------------------------------------------------------


def test_loading_unloading_and_ownership():
    h = Harness(load=False)
    assert h.join("g").value.error == E.not_coordinator
    h.coordinator.begin_loading()
    assert h.coordinator.status is CoordinatorStatus.LOADING
    assert h.join("g").value.error == E.coordinator_load_in_progress
    assert h.sync("g", 1, "m").value.error == E.rebalance_in_progress  # what Kafka answers while loading
    assert h.heartbeat("g", "m", 1) == E.none
    assert h.fetch("g").error == E.coordinator_load_in_progress
    assert h.coordinator.list_groups() == (E.coordinator_load_in_progress, [])
    h.coordinator.complete_loading()

    waiting = h.join_new("g")
    h.coordinator.unload()
    assert waiting.value.error == E.not_coordinator
    assert h.join("g").value.error == E.not_coordinator
    assert h.heartbeat("g", "m", 1) == E.not_coordinator
    assert h.coordinator.list_groups() == (E.none, [])
    assert h.timer.size == 0  # nothing of ours left on the timer


def test_groups_of_other_partitions_are_not_ours():
    partition = partition_for_group("mine", 50)
    h = Harness(partition=partition)
    other = next(g for g in (f"g{i}" for i in range(100)) if partition_for_group(g, 50) != partition)
    assert h.join(other).value.error == E.not_coordinator
    assert h.join("mine").value.error == E.member_id_required


def test_describe_group():
    h = Harness()
    leader, a = h.form_group("g", 2, instance_ids=["inst-a", None])
    d = h.coordinator.describe_group("g")
    assert (d.error, d.state, d.protocol_type, d.protocol) == (E.none, "Stable", "consumer", "range")
    assert [(m.member_id, m.group_instance_id, m.client_host) for m in d.members] == [
        (leader.member_id, "inst-a", "/10.0.0.1"), (a.member_id, None, "/10.0.0.1")]
    assert d.members[0].metadata == encode_subscription(["t1"])
    assert d.members[0].assignment == encode_assignment({"t1": [0]})
    h.join("g", leader.member_id, instance_id="inst-a")
    d = h.coordinator.describe_group("g")
    assert d.state == "PreparingRebalance" and d.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)
    unknown = h.coordinator.describe_group("nope")
    assert (unknown.error, unknown.state, unknown.members) == (E.none, "Dead", ())


def test_new_member_whose_join_times_out_is_removed():
    h = Harness(GroupConfig(new_member_join_timeout_ms=20_000))
    leader, = h.form_group("g", 1)
    # A member that will never heartbeat: it joins and the leader never rejoins...
    newcomer = h.join_new("g", rebalance_ms=60_000)
    for _ in range(4):
        h.advance(5000)
        h.heartbeat("g", leader.member_id, 1)
    # ...so after the new-member join timeout it is dropped and told to retry.
    assert newcomer.value.error == E.unknown_member_id
