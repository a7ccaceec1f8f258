import pytest

from cluster.controller.controller_context import NO_LEADER, BrokerState, ControllerContext
from cluster.controller.leader_election import (ElectionResult, ElectionType, controlled_shutdown_partition_leader,
                                                offline_partition_leader, preferred_replica_partition_leader,
                                                reassign_partition_leader)
from cluster.controller.leader_imbalance import imbalance_ratios, imbalanced_partitions


def test_election_type_values_are_the_elect_leaders_api_values():
    assert ElectionType.PREFERRED == 0 and ElectionType.UNCLEAN == 1
    assert ElectionType(1) is ElectionType.UNCLEAN


# ---- offline ---------------------------------------------------------------------------------

@pytest.mark.parametrize("assignment,isr,live,unclean,expected", [
    # First assigned replica that is live and in the ISR, in assignment order (not ISR order).
    ([1, 2, 3], [3, 2, 1], {1, 2, 3}, False, ElectionResult(1, [3, 2, 1])),
    # Dead preferred replica: the next one; the dead replica leaves the ISR.
    ([1, 2, 3], [1, 2, 3], {2, 3}, False, ElectionResult(2, [2, 3])),
    # Live but out of ISR is skipped while an ISR member is live.
    ([1, 2, 3], [3], {1, 2, 3}, True, ElectionResult(3, [3])),
    # No live ISR member, unclean off: no leader, ISR kept as it was.
    ([1, 2, 3], [1], {2, 3}, False, ElectionResult(None, [1])),
    # ... unclean on: first live assigned replica, ISR is just it.
    ([1, 2, 3], [1], {3, 2}, True, ElectionResult(2, [2], unclean=True)),
    # Empty ISR.
    ([1, 2], [], {1, 2}, False, ElectionResult(None, [])),
    ([1, 2], [], {2}, True, ElectionResult(2, [2], unclean=True)),
    # Nothing live at all: no leader even with unclean on.
    ([1, 2], [1, 2], set(), True, ElectionResult(None, [1, 2])),
    ([1, 2], [1, 2], {7}, True, ElectionResult(None, [1, 2])),
    # An ISR member that is not in the assignment can never lead.
    ([1, 2], [5], {5}, False, ElectionResult(None, [5])),
    ([], [1], {1}, True, ElectionResult(None, [1])),
])
def test_offline_partition_leader(assignment, isr, live, unclean, expected):
    result = offline_partition_leader(assignment, isr, live, unclean)
    assert result == expected
    assert result.elected is (expected.leader is not None)


def test_offline_clean_leader_keeps_live_isr_order():
    result = offline_partition_leader([4, 1, 2, 3], [3, 1, 4, 2], {1, 2, 3}, False)
    assert result == ElectionResult(1, [3, 1, 2])


# ---- reassignment ----------------------------------------------------------------------------

@pytest.mark.parametrize("target,isr,live,expected", [
    ([4, 5, 6], [1, 2, 3, 4, 5, 6], {1, 2, 3, 4, 5, 6}, ElectionResult(4, [1, 2, 3, 4, 5, 6])),
    # First target replica not caught up (not in ISR): the next.
    ([4, 5, 6], [1, 5, 6], {1, 4, 5, 6}, ElectionResult(5, [1, 5, 6])),
    # In ISR but dead: skipped; the ISR is not touched by this election.
    ([4, 5, 6], [4, 5, 6], {5, 6}, ElectionResult(5, [4, 5, 6])),
    # No target replica live and in ISR.
    ([4, 5], [1, 2], {1, 2, 4, 5}, ElectionResult(None, [1, 2])),
    ([4, 5], [], {4, 5}, ElectionResult(None, [])),
])
def test_reassign_partition_leader(target, isr, live, expected):
    assert reassign_partition_leader(target, isr, live) == expected


# ---- preferred replica -----------------------------------------------------------------------

