import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from cluster.controller.reassignment import (ReassignmentError, ReplicaAssignment, assignments_from_topic_znode,
                                             build_reassignment, topic_znode_fields, validate_target)

PLAIN = ReplicaAssignment([1, 2, 3])


def test_plain_assignment():
    assert not PLAIN.is_being_reassigned
    assert PLAIN.target_replicas == [1, 2, 3] and PLAIN.original_replicas == [1, 2, 3]
    assert PLAIN.adding == [] and PLAIN.removing == []


def test_disjoint_move():
    moving = PLAIN.reassign_to([4, 5, 6])
    assert moving == ReplicaAssignment([4, 5, 6, 1, 2, 3], adding=[4, 5, 6], removing=[1, 2, 3])
    assert moving.is_being_reassigned
    assert moving.target_replicas == [4, 5, 6]
    assert moving.original_replicas == [1, 2, 3]


def test_overlapping_move():
    moving = PLAIN.reassign_to([3, 4, 1])
    # Full set: the target in its order, then the originals that are leaving.
    assert moving == ReplicaAssignment([3, 4, 1, 2], adding=[4], removing=[2])
    assert moving.target_replicas == [3, 4, 1]
    assert moving.original_replicas == [3, 1, 2]


def test_growing_and_shrinking_the_replication_factor():
    assert PLAIN.reassign_to([1, 2, 3, 4]) == ReplicaAssignment([1, 2, 3, 4], adding=[4], removing=[])
    assert PLAIN.reassign_to([2]) == ReplicaAssignment([2, 1, 3], adding=[], removing=[1, 3])


def test_reordering_only_is_a_plain_assignment():
    reordered = PLAIN.reassign_to([3, 1, 2])
    assert reordered == ReplicaAssignment([3, 1, 2])
    assert not reordered.is_being_reassigned


def test_reassigning_to_the_originals_cancels():
    moving = PLAIN.reassign_to([4, 5, 6])
    assert moving.reassign_to([1, 2, 3]) == PLAIN
    assert moving.cancel() == PLAIN
    assert not moving.cancel().is_being_reassigned


def test_cancel_with_overlap_keeps_the_original_set():
    moving = PLAIN.reassign_to([3, 4])
    cancelled = moving.cancel()
    assert not cancelled.is_being_reassigned
    # As Kafka's reassignTo(originReplicas): the set is restored, in the full set's order.
    assert cancelled.replicas == [3, 1, 2]


def test_cancelling_nothing_is_no_reassignment_in_progress():
    with pytest.raises(ReassignmentError) as info:
        PLAIN.cancel()
    assert info.value.error == ErrorCode.no_reassignment_in_progress
    assert info.value.code == 85
    assert str(info.value) == "No partition reassignment is in progress."


def test_a_new_target_during_a_reassignment_starts_from_the_originals():
    moving = PLAIN.reassign_to([4, 5, 6])
    redirected = moving.reassign_to([1, 7])
    # 4, 5, 6 were never original: they are simply dropped, not "removed".
    assert redirected == ReplicaAssignment([1, 7, 2, 3], adding=[7], removing=[2, 3])
    assert redirected.original_replicas == [1, 2, 3]


def test_is_complete_when_every_target_replica_is_in_isr():
    moving = PLAIN.reassign_to([3, 4, 5])
    assert not moving.is_complete([1, 2, 3])
    assert not moving.is_complete([1, 2, 3, 4])
    assert moving.is_complete([1, 2, 3, 4, 5])
    assert moving.is_complete([5, 4, 3])  # the removing replicas need not be there
    assert PLAIN.is_complete([1, 2, 3]) and not PLAIN.is_complete([1, 2])


def test_remove_replica_from_every_set():
    moving = PLAIN.reassign_to([3, 4])
    assert moving.remove_replica(4) == ReplicaAssignment([3, 1, 2], adding=[], removing=[1, 2])
    assert moving.remove_replica(1) == ReplicaAssignment([3, 4, 2], adding=[4], removing=[2])


def test_values_are_copied_and_immutable():
    replicas = [1, 2]
    assignment = ReplicaAssignment(replicas)
    replicas.append(3)
    assert assignment.replicas == [1, 2]
    with pytest.raises(AttributeError):
        assignment.replicas = [5]  # type: ignore[misc]


@pytest.mark.parametrize("replicas,adding,removing", [
    ([1, 1], [], []),
    ([1, 2], [3], []),
    ([1, 2], [], [3]),
    ([1, 2], [1], [1]),
])
def test_inconsistent_assignments_are_refused(replicas, adding, removing):
    with pytest.raises(ValueError):
        ReplicaAssignment(replicas, adding, removing)


