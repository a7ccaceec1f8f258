import logging

import pytest

from cluster.controller.replica_state_machine import (IllegalStateTransition, ReplicaState, ReplicaStateMachine,
                                                      TransitionResult)
from tests.unit.state_machine_helpers import LOGGER, machine_in, transition_logged, transition_matrix

S = ReplicaState

# Kafka's ReplicaStateMachine, written out by hand as (from, to) pairs that are legal.
# Every other pair of the 7 x 7 matrix must be refused.
LEGAL = {
    ("NonExistentReplica", "NewReplica"),
    ("NewReplica", "OnlineReplica"),
    ("OnlineReplica", "OnlineReplica"),
    ("OfflineReplica", "OnlineReplica"),
    ("ReplicaDeletionIneligible", "OnlineReplica"),
    ("NewReplica", "OfflineReplica"),
    ("OnlineReplica", "OfflineReplica"),
    ("OfflineReplica", "OfflineReplica"),
    ("ReplicaDeletionIneligible", "OfflineReplica"),
    ("OfflineReplica", "ReplicaDeletionStarted"),
    ("ReplicaDeletionStarted", "ReplicaDeletionSuccessful"),
    ("OfflineReplica", "ReplicaDeletionIneligible"),
    ("ReplicaDeletionStarted", "ReplicaDeletionIneligible"),
    ("ReplicaDeletionSuccessful", "NonExistentReplica"),
}

KAFKA_NAMES = {
    S.NEW_REPLICA: "NewReplica",
    S.ONLINE_REPLICA: "OnlineReplica",
    S.OFFLINE_REPLICA: "OfflineReplica",
    S.REPLICA_DELETION_STARTED: "ReplicaDeletionStarted",
    S.REPLICA_DELETION_SUCCESSFUL: "ReplicaDeletionSuccessful",
    S.REPLICA_DELETION_INELIGIBLE: "ReplicaDeletionIneligible",
    S.NON_EXISTENT_REPLICA: "NonExistentReplica",
}

# A legal path from NonExistentReplica to each state, to put a replica where a test needs it.
PATH_TO = {
    S.NON_EXISTENT_REPLICA: [],
    S.NEW_REPLICA: [S.NEW_REPLICA],
    S.ONLINE_REPLICA: [S.NEW_REPLICA, S.ONLINE_REPLICA],
    S.OFFLINE_REPLICA: [S.NEW_REPLICA, S.OFFLINE_REPLICA],
    S.REPLICA_DELETION_STARTED: [S.NEW_REPLICA, S.OFFLINE_REPLICA, S.REPLICA_DELETION_STARTED],
    S.REPLICA_DELETION_SUCCESSFUL: [S.NEW_REPLICA, S.OFFLINE_REPLICA, S.REPLICA_DELETION_STARTED,
                                    S.REPLICA_DELETION_SUCCESSFUL],
    S.REPLICA_DELETION_INELIGIBLE: [S.NEW_REPLICA, S.OFFLINE_REPLICA, S.REPLICA_DELETION_INELIGIBLE],
}

R = ("t", 0, 1)
MATRIX, IDS = transition_matrix(ReplicaState)


def machine_with(replica, state) -> ReplicaStateMachine:
    return machine_in(ReplicaStateMachine, PATH_TO, replica, state)


def test_every_state_has_its_kafka_name():
    assert len(ReplicaState) == 7
    assert {state: state.kafka_name for state in ReplicaState} == KAFKA_NAMES
    assert str(S.ONLINE_REPLICA) == "OnlineReplica"


def test_table_is_the_kafka_table():
    table = {(f.kafka_name, t.kafka_name) for t in ReplicaState for f in t.valid_previous_states}
    assert table == LEGAL


@pytest.mark.parametrize("start,target", MATRIX, ids=IDS)
def test_transition_matrix(start, target, caplog):
    machine = machine_with(R, start)
    result = transition_logged(machine, R, target, caplog)
    if (start.kafka_name, target.kafka_name) in LEGAL:
        assert result.applied == [R] and result.refused == []
        assert result.previous == {R: start}
        assert machine.state(R) is target
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    else:
        assert result.applied == [] and result.refused == [(R, start)]
        assert machine.state(R) is start
        errors = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]
        assert len(errors) == 1
        message = errors[0].getMessage()
        assert str(R) in message and start.kafka_name in message and target.kafka_name in message


