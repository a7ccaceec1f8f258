"""Spark read throughput of the `raykafka` data source: Kafka-protocol path vs
Ray-native path, for `count()` and for a full materialisation of every column
(the `noop` sink), plus the two record decoders outside Spark.

    .venv/bin/python -m bench.spark_bench                    # 200k x 1 KiB records, 2 partitions, lz4
    .venv/bin/python -m bench.spark_bench --records 500000 --runs 5 --compression none
    .venv/bin/python -m bench.spark_bench --ray-on-spark     # the Ray cluster from Ray-on-Spark instead

By default the bench starts a local Ray (in this process) and a broker joined
to it (`raykafka start --ray-address`), so the Spark planner can reach the
replica actors; `--ray-on-spark` uses `spark.ray_on_spark.RayOnSpark` instead
(slower to start, one of the two Spark task slots goes to the Ray worker node).
MB/s counts key + value bytes.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def produce(bootstrap: str, topic: str, partitions: int, records: int, size: int, compression: str) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": compression, "queue.buffering.max.kbytes": 256 * 1024})
    value = os.urandom(size - 16)
    started = time.perf_counter()
    for i in range(records):
        key = b"key-%012d" % i
        while True:
            try:
                producer.produce(topic, value, key, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0
    return time.perf_counter() - started


def bench_decoders(bootstrap: str, topic: str, partitions: int, records: int, size: int, runs: int) -> dict:
    """Whole topic into Arrow in one process: our Fetch client + storage.records
    framing + spark.decode vs confluent-kafka's consumer (librdkafka decoding)."""
    import pyarrow as pa
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from spark.decode import ArrowBuilder, next_fetch_offset
    from spark.wire import LATEST, KafkaWireClient

    client = KafkaWireClient(bootstrap)
    ends = client.list_offsets({(topic, p): LATEST for p in range(partitions)})

    def ours() -> int:
        rows = 0
        for p in range(partitions):
            builder = ArrowBuilder(topic, p, False)
            end = ends[(topic, p)]
            offset = 0
            leader = client.send_fetch(topic, p, offset)
            while offset < end:
                result = client.receive_fetch(leader)
                following = next_fetch_offset(result.records, offset)
                if following < end:
                    leader = client.send_fetch(topic, p, following)
                offset, _ = builder.add(result.records, offset, end)
                rows += builder.take().num_rows
        return rows

    def confluent() -> int:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                             "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 8 << 20})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        rows = 0
        while rows < records:
            keys, values, offsets, stamps, parts = [], [], [], [], []
            for m in consumer.consume(10000, timeout=1.0):
                keys.append(m.key())
                values.append(m.value())
                offsets.append(m.offset())
                stamps.append(m.timestamp()[1])
                parts.append(m.partition())
            batch = pa.record_batch([pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                                     pa.array(parts, pa.int32()), pa.array(offsets, pa.int64()),
                                     pa.array(stamps, pa.int64())], names=["k", "v", "p", "o", "t"])
            rows += batch.num_rows
        consumer.close()
        return rows

    out = {}
    for name, fn in (("raykafka Fetch + storage.records decoder", ours), ("confluent-kafka consumer", confluent)):
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            assert fn() == records
            times.append(time.perf_counter() - started)
        out[name] = times
    client.close()
    return out


def bench_spark(spark, bootstrap: str, topic: str, records: int, runs: int, paths: list[str]) -> dict:
    out = {}
    for path in paths:
        df = (spark.read.format("raykafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("readPath", path).load())
        assert df.count() == records  # warm-up: Python workers, Ray connection in the planner
        for what, action in (("count()", lambda: df.count()),
                             ("materialise (noop sink)", lambda: df.write.format("noop").mode("overwrite").save())):
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                action()
                times.append(time.perf_counter() - started)
            out[(path, what)] = times
    return out


def line(label: str, times: list[float], records: int, size: int) -> str:
    best, median = min(times), statistics.median(times)
    return (f"  {label:<48} {records / median / 1e3:8.0f}k rows/s {records * size / median / 1e6:7.0f} MB/s"
            f"   (median {median:.2f}s, best {best:.2f}s = {records * size / best / 1e6:.0f} MB/s, n={len(times)})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024, help="bytes of key + value")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--compression", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ray-on-spark", action="store_true")
    parser.add_argument("--skip-decoders", action="store_true")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from spark.session import local_session, prepare_environment

    prepare_environment(local=True, ray=True)
    work = Path(tempfile.mkdtemp(prefix="rk-sparkbench-", dir="/tmp"))
    ray_tmp = None
    broker = cluster = spark = None
    try:
        import ray

        from spark.ray_on_spark import BrokerOnRay, RayOnSpark

        started = time.perf_counter()
        if args.ray_on_spark:
            spark = local_session(master=args.master, ray=True)
            cluster = RayOnSpark(spark)
            cluster.start()
            bootstrap = cluster.start_broker(work / "data")
        else:
            ray_tmp = tempfile.mkdtemp(prefix="rk-sb-", dir="/tmp")
            # Token auth unless RAY_AUTH_MODE=disabled: the token in Ray's temp dir, for
            # this driver, the broker (BrokerOnRay inherits the environment) and Spark's planner.
            from spark import ray_auth

            token = ray_auth.token_file(ray_tmp) if os.environ.get("RAY_AUTH_MODE", "token") == "token" else None
            ray_auth.use_token(token)
            ray.init(include_dashboard=False, _temp_dir=ray_tmp, num_cpus=os.cpu_count() or 2,
                     object_store_memory=256 << 20, logging_level=logging.WARNING)
            address = ray.get_runtime_context().gcs_address
            broker = BrokerOnRay(address, work / "data")
            bootstrap = broker.start()
            spark = local_session(master=args.master, ray=True)
            from spark import register

            register(spark, ray_address=address, ray_auth_token_path=token)
        print(f"setup: broker {bootstrap}, Spark {args.master}{' + Ray-on-Spark' if args.ray_on_spark else ''} "
              f"in {time.perf_counter() - started:.0f} s", flush=True)
        topic = "spark-bench"
        took = produce(bootstrap, topic, args.partitions, args.records, args.record_size, args.compression)
        print(f"produced {args.records} x {args.record_size} B records ({args.compression}, {args.partitions} "
              f"partitions) in {took:.1f} s", flush=True)

        results = bench_spark(spark, bootstrap, topic, args.records, args.runs, ["kafka", "ray"])
        print(f"\nspark.read.format('raykafka') over {args.records} x {args.record_size} B records:")
        for (path, what), times in results.items():
            print(line(f"readPath={path:<5} {what}", times, args.records, args.record_size))
        if not args.skip_decoders:
            decoders = bench_decoders(bootstrap, topic, args.partitions, args.records, args.record_size, args.runs)
            print("\nrecord decoding into Arrow, one Python process, no Spark:")
            for name, times in decoders.items():
                print(line(name, times, args.records, args.record_size))
        return 0
    finally:
        if cluster is not None:
            cluster.stop()  # needs the Spark session
        if broker is not None:
            broker.stop()
        if spark is not None:
            spark.stop()
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        except Exception:
            pass
        for path in (work, ray_tmp):
            if path:
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
