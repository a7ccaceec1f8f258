"""One replication-benchmark phase, run in its own process by bench.replication.

    python -m bench.repl_client --bootstrap H:P[,H:P...] --topic T
        --partitions P --replication-factor RF [--min-insync 2] [--create]
        --acks 1|all --records N [--rate R] [--expect-hw TOTAL]
        [--replica-dirs JSON] [--delete-after] ...

With --create: CreateTopics with RF and min.insync.replicas (the AdminClient
stays alive until the future resolves). Always: wait until every partition
has a leader and a full ISR; then produce N keyed records (key of record i =
i, values from bench.client's payload pool, lz4) with a delivery report per
record, measuring throughput and per-record latency.

Latency of record i = the time its delivery report reached the callback
minus the time just before produce() was first called for it (the callback
finds the send time through the key). With --rate 0 the producer runs flat
out: all N records are queued at once, so the latency there mostly measures
librdkafka's own queue; bench.replication therefore also runs paced phases.

Checks: every record gets exactly one successful report; per partition the
reported offsets are distinct and contiguous (bench.replication checks that
each phase continues the previous one); with --replica-dirs, every replica's
segment files reach the same size. ListOffsets high watermarks summing to
--expect-hw is recorded, and only warned about (Tansu undercounts, see
bench/README.md). --delete-after deletes the topic outside the timed window.

Prints one JSON object on the last line of stdout; ``"ok": false`` with an
``error`` when a check fails.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from array import array

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.client import POOL_SIZE, lz4_ratio, make_keys, make_payloads
from bench.procstat import CpuWindow


def emit(result: dict) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def percentile(sorted_vals, q: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[k]


def topic_state(client, topic: str) -> dict | None:
    md = client.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return {p.id: {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
            for p in t.partitions.values()}


def create_topic(a, conf: dict) -> tuple[float, dict | None, str | None]:
    """With --create: CreateTopics; then (always) wait for a leader and a full
    ISR on every partition. Returns (seconds, partition state, error)."""
    t0 = time.perf_counter()
    admin = AdminClient(conf)
    if a.create:
        cfg = {"min.insync.replicas": str(a.min_insync)} if a.min_insync else {}
        futs = admin.create_topics(
            [NewTopic(a.topic, num_partitions=a.partitions,
                      replication_factor=a.replication_factor, config=cfg)],
            operation_timeout=60, request_timeout=60)
        try:
            futs[a.topic].result(timeout=90)  # `admin` is alive until here
        except Exception as e:
            return time.perf_counter() - t0, None, f"CreateTopics failed: {e}"
    deadline = time.monotonic() + a.ready_timeout
    state = None
    while time.monotonic() < deadline:
        try:
            state = topic_state(admin, a.topic)
        except KafkaException:
            state = None
        if state and len(state) == a.partitions and all(
                s["leader"] >= 0 and len(s["replicas"]) == a.replication_factor
                and len(s["isr"]) == a.replication_factor for s in state.values()):
            return time.perf_counter() - t0, state, None
        time.sleep(0.1)
    return time.perf_counter() - t0, state, (
        f"topic not ready after {a.ready_timeout:.0f}s (every partition needs a leader, "
        f"{a.replication_factor} replicas and a full ISR); last metadata: {state}")


def high_watermarks(conf: dict, topic: str, partitions) -> int:
    """Sum of the partitions' high watermarks (ListOffsets latest, read_uncommitted).
    Through the AdminClient: a Consumer with a group.id looks up its group
    coordinator at once, which makes a broker create __consumer_offsets (on
    raykafka RF=3: 9 replica actors and 3 coordinators) while the next phase
    is being timed."""
    try:
        from confluent_kafka.admin import OffsetSpec
    except ImportError:  # an old client: the consumer's watermark call
        return _high_watermarks_by_consumer(conf, topic, partitions)
    admin = AdminClient(conf)
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
                                 request_timeout=10)
    return sum(f.result(timeout=15).offset for f in futures.values())


def _high_watermarks_by_consumer(conf: dict, topic: str, partitions) -> int:
    c = Consumer(conf | {"group.id": "raykafka-bench-hw", "enable.auto.commit": False})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in partitions)
    finally:
        c.close()


def replica_sizes(log_dirs: dict, topic: str, partitions: int) -> dict:
    """partition -> {broker: bytes in its <log dir>/<topic>-<p>/*.log files}."""
    out: dict[int, dict[str, int]] = {}
    for p in range(partitions):
        for broker, dirs in log_dirs.items():
            for d in dirs:
                pdir = os.path.join(d, f"{topic}-{p}")
                try:
                    names = os.listdir(pdir)
                except OSError:
                    continue
                size = 0
                for f in names:
                    if f.endswith(".log"):
                        try:
                            size += os.stat(os.path.join(pdir, f)).st_size
                        except OSError:
                            pass
                out.setdefault(p, {})[str(broker)] = size
    return out


def check_replicas(log_dirs: dict, topic: str, partitions: int, rf: int, timeout: float,
                   written: set[int] | None = None) -> dict:
    """Wait until every partition has rf copies of equal size on disk
    (followers append the leader's batches byte for byte), non-zero for the
    partitions in ``written`` (all when None): the ones the phase delivered to
    (unkeyed records can leave a partition empty, as librdkafka's sticky
    partitioner fills one at a time)."""
    t0 = time.monotonic()
    written = set(range(partitions)) if written is None else written
    while True:
        sizes = replica_sizes(log_dirs, topic, partitions)
        good = len(sizes) == partitions and all(
            len(s) == rf and len(set(s.values())) == 1 and (p not in written or min(s.values()) > 0)
            for p, s in sizes.items())
        if good or time.monotonic() - t0 > timeout:
            return {"ok": good, "after_s": round(time.monotonic() - t0, 2), "sizes": sizes}
        time.sleep(0.1)


def delete_topic(conf: dict, topic: str) -> str | None:
    """DeleteTopics, so the next phase runs without this topic's replicas;
    returns an error text or None."""
    admin = AdminClient(conf)
    try:
        admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(
            timeout=45)  # `admin` is alive until here
        return None
    except Exception as e:
        return str(e)


def run(a) -> dict:
    conf = {"bootstrap.servers": a.bootstrap, "client.id": "raykafka-bench-repl"}
    create_s, state, err = create_topic(a, conf)
    res = {"topic": a.topic, "created": a.create, "create_s": round(create_s, 2),
           "partition_state": state}
    if err:
        return res | {"ok": False, "error": err}

    n, size = a.records, a.record_size
    pool = make_payloads(size)
    # Unkeyed: librdkafka's partitioner spreads null-key records (the issue's
    # external workload); keyed: key i = record i, for per-record latency.
    keys = [None] * n if a.unkeyed else make_keys(n)
    send_t = array("d", bytes(8 * n))
    lat = array("d", bytes(8 * n))
    part = array("i", bytes(4 * n))
    offs = array("q", bytes(8 * n))
    stats = {"delivered": 0, "errors": 0, "first_error": None, "dupes": 0, "foreign": 0}
    clock = time.perf_counter

    def on_delivery(err, msg):
        now = clock()
        if err is not None:
            stats["errors"] += 1
            if stats["first_error"] is None:
                stats["first_error"] = str(err)
            return
        try:
            i = int(msg.key())
            if lat[i]:
                stats["dupes"] += 1
            else:
                lat[i] = now - send_t[i]
                part[i] = msg.partition()
                offs[i] = msg.offset()
                stats["delivered"] += 1
        except (TypeError, ValueError, IndexError):
            stats["foreign"] += 1

    def on_delivery_unkeyed(err, msg):
        # No key to find the record by: no per-record latency; the offsets
        # (distinct and contiguous per partition, checked below) prove that
        # each record was written once.
        if err is not None:
            on_delivery(err, msg)
            return
        j = stats["delivered"]
        if j >= n:
            stats["foreign"] += 1
            return
        part[j] = msg.partition()
        offs[j] = msg.offset()
        stats["delivered"] += 1

    p = Producer(conf | {
        "acks": a.acks,
        "compression.type": "lz4",
        "linger.ms": a.linger_ms,
        "batch.size": a.batch_size,
        "message.timeout.ms": int(a.timeout * 1000),
        "on_delivery": on_delivery_unkeyed if a.unkeyed else on_delivery,
    })
    p.list_topics(a.topic, timeout=30)  # connect + metadata before the clock
    produce, poll = p.produce, p.poll
    mask = POOL_SIZE - 1
    topic = a.topic
    cpu = CpuWindow(a.broker_pid).start()
    t0 = clock()
    i = 0
    if a.rate <= 0:
        for i in range(n):
            send_t[i] = clock()
            try:
                produce(topic, pool[i & mask], keys[i])
            except BufferError:  # local queue full: serve reports, retry
                while True:
                    poll(0.005)
                    try:
                        produce(topic, pool[i & mask], keys[i])
                        break
                    except BufferError:
                        pass
            if not i & 63:
                poll(0)
    else:
        rate = float(a.rate)
        # librdkafka's poll() takes whole milliseconds: a timeout under 1 ms
        # returns at once. "spin" (the old pacing) waited for each next record
        # that way and kept a core busy at nice 0 (80-100% of one), which on a
        # 2-core machine starves the broker's nice-15 Ray workers; "tick"
        # waits >= 1 ms and sends what fell due meanwhile (each record's
        # latency still counts from its own produce()).
        min_wait = 0.0 if a.pacing == "spin" else 0.001
        while i < n:
            due = min(n, int((clock() - t0) * rate) + 1)
            while i < due:
                send_t[i] = clock()
                try:
                    produce(topic, pool[i & mask], keys[i])
                except BufferError:
                    poll(0.005)
                    continue
                i += 1
            poll(0)
            wait = (i / rate) - (clock() - t0)
            if wait > 0:
                poll(min(max(wait, min_wait), 0.01))
    remaining = p.flush(a.timeout)
    t1 = clock()
    cpu = cpu.stop()
    elapsed = t1 - t0

    res |= {"elapsed_s": elapsed, "records": n, "bytes": n * size,
            "mb_s": n * size / elapsed / 1e6, "records_s": n / elapsed,
            "offered_rate": a.rate, "lz4_pool_ratio": lz4_ratio(pool), "cpu": cpu,
            "errors": stats["errors"], "delivered": stats["delivered"],
            "warnings": []}
    if cpu.get("broker_cpu_known") and cpu.get("broker_cpu_pct") is not None:
        # Broker process tree CPU seconds per GB (10^9 bytes of record values) acknowledged.
        res["broker_cpu_s_per_gb"] = round(cpu["broker_cpu_pct"] / 100 * cpu["window_s"] / (n * size / 1e9), 3)
    ms = lambda x: None if x is None else round(x * 1000, 3)
    v = sorted(x for x in lat if x > 0)
    if v:
        res["latency_ms"] = {"p50": ms(percentile(v, 0.50)), "p99": ms(percentile(v, 0.99)),
                             "p999": ms(percentile(v, 0.999)), "max": ms(v[-1]),
                             "mean": ms(sum(v) / len(v)), "count": len(v)}
        if a.rate > 0:
            # Per second of send time: is a tail one stall or spread over the phase?
            buckets: dict[int, list[float]] = {}
            for i in range(n):
                if lat[i] > 0:
                    buckets.setdefault(int(send_t[i] - t0), []).append(lat[i])
            res["latency_timeline"] = [[sec, len(b), ms(percentile(sorted(b), 0.99)), ms(max(b))]
                                       for sec, b in sorted(buckets.items())]
    if remaining:
        return res | {"ok": False, "error": f"{remaining} records still undelivered after "
                      f"flush({a.timeout:.0f}s)"}
    if stats["errors"]:
        return res | {"ok": False, "error": f"{stats['errors']}/{n} records failed delivery "
                      f"(first: {stats['first_error']})"}
    if stats["delivered"] != n or stats["dupes"] or stats["foreign"]:
        return res | {"ok": False, "error": f"{stats['delivered']}/{n} records got a delivery "
                      f"report; {stats['dupes']} reported twice, {stats['foreign']} foreign"}

    # Offsets from the delivery reports: per partition distinct and
    # contiguous (the harness checks that each phase continues where the
    # previous one on the same topic ended, and the first starts at 0).
    per: dict[int, list[int]] = {}
    for i in range(n):
        per.setdefault(part[i], []).append(offs[i])
    bad = []
    for pid, ol in sorted(per.items()):
        ol.sort()
        if ol != list(range(ol[0], ol[0] + len(ol))):
            bad.append(f"partition {pid}: {len(ol)} records, offsets {ol[0]}..{ol[-1]}, "
                       f"{len(ol) - len(set(ol))} duplicate")
    res["offset_ranges"] = {str(pid): [ol[0], ol[-1]] for pid, ol in sorted(per.items())}
    if bad:
        return res | {"ok": False, "error": "delivery-report offsets are not contiguous per "
                      "partition: " + "; ".join(bad)}

    # High watermarks (ListOffsets latest) must reach N. With acks=1 the
    # leaders acknowledge before the followers fetch, so the HW may trail:
    # wait, and report how long it took. Tansu is known to report stale
    # high watermarks here (bench/README.md), so a shortfall is a warning;
    # the delivery-report offsets above are the check.
    expect = a.expect_hw or n
    t_hw = clock()
    hw, last_change, prev = -1, t_hw, None
    while True:
        try:
            hw = high_watermarks(conf, topic, sorted(state))
        except (KafkaException, TimeoutError) as e:
            res["warnings"].append(f"ListOffsets failed: {e}")
        now = clock()
        if hw != prev:
            prev, last_change = hw, now
        # give up at the limit, or once the sum has not moved for 1 s
        if hw == expect or now - t_hw > a.hw_timeout or (hw >= 0 and now - last_change > 1.0):
            break
        time.sleep(0.05)
    res["high_watermark_sum"] = hw
    res["hw_catchup_s"] = round(clock() - t_hw, 3) if hw == expect else None
    if a.replica_dirs:
        rep = res["replica_files"] = check_replicas(
            json.loads(a.replica_dirs), topic, a.partitions, a.replication_factor,
            a.replica_timeout, written=set(per))
        if not rep["ok"]:
            return res | {"ok": False, "error": f"the {a.replication_factor} replicas' segment "
                          f"files still differ or are missing {rep['after_s']}s after the "
                          f"last ack: {rep['sizes']}"}
    if hw != expect:
        res["warnings"].append(f"ListOffsets(latest) sums to {hw} {clock() - t_hw:.1f}s after "
                               f"the last ack, expected {expect} (stale/incorrect high "
                               f"watermarks)")
    try:
        after = topic_state(p, topic)
        res["isr_after"] = {pid: s["isr"] for pid, s in (after or {}).items()}
        shrunk = [pid for pid, s in (after or {}).items() if len(s["isr"]) < a.replication_factor]
        if shrunk:
            res["warnings"].append(f"ISR below {a.replication_factor} after the phase for "
                                   f"partitions {shrunk}: {res['isr_after']}")
    except KafkaException as e:
        res["warnings"].append(f"metadata after the phase failed: {e}")
    return res | {"ok": True}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.repl_client")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--replication-factor", type=int, default=3)
    ap.add_argument("--min-insync", type=int, default=0, help="0: do not set min.insync.replicas")
    ap.add_argument("--acks", default="1")
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rate", type=float, default=0, help="records/s; 0 = as fast as possible")
    ap.add_argument("--linger-ms", type=float, default=5)
    ap.add_argument("--batch-size", type=int, default=1000000, help="librdkafka batch.size")
    ap.add_argument("--unkeyed", action="store_true", help="null keys (no per-record latency)")
    ap.add_argument("--pacing", choices=("tick", "spin"), default="tick",
                    help="paced phases: wait >= 1 ms between sends (tick) or busy-poll (spin, the "
                         "old pacing: a core at nice 0)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--ready-timeout", type=float, default=60.0)
    ap.add_argument("--hw-timeout", type=float, default=5.0)
    ap.add_argument("--broker-pid", type=int, default=0)
    ap.add_argument("--create", action="store_true", help="create the topic first")
    ap.add_argument("--expect-hw", type=int, default=0,
                    help="records the topic holds after this phase (default --records)")
    ap.add_argument("--replica-dirs", help="JSON {broker: [log dirs]}: check that every "
                    "replica's segment files reach the same size")
    ap.add_argument("--replica-timeout", type=float, default=20.0)
    ap.add_argument("--delete-after", action="store_true",
                    help="delete the topic when done (outside the timed window)")
    a = ap.parse_args(argv)
    try:
        res = run(a)
    except Exception as e:  # report, never crash without a result line
        res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    if a.delete_after:
        t0 = time.perf_counter()
        err = delete_topic({"bootstrap.servers": a.bootstrap}, a.topic)
        res["delete_s"] = round(time.perf_counter() - t0, 2)
        if err:
            res.setdefault("warnings", []).append(f"DeleteTopics {a.topic} failed: {err}")
    emit(res)
    return 0 if res.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
