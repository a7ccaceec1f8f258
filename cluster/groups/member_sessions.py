"""Heartbeat and LeaveGroup: members' sessions (the delayed heartbeat and
its expiration) and members leaving, static or not (Kafka's
GroupCoordinator.handleHeartbeat, handleLeaveGroup)."""

from __future__ import annotations

import logging
from typing import Callable, Optional, Sequence

from cluster.groups.api import (UNKNOWN_MEMBER_ID, JoinGroupResult, LeaveGroupResult, LeavingMember, MemberLeaveResult,
                                SyncGroupResult)
from cluster.groups.delayed_ops import DelayedHeartbeat
from cluster.groups.group import GroupMetadata, GroupState, MemberMetadata
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.groups")

S = GroupState


class MemberSessions:
    """Part of GroupCoordinator (group_coordinator.py), which holds the
    state these methods use: ``manager`` (the groups as stored), ``config``,
    the purgatory of delayed operations and the clock, and the methods of the
    other parts."""
    # ======================================================================
    # Heartbeat and sessions
    # ======================================================================

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: Optional[str],
                  generation_id: int) -> ErrorCode:
        """Heartbeat. REBALANCE_IN_PROGRESS tells a member to rejoin."""
        error = self._check_group_status(group_id, allow_empty_group_id=False)
        if error is ErrorCode.coordinator_load_in_progress:
            # Loading: nothing to check against yet; don't make members rejoin.
            return ErrorCode.none
        if error is not None:
            return error
        group = self.manager.group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(S.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(S.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.get(member_id)
        # Heartbeats count in CompletingRebalance too: consumers start them
        # right after the JoinGroup answer.
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        if group.is_(S.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def _member_key(self, group: GroupMetadata | str, member_id: str) -> tuple:
        group_id = group if isinstance(group, str) else group.group_id
        return (self._key_space, "member", group_id, member_id)

    def _join_key(self, group: GroupMetadata) -> tuple:
        return (self._key_space, "join", group.group_id)

    def _sync_key(self, group: GroupMetadata) -> tuple:
        return (self._key_space, "sync", group.group_id)

    def _complete_and_schedule_next_heartbeat_expiration(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(self, group: GroupMetadata, member: MemberMetadata,
                                               timeout_ms: int) -> None:
        key = self._member_key(group, member.member_id)
        # Settle the current session deadline, then start the next one.
        member.heartbeat_satisfied = True
        self._purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self._purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms), [key])

    def _add_pending_member_expiration(self, group: GroupMetadata, member_id: str, timeout_ms: int) -> None:
        self._purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms), [self._member_key(group, member_id)])

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata, member_id: str) -> None:
        # The member is gone from the group, so its deadline completes.
        self._purgatory.check_and_complete(self._member_key(group, member_id))

    # -- the delayed heartbeat's part (delayed_ops.GroupDelays) --

    def try_complete_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool:
        """A session is kept by a heartbeat (a pending member id: by joining with it)."""
        if group.is_(S.DEAD):
            return force_complete()
        if is_pending:
            # A pending member id's deadline is met by joining with it.
            return force_complete() if group.has(member_id) else False
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        """A session ran out: the member (or pending member id) is gone."""
        if group.is_(S.DEAD):
            return
        if is_pending:
            log.info("pending member %s of group %s expired", member_id, group.group_id)
            self._remove_pending_member_and_update_group(group, member_id)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.has_satisfied_heartbeat():
            log.info("member %s of group %s failed (session expired); removing it", member_id, group.group_id)
            self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        # A new member can time out while its JoinGroup waits: answer it, so a
        # still-live client rejoins.
        group.maybe_invoke_join_callback(member, JoinGroupResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        # Not in Kafka (which mutes the connection while a request waits, so a
        # member cannot leave with a SyncGroup pending): answer it too.
        group.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(S.PREPARING_REBALANCE):
            self._purgatory.check_and_complete(self._join_key(group))

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(S.PREPARING_REBALANCE):
            self._purgatory.check_and_complete(self._join_key(group))

    # ======================================================================
    # LeaveGroup
    # ======================================================================

    def leave_group(self, group_id: str, members: Sequence[LeavingMember]) -> LeaveGroupResult:
        """LeaveGroup, batched (v3+; for v0-v2 pass the one member and use its
        result as the response error). A member id of "" with a group
        instance id removes that static member administratively."""
        error = self._check_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            return LeaveGroupResult(error)
        group = self.manager.group(group_id)
        if group is None:
            return LeaveGroupResult(ErrorCode.none, tuple(
                MemberLeaveResult(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id) for m in members))
        if group.is_(S.DEAD):
            return LeaveGroupResult(ErrorCode.coordinator_not_available)
        results = []
        for leaving in members:
            member_id = leaving.member_id
            if member_id == UNKNOWN_MEMBER_ID:
                current = (group.current_static_member_id(leaving.group_instance_id)
                           if leaving.group_instance_id is not None else None)
                if current is None:
                    error = ErrorCode.unknown_member_id
                else:
                    self._remove_current_member_from_group(group, current, leaving.reason)
                    error = ErrorCode.none
            elif group.is_pending_member(member_id):
                self._remove_pending_member_and_update_group(group, member_id)
                self._purgatory.check_and_complete(self._member_key(group, member_id))
                error = ErrorCode.none
            else:
                error = self._validate_current_member(group, member_id, leaving.group_instance_id)
                if error is None:
                    self._remove_current_member_from_group(group, member_id, leaving.reason)
                    error = ErrorCode.none
            results.append(MemberLeaveResult(member_id, leaving.group_instance_id, error))
        return LeaveGroupResult(ErrorCode.none, tuple(results))

    def _remove_current_member_from_group(self, group: GroupMetadata, member_id: str, reason: Optional[str]) -> None:
        member = group.get(member_id)
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {reason or 'none'}")
        self._remove_heartbeat_for_leaving_member(group, member_id)
