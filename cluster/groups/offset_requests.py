"""The offset requests of classic and consumer groups: OffsetCommit,
OffsetFetch, TxnOffsetCommit and the transaction markers' completion,
OffsetDelete and the retention sweep (Kafka's GroupCoordinator
handleCommitOffsets, handleTxnCommitOffsets, handleFetchOffsets,
handleDeleteOffsets; the storing is GroupMetadataManager's)."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from cluster.groups.api import UNKNOWN_MEMBER_ID, OffsetFetchResult, PartitionCommit, TopicPartition, TxnProducer
from cluster.groups.group import GroupMetadata, GroupState, IllegalStateError, invoke_callback
from cluster.groups.metadata_manager import CommitCallback
from core.error_codes import ErrorCode

S = GroupState


class OffsetRequests:
    """Part of GroupCoordinator (group_coordinator.py), which holds the
    state these methods use: ``manager`` (the groups as stored), ``config``,
    the purgatory of delayed operations and the clock, and the methods of the
    other parts."""
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
    # OffsetDelete / expiration
    # ======================================================================

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
