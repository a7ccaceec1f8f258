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
  The delayed operations (``delayed_ops.py``) call back the methods under
  "delayed operations" below.
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
from typing import Callable, Iterable, Mapping, Optional, Sequence

from core.error_codes import ErrorCode

from cluster.groups.api import (
    UNKNOWN_MEMBER_ID,
    GroupDescription,
    GroupListing,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    MemberDescription,
    MemberLeaveResult,
    OffsetFetchResult,
    PartitionCommit,
    SyncGroupResult,
    TopicPartition,
    TxnProducer,
)
from cluster.groups.config import GroupConfig
from cluster.groups.delayed_ops import DelayedHeartbeat, DelayedJoin, DelayedSync, InitialDelayedJoin
from cluster.groups.group import (
    GroupMetadata,
    GroupState,
    IllegalStateError,
    JoinCallback,
    MemberMetadata,
    SyncCallback,
    invoke_callback,
)
from cluster.groups.log_batches import LogBatch
from cluster.groups.metadata_manager import (AppendRecords, CommitCallback, CoordinatorStatus,
                                             GroupMetadataManager)
from cluster.groups.records import partition_for_group
from delayed.operation import DelayedOperation, DelayedOperationPurgatory
from delayed.timing_wheel import SystemTimer

__all__ = ["AppendRecords", "CommitCallback", "CoordinatorStatus", "GroupCoordinator"]

log = logging.getLogger("raykafka.groups")

S = GroupState


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator:
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

    # ======================================================================
    # OffsetCommit / OffsetFetch
    # ======================================================================

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: Optional[str],
        generation_id: int,
        offsets: Mapping[TopicPartition, PartitionCommit],
        callback: CommitCallback,
    ) -> None:
        """OffsetCommit. ``callback({tp: error})`` runs once the records are
        durable (or refused). Group members commit with their generation;
        generation -1 with no member id is a standalone ("simple") consumer,
        allowed only while the group is Empty or unknown.

        Checking that the topics exist is the caller's job (Kafka does it in
        KafkaApis, answering UNKNOWN_TOPIC_OR_PARTITION)."""
        offsets = {TopicPartition(*tp): commit for tp, commit in offsets.items()}
        error = self._check_group_status(group_id, allow_empty_group_id=True)
        if error is not None:
            invoke_callback(callback, {tp: error for tp in offsets})
            return
        group = self.manager.group(group_id)
        if group is None:
            if generation_id < 0:
                # Not using group management: the group exists just to hold offsets.
                group = self.manager.add_group(group_id)
            else:
                # A member of a generation this coordinator does not know.
                invoke_callback(callback, {tp: ErrorCode.illegal_generation for tp in offsets})
                return
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            invoke_callback(callback, {tp: error for tp in offsets})
            return
        if group.is_(S.EMPTY):
            self.manager.store_offsets(group, offsets, callback)
        elif group.state in (S.STABLE, S.PREPARING_REBALANCE):
            # Commits during PreparingRebalance are allowed: members learn of
            # the rebalance from their heartbeats and commit before rejoining.
            self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
            self.manager.store_offsets(group, offsets, callback)
        elif group.is_(S.COMPLETING_REBALANCE):
            # A valid member of the new generation that has not synced yet.
            invoke_callback(callback, {tp: ErrorCode.rebalance_in_progress for tp in offsets})
        else:
            raise IllegalStateError(f"commit in unexpected state {group.state} of group {group.group_id}")

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                group_instance_id: Optional[str]) -> Optional[ErrorCode]:
        if group.is_(S.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if not group.is_(S.EMPTY):
            # While the group has members only they may commit.
            return ErrorCode.unknown_member_id
        return None



    # ======================================================================
    # TxnOffsetCommit and transaction completion (KIP-98, KIP-447)
    # ======================================================================

    def txn_commit_offsets(
        self,
        group_id: str,
        producer: TxnProducer,
        member_id: str,
        group_instance_id: Optional[str],
        generation_id: int,
        offsets: Mapping[TopicPartition, PartitionCommit],
        callback: CommitCallback,
    ) -> None:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets). The offsets are
        appended as a transactional batch of ``producer`` and stay pending
        (invisible to OffsetFetch; UNSTABLE_OFFSET_COMMIT with
        require_stable) until ``complete_transaction`` for that producer.
        v3+ requests carry the member id, generation and group instance id,
        checked as OffsetCommit checks them (KIP-447); older ones carry
        none of them (member "", generation -1) and pass, whatever the
        group's state. ``callback({tp: error})`` once durable or refused."""
        offsets = {TopicPartition(*tp): commit for tp, commit in offsets.items()}
        error = self._check_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            invoke_callback(callback, {tp: error for tp in offsets})
            return
        group = self.manager.group(group_id)
        if group is None:
            group = self.manager.add_group(group_id)
        error = self._validate_txn_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            invoke_callback(callback, {tp: error for tp in offsets})
            return
        self.manager.store_offsets(group, offsets, callback, producer)

    @classmethod
    def _validate_txn_offset_commit(cls, group: GroupMetadata, generation_id: int, member_id: str,
                                    group_instance_id: Optional[str]) -> Optional[ErrorCode]:
        """Kafka's validateOffsetCommit(isTransactional = true)."""
        if group.is_(S.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(S.EMPTY):
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = cls._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        # Without a member id (TxnOffsetCommit v0-v2) anyone may commit.
        return None


    def fetch_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartition]] = None,
                      require_stable: bool = False) -> OffsetFetchResult:
        """OffsetFetch. ``partitions`` None = every partition with a committed
        offset. Partitions without one get offset -1 (no error).
        ``require_stable`` (KIP-447): partitions with a commit still being
        written answer UNSTABLE_OFFSET_COMMIT, so the client retries rather
        than read an offset about to change."""
        error = self._check_group_status(group_id, allow_empty_group_id=True)
        if error is not None:
            return OffsetFetchResult(error)
        requested = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        return self.manager.get_offsets(group_id, requested, require_stable)

    def complete_transaction(self, producer_id: int, committed: bool) -> int:
        """The producer's COMMIT/ABORT marker is written to this offsets
        partition (GroupMetadataManager.complete_transaction)."""
        return self.manager.complete_transaction(producer_id, committed)

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
    # DeleteGroups / OffsetDelete / expiration
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

    def delete_offsets(self, group_id: str,
                       partitions: Iterable[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (KIP-496). An Empty group can lose any offsets; a
        consumer group with members only those of topics none of its members
        subscribe to (GROUP_SUBSCRIBED_TO_TOPIC for the others); a non-empty
        group of another protocol type none (NON_EMPTY_GROUP). A group-level
        error comes with no partition errors."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        error = self._check_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            return error, {}
        group = self.manager.group(group_id)
        if group is None or group.is_(S.DEAD):
            return ErrorCode.group_id_not_found, {}
        partition_errors: dict[TopicPartition, ErrorCode] = {}
        if group.is_(S.EMPTY):
            eligible = partitions
        elif group.is_consumer_group:
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to_topic(tp.topic):
                    partition_errors[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.non_empty_group, {}
        if eligible:
            self.manager.cleanup_group_metadata([group], lambda g: g.remove_offsets(eligible))
            for tp in eligible:
                partition_errors[tp] = ErrorCode.none
        return ErrorCode.none, partition_errors

    def expire_offsets(self, now_ms: Optional[int] = None) -> int:
        """One offsets.retention sweep (GroupMetadataManager.expire_offsets)."""
        return self.manager.expire_offsets(now_ms)

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
