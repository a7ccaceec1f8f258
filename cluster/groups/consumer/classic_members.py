"""Classic members in a consumer group (a group migrating between the two
protocols; the conversions themselves are in ``migration``).

While a group moves from the classic protocol to the consumer protocol (or
back) its members speak both: consumer-protocol members heartbeat with
ConsumerGroupHeartbeat, classic ones keep using JoinGroup, SyncGroup,
Heartbeat and LeaveGroup. The coordinator serves the classic ones from the
consumer group, as Kafka 4 does:

* **JoinGroup** of a classic member (protocol type ``consumer`` and an
  assignor every other classic member supports, else
  INCONSISTENT_GROUP_PROTOCOL) updates its subscription (from its embedded
  protocol), runs the same epoch bump / target / reconciliation as a
  heartbeat, with the partitions it says it still owns, and answers at once
  with its member epoch as the generation and no leader: nobody computes
  assignments on the client side.
* **SyncGroup** answers the member's assigned partitions in its own
  embedded protocol version.
* **Heartbeat** answers REBALANCE_IN_PROGRESS when the member must rejoin:
  the group epoch moved, it must revoke partitions, or partitions it waits
  for were released.
* **LeaveGroup** removes the member as a consumer-protocol leave would.

A classic member's session is its own ``session.timeout.ms``.
"""
from __future__ import annotations

import uuid
from typing import Optional, Sequence

from cluster.groups.api import (JoinGroupResult, LeaveGroupResult, LeavingMember, MemberLeaveResult,
                                SyncGroupResult)
from cluster.groups.consumer.embedded_protocol import EmbeddedProtocolError, decode_subscription, encode_assignment
from cluster.groups.consumer.failure import RequestFailure
from cluster.groups.consumer.model import ConsumerGroup, ConsumerMember, MemberState, reconcile
from core.error_codes import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"
# JoinGroup v4+: a new dynamic member first gets its id with MEMBER_ID_REQUIRED (KIP-394).
MEMBER_ID_REQUIRED_VERSION = 4


