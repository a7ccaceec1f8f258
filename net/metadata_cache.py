"""The edge's view of the cluster, fed by the controller's UpdateMetadata calls.

Snapshots carry the controller epoch; one from an older epoch than the last
accepted (a zombie controller) is refused.
"""
from __future__ import annotations

import dataclasses
import uuid

from core.controller_messages import MetadataSnapshot


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo]
    internal: bool = False


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


class StaleControllerEpoch(Exception):
    pass


class MetadataCache:
    def __init__(self) -> None:
        self.controller_epoch = -1
        self.controller_id = -1
        self.cluster_id: str | None = None
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self._sources: dict = {}  # topic -> the TopicSnapshot its TopicInfo was built from
        self.version = 0

    def update(self, snapshot: MetadataSnapshot) -> None:
        epoch = snapshot.controller_epoch
        if epoch < self.controller_epoch:
            raise StaleControllerEpoch(
                f"UpdateMetadata from controller epoch {epoch} < current {self.controller_epoch}"
            )
        self.controller_epoch = epoch
        self.controller_id = snapshot.controller_id
        self.cluster_id = snapshot.cluster_id
        brokers = {b.id: BrokerInfo(b.id, b.host, b.port, b.rack) for b in snapshot.brokers}
        # A topic whose snapshot is the very object of the previous update (a
        # delta's unchanged topics) keeps its TopicInfo while the brokers, on
        # which its offline replicas depend, are the same.
        reusable = self._sources if brokers == self.brokers else {}
        self.brokers = brokers
        topics = {}
        for name, t in snapshot.topics.items():
            if reusable.get(name) is t and name in self.topics:
                topics[name] = self.topics[name]
                continue
            partitions = {
                int(p): PartitionInfo(
                    leader=s.leader, leader_epoch=s.leader_epoch,
                    replicas=tuple(s.replicas), isr=tuple(s.isr),
                    offline=tuple(r for r in s.replicas if r not in self.brokers),
                )
                for p, s in t.partitions.items()
            }
            topics[name] = TopicInfo(name, uuid.UUID(t.topic_id), partitions, t.internal)
        self._sources = dict(snapshot.topics)
        self.topics = topics
        self.topics_by_id = {t.topic_id: t for t in topics.values()}
        self.version += 1

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        info = self.topics.get(topic)
        return None if info is None else info.partitions.get(partition)
