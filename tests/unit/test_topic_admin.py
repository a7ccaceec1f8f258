import random

import pytest
from kio.schema.errors import ErrorCode

from cluster.topic_admin import (SOURCE_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC, TopicSpecError,
                                 assign_replicas, described_configs, plan_topic)
from core.config import BrokerConfig
from core.controller_messages import CreateTopicSpec

CONFIG = BrokerConfig.from_sources(overrides=[("num.partitions", "3")])


def spec(name="t", partitions=-1, rf=-1, assignments=None, configs=None):
    return CreateTopicSpec(name, partitions, rf, assignments or {}, configs or {})


def test_assignment_spreads_leaders_and_never_repeats_a_broker():
    brokers = [1, 2, 3, 4, 5]
    assignment = assign_replicas(10, 3, brokers, rng=random.Random(7))
    leaders = [r[0] for r in assignment.values()]
    assert all(leaders.count(b) == 2 for b in brokers)
    for replicas in assignment.values():
        assert len(set(replicas)) == 3 and set(replicas) <= set(brokers)


def test_replication_factor_above_brokers():
    with pytest.raises(TopicSpecError) as info:
        plan_topic(spec(rf=3), CONFIG, [1], set())
    assert info.value.error == ErrorCode.invalid_replication_factor
    assert "larger than available brokers: 1" in str(info.value)


@pytest.mark.parametrize("kwargs,error", [
    (dict(partitions=0), ErrorCode.invalid_partitions),
    (dict(rf=0), ErrorCode.invalid_replication_factor),
    (dict(name="bad name"), ErrorCode.invalid_topic_exception),
    (dict(name="x" * 250), ErrorCode.invalid_topic_exception),
    (dict(configs={"nope": "1"}), ErrorCode.invalid_config),
    (dict(configs={"retention.ms": "abc"}), ErrorCode.invalid_config),
    (dict(assignments={0: [1], 2: [1]}), ErrorCode.invalid_replica_assignment),
    (dict(assignments={0: [1, 1]}), ErrorCode.invalid_replica_assignment),
    (dict(assignments={0: [9]}), ErrorCode.invalid_replica_assignment),
    (dict(assignments={0: [1]}, partitions=2), ErrorCode.invalid_request),
])
def test_invalid_specs(kwargs, error):
    with pytest.raises(TopicSpecError) as info:
        plan_topic(spec(**kwargs), CONFIG, [1], set())
    assert info.value.error == error


def test_existing_topic():
    with pytest.raises(TopicSpecError) as info:
        plan_topic(spec(name="t"), CONFIG, [1], {"t"})
    assert info.value.error == ErrorCode.topic_already_exists


def test_defaults_and_manual_assignment():
    plan = plan_topic(spec(), CONFIG, [1], set())
    assert plan.num_partitions == 3 and plan.replication_factor == 1
    manual = plan_topic(spec(assignments={0: [1], 1: [1]}), CONFIG, [1], set())
    assert manual.assignment == {0: [1], 1: [1]}


def test_described_configs_sources():
    broker = BrokerConfig.from_sources(overrides=[("log.segment.bytes", "4096")])
    described = described_configs({"retention.ms": "1000"}, broker)
    assert described["retention.ms"] == {"value": "1000", "source": SOURCE_TOPIC}
    assert described["segment.bytes"] == {"value": "4096", "source": SOURCE_STATIC_BROKER}
    assert described["cleanup.policy"] == {"value": "delete", "source": SOURCE_DEFAULT}


def test_rack_aware_assignment_spreads_each_partition_over_racks():
    from cluster.topic_admin import assign_replicas_rack_aware

    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for seed in range(20):
        assignment = assign_replicas_rack_aware(12, 3, racks, rng=random.Random(seed))
        for replicas in assignment.values():
            assert len(set(replicas)) == 3
            assert len({racks[b] for b in replicas}) == 3, "one replica per rack"
        leaders = [r[0] for r in assignment.values()]
        assert all(leaders.count(b) == 2 for b in racks), "leaders spread evenly"


def test_rack_aware_with_more_replicas_than_racks_uses_distinct_brokers():
    from cluster.topic_admin import assign_replicas_rack_aware

    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    assignment = assign_replicas_rack_aware(4, 3, racks, rng=random.Random(1))
    for replicas in assignment.values():
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


def test_mixed_rack_information_is_refused_as_kafka_does():
    with pytest.raises(TopicSpecError) as info:
        plan_topic(spec(rf=1), CONFIG, [1, 2], set(), racks={1: "a", 2: None})
    assert "Not all brokers have rack information" in str(info.value)
