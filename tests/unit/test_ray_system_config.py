"""The Ray system config raykafka starts its clusters with, and the one the
cluster launcher config gives `ray start --head`, must agree."""
import json
import re
from pathlib import Path

import yaml

from node.ray_cluster import ray_system_config
from core.config import BROKER_CONFIGS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "ray-cluster.yaml"


def test_follower_fetch_replies_fit_inline():
    # A follower fetch answers with up to replica.fetch.max.bytes of records;
    # above Ray's inline limit that reply would take a trip through the object store.
    assert ray_system_config()["max_direct_call_object_size"] >= BROKER_CONFIGS["replica.fetch.max.bytes"].default


def test_deploy_head_uses_the_same_system_config():
    doc = yaml.safe_load(DEPLOY.read_text())
    head = " ".join(doc["head_start_ray_commands"])
    found = re.search(r"--system-config='([^']*)'", head)
    assert found, "ray start --head in deploy/ray-cluster.yaml sets no --system-config"
    assert json.loads(found.group(1)) == ray_system_config()


def test_metrics_go_through_opencensus_unless_the_operator_says_otherwise(monkeypatch):
    # Ray's OpenTelemetry metrics client grows without bound in a process
    # that sets thousands of gauge series each interval (bench/README.md,
    # "Protocol fuzz"); raykafka's own cluster uses OpenCensus.
    import os

    from node.ray_cluster import metrics_through_opencensus

    monkeypatch.delenv("RAY_enable_open_telemetry", raising=False)
    metrics_through_opencensus()
    assert os.environ["RAY_enable_open_telemetry"] == "0"
    monkeypatch.setenv("RAY_enable_open_telemetry", "1")
    metrics_through_opencensus()
    assert os.environ["RAY_enable_open_telemetry"] == "1"


def test_deploy_nodes_use_opencensus_metrics():
    doc = yaml.safe_load(DEPLOY.read_text())
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in doc[key] if "ray start" in c]
        assert starts and all("RAY_enable_open_telemetry=0" in c for c in starts), key
