"""The classic group coordinator of one ``__consumer_offsets`` partition:
membership (Kafka's GroupCoordinator, without threads) over the groups as
stored in the partition (``metadata_manager.GroupMetadataManager``, Kafka's
GroupMetadataManager: offsets, records, loading, expiration).

It owns the groups whose ids hash to its partition: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, rebalances and generations, and the request checks
of OffsetCommit / TxnOffsetCommit / OffsetFetch / DeleteGroups /
OffsetDelete, whose storing the manager does. State changes that must
survive the coordinator are written as records (``records.py``) through the
injected ``append_records`` (see the manager for its contract); ``load``
rebuilds everything from those records, which is how a coordinator on a
restarted broker, or on the new leader of the partition, takes over.

One class, GroupCoordinator, in four files along Kafka's request families:
this one holds its state, ownership (loading, unloading), the request checks
every API shares, DescribeGroups / ListGroups / DeleteGroups and inspection;
``rebalance_protocol.py`` JoinGroup, rebalances and SyncGroup;
``member_sessions.py`` Heartbeat, session expiry and LeaveGroup;
``offset_requests.py`` OffsetCommit / OffsetFetch / TxnOffsetCommit,
transaction completion, OffsetDelete and the retention sweep.

Driving it (what the owning actor does):

* All calls happen on one thread (the actor's event loop); nothing here
  blocks or locks.
* Requests that wait (JoinGroup, SyncGroup, OffsetCommit) answer through a
  callback, invoked exactly once, possibly before the method returns. The
  others return their answer.
* Time: delayed operations (sessions, rebalance timeouts, the initial
  rebalance delay, the periodic offset-expiration sweep) live on the injected
  ``delayed`` timer; the driver advances it (``AsyncTimerDriver``). ``clock``
  is wall-clock milliseconds for the timestamps that are persisted (commit
  times, state times), so it must be epoch time, not the monotonic clock.
  The delayed operations (``delayed_ops.py``) call back ``try_complete_*``
  and ``on_complete_*`` / ``on_expire_*`` (rebalance_protocol.py,
  member_sessions.py).
* Ownership: ``load(records)`` (or ``begin_loading`` / ``replay`` or
  ``replay_batches`` / ``complete_loading`` for a partition read in chunks) when this broker
  becomes the partition's leader; ``unload()`` when it stops being leader.
  Before loading and after unloading every group request is answered
  NOT_COORDINATOR; while loading, COORDINATOR_LOAD_IN_PROGRESS (except where
  Kafka answers otherwise, see ``sync_group`` and ``heartbeat``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Callable, Iterable, Optional

from cluster.groups.api import GroupDescription, GroupListing, JoinGroupResult, MemberDescription, SyncGroupResult
from cluster.groups.config import GroupConfig
from cluster.groups.group import GroupMetadata, GroupState
from cluster.groups.log_batches import LogBatch
from cluster.groups.member_sessions import MemberSessions
from cluster.groups.metadata_manager import AppendRecords, CommitCallback, CoordinatorStatus, GroupMetadataManager
from cluster.groups.offset_requests import OffsetRequests
from cluster.groups.rebalance_protocol import RebalanceProtocol
from cluster.groups.records import partition_for_group
from core.error_codes import ErrorCode
from delayed.operation import DelayedOperationPurgatory
from delayed.timing_wheel import SystemTimer

__all__ = ["AppendRecords", "CommitCallback", "CoordinatorStatus", "GroupCoordinator"]

log = logging.getLogger("raykafka.groups")

S = GroupState


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator(RebalanceProtocol, MemberSessions, OffsetRequests):
    def __init__(
        self,
        timer: SystemTimer | DelayedOperationPurgatory,
        append_records: AppendRecords,
        config: Optional[GroupConfig] = None,
        clock: Optional[Callable[[], int]] = None,
        *,
        partition: Optional[int] = None,
        member_id_suffix: Optional[Callable[[], str]] = None,
        expire_offsets_periodically: bool = True,
    ) -> None:
        """
        ``timer``: the actor's SystemTimer (a purgatory is created on it), or
        a purgatory to share (its timer is used for the expiration sweep).
        ``partition``: the ``__consumer_offsets`` partition this coordinator
        owns; groups that hash elsewhere get NOT_COORDINATOR. None accepts
        every group (tests, single-partition setups).
        ``member_id_suffix``: makes the unique part of new member ids (Kafka:
        a random UUID); injectable for deterministic tests.
        """
        if isinstance(timer, DelayedOperationPurgatory):
            self._purgatory = timer
            self._timer: Optional[SystemTimer] = getattr(timer, "_timer", None)
        else:
            self._timer = timer
            self._purgatory = DelayedOperationPurgatory(
                f"group-coordinator-{partition if partition is not None else 'all'}", timer
            )
        self.config = config or GroupConfig()
        self._clock = clock or _wall_clock_ms
        self.partition = partition
        self._member_id_suffix = member_id_suffix or (lambda: str(uuid.uuid4()))
        # Prefix of every watch key of ours: lets several coordinators share
        # one purgatory and lets unload() cancel exactly our operations.
        self._key_space = ("group-coordinator", id(self))
        # The groups as stored in the partition: cache, offsets, records, loading.
        self.manager = GroupMetadataManager(append_records, self.config, self._clock, self._timer, self,
                                            expire_offsets_periodically=expire_offsets_periodically,
                                            partition=partition)

    # ======================================================================
    # ownership: loading and unloading (the manager's, with our part on
    # each group that comes or goes)
    # ======================================================================

    @property
    def status(self) -> CoordinatorStatus:
        return self.manager.status

    def begin_loading(self) -> None:
        """This broker became leader of the partition: answer
        COORDINATOR_LOAD_IN_PROGRESS until ``complete_loading``."""
        self.manager.begin_loading()

    def replay(self, records: Iterable[tuple[Optional[bytes], Optional[bytes]]]) -> None:
        self.manager.replay(records)

    def replay_batches(self, batches: Iterable[LogBatch]) -> None:
        self.manager.replay_batches(batches)

    def complete_loading(self) -> None:
        self.manager.complete_loading()

    def load(self, records: Iterable[tuple[Optional[bytes], Optional[bytes]]]) -> None:
        self.manager.load(records)

    def unload(self) -> None:
        """This broker is no longer the partition's leader (see on_groups_unloaded)."""
        self.manager.unload()

    def on_group_loaded(self, group: GroupMetadata) -> None:
        if group.size > self.config.group_max_size:
            # group.max.size was lowered: rebalance so the excess members are
            # refused on rejoin (and everyone gets to commit first).
            self._prepare_rebalance(group, f"freshly-loaded group is over capacity ({self.config.group_max_size})")
        # The loaded members get a full session from now to find us.
        for member in list(group.members.values()):
            self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def on_groups_unloaded(self, groups: list[GroupMetadata]) -> None:
        """Waiting JoinGroup and SyncGroup requests are answered NOT_COORDINATOR
        (their clients then find the new coordinator); the timer operations
        are cancelled."""
        for group in groups:
            group.transition_to(S.DEAD)
            # Kafka answers the join callbacks of a rebalancing group and the sync
            # callbacks of a completing/stable one; we answer whatever waits, so
            # no request (e.g. a static rejoin waiting on its store) is left open.
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(member, JoinGroupResult.failed(member.member_id, ErrorCode.not_coordinator))
                group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.not_coordinator))
            group.pending_sync_members.clear()
        for key in self._purgatory.watch_keys():
            if isinstance(key, tuple) and key and key[0] == self._key_space:
                self._purgatory.cancel_for_key(key)

    # ======================================================================
    # request validation
    # ======================================================================

    def _check_group_status(self, group_id: Optional[str], allow_empty_group_id: bool) -> Optional[ErrorCode]:
        """Kafka's validateGroupStatus. OffsetCommit, OffsetFetch,
        DescribeGroups and DeleteGroups accept the empty group id (old
        clients commit under it); the membership APIs do not."""
        if group_id is None or (not allow_empty_group_id and group_id == ""):
            return ErrorCode.invalid_group_id
        if self.partition is not None and (
            partition_for_group(group_id, self.config.offsets_topic_num_partitions) != self.partition
        ):
            return ErrorCode.not_coordinator
        if self.status is CoordinatorStatus.LOADING:
            return ErrorCode.coordinator_load_in_progress
        if self.status is not CoordinatorStatus.ACTIVE:
            return ErrorCode.not_coordinator
        return None

    @staticmethod
    def _validate_current_member(group: GroupMetadata, member_id: str,
                                 group_instance_id: Optional[str]) -> Optional[ErrorCode]:
        """A static member must be the instance's current member id (else it
        is an older incarnation: FENCED_INSTANCE_ID); any member must exist."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    # ======================================================================
    # DescribeGroups / ListGroups
    # ======================================================================

    def describe_group(self, group_id: str) -> GroupDescription:
        error = self._check_group_status(group_id, allow_empty_group_id=True)
        if error is not None:
            return GroupDescription(group_id, error, state="")
        group = self.manager.group(group_id)
        if group is None:
            return GroupDescription(group_id, ErrorCode.none, state=S.DEAD.value)
        if group.is_(S.STABLE):
            protocol = group.protocol_name or ""
            members = tuple(
                MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                  m.metadata(protocol), m.assignment)
                for m in group.members.values())
        else:
            protocol = ""
            members = tuple(
                MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                for m in group.members.values())
        return GroupDescription(group_id, ErrorCode.none, group.state.value, group.protocol_type or "", protocol, members)

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        return [self.describe_group(group_id) for group_id in group_ids]

    def list_groups(self, states_filter: Optional[Iterable[str]] = None) -> tuple[ErrorCode, list[GroupListing]]:
        """ListGroups; ``states_filter`` (KIP-518) empty/None = all states.
        States match case-insensitively."""
        if self.status is CoordinatorStatus.LOADING:
            return ErrorCode.coordinator_load_in_progress, []
        if self.status is not CoordinatorStatus.ACTIVE:
            return ErrorCode.none, []
        wanted = {state.lower() for state in states_filter or ()}
        return ErrorCode.none, [
            GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.manager.all_groups()
            if not wanted or g.state.value.lower() in wanted
        ]

    # ======================================================================
    # DeleteGroups
    # ======================================================================

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: only groups without members (Empty) can go;
        NON_EMPTY_GROUP otherwise. Their offsets and metadata are tombstoned."""
        errors: dict[str, ErrorCode] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            if group_id in errors or any(g.group_id == group_id for g in eligible):
                continue
            error = self._check_group_status(group_id, allow_empty_group_id=True)
            if error is not None:
                errors[group_id] = error
                continue
            group = self.manager.group(group_id)
            if group is None or group.is_(S.DEAD):
                errors[group_id] = ErrorCode.group_id_not_found
            elif group.is_(S.EMPTY):
                group.transition_to(S.DEAD)
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.non_empty_group
        if eligible:
            self.manager.cleanup_group_metadata(eligible, lambda g: g.remove_all_offsets())
            for group in eligible:
                errors[group.group_id] = ErrorCode.none
        return errors

    # ======================================================================
    # inspection
    # ======================================================================

    def group(self, group_id: str) -> Optional[GroupMetadata]:
        return self.manager.group(group_id)

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        """The live groups (read-only use, please)."""
        return self.manager.groups

    def snapshot(self) -> dict[str, dict]:
        """Everything that is persisted, as plain data (GroupMetadataManager.snapshot)."""
        return self.manager.snapshot()
