"""raykafka.replicas.per.node.max (issue 18): the default formula, the
per-broker accounting and capacity-aware placement. Plain code, no Ray."""
from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.capacity import (CAPACITY_KEY, NodeCapacity, default_replicas_per_node, internal_topic_reserve,
                              node_capacity, replicas_per_broker)
from cluster.topic_admin import TopicSpecError, plan_topic
from core.config import BROKER_CONFIGS, BrokerConfig, ConfigError
from core.controller_messages import CreatePartitionsSpec, CreateTopicSpec

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
    return CreateTopicSpec(name, partitions, rf, assignments or {})


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


# ---- the controller's view: registrations, CreatePartitions (PartitionOperations without Ray) ----------------
from cluster.controller.partition_operations import PartitionOperations  # noqa: E402
from cluster.controller.controller_context import BrokerState, ControllerContext, TopicState  # noqa: E402


class _Controller(PartitionOperations):
    def __init__(self, capacities: dict[int, int | None], topics: dict[str, dict[int, list[int]]],
                 offsets_partitions: int = 1):
        self.config = BrokerConfig.from_sources(overrides=[("offsets.topic.num.partitions", str(offsets_partitions))])
        self.ctx = ControllerContext(1, "c")
        self.ctx.brokers = {b: BrokerState(b, "h", 1, None, None, [], replicas_max=m) for b, m in capacities.items()}
        self.ctx.topics = {n: TopicState(n, "id", a, {}, internal=n.startswith("__")) for n, a in topics.items()}


def test_node_capacity_counts_every_topic_and_keeps_room_for_the_offsets_topic():
    c = _Controller({1: 10, 2: None}, {"t": {0: [1, 2], 1: [1]}}, offsets_partitions=3)
    cap = c._node_capacity()
    assert cap.usage() == {1: (2, 10), 2: (1, None)}
    # 3 offsets partitions, rf min(3, 2 brokers) = 2: ceil(6 / 2) = 3 kept on each broker.
    assert cap.room(1) == 10 - 2 - 3
    c.ctx.topics["__consumer_offsets"] = TopicState("__consumer_offsets", "id", {0: [1]}, {}, internal=True)
    assert c._node_capacity().room(1) == 10 - 3  # created: it counts, nothing is kept any more


def test_create_partitions_beyond_capacity_is_policy_violation():
    c = _Controller({1: 5}, {"t": {0: [1], 1: [1]}, "__consumer_offsets": {0: [1]}})
    cap = c._node_capacity()
    assert c._plan_new_partitions(CreatePartitionsSpec("t", 4, None), cap) == {2: [1], 3: [1]}
    with pytest.raises(TopicSpecError) as err:
        c._plan_new_partitions(CreatePartitionsSpec("t", 5, None), cap)
    assert err.value.error == ErrorCode.policy_violation
    assert "would place 3 replicas on broker 1 holding 3 of raykafka.replicas.per.node.max=5" in str(err.value)
    with pytest.raises(TopicSpecError):
        c._plan_new_partitions(CreatePartitionsSpec("t", 5, [[1], [1], [1]]), cap)


def test_describe_configs_shows_each_brokers_own_capacity():
    c = _Controller({1: 90, 2: None}, {})
    assert c._described_broker_config("1")[CAPACITY_KEY] == 90
    assert not c._described_broker_config("1").is_explicit(CAPACITY_KEY)  # computed: DEFAULT source
    assert c._described_broker_config("2")[CAPACITY_KEY] is None
    assert c._described_broker_config("")[CAPACITY_KEY] is None


def test_describe_lists_usage_per_broker():
    from cli.admin_client import PartitionInfo, TopicInfo
    from cli.topics import broker_usage_lines

    topics = [TopicInfo("a", {0: PartitionInfo(0, 1, (1, 2), (1, 2)), 1: PartitionInfo(1, 2, (2, 3), (2, 3))}),
              TopicInfo("__consumer_offsets", {0: PartitionInfo(0, 1, (1,), (1,))}, internal=True)]
    assert broker_usage_lines(topics, [1, 2, 3, 4], {1: 90, 2: 90, 3: 45}) == [
        "Broker: 1\tReplicas: 2\tCapacity: 90", "Broker: 2\tReplicas: 2\tCapacity: 90",
        "Broker: 3\tReplicas: 1\tCapacity: 45", "Broker: 4\tReplicas: 0\tCapacity: unknown"]


# ---- LeaderAndIsr that starts replica actors: a timeout is an outcome, not a crash ---------------------------
def test_await_all_logs_a_timeout_and_forgets_the_handle():
    import asyncio

    from actors.controller import ControllerService

    async def scenario():
        service = ControllerService(1001, BrokerConfig.from_sources(), zk=None, namespace="t")
        service.replica_handles[("t", 0, 1001)] = object()
        never = asyncio.get_running_loop().create_future()  # a replica that never answers
        # Before: str(TimeoutError()) is "", and indexing its lines raised IndexError, failing
        # the whole CreateTopics event (no UpdateMetadata: Metadata never showed the leaders).
        await service._await_all([(("t", 0, 1001), never)], "LeaderAndIsr", timeout_s=0.05)
        return service.replica_handles

    assert asyncio.run(scenario()) == {}
