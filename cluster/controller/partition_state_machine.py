"""Kafka's controller partition state machine (kafka.controller.PartitionStateMachine),
as bookkeeping only: which state each (topic, partition) is in and which moves are
legal. Leader election and the ZooKeeper writes that go with a move are the
controller's (see cluster/controller/leader_election.py); this class records the outcome.
No Ray, no ZooKeeper.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
from typing import Iterable

from cluster.controller.replica_state_machine import IllegalStateTransition

log = logging.getLogger("raykafka.controller.state")

TopicPartition = tuple[str, int]


class PartitionStateName(enum.Enum):
    NON_EXISTENT_PARTITION = "NonExistentPartition"
    NEW_PARTITION = "NewPartition"
    ONLINE_PARTITION = "OnlinePartition"
    OFFLINE_PARTITION = "OfflinePartition"

    @property
    def kafka_name(self) -> str:
        return self.value

    @property
    def valid_previous_states(self) -> frozenset["PartitionStateName"]:
        return VALID_PREVIOUS_PARTITION_STATES[self]

    def __str__(self) -> str:
        return self.value


_P = PartitionStateName
# Kafka's PartitionState.validPreviousStates, one entry per target state.
VALID_PREVIOUS_PARTITION_STATES: dict[PartitionStateName, frozenset[PartitionStateName]] = {
    _P.NEW_PARTITION: frozenset({_P.NON_EXISTENT_PARTITION}),
    _P.ONLINE_PARTITION: frozenset({_P.NEW_PARTITION, _P.ONLINE_PARTITION, _P.OFFLINE_PARTITION}),
    _P.OFFLINE_PARTITION: frozenset({_P.NEW_PARTITION, _P.ONLINE_PARTITION, _P.OFFLINE_PARTITION}),
    _P.NON_EXISTENT_PARTITION: frozenset({_P.OFFLINE_PARTITION}),
}
del _P


class IllegalPartitionStateTransition(IllegalStateTransition):
    @property
    def partition(self) -> tuple:
        return self.subject


@dataclasses.dataclass
class PartitionTransitionResult:
    applied: list[TopicPartition] = dataclasses.field(default_factory=list)
    # (partition, the state it stayed in)
    refused: list[tuple[TopicPartition, PartitionStateName]] = dataclasses.field(default_factory=list)
    # The state each applied partition left: NewPartition -> OnlinePartition creates the
    # leader znode, Offline/Online -> OnlinePartition elects over an existing one.
    previous: dict[TopicPartition, PartitionStateName] = dataclasses.field(default_factory=dict)


class PartitionStateMachine:
    """A partition not tracked is NonExistentPartition; reaching that state forgets it."""

    def __init__(self) -> None:
        self._states: dict[str, dict[int, PartitionStateName]] = {}

    # ---- queries ---------------------------------------------------------------------------
    def state(self, partition: TopicPartition) -> PartitionStateName:
        topic, index = partition
        return self._states.get(topic, {}).get(index, PartitionStateName.NON_EXISTENT_PARTITION)

    def partitions_in_state(self, state: PartitionStateName, topic: str | None = None) -> list[TopicPartition]:
        topics = [topic] if topic is not None else sorted(self._states)
        return [(t, p) for t in topics for p, s in sorted(self._states.get(t, {}).items()) if s is state]

    def partitions_of_topic(self, topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in sorted(self._states.get(topic, {}))]

    def offline_partitions(self) -> list[TopicPartition]:
        return self.partitions_in_state(PartitionStateName.OFFLINE_PARTITION)

    def forget_topic(self, topic: str) -> None:
        self._states.pop(topic, None)

    # ---- moves -----------------------------------------------------------------------------
    def transition(self, partitions: Iterable[TopicPartition],
                   target: PartitionStateName) -> PartitionTransitionResult:
        """Moves every partition for which the move is legal; the others keep their
        state and are logged at ERROR (Kafka's handleStateChanges). Legality is
        judged against the states before this call (a partition named twice counts once)."""
        result = PartitionTransitionResult()
        checked = [(partition, self.state(partition)) for partition in dict.fromkeys(partitions)]
        for partition, current in checked:
            if current in target.valid_previous_states:
                self._put(partition, target)
                result.applied.append(partition)
                result.previous[partition] = current
            else:
                log.error("Illegal state change of partition %s from %s to %s", partition, current, target)
                result.refused.append((partition, current))
        return result

    def transition_strict(self, partitions: Iterable[TopicPartition],
                          target: PartitionStateName) -> PartitionTransitionResult:
        """All or nothing: raises IllegalPartitionStateTransition (an
        IllegalStateTransition) for the first illegal move before changing anything."""
        checked = [(partition, self.state(partition)) for partition in dict.fromkeys(partitions)]
        for partition, current in checked:
            if current not in target.valid_previous_states:
                raise IllegalPartitionStateTransition(partition, current, target)
        return self.transition([partition for partition, _ in checked], target)

    def initialize(self, partitions: Iterable[tuple[TopicPartition, bool, bool]]) -> None:
        """Controller failover, Kafka's initializePartitionState: each entry is
        (partition, has_leader_state, leader_alive). No leader znode yet ->
        NewPartition; a live leader -> OnlinePartition; else OfflinePartition."""
        self._states.clear()
        for partition, has_leader_state, leader_alive in partitions:
            if not has_leader_state:
                state = PartitionStateName.NEW_PARTITION
            elif leader_alive:
                state = PartitionStateName.ONLINE_PARTITION
            else:
                state = PartitionStateName.OFFLINE_PARTITION
            self._put(partition, state)

    def _put(self, partition: TopicPartition, state: PartitionStateName) -> None:
        topic, index = partition
        if state is PartitionStateName.NON_EXISTENT_PARTITION:
            states = self._states.get(topic)
            if states is not None:
                states.pop(index, None)
                if not states:
                    del self._states[topic]
            return
        self._states.setdefault(topic, {})[index] = state
