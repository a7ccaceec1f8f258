"""One phase of the exactly-once benchmark (bench.transactions), in its own process.

    python -m bench.txn_client produce --mode plain|idempotent|transactional
        --bootstrap H:P --topic T --records N [--record-size B] [--txn-records 1000]
    python -m bench.txn_client consume --isolation read_committed|read_uncommitted
        --bootstrap H:P --topic T --records N [--record-size B]
    python -m bench.txn_client warmup --bootstrap H:P --topic T --records 1 --timeout S

produce: N keyed records (key = sequence number, the payload pool, lz4,
linger.ms=5 and batch.size=1000000 of bench.client), acks=all in every mode:
  plain          enable.idempotence=false
  idempotent     enable.idempotence=true (librdkafka then caps
                 max.in.flight at 5 and retries without duplicates)
  transactional  transactional.id; init_transactions() before the clock, then
                 begin_transaction / --txn-records produce() / commit_transaction
                 until all N are sent.
Every record must get a successful delivery (flush() leaves none, no
delivery error; in transactional mode also every commit_transaction()
returns), or the phase reports ``"ok": false``.

consume: assigns every partition from the beginning with the given
isolation.level and reads until N records arrived; it must see every key
0..N-1 exactly once with N x B value bytes, and the high watermarks (for
read_committed: the last stable offsets) the fetches reported must cover at
least N offsets (a transactional topic also holds one control record per
transaction and partition: reported as ``control_offsets``).

Like bench.client, each phase prints one JSON object on the last stdout line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from bench.client import (
    DeliveryErrors,
    base_conf,
    batching_conf,
    consumer_conf,
    lz4_ratio,
    make_keys,
    make_payloads,
    partitions_seen,
    produce_keyed,
    read_keyed,
    run_main,
    topic_partitions,
    watermark_totals,
)
from bench.latency import percentile
from bench.procstat import CpuWindow

MODES = ("plain", "idempotent", "transactional")
ISOLATIONS = ("read_uncommitted", "read_committed")


def producer_conf(a, mode: str) -> dict:
    """Settings of one produce mode: the same batching and compression as
    bench.client, acks=all in all three, so only idempotence/transactions
    differ between them."""
    conf = batching_conf(a, "all") | {"enable.idempotence": mode != "plain"}
    if mode == "transactional":
        conf["transactional.id"] = f"raykafka-bench-{os.getpid()}-{time.time_ns()}"
        # The broker's transaction.max.timeout.ms (Kafka: 15 min) must allow it.
        conf["transaction.timeout.ms"] = max(int(a.timeout * 1000), 10000)
    return conf


def percentiles_ms(values_s: list[float]) -> dict:
    """p50/p99/max of durations in seconds, in ms (nearest rank)."""
    if not values_s:
        return {}
    v = sorted(values_s)
    return {"p50_ms": round(percentile(v, 50) * 1000, 3),
            "p99_ms": round(percentile(v, 99) * 1000, 3), "max_ms": round(v[-1] * 1000, 3)}


def idempotence_state(stats_json: str | None) -> str | None:
    """librdkafka's idempotent-producer state from a statistics document
    ("Assigned" once InitProducerId answered), None if not reported."""
    if not stats_json:
        return None
    return (json.loads(stats_json).get("eos") or {}).get("idemp_state")


def wait_idempotence(p: Producer, last_stats: list, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        p.poll(0.05)
        state = idempotence_state(last_stats[0])
        if state == "Assigned":
            break
    return state


def phase_produce(a) -> dict:
    pool = make_payloads(a.record_size)
    keys = make_keys(a.records)
    errors = DeliveryErrors()
    conf = producer_conf(a, a.mode)
    last_stats: list[str | None] = [None]
    # Statistics only to see the producer id arrive (idempotent mode, below);
    # the callback just keeps the document, at most once a second.
    p = Producer(conf | {"on_delivery": errors, "statistics.interval.ms": 1000,
                         "stats_cb": lambda doc: last_stats.__setitem__(0, doc)})
    res: dict = {"mode": a.mode, "records": a.records, "bytes": a.records * a.record_size,
                 "lz4_pool_ratio": lz4_ratio(pool), "partitions_seen": partitions_seen(p, a.topic)}
    if a.mode == "idempotent":
        # An idempotent producer gets its id (InitProducerId) once connected
        # and holds its records until then: wait for it before the clock, as
        # init_transactions() does for the transactional mode.
        t = time.perf_counter()
        state = wait_idempotence(p, last_stats, a.timeout)
        res["init_producer_id_s"] = round(time.perf_counter() - t, 4)
        if state != "Assigned":
            res.update(ok=False, error=f"no producer id after {a.timeout:.0f}s "
                       f"(librdkafka idempotence state {state!r})")
            return res
    if a.mode == "transactional":
        # FindCoordinator(transaction) + InitProducerId: once per producer,
        # outside the timed window (reported on its own).
        t = time.perf_counter()
        try:
            p.init_transactions(a.timeout)
        except KafkaException as e:
            res.update(ok=False, error=f"init_transactions failed: {e}")
            return res
        res["init_transactions_s"] = round(time.perf_counter() - t, 4)

    n = a.records
    per_txn = a.txn_records if a.mode == "transactional" else n
    commits: list[float] = []
    cpu = CpuWindow(a.broker_pid).start()
    t0 = time.perf_counter()
    remaining = 0
    try:
        for start in range(0, n, per_txn):
            if a.mode == "transactional":
                p.begin_transaction()
            produce_keyed(p, a.topic, pool, keys, a.partition, start, min(n, start + per_txn))
            if a.mode == "transactional":
                tc = time.perf_counter()
                # flushes the transaction's records, then EndTxn(commit)
                p.commit_transaction(a.timeout)
                commits.append(time.perf_counter() - tc)
        remaining = p.flush(a.timeout)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        res.update(ok=False, error=f"{'transaction ' + str(len(commits) + 1) + ': ' if a.mode == 'transactional' else ''}"
                   f"{err.str() if isinstance(err, KafkaError) else e}",
                   committed_transactions=len(commits))
        if a.mode == "transactional" and isinstance(err, KafkaError) and err.txn_requires_abort():
            try:
                p.abort_transaction(a.timeout)
            except KafkaException:
                pass
        return res
    t1 = time.perf_counter()
    res.update(elapsed_s=t1 - t0, errors=errors.count, cpu=cpu.stop())
    if a.mode == "transactional":
        res.update(transactions=len(commits), txn_records=per_txn,
                   commit=percentiles_ms(commits))
    return errors.verdict(res, remaining, n, a.timeout)


def phase_warmup(a) -> dict:
    """A transactional producer's init_transactions() with a long timeout,
    untimed, before the timed topics: whatever a broker sets up for the
    first transactional id it sees (raykafka: the __transaction_state topic,
    its replica actors and transaction coordinators) happens here, as
    bench.client's warm-up does for the group coordinator."""
    p = Producer(base_conf(a) | {"transactional.id": f"raykafka-bench-warmup-{os.getpid()}",
                                 "acks": "all"})
    t = time.perf_counter()
    try:
        p.init_transactions(a.timeout)
    except KafkaException as e:
        return {"ok": False, "error": f"init_transactions failed after "
                f"{time.perf_counter() - t:.1f}s: {e}"}
    return {"ok": True, "init_transactions_s": round(time.perf_counter() - t, 3)}


