"""How many partition replicas a node may host, and placement within it
(issue 18): plain functions, no Ray, no ZooKeeper.

Every replica is a Ray actor, so a process, whether its partition is busy or
not. Measured on the 2-core / 24 GiB dev VM (bench/PROFILE.md, "Every idle
replica actor costs the active ones"; README "Capacity"):

- idle CPU: ~1.1% of a core per replica (Ray's core worker wakes ~150 times
  a second per actor process, each wake-up taking the GIL);
- memory: ~48 MiB PSS per replica (`bench.run --matrix`, 20 idle replicas).

A node past a few hundred replicas stops serving (load average 75-160 at
~240 partition directories, then the node died), so each broker states a
capacity, `raykafka.replicas.per.node.max`, and the controller refuses
creations beyond it instead of letting the node fall over.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Mapping

# Measured per-replica costs (see the module docstring).
IDLE_CORES_PER_REPLICA = 0.011
PSS_BYTES_PER_REPLICA = 48 * 2**20
# Share of the node that idle replicas may take: the rest is for the busy
# replicas, the edge, Ray's own daemons (~0.8 GiB) and the page cache.
CPU_BUDGET = 0.5
MEMORY_BUDGET = 0.5

CAPACITY_KEY = "raykafka.replicas.per.node.max"
# With hibernation (issue 30) the live limit above bounds live actors, and this one the
# partitions a node hosts; a hibernated replica holds no process, no open file, no socket.
HOSTED_KEY = "raykafka.partitions.per.node.max"
# The smallest log a hosted partition is promised room for on disk (one small segment and
# its indexes); and the open files a hosted partition may hold in the edge (a segment read
# by sendfile, its index) while its replica hibernates.
DISK_BYTES_PER_PARTITION = 2**20
FDS_PER_PARTITION = 2
DISK_BUDGET = FD_BUDGET = 0.5


def default_partitions_per_node(open_files_limit: int, free_disk_bytes: int) -> int:
    """min(open-file limit * 0.5 / 2, free log-dir bytes * 0.5 / 1 MiB), at least 1.

    The CPU and memory of a hosted partition are those of its live replica,
    bounded by raykafka.replicas.per.node.max; what a hibernated one still
    costs is disk and, when it is read, file descriptors. This machine
    (nofile 20,000, ~69 GB free): min(5,000, ~35,000) = 5,000; Kafka's own
    guidance is ~4,000 partitions per broker."""
    by_fd = math.floor(open_files_limit * FD_BUDGET / FDS_PER_PARTITION)
    by_disk = math.floor(free_disk_bytes * DISK_BUDGET / DISK_BYTES_PER_PARTITION)
    return max(1, min(by_fd, by_disk))


def node_hosted_capacity(configured: int | None, log_dir: str) -> int:
    """This node's hosted limit: the configured value, else the default from its open-file limit and
    the free space of its (first) log dir."""
    if configured is not None:
        return configured
    import os
    import resource
    import shutil

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.makedirs(log_dir, exist_ok=True)
    return default_partitions_per_node(soft if soft > 0 else 1024, shutil.disk_usage(log_dir).free)


def always_live(replicas: Iterable[int], internal: bool, replicated_hibernate: bool = False) -> bool:
    """Replicas that never hibernate: internal topics', and replicated (RF > 1) ones unless
    replicated sets hibernate too (raykafka.replica.hibernate.replicated)."""
    return internal or (len(list(replicas)) > 1 and not replicated_hibernate)


def default_replicas_per_node(cores: float, memory_bytes: int, cpu_budget: float = CPU_BUDGET,
                              memory_budget: float = MEMORY_BUDGET,
                              idle_cores_per_replica: float = IDLE_CORES_PER_REPLICA,
                              bytes_per_replica: int = PSS_BYTES_PER_REPLICA) -> int:
    """min(cores * cpu_budget / idle cores per replica,
           memory * memory_budget / PSS per replica), at least 1.

    2 cores, 24 GiB: min(2 * 0.5 / 0.011, 12 GiB / 48 MiB) = min(90, 256) = 90."""
    by_cpu = math.floor(cores * cpu_budget / idle_cores_per_replica + 1e-9)
    by_memory = math.floor(memory_bytes * memory_budget / bytes_per_replica + 1e-9)
    return max(1, min(by_cpu, by_memory))


def node_capacity(configured: int | None, cores: float | None = None, memory_bytes: int | None = None) -> int:
    """This node's capacity: the configured value, else the default from its
    cores and memory (read here when not given)."""
    if configured is not None:
        return configured
    if cores is None:
        import os

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if memory_bytes is None:
        import psutil

        memory_bytes = psutil.virtual_memory().total
    return default_replicas_per_node(cores, memory_bytes)


def replicas_per_broker(assignments: Iterable[Mapping[int, Iterable[int]]]) -> dict[int, int]:
    """Replicas each broker hosts, over topic assignments (partition -> replica list)."""
    counts: dict[int, int] = {}
    for assignment in assignments:
        for replicas in assignment.values():
            for broker in replicas:
                counts[broker] = counts.get(broker, 0) + 1
    return counts


@dataclasses.dataclass(frozen=True)
class CapacityViolation:
    """A creation that would put a broker past its capacity."""
    broker: int
    adding: int
    hosting: int
    capacity: int
    reserved: int = 0
    reserved_for: str = ""
    key: str = CAPACITY_KEY

    def message(self) -> str:
        kept = (f" ({self.reserved} kept for {self.reserved_for})" if self.reserved else "")
        return (f"would place {self.adding} replica{'s' if self.adding != 1 else ''} on broker {self.broker} "
                f"holding {self.hosting} of {self.key}={self.capacity}{kept}; "
                f"add a node or raise the limit")


class NodeCapacity:
    """What each broker may still take. `capacity` maps broker -> its stated
    maximum (None: unknown, e.g. a broker registered by an older version:
    unlimited); `hosting` maps broker -> replicas assigned to it now;
    `reserved` maps broker -> replicas kept free for internal topics not yet
    created (they are refused only when the limit itself is too small)."""

    def __init__(self, capacity: Mapping[int, int | None], hosting: Mapping[int, int],
                 reserved: Mapping[int, int] | None = None, reserved_for: str = "", key: str = CAPACITY_KEY,
                 live: "NodeCapacity | None" = None, replicated_hibernate: bool = False):
        self.capacity = dict(capacity)
        self.hosting = dict(hosting)
        self.reserved = dict(reserved or {})
        self.reserved_for = reserved_for
        self.key = key
        # With hibernation: `capacity` is the hosted limit, and `live` the live limit over the
        # replicas that never hibernate (internal, RF > 1), which it alone must also fit.
        self.live = live
        # RF > 1 sets hibernate too: only internal replicas count against the live limit.
        self.replicated_hibernate = replicated_hibernate

    def room(self, broker: int, internal: bool = False) -> int | None:
        """Replicas `broker` may still take (None: no limit)."""
        cap = self.capacity.get(broker)
        if cap is None:
            return None
        kept = 0 if internal else self.reserved.get(broker, 0)
        return cap - kept - self.hosting.get(broker, 0)

    def has_room(self, broker: int, internal: bool = False) -> bool:
        room = self.room(broker, internal)
        return room is None or room > 0

    def check(self, assignment: Mapping[int, Iterable[int]], internal: bool = False) -> CapacityViolation | None:
        """The first broker (lowest id) the new replicas of `assignment` would overfill, or None."""
        adding = replicas_per_broker([assignment])
        for broker in sorted(adding):
            room = self.room(broker, internal)
            if room is not None and adding[broker] > room:
                kept = 0 if internal else self.reserved.get(broker, 0)
                return CapacityViolation(broker, adding[broker], self.hosting.get(broker, 0),
                                         self.capacity[broker], kept, self.reserved_for if kept else "", self.key)
        if self.live is not None:
            return self.live.check(_always_live_part(assignment, internal, self.replicated_hibernate), internal)
        return None

    def add(self, assignment: Mapping[int, Iterable[int]], internal: bool = False) -> None:
        """Count an accepted creation (several topics in one request)."""
        for broker, n in replicas_per_broker([assignment]).items():
            self.hosting[broker] = self.hosting.get(broker, 0) + n
        if self.live is not None:
            self.live.add(_always_live_part(assignment, internal, self.replicated_hibernate))

    def usage(self) -> dict[int, tuple[int, int | None]]:
        """broker -> (replicas hosted, capacity)."""
        brokers = set(self.capacity) | set(self.hosting)
        return {b: (self.hosting.get(b, 0), self.capacity.get(b)) for b in sorted(brokers)}


def _always_live_part(assignment: Mapping[int, Iterable[int]], internal: bool,
                      replicated_hibernate: bool = False) -> dict[int, list[int]]:
    return {p: list(r) for p, r in assignment.items() if always_live(list(r), internal, replicated_hibernate)}


def place_with_room(num_partitions: int, replication_factor: int, brokers: list[int],
                    capacity: NodeCapacity, assign: Callable[[int, int, list[int]], dict[int, list[int]]],
                    internal: bool = False) -> dict[int, list[int]]:
    """Kafka's assignment (`assign(partitions, rf, brokers)`, rack-aware or
    not) over the brokers that have room: full brokers are skipped, and a
    broker the even spread would overfill is dropped and the spread redone,
    as long as at least `replication_factor` brokers remain. The result may
    still overfill a broker (every subset tried does); the caller's
    NodeCapacity.check refuses it then, naming that broker."""
    with_room = [b for b in brokers if capacity.has_room(b, internal)]
    if len(with_room) < replication_factor:
        # Not enough brokers with room: the plain spread, so the refusal names a full broker.
        return assign(num_partitions, replication_factor, brokers)
    candidates = list(with_room)
    while True:
        assignment = assign(num_partitions, replication_factor, candidates)
        violation = capacity.check(assignment, internal)
        if violation is None or len(candidates) <= replication_factor:
            return assignment
        candidates.remove(violation.broker)


def internal_topic_reserve(brokers: Iterable[int], num_partitions: int, replication_factor: int) -> dict[int, int]:
    """Replicas to keep free on each broker for an internal topic not created
    yet (__consumer_offsets, created on the first FindCoordinator): its
    replicas spread evenly, so ceil(partitions * rf / brokers) each. Without
    it, user topics could fill every node and no consumer group could ever
    start."""
    ids = list(brokers)
    if not ids:
        return {}
    each = math.ceil(num_partitions * min(replication_factor, len(ids)) / len(ids))
    return {b: each for b in ids}
