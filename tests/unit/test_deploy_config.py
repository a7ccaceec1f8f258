"""deploy/ray-cluster.yaml is a valid Ray cluster-launcher config, and its
server.properties is a valid raykafka configuration."""
from pathlib import Path

import yaml

from core.config import BrokerConfig, parse_properties

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_cluster_yaml_passes_rays_launcher_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((DEPLOY / "ray-cluster.yaml").read_text())
    validate_config(prepare_config(config))  # fills defaults as `ray up` does, raises on violations
    assert config["provider"]["type"] == "local"
    starts = " ".join(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert starts.count("raykafka start --ray-address auto") == 2, "every node runs a broker"


def test_server_properties_are_valid():
    BrokerConfig.from_sources(parse_properties((DEPLOY / "server.properties").read_text()))


def test_every_node_and_broker_runs_with_rays_token_and_zookeeper_acls():
    config = yaml.safe_load((DEPLOY / "ray-cluster.yaml").read_text())
    commands = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    starts = [c for c in commands if "ray start" in c or "raykafka start" in c]
    assert len(starts) == 4
    for command in starts:
        assert "RAY_AUTH_MODE=token" in command and "RAY_AUTH_TOKEN_PATH=~/raykafka-secrets/ray-auth-token" in command
    assert "disabled" not in " ".join(commands)
    # The token travels as the launcher ships files, never in the repository.
    assert config["file_mounts"]["/home/raykafka/raykafka-secrets"] == "~/raykafka-secrets"
    properties = parse_properties((DEPLOY / "server.properties").read_text())
    assert properties["zookeeper.set.acl"] == "true"
    assert properties["raykafka.zookeeper.digest.file"].startswith("/home/raykafka/raykafka-secrets/")
