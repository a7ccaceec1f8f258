"""raykafka.edge.processes: how many edge processes (Kafka listeners sharing
the port with SO_REUSEPORT) each node runs."""
import pytest

from core.config import BROKER_CONFIGS, BrokerConfig, ConfigError
from core.naming import edge_actor_name, edge_sibling_actor_name


def test_one_edge_per_node_by_default():
    assert BrokerConfig.from_sources()["raykafka.edge.processes"] == 1
    assert BROKER_CONFIGS["raykafka.edge.processes"].doc


def test_set_by_override_and_by_environment():
    assert BrokerConfig.from_sources(overrides=[("raykafka.edge.processes", "4")])["raykafka.edge.processes"] == 4
    from_env = BrokerConfig.from_sources(environ={"RAYKAFKA_RAYKAFKA_EDGE_PROCESSES": "2"})
    assert from_env["raykafka.edge.processes"] == 2


@pytest.mark.parametrize("value", ["0", "-1", "17", "two"])
def test_out_of_range_is_rejected(value):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_sources(overrides=[("raykafka.edge.processes", value)])
    assert info.value.key == "raykafka.edge.processes"


def test_sibling_names_are_distinct_and_not_broker_actor_names():
    names = {edge_actor_name(3), *(edge_sibling_actor_name(3, k) for k in range(1, 4))}
    assert len(names) == 4
    # The CLI closes every actor whose name ends with "@<broker id>" as a replica
    # or coordinator of that broker; the sibling edges are stopped on their own.
    assert not any(edge_sibling_actor_name(3, k).endswith("@3") for k in range(1, 4))