@pytest.mark.parametrize("start,target", MATRIX, ids=IDS)
def test_strict_transition_matrix(start, target):
    machine = machine_with(R, start)
    if (start.kafka_name, target.kafka_name) in LEGAL:
        result = machine.transition_strict([R], target)
        assert result.applied == [R]
        assert machine.state(R) is target
    else:
        with pytest.raises(IllegalStateTransition) as info:
            machine.transition_strict([R], target)
        assert info.value.replica == R
        assert info.value.from_state is start and info.value.to_state is target
        assert machine.state(R) is start


def test_reaching_non_existent_forgets_the_replica():
    machine = machine_with(R, S.REPLICA_DELETION_SUCCESSFUL)
    machine.transition([R], S.NON_EXISTENT_REPLICA)
    assert machine.replicas_of_topic("t") == []
    assert machine.replicas_in_state(S.NON_EXISTENT_REPLICA) == []
    # Forgotten means back at the start: it can be created again.
    assert machine.transition([R], S.NEW_REPLICA).applied == [R]


def test_unknown_replica_is_non_existent_and_refusing_it_tracks_nothing(caplog):
    machine = ReplicaStateMachine()
    assert machine.state(("nope", 3, 9)) is S.NON_EXISTENT_REPLICA
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        result = machine.transition([("nope", 3, 9)], S.ONLINE_REPLICA)
    assert result.refused == [(("nope", 3, 9), S.NON_EXISTENT_REPLICA)]
    assert machine.replicas_of_topic("nope") == []
    assert "NonExistentReplica" in caplog.text and "OnlineReplica" in caplog.text


def test_batch_applies_the_legal_and_refuses_the_rest(caplog):
    machine = ReplicaStateMachine()
    new, online, offline = ("t", 0, 1), ("t", 0, 2), ("t", 1, 1)
    machine.transition([new, online, offline], S.NEW_REPLICA)
    machine.transition([online], S.ONLINE_REPLICA)
    machine.transition([offline], S.OFFLINE_REPLICA)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        result = machine.transition([new, online, offline], S.REPLICA_DELETION_STARTED)
    assert result.applied == [offline]
    assert result.refused == [(new, S.NEW_REPLICA), (online, S.ONLINE_REPLICA)]
    assert result.previous == {offline: S.OFFLINE_REPLICA}
    assert [machine.state(r) for r in (new, online, offline)] == [
        S.NEW_REPLICA, S.ONLINE_REPLICA, S.REPLICA_DELETION_STARTED]
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2


def test_strict_batch_changes_nothing_when_one_move_is_illegal():
    machine = ReplicaStateMachine()
    a, b, c = ("t", 0, 1), ("t", 0, 2), ("t", 0, 3)
    machine.transition([a, b, c], S.NEW_REPLICA)
    machine.transition([c], S.ONLINE_REPLICA)
    with pytest.raises(IllegalStateTransition) as info:
        machine.transition_strict([a, b, c, ("t", 9, 9)], S.OFFLINE_REPLICA)
    # c (OnlineReplica) -> OfflineReplica is legal; the unknown replica is the first illegal one.
    assert info.value.replica == ("t", 9, 9) and info.value.from_state is S.NON_EXISTENT_REPLICA
    assert [machine.state(r) for r in (a, b, c)] == [S.NEW_REPLICA, S.NEW_REPLICA, S.ONLINE_REPLICA]


def test_a_replica_named_twice_moves_once_judged_on_its_state_before_the_call(caplog):
    machine = ReplicaStateMachine()
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        result = machine.transition([R, R], S.NEW_REPLICA)
    assert result == TransitionResult(applied=[R], refused=[], previous={R: S.NON_EXISTENT_REPLICA})
    assert not caplog.records