class ClassicMemberHandling:
    """Mixed into ConsumerGroupCoordinator (which provides the group state,
    records and timers)."""

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
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                raise RequestFailure(ErrorCode.unknown_member_id)
            if current != member_id:
                raise RequestFailure(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            raise RequestFailure(ErrorCode.unknown_member_id)
        return member

    def classic_join(self, group_id: str, member_id: str, instance_id: Optional[str], client_id: str,
                     client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                     protocols: Sequence[tuple[str, bytes]], api_version: int, callback, image=None) -> None:
        self.see_image(image)
        records: list = []
        try:
            result = self._classic_join(group_id, member_id, instance_id, client_id, client_host,
                                        rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                        api_version, records)
        except RequestFailure as failure:
            callback(JoinGroupResult.failed(member_id, failure.error))
            return
        self._write(records, lambda error: callback(
            result if error == ErrorCode.none else JoinGroupResult.failed(member_id, error)))

    def _classic_join(self, group_id, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                      session_timeout_ms, protocol_type, protocols, api_version, records) -> JoinGroupResult:
        self._check_status(group_id)
        group = self.groups[group_id]
        classic_config = self.classic.config
        if not (classic_config.group_min_session_timeout_ms <= session_timeout_ms
                <= classic_config.group_max_session_timeout_ms):
            raise RequestFailure(ErrorCode.invalid_session_timeout)
        if not _supports_classic_protocols(group, protocol_type, [name for name, _ in protocols]):
            raise RequestFailure(ErrorCode.inconsistent_group_protocol, f"Member {member_id}'s protocols are not supported.")
        try:
            subscription = decode_subscription(protocols[0][1])
        except EmbeddedProtocolError:
            raise RequestFailure(ErrorCode.inconsistent_group_protocol)
        unknown = not member_id
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is None and api_version >= MEMBER_ID_REQUIRED_VERSION:
                return JoinGroupResult(ErrorCode.member_id_required, member_id)
        member: Optional[ConsumerMember] = None
        replaced: Optional[ConsumerMember] = None
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is not None and current != member_id:
                if not unknown:
                    raise RequestFailure(ErrorCode.fenced_instance_id)
                # A new incarnation of a static member takes its place (classic semantics).
                replaced = group.members[current]
                member = self._replace_static_member(group, replaced, member_id, records)
        if member is None:
            member = group.members.get(member_id)
        is_new = member is None
        if is_new:
            if len(group.members) >= self.config.max_size:
                raise RequestFailure(ErrorCode.group_max_size_reached)
            member = ConsumerMember(member_id=member_id, member_epoch=0)
        elif not member.uses_classic_protocol and replaced is None:
            raise RequestFailure(ErrorCode.unknown_member_id)  # (a classic static member may replace a consumer-protocol one)
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
        if replaced is not None and self._downgrade_on_replacement(group, replaced):
            # It replaced the last consumer-protocol member: a classic group
            # from now on, the newcomer in its predecessor's place (no rebalance).
            self._convert_to_classic_group(group, None, records, rebalance=False)
        return JoinGroupResult(ErrorCode.none, member_id, generation_id=reconciled.member_epoch,
                               protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=protocols[0][0], leader_id="")

    def classic_sync(self, group_id: str, generation_id: int, member_id: str, instance_id: Optional[str],
                     protocol_type: Optional[str], protocol_name: Optional[str]) -> SyncGroupResult:
        try:
            self._check_status(group_id)
            group = self.groups[group_id]
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise RequestFailure(ErrorCode.illegal_generation)
            names = [name for name, _ in member.classic_protocols or ()]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                    protocol_name is not None and protocol_name not in names):
                raise RequestFailure(ErrorCode.inconsistent_group_protocol)
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                raise RequestFailure(ErrorCode.rebalance_in_progress)
        except RequestFailure as failure:
            return SyncGroupResult(failure.error)
        self._schedule_session(group_id, member_id, self._session_timeout(member))
        version = int.from_bytes(member.classic_protocols[0][1][:2], "big", signed=True) \
            if member.classic_protocols and len(member.classic_protocols[0][1]) >= 2 else 0
        return SyncGroupResult(ErrorCode.none, CONSUMER_PROTOCOL_TYPE, protocol_name or names[0],
                               encode_assignment(self._names_of(member.assigned), version))

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: Optional[str],
                          generation_id: int) -> ErrorCode:
        try:
            self._check_status(group_id)
            group = self.groups[group_id]
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise RequestFailure(ErrorCode.illegal_generation)
        except RequestFailure as failure:
            return failure.error
        self._schedule_session(group_id, member_id, self._session_timeout(member))
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS or (
                member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting_on_unreleased(group, member)):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
        for t, ps in group.target.get(member.member_id, {}).items():
            for p in ps - member.assigned.get(t, frozenset()):
                if group.holder(t, p) not in (None, member.member_id):
                    return True
        return False

    def classic_leave(self, group_id: str, leaving: Sequence[LeavingMember]) -> LeaveGroupResult:
        try:
            self._check_status(group_id)
        except RequestFailure as failure:
            return LeaveGroupResult(failure.error)
        group = self.groups[group_id]
        results, records = [], []
        for one in leaving:
            member_id = one.member_id
            if one.group_instance_id is not None:
                current = group.static_members.get(one.group_instance_id)
                if current is None:
                    results.append(MemberLeaveResult(member_id, one.group_instance_id, ErrorCode.unknown_member_id))
                    continue
                if member_id and current != member_id:
                    results.append(MemberLeaveResult(member_id, one.group_instance_id, ErrorCode.fenced_instance_id))
                    continue
                member_id = current
            if member_id not in group.members:
                results.append(MemberLeaveResult(one.member_id, one.group_instance_id, ErrorCode.unknown_member_id))
                continue
            self._remove_member(group, member_id, records, one.reason or "the member left (LeaveGroup)")
            results.append(MemberLeaveResult(one.member_id, one.group_instance_id, ErrorCode.none))
        self._write(records, lambda error: None)
        return LeaveGroupResult(ErrorCode.none, tuple(results))


def _supports_classic_protocols(group: ConsumerGroup, protocol_type: str, names: Sequence[str]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol
    type, and a protocol (assignor) every classic member already supports,
    so that the group could become a classic group again (a downgrade needs
    one protocol all its members share)."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    classic = [{name for name, _ in m.classic_protocols or ()} for m in group.members.values()
               if m.uses_classic_protocol]
    return any(all(name in supported for supported in classic) for name in names)
