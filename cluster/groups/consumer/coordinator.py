"""The KIP-848 consumer group coordinator of one ``__consumer_offsets``
partition (Kafka's GroupMetadataManager.consumerGroupHeartbeat and friends),
as plain Python beside the classic ``GroupCoordinator``.

It shares the partition with the classic coordinator: the same appends (in
call order), the same loading, and the classic coordinator's offset store.
Each consumer group has an offsets-only entry in the classic manager that
holds its committed offsets; the group itself (members, epochs, targets)
lives here. Listing, describing and deleting merge the two kinds.

State changes are applied in memory at once and written as Kafka 4's records
(``records``); the heartbeat is answered once they are durable. A load
replays them (``replay``), so a coordinator failover keeps every group,
member epoch and assignment, and members carry on without rejoining.

Timers (on the actor's SystemTimer): each member's session
(``group.consumer.session.timeout.ms``) and, while it revokes partitions,
its rebalance timeout; either expiring fences the member (its partitions go
to others).
"""
from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from cluster.groups.api import GroupListing, TopicPartition
import cluster.groups.consumer.records as R
from cluster.groups.consumer.api import (ConsumerGroupDescription, ConsumerHeartbeat, ConsumerHeartbeatResult,
                                         DescribedConsumerMember, DescribedTopicPartitions, TopicsImage,
                                         WireAssignment)
from cluster.groups.consumer.assignors import ASSIGNORS, AssignmentSpec
from cluster.groups.consumer.classic_members import ClassicMemberHandling
from cluster.groups.consumer.failure import RequestFailure
from cluster.groups.consumer.migration import POLICIES, GroupMigration
from cluster.groups.consumer.model import (JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH,
                                           LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerGroup, ConsumerMember,
                                           MemberState, is_subset, normalized, reconcile)
from cluster.groups.consumer.records import Assignment
from cluster.groups.group import GroupState
from cluster.groups.metadata_manager import CoordinatorStatus
from core.error_codes import ErrorCode
from delayed import TimerTask

log = logging.getLogger("raykafka.consumer_groups")
CONSUMER_PROTOCOL_TYPE = "consumer"
# Longest subscription regex accepted (a limit on everything).
MAX_REGEX_LENGTH = 1024
# Edges (processes) whose image versions a coordinator remembers.
MAX_IMAGE_SOURCES = 64