# --------------------------------------------------------------------------
def consume_verdict(n: int, record_size: int, got: int, distinct: int, bad_key: int,
                    nbytes: int, end_offsets: int | None, idle_timeout: float) -> str | None:
    """None if a consume accounted for every record exactly once, else why not."""
    if got != n or distinct != n:
        stalled = f" (no record for {idle_timeout:.0f}s)" if got < n else ""
        return (f"consumed {got}/{n} records{stalled}: {distinct} distinct, "
                f"{n - distinct} missing, {got - distinct - bad_key} duplicates, "
                f"{bad_key} with a foreign key")
    if nbytes != n * record_size:
        return f"consumed {nbytes} value bytes, expected {n * record_size}"
    if end_offsets is not None and end_offsets < n:
        return (f"all {n} records consumed, but the fetches' end offsets sum to "
                f"{end_offsets} < {n}")
    return None


def phase_consume(a) -> dict:
    last_stats: list[str | None] = [None]
    c = Consumer(consumer_conf(a, "raykafka-bench-txn", last_stats)
                 | {"isolation.level": a.isolation})
    try:
        parts, failed = topic_partitions(c, a.topic)
        if failed:
            return failed
        held, start = watermark_totals(c, a.topic, parts)
        n = a.records
        base = {"isolation": a.isolation, "partitions": len(parts),
                "list_offsets_offsets": held, "log_start_offsets": start}
        if start > 0:
            # A fresh topic whose log start moved: the broker deleted records
            # (librdkafka's mock keeps 5 MiB per partition). Not every record
            # can be read back: say so instead of waiting for them.
            return base | {"ok": False, "retention_deleted_offsets": start,
                           "error": f"broker deleted records before they were read: log "
                                    f"start offsets sum to {start} (retention limit; use "
                                    f"fewer records)"}
        r = read_keyed(c, a.topic, parts, n, n, a.idle_timeout, a.broker_pid, last_stats)
        if r.error:
            return base | {"ok": False, "error": r.error, "consumed": r.got}
        # End offsets the fetches reported: high watermarks, or for
        # read_committed the last stable offsets (librdkafka keeps those).
        end = r.end_offsets
        res = base | {"elapsed_s": r.elapsed_s, "records": r.got, "distinct_records": r.distinct,
                      "bytes": r.nbytes, "fetch_end_offsets": end,
                      "control_offsets": (end - n) if end is not None else None,
                      "cpu": r.cpu, "fetches": r.fetches}
        why = consume_verdict(n, a.record_size, r.got, r.distinct, r.bad_key, r.nbytes, end,
                              a.idle_timeout)
        res.update(ok=why is None, **({"error": why} if why else {}))
        return res
    finally:
        c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.txn_client")
    ap.add_argument("phase", choices=["produce", "consume", "warmup"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--mode", choices=MODES, default="plain")
    ap.add_argument("--txn-records", type=int, default=1000,
                    help="transactional: records per transaction")
    ap.add_argument("--isolation", choices=ISOLATIONS, default="read_uncommitted")
    ap.add_argument("--partition", type=int, default=-1,
                    help="produce: send every record to this partition (-1: by key hash)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="produce: message.timeout.ms and the longest flush/commit wait, s")
    ap.add_argument("--idle-timeout", type=float, default=30.0,
                    help="consume: give up after this many seconds without a record")
    ap.add_argument("--broker-pid", type=int, default=0)
    a = ap.parse_args(argv)
    if a.records <= 0 or a.txn_records <= 0:
        ap.error("--records and --txn-records must be positive")
    return run_main({"produce": phase_produce, "consume": phase_consume,
                     "warmup": phase_warmup}, a, a.phase)


if __name__ == "__main__":
    sys.exit(main())
