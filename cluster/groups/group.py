"""A classic consumer group's in-memory state (Kafka's GroupMetadata and
MemberMetadata).

The group is a state machine:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup persisted--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --everyone gone--> Empty
    any --deleted, unloaded, expired--> Dead

Members wait in JoinGroup (PreparingRebalance) and SyncGroup
(CompletingRebalance); their pending answers are callbacks stored on the
member, invoked at most once.

Nothing here talks to the timer or the log; the coordinator does.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from core.error_codes import ErrorCode

from cluster.groups.api import (
    JoinGroupMember,
    JoinGroupResult,
    OffsetAndMetadata,
    SyncGroupResult,
    TopicPartition,
)
from cluster.groups.consumer_protocol import CONSUMER_PROTOCOL_TYPE, decode_subscription_topics

__all__ = [
    "CommittedOffset",
    "GroupMetadata",
    "GroupState",
    "IllegalStateError",
    "JoinCallback",
    "MemberMetadata",
    "SyncCallback",
    "invoke_callback",
]

log = logging.getLogger("raykafka.groups")

JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]


class IllegalStateError(RuntimeError):
    """A transition or operation the group's state does not allow: a bug in
    the caller, never a client error."""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


# Kafka's validPreviousStates.
_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}


def invoke_callback(callback: Callable, result: object) -> None:
    # A failing response callback (the actor's code) must not leave the group
    # half-updated: the state change that led to the answer has happened.
    try:
        callback(result)
    except Exception:
        log.exception("group response callback failed")


class MemberMetadata:
    """One member. ``supported_protocols`` is the member's ordered preference
    list of (protocol name, metadata)."""

    def __init__(
        self,
        member_id: str,
        group_instance_id: Optional[str],
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        supported_protocols: Sequence[tuple[str, bytes]],
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols: list[tuple[str, bytes]] = [(n, bytes(m)) for n, m in supported_protocols]
        self.assignment = assignment
        self.awaiting_join_callback: Optional[JoinCallback] = None
        self.awaiting_sync_callback: Optional[SyncCallback] = None
        # Joined but not yet through a completed rebalance: such a member must
        # really heartbeat (see has_satisfied_heartbeat).
        self.is_new = False
        # Set for the instant a heartbeat completes the pending expectation.
        self.heartbeat_satisfied = False

    @property
    def is_static_member(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync_callback is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise IllegalStateError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order."""
        if len(protocols) != len(self.supported_protocols):
            return False
        return all(
            name == mine_name and bytes(metadata) == mine_metadata
            for (name, metadata), (mine_name, mine_metadata) in zip(protocols, self.supported_protocols)
        )

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among those every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise IllegalStateError(f"member {self.member_id} supports none of the candidate protocols {candidates}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            # A new member can be expired while awaiting its first join.
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            # Waiting on the coordinator counts as alive.
            return True
        return self.heartbeat_satisfied


@dataclass(frozen=True)
class CommittedOffset:
    """A committed offset plus the order in which its record was appended,
    so that of two in-flight commits of a partition the later-appended one
    wins whatever order their appends complete in (Kafka compares the log
    offsets of the records). Offsets replayed from the log get sequences in
    log order, below those of every later append. ``None``: the record of a
    pending transactional commit is still being appended."""

    offset_and_metadata: OffsetAndMetadata
    append_sequence: Optional[int] = -1

    def older_than(self, other: "CommittedOffset") -> bool:
        """Kafka's CommitRecordMetadataAndOffset.olderThan: appended before ``other``."""
        return (self.append_sequence if self.append_sequence is not None else -1) < (
            other.append_sequence if other.append_sequence is not None else -1)


class GroupMetadata:
    def __init__(self, group_id: str, initial_state: GroupState, clock: Callable[[], int]) -> None:
        self.group_id = group_id
        self.state = initial_state
        self._clock = clock
        # When the group entered its current state (wall clock, ms). Offsets
        # of an Empty group expire relative to it. None when loaded from a
        # record too old to carry it.
        self.current_state_timestamp: Optional[int] = clock()
        self.protocol_type: Optional[str] = None
        self.protocol_name: Optional[str] = None
        self.generation_id = 0
        self.leader_id: Optional[str] = None
        # Insertion-ordered: leader fallback and member listings follow join order.
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not yet joined.
        self.pending_members: set[str] = set()
        # Members that got their JoinGroup answer but have not sent SyncGroup.
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        # protocol name -> number of members supporting it.
        self.supported_protocols: Counter[str] = Counter()
        # A member joined an initial (generation 0) rebalance: wait another
        # initial delay.
        self.new_member_added = False
        # Topics the members subscribe to (consumer protocol only); None when
        # unknown (other protocol types, unparseable metadata).
        self.subscribed_topics: Optional[set[str]] = None
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        # Commits whose records are being appended: visible to
        # require_stable fetches, protected from expiry.
        self.pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        # TxnOffsetCommits (KIP-98) per producer id, from their append until
        # the producer's COMMIT/ABORT marker reaches the offsets partition:
        # invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT for require_stable
        # (KIP-447), and they keep the group alive. append_sequence is None
        # while the record is being appended.
        self.pending_txn_offset_commits: dict[int, dict[TopicPartition, CommittedOffset]] = {}

    # -- state -------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[target]:
            raise IllegalStateError(
                f"group {self.group_id} should be in one of "
                f"{sorted(s.value for s in _VALID_PREVIOUS_STATES[target])} before moving to {target}, "
                f"but is {self.state}"
            )
        self.state = target
        self.current_state_timestamp = self._clock()

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # -- members -------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        member = self.members.get(member_id)
        if member is None:
            raise IllegalStateError(f"group {self.group_id} has no member {member_id}")
        return member

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, callback: Optional[JoinCallback] = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise IllegalStateError(
                    f"static member {member.group_instance_id} already exists in group {self.group_id}"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise IllegalStateError("member protocol type differs from the group's")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.awaiting_join_callback = callback
        if callback is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Optional[MemberMetadata]:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            self.supported_protocols += Counter()  # drop zero counts
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Sequence[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: Optional[JoinCallback],
    ) -> Optional[JoinCallback]:
        """Replace the member's protocols, timeouts and join callback. Returns
        a join callback this one superseded (a duplicate JoinGroup) so the
        caller can answer it rather than leave it hanging."""
        self.supported_protocols.subtract(member.protocol_names())
        member.supported_protocols = [(n, bytes(m)) for n, m in protocols]
        self.supported_protocols.update(member.protocol_names())
        self.supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        superseded = member.awaiting_join_callback
        if callback is not None and superseded is None:
            self.num_members_awaiting_join += 1
        elif callback is None and superseded is not None:
            self.num_members_awaiting_join -= 1
        member.awaiting_join_callback = callback
        return superseded if superseded is not callback else None

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> bool:
        callback = member.awaiting_join_callback
        if callback is None:
            return False
        member.awaiting_join_callback = None
        self.num_members_awaiting_join -= 1
        invoke_callback(callback, result)
        return True

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        callback = member.awaiting_sync_callback
        if callback is None:
            return False
        member.awaiting_sync_callback = None
        invoke_callback(callback, result)
        return True

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of any member: the rebalance waits
        for the slowest member's allowance."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- static members (KIP-345) -------------------------------------------

    def current_static_member_id(self, group_instance_id: str) -> Optional[str]:
        return self.static_members.get(group_instance_id)

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """A static member came back with a new member id: the old id is
        fenced (its waiting requests answered FENCED_INSTANCE_ID), everything
        else (assignment, leadership) carries over to the new id."""
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise IllegalStateError(f"cannot replace non-existing member {old_member_id}")
        self.maybe_invoke_join_callback(member, JoinGroupResult.failed(old_member_id, ErrorCode.fenced_instance_id))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        # Kafka leaves the old id in the pending-sync set, which makes the
        # sync deadline fire a needless rebalance; the new id owes the sync.
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    # -- pending members (KIP-394) -------------------------------------------

    def add_pending_member(self, member_id: str) -> None:
        if self.has(member_id):
            raise IllegalStateError(f"member {member_id} is already in group {self.group_id}")
        self.pending_members.add(member_id)

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    # -- protocols -------------------------------------------------------------

    def supports_protocols(self, member_protocol_type: str, member_protocols: Iterable[str]) -> bool:
        """Could a member with these protocols join? An empty group takes any
        non-empty protocol list; otherwise the type must match and at least one
        protocol must be supported by every current member."""
        names = set(member_protocols)
        if self.is_(GroupState.EMPTY):
            return bool(member_protocol_type) and bool(names)
        return self.protocol_type == member_protocol_type and any(
            self.supported_protocols.get(name, 0) == len(self.members) for name in names
        )

    def candidate_protocols(self) -> set[str]:
        return {name for name, count in self.supported_protocols.items() if count == len(self.members)}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members
        support; most votes wins. Kafka breaks ties by hash order; we take the
        protocol that reached the top count first, in member order, so the
        choice is deterministic."""
        if not self.members:
            raise IllegalStateError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(member.vote(candidates) for member in self.members.values())
        best = max(votes.values())
        return next(name for name in votes if votes[name] == best)

    # -- generations -------------------------------------------------------------

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader did not rejoin, hand leadership to a member that did.
        False when nobody rejoined (or there is no leader at all)."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def current_member_metadata(self) -> tuple[JoinGroupMember, ...]:
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE) or self.protocol_name is None:
            raise IllegalStateError(f"cannot list member metadata of group in state {self.state}")
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # -- subscriptions -------------------------------------------------------------

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> Optional[set[str]]:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = decode_subscription_topics(member.metadata(self.protocol_name))
            if member_topics is None:
                log.warning("group %s: unreadable consumer subscription of member %s",
                            self.group_id, member.member_id)
                return None
            topics |= member_topics
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    # -- offsets --------------------------------------------------------------------

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits) or bool(self.pending_txn_offset_commits)

    def offset(self, tp: TopicPartition) -> Optional[OffsetAndMetadata]:
        committed = self.offsets.get(tp)
        return committed.offset_and_metadata if committed is not None else None

    def all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: c.offset_and_metadata for tp, c in self.offsets.items()}

    def prepare_offset_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(self, tp: TopicPartition, committed: CommittedOffset) -> None:
        # Only a commit still pending lands: if the partition's offsets were
        # deleted meanwhile (OffsetDelete, topic deletion), the tombstone was
        # appended after this record, so dropping it matches the log.
        if tp in self.pending_offset_commits:
            current = self.offsets.get(tp)
            if current is None or current.older_than(committed):
                self.offsets[tp] = committed
        if self.pending_offset_commits.get(tp) == committed.offset_and_metadata:
            del self.pending_offset_commits[tp]

    def fail_pending_offset_write(self, tp: TopicPartition, offset: OffsetAndMetadata) -> None:
        if self.pending_offset_commits.get(tp) == offset:
            del self.pending_offset_commits[tp]

    # -- transactional offsets (Kafka's GroupMetadata *TxnOffsetCommit*) ------------

    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        pending = self.pending_txn_offset_commits.setdefault(producer_id, {})
        for tp, offset in offsets.items():
            pending[tp] = CommittedOffset(offset, None)

    def on_txn_offset_commit_append(self, producer_id: int, tp: TopicPartition, committed: CommittedOffset) -> None:
        """The record is in the log: the commit waits for the marker now. A
        commit removed meanwhile (deleted offsets, a later commit of the same
        producer) stays removed."""
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None:
            current = pending.get(tp)
            if current is not None and current.offset_and_metadata == committed.offset_and_metadata:
                pending[tp] = committed

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: TopicPartition) -> None:
        """The record never reached the log: the client gets the error and retries."""
        pending = self.pending_txn_offset_commits.get(producer_id)
        if pending is not None:
            pending.pop(tp, None)
            if not pending:
                del self.pending_txn_offset_commits[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool) -> int:
        """The producer's COMMIT (or ABORT) marker is in the offsets partition:
        its pending offsets become committed offsets, unless a commit
        appended after them is there already (or are dropped). Returns how
        many offsets were materialized."""
        pending = self.pending_txn_offset_commits.pop(producer_id, None)
        if not pending or not is_commit:
            return 0
        materialized = 0
        for tp, committed in pending.items():
            if committed.append_sequence is None:
                # Kafka fails here (the client only ends its transaction after
                # TxnOffsetCommit answered, so the record is in the log first);
                # a record still in flight would land after the marker.
                log.warning("group %s: transactional offset of producer %d for %s completed before its record "
                            "was appended; dropped", self.group_id, producer_id, tp)
                continue
            current = self.offsets.get(tp)
            if current is None or current.older_than(committed):
                self.offsets[tp] = committed
                materialized += 1
        return materialized

    def has_pending_offset_commits_from_producer(self, producer_id: int) -> bool:
        return producer_id in self.pending_txn_offset_commits

    @property
    def active_producers(self) -> set[int]:
        return set(self.pending_txn_offset_commits)

    def has_pending_offset_commits_for(self, tp: TopicPartition) -> bool:
        return tp in self.pending_offset_commits or any(
            tp in pending for pending in self.pending_txn_offset_commits.values())

    def pending_txn_partitions(self) -> set[TopicPartition]:
        return {tp for pending in self.pending_txn_offset_commits.values() for tp in pending}

    def remove_offsets(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Drops the partitions' committed offsets and their pending commits,
        transactional ones included; returns those that had any, each to be
        tombstoned (a tombstone is appended after the pending records, and a
        replay drops those too, as Kafka's newer coordinator does)."""
        removed = []
        for tp in partitions:
            had = self.pending_offset_commits.pop(tp, None) is not None
            for producer_id in list(self.pending_txn_offset_commits):
                pending = self.pending_txn_offset_commits[producer_id]
                if pending.pop(tp, None) is not None:
                    had = True
                if not pending:
                    del self.pending_txn_offset_commits[producer_id]
            if self.offsets.pop(tp, None) is not None or had:
                removed.append(tp)
        return removed

    def remove_all_offsets(self) -> list[TopicPartition]:
        """DeleteGroups: every partition with an offset, committed or pending."""
        return self.remove_offsets(
            list(dict.fromkeys([*self.offsets, *self.pending_offset_commits, *self.pending_txn_partitions()])))

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[TopicPartition, OffsetAndMetadata]:
        """Kafka 2.1+ retention (KIP-211): a group's offsets live as long as the
        group is in use.

        * Group with a protocol type, Empty: every offset expires once the
          group has been Empty for the retention period (measured from the
          state timestamp; from each commit if the timestamp is unknown).
        * Consumer group, Stable, subscriptions known: offsets of topics no
          member subscribes to expire by their commit timestamp.
        * No protocol type (standalone/"simple" consumers committing with
          generation -1): each offset expires by its commit timestamp.
        * Otherwise (rebalancing, unknown subscriptions): nothing expires.

        An explicit expire timestamp (OffsetCommit v1-v4 retention time)
        overrides all of that for its offset. Offsets with a commit in flight
        never expire, nor do those with a pending transactional commit (as
        Kafka's newer coordinator).
        """
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            state_ts = self.current_state_timestamp

            def base(c: OffsetAndMetadata) -> int:
                return state_ts if state_ts is not None else c.commit_timestamp

            expired = self._expired_offsets(now_ms, retention_ms, base, set())
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.is_(GroupState.STABLE)
        ):
            expired = self._expired_offsets(now_ms, retention_ms, lambda c: c.commit_timestamp, self.subscribed_topics)
        elif self.protocol_type is None:
            expired = self._expired_offsets(now_ms, retention_ms, lambda c: c.commit_timestamp, set())
        else:
            expired = {}
        for tp in expired:
            del self.offsets[tp]
        return expired

    def _expired_offsets(
        self,
        now_ms: int,
        retention_ms: int,
        base: Callable[[OffsetAndMetadata], int],
        subscribed: set[str],
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        expired = {}
        for tp, committed in self.offsets.items():
            offset = committed.offset_and_metadata
            if tp.topic in subscribed or self.has_pending_offset_commits_for(tp):
                continue
            if offset.expire_timestamp is None:
                if now_ms - base(offset) >= retention_ms:
                    expired[tp] = offset
            elif now_ms >= offset.expire_timestamp:
                expired[tp] = offset
        return expired

    def __repr__(self) -> str:
        return (
            f"GroupMetadata(group_id={self.group_id!r}, state={self.state}, generation={self.generation_id}, "
            f"protocol_type={self.protocol_type!r}, protocol={self.protocol_name!r}, leader={self.leader_id!r}, "
            f"members={list(self.members)})"
        )
