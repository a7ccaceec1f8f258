"""Online migration between the two kinds of group (Kafka 4's rules,
``group.consumer.migration.policy``: ``bidirectional`` (Kafka 4.0's
default), ``upgrade``, ``downgrade`` or ``disabled``; Kafka 3.9 shipped
``disabled``). The policy governs non-empty groups only: an empty group of
either kind becomes the other kind whenever a member of the other protocol
joins it, whatever the policy (Kafka's config doc says so, and its
coordinator does it).

* **Upgrade** (classic -> consumer). The first ConsumerGroupHeartbeat for a
  classic group with members converts it (policy ``upgrade`` or
  ``bidirectional``, the group Stable, its protocol type ``consumer``, no more
  members than ``group.consumer.max.size``): every classic member becomes a
  member of the consumer group with its last assignment as both its current
  and target assignment, at the classic generation as epoch. The classic
  group's record is tombstoned and the consumer group's records written.
  Otherwise the heartbeat gets GROUP_ID_NOT_FOUND ("not a consumer group").
* **Downgrade** (consumer -> classic). When the last consumer-protocol member
  of a group leaves or is fenced (session or rebalance timeout) while classic
  members remain (policy ``downgrade`` or ``bidirectional``, no more of them
  than ``group.max.size``), the group becomes a classic group: generation =
  the group epoch, each member with its protocols, session and rebalance
  timeouts and its *target* assignment (in its own embedded-protocol version)
  as the classic assignment, state Stable; then a classic rebalance starts,
  so the members rejoin and their leader assigns the leaver's partitions.
  The consumer group's records are tombstoned and the classic group's
  record written, in one batch. When instead a classic static member
  replaces the last consumer-protocol static member (same instance id), the
  group is converted with the newcomer in its predecessor's place and no
  rebalance.
* **Empty groups.** A JoinGroup for an empty consumer group tombstones its
  records and the group continues as a classic one (committed offsets stay:
  they live with the group's entry in the classic coordinator whichever kind
  the group is); a ConsumerGroupHeartbeat for an empty classic group does the
  reverse.
"""
from __future__ import annotations

import logging
import struct
from typing import Any, Optional

from cluster.groups.api import JoinGroupResult, SyncGroupResult
import cluster.groups.consumer.records as R
from cluster.groups.consumer.embedded_protocol import EmbeddedProtocolError, decode_subscription, encode_assignment
from cluster.groups.consumer.failure import RequestFailure
from cluster.groups.consumer.model import ConsumerGroup, ConsumerMember, MemberState
from cluster.groups.group import GroupMetadata, GroupState, MemberMetadata
from cluster.groups.metadata_manager import CoordinatorStatus
from cluster.groups.records import group_metadata_tombstone
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.consumer_groups")
CONSUMER_PROTOCOL_TYPE = "consumer"
POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


