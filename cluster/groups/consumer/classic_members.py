"""Classic members in a consumer group, and the online upgrade of a classic
group (Kafka's migration rules, ``group.consumer.migration.policy``).

While a group moves from the classic protocol to the consumer protocol its
members speak both: consumer-protocol members heartbeat with
ConsumerGroupHeartbeat, classic ones keep using JoinGroup, SyncGroup,
Heartbeat and LeaveGroup. The coordinator serves the classic ones from the
consumer group, as Kafka 4 does:

* **Upgrade.** The first ConsumerGroupHeartbeat for a classic group with
  members converts it (policy ``upgrade`` or ``bidirectional``, the group
  Stable and using the embedded consumer protocol): every classic member
  becomes a member of the consumer group with its last assignment as both
  its current and target assignment, at the classic generation as epoch.
  The classic group's record is tombstoned and the consumer group written.
* **JoinGroup** of a classic member updates its subscription (from its
  embedded protocol), runs the same epoch bump / target / reconciliation as a
  heartbeat, with the partitions it says it still owns, and answers at once
  with its member epoch as the generation and no leader: nobody computes
  assignments on the client side.
* **SyncGroup** answers the member's assigned partitions in its own
  embedded protocol version.
* **Heartbeat** answers REBALANCE_IN_PROGRESS when the member must rejoin:
  the group epoch moved, it must revoke partitions, or partitions it waits
  for were released.
* **LeaveGroup** removes the member as a consumer-protocol leave would.

A classic member's session is its own ``session.timeout.ms``. Converting a
consumer group back to a classic one when its last consumer-protocol member
leaves (Kafka's downgrade) is not done: such a group keeps working with
classic members only.
"""
from __future__ import annotations

import uuid
from typing import Any, Optional, Sequence

from cluster.groups.api import (JoinGroupResult, LeaveGroupResult, LeavingMember, MemberLeaveResult,
                                SyncGroupResult)
from cluster.groups.consumer import records as R
from cluster.groups.consumer.embedded_protocol import EmbeddedProtocolError, decode_subscription, encode_assignment
from cluster.groups.consumer.model import ConsumerGroup, ConsumerMember, MemberState, reconcile
from cluster.groups.group import GroupState
from core.error_codes import ErrorCode

E = ErrorCode
CONSUMER_PROTOCOL_TYPE = "consumer"
# JoinGroup v4+: a new dynamic member first gets its id with MEMBER_ID_REQUIRED (KIP-394).
MEMBER_ID_REQUIRED_VERSION = 4


