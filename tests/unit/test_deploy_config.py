"""deploy/ray-cluster.yaml is a valid Ray cluster-launcher config, and its
server.properties is a valid raykafka configuration."""
from pathlib import Path

import yaml

from core.config import BrokerConfig, parse_properties

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_cluster_yaml_passes_rays_launcher_schema():
    from ray.autoscaler._private.util import validate_config

    config = yaml.safe_load((DEPLOY / "ray-cluster.yaml").read_text())
    validate_config(config)  # raises on a schema violation
    assert config["provider"]["type"] == "local"
    starts = " ".join(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert starts.count("raykafka start --ray-address auto") == 2, "every node runs a broker"


def test_server_properties_are_valid():
    BrokerConfig.from_sources(parse_properties((DEPLOY / "server.properties").read_text()))
