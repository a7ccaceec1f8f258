"""Ray-on-Spark, end to end: a Spark session, `setup_ray_cluster`, a raykafka
broker started on that Ray cluster (`raykafka start --ray-address`), records
produced by a Kafka client, read into DataFrames over both read paths, and
everything torn down again."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

import pyspark  # noqa: F401  (installed by ./dev; a missing pyspark must fail, not skip)
import pyarrow  # noqa: F401

from confluent_kafka import Producer  # noqa: E402

from tests.kafka_admin import create_topic  # noqa: E402


def test_ray_on_spark_broker_read_into_dataframes(tmp_path):
    import ray

    from spark.ray_on_spark import RayOnSpark
    from spark.session import local_session

    started = time.monotonic()
    saved_mode = os.environ.get("RAY_AUTH_MODE")
    # A plain local session: RayOnSpark brings what Ray-on-Spark needs itself.
    spark = local_session(app_name="raykafka-ray-on-spark")
    try:
        # Token auth, as by default (the suite's environment turns it off for its throwaway clusters):
        # every Ray node, the driver, the broker and the Spark planner need the token.
        with RayOnSpark(spark, ray_auth="token") as cluster:
            assert ray.is_initialized()
            assert os.environ["RAY_AUTH_MODE"] == "token" and cluster.token_path
            assert os.path.exists(cluster.token_path)
            bootstrap = cluster.start_broker(tmp_path / "data")
            broker = cluster.brokers[0]
            topic = "ray-on-spark"
            create_topic(bootstrap, topic, 2)
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
            for i in range(2000):
                producer.produce(topic, b"value-%d" % i, b"key-%d" % i, partition=i % 2)
            assert producer.flush(60) == 0

            # The broker's replicas are actors of the Ray-on-Spark cluster: found by name, or (a
            # replica its node's pool woke from a spare has none) through its node's edge.
            from actors.replica_lookup import find_replica
            from core.naming import edge_actor_name

            names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["namespace"] == "raykafka"}
            broker_id = producer.list_topics(topic, timeout=30).topics[topic].partitions[0].leader
            assert edge_actor_name(broker_id) in names, names
            replica = asyncio.run(find_replica(topic, 0, broker_id, "raykafka", False, 30))
            assert ray.get(replica.state.remote(), timeout=30)["log_end_offset"] == 1000

            def load(path: str):
                return (spark.read.format("raykafka").option("kafka.bootstrap.servers", bootstrap)
                        .option("subscribe", topic).option("readPath", path).load())

            expected = sorted((p, o) for p in range(2) for o in range(1000))
            for path in ("ray", "kafka"):  # ray: the replicas' segment files, no broker hop
                rows = load(path).selectExpr("partition", "offset", "CAST(key AS STRING) k",
                                             "CAST(value AS STRING) v").collect()
                assert sorted((r["partition"], r["offset"]) for r in rows) == expected, path
                assert all(r["k"] == f"key-{r['v'][6:]}" for r in rows), path
                assert sorted(int(r["v"][6:]) for r in rows) == list(range(2000)), path
            temp_root = cluster.temp_root
            proc = broker.proc
        # torn down: broker stopped cleanly, Ray-on-Spark gone, its temp dir removed
        assert proc.returncode == 0
        assert not ray.is_initialized()
        assert temp_root and not os.path.exists(temp_root)
        assert "RAY_ADDRESS" not in os.environ
        assert os.environ.get("RAY_AUTH_MODE") == saved_mode  # this process's own setting is back
    finally:
        spark.stop()
    assert time.monotonic() - started < 240