class ClassicMemberHandling:
    """Mixed into ConsumerGroupCoordinator (which provides the group state,
    records, timers and ``_Failure``)."""

    # ---- upgrade ----------------------------------------------------------------------------------

    def _upgrade_allowed(self) -> bool:
        return self.config.migration_policy in ("upgrade", "bidirectional")

    def _convert_classic_group(self, classic: Any, records: list) -> ConsumerGroup:
        """A Stable classic group of consumers becomes a consumer group (its
        offsets stay with its entry in the classic manager, now memberless)."""
        from cluster.groups.consumer.coordinator import _Failure  # one definition of the failure type

        if not classic.is_(GroupState.STABLE):
            raise _Failure(E.coordinator_not_available,
                           f"Group {classic.group_id} is rebalancing with the classic protocol; retry.")
        group = ConsumerGroup(classic.group_id)
        generation = classic.generation_id
        group.group_epoch = group.assignment_epoch = generation
        protocol = classic.protocol_name
        members = []
        for old in classic.members.values():
            try:
                subscription = decode_subscription(old.metadata(protocol))
            except (EmbeddedProtocolError, KeyError) as exc:
                raise _Failure(E.group_id_not_found, f"Cannot upgrade the classic group {classic.group_id}: "
                               f"malformed embedded consumer protocol ({exc}).")
            assigned = self._ids_of(_decode_assignment(old.assignment))
            members.append(ConsumerMember(
                member_id=old.member_id, instance_id=old.group_instance_id, rack_id=subscription.rack_id,
                client_id=old.client_id, client_host=old.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=old.rebalance_timeout_ms,
                classic_protocols=tuple((name, bytes(old.metadata(name))) for name in old.protocol_names()),
                classic_session_timeout_ms=old.session_timeout_ms,
                member_epoch=generation, previous_member_epoch=generation, state=MemberState.STABLE,
                assigned=assigned))
        # The classic group is gone: waiting requests rejoin, its record goes.
        for old in list(classic.members.values()):
            classic.maybe_invoke_join_callback(old, JoinGroupResult.failed(old.member_id, E.rebalance_in_progress))
            classic.maybe_invoke_sync_callback(old, SyncGroupResult(E.rebalance_in_progress))
            classic.remove(old.member_id)
        classic.pending_sync_members.clear()
        classic.state = GroupState.EMPTY  # an offsets holder from now on (its timers find no members)
        from cluster.groups.records import group_metadata_tombstone
        records.append(group_metadata_tombstone(classic.group_id))
        for member in members:
            group.put_member(member)
            group.target[member.member_id] = dict(member.assigned)
        group.subscription_metadata = self._subscription_metadata(group)
        for member in members:
            records.append(self._member_metadata_record(group.group_id, member))
        records.append(R.record(R.GROUP_METADATA, group.group_id, None, R.GroupMetadataValue(group.group_epoch)))
        records.append(R.record(R.PARTITION_METADATA, group.group_id, None, R.PartitionMetadataValue(
            tuple(R.TopicMetadata(t, name, n) for name, (t, n) in sorted(group.subscription_metadata.items())),
            group.group_epoch)))
        for member in members:
            records.append(R.record(R.TARGET_ASSIGNMENT_MEMBER, group.group_id, member.member_id,
                                    R.TargetAssignmentMemberValue(member.assigned)))
        records.append(R.record(R.TARGET_ASSIGNMENT_METADATA, group.group_id, None,
                                R.TargetAssignmentMetadataValue(group.assignment_epoch)))
        for member in members:
            records.append(self._current_assignment_record(group.group_id, member))
            self._schedule_session(group.group_id, member.member_id, self._session_timeout(member))
        self.groups[group.group_id] = group
        return group

    # ---- names and ids ---------------------------------------------------------------------------

    def _ids_of(self, by_name: dict) -> dict:
        result = {}
        for topic, partitions in by_name.items():
            known = self._ids_by_name.get(topic)
            if known is not None and partitions:
                result[known[0]] = result.get(known[0], frozenset()) | frozenset(partitions)
        return result

    def _names_of(self, by_id: dict) -> dict[str, list[int]]:
        return {self._names_by_id[t]: sorted(ps) for t, ps in by_id.items() if t in self._names_by_id}

    def _session_timeout(self, member: ConsumerMember) -> int:
        if member.uses_classic_protocol and member.classic_session_timeout_ms > 0:
            return member.classic_session_timeout_ms
        return self.config.session_timeout_ms

    # ---- the classic APIs on a consumer group -------------------------------------------------------

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: Optional[str]) -> ConsumerMember:
        from cluster.groups.consumer.coordinator import _Failure

        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                raise _Failure(E.unknown_member_id)
            if current != member_id:
                raise _Failure(E.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            raise _Failure(E.unknown_member_id)
        return member

    def classic_join(self, group_id: str, member_id: str, instance_id: Optional[str], client_id: str,
                     client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                     protocols: Sequence[tuple[str, bytes]], api_version: int, callback, image=None) -> None:
        from cluster.groups.consumer.coordinator import _Failure

        self.see_image(image)
        records: list = []
        try:
            result = self._classic_join(group_id, member_id, instance_id, client_id, client_host,
                                        rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                        api_version, records)
        except _Failure as failure:
            callback(JoinGroupResult.failed(member_id, failure.error))
            return
        self._write(records, lambda error: callback(
            result if error == E.none else JoinGroupResult.failed(member_id, error)))

    def _classic_join(self, group_id, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                      session_timeout_ms, protocol_type, protocols, api_version, records) -> JoinGroupResult:
        from cluster.groups.consumer.coordinator import _Failure

        self._check_status(group_id)
        group = self.groups[group_id]
        classic_config = self.classic.config
        if not (classic_config.group_min_session_timeout_ms <= session_timeout_ms
                <= classic_config.group_max_session_timeout_ms):
            raise _Failure(E.invalid_session_timeout)
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            raise _Failure(E.inconsistent_group_protocol)
        try:
            subscription = decode_subscription(protocols[0][1])
        except EmbeddedProtocolError:
            raise _Failure(E.inconsistent_group_protocol)
        unknown = not member_id
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is None and api_version >= MEMBER_ID_REQUIRED_VERSION:
                return JoinGroupResult(E.member_id_required, member_id)
        member: Optional[ConsumerMember] = None
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is not None and current != member_id:
                if not unknown:
                    raise _Failure(E.fenced_instance_id)
                # A new incarnation of a static member takes its place (classic semantics).
                previous = group.members[current]
                member = self._replace_static_member(group, previous, member_id, records)
        if member is None:
            member = group.members.get(member_id)
        is_new = member is None
        if is_new:
            if len(group.members) >= self.config.max_size:
                raise _Failure(E.group_max_size_reached)
            member = ConsumerMember(member_id=member_id, member_epoch=0)
        elif not member.uses_classic_protocol:
            raise _Failure(E.unknown_member_id)
        before = member
        member = member.replace(
            instance_id=instance_id, client_id=client_id, client_host=client_host,
            rack_id=subscription.rack_id or member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms > 0 else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))), server_assignor=None,
            classic_protocols=tuple((name, bytes(metadata)) for name, metadata in protocols),
            classic_session_timeout_ms=session_timeout_ms)
        bump = is_new or member.subscribed_topic_names != before.subscribed_topic_names
        if is_new or member != before:
            records.append(self._member_metadata_record(group_id, member))
        group.put_member(member)
        self._update_group(group, bump, records)
        member = group.members[member_id]
        owned = self._ids_of(dict(subscription.owned))
        reconciled = reconcile(member, group.assignment_epoch, group.target.get(member_id, {}),
                               lambda t, p: group.holder(t, p) not in (None, member_id), owned)
        if reconciled != member or is_new:
            records.append(self._current_assignment_record(group_id, reconciled))
            group.put_member(reconciled)
        self._schedule_session(group_id, member_id, session_timeout_ms)
        self._schedule_revocation(group_id, reconciled)
        return JoinGroupResult(E.none, member_id, generation_id=reconciled.member_epoch,
                               protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=protocols[0][0], leader_id="")

    def classic_sync(self, group_id: str, generation_id: int, member_id: str, instance_id: Optional[str],
                     protocol_type: Optional[str], protocol_name: Optional[str]) -> SyncGroupResult:
        from cluster.groups.consumer.coordinator import _Failure

        try:
            self._check_status(group_id)
            group = self.groups[group_id]
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise _Failure(E.illegal_generation)
            names = [name for name, _ in member.classic_protocols or ()]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                    protocol_name is not None and protocol_name not in names):
                raise _Failure(E.inconsistent_group_protocol)
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                raise _Failure(E.rebalance_in_progress)
        except _Failure as failure:
            return SyncGroupResult(failure.error)
        self._schedule_session(group_id, member_id, self._session_timeout(member))
        version = int.from_bytes(member.classic_protocols[0][1][:2], "big", signed=True) \
            if member.classic_protocols and len(member.classic_protocols[0][1]) >= 2 else 0
        return SyncGroupResult(E.none, CONSUMER_PROTOCOL_TYPE, protocol_name or names[0],
                               encode_assignment(self._names_of(member.assigned), version))

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: Optional[str],
                          generation_id: int) -> ErrorCode:
        from cluster.groups.consumer.coordinator import _Failure

        try:
            self._check_status(group_id)
            group = self.groups[group_id]
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise _Failure(E.illegal_generation)
        except _Failure as failure:
            return failure.error
        self._schedule_session(group_id, member_id, self._session_timeout(member))
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS or (
                member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting_on_unreleased(group, member)):
            return E.rebalance_in_progress
        return E.none

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
        for t, ps in group.target.get(member.member_id, {}).items():
            for p in ps - member.assigned.get(t, frozenset()):
                if group.holder(t, p) not in (None, member.member_id):
                    return True
        return False

    def classic_leave(self, group_id: str, leaving: Sequence[LeavingMember]) -> LeaveGroupResult:
        from cluster.groups.consumer.coordinator import _Failure

        try:
            self._check_status(group_id)
        except _Failure as failure:
            return LeaveGroupResult(failure.error)
        group = self.groups[group_id]
        results, records = [], []
        for one in leaving:
            member_id = one.member_id
            if one.group_instance_id is not None:
                current = group.static_members.get(one.group_instance_id)
                if current is None:
                    results.append(MemberLeaveResult(member_id, one.group_instance_id, E.unknown_member_id))
                    continue
                if member_id and current != member_id:
                    results.append(MemberLeaveResult(member_id, one.group_instance_id, E.fenced_instance_id))
                    continue
                member_id = current
            if member_id not in group.members:
                results.append(MemberLeaveResult(one.member_id, one.group_instance_id, E.unknown_member_id))
                continue
            self._remove_member(group, member_id, records, one.reason or "the member left (LeaveGroup)")
            results.append(MemberLeaveResult(one.member_id, one.group_instance_id, E.none))
        self._write(records, lambda error: None)
        return LeaveGroupResult(E.none, tuple(results))


def _decode_assignment(data: bytes) -> dict[str, list[int]]:
    """ConsumerProtocolAssignment -> {topic: partitions} (the v0 prefix every version shares)."""
    import struct

    out: dict[str, list[int]] = {}
    if not data or len(data) < 6:
        return out
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + length]).decode()
            pos += length
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out[topic] = list(struct.unpack_from(f">{max(n, 0)}i", data, pos))
            pos += 4 * max(n, 0)
    except (struct.error, UnicodeDecodeError):
        return out
    return out
