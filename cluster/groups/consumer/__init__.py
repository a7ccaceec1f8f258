"""Kafka 4's consumer group protocol (KIP-848), beside the classic one.

* ``records``: the KIP-848 records of ``__consumer_offsets`` (key types 3-8).
* ``model``: a group, its members, and the reconciliation of a member's
  assignment (epochs; revoke before reassign).
* ``assignors``: the server-side ``uniform`` and ``range`` assignors.
* ``coordinator``: ``ConsumerGroupCoordinator``, ConsumerGroupHeartbeat and
  ConsumerGroupDescribe, sessions, offsets with member epochs, loading.
* ``classic_members``: JoinGroup/SyncGroup/Heartbeat/LeaveGroup of classic
  members in a consumer group.
* ``migration``: upgrade of a classic group, downgrade back to a classic
  group, and empty groups changing kind (``group.consumer.migration.policy``).
* ``api``: the plain values its requests and answers are made of.
"""
from cluster.groups.consumer.api import (ConsumerGroupDescription, ConsumerHeartbeat, ConsumerHeartbeatResult,
                                         TopicsImage, TopicsImageWanted)
from cluster.groups.consumer.coordinator import ConsumerGroupConfig, ConsumerGroupCoordinator

__all__ = ["ConsumerGroupConfig", "ConsumerGroupCoordinator", "ConsumerGroupDescription", "ConsumerHeartbeat",
           "ConsumerHeartbeatResult", "TopicsImage", "TopicsImageWanted"]