@dataclass(frozen=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; the first is the default
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy (Kafka 4.0's default; migration.py)

    @classmethod
    def from_broker_config(cls, config: Any) -> "ConsumerGroupConfig":
        d = cls()

        def get(key: str, default: Any) -> Any:
            value = config.get(key, default)
            return default if value is None else value

        assignors = get("group.consumer.assignors", ",".join(d.assignors))
        if isinstance(assignors, str):
            assignors = [a.strip() for a in assignors.split(",") if a.strip()]
        names = tuple(_assignor_name(a) for a in assignors) or d.assignors
        policy = str(get("group.consumer.migration.policy", d.migration_policy)).lower()
        if policy not in POLICIES:  # core.config checks it at start; Kafka takes any case
            raise ValueError(f"group.consumer.migration.policy: {policy!r} is not one of {', '.join(POLICIES)}")
        return cls(heartbeat_interval_ms=int(get("group.consumer.heartbeat.interval.ms", d.heartbeat_interval_ms)),
                   session_timeout_ms=int(get("group.consumer.session.timeout.ms", d.session_timeout_ms)),
                   max_size=int(get("group.consumer.max.size", d.max_size)),
                   assignors=names,
                   migration_policy=policy)


def _assignor_name(configured: str) -> str:
    # Kafka's config takes class names too (org.apache...UniformAssignor).
    short = configured.rsplit(".", 1)[-1].lower()
    return {"uniformassignor": "uniform", "rangeassignor": "range"}.get(short, short)


def _epoch_error(member: ConsumerMember, member_epoch: int) -> Optional[ErrorCode]:
    """Kafka's validateMemberEpoch: any other epoch is stale (a classic
    member's generation: ILLEGAL_GENERATION)."""
    if member_epoch != member.member_epoch:
        return ErrorCode.illegal_generation if member.uses_classic_protocol else ErrorCode.stale_member_epoch
    return None


def to_assignment(wire: Optional[WireAssignment]) -> Optional[Assignment]:
    if wire is None:
        return None
    result: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in wire:
        result[topic_id] = result.get(topic_id, frozenset()) | frozenset(partitions)
    return normalized(result)


def to_wire(assignment: Assignment) -> WireAssignment:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(assignment.items(), key=lambda kv: kv[0].bytes))


class ConsumerGroupCoordinator(ClassicMemberHandling, GroupMigration):
    def __init__(self, classic: Any, timer: Any, append_records: Callable[[list], Any],
                 config: Optional[ConsumerGroupConfig] = None) -> None:
        """``classic``: the partition's classic GroupCoordinator (status,
        group validation, the offset store). ``append_records(records)``
        appends one batch and returns an AppendCompletion."""
        self.classic = classic
        self._timer = timer
        self._append_records = append_records
        self.config = config or ConsumerGroupConfig()
        self.groups: dict[str, ConsumerGroup] = {}
        self.image = TopicsImage(-1, ())
        self._image_versions: dict[str, int] = {}  # edge (source) -> newest version it sent whole, oldest first
        self._ids_by_name: dict[str, tuple[uuid.UUID, int]] = {}
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._session_tasks: dict[tuple[str, str], TimerTask] = {}
        self._revocation_tasks: dict[tuple[str, str], TimerTask] = {}
        self._loading: dict[R.ConsumerGroupKey, R.Value] = {}

    # ======================================================================
    # topics
    # ======================================================================

    def wants_image(self, image: Optional[TopicsImage]) -> bool:
        """Is ``image`` a reference to a version of its edge we never got whole?"""
        return image is not None and image.topics is None and (
            self._image_versions.get(image.source, -1) < image.version)

    def see_image(self, image: Optional[TopicsImage]) -> None:
        """The newest whole image of any edge is the one we resolve topics
        with; an edge's image older than one it sent before (a reordered
        call) is ignored."""
        if image is None or image.topics is None or image.version < self._image_versions.get(image.source, -1):
            return
        self._image_versions.pop(image.source, None)
        self._image_versions[image.source] = image.version
        while len(self._image_versions) > MAX_IMAGE_SOURCES:  # edges that restarted long ago
            del self._image_versions[next(iter(self._image_versions))]
        if image.version == self.image.version and image.topics == self.image.topics:
            return
        self.image = image
        self._ids_by_name = {name: (topic_id, count) for name, topic_id, count in image.topics}
        self._names_by_id = {topic_id: name for name, topic_id, _ in image.topics}

    def _matches(self, regex: str) -> list[str]:
        try:
            pattern = re.compile(regex)
        except re.error:
            return []
        return [name for name, _, _ in self.image.topics
                if name not in self.image.internal and pattern.fullmatch(name)]

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        return {name: self._ids_by_name[name] for name in sorted(group.subscribed_topic_names(self._matches))
                if name in self._ids_by_name}

    # ======================================================================
    # membership: ConsumerGroupHeartbeat
    # ======================================================================

    def owns(self, group_id: str) -> bool:
        return group_id in self.groups

    def heartbeat(self, request: ConsumerHeartbeat, image: Optional[TopicsImage],
                  callback: Callable[[ConsumerHeartbeatResult], None]) -> None:
        self.see_image(image)
        records: list = []
        try:
            result = self._heartbeat(request, records)
        except RequestFailure as failure:
            callback(ConsumerHeartbeatResult(failure.error, failure.message, member_id=request.member_id or None,
                                             member_epoch=-1))
            return
        self._write(records, lambda error: callback(result if error == ErrorCode.none else ConsumerHeartbeatResult(
            error, None, member_id=request.member_id)))

    def _check_status(self, group_id: str) -> None:
        error = self.classic._check_group_status(group_id, allow_empty_group_id=False)
        if error is not None:
            raise RequestFailure(error)

    def _validate(self, request: ConsumerHeartbeat) -> None:
        if not request.group_id:
            raise RequestFailure(ErrorCode.invalid_request, "GroupId can't be empty.")
        if request.instance_id is not None and request.instance_id == "":
            raise RequestFailure(ErrorCode.invalid_request, "InstanceId can't be empty.")
        if request.rack_id is not None and request.rack_id == "":
            raise RequestFailure(ErrorCode.invalid_request, "RackId can't be empty.")
        epoch = request.member_epoch
        if request.api_version >= 1 and not request.member_id:
            raise RequestFailure(ErrorCode.invalid_request, "MemberId can't be empty.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise RequestFailure(ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or request.owned:
                raise RequestFailure(ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise RequestFailure(ErrorCode.invalid_request,
                                     "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise RequestFailure(ErrorCode.invalid_request, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise RequestFailure(ErrorCode.invalid_request, f"MemberEpoch is invalid: {epoch}.")
        if epoch >= 0 and request.api_version == 0 and epoch != 0 and not request.member_id:
            raise RequestFailure(ErrorCode.invalid_request, "MemberId can't be empty.")
        if request.server_assignor is not None and request.server_assignor not in self.config.assignors:
            raise RequestFailure(ErrorCode.unsupported_assignor, f"ServerAssignor {request.server_assignor} is not supported. "
                                                        f"Supported assignors: {', '.join(self.config.assignors)}.")
        regex = request.subscribed_topic_regex
        if regex:
            if len(regex) > MAX_REGEX_LENGTH:
                raise RequestFailure(ErrorCode.invalid_regular_expression, "SubscribedTopicRegex is too long.")
            try:
                re.compile(regex)
            except re.error as exc:
                raise RequestFailure(ErrorCode.invalid_regular_expression, f"SubscribedTopicRegex `{regex}` is not a valid "
                                                                  f"regular expression: {exc}.")

    def _group_for_join(self, group_id: str, create: bool, records: list) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.classic.group(group_id)
        if classic is not None and not classic.is_(GroupState.DEAD) and (
                classic.size > 0 or not classic.is_(GroupState.EMPTY)):
            if create and self._upgrade_allowed() and classic.protocol_type == "consumer" \
                    and classic.size <= self.config.max_size:
                return self._convert_classic_group(classic, records)
            raise RequestFailure(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if not create:
            raise RequestFailure(ErrorCode.unknown_member_id, f"Group {group_id} has no member with this id.")
        group = ConsumerGroup(group_id)
        if classic is not None and classic.protocol_type is not None:
            # An empty classic group becomes a consumer group: its metadata record goes, its offsets stay.
            from cluster.groups.records import group_metadata_tombstone
            records.append(group_metadata_tombstone(group_id))
        if classic is None:
            self.classic.manager.add_group(group_id)  # the holder of its offsets
        self.groups[group_id] = group
        return group

    def _heartbeat(self, request: ConsumerHeartbeat, records: list) -> ConsumerHeartbeatResult:
        self._check_status(request.group_id)
        self._validate(request)
        epoch = request.member_epoch
        if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request, records)
        group = self._group_for_join(request.group_id, epoch == JOIN_GROUP_MEMBER_EPOCH, records)
        owned = to_assignment(request.owned)
        member, is_new = self._member_for(group, request, owned, records)
        before = member

        # The member's subscription and metadata, as this request changes them.
        changes = {"client_id": request.client_id, "client_host": request.client_host}
        if request.rack_id is not None:
            changes["rack_id"] = request.rack_id
        if request.rebalance_timeout_ms != -1:
            changes["rebalance_timeout_ms"] = request.rebalance_timeout_ms
        if request.subscribed_topic_names is not None:
            changes["subscribed_topic_names"] = tuple(sorted(set(request.subscribed_topic_names)))
        if request.subscribed_topic_regex is not None:
            changes["subscribed_topic_regex"] = request.subscribed_topic_regex or None
        if request.server_assignor is not None:
            changes["server_assignor"] = request.server_assignor
        if request.instance_id is not None:
            changes["instance_id"] = request.instance_id
        member = member.replace(**changes)
        bump = is_new or any(getattr(member, name) != getattr(before, name) for name in
                             ("subscribed_topic_names", "subscribed_topic_regex", "server_assignor"))
        if is_new or member != before:
            records.append(self._member_metadata_record(group.group_id, member))
        group.put_member(member)
        self._update_group(group, bump, records)

        # Reconcile towards the target.
        member = group.members[member.member_id]
        target = group.target.get(member.member_id, {})
        reconciled = reconcile(member, group.assignment_epoch, target,
                               lambda t, p: group.holder(t, p) not in (None, member.member_id), owned)
        if reconciled != member or is_new:
            records.append(self._current_assignment_record(group.group_id, reconciled))
            group.put_member(reconciled)
        self._schedule_session(group.group_id, reconciled.member_id)
        self._schedule_revocation(group.group_id, reconciled)
        send_assignment = (epoch == JOIN_GROUP_MEMBER_EPOCH or reconciled.assigned != before.assigned
                           or (owned is not None and owned != reconciled.assigned))
        return ConsumerHeartbeatResult(ErrorCode.none, None, member_id=reconciled.member_id,
                                       member_epoch=reconciled.member_epoch,
                                       heartbeat_interval_ms=self.config.heartbeat_interval_ms,
                                       assignment=to_wire(reconciled.assigned) if send_assignment else None)

    def _member_for(self, group: ConsumerGroup, request: ConsumerHeartbeat, owned: Optional[Assignment],
                    records: list) -> tuple[ConsumerMember, bool]:
        """(the member this request speaks for, whether it is new)."""
        epoch = request.member_epoch
        member_id = request.member_id or str(uuid.uuid4())  # v0: the coordinator names new members
        if request.instance_id is not None:
            current_id = group.static_members.get(request.instance_id)
            if epoch == JOIN_GROUP_MEMBER_EPOCH:
                if current_id is None or current_id == member_id:
                    pass  # a new static member, or the same one rejoining
                else:
                    previous = group.members[current_id]
                    if previous.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise RequestFailure(ErrorCode.unreleased_instance_id, f"Static member {current_id} with instance id "
                                             f"{request.instance_id} is not released yet.")
                    # A restarted static member takes over its previous incarnation's
                    # assignment and epoch: no rebalance.
                    return self._replace_static_member(group, previous, member_id, records), False
            else:
                if current_id is None:
                    raise RequestFailure(ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
                if current_id != member_id:
                    raise RequestFailure(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id "
                                         f"{request.instance_id} was replaced by {current_id}.")
        member = group.members.get(member_id)
        if member is not None and member.uses_classic_protocol:
            # A classic member of a mixed group speaks JoinGroup/Heartbeat only.
            raise RequestFailure(ErrorCode.unknown_member_id, f"Member {member_id} uses the classic protocol.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if member is not None:
                return member, False  # joining again (its answer was lost, or it was fenced on its side)
            if len(group.members) >= self.config.max_size:
                raise RequestFailure(ErrorCode.group_max_size_reached, f"The consumer group has reached its maximum capacity "
                                     f"of {self.config.max_size} members.")
            return ConsumerMember(member_id=member_id, member_epoch=0), True
        if member is None:
            raise RequestFailure(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
        if epoch > member.member_epoch:
            raise RequestFailure(ErrorCode.fenced_member_epoch, f"The consumer group member has a greater member epoch "
                                 f"({epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                                 f"The member must abandon all its partitions and rejoin.")
        if epoch < member.member_epoch:
            # The answer that moved it to its current epoch may have been lost:
            # the previous epoch is fine while it owns nothing it should not.
            if epoch != member.previous_member_epoch or owned is None or not is_subset(owned, member.assigned):
                raise RequestFailure(ErrorCode.fenced_member_epoch, f"The consumer group member has a smaller member epoch "
                                     f"({epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                                     f"The member must abandon all its partitions and rejoin.")
        return member, False

    def _replace_static_member(self, group: ConsumerGroup, previous: ConsumerMember, member_id: str,
                               records: list) -> ConsumerMember:
        target = group.target.get(previous.member_id, {})
        self._remove_member_records(group.group_id, previous.member_id, records)
        self._cancel_timers(group.group_id, previous.member_id)
        group.remove_member(previous.member_id)
        epoch = group.assignment_epoch if previous.state is MemberState.STABLE else previous.previous_member_epoch
        member = previous.replace(member_id=member_id, member_epoch=max(epoch, previous.previous_member_epoch, 0))
        group.put_member(member)
        group.target[member_id] = target
        records.append(R.record(R.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id,
                                R.TargetAssignmentMemberValue(target)))
        records.append(self._current_assignment_record(group.group_id, member))
        return member

    def _update_group(self, group: ConsumerGroup, bump: bool, records: list) -> None:
        """Bump the group epoch if membership, subscriptions or the subscribed
        topics changed, and compute the new target assignment."""
        # Until an edge has shown us the topics (just after a load), the stored
        # subscription metadata stands: an empty image is no reason to unassign.
        metadata = self._subscription_metadata(group) if self.image.version >= 0 else group.subscription_metadata
        metadata_changed = metadata != group.subscription_metadata
        if metadata_changed or bump:
            group.group_epoch += 1
            if metadata_changed:
                group.subscription_metadata = metadata
                records.append(R.record(R.PARTITION_METADATA, group.group_id, None, R.PartitionMetadataValue(
                    tuple(R.TopicMetadata(t, name, n) for name, (t, n) in sorted(metadata.items())),
                    group.group_epoch)))
            records.append(R.record(R.GROUP_METADATA, group.group_id, None, R.GroupMetadataValue(group.group_epoch)))
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)

    def _compute_target(self, group: ConsumerGroup, records: list) -> None:
        metadata = group.subscription_metadata
        subscriptions = {}
        for member in group.members.values():
            names = set(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                pattern = re.compile(member.subscribed_topic_regex)
                names.update(n for n in metadata if pattern.fullmatch(n))
            subscriptions[member.member_id] = frozenset(metadata[n][0] for n in names if n in metadata)
        counts = {topic_id: n for topic_id, n in metadata.values()}
        assignor = ASSIGNORS[group.preferred_assignor(self.config.assignors[0])]
        target = assignor.assign(AssignmentSpec(subscriptions, counts, dict(group.target)))
        for member_id in group.members:
            new = target.get(member_id, {})
            if group.target.get(member_id) != new or member_id not in group.target:
                records.append(R.record(R.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id,
                                        R.TargetAssignmentMemberValue(new)))
        group.target = {m: target.get(m, {}) for m in group.members}
        group.assignment_epoch = group.group_epoch
        records.append(R.record(R.TARGET_ASSIGNMENT_METADATA, group.group_id, None,
                                R.TargetAssignmentMetadataValue(group.assignment_epoch)))

    def _leave(self, request: ConsumerHeartbeat, records: list) -> ConsumerHeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            raise RequestFailure(ErrorCode.unknown_member_id, f"Group {request.group_id} has no member {request.member_id}.")
        member_id = request.member_id
        if request.instance_id is not None:
            current_id = group.static_members.get(request.instance_id)
            if current_id is None:
                raise RequestFailure(ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
            if current_id != member_id:
                raise RequestFailure(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id "
                                     f"{request.instance_id} was replaced by {current_id}.")
        member = group.members.get(member_id)
        if member is None:
            raise RequestFailure(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
        interval = self.config.heartbeat_interval_ms
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaving for a while (a restart): its partitions stay
            # with it, for its next incarnation, until its session ends.
            left = member.replace(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            group.put_member(left)
            records.append(self._current_assignment_record(group.group_id, left))
            self._cancel_revocation(group.group_id, member_id)
            return ConsumerHeartbeatResult(ErrorCode.none, None, member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH, interval)
        self._remove_member(group, member_id, records, "the member left")
        return ConsumerHeartbeatResult(ErrorCode.none, None, member_id, LEAVE_GROUP_MEMBER_EPOCH, interval)

    def _remove_member(self, group: ConsumerGroup, member_id: str, records: list, reason: str) -> None:
        """Kafka's consumerGroupFenceMember: the member goes, or, when it was the
        last consumer-protocol member beside classic ones, the group becomes a
        classic group without it (migration.py)."""
        log.info("consumer group %s: member %s removed (%s)", group.group_id, member_id, reason)
        if self._downgrade_on_leave(group, member_id):
            self._convert_to_classic_group(group, member_id, records, rebalance=True)
            return
        self._remove_member_records(group.group_id, member_id, records)
        self._cancel_timers(group.group_id, member_id)
        group.remove_member(member_id)
        self._update_group(group, True, records)

    @staticmethod
    def _remove_member_records(group_id: str, member_id: str, records: list) -> None:
        records.append(R.record(R.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, None))
        records.append(R.record(R.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None))
        records.append(R.record(R.MEMBER_METADATA, group_id, member_id, None))

    @staticmethod
    def _member_metadata_record(group_id: str, member: ConsumerMember):
        return R.record(R.MEMBER_METADATA, group_id, member.member_id, R.MemberMetadataValue(
            member.instance_id, member.rack_id, member.client_id, member.client_host, member.subscribed_topic_names,
            member.subscribed_topic_regex, member.rebalance_timeout_ms, member.server_assignor,
            member.classic_protocols, member.classic_session_timeout_ms))

    @staticmethod
    def _current_assignment_record(group_id: str, member: ConsumerMember):
        return R.record(R.CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id, R.CurrentMemberAssignmentValue(
            member.member_epoch, member.previous_member_epoch, int(member.state), member.assigned,
            member.pending_revocation))

    # ======================================================================
    # timers
    # ======================================================================

    def _schedule_session(self, group_id: str, member_id: str, timeout_ms: Optional[int] = None) -> None:
        key = (group_id, member_id)
        old = self._session_tasks.pop(key, None)
        if old is not None:
            old.cancel()
        if self._timer is None:
            return
        task = TimerTask(timeout_ms or self.config.session_timeout_ms,
                         lambda: self._expire(key, self._session_tasks, "session timeout"))
        self._session_tasks[key] = task
        self._timer.add(task)

    def _schedule_revocation(self, group_id: str, member: ConsumerMember) -> None:
        key = (group_id, member.member_id)
        if member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._cancel_revocation(group_id, member.member_id)
            return
        if key in self._revocation_tasks or self._timer is None:
            return
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else self.config.session_timeout_ms
        task = TimerTask(timeout, lambda: self._expire(key, self._revocation_tasks, "rebalance timeout"))
        self._revocation_tasks[key] = task
        self._timer.add(task)

    def _cancel_revocation(self, group_id: str, member_id: str) -> None:
        task = self._revocation_tasks.pop((group_id, member_id), None)
        if task is not None:
            task.cancel()

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for tasks in (self._session_tasks, self._revocation_tasks):
            task = tasks.pop((group_id, member_id), None)
            if task is not None:
                task.cancel()

    def _expire(self, key: tuple[str, str], tasks: dict, reason: str) -> None:
        tasks.pop(key, None)
        group_id, member_id = key
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members or self.classic.status is not CoordinatorStatus.ACTIVE:
            return
        records: list = []
        self._remove_member(group, member_id, records, reason)
        self._write(records, lambda error: None)

    # ======================================================================
    # persistence
    # ======================================================================

    def _write(self, records: list, on_done: Callable[[ErrorCode], None]) -> None:
        if not records:
            on_done(ErrorCode.none)
            return
        # The classic manager's append: same ordering, same error mapping.
        self.classic.manager._append(records, on_done)

    def begin_loading(self) -> None:
        self._loading = {}

    def replay(self, key_bytes: bytes, value_bytes: Optional[bytes]) -> bool:
        """A record of the partition, in log order; False if it is not ours."""
        if len(key_bytes) < 2 or int.from_bytes(key_bytes[:2], "big", signed=True) not in R.CONSUMER_GROUP_RECORD_TYPES:
            return False
        key = R.decode_key(key_bytes)
        if value_bytes is None:
            self._loading.pop(key, None)
            if key.record_type == R.GROUP_METADATA:
                # The group was deleted: everything of it goes.
                for other in [k for k in self._loading if k.group_id == key.group_id]:
                    del self._loading[other]
        else:
            self._loading[key] = R.decode_value(key.record_type, value_bytes)
        return True

    def complete_loading(self) -> None:
        """Build the groups from what was replayed; every member gets a full session from now."""
        self._cancel_all_timers()
        groups: dict[str, ConsumerGroup] = {}
        members: dict[tuple[str, str], dict[int, R.Value]] = {}
        for key, value in self._loading.items():
            if key.record_type == R.GROUP_METADATA:
                group = groups.setdefault(key.group_id, ConsumerGroup(key.group_id))
                group.group_epoch = value.epoch
            elif key.member_id is not None:
                members.setdefault((key.group_id, key.member_id), {})[key.record_type] = value
        for key, value in self._loading.items():
            group = groups.get(key.group_id)
            if group is None:
                continue
            if key.record_type == R.TARGET_ASSIGNMENT_METADATA:
                group.assignment_epoch = value.assignment_epoch
            elif key.record_type == R.PARTITION_METADATA:
                group.subscription_metadata = {t.name: (t.topic_id, t.num_partitions) for t in value.topics}
        for (group_id, member_id), parts in members.items():
            group = groups.get(group_id)
            metadata = parts.get(R.MEMBER_METADATA)
            if group is None or metadata is None:
                continue
            current = parts.get(R.CURRENT_MEMBER_ASSIGNMENT) or R.CurrentMemberAssignmentValue(0, -1, 0)
            member = ConsumerMember(
                member_id=member_id, instance_id=metadata.instance_id, rack_id=metadata.rack_id,
                client_id=metadata.client_id, client_host=metadata.client_host,
                subscribed_topic_names=metadata.subscribed_topic_names,
                subscribed_topic_regex=metadata.subscribed_topic_regex, server_assignor=metadata.server_assignor,
                rebalance_timeout_ms=metadata.rebalance_timeout_ms, classic_protocols=metadata.classic_protocols,
                classic_session_timeout_ms=metadata.classic_session_timeout_ms,
                member_epoch=current.member_epoch, previous_member_epoch=current.previous_member_epoch,
                state=MemberState(current.state) if current.state in MemberState._value2member_map_
                else MemberState.UNKNOWN,
                assigned=dict(current.assigned), pending_revocation=dict(current.pending_revocation))
            group.put_member(member)
            target = parts.get(R.TARGET_ASSIGNMENT_MEMBER)
            group.target[member_id] = dict(target.partitions) if target is not None else {}
        self._loading = {}
        self.groups = groups
        for group in groups.values():
            if self.classic.group(group.group_id) is None:
                self.classic.manager.add_group(group.group_id)
            for member in group.members.values():
                self._schedule_session(group.group_id, member.member_id, self._session_timeout(member))
        if groups:
            log.info("loaded %d consumer groups", len(groups))

    def unload(self) -> None:
        self._cancel_all_timers()
        self.groups = {}
        self._loading = {}

    def _cancel_all_timers(self) -> None:
        for tasks in (self._session_tasks, self._revocation_tasks):
            for task in tasks.values():
                task.cancel()
            tasks.clear()

    # ======================================================================
    # offsets
    # ======================================================================

    def commit_offsets(self, group_id: str, member_id: str, instance_id: Optional[str], member_epoch: int,
                       offsets: Mapping[TopicPartition, Any], callback: Callable, api_version: int = 9,
                       producer: Any = None) -> bool:
        """OffsetCommit / TxnOffsetCommit for a consumer group (False: not ours,
        the classic coordinator answers). Members commit with their member
        epoch (Kafka's ConsumerGroup.validateOffsetCommit)."""
        group = self.groups.get(group_id)
        if group is None or self.classic.status is not CoordinatorStatus.ACTIVE:
            return False
        error = self._validate_commit(group, member_id, member_epoch, api_version, producer is not None)
        if error == ErrorCode.stale_member_epoch and member_epoch < group.members[member_id].member_epoch \
                and self._assigned_since(group, member_id, member_epoch, offsets):
            # KIP-1251 (Kafka 4.3): a commit that raced an epoch bump is accepted
            # when every partition in it is the member's since that epoch or
            # before (assignment epoch <= its epoch <= the member epoch):
            # nobody else can have owned them in between.
            error = None
        if error == ErrorCode.stale_member_epoch and producer is not None:
            error = ErrorCode.illegal_generation  # TxnOffsetCommit has no STALE_MEMBER_EPOCH (Kafka converts it)
        if error is not None:
            callback({TopicPartition(*tp): error for tp in offsets})
            return True
        holder = self.classic.group(group_id) or self.classic.manager.add_group(group_id)
        offsets = {TopicPartition(*tp): commit for tp, commit in offsets.items()}
        if producer is None:
            self.classic.manager.store_offsets(holder, offsets, callback)
        else:
            self.classic.manager.store_offsets(holder, offsets, callback, producer)
        return True

    def _assigned_since(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                        offsets: Mapping[TopicPartition, Any]) -> bool:
        for tp in offsets:
            topic = self._ids_by_name.get(tp[0])
            if topic is None or group.holder(topic[0], tp[1]) != member_id:
                return False
            since = group.assigned_at(topic[0], tp[1])
            if since is None or since > member_epoch:
                return False  # a zombie commit from before the partition came (back) to it
        return True

    @staticmethod
    def _validate_commit(group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int,
                         transactional: bool) -> Optional[ErrorCode]:
        if member_epoch < 0 and not group.members:
            return None  # an admin client or a consumer outside group management, while the group is empty
        if transactional and member_epoch < 0 and not member_id:
            return None  # TxnOffsetCommit v0-v2 carry no member
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not transactional and not member.uses_classic_protocol and api_version < 9:
            return ErrorCode.unsupported_version
        return _epoch_error(member, member_epoch)

    def validate_fetch(self, group_id: str, member_id: Optional[str], member_epoch: int) -> Optional[ErrorCode]:
        """OffsetFetch v9+ of a consumer group's member (Kafka's
        validateOffsetFetch): a request without member (admin clients, older
        versions) is fine; a member must exist and be at its epoch."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return _epoch_error(member, member_epoch)

    # ======================================================================
    # admin
    # ======================================================================

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics a consumer group's members subscribe to (OffsetDelete keeps their offsets)."""
        group = self.groups.get(group_id)
        return set(group.subscription_metadata) if group is not None and group.members else set()

    def describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        return [self._describe(group_id) for group_id in group_ids]

    def _assignment_described(self, assignment: Assignment) -> tuple[DescribedTopicPartitions, ...]:
        return tuple(DescribedTopicPartitions(t, self._names_by_id.get(t, ""), tuple(sorted(ps)))
                     for t, ps in sorted(assignment.items(), key=lambda kv: kv[0].bytes))

    def _describe(self, group_id: str) -> ConsumerGroupDescription:
        try:
            self._check_status(group_id)
        except RequestFailure as failure:
            return ConsumerGroupDescription(group_id, failure.error, failure.message)
        group = self.groups.get(group_id)
        if group is None:
            classic = self.classic.group(group_id)
            message = (f"Group {group_id} is not a consumer group." if classic is not None
                       and not classic.is_(GroupState.DEAD) else f"Group {group_id} not found.")
            return ConsumerGroupDescription(group_id, ErrorCode.group_id_not_found, message)
        members = tuple(DescribedConsumerMember(
            m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            m.subscribed_topic_names, m.subscribed_topic_regex, self._assignment_described(m.assigned),
            self._assignment_described(group.target.get(m.member_id, {})), 0 if m.uses_classic_protocol else 1)
            for m in sorted(group.members.values(), key=lambda m: m.member_id))
        return ConsumerGroupDescription(group_id, ErrorCode.none, None, group.state.value, group.group_epoch,
                                        group.assignment_epoch, group.preferred_assignor(self.config.assignors[0]),
                                        members)

    def listings(self, states: Optional[Iterable[str]] = None) -> list[GroupListing]:
        wanted = {s.lower() for s in states or ()}
        return [GroupListing(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state.value, "consumer")
                for g in self.groups.values() if not wanted or g.state.value.lower() in wanted]

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """DeleteGroups of consumer groups (ids that are not ours are left
        out of the answer): Empty ones lose their records; their offsets go
        with the classic holder's deletion, which the caller runs next."""
        errors: dict[str, ErrorCode] = {}
        records: list = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                continue
            if group.members:
                errors[group_id] = ErrorCode.non_empty_group
                continue
            records.append(R.record(R.TARGET_ASSIGNMENT_METADATA, group_id, None, None))
            records.append(R.record(R.PARTITION_METADATA, group_id, None, None))
            records.append(R.record(R.GROUP_METADATA, group_id, None, None))
            group.dead = True
            del self.groups[group_id]
            errors[group_id] = ErrorCode.none
        self._write(records, lambda error: None)
        return errors