@pytest.mark.parametrize("assignment,isr,live,expected", [
    ([1, 2, 3], [2, 3, 1], {1, 2, 3}, ElectionResult(1, [2, 3, 1])),
    # Only the preferred replica may win: never the next one.
    ([1, 2, 3], [2, 3], {1, 2, 3}, ElectionResult(None, [2, 3])),
    ([1, 2, 3], [1, 2, 3], {2, 3}, ElectionResult(None, [1, 2, 3])),
    ([1, 2, 3], [], {1, 2, 3}, ElectionResult(None, [])),
    ([], [1], {1}, ElectionResult(None, [1])),
])
def test_preferred_replica_partition_leader(assignment, isr, live, expected):
    assert preferred_replica_partition_leader(assignment, isr, live) == expected


# ---- controlled shutdown ---------------------------------------------------------------------

@pytest.mark.parametrize("assignment,isr,live,shutting_down,expected", [
    # The leader (1) is shutting down: the next live ISR member leads; 1 leaves the ISR.
    ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}, ElectionResult(2, [2, 3])),
    # Several shutting down at once.
    ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}, ElectionResult(3, [3])),
    # A follower shutting down still leaves the ISR; the first eligible replica leads.
    ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {3}, ElectionResult(1, [1, 2])),
    # Live and not shutting down but out of the ISR: not eligible.
    ([1, 2, 3], [1, 3], {1, 2, 3}, {1, 3}, ElectionResult(None, [1, 3])),
    # The only other ISR member is dead.
    ([1, 2], [1, 2], {1}, {1}, ElectionResult(None, [1, 2])),
    ([1, 2], [], {1, 2}, {1}, ElectionResult(None, [])),
    # Nobody shutting down: plain first live ISR member, ISR unchanged.
    ([2, 1], [1, 2], {1, 2}, set(), ElectionResult(2, [1, 2])),
])
def test_controlled_shutdown_partition_leader(assignment, isr, live, shutting_down, expected):
    assert controlled_shutdown_partition_leader(assignment, isr, live, shutting_down) == expected


# ---- the controller context delegates to the offline strategy ----------------------------------

def context_with_brokers(*ids: int) -> ControllerContext:
    ctx = ControllerContext(epoch=1, cluster_id="c")
    for broker in ids:
        ctx.brokers[broker] = BrokerState(broker, "127.0.0.1", 9092 + broker, None, None, [])
    return ctx


@pytest.mark.parametrize("replicas,isr,unclean,expected", [
    ([1, 2, 3], [2, 3], False, 2),
    ([1, 3], [1], False, NO_LEADER),
    ([1, 3], [1], True, 3),
    ([1, 4], [1, 4], True, NO_LEADER),
])
def test_controller_context_elect_offline_leader(replicas, isr, unclean, expected):
    assert context_with_brokers(2, 3).elect_offline_leader(replicas, isr, unclean) == expected


# ---- leader imbalance ------------------------------------------------------------------------

def assignments_preferring(broker: int, count: int, topic: str = "t", follower: int = 9) -> dict:
    return {(topic, p): [broker, follower] for p in range(count)}


@pytest.mark.parametrize("not_led,percentage,imbalanced", [
    (0, 10, False),
    (1, 10, False),   # exactly 10 %: not above the threshold
    (2, 10, True),    # 20 %
    (1, 9, True),     # 10 % > 9 %
    (10, 100, False),  # 100 % is never above 100
    (10, 99, True),
    (1, 0, True),     # any imbalance with a 0 % threshold
    (0, 0, False),
])
def test_imbalance_threshold_is_strictly_above(not_led, percentage, imbalanced):
    assignments = assignments_preferring(1, 10)
    leaders = {tp: (9 if tp[1] < not_led else 1) for tp in assignments}
    result = imbalanced_partitions(assignments, leaders, {1, 9}, percentage)
    if imbalanced:
        assert result == {1: [("t", p) for p in range(not_led)]}
    else:
        assert result == {}
    assert imbalance_ratios(assignments, leaders, {1, 9}) == {1: pytest.approx(not_led / 10)}


