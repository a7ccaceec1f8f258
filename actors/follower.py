"""Follower role of a partition replica actor.

The replica actor (actors/partition_leader.py) is one Ray actor class per
replica; a controller decision flips it between the leader role and this one.
Replication (the fetcher pulling from the leader replica actor, truncation by
leader epoch, follower HW) is built on this role in the replication issue; until
then a replica is only ever made a follower when it has no leader to follow.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode


class FollowerRole:
    """Mixin: requires self.partition (cluster.partition.Partition)."""

    async def become_follower(self, controller_epoch: int, leader_id: int, leader_epoch: int,
                              isr: list[int], replicas: list[int]) -> int:
        partition = self.partition
        error = partition.fence_controller(controller_epoch)
        if error:
            return error
        if leader_epoch < partition.leader_epoch:
            return int(ErrorCode.fenced_leader_epoch)
        partition.is_leader = False
        partition.leader_epoch = leader_epoch
        partition.leader_id = leader_id
        partition.isr = tuple(isr)
        partition.replicas = tuple(replicas)
        self._wake_waiters()
        return 0
