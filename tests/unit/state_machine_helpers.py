"""What the tests of the controller's replica and partition state machines
share: a machine with one member put into a state by a legal path, every
(from, to) pair of its states, and a transition with its log captured."""
from __future__ import annotations

import logging

LOGGER = "raykafka.controller.state"


def machine_in(machine_class, path_to: dict, member, state):
    """A new machine_class whose `member` reached `state` by path_to[state]."""
    machine = machine_class()
    for step in path_to[state]:
        machine.transition_strict([member], step)
    assert machine.state(member) is state
    return machine


def transition_matrix(states) -> tuple[list[tuple], list[str]]:
    """Every (from, to) pair of `states`, and the test ids "From->To" of the pairs."""
    matrix = [(a, b) for a in states for b in states]
    return matrix, [f"{a.kafka_name}->{b.kafka_name}" for a, b in matrix]


def transition_logged(machine, member, target, caplog):
    """machine.transition([member], target) with only its ERROR log in caplog."""
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        return machine.transition([member], target)
