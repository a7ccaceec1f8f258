"""Kafka's partition leader election strategies (PartitionLeaderElectionAlgorithms
plus the ISR each caller in the partition state machine derives), as pure
functions. Each answers who leads and with which ISR; None means no replica can
lead, and then the ISR is returned unchanged because the controller writes nothing.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Collection, Sequence


class ElectionType(enum.IntEnum):
    """ElectLeaders request's election_type."""
    PREFERRED = 0
    UNCLEAN = 1


@dataclasses.dataclass(frozen=True)
class ElectionResult:
    leader: int | None
    isr: list[int]
    unclean: bool = False

    @property
    def elected(self) -> bool:
        return self.leader is not None


def offline_partition_leader(assignment: Sequence[int], isr: Sequence[int], live: Collection[int],
                             unclean_enabled: bool) -> ElectionResult:
    """Offline/new partition: the first assigned replica that is live and in the
    ISR. Failing that, with unclean.leader.election.enable, the first live
    assigned replica, which may lack committed data: its ISR is itself alone.
    A clean leader keeps the ISR members that are still live."""
    for replica in assignment:
        if replica in live and replica in isr:
            return ElectionResult(replica, [r for r in isr if r in live])
    if unclean_enabled:
        for replica in assignment:
            if replica in live:
                return ElectionResult(replica, [replica], unclean=True)
    return ElectionResult(None, list(isr))


def reassign_partition_leader(target_replicas: Sequence[int], isr: Sequence[int],
                              live: Collection[int]) -> ElectionResult:
    """Reassignment moving the leader off a removed replica: the first target
    replica that is live and in the ISR. The ISR is not changed here; removed
    replicas leave it later, when the reassignment shrinks the replica set."""
    for replica in target_replicas:
        if replica in live and replica in isr:
            return ElectionResult(replica, list(isr))
    return ElectionResult(None, list(isr))


def preferred_replica_partition_leader(assignment: Sequence[int], isr: Sequence[int],
                                       live: Collection[int]) -> ElectionResult:
    """Preferred-replica election: only the first assigned replica may win, and
    only if it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return ElectionResult(assignment[0], list(isr))
    return ElectionResult(None, list(isr))


def controlled_shutdown_partition_leader(assignment: Sequence[int], isr: Sequence[int], live: Collection[int],
                                         shutting_down: Collection[int]) -> ElectionResult:
    """Controlled shutdown: the first assigned replica that is live, in the ISR
    and not shutting down. Brokers shutting down leave the ISR. `live` is
    expected to still include the brokers shutting down (they are alive until
    they exit), as Kafka's isReplicaOnline(includeShuttingDownBrokers = true)."""
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return ElectionResult(replica, [r for r in isr if r not in shutting_down])
    return ElectionResult(None, list(isr))