# ---- JSON ------------------------------------------------------------------------------------

def test_partition_json_round_trip():
    moving = PLAIN.reassign_to([3, 4])
    body = moving.to_json()
    assert body == {"replicas": [3, 4, 1, 2], "adding_replicas": [4], "removing_replicas": [1, 2]}
    assert ReplicaAssignment.from_json(json.loads(json.dumps(body))) == moving
    assert ReplicaAssignment.from_json({"replicas": [1, 2, 3]}) == PLAIN


def test_topic_znode_fields_match_kafka_version_2_layout():
    assignments = {0: PLAIN, 1: PLAIN.reassign_to([4, 2]), 10: ReplicaAssignment([5, 6]).reassign_to([5, 6, 7])}
    fields = topic_znode_fields(assignments)
    assert fields == {
        "partitions": {"0": [1, 2, 3], "1": [4, 2, 1, 3], "10": [5, 6, 7]},
        # Kafka writes a partition here only while its set is non-empty.
        "adding_replicas": {"1": [4], "10": [7]},
        "removing_replicas": {"1": [1, 3]},
    }
    znode = json.loads(json.dumps({"version": 3, "topic_id": "x", **fields}))
    assert assignments_from_topic_znode(znode) == assignments


def test_version_1_topic_znode_reads_as_plain_assignments():
    assert assignments_from_topic_znode({"version": 1, "partitions": {"0": [1, 2], "1": [2, 1]}}) == {
        0: ReplicaAssignment([1, 2]), 1: ReplicaAssignment([2, 1])}


# ---- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("target,message", [
    ([], "Empty replica list specified in partition reassignment."),
    ([1, 2, 1], "Duplicate replica ids in partition reassignment replica list: [1, 2, 1]"),
    ([1, -1], "Invalid broker id in replica list: [1, -1]"),
    ([1, 7], "Replica assignment has brokers that are not alive. Replica list: [1, 7], "
             "live broker list: [1, 2, 3]"),
])
def test_invalid_targets(target, message):
    with pytest.raises(ReassignmentError) as info:
        validate_target(target, {1, 2, 3})
    assert info.value.error == ErrorCode.invalid_replica_assignment
    assert info.value.code == 39
    assert str(info.value) == message


def test_only_added_replicas_must_be_live_when_the_current_assignment_is_known():
    current = ReplicaAssignment([1, 2, 3])
    # Broker 3 is dead but already a replica: keeping it is allowed.
    validate_target([3, 4], {1, 2, 4}, current)
    with pytest.raises(ReassignmentError) as info:
        validate_target([3, 5], {1, 2, 4}, current)
    assert "Replica list: [5]" in str(info.value)
    # Without the current assignment, every target replica must be live.
    with pytest.raises(ReassignmentError):
        validate_target([3, 4], {1, 2, 4})


def test_build_reassignment():
    live = {1, 2, 3, 4}
    started = build_reassignment(PLAIN, [2, 4], live)
    assert started == ReplicaAssignment([2, 4, 1, 3], adding=[4], removing=[1, 3])
    assert build_reassignment(started, None, live) == ReplicaAssignment([2, 1, 3])
    with pytest.raises(ReassignmentError) as info:
        build_reassignment(PLAIN, None, live)
    assert info.value.error == ErrorCode.no_reassignment_in_progress
    with pytest.raises(ReassignmentError) as info:
        build_reassignment(PLAIN, [2, 2], live)
    assert info.value.error == ErrorCode.invalid_replica_assignment


# ---- properties ------------------------------------------------------------------------------

replica_lists = st.lists(st.integers(0, 8), min_size=1, max_size=6, unique=True)


@given(replica_lists, replica_lists, replica_lists)
def test_reassignment_invariants(original, first_target, target):
    current = ReplicaAssignment(original).reassign_to(first_target)
    moving = current.reassign_to(target)
    assert moving.target_replicas == target
    assert set(moving.original_replicas) == set(original)
    assert set(moving.replicas) == set(original) | set(target)
    assert moving.adding == [r for r in moving.replicas if r not in original]
    assert moving.removing == [r for r in moving.replicas if r not in target]
    assert moving.is_being_reassigned == (set(target) != set(original))
    assert moving.is_complete(target)
    cancelled = moving.reassign_to(moving.original_replicas)
    assert not cancelled.is_being_reassigned and set(cancelled.replicas) == set(original)
    assert ReplicaAssignment.from_json(moving.to_json()) == moving
    assert assignments_from_topic_znode(topic_znode_fields({0: moving})) == {0: moving}
