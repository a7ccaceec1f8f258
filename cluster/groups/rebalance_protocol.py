"""JoinGroup and SyncGroup: Kafka's rebalance protocol for classic groups
(GroupCoordinator.handleJoinGroup, prepareRebalance, onCompleteJoin,
handleSyncGroup), with the delayed join and the pending-sync expiration."""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Optional, Sequence

from cluster.groups.api import UNKNOWN_MEMBER_ID, JoinGroupResult, SyncGroupResult
from cluster.groups.delayed_ops import DelayedJoin, DelayedSync, InitialDelayedJoin
from cluster.groups.group import (GroupMetadata, GroupState, IllegalStateError, JoinCallback, MemberMetadata,
                                  SyncCallback, invoke_callback)
from core.error_codes import ErrorCode
from delayed.operation import DelayedOperation

log = logging.getLogger("raykafka.groups")

S = GroupState


class RebalanceProtocol:
    """Part of GroupCoordinator (group_coordinator.py), which holds the
    state these methods use: ``manager`` (the groups as stored), ``config``,
    the purgatory of delayed operations and the clock, and the methods of the
    other parts."""
    # ======================================================================
    # JoinGroup
    # ======================================================================

    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: Optional[str],
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        callback: JoinCallback,
        *,
        api_version: int = 9,
        reason: Optional[str] = None,
    ) -> None:
        """JoinGroup. ``callback(JoinGroupResult)`` runs once the member's
        place in the next generation is settled (immediately for errors and
        for members whose join changes nothing).

        ``api_version`` carries the version-dependent rules: v0 has no
        rebalance timeout (the session timeout is used), v4+ clients get
        MEMBER_ID_REQUIRED on their first join (KIP-394), v9+ static leaders
        may be told to skip assignment (KIP-814)."""
        error = self._check_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            invoke_callback(callback, JoinGroupResult.failed(member_id, error))
            return
        if api_version == 0:
            rebalance_timeout_ms = session_timeout_ms
        if not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            invoke_callback(callback, JoinGroupResult.failed(member_id, ErrorCode.invalid_session_timeout))
            return
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        group = self.manager.group(group_id)
        if group is None:
            # Only a member without an id may create a group; a member id for
            # a group we do not know belongs to a generation that is gone.
            if not is_unknown_member:
                invoke_callback(callback, JoinGroupResult.failed(member_id, ErrorCode.unknown_member_id))
                return
            group = self.manager.add_group(group_id)

        why = f"; client reason: {reason}" if reason else ""
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            invoke_callback(callback, JoinGroupResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown_member:
            self._do_new_member_join(group, group_instance_id, api_version >= 4, api_version >= 9, client_id,
                                     client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                     protocols, callback, why)
        else:
            self._do_current_member_join(group, member_id, group_instance_id, client_id, client_host,
                                         rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                         callback, why)
        # The join (or removal) may have been the last one the rebalance waited for.
        if group.is_(S.PREPARING_REBALANCE):
            self._purgatory.check_and_complete(self._join_key(group))

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.is_(S.PREPARING_REBALANCE):
            # Count members that already rejoined: the size is enforced for
            # the next generation, and members that will not rejoin are
            # about to be dropped.
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_members_awaiting_join < max_size
        # CompletingRebalance / Stable: members that did not rejoin are gone.
        return group.has(member_id) or group.size < max_size

    def _new_member_id(self, client_id: str, group_instance_id: Optional[str]) -> str:
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{self._member_id_suffix()}"

    @staticmethod
    def _join_refused(group: GroupMetadata, member_id: str, protocol_type: str, protocols: list[tuple[str, bytes]],
                      callback: JoinCallback) -> bool:
        """A dead group (removed under our feet: deleted or migrated, so the
        client rediscovers) or protocols the group cannot take: answered here."""
        if group.is_(S.DEAD):
            error = ErrorCode.coordinator_not_available
        elif not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            error = ErrorCode.inconsistent_group_protocol
        else:
            return False
        invoke_callback(callback, JoinGroupResult.failed(member_id, error))
        return True

    def _do_new_member_join(
        self, group: GroupMetadata, group_instance_id: Optional[str], require_known_member_id: bool,
        support_skipping_assignment: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
        session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
        callback: JoinCallback, why: str,
    ) -> None:
        if self._join_refused(group, UNKNOWN_MEMBER_ID, protocol_type, protocols, callback):
            return
        new_member_id = self._new_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                self._update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, group_instance_id, protocols, rebalance_timeout_ms,
                    session_timeout_ms, callback, support_skipping_assignment, why)
            else:
                self._add_member_and_rebalance(group, new_member_id, group_instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                               callback, f"adding new static member {group_instance_id}{why}")
        elif require_known_member_id:
            # KIP-394: hand out the id and make the client come back with it,
            # so a client that retries a timed-out first join does not leave
            # an orphan member per attempt. The id expires unused after a
            # session timeout.
            group.add_pending_member(new_member_id)
            self._add_pending_member_expiration(group, new_member_id, session_timeout_ms)
            invoke_callback(callback, JoinGroupResult.failed(new_member_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(group, new_member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, callback,
                                           f"adding new member {new_member_id}{why}")

    def _do_current_member_join(
        self, group: GroupMetadata, member_id: str, group_instance_id: Optional[str], client_id: str,
        client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
        protocols: list[tuple[str, bytes]], callback: JoinCallback, why: str,
    ) -> None:
        if self._join_refused(group, member_id, protocol_type, protocols, callback):
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                # Pending ids are only handed to dynamic members; Kafka treats
                # this as an internal error.
                log.error("group %s: pending member %s rejoined with group instance id %s",
                          group.group_id, member_id, group_instance_id)
                invoke_callback(callback, JoinGroupResult.failed(member_id, ErrorCode.unknown_server_error))
                return
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, callback,
                                           f"adding new member {member_id}{why}")
            return
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            invoke_callback(callback, JoinGroupResult.failed(member_id, error))
            return
        member = group.get(member_id)
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              callback, f"member {member_id} joining during rebalance{why}")
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # Same metadata: most likely a retry after a lost JoinGroup
                # response. Answer with the current generation.
                invoke_callback(callback, self._join_result(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, callback,
                                                  f"updated metadata of member {member_id}{why}")
        elif group.is_(S.STABLE):
            if group.is_leader(member_id):
                # The leader rejoins to trigger a rebalance for changes its
                # metadata does not show (e.g. new partitions of a topic).
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, callback, f"leader {member_id} rejoining{why}")
            elif not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, callback,
                                                  f"updated metadata of member {member_id}{why}")
            else:
                # A follower with nothing new: let it SyncGroup the current generation.
                invoke_callback(callback, self._join_result(group, member_id, with_members=False))
        else:
            # Empty (or Dead): the member's generation is gone; make it start over.
            log.warning("group %s: member %s rejoined in unexpected state %s", group.group_id, member_id, group.state)
            invoke_callback(callback, JoinGroupResult.failed(member_id, ErrorCode.unknown_member_id))

    def _join_result(self, group: GroupMetadata, member_id: str, with_members: bool = True,
                     leader_id: Optional[str] = None, skip_assignment: bool = False) -> JoinGroupResult:
        is_leader = group.is_leader(member_id)
        return JoinGroupResult(
            error=ErrorCode.none,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=(leader_id if leader_id is not None else group.leader_id) or "",
            members=group.current_member_metadata() if (with_members and is_leader) else (),
            skip_assignment=skip_assignment,
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, group_instance_id: Optional[str], client_id: str,
        client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
        protocols: list[tuple[str, bytes]], callback: JoinCallback, reason: str,
    ) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_(S.PREPARING_REBALANCE) and group.generation_id == 0:
            # Extends the initial rebalance delay by another round.
            group.new_member_added = True
        group.add(member, callback)
        # A new member has no id to heartbeat with while its join waits; bound
        # the wait so a client that gave up does not linger as a member.
        self._complete_and_schedule_next_expiration(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, reason)

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int, session_timeout_ms: int, callback: JoinCallback, reason: str,
    ) -> None:
        superseded = group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        if superseded is not None:
            # A second JoinGroup while the first still waits: the client gave up
            # on the first (Kafka drops it silently; we answer it so nothing
            # stays open).
            invoke_callback(superseded, JoinGroupResult.failed(member.member_id, ErrorCode.rebalance_in_progress))
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_member_id: str, new_member_id: str, group_instance_id: str,
        protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int, session_timeout_ms: int,
        callback: JoinCallback, support_skipping_assignment: bool, why: str,
    ) -> None:
        """A known static member restarted (new member id, same instance id).
        KIP-345's point: no rebalance if the group's protocol choice is
        unaffected; the member takes over its predecessor's assignment."""
        current_leader = group.leader_id
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        # The old id's heartbeat expires harmlessly (no such member any more).
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = list(member.supported_protocols)
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)

        if group.is_(S.STABLE):
            if group.protocol_name == group.select_protocol():
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def on_stored(error: ErrorCode) -> None:
                    if error != ErrorCode.none:
                        log.warning("group %s: failed to persist static member %s: %s", group.group_id,
                                    group_instance_id, error.name)
                        failed = JoinGroupResult(
                            error=error, member_id=UNKNOWN_MEMBER_ID, generation_id=group.generation_id,
                            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                            leader_id=current_leader or "")
                        if group.members.get(new_member_id) is member and not group.is_(S.DEAD):
                            # Not durable: put the previous incarnation back.
                            group.update_member(member, old_protocols, old_rebalance_timeout_ms,
                                                old_session_timeout_ms, None)
                            old_member = group.replace_static_member(group_instance_id, new_member_id, old_member_id)
                            self._complete_and_schedule_next_heartbeat_expiration(group, old_member)
                            invoke_callback(callback, failed)
                        else:
                            group.maybe_invoke_join_callback(member, failed)
                    elif support_skipping_assignment:
                        # v9+: tell a static leader it leads, but must not run
                        # the assignor (the group stays Stable; a new
                        # assignment would be ignored anyway).
                        is_leader = group.is_leader(new_member_id)
                        group.maybe_invoke_join_callback(
                            member, self._join_result(group, new_member_id, with_members=is_leader,
                                                      skip_assignment=is_leader))
                    else:
                        # Before v9: answer with the old leader id so that a
                        # restarted leader does not think it leads and compute
                        # an assignment nobody would receive.
                        group.maybe_invoke_join_callback(
                            member, self._join_result(group, new_member_id, with_members=False,
                                                      leader_id=current_leader or ""))

                self.manager.store_group(group, assignment, on_stored)
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {group_instance_id} rejoined with a change of protocol{why}")
        elif group.is_(S.COMPLETING_REBALANCE):
            # The leader may be computing an assignment for the old member id;
            # start over so the new id gets one.
            self._prepare_rebalance(group, f"static member {group_instance_id} rejoined during sync{why}")
        elif group.is_(S.PREPARING_REBALANCE):
            pass  # it simply takes part in the rebalance under its new id
        else:
            raise IllegalStateError(f"group {group.group_id} in state {group.state} with static member "
                                    f"{group_instance_id}")

    # ======================================================================
    # rebalance
    # ======================================================================

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            # Members waiting in SyncGroup must rejoin instead.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        if group.is_(S.EMPTY):
            delay = self.config.group_initial_rebalance_delay_ms
            operation: DelayedOperation = InitialDelayedJoin(
                self, group, delay, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            operation = DelayedJoin(self, group, group.rebalance_timeout_ms)
        group.transition_to(S.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s with old generation %d (%s)", group.group_id,
                 group.generation_id, reason)
        self.watch_join(operation, group)

    # -- the delayed join's part (delayed_ops.GroupDelays) --

    def watch_join(self, operation: DelayedOperation, group: GroupMetadata) -> None:
        """Wait for the group's join phase with ``operation`` (one at a time per group)."""
        self._purgatory.try_complete_else_watch(operation, [self._join_key(group)])

    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        """The join phase ends early once every known member has rejoined."""
        if group.has_all_members_joined():
            return force_complete()
        return False

    def on_complete_join(self, group: GroupMetadata) -> None:
        """The join phase is over: drop who did not rejoin, start the next generation."""
        # Dynamic members that did not rejoin in time are gone; static ones
        # stay (they are expected back under the same instance id and keep
        # their place until their session expires).
        for member in group.not_yet_rejoined_members():
            if not member.is_static_member:
                group.remove(member.member_id)
                self._remove_heartbeat_for_leaving_member(group, member.member_id)
        if group.is_(S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only absent static members remain): wait
            # another round, until their sessions expire.
            log.error("group %s could not complete rebalance because no members rejoined", group.group_id)
            self.watch_join(DelayedJoin(self, group, group.rebalance_timeout_ms), group)
            return
        group.init_next_generation()
        if group.is_(S.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)

            def on_stored(error: ErrorCode) -> None:
                # Harmless if lost: the previous generation reloaded has no
                # live members and will simply time out.
                if error != ErrorCode.none:
                    log.warning("failed to write empty metadata for group %s: %s", group.group_id, error.name)

            self.manager.store_group(group, {}, on_stored)
            return
        log.info("stabilized group %s generation %d with %d members", group.group_id, group.generation_id,
                 group.size)
        for member in list(group.members.values()):
            group.maybe_invoke_join_callback(member, self._join_result(group, member.member_id))
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    # ======================================================================
    # SyncGroup
    # ======================================================================

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: Optional[str],
        protocol_type: Optional[str],
        protocol_name: Optional[str],
        assignments: Mapping[str, bytes],
        callback: SyncCallback,
    ) -> None:
        """SyncGroup. The leader's ``assignments`` (member id -> bytes) are
        persisted before anyone is answered; followers wait for that.
        ``protocol_type``/``protocol_name`` are v5+ (None = not sent)."""
        error = self._check_group_status(group_id, allow_empty_group_id=False)
        if error is ErrorCode.coordinator_load_in_progress:
            # The rebalance in progress was lost with the old coordinator; this
            # makes the member rejoin right away (older clients do not know
            # COORDINATOR_LOAD_IN_PROGRESS here).
            invoke_callback(callback, SyncGroupResult(ErrorCode.rebalance_in_progress))
            return
        if error is not None:
            invoke_callback(callback, SyncGroupResult(error))
            return
        group = self.manager.group(group_id)
        if group is None:
            invoke_callback(callback, SyncGroupResult(ErrorCode.unknown_member_id))
            return
        error = self._validate_sync_group(group, generation_id, member_id, group_instance_id, protocol_type,
                                          protocol_name)
        if error is not None:
            invoke_callback(callback, SyncGroupResult(error))
            return
        if group.is_(S.EMPTY):
            invoke_callback(callback, SyncGroupResult(ErrorCode.unknown_member_id))
        elif group.is_(S.PREPARING_REBALANCE):
            invoke_callback(callback, SyncGroupResult(ErrorCode.rebalance_in_progress))
        elif group.is_(S.COMPLETING_REBALANCE):
            member = group.get(member_id)
            superseded = member.awaiting_sync_callback
            member.awaiting_sync_callback = callback
            if superseded is not None and superseded is not callback:
                invoke_callback(superseded, SyncGroupResult(ErrorCode.rebalance_in_progress))
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self._store_leader_assignment(group, member_id, assignments)
        elif group.is_(S.STABLE):
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            invoke_callback(callback, SyncGroupResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
            self._complete_and_schedule_next_heartbeat_expiration(group, member)
        else:
            raise IllegalStateError(f"sync in unexpected state {group.state} of group {group.group_id}")

    def _validate_sync_group(self, group: GroupMetadata, generation_id: int, member_id: str,
                             group_instance_id: Optional[str], protocol_type: Optional[str],
                             protocol_name: Optional[str]) -> Optional[ErrorCode]:
        if group.is_(S.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if protocol_type is not None and group.protocol_type != protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if protocol_name is not None and group.protocol_name != protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return None

    def _store_leader_assignment(self, group: GroupMetadata, leader_id: str, assignments: Mapping[str, bytes]) -> None:
        # Members the leader left out get an empty assignment; ids that are
        # not members are ignored.
        assignment = {mid: bytes(assignments.get(mid, b"") or b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in assignments]
        if missing:
            log.warning("group %s generation %d: empty assignments for %s", group.group_id, group.generation_id,
                        missing)
        generation_id = group.generation_id

        def on_stored(error: ErrorCode) -> None:
            # Members may have joined or left while the record was written;
            # only the generation that was stored may become Stable.
            if not (group.is_(S.COMPLETING_REBALANCE) and group.generation_id == generation_id):
                return
            if error != ErrorCode.none:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance(group, f"error storing the assignment of leader {leader_id}")
            else:
                self._set_and_propagate_assignment(group, assignment)
                group.transition_to(S.STABLE)

        self.manager.store_group(group, assignment, on_stored)

    def _set_and_propagate_assignment(self, group: GroupMetadata, assignment: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, ErrorCode.none)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        protocol_type = group.protocol_type if error == ErrorCode.none else None
        protocol_name = group.protocol_name if error == ErrorCode.none else None
        for member in list(group.members.values()):
            result = SyncGroupResult(error, protocol_type, protocol_name, member.assignment)
            if group.maybe_invoke_sync_callback(member, result):
                # A session that ran out while the member waited on us was not
                # counted; it starts afresh from its answer.
                self._complete_and_schedule_next_heartbeat_expiration(group, member)

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self._purgatory.check_and_complete(self._sync_key(group))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self._purgatory.check_and_complete(self._sync_key(group))

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        operation = DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms)
        self._purgatory.try_complete_else_watch(operation, [self._sync_key(group)])

    # -- the delayed sync's part (delayed_ops.GroupDelays) --

    def try_complete_pending_sync(self, group: GroupMetadata, generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool:
        """Done waiting for SyncGroups: all arrived, or the generation moved on."""
        if generation_id != group.generation_id:
            return force_complete()
        if group.state in (S.DEAD, S.EMPTY, S.PREPARING_REBALANCE):
            return force_complete()
        if group.has_received_sync_from_all_members():
            return force_complete()
        return False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        """Members that never sent SyncGroup are removed, and the group rebalances."""
        if generation_id != group.generation_id:
            return
        if group.state not in (S.COMPLETING_REBALANCE, S.STABLE) or group.has_received_sync_from_all_members():
            return
        missing = list(group.pending_sync_members)
        for member_id in missing:
            group.remove(member_id)
            self._remove_heartbeat_for_leaving_member(group, member_id)
        self._prepare_rebalance(group, f"removing {missing} on pending sync request expiration")
