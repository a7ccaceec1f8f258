"""What the active controller knows, rebuilt from ZooKeeper on every failover,
plus the pure decisions it makes over that state (leader election, metadata
snapshots). No Ray, no ZooKeeper here: cluster/controller/controller.py does the I/O
(ZooKeeper off its event loop, everything else through its channel).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from cluster.controller.leader_election import offline_partition_leader
from cluster.controller.partition_state_machine import PartitionStateMachine
from cluster.controller.reassignment import ReplicaAssignment
from cluster.controller.replica_state_machine import ReplicaStateMachine
from core.controller_messages import BrokerEndpoint, MetadataSnapshot, PartitionSnapshot, TopicSnapshot

NO_LEADER = -1


@dataclasses.dataclass
class PartitionState:
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int = -1


@dataclasses.dataclass
class TopicState:
    name: str
    topic_id: str  # ZooKeeper form: base64url of the UUID
    assignment: dict[int, list[int]]
    configs: dict[str, str]
    internal: bool = False


@dataclasses.dataclass
class BrokerState:
    broker_id: int
    host: str
    port: int
    rack: str | None
    ray_node_id: str | None
    log_dirs: list[str]
    # raykafka.replicas.per.node.max of the broker's node, as it registered it
    # (None: a broker that states none, e.g. an older version: no limit).
    replicas_max: int | None = None
    # Its hosted limit when its replicas hibernate (issue 30): raykafka.partitions.per.node.max.
    partitions_max: int | None = None


class ControllerContext:
    def __init__(self, epoch: int, cluster_id: str):
        self.epoch = epoch
        self.cluster_id = cluster_id
        self.brokers: dict[int, BrokerState] = {}
        self.topics: dict[str, TopicState] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.topics_being_deleted: set[str] = set()
        # Kafka's two controller state machines, rebuilt on every failover.
        self.replica_sm = ReplicaStateMachine()
        self.partition_sm = PartitionStateMachine()
        # Partitions in the middle of a reassignment (KIP-455), by (topic, partition).
        self.reassignments: dict[tuple[str, int], ReplicaAssignment] = {}
        # Brokers in controlled shutdown: no new leaderships go to them.
        self.shutting_down: set[int] = set()
        # Replicas to delete once their broker is reachable (ReplicaDeletionIneligible).
        self.pending_replica_deletions: set[tuple[str, int, int]] = set()

    @property
    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def partitions_of(self, topic: str):
        t = self.topics[topic]
        for p, replicas in sorted(t.assignment.items()):
            yield (topic, p), replicas

    def all_partitions(self):
        for topic in sorted(self.topics):
            yield from self.partitions_of(topic)

    def elect_offline_leader(self, replicas: list[int], isr: list[int], unclean: bool) -> int:
        """Kafka's OfflinePartitionLeaderElectionStrategy: first live assigned
        replica that is in the ISR; unclean only if allowed."""
        result = offline_partition_leader(replicas, isr, self.brokers.keys(), unclean)
        return NO_LEADER if result.leader is None else result.leader

    def metadata_snapshot(self, controller_id: int) -> MetadataSnapshot:
        brokers = tuple(BrokerEndpoint(b.broker_id, b.host, b.port, b.rack)
                        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id))
        topics = {}
        for name, t in self.topics.items():
            if name in self.topics_being_deleted:
                continue
            partitions = {}
            for p, replicas in t.assignment.items():
                s = self.states.get((name, p))
                partitions[p] = PartitionSnapshot(leader=s.leader if s else NO_LEADER,
                                                  leader_epoch=s.leader_epoch if s else -1,
                                                  isr=tuple(s.isr) if s else (), replicas=tuple(replicas))
            topics[name] = TopicSnapshot(zk_topic_id_to_uuid(t.topic_id), partitions, t.internal)
        return MetadataSnapshot(self.epoch, controller_id, self.cluster_id, brokers, topics)


def zk_topic_id_to_uuid(topic_id: str) -> str:
    """Kafka writes topic ids as unpadded base64url; the wire wants a UUID."""
    import base64
    import uuid

    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    return str(uuid.UUID(bytes=raw))


def new_zk_topic_id() -> str:
    import base64
    import uuid

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
