import logging

import pytest

from cluster.controller.partition_state_machine import (IllegalPartitionStateTransition, PartitionStateMachine,
                                                        PartitionStateName)
from cluster.controller.replica_state_machine import IllegalStateTransition
from tests.unit.state_machine_helpers import LOGGER, machine_in, transition_logged, transition_matrix

P = PartitionStateName

# Kafka's PartitionStateMachine, written out by hand as legal (from, to) pairs; the
# other cells of the 4 x 4 matrix must be refused.
LEGAL = {
    ("NonExistentPartition", "NewPartition"),
    ("NewPartition", "OnlinePartition"),
    ("OnlinePartition", "OnlinePartition"),
    ("OfflinePartition", "OnlinePartition"),
    ("NewPartition", "OfflinePartition"),
    ("OnlinePartition", "OfflinePartition"),
    ("OfflinePartition", "OfflinePartition"),
    ("OfflinePartition", "NonExistentPartition"),
}

KAFKA_NAMES = {
    P.NON_EXISTENT_PARTITION: "NonExistentPartition",
    P.NEW_PARTITION: "NewPartition",
    P.ONLINE_PARTITION: "OnlinePartition",
    P.OFFLINE_PARTITION: "OfflinePartition",
}

PATH_TO = {
    P.NON_EXISTENT_PARTITION: [],
    P.NEW_PARTITION: [P.NEW_PARTITION],
    P.ONLINE_PARTITION: [P.NEW_PARTITION, P.ONLINE_PARTITION],
    P.OFFLINE_PARTITION: [P.NEW_PARTITION, P.OFFLINE_PARTITION],
}

TP = ("t", 0)
MATRIX, IDS = transition_matrix(PartitionStateName)


def machine_with(tp, state) -> PartitionStateMachine:
    return machine_in(PartitionStateMachine, PATH_TO, tp, state)


def test_every_state_has_its_kafka_name():
    assert len(PartitionStateName) == 4
    assert {state: state.kafka_name for state in PartitionStateName} == KAFKA_NAMES


def test_table_is_the_kafka_table():
    assert {(f.kafka_name, t.kafka_name) for t in PartitionStateName for f in t.valid_previous_states} == LEGAL


@pytest.mark.parametrize("start,target", MATRIX, ids=IDS)
def test_transition_matrix(start, target, caplog):
    machine = machine_with(TP, start)
    result = transition_logged(machine, TP, target, caplog)
    if (start.kafka_name, target.kafka_name) in LEGAL:
        assert result.applied == [TP] and result.refused == []
        assert result.previous == {TP: start}
        assert machine.state(TP) is target
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    else:
        assert result.applied == [] and result.refused == [(TP, start)]
        assert machine.state(TP) is start
        errors = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]
        assert len(errors) == 1
        message = errors[0].getMessage()
        assert str(TP) in message and start.kafka_name in message and target.kafka_name in message


@pytest.mark.parametrize("start,target", MATRIX, ids=IDS)
def test_strict_transition_matrix(start, target):
    machine = machine_with(TP, start)
    if (start.kafka_name, target.kafka_name) in LEGAL:
        assert machine.transition_strict([TP], target).applied == [TP]
        assert machine.state(TP) is target
    else:
        with pytest.raises(IllegalStateTransition) as info:
            machine.transition_strict([TP], target)
        assert isinstance(info.value, IllegalPartitionStateTransition)
        assert info.value.partition == TP
        assert info.value.from_state is start and info.value.to_state is target
        assert machine.state(TP) is start


def test_strict_batch_is_all_or_nothing():
    machine = PartitionStateMachine()
    machine.transition([("t", 0), ("t", 1)], P.NEW_PARTITION)
    machine.transition([("t", 1)], P.OFFLINE_PARTITION)
    with pytest.raises(IllegalPartitionStateTransition) as info:
        machine.transition_strict([("t", 0), ("t", 1)], P.NON_EXISTENT_PARTITION)
    assert info.value.partition == ("t", 0) and info.value.from_state is P.NEW_PARTITION
    assert machine.state(("t", 1)) is P.OFFLINE_PARTITION


def test_batch_applies_the_legal_and_refuses_the_rest(caplog):
    machine = PartitionStateMachine()
    machine.transition([("t", 0), ("t", 1)], P.NEW_PARTITION)
    machine.transition([("t", 1)], P.OFFLINE_PARTITION)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        result = machine.transition([("t", 0), ("t", 1), ("u", 0)], P.NON_EXISTENT_PARTITION)
    assert result.applied == [("t", 1)]
    assert result.refused == [(("t", 0), P.NEW_PARTITION), (("u", 0), P.NON_EXISTENT_PARTITION)]
    assert machine.partitions_of_topic("t") == [("t", 0)]
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2


def test_queries():
    machine = PartitionStateMachine()
    machine.transition([("b", 0), ("a", 2), ("a", 0), ("a", 1)], P.NEW_PARTITION)
    machine.transition([("a", 0), ("b", 0)], P.ONLINE_PARTITION)
    machine.transition([("a", 2), ("a", 0)], P.OFFLINE_PARTITION)
    assert machine.offline_partitions() == [("a", 0), ("a", 2)]
    assert machine.partitions_in_state(P.ONLINE_PARTITION) == [("b", 0)]
    assert machine.partitions_in_state(P.NEW_PARTITION, topic="a") == [("a", 1)]
    assert machine.partitions_in_state(P.NEW_PARTITION, topic="b") == []
    machine.forget_topic("a")
    assert machine.offline_partitions() == []
    assert machine.state(("a", 1)) is P.NON_EXISTENT_PARTITION
    assert machine.partitions_of_topic("b") == [("b", 0)]


def test_reaching_non_existent_forgets_the_partition():
    machine = machine_with(TP, P.OFFLINE_PARTITION)
    machine.transition([TP], P.NON_EXISTENT_PARTITION)
    assert machine.partitions_of_topic("t") == []
    assert machine.transition([TP], P.NEW_PARTITION).applied == [TP]


def test_initialize_on_failover():
    machine = PartitionStateMachine()
    machine.transition([("stale", 0)], P.NEW_PARTITION)
    machine.initialize([
        (("t", 0), False, False),  # no leader znode yet
        (("t", 1), False, True),   # no znode: liveness is irrelevant
        (("t", 2), True, True),
        (("t", 3), True, False),
    ])
    assert [machine.state(("t", p)) for p in range(4)] == [
        P.NEW_PARTITION, P.NEW_PARTITION, P.ONLINE_PARTITION, P.OFFLINE_PARTITION]
    assert machine.offline_partitions() == [("t", 3)]
    assert machine.partitions_of_topic("stale") == []
