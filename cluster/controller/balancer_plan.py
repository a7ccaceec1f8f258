"""The balancer's plan (issue 31): which replicas to move where, and which
preferred leaders to change. Pure functions over a snapshot of the cluster;
cluster/controller/balancer.py carries a plan out through the reassignment
path.

Goals, in priority order (Cruise Control's order, Redpanda's data balancing):

1. heal: a replica on a broker lost for good (absent past
   raykafka.self.healing.delay.ms) is re-created on a live broker with room;
2. racks: the replicas of a partition sit on distinct racks where the racks
   allow it (brokers are always distinct: a replica list never repeats one);
3. capacity: no broker past its raykafka.replicas.per.node.max;
4. replica counts even across live brokers (spread at most 1), each topic
   kept spread as a tie-break;
5. preferred leaders even (spread at most 1): the first replica leads after a
   preferred election, so reordering a replica list moves leadership without
   moving data;
6. bytes even, where the caller knows partition sizes: a tie-break in 4.

Goals 1-3 are hard: a plan always contains their moves. 4-6 are soft: the
caller asks for them (on a join, past the imbalance threshold). A later goal
never undoes an earlier one: every move is checked against goals 1-3.

A replica move keeps the replica's position in the list (the new broker takes
the old one's place), so a move of the preferred leader hands the preferred
role to the destination; goal 5 runs after 4 and fixes leaders last.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, NamedTuple, Sequence

TopicPartition = tuple[str, int]

REPLICA = "replica"
LEADER = "leader"

HEAL, RACK, CAPACITY, COUNT, PREFERRED = "heal", "rack", "capacity", "count", "preferred-leader"
HARD_REASONS = (HEAL, RACK, CAPACITY)

# A plan never holds more moves than this: a cluster far off balance is fixed
# over several plans (each step replans from what is assigned then).
MAX_PLAN_MOVES = 10_000


class BrokerView(NamedTuple):
    """A live broker as the planner sees it: its rack (None: unknown) and its
    replica capacity (None: unlimited)."""
    rack: str | None = None
    capacity: int | None = None


@dataclasses.dataclass(frozen=True)
class Move:
    """One step of a plan. kind REPLICA: the replica on `source` moves to
    `destination` (add, catch up into the ISR, move leadership, drop). kind
    LEADER: `destination` (already a replica) becomes the preferred leader in
    place of `source`."""
    topic: str
    partition: int
    source: int
    destination: int
    kind: str = REPLICA
    reason: str = COUNT

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition

    def target(self, replicas: Sequence[int]) -> list[int]:
        """The replica list after this move, from `replicas` (the current list)."""
        if self.kind == LEADER:
            return [self.destination, *(r for r in replicas if r != self.destination)]
        return [self.destination if r == self.source else r for r in replicas]

    def applies_to(self, replicas: Sequence[int]) -> bool:
        if self.kind == LEADER:
            return self.destination in replicas and replicas and replicas[0] == self.source
        return self.source in replicas and self.destination not in replicas

    def to_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "source": self.source,
                "destination": self.destination, "kind": self.kind, "reason": self.reason}

    @classmethod
    def from_json(cls, body: Mapping) -> "Move":
        return cls(str(body["topic"]), int(body["partition"]), int(body["source"]), int(body["destination"]),
                   str(body.get("kind", REPLICA)), str(body.get("reason", COUNT)))

    def describe(self) -> str:
        if self.kind == LEADER:
            return f"{self.topic}-{self.partition}: preferred leader {self.source} -> {self.destination}"
        return f"{self.topic}-{self.partition}: replica {self.source} -> {self.destination} ({self.reason})"


@dataclasses.dataclass(frozen=True)
class Imbalance:
    """How far the cluster is from the goals. `score` is the largest relative
    deviation of a live broker's replica or preferred-leader count from the
    mean (0.0 when even; 1.0 when a broker holds nothing while the mean is
    positive), the number the imbalance threshold is compared with."""
    replicas: dict[int, int]
    leaders: dict[int, int]
    replica_spread: int
    leader_spread: int
    on_lost_brokers: int
    rack_violations: int
    over_capacity: int
    score: float

    @property
    def hard_violations(self) -> int:
        return self.on_lost_brokers + self.rack_violations + self.over_capacity


def _deviation(counts: Mapping[int, int]) -> float:
    if not counts:
        return 0.0
    mean = sum(counts.values()) / len(counts)
    if mean == 0:
        return 0.0
    return max(abs(c - mean) for c in counts.values()) / mean


def _spread(counts: Mapping[int, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0


def _racks_enforced(brokers: Mapping[int, BrokerView]) -> bool:
    """Racks count only when every live broker states one (Kafka's rack-aware
    assignment refuses a mix)."""
    return bool(brokers) and all(b.rack for b in brokers.values())


def measure(brokers: Mapping[int, BrokerView], assignments: Mapping[TopicPartition, Sequence[int]],
            lost: Iterable[int] = ()) -> Imbalance:
    lost = set(lost)
    replicas = {b: 0 for b in brokers}
    leaders = {b: 0 for b in brokers}
    on_lost = rack_violations = 0
    racks = _racks_enforced(brokers)
    distinct_racks = len({b.rack for b in brokers.values()})
    for replica_list in assignments.values():
        for r in replica_list:
            if r in replicas:
                replicas[r] += 1
            elif r in lost:
                on_lost += 1
        if replica_list and replica_list[0] in leaders:
            leaders[replica_list[0]] += 1
        if racks:
            used = [brokers[r].rack for r in replica_list if r in brokers]
            if len(set(used)) < min(len(used), distinct_racks):
                rack_violations += 1
    over = sum(max(0, replicas[b] - v.capacity) for b, v in brokers.items() if v.capacity is not None)
    return Imbalance(replicas, leaders, _spread(replicas), _spread(leaders), on_lost, rack_violations, over,
                     max(_deviation(replicas), _deviation(leaders)))


class _Working:
    """The assignment as the plan changes it, with the counts kept current."""

    def __init__(self, brokers: Mapping[int, BrokerView], assignments: Mapping[TopicPartition, Sequence[int]],
                 frozen: Iterable[TopicPartition], partition_bytes: Mapping[TopicPartition, int] | None):
        self.brokers = dict(brokers)
        self.assignments = {tp: list(r) for tp, r in assignments.items()}
        self.frozen = set(frozen)
        self.bytes = dict(partition_bytes or {})
        self.racks = _racks_enforced(brokers)
        self.distinct_racks = len({b.rack for b in brokers.values()})
        self.count = {b: 0 for b in brokers}
        self.topic_count: dict[tuple[str, int], int] = {}
        self.load = {b: 0 for b in brokers}
        for tp, replicas in self.assignments.items():
            for r in replicas:
                self._add(tp, r, 1)
        self.moves: list[Move] = []

    def _add(self, tp: TopicPartition, broker: int, sign: int) -> None:
        if broker in self.count:
            self.count[broker] += sign
            self.load[broker] += sign * self.bytes.get(tp, 0)
            key = (tp[0], broker)
            self.topic_count[key] = self.topic_count.get(key, 0) + sign

    def room(self, broker: int) -> bool:
        cap = self.brokers[broker].capacity
        return cap is None or self.count[broker] < cap

    def rack_ok(self, tp: TopicPartition, source: int, destination: int) -> bool:
        """Whether `destination` in place of `source` keeps the partition's racks distinct
        (as distinct as the racks allow)."""
        if not self.racks:
            return True
        others = [self.brokers[r].rack for r in self.assignments[tp] if r != source and r in self.brokers]
        rack = self.brokers[destination].rack
        if rack not in others:
            return True
        # Racks already all used by the others: any destination repeats one.
        return len(set(others)) >= self.distinct_racks

    def movable(self, tp: TopicPartition) -> bool:
        return tp not in self.frozen

    def apply(self, move: Move) -> None:
        replicas = self.assignments[move.tp]
        if move.kind == REPLICA:
            self._add(move.tp, move.source, -1)
            self._add(move.tp, move.destination, 1)
        self.assignments[move.tp] = move.target(replicas)
        self.moves.append(move)

    def best_destination(self, tp: TopicPartition, source: int, exclude: Iterable[int] = ()) -> int | None:
        """Live broker with room, not a replica yet, rack-distinct if possible;
        then fewest replicas, fewest of this topic, least bytes, lowest id."""
        replicas = set(self.assignments[tp])
        exclude = set(exclude)
        candidates = [b for b in self.brokers if b not in replicas and b not in exclude and self.room(b)]
        if not candidates:
            return None
        distinct = [b for b in candidates if self.rack_ok(tp, source, b)]
        pool = distinct or candidates
        return min(pool, key=lambda b: (self.count[b], self.topic_count.get((tp[0], b), 0), self.load[b], b))


def plan(brokers: Mapping[int, BrokerView], assignments: Mapping[TopicPartition, Sequence[int]], *,
         lost: Iterable[int] = (), frozen: Iterable[TopicPartition] = (), balance: bool = True,
         partition_bytes: Mapping[TopicPartition, int] | None = None,
         max_moves: int = MAX_PLAN_MOVES) -> list[Move]:
    """The moves that bring `assignments` (partition -> replica list, targets
    of reassignments in flight) to the goals. `brokers` are the live brokers;
    `lost` the brokers given up on (their replicas are healed away); partitions
    in `frozen` are left alone (a reassignment in flight, a replica on a broker
    absent but not yet lost). `balance` False: the hard goals only."""
    w = _Working(brokers, assignments, frozen, partition_bytes)
    lost = set(lost)
    order = sorted(w.assignments)

    def full() -> bool:
        return len(w.moves) >= max_moves

    # 1. heal
    for tp in order:
        if not w.movable(tp):
            continue
        for source in [r for r in w.assignments[tp] if r in lost]:
            if full():
                return w.moves
            destination = w.best_destination(tp, source)
            if destination is not None:
                w.apply(Move(tp[0], tp[1], source, destination, REPLICA, HEAL))
    # 2. racks
    if w.racks:
        for tp in order:
            if not w.movable(tp):
                continue
            replicas = w.assignments[tp]
            seen: set[str] = set()
            # Keep the earliest replica of a rack (the preferred leader first); move the later ones.
            for r in list(replicas):
                if r not in w.brokers:
                    continue
                rack = w.brokers[r].rack
                if rack in seen and not full():
                    destination = w.best_destination(tp, r)
                    if destination is not None and w.brokers[destination].rack not in seen:
                        w.apply(Move(tp[0], tp[1], r, destination, REPLICA, RACK))
                        rack = w.brokers[destination].rack
                seen.add(rack)
    # 3. capacity
    for broker, view in sorted(w.brokers.items()):
        if view.capacity is None:
            continue
        for tp in order:
            if w.count[broker] <= view.capacity or full():
                break
            if not w.movable(tp) or broker not in w.assignments[tp]:
                continue
            destination = w.best_destination(tp, broker)
            if destination is not None:
                w.apply(Move(tp[0], tp[1], broker, destination, REPLICA, CAPACITY))
    if not balance:
        return w.moves
    # 4. replica counts
    _even_replicas(w, order, full)
    # 5. preferred leaders
    _even_leaders(w, order, full)
    return w.moves


def _even_replicas(w: _Working, order: list[TopicPartition], full) -> None:
    while not full():
        ranked = sorted(w.brokers, key=lambda b: (w.count[b], b))
        moved = False
        # The most loaded broker first, towards the least loaded one that can take a replica.
        for hi in reversed(ranked):
            for lo in ranked:
                if w.count[hi] - w.count[lo] <= 1:
                    break
                move = _replica_move(w, order, hi, lo)
                if move is not None:
                    w.apply(move)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def _replica_move(w: _Working, order: list[TopicPartition], hi: int, lo: int) -> Move | None:
    if not w.room(lo):
        return None
    best, best_key = None, None
    for tp in order:
        replicas = w.assignments[tp]
        if not w.movable(tp) or hi not in replicas or lo in replicas or not w.rack_ok(tp, hi, lo):
            continue
        topic = tp[0]
        # Followers first (moving a preferred leader also moves leadership), then the
        # topic hi holds most of relative to lo, then the bytes that even the load best.
        spread = w.topic_count.get((topic, hi), 0) - w.topic_count.get((topic, lo), 0)
        size = w.bytes.get(tp, 0)
        after = abs((w.load[hi] - size) - (w.load[lo] + size))
        key = (replicas[0] == hi, -spread, after, tp)
        if best_key is None or key < best_key:
            best, best_key = tp, key
    if best is None:
        return None
    return Move(best[0], best[1], hi, lo, REPLICA, COUNT)


def _even_leaders(w: _Working, order: list[TopicPartition], full) -> None:
    def leaders() -> dict[int, int]:
        counts = {b: 0 for b in w.brokers}
        for replicas in w.assignments.values():
            if replicas and replicas[0] in counts:
                counts[replicas[0]] += 1
        return counts

    while not full():
        counts = leaders()
        ranked = sorted(w.brokers, key=lambda b: (counts[b], b))
        moved = False
        for hi in reversed(ranked):
            for lo in ranked:
                if counts[hi] - counts[lo] <= 1:
                    break
                tp = next((tp for tp in order if w.movable(tp) and w.assignments[tp]
                           and w.assignments[tp][0] == hi and lo in w.assignments[tp]), None)
                if tp is not None:
                    w.apply(Move(tp[0], tp[1], hi, lo, LEADER, PREFERRED))
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return
