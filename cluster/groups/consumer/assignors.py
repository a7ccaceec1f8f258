"""Server-side assignors of KIP-848 consumer groups (``group.consumer.assignors``):
``uniform`` (Kafka's default) and ``range``.

An assignor maps each member's subscribed topics (by topic id) to a target
assignment. It sees the previous target so that it can be sticky: a
partition moves only when balance needs it, because every move costs a
revocation round (the owner revokes, then the new owner gets it).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Mapping, Protocol

from cluster.groups.consumer.records import Assignment

# A limit on the balancing passes of the uniform assignor (each pass moves
# one partition from the most to the least loaded eligible member).
MAX_BALANCE_MOVES = 100_000


@dataclass(frozen=True)
class AssignmentSpec:
    # member id -> the topic ids it subscribes to (that exist)
    subscriptions: Mapping[str, frozenset[uuid.UUID]]
    # topic id -> number of partitions
    partition_counts: Mapping[uuid.UUID, int]
    # member id -> its previous target (for stickiness)
    previous: Mapping[str, Assignment]


class Assignor(Protocol):
    name: str

    def assign(self, spec: AssignmentSpec) -> dict[str, Assignment]: ...


def _as_assignment(pairs: set[tuple[uuid.UUID, int]]) -> Assignment:
    result: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in pairs:
        result.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(ps) for t, ps in result.items()}


class UniformAssignor:
    """Spreads all subscribed partitions as evenly as the subscriptions
    allow, keeping every partition where it was unless that breaks balance
    (sticky). Members with the same subscription end up with counts that
    differ by at most one."""

    name = "uniform"

    def assign(self, spec: AssignmentSpec) -> dict[str, Assignment]:
        members = sorted(spec.subscriptions)
        owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
        if not members:
            return {}
        eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
        for topic_id, count in sorted(spec.partition_counts.items(), key=lambda kv: kv[0].bytes):
            subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
            if subscribers:
                for p in range(count):
                    eligible[(topic_id, p)] = subscribers
        # 1. sticky: keep what is still valid
        unassigned: list[tuple[uuid.UUID, int]] = []
        for tp, subscribers in eligible.items():
            keeper = next((m for m in subscribers if tp[1] in spec.previous.get(m, {}).get(tp[0], ())), None)
            if keeper is None:
                unassigned.append(tp)
            else:
                owned[keeper].add(tp)
        # 2. trim members above their fair share (the homogeneous quota when
        #    everyone subscribes to the same topics) so newcomers get partitions
        total = len(eligible)
        if all(spec.subscriptions[m] == spec.subscriptions[members[0]] for m in members):
            base, extra = divmod(total, len(members))
            by_load = sorted(members, key=lambda m: (-len(owned[m]), m))
            for rank, m in enumerate(by_load):
                quota = base + (1 if rank < extra else 0)
                while len(owned[m]) > quota:
                    tp = max(owned[m], key=lambda tp: (tp[0].bytes, tp[1]))
                    owned[m].discard(tp)
                    unassigned.append(tp)
        # 3. the rest, each to the least loaded member that subscribes to it
        for tp in sorted(unassigned, key=lambda tp: (tp[0].bytes, tp[1])):
            target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            owned[target].add(tp)
        # 4. heterogeneous subscriptions: move one partition at a time from a
        #    member to an eligible one with two fewer, until none can move
        for _ in range(MAX_BALANCE_MOVES):
            moved = False
            for m in sorted(members, key=lambda m: (-len(owned[m]), m)):
                for tp in sorted(owned[m], key=lambda tp: (tp[0].bytes, tp[1])):
                    other = min(eligible[tp], key=lambda o: (len(owned[o]), o))
                    if len(owned[other]) + 1 < len(owned[m]):
                        owned[m].discard(tp)
                        owned[other].add(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                break
        return {m: _as_assignment(owned[m]) for m in members}


class RangeAssignor:
    """Per topic, its subscribers (sorted by member id) each get a
    contiguous range of partitions; the first ``count % n`` one extra
    (co-partitioned topics land on the same members)."""

    name = "range"

    def assign(self, spec: AssignmentSpec) -> dict[str, Assignment]:
        owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in spec.subscriptions}
        for topic_id, count in spec.partition_counts.items():
            subscribers = sorted(m for m, topics in spec.subscriptions.items() if topic_id in topics)
            if not subscribers:
                continue
            base, extra = divmod(count, len(subscribers))
            start = 0
            for rank, m in enumerate(subscribers):
                size = base + (1 if rank < extra else 0)
                owned[m].update((topic_id, p) for p in range(start, start + size))
                start += size
        return {m: _as_assignment(ps) for m, ps in owned.items()}


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
