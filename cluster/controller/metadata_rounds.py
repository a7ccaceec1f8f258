"""UpdateMetadata rounds as deltas: what the controller last told each edge,
and what to send it next.

Kafka's ZooKeeper-mode controller sends UpdateMetadata for the partitions a
change touched, and the whole image only to a broker that starts. Here the
same: an edge the controller has told something in its epoch, with the same
broker set, gets a MetadataDelta of the topics whose snapshot or whose leader
replicas on that broker changed since; any other edge gets the whole
MetadataSnapshot. Every round is numbered; a delta names the number it
applies to, and an edge holding another one refuses it (the answer asks for a
whole snapshot), so a lost, failed or reordered round costs one whole
snapshot, never a wrong image.

Plain Python: the controller's BrokerRequests drives it; unit tests drive it
without Ray or ZooKeeper.
"""
from __future__ import annotations

from typing import Hashable, Mapping, NamedTuple, Sequence, Union

from cluster.controller.channel import ReplicaKey
from core.controller_messages import BrokerEndpoint, MetadataDelta, MetadataSnapshot, TopicSnapshot

MetadataUpdate = Union[MetadataSnapshot, MetadataDelta]


class EdgeImage(NamedTuple):
    """What an edge holds once it applied a round: the round's number and
    epoch, the brokers, every topic, and per topic the partitions whose
    leader replica it was handed, each with the identity of that handle (a
    re-created actor, or a pooled replica turned live, is a new handle
    under the same snapshot: its topic goes again)."""

    controller_epoch: int
    version: int
    brokers: Sequence[BrokerEndpoint]
    topics: Mapping[str, TopicSnapshot]
    leaders: Mapping[str, frozenset[tuple[int, Hashable]]]


class PlannedUpdate(NamedTuple):
    update: MetadataUpdate
    leaders: list[ReplicaKey]  # the leader replicas whose handles go with it
    image: EdgeImage  # what the edge holds once it applied it


def leaders_by_topic(leaders: Mapping[ReplicaKey, Hashable]) -> dict[str, frozenset[tuple[int, Hashable]]]:
    by_topic: dict[str, set[tuple[int, Hashable]]] = {}
    for key, identity in leaders.items():
        by_topic.setdefault(key.topic, set()).add((key.partition, identity))
    return {topic: frozenset(partitions) for topic, partitions in by_topic.items()}


class MetadataRounds:
    """The numbering of one controller's UpdateMetadata rounds and, per edge,
    the image it acknowledged last."""

    def __init__(self) -> None:
        self._version = 0
        self._told: dict[int, EdgeImage] = {}

    def number(self, snapshot: MetadataSnapshot) -> MetadataSnapshot:
        """The snapshot with the next round number."""
        self._version += 1
        return snapshot._replace(version=self._version)

    def plan(self, broker_id: int, snapshot: MetadataSnapshot,
             leaders: Mapping[ReplicaKey, Hashable]) -> PlannedUpdate:
        """A delta against what ``broker_id``'s edge acknowledged last, or the
        whole snapshot when there is nothing to build one on. ``leaders``: the
        leader replicas on that broker, each with its handle's identity
        (ControllerChannel.leader_identity)."""
        image = EdgeImage(snapshot.controller_epoch, snapshot.version, tuple(snapshot.brokers), snapshot.topics,
                          leaders_by_topic(leaders))
        told = self._told.get(broker_id)
        if told is None or told.controller_epoch != image.controller_epoch or told.brokers != image.brokers:
            return PlannedUpdate(snapshot, list(leaders), image)
        changed = {name: topic for name, topic in image.topics.items()
                   if told.topics.get(name) != topic or told.leaders.get(name) != image.leaders.get(name)}
        removed = tuple(name for name in told.topics if name not in image.topics)
        delta = MetadataDelta(snapshot.controller_epoch, snapshot.controller_id, told.version, snapshot.version,
                              changed, removed)
        return PlannedUpdate(delta, [key for key in leaders if key.topic in changed], image)

    def full(self, broker_id: int, snapshot: MetadataSnapshot,
             leaders: Mapping[ReplicaKey, Hashable]) -> PlannedUpdate:
        """The whole snapshot, whatever the edge was told before (it asked for it)."""
        self._told.pop(broker_id, None)
        return self.plan(broker_id, snapshot, leaders)

    def delivered(self, broker_id: int, image: EdgeImage) -> None:
        """The edge applied the round that leaves it holding ``image``."""
        told = self._told.get(broker_id)
        if told is None or told.controller_epoch != image.controller_epoch or told.version < image.version:
            self._told[broker_id] = image

    def forget(self, broker_id: int) -> None:
        """The edge's image is unknown (a failed or timed-out call, a refusal):
        its next round is a whole snapshot."""
        self._told.pop(broker_id, None)


__all__ = ["EdgeImage", "MetadataRounds", "MetadataUpdate", "PlannedUpdate", "leaders_by_topic"]
