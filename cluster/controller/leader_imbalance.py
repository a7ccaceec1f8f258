"""Which partitions the automatic preferred-leader rebalance should move, as
Kafka's checkAndTriggerAutoLeaderRebalance decides it
(leader.imbalance.per.broker.percentage). Pure: the controller supplies the
assignments, current leaders and live brokers and runs the elections.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

TopicPartition = tuple[str, int]


def _preferred_by_broker(assignments: Mapping[TopicPartition, Sequence[int]], live: Collection[int],
                         topics_being_deleted: Collection[str]) -> dict[int, list[TopicPartition]]:
    by_broker: dict[int, list[TopicPartition]] = {}
    for tp, replicas in sorted(assignments.items()):
        # Kafka leaves topics queued for deletion out of the count altogether.
        if not replicas or tp[0] in topics_being_deleted:
            continue
        if replicas[0] in live:
            by_broker.setdefault(replicas[0], []).append(tp)
    return by_broker


def _not_led_by(broker: int, partitions: list[TopicPartition],
                leaders: Mapping[TopicPartition, int]) -> list[TopicPartition]:
    # A partition with no leadership record yet does not count as imbalanced (Kafka's
    # leadershipInfo.exists(...)); one whose leader is NO_LEADER (-1) does.
    return [tp for tp in partitions if tp in leaders and leaders[tp] != broker]


def imbalance_ratios(assignments: Mapping[TopicPartition, Sequence[int]], leaders: Mapping[TopicPartition, int],
                     live: Collection[int], topics_being_deleted: Collection[str] = ()) -> dict[int, float]:
    """Per live preferred broker: the share of the partitions it is preferred
    for that it does not lead."""
    return {broker: len(_not_led_by(broker, partitions, leaders)) / len(partitions)
            for broker, partitions in _preferred_by_broker(assignments, live, topics_being_deleted).items()}


def imbalanced_partitions(assignments: Mapping[TopicPartition, Sequence[int]], leaders: Mapping[TopicPartition, int],
                          live: Collection[int], imbalance_percentage: int,
                          isrs: Mapping[TopicPartition, Sequence[int]] | None = None,
                          topics_being_deleted: Collection[str] = ()) -> dict[int, list[TopicPartition]]:
    """Per live preferred broker whose imbalance ratio is strictly above
    imbalance_percentage: the partitions it should lead again. With `isrs`,
    partitions whose preferred replica is out of the ISR are left out, as
    Kafka's canPreferredReplicaBeLeader (the election could not pick it)."""
    result: dict[int, list[TopicPartition]] = {}
    for broker, partitions in _preferred_by_broker(assignments, live, topics_being_deleted).items():
        not_led = _not_led_by(broker, partitions, leaders)
        # Integer form of ratio > percentage / 100, so a ratio exactly at the
        # threshold never tips over through float rounding.
        if len(not_led) * 100 <= imbalance_percentage * len(partitions):
            continue
        if isrs is not None:
            not_led = [tp for tp in not_led if broker in isrs.get(tp, ())]
        if not_led:
            result[broker] = not_led
    return result
