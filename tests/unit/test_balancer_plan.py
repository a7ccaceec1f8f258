"""The balancer's planner (cluster/controller/balancer_plan.py): pure, no Ray, no ZooKeeper."""
from __future__ import annotations

import random

from cluster.controller.balancer_plan import (HEAL, LEADER, RACK, REPLICA, BrokerView, Move, measure, plan)


def kafka_spread(partitions: int, rf: int, brokers: list[int]) -> dict:
    return {("t", p): [brokers[(p + i) % len(brokers)] for i in range(rf)] for p in range(partitions)}


def apply(assignments: dict, moves: list[Move]) -> dict:
    out = {tp: list(r) for tp, r in assignments.items()}
    for m in moves:
        assert m.applies_to(out[m.tp]), m
        out[m.tp] = m.target(out[m.tp])
    return out


def test_a_node_joining_gets_an_even_share_of_replicas_and_leaders():
    before = kafka_spread(30, 2, [1, 2, 3])
    brokers = {b: BrokerView() for b in (1, 2, 3, 4)}
    assert measure(brokers, before).score == 1.0  # broker 4 holds nothing
    moves = plan(brokers, before)
    after = apply(before, moves)
    m = measure(brokers, after)
    assert m.replica_spread <= 1 and m.leader_spread <= 1, m
    assert all(len(set(r)) == 2 for r in after.values())
    # Only replicas onto the new broker, no more than needed: 60 / 4 = 15.
    replica_moves = [mv for mv in moves if mv.kind == REPLICA]
    assert len(replica_moves) == 15 and {mv.destination for mv in replica_moves} == {4}
    assert plan(brokers, after) == []  # balanced: nothing more to do


def test_a_lost_broker_is_healed_onto_live_brokers_with_room():
    before = kafka_spread(12, 2, [1, 2, 3])
    brokers = {b: BrokerView(capacity=20) for b in (1, 2)}
    moves = plan(brokers, before, lost={3}, balance=False)
    assert moves and all(mv.reason == HEAL and mv.source == 3 for mv in moves)
    after = apply(before, moves)
    assert all(3 not in r and len(set(r)) == 2 for r in after.values())
    assert measure(brokers, after, lost={3}).on_lost_brokers == 0


def test_healing_never_overfills_a_node():
    before = kafka_spread(12, 2, [1, 2, 3])  # 8 replicas each
    brokers = {1: BrokerView(capacity=9), 2: BrokerView(capacity=12)}
    after = apply(before, plan(brokers, before, lost={3}, balance=False))
    counts = measure(brokers, after, lost={3}).replicas
    assert counts[1] <= 9 and counts[2] <= 12
    # What found no room stays on the lost broker (under-replicated, not overfilled).
    assert sum(3 in r for r in after.values()) == 8 - (9 - 8) - (12 - 8)


def test_racks_are_made_distinct_first():
    brokers = {1: BrokerView("a"), 2: BrokerView("a"), 3: BrokerView("b"), 4: BrokerView("b")}
    before = {("t", 0): [1, 2], ("t", 1): [3, 4]}
    moves = plan(brokers, before, balance=False)
    assert {mv.reason for mv in moves} == {RACK}
    after = apply(before, moves)
    for replicas in after.values():
        assert len({brokers[r].rack for r in replicas}) == 2
    # Balancing never puts two replicas of a partition on one rack.
    big = kafka_spread(40, 2, [1, 3])
    after = apply(big, plan(brokers, big))
    assert all(len({brokers[r].rack for r in rs}) == 2 for rs in after.values())
    assert measure(brokers, after).replica_spread <= 1


def test_over_capacity_moves_off():
    before = kafka_spread(10, 1, [1])
    brokers = {1: BrokerView(capacity=6), 2: BrokerView(capacity=100)}
    after = apply(before, plan(brokers, before, balance=False))
    assert measure(brokers, after).replicas == {1: 6, 2: 4}


def test_frozen_partitions_are_left_alone_and_leader_moves_reorder_only():
    before = {("t", p): [1, 2] for p in range(6)}
    brokers = {1: BrokerView(), 2: BrokerView()}
    moves = plan(brokers, before, frozen={("t", 0)})
    assert all(mv.kind == LEADER and mv.tp != ("t", 0) for mv in moves)
    after = apply(before, moves)
    assert measure(brokers, after).leader_spread <= 1
    assert all(sorted(r) == [1, 2] for r in after.values())


def test_random_clusters_reach_the_goals():
    rng = random.Random(31)
    for _ in range(50):
        n = rng.randint(2, 6)
        rf = rng.randint(1, min(3, n))
        ids = list(range(1, n + 1))
        assignments = {("t%d" % (p % 3), p): rng.sample(ids[:max(rf, n - 1)], rf) for p in range(rng.randint(1, 40))}
        brokers = {b: BrokerView() for b in ids}
        after = apply(assignments, plan(brokers, assignments))
        m = measure(brokers, after)
        assert m.replica_spread <= 1, (assignments, m)
        assert all(len(set(r)) == rf for r in after.values())


def test_moves_round_trip_through_json():
    move = Move("t", 3, 1, 4, REPLICA, HEAL)
    assert Move.from_json(move.to_json()) == move
