"""The controller's channel to the rest of the cluster (Kafka's
ControllerChannelManager role): every request the controller sends to replicas,
edges and coordinators, and the death watches it keeps, go through one
interface. The controller logic decides; a channel delivers.

actors/controller_channel.py implements it with Ray actor calls; unit tests hand
in a fake (tests/unit/controller_fakes.py). No Ray here.

A "send" method returns an awaitable without waiting for it, so the controller
can issue a whole batch at once and await it together (one LeaderAndIsr round,
one UpdateMetadata round), as Kafka's channel does per broker.
"""
from __future__ import annotations

import abc
from typing import Any, Awaitable, Callable, Hashable, Iterable, NamedTuple

from core.controller_messages import MetadataDelta, MetadataSnapshot


class ReplicaKey(NamedTuple):
    """One replica: (topic, partition, broker id). Equal to the plain tuple."""
    topic: str
    partition: int
    broker_id: int


class ReplicaSpec(NamedTuple):
    """What a new replica is created with, on its broker's node."""
    topic: str
    partition: int
    broker_id: int
    ray_node_id: str | None  # the broker's current node (hard affinity); None: anywhere
    log_dirs: list[str]
    log_config: Any  # storage.log.LogConfig, from cluster/log_config.log_config_for
    min_insync_replicas: int
    replica_config: dict  # broker settings the replica needs (ControllerService.replica_config)


class LeaderAndIsr(NamedTuple):
    """One partition's LeaderAndIsr, as its replicas receive it."""
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    zk_version: int
    # Kafka's IsNew: sent for the replicas of partitions just created (CreateTopics,
    # CreatePartitions). A pooled one starts now while its node has a free live slot
    # (cluster/replica_pool.py, prestart): its producers and consumers come next.
    is_new: bool = False


# A replica's answer to a request: 0, an error code, or the exception the call raised.
Outcome = Any
# ReplicaKey -> ReplicaSpec; the controller attaches it, the channel calls it when it must
# create a replica it does not know (a LeaderAndIsr, or a coordinator's leader replica).
SpecFor = Callable[[ReplicaKey], ReplicaSpec]


class ControllerChannel(abc.ABC):
    """The controller's I/O with replicas, edges and coordinators."""

    # ---- replicas: creation and the requests of the replica state machine ----------------------
    @abc.abstractmethod
    def attach(self, spec_for: SpecFor) -> None:
        """Called once by the controller: how to describe a replica to create."""

    @abc.abstractmethod
    def has_replica(self, key: ReplicaKey) -> bool:
        """Whether a replica is known (created, or found) and not forgotten since."""

    @abc.abstractmethod
    def replica_keys(self) -> list[ReplicaKey]:
        """Every known replica."""

    @abc.abstractmethod
    def ensure_replica(self, key: ReplicaKey) -> None:
        """Create the replica (or find it by name) unless it is known."""

    @abc.abstractmethod
    def forget_replica(self, key: ReplicaKey) -> None:
        """A call to it failed: look it up (or create it) again next time."""

    @abc.abstractmethod
    def become_leader(self, key: ReplicaKey, request: LeaderAndIsr) -> Awaitable[Outcome]:
        """LeaderAndIsr to the partition's leader replica (`key`, ensured first)."""

    @abc.abstractmethod
    def become_follower(self, key: ReplicaKey, request: LeaderAndIsr,
                        leader: ReplicaKey | None) -> Awaitable[Outcome]:
        """LeaderAndIsr to a follower; `leader` is the live leader replica (ensured first), or None."""

    @abc.abstractmethod
    def stop_replica(self, key: ReplicaKey, controller_epoch: int, delete: bool) -> Awaitable[Outcome]:
        """StopReplica (with deletion of its logs when `delete`)."""

    @abc.abstractmethod
    def remove_replica(self, key: ReplicaKey) -> None:
        """A deleted replica (StopReplica with deletion answered 0): end it and forget it."""

    @abc.abstractmethod
    def update_log_config(self, key: ReplicaKey, log_config: Any, min_insync_replicas: int) -> Awaitable[Outcome]:
        """A topic config change, picked up by a running replica."""

    @abc.abstractmethod
    def update_replication_throttle(self, key: ReplicaKey, leader_rate: int | None, follower_rate: int | None,
                                    **throttled_replicas: Any) -> Awaitable[Outcome]:
        """Replication quota rates and/or throttled replica lists (None: unchanged)."""

    @abc.abstractmethod
    async def close_replicas(self, broker_id: int, timeout_s: float) -> int:
        """Clean shutdown of one broker's replicas (flush, checkpoint); -> how many were asked."""

    def replica_state(self, key: ReplicaKey) -> Awaitable[dict] | None:
        """The replica's state (cluster/partition.Partition.state: offsets, log size)
        for the balancer's bytes left; None where it cannot be asked without
        creating the replica. Not abstract: a channel without it reports no sizes."""
        return None

    # ---- edges: UpdateMetadata ---------------------------------------------------------------------
    @abc.abstractmethod
    def has_edge(self, broker_id: int) -> bool:
        """Whether the broker's edge can be reached (found by name)."""

    @abc.abstractmethod
    def update_metadata(self, broker_id: int, update: MetadataSnapshot | MetadataDelta,
                        leaders: Iterable[ReplicaKey]) -> Awaitable[Outcome]:
        """UpdateMetadata (whole or a delta) to the broker's edge, with the
        handles of the leader replicas it names (replicas ensured first);
        answered with a MetadataApplied."""

    def leader_identity(self, key: ReplicaKey) -> Hashable:
        """What tells apart the handles update_metadata would send for ``key``
        over time (a re-created actor, a pooled replica turned live): when it
        changes, the controller sends the key's topic to the edge again even
        if its metadata did not change. Not abstract: a channel whose handles
        never change answers the key itself."""
        return tuple(key)

    @abc.abstractmethod
    def forget_edge(self, broker_id: int) -> None:
        """A call to the edge failed: look it up again next time."""

    @abc.abstractmethod
    def forget_broker(self, broker_id: int) -> None:
        """The broker left: its edge, replicas and coordinators went with its node."""

    # ---- group and transaction coordinators -----------------------------------------------------
    @abc.abstractmethod
    async def sync_coordinators(self, ctx: Any, partitions: Iterable[tuple[str, int]]) -> None:
        """After a LeaderAndIsr round: the coordinators of the internal topics' partitions
        among `partitions` are elected on their leader's broker and resign elsewhere."""

    # ---- death watch ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def watch_edge(self, broker_id: int) -> Awaitable[str | None] | None:
        """An awaitable that completes when the broker's edge dies, with the dead edge's
        id; None when no edge is found (its node is gone already)."""

    @abc.abstractmethod
    def watch_controller(self, controller_id: int) -> Awaitable[bool] | None:
        """An awaitable that completes when the active controller's actor dies (True) or
        answers (False, it never should); None when it cannot be found."""
