"""raykafka.replicas.per.node.max (issue 18): the default formula, the
per-broker accounting and capacity-aware placement. Plain code, no Ray."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.capacity import (CAPACITY_KEY, NodeCapacity, default_replicas_per_node, internal_topic_reserve,
                              node_capacity, replicas_per_broker)
from cluster.topic_admin import TopicSpecError, plan_topic
from core.config import BROKER_CONFIGS, BrokerConfig, ConfigError

GIB = 2**30


# ---- the formula ----------------------------------------------------------------------------------------------
def test_default_on_the_dev_machine_is_cpu_bound_near_90():
    # 2 cores * 0.5 / 0.011 = 90.9; 24 GiB * 0.5 / 48 MiB = 256.
    assert default_replicas_per_node(2, 24 * GIB) == 90


def test_default_is_memory_bound_on_a_small_memory_node():
    # 16 cores would allow 727 by CPU; 4 GiB * 0.5 / 48 MiB = 42.
    assert default_replicas_per_node(16, 4 * GIB) == 42


def test_default_scales_with_cores_and_never_drops_below_one():
    assert default_replicas_per_node(8, 256 * GIB) == 363
    assert default_replicas_per_node(0.01, 10 * 2**20) == 1


def test_budgets_are_parameters():
    assert default_replicas_per_node(2, 24 * GIB, cpu_budget=1.0) == 181


def test_configured_value_wins_over_the_formula():
    assert node_capacity(50, cores=64, memory_bytes=512 * GIB) == 50
    assert node_capacity(None, cores=2, memory_bytes=24 * GIB) == 90
    assert node_capacity(None) >= 1  # this machine's own cores and memory


def test_config_key_defaults_to_computed_and_rejects_zero():
    assert BROKER_CONFIGS[CAPACITY_KEY].default is None
    assert BrokerConfig.from_sources(overrides=[(CAPACITY_KEY, "50")])[CAPACITY_KEY] == 50
    with pytest.raises(ConfigError):
        BrokerConfig.from_sources(overrides=[(CAPACITY_KEY, "0")])


# ---- accounting -----------------------------------------------------------------------------------------------
def test_replicas_per_broker_counts_every_replica():
    assert replicas_per_broker([{0: [1, 2], 1: [2, 3]}, {0: [1]}]) == {1: 2, 2: 2, 3: 1}


def test_check_names_the_broker_the_limit_and_the_fix():
    cap = NodeCapacity({1001: 90}, {1001: 90})
    violation = cap.check({0: [1001], 1: [1001], 2: [1001]})
    assert violation is not None
    assert violation.message() == ("would place 3 replicas on broker 1001 holding 90 of "
                                   "raykafka.replicas.per.node.max=90; add a node or raise the limit")


def test_exactly_full_is_allowed_one_more_is_not():
    cap = NodeCapacity({1: 10}, {1: 7})
    assert cap.check({0: [1], 1: [1], 2: [1]}) is None
    assert cap.check({0: [1], 1: [1], 2: [1], 3: [1]}).broker == 1


def test_unknown_capacity_means_no_limit():
    cap = NodeCapacity({1: None}, {1: 10_000})
    assert cap.check({p: [1] for p in range(100)}) is None
    assert cap.room(1) is None


def test_add_counts_earlier_topics_of_the_same_request():
    cap = NodeCapacity({1: 4}, {1: 0})
    assert cap.check({0: [1], 1: [1], 2: [1]}) is None
    cap.add({0: [1], 1: [1], 2: [1]})
    assert cap.check({0: [1], 1: [1]}).hosting == 3
    assert cap.usage() == {1: (3, 4)}


def test_reserve_for_the_offsets_topic_binds_user_topics_only():
    reserve = internal_topic_reserve([1, 2, 3], num_partitions=3, replication_factor=3)
    assert reserve == {1: 3, 2: 3, 3: 3}
    cap = NodeCapacity({1: 10}, {1: 7}, {1: 3}, "__consumer_offsets")
    user = cap.check({0: [1]})
    assert user is not None and "3 kept for __consumer_offsets" in user.message()
    assert cap.check({0: [1], 1: [1], 2: [1]}, internal=True) is None


def test_reserve_caps_the_replication_factor_at_the_brokers():
    assert internal_topic_reserve([1], num_partitions=3, replication_factor=3) == {1: 3}
    assert internal_topic_reserve([], 3, 3) == {}


# ---- placement through plan_topic -----------------------------------------------------------------------------
CONFIG = BrokerConfig.from_sources()


def spec(name, partitions, rf, assignments=None):
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": assignments or {}, "configs": {}}


def test_full_brokers_are_skipped():
    cap = NodeCapacity({1: 10, 2: 10, 3: 10}, {1: 10, 2: 0, 3: 0})
    for _ in range(20):  # the assignment's start is random
        plan = plan_topic(spec("t", 6, 2), CONFIG, [1, 2, 3], set(), capacity=cap)
        assert all(1 not in r for r in plan.assignment.values())
        assert all(len(set(r)) == 2 for r in plan.assignment.values())


def test_a_broker_the_spread_would_overfill_is_dropped():
    # Broker 1 has room for 1, the even spread would give it 2 of 6.
    cap = NodeCapacity({1: 10, 2: 100, 3: 100}, {1: 9})
    plan = plan_topic(spec("t", 6, 1), CONFIG, [1, 2, 3], set(), capacity=cap)
    assert replicas_per_broker([plan.assignment]).get(1, 0) == 0


def test_rack_awareness_is_kept_among_brokers_with_room():
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    cap = NodeCapacity({1: 5, 2: 50, 3: 50, 4: 50}, {1: 5})
    for _ in range(20):
        plan = plan_topic(spec("t", 4, 2), CONFIG, [1, 2, 3, 4], set(), racks=racks, capacity=cap)
        for replicas in plan.assignment.values():
            assert 1 not in replicas
            assert {racks[b] for b in replicas} == {"a", "b"}


def test_too_few_brokers_with_room_is_policy_violation_naming_a_full_one():
    cap = NodeCapacity({1: 10, 2: 10}, {1: 10, 2: 3})
    with pytest.raises(TopicSpecError) as err:
        plan_topic(spec("t", 1, 2), CONFIG, [1, 2], set(), capacity=cap)
    assert err.value.error == ErrorCode.policy_violation
    assert "broker 1 holding 10 of raykafka.replicas.per.node.max=10" in str(err.value)


def test_straddling_topic_is_refused_whole():
    cap = NodeCapacity({1: 50}, {1: 48})
    with pytest.raises(TopicSpecError) as err:
        plan_topic(spec("t", 3, 1), CONFIG, [1], set(), capacity=cap)
    assert err.value.error == ErrorCode.policy_violation
    assert str(err.value).startswith("would place 3 replicas on broker 1 holding 48 of")
    assert cap.hosting == {1: 48}  # nothing counted for a refused topic


def test_manual_assignment_is_checked_too():
    cap = NodeCapacity({1: 1, 2: 10}, {1: 1})
    with pytest.raises(TopicSpecError) as err:
        plan_topic(spec("t", -1, -1, {0: [1, 2]}), CONFIG, [1, 2], set(), capacity=cap)
    assert err.value.error == ErrorCode.policy_violation


def test_other_errors_come_before_the_capacity_check():
    cap = NodeCapacity({1: 1}, {1: 1})
    with pytest.raises(TopicSpecError) as err:
        plan_topic(spec("t", 1, 1), CONFIG, [1], {"t"}, capacity=cap)
    assert err.value.error == ErrorCode.topic_already_exists


def test_no_capacity_keeps_the_old_behaviour():
    plan = plan_topic(spec("t", 300, 1), CONFIG, [1], set())
    assert plan.num_partitions == 300
