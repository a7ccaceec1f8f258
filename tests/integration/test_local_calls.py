"""Edge -> replica calls on one node over the replica's Unix socket
(core/local_calls.py, core/local_channels.py), on the real broker: a Kafka
client's produce and consume go through it, and the edge's counters show that
the per-request calls did not take Ray's task path."""
from __future__ import annotations

import json
import subprocess
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from core.naming import edge_actor_name
from tests.broker_process import REPO, broker_env

EDGE_STATS = r"""
import json, sys
import ray
args = json.loads(sys.argv[1])
ray.init(address=args["ray_address"], namespace="raykafka", logging_level="ERROR", log_to_driver=False)
print("RESULT " + json.dumps(ray.get(ray.get_actor(args["edge"]).stats.remote(), timeout=30)), flush=True)
ray.shutdown()
"""


def edge_stats(broker) -> dict:
    (node,) = broker.nodes()
    args = {"ray_address": node["ray_address"], "edge": edge_actor_name(node["broker_id"])}
    run = subprocess.run([sys.executable, "-c", EDGE_STATS, json.dumps(args)], env=broker_env(), cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-2000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_produce_and_consume_go_over_the_direct_channel(broker, topic_name):
    before = edge_stats(broker)
    count = 10_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "batch.num.messages": 100})
    for i in range(count):
        producer.produce(topic_name, key=str(i).encode(), value=f"value-{i}".encode())
        producer.poll(0)
    assert producer.flush(60) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic_name}",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 4096})
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        seen = []
        while len(seen) < count:
            message = consumer.poll(10)
            assert message is not None, f"consumed {len(seen)} of {count}"
            assert message.error() is None, message.error()
            seen.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    assert [s[0] for s in seen] == list(range(count))
    assert [(k, v) for _o, k, v in seen] == [(str(i).encode(), f"value-{i}".encode()) for i in range(count)]

    after = edge_stats(broker)
    local = after["local_calls"] - before["local_calls"]
    through_ray = after["ray_calls"] - before["ray_calls"]
    assert after["channels_opened"] > before["channels_opened"]  # the new topic's leader got one
    # Small fetches (4 KiB) take many reads; only the calls made before the
    # channel was up went through Ray.
    print(f"edge -> replica calls: {local} direct, {through_ray} through Ray")
    assert local >= 10 and local > 3 * through_ray, (local, through_ray)


def test_broker_workers_do_not_load_pyarrow_or_pydantic(broker):
    """Ray would import both into every worker to register serializers when
    they are installed (they are in the test venv, for Spark); the broker's
    job keeps them out (core/worker_setup.py). Checked on the edge's process:
    what it has mapped."""
    import pyarrow  # noqa: F401  (installed here, so the check means something)
    import pydantic  # noqa: F401

    pid = edge_stats(broker)["pid"]
    with open(f"/proc/{pid}/maps") as f:
        mapped = f.read()
    assert "/pyarrow/" not in mapped and "/pydantic_core/" not in mapped
    assert "/ray/" in mapped  # the right process: a Ray worker