def test_queries_by_state_and_topic():
    machine = ReplicaStateMachine()
    replicas = [("b", 0, 1), ("a", 1, 2), ("a", 0, 2), ("a", 0, 1)]
    machine.transition(replicas, S.NEW_REPLICA)
    machine.transition([("a", 0, 1), ("b", 0, 1)], S.ONLINE_REPLICA)
    assert machine.replicas_in_state(S.ONLINE_REPLICA) == [("a", 0, 1), ("b", 0, 1)]
    assert machine.replicas_in_state(S.ONLINE_REPLICA, topic="b") == [("b", 0, 1)]
    assert machine.replicas_in_state(S.NEW_REPLICA) == [("a", 0, 2), ("a", 1, 2)]
    assert machine.replicas_in_state(S.NEW_REPLICA, topic="missing") == []
    assert machine.replicas_of_topic("a") == [("a", 0, 1), ("a", 0, 2), ("a", 1, 2)]
    assert machine.is_any_replica_in_state("a", S.NEW_REPLICA)
    assert not machine.is_any_replica_in_state("b", S.NEW_REPLICA)
    machine.forget_topic("a")
    assert machine.replicas_of_topic("a") == []
    assert machine.state(("a", 0, 1)) is S.NON_EXISTENT_REPLICA
    assert machine.replicas_of_topic("b") == [("b", 0, 1)]
    machine.forget_topic("never-seen")


def test_topic_deletion_is_successful_only_when_every_replica_is():
    machine = ReplicaStateMachine()
    a, b = ("t", 0, 1), ("t", 0, 2)
    machine.transition([a, b], S.NEW_REPLICA)
    machine.transition([a, b], S.OFFLINE_REPLICA)
    machine.transition([a, b], S.REPLICA_DELETION_STARTED)
    assert not machine.is_topic_deletion_successful("t")
    machine.transition([a], S.REPLICA_DELETION_SUCCESSFUL)
    machine.transition([b], S.REPLICA_DELETION_INELIGIBLE)
    assert not machine.is_topic_deletion_successful("t")
    assert machine.is_any_replica_in_state("t", S.REPLICA_DELETION_INELIGIBLE)
    # Retry: ineligible -> offline -> started -> successful.
    machine.transition([b], S.OFFLINE_REPLICA)
    machine.transition([b], S.REPLICA_DELETION_STARTED)
    machine.transition([b], S.REPLICA_DELETION_SUCCESSFUL)
    assert machine.is_topic_deletion_successful("t")
    # Kafka's forall: nothing tracked counts as done.
    assert machine.is_topic_deletion_successful("other")


def test_initialize_on_failover():
    machine = ReplicaStateMachine()
    machine.transition([("stale", 0, 1)], S.NEW_REPLICA)
    machine.initialize([
        (("keep", 0, 1), True),
        (("keep", 0, 2), False),
        (("gone", 0, 1), True),
        (("gone", 0, 2), False),
    ], topics_being_deleted={"gone"})
    assert machine.state(("keep", 0, 1)) is S.ONLINE_REPLICA
    assert machine.state(("keep", 0, 2)) is S.OFFLINE_REPLICA
    assert machine.state(("gone", 0, 1)) is S.ONLINE_REPLICA
    assert machine.state(("gone", 0, 2)) is S.REPLICA_DELETION_INELIGIBLE
    # Failover rebuilds from scratch: what the machine knew before is gone.
    assert machine.replicas_of_topic("stale") == []


def test_initialize_without_deletions_marks_dead_replicas_offline():
    machine = ReplicaStateMachine()
    machine.initialize([(("t", 0, 1), False), (("t", 0, 2), True)])
    assert machine.replicas_in_state(S.OFFLINE_REPLICA) == [("t", 0, 1)]
    assert machine.replicas_in_state(S.ONLINE_REPLICA) == [("t", 0, 2)]
    # From both initial states the machine goes on legally.
    assert machine.transition([("t", 0, 1)], S.ONLINE_REPLICA).applied == [("t", 0, 1)]
    assert machine.transition([("t", 0, 2)], S.OFFLINE_REPLICA).applied == [("t", 0, 2)]


def test_replicas_in_deletion_states():
    machine = ReplicaStateMachine()
    started, ineligible, offline, other = ("t", 0, 1), ("t", 0, 2), ("t", 1, 1), ("u", 0, 1)
    machine.transition([started, ineligible, offline, other], S.NEW_REPLICA)
    machine.transition([started, ineligible, offline, other], S.OFFLINE_REPLICA)
    machine.transition([started, other], S.REPLICA_DELETION_STARTED)
    machine.transition([ineligible], S.REPLICA_DELETION_INELIGIBLE)
    assert machine.replicas_in_deletion_states("t") == [started, ineligible]
    machine.transition([started], S.REPLICA_DELETION_SUCCESSFUL)
    assert machine.replicas_in_deletion_states("t") == [started, ineligible]
    machine.transition([started], S.NON_EXISTENT_REPLICA)
    assert machine.replicas_in_deletion_states("t") == [ineligible]
