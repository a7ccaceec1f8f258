"""The controller's replica state machine (Kafka's ReplicaStateMachine), as
bookkeeping only: which state each (topic, partition, broker) replica is in
and which moves are legal. The controller actor does the I/O a transition
implies (LeaderAndIsr, StopReplica, ISR shrink) and asks this class whether
the move is allowed first. No Ray, no ZooKeeper.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
from typing import Iterable

log = logging.getLogger("raykafka.controller.state")

PartitionReplica = tuple[str, int, int]  # (topic, partition, broker id)


class ReplicaState(enum.Enum):
    NEW_REPLICA = "NewReplica"
    ONLINE_REPLICA = "OnlineReplica"
    OFFLINE_REPLICA = "OfflineReplica"
    REPLICA_DELETION_STARTED = "ReplicaDeletionStarted"
    REPLICA_DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    REPLICA_DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT_REPLICA = "NonExistentReplica"

    @property
    def kafka_name(self) -> str:
        return self.value

    @property
    def valid_previous_states(self) -> frozenset["ReplicaState"]:
        return _VALID_PREVIOUS[self]

    def __str__(self) -> str:
        return self.value


_S = ReplicaState
# Kafka's ReplicaState.validPreviousStates, per target state.
_VALID_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    _S.NEW_REPLICA: frozenset({_S.NON_EXISTENT_REPLICA}),
    _S.ONLINE_REPLICA: frozenset({_S.NEW_REPLICA, _S.ONLINE_REPLICA, _S.OFFLINE_REPLICA,
                                  _S.REPLICA_DELETION_INELIGIBLE}),
    _S.OFFLINE_REPLICA: frozenset({_S.NEW_REPLICA, _S.ONLINE_REPLICA, _S.OFFLINE_REPLICA,
                                   _S.REPLICA_DELETION_INELIGIBLE}),
    _S.REPLICA_DELETION_STARTED: frozenset({_S.OFFLINE_REPLICA}),
    _S.REPLICA_DELETION_SUCCESSFUL: frozenset({_S.REPLICA_DELETION_STARTED}),
    _S.REPLICA_DELETION_INELIGIBLE: frozenset({_S.OFFLINE_REPLICA, _S.REPLICA_DELETION_STARTED}),
    _S.NON_EXISTENT_REPLICA: frozenset({_S.REPLICA_DELETION_SUCCESSFUL}),
}
del _S

_DELETION_STATES = frozenset({ReplicaState.REPLICA_DELETION_STARTED, ReplicaState.REPLICA_DELETION_SUCCESSFUL,
                              ReplicaState.REPLICA_DELETION_INELIGIBLE})


def is_valid_replica_transition(current: ReplicaState, target: ReplicaState) -> bool:
    return current in _VALID_PREVIOUS[target]


class IllegalStateTransition(Exception):
    """A move the state machine forbids. `subject` (alias `replica`) is a
    PartitionReplica for the replica machine and a (topic, partition) for the
    partition machine; `target.valid_previous_states` lists what was allowed."""

    def __init__(self, subject, current: enum.Enum, target: enum.Enum):
        self.subject = subject
        self.current = current
        self.target = target
        previous = ",".join(sorted(str(s) for s in target.valid_previous_states))
        super().__init__(f"{subject} should be in one of {previous} states before moving to {target} state. "
                         f"Instead it is in {current} state")

    @property
    def replica(self):
        return self.subject

    # The two ends are "from" and "to"; `from` is a keyword, hence the names.
    @property
    def from_state(self) -> enum.Enum:
        return self.current

    @property
    def to_state(self) -> enum.Enum:
        return self.target


@dataclasses.dataclass
class TransitionResult:
    applied: list = dataclasses.field(default_factory=list)
    # (replica, the state it stayed in) for each refused move.
    refused: list = dataclasses.field(default_factory=list)
    # The state each applied replica left (NewReplica -> OnlineReplica needs no
    # LeaderAndIsr, Offline -> Online does).
    previous: dict = dataclasses.field(default_factory=dict)


class ReplicaStateMachine:
    def __init__(self) -> None:
        # Unknown replicas are NonExistentReplica; that state is never stored.
        self._states: dict[PartitionReplica, ReplicaState] = {}

    def state(self, replica: PartitionReplica) -> ReplicaState:
        return self._states.get(replica, ReplicaState.NON_EXISTENT_REPLICA)

    def initialize(self, replicas_with_liveness: Iterable[tuple[PartitionReplica, bool]],
                   topics_being_deleted: set[str] | frozenset[str] = frozenset()) -> None:
        """Controller failover: every assigned replica starts Online if its broker
        is alive. A dead replica of a topic queued for deletion starts
        ReplicaDeletionIneligible so deletion is not attempted on a broker that
        cannot answer; any other dead replica starts OfflineReplica (where
        Kafka's startup moves it right after initializeReplicaState)."""
        self._states.clear()
        for replica, alive in replicas_with_liveness:
            if alive:
                self._states[replica] = ReplicaState.ONLINE_REPLICA
            elif replica[0] in topics_being_deleted:
                self._states[replica] = ReplicaState.REPLICA_DELETION_INELIGIBLE
            else:
                self._states[replica] = ReplicaState.OFFLINE_REPLICA

    def transition(self, replicas: Iterable[PartitionReplica], target: ReplicaState) -> TransitionResult:
        """Move every replica for which the move is legal; log and refuse the
        rest, leaving their state as it was (Kafka's logInvalidTransition)."""
        result = TransitionResult()
        valid = []
        for replica in _distinct(replicas):
            current = self.state(replica)
            if is_valid_replica_transition(current, target):
                valid.append((replica, current))
            else:
                log.error("Failed to change state of replica %s from %s to %s: %s", replica, current, target,
                          IllegalStateTransition(replica, current, target))
                result.refused.append((replica, current))
        for replica, current in valid:
            self._apply(replica, current, target)
            result.applied.append(replica)
            result.previous[replica] = current
        return result

    def transition_strict(self, replicas: Iterable[PartitionReplica], target: ReplicaState) -> TransitionResult:
        """All or nothing: raise on the first illegal move before applying any."""
        batch = _distinct(replicas)
        for replica in batch:
            current = self.state(replica)
            if not is_valid_replica_transition(current, target):
                raise IllegalStateTransition(replica, current, target)
        return self.transition(batch, target)

    def _apply(self, replica: PartitionReplica, current: ReplicaState, target: ReplicaState) -> None:
        if target is ReplicaState.NON_EXISTENT_REPLICA:
            self._states.pop(replica, None)
        else:
            self._states[replica] = target
        log.debug("Changed state of replica %s from %s to %s", replica, current, target)

    def replicas_in_state(self, state: ReplicaState, topic: str | None = None) -> list[PartitionReplica]:
        return sorted(r for r, s in self._states.items() if s is state and (topic is None or r[0] == topic))

    def replicas_of_topic(self, topic: str) -> list[PartitionReplica]:
        return sorted(r for r in self._states if r[0] == topic)

    def replicas_in_deletion_states(self, topic: str) -> list[PartitionReplica]:
        return sorted(r for r, s in self._states.items() if r[0] == topic and s in _DELETION_STATES)

    def is_topic_deletion_successful(self, topic: str) -> bool:
        # Kafka's areAllReplicasInState(topic, ReplicaDeletionSuccessful): true
        # for a topic with no known replicas.
        return all(self._states[r] is ReplicaState.REPLICA_DELETION_SUCCESSFUL for r in self.replicas_of_topic(topic))

    def is_any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(r[0] == topic and s is state for r, s in self._states.items())

    def forget_topic(self, topic: str) -> None:
        for replica in self.replicas_of_topic(topic):
            del self._states[replica]


def _distinct(items: Iterable) -> list:
    # A replica named twice in one batch is moved once.
    return list(dict.fromkeys(items))