class GroupMigration:
    """Mixed into ConsumerGroupCoordinator (which provides the groups, the
    classic coordinator, records and timers)."""

    def _upgrade_allowed(self) -> bool:
        return self.config.migration_policy in ("upgrade", "bidirectional")

    def _downgrade_allowed(self) -> bool:
        return self.config.migration_policy in ("downgrade", "bidirectional")

    # ---- upgrade ----------------------------------------------------------------------------------

    def _convert_classic_group(self, classic: Any, records: list) -> ConsumerGroup:
        """A Stable classic group of consumers becomes a consumer group (its
        offsets stay with its entry in the classic manager, now memberless)."""
        if not classic.is_(GroupState.STABLE):
            raise RequestFailure(ErrorCode.coordinator_not_available,
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
                raise RequestFailure(ErrorCode.group_id_not_found, f"Cannot upgrade the classic group {classic.group_id}: "
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
            classic.maybe_invoke_join_callback(old, JoinGroupResult.failed(old.member_id, ErrorCode.rebalance_in_progress))
            classic.maybe_invoke_sync_callback(old, SyncGroupResult(ErrorCode.rebalance_in_progress))
            classic.remove(old.member_id)
        classic.pending_sync_members.clear()
        classic.state = GroupState.EMPTY  # an offsets holder from now on (its timers find no members)
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

    # ---- downgrade --------------------------------------------------------------------------------

    def _downgrade_on_leave(self, group: ConsumerGroup, leaving_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember: is ``leaving_id``
        the last consumer-protocol member, with classic members staying?"""
        leaving = group.members.get(leaving_id)
        if leaving is None or leaving.uses_classic_protocol or len(group.members) <= 1:
            return False
        if not all(m.uses_classic_protocol for m_id, m in group.members.items() if m_id != leaving_id):
            return False
        return self._downgrade_fits(group, len(group.members) - 1)

    def _downgrade_on_replacement(self, group: ConsumerGroup, replaced: ConsumerMember) -> bool:
        """Kafka's validateOnlineDowngradeWithReplacedMemberId: a classic
        static member took the place of the last consumer-protocol member."""
        if replaced.uses_classic_protocol:
            return False
        if not all(m.uses_classic_protocol for m in group.members.values()):
            return False
        return self._downgrade_fits(group, len(group.members))

    def _downgrade_fits(self, group: ConsumerGroup, size: int) -> bool:
        if not self._downgrade_allowed():
            log.info("cannot downgrade consumer group %s to a classic group: group.consumer.migration.policy is %s",
                     group.group_id, self.config.migration_policy)
            return False
        if size > self.classic.config.group_max_size:
            log.info("cannot downgrade consumer group %s to a classic group: %d members, group.max.size is %d",
                     group.group_id, size, self.classic.config.group_max_size)
            return False
        return True

    def _convert_to_classic_group(self, group: ConsumerGroup, leaving_id: Optional[str], records: list,
                                  rebalance: bool) -> GroupMetadata:
        """The consumer group becomes a Stable classic group of its classic
        members (``leaving_id`` left out), each holding its target assignment;
        with ``rebalance`` a classic rebalance starts at once."""
        group_id = group.group_id
        members = [m for m_id, m in group.members.items() if m_id != leaving_id]
        self._group_tombstones(group, records)
        for member in group.members.values():
            self._cancel_timers(group_id, member.member_id)
        group.dead = True
        del self.groups[group_id]

        classic_coordinator = self.classic
        classic = classic_coordinator.group(group_id) or classic_coordinator.manager.add_group(group_id)
        # The holder of the offsets becomes the group itself (offsets, pending
        # transactional commits and all stay where they are).
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.generation_id = group.group_epoch
        classic.leader_id = None
        for member in members:
            classic.add(MemberMetadata(
                member_id=member.member_id, group_instance_id=member.instance_id, client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0
                else member.classic_session_timeout_ms,
                session_timeout_ms=member.classic_session_timeout_ms, protocol_type=CONSUMER_PROTOCOL_TYPE,
                supported_protocols=member.classic_protocols or ()))
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        assignment = {}
        for member in classic.members.values():
            metadata = member.metadata(classic.protocol_name)
            version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
            member.assignment = assignment[member.member_id] = encode_assignment(
                self._names_of(group.target.get(member.member_id, {})), version)
        classic.state = GroupState.STABLE
        classic.current_state_timestamp = classic_coordinator._clock()
        records.append(classic_coordinator.manager.group_record(classic, assignment))
        for member in classic.members.values():
            classic_coordinator._complete_and_schedule_next_heartbeat_expiration(classic, member)
        log.info(
            "consumer group %s downgraded to a classic group at generation %d with %d members", group_id,
            classic.generation_id, classic.size)
        if rebalance:
            classic_coordinator._prepare_rebalance(classic, f"downgrade of group {group_id} from consumer to classic")
        return classic

    def _group_tombstones(self, group: ConsumerGroup, records: list) -> None:
        """Every record of the consumer group, deleted (Kafka's createGroupTombstoneRecords order)."""
        group_id = group.group_id
        for member_id in group.members:
            records.append(R.record(R.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, None))
        for member_id in group.members:
            records.append(R.record(R.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None))
        records.append(R.record(R.TARGET_ASSIGNMENT_METADATA, group_id, None, None))
        for member_id in group.members:
            records.append(R.record(R.MEMBER_METADATA, group_id, member_id, None))
        records.append(R.record(R.PARTITION_METADATA, group_id, None, None))
        records.append(R.record(R.GROUP_METADATA, group_id, None, None))

    # ---- empty groups -----------------------------------------------------------------------------

    def takes_classic_join(self, group_id: str) -> bool:
        """Does a JoinGroup for ``group_id`` go to this consumer group (it has
        members)? An empty consumer group is deleted here (its records
        tombstoned; its offsets stay) and the join goes to the classic
        coordinator, which continues the group as a classic one."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        if group.members or self.classic.status is not CoordinatorStatus.ACTIVE:
            return True  # (a coordinator that is not active answers the error from here)
        records: list = []
        self._group_tombstones(group, records)
        group.dead = True
        del self.groups[group_id]
        # Appended in call order: before anything the classic join writes.
        self._write(records, lambda error: None)
        return False


def _decode_assignment(data: bytes) -> dict[str, list[int]]:
    """ConsumerProtocolAssignment -> {topic: partitions} (the v0 prefix every version shares)."""
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