def test_threshold_exactly_met_with_thirds():
    # 1 of 3 is 33.33 %: above 33, not above 34.
    assignments = assignments_preferring(1, 3)
    leaders = {("t", 0): 9, ("t", 1): 1, ("t", 2): 1}
    assert imbalanced_partitions(assignments, leaders, {1, 9}, 33) == {1: [("t", 0)]}
    assert imbalanced_partitions(assignments, leaders, {1, 9}, 34) == {}


def test_imbalance_per_preferred_broker():
    assignments = {
        ("a", 0): [1, 2], ("a", 1): [1, 2], ("a", 2): [2, 1], ("a", 3): [2, 1],
        ("b", 0): [3, 1], ("b", 1): [3, 1],
    }
    leaders = {("a", 0): 2, ("a", 1): 1, ("a", 2): 2, ("a", 3): 2, ("b", 0): 1, ("b", 1): 1}
    assert imbalance_ratios(assignments, leaders, {1, 2, 3}) == {1: 0.5, 2: 0.0, 3: 1.0}
    assert imbalanced_partitions(assignments, leaders, {1, 2, 3}, 10) == {
        1: [("a", 0)], 3: [("b", 0), ("b", 1)]}


def test_dead_preferred_broker_is_not_rebalanced_to():
    assignments = assignments_preferring(1, 4)
    leaders = {tp: 9 for tp in assignments}
    assert imbalanced_partitions(assignments, leaders, {9}, 10) == {}
    assert 1 not in imbalance_ratios(assignments, leaders, {9})


def test_partitions_without_leadership_info_count_as_balanced_and_no_leader_does_not():
    assignments = assignments_preferring(1, 4)
    # ("t", 0) and ("t", 1) have no leader record yet; ("t", 2) is leaderless (-1).
    leaders = {("t", 2): NO_LEADER, ("t", 3): 1}
    assert imbalance_ratios(assignments, leaders, {1, 9}) == {1: 0.25}
    assert imbalanced_partitions(assignments, leaders, {1, 9}, 20) == {1: [("t", 2)]}
    assert imbalanced_partitions(assignments, leaders, {1, 9}, 25) == {}


def test_imbalance_leaves_out_preferred_replicas_not_in_isr_and_deleting_topics():
    assignments = {**assignments_preferring(1, 2, topic="t"), **assignments_preferring(1, 2, topic="gone")}
    leaders = {tp: 9 for tp in assignments}
    isrs = {("t", 0): [9, 1], ("t", 1): [9]}
    assert imbalanced_partitions(assignments, leaders, {1, 9}, 10, isrs=isrs, topics_being_deleted={"gone"}) == {
        1: [("t", 0)]}
    # Without ISRs, every not-led partition is a candidate; deleting topics never are.
    assert imbalanced_partitions(assignments, leaders, {1, 9}, 10, topics_being_deleted={"gone"}) == {
        1: [("t", 0), ("t", 1)]}
    # Above the threshold but no candidate can be elected: nothing for that broker.
    assert imbalanced_partitions(assignments, leaders, {1, 9}, 10, isrs={}, topics_being_deleted={"gone"}) == {}


def test_deleting_topics_do_not_count_toward_the_ratio():
    assignments = {**assignments_preferring(1, 1, topic="t"), **assignments_preferring(1, 3, topic="gone")}
    leaders = {("t", 0): 1, **{("gone", p): 9 for p in range(3)}}
    assert imbalance_ratios(assignments, leaders, {1, 9}, topics_being_deleted={"gone"}) == {1: 0.0}
    assert imbalance_ratios(assignments, leaders, {1, 9}) == {1: 0.75}


def test_empty_assignment_is_ignored():
    assert imbalanced_partitions({("t", 0): []}, {("t", 0): 1}, {1}, 0) == {}
    assert imbalance_ratios({}, {}, {1}) == {}
