"""A partition's replica assignment during a reassignment, with KIP-455's
adding/removing sets (Kafka's controller ReplicaAssignment), and the checks an
AlterPartitionReassignments request goes through. Pure: the controller persists
the result in the topic znode and drives the replicas.

While a reassignment runs, `replicas` is the full set: the target replicas
first, then the original replicas that are leaving. `adding` are the target
replicas that were not there before, `removing` the originals not in the target.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Collection, Iterable, Mapping, Sequence

from core.error_codes import ErrorCode


class ReassignmentError(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error

    @property
    def code(self) -> ErrorCode:
        return self.error


def _distinct(replicas: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(replicas))


def _minus(replicas: Sequence[int], others: Collection[int]) -> list[int]:
    return [r for r in replicas if r not in others]


@dataclasses.dataclass(frozen=True)
class ReplicaAssignment:
    replicas: list[int]
    adding: list[int] = dataclasses.field(default_factory=list)
    removing: list[int] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        # Own copies: a frozen value must not change through a list the caller still holds.
        object.__setattr__(self, "replicas", [int(r) for r in self.replicas])
        object.__setattr__(self, "adding", [int(r) for r in self.adding])
        object.__setattr__(self, "removing", [int(r) for r in self.removing])
        # Invariants every assignment built by reassign_to keeps; a znode that breaks
        # them was not written by a controller, so fail loudly.
        if len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"duplicate replicas in {self.replicas}")
        if not set(self.adding) <= set(self.replicas) or not set(self.removing) <= set(self.replicas):
            raise ValueError(f"adding {self.adding} / removing {self.removing} not within replicas {self.replicas}")
        if set(self.adding) & set(self.removing):
            raise ValueError(f"replicas both added and removed: {sorted(set(self.adding) & set(self.removing))}")

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> list[int]:
        return _minus(self.replicas, set(self.removing))

    @property
    def original_replicas(self) -> list[int]:
        return _minus(self.replicas, set(self.adding))

    def reassign_to(self, target: Sequence[int]) -> "ReplicaAssignment":
        """A reassignment from the original replicas (not from an ongoing
        reassignment's target) to `target`. Targeting the originals again is a
        cancellation and yields a plain assignment."""
        original = self.original_replicas
        full = _distinct([*target, *original])
        return ReplicaAssignment(full, _minus(full, set(original)), _minus(full, set(target)))

    def cancel(self) -> "ReplicaAssignment":
        if not self.is_being_reassigned:
            raise ReassignmentError(ErrorCode.no_reassignment_in_progress,
                                    "No partition reassignment is in progress.")
        return self.reassign_to(self.original_replicas)

    def remove_replica(self, replica: int) -> "ReplicaAssignment":
        return ReplicaAssignment(_minus(self.replicas, {replica}), _minus(self.adding, {replica}),
                                 _minus(self.removing, {replica}))

    def is_complete(self, isr: Collection[int]) -> bool:
        """Every target replica has caught up (joined the ISR): the controller may
        now move leadership if needed and drop the removing replicas."""
        isr = set(isr)
        return all(r in isr for r in self.target_replicas)

    def to_json(self) -> dict[str, list[int]]:
        """One partition's slice of the topic znode (version 2+): its entry in
        "partitions", "adding_replicas" and "removing_replicas"."""
        return {"replicas": list(self.replicas), "adding_replicas": list(self.adding),
                "removing_replicas": list(self.removing)}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "ReplicaAssignment":
        return cls(list(body["replicas"]), list(body.get("adding_replicas", ())),
                   list(body.get("removing_replicas", ())))


def topic_znode_fields(assignments: Mapping[int, ReplicaAssignment]) -> dict[str, dict[str, list[int]]]:
    """The "partitions", "adding_replicas" and "removing_replicas" maps of
    /brokers/topics/<topic>, keyed by partition as a string. Like Kafka's
    TopicZNode.encode, a partition appears in adding/removing only when its set
    is non-empty."""
    partitions: dict[str, list[int]] = {}
    adding: dict[str, list[int]] = {}
    removing: dict[str, list[int]] = {}
    for partition, assignment in sorted(assignments.items()):
        key = str(partition)
        partitions[key] = list(assignment.replicas)
        if assignment.adding:
            adding[key] = list(assignment.adding)
        if assignment.removing:
            removing[key] = list(assignment.removing)
    return {"partitions": partitions, "adding_replicas": adding, "removing_replicas": removing}


def assignments_from_topic_znode(body: Mapping[str, Any]) -> dict[int, ReplicaAssignment]:
    """The inverse of topic_znode_fields; version-1 znodes (no adding/removing
    maps) read as plain assignments."""
    adding = body.get("adding_replicas") or {}
    removing = body.get("removing_replicas") or {}
    return {int(key): ReplicaAssignment(list(replicas), list(adding.get(key, ())), list(removing.get(key, ())))
            for key, replicas in body.get("partitions", {}).items()}


def validate_target(target: Sequence[int], live_or_registered_brokers: Collection[int],
                    current: ReplicaAssignment | None = None) -> None:
    """AlterPartitionReassignments checks on a target replica list, with Kafka's
    messages; raises ReassignmentError(INVALID_REPLICA_ASSIGNMENT). With
    `current`, only the replicas the reassignment would add must be among the
    brokers (a dead broker may stay in its own assignment), as Kafka's
    validateReplicas; without it, every target replica must be."""
    target = list(target)
    if not target:
        raise ReassignmentError(ErrorCode.invalid_replica_assignment,
                                "Empty replica list specified in partition reassignment.")
    if len(set(target)) != len(target):
        raise ReassignmentError(ErrorCode.invalid_replica_assignment,
                                f"Duplicate replica ids in partition reassignment replica list: {target}")
    if any(r < 0 for r in target):
        raise ReassignmentError(ErrorCode.invalid_replica_assignment, f"Invalid broker id in replica list: {target}")
    must_exist = current.reassign_to(target).adding if current is not None else target
    if not set(must_exist) <= set(live_or_registered_brokers):
        raise ReassignmentError(ErrorCode.invalid_replica_assignment,
                                f"Replica assignment has brokers that are not alive. Replica list: {must_exist}, "
                                f"live broker list: {sorted(live_or_registered_brokers)}")


def build_reassignment(current: ReplicaAssignment, target: Sequence[int] | None,
                       live_or_registered_brokers: Collection[int]) -> ReplicaAssignment:
    """One partition of an AlterPartitionReassignments request: `target` None
    cancels. Cancelling a partition that is not being reassigned is
    NO_REASSIGNMENT_IN_PROGRESS (Kafka's maybeBuildReassignment)."""
    if target is None:
        return current.cancel()
    validate_target(target, live_or_registered_brokers, current)
    return current.reassign_to(target)
