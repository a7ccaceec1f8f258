"""A KIP-848 consumer group and its members, and the reconciliation of a
member's assignment towards the group's target (Kafka's
CurrentAssignmentBuilder), as plain values.

Epochs: the *group epoch* moves whenever membership or subscriptions
change; the *assignment epoch* is the group epoch the target assignment was
computed at; a member's *member epoch* reaches the assignment epoch once it
holds its target, or everything of its target that others have released.
A partition goes to its new owner only once its previous owner has revoked
it (no partition has two owners at any moment): until then the new owner
stays in UNRELEASED_PARTITIONS and the old one in UNREVOKED_PARTITIONS.
"""
from __future__ import annotations

import dataclasses
import enum
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional

from cluster.groups.consumer.records import Assignment

# ConsumerGroupHeartbeat's special member epochs.
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's MemberState (the byte stored in CurrentMemberAssignment)."""
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def union(a: Assignment, b: Assignment) -> Assignment:
    result = dict(a)
    for t, ps in b.items():
        result[t] = result.get(t, frozenset()) | ps
    return {t: ps for t, ps in result.items() if ps}


def minus(a: Assignment, b: Assignment) -> Assignment:
    result = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in result.items() if ps}


def intersects(a: Assignment, b: Assignment) -> bool:
    return any(ps & b.get(t, frozenset()) for t, ps in a.items())


def normalized(a: Optional[Assignment]) -> Optional[Assignment]:
    return None if a is None else {t: frozenset(ps) for t, ps in a.items() if ps}


def is_subset(a: Assignment, b: Assignment) -> bool:
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    instance_id: Optional[str] = None
    rack_id: Optional[str] = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: Optional[str] = None
    server_assignor: Optional[str] = None
    rebalance_timeout_ms: int = -1
    # A classic member (JoinGroup/SyncGroup) in a consumer group: its protocols.
    classic_protocols: Optional[tuple[tuple[str, bytes], ...]] = None
    classic_session_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_protocols is not None

    def replace(self, **changes) -> "ConsumerMember":
        return dataclasses.replace(self, **changes)

    @property
    def held(self) -> Assignment:
        """What the member may still be consuming: assigned and not yet revoked."""
        return union(self.assigned, self.pending_revocation)


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              held_by_other: Callable[[uuid.UUID, int], bool], owned: Optional[Assignment]) -> ConsumerMember:
    """The member's next state given the target assignment at
    ``target_epoch`` and what it says it owns (None: not reported this time)."""
    state = member.state
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or intersects(owned, member.pending_revocation):
            return member  # still revoking
        return _next(member, target_epoch, target, held_by_other)
    if state is MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    return _next(member, target_epoch, target, held_by_other)


def _next(member: ConsumerMember, target_epoch: int, target: Assignment,
          held_by_other: Callable[[uuid.UUID, int], bool]) -> ConsumerMember:
    kept = {t: ps & target.get(t, frozenset()) for t, ps in member.assigned.items()}
    kept = {t: ps for t, ps in kept.items() if ps}
    revoking = minus(member.assigned, target)
    if revoking:
        # Revoke first, at the current epoch; nothing new meanwhile.
        return member.replace(state=MemberState.UNREVOKED_PARTITIONS, assigned=kept, pending_revocation=revoking)
    new_assigned = dict(kept)
    unreleased = False
    for t, ps in minus(target, member.assigned).items():
        free = frozenset(p for p in ps if not held_by_other(t, p))
        if free != ps:
            unreleased = True
        if free:
            new_assigned[t] = new_assigned.get(t, frozenset()) | free
    epoch_changes = {} if member.member_epoch == target_epoch else {
        "member_epoch": target_epoch, "previous_member_epoch": member.member_epoch}
    return member.replace(state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
                          assigned=new_assigned, pending_revocation={}, **epoch_changes)


class ConsumerGroup:
    """One consumer group's state. The coordinator changes it; this class
    keeps the indexes (static members, partition holders) consistent."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        # topic name -> (topic id, partitions) of the subscribed topics, as of the group epoch
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        self._holders: dict[tuple[uuid.UUID, int], str] = {}  # partition -> member holding it
        # partition -> the member epoch at which its holder got it (KIP-1251's
        # assignment epoch; not persisted: after a load, the holder's epoch then)
        self._assigned_at: dict[tuple[uuid.UUID, int], int] = {}
        self.dead = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def holder(self, topic_id: uuid.UUID, partition: int) -> Optional[str]:
        return self._holders.get((topic_id, partition))

    def assigned_at(self, topic_id: uuid.UUID, partition: int) -> Optional[int]:
        """The member epoch at which the partition's holder got it."""
        return self._assigned_at.get((topic_id, partition))

    def put_member(self, member: ConsumerMember) -> None:
        old = self.members.get(member.member_id)
        kept: dict[tuple[uuid.UUID, int], int] = {}
        if old is not None:
            kept = {(t, p): self._assigned_at[(t, p)] for t, ps in old.held.items() for p in ps
                    if self._holders.get((t, p)) == old.member_id and (t, p) in self._assigned_at}
            self._release(old)
        for t, ps in member.held.items():
            for p in ps:
                holder = self._holders.get((t, p))
                # The invariant the whole protocol exists for.
                assert holder is None or holder == member.member_id, (
                    f"group {self.group_id}: partition {t}-{p} held by {holder} given to {member.member_id}")
                self._holders[(t, p)] = member.member_id
                self._assigned_at[(t, p)] = kept.get((t, p), member.member_epoch)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> Optional[ConsumerMember]:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
            if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def _release(self, member: ConsumerMember) -> None:
        for t, ps in member.held.items():
            for p in ps:
                if self._holders.get((t, p)) == member.member_id:
                    del self._holders[(t, p)]
                    self._assigned_at.pop((t, p), None)

    def subscribed_topic_names(self, matches: Callable[[str], list[str]]) -> set[str]:
        """Every topic name some member subscribes to, regexes resolved by ``matches``."""
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                names.update(matches(member.subscribed_topic_regex))
        return names

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's rule), else the default."""
        votes: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        if not votes:
            return default
        return max(sorted(votes), key=lambda name: votes[name])
