"""End-to-end latency at a fixed offered rate: one paced producer process and
one subscribed consumer process, run by bench.run (--matrix).

    python -m bench.latency consume --bootstrap H:P --topic T --rate R
        --warmup-s W --window-s S --ready-file F
    python -m bench.latency produce --bootstrap H:P --topic T --rate R
        --warmup-s W --window-s S

Record i is scheduled at i / R seconds after the producer's start; its key
is its sequence number (as in bench.client) and the first 8 bytes of its
value are time.monotonic_ns() taken just before its produce() call (one
system-wide clock, so two processes on one machine can compare it). The
consumer takes the clock again when consume() hands it the record; the
difference is the end-to-end latency: producer queue and linger, the
broker's append and replication, the fetch, the consumer's queue. Records
scheduled inside the first W seconds are warm-up (connections, group
join, JIT-less first calls) and not counted; the S seconds after are the
steady window. Each process prints one JSON object on the last line.

The consumer also proves exactly-once arrival of every record (as the
throughput phases do); a run that loses or duplicates a record is FAIL.
"""
from __future__ import annotations

import argparse
import math
import os
import struct
import sys
import time
from array import array

from bench.client import (
    POOL_SIZE,
    DeliveryErrors,
    base_conf,
    batching_conf,
    make_payloads,
    partitions_seen,
    run_main,
)

STAMP = struct.Struct(">q")
TICK_NS = 1_000_000  # the producer sleeps at least this long between bursts


# ------------------------------------------------------------------ pure
def window_bounds(rate: float, warmup_s: float, window_s: float) -> tuple[int, int]:
    """Sequence numbers [lo, hi) of the records scheduled in the steady
    window; hi is also the number of records the producer sends."""
    lo = int(rate * warmup_s)
    hi = int(rate * (warmup_s + window_s))
    return lo, hi


def records_due(elapsed_ns: int, rate: float, total: int) -> int:
    """How many records the schedule says must have been sent after
    elapsed_ns: record i is due at i / rate seconds, record 0 at once."""
    if elapsed_ns < 0:
        return 0
    return min(total, int(elapsed_ns * rate / 1e9) + 1)


def percentile(sorted_values, q: float):
    """Nearest-rank percentile (q in 0..100) of an ascending sequence: the
    smallest value with at least q% of the values at or below it."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    rank = max(1, math.ceil(q / 100 * n))
    return sorted_values[rank - 1]


def latency_summary(latencies_ns) -> dict:
    """p50/p99/p99.9/max/mean in milliseconds of latencies in nanoseconds."""
    values = sorted(latencies_ns)
    if not values:
        return {"count": 0}
    ms = lambda ns: round(ns / 1e6, 3)
    return {"count": len(values),
            "p50_ms": ms(percentile(values, 50)),
            "p99_ms": ms(percentile(values, 99)),
            "p999_ms": ms(percentile(values, 99.9)),
            "max_ms": ms(values[-1]),
            "mean_ms": ms(sum(values) / len(values))}


# ------------------------------------------------------------------ produce
def phase_produce(a) -> dict:
    from confluent_kafka import Producer

    _, n = window_bounds(a.rate, a.warmup_s, a.window_s)
    tails = [v[STAMP.size:] for v in make_payloads(a.record_size)]
    mask = POOL_SIZE - 1
    errors = DeliveryErrors()
    # The throughput rows' producer settings: what a user tuned for
    # throughput would run, linger.ms=5 included.
    p = Producer(batching_conf(a, a.acks, a.linger_ms) | {"on_delivery": errors})
    partitions_seen(p, a.topic)  # connects before the schedule starts
    produce, poll, now_ns, pack = p.produce, p.poll, time.monotonic_ns, STAMP.pack
    part = a.partition
    period_ns = 1e9 / a.rate
    # Per burst: how far behind the schedule its first record went out. A
    # producer that cannot keep the rate shows up here, not as lower latency.
    lag_ns = array("q")
    i = 0
    t0 = now_ns()
    while i < n:
        due = records_due(now_ns() - t0, a.rate, n)
        if due > i:
            lag_ns.append(now_ns() - (t0 + int(i * period_ns)))
            while i < due:
                try:
                    produce(a.topic, pack(now_ns()) + tails[i & mask], b"%010d" % i, part)
                except BufferError:  # local queue full: let deliveries drain
                    poll(0.001)
                    continue
                i += 1
            poll(0)
        gap = t0 + int(i * period_ns) - now_ns()
        if gap > 0:
            time.sleep(max(gap, TICK_NS) / 1e9)
    t_sent = now_ns()
    remaining = p.flush(a.timeout)
    lags = sorted(lag_ns)
    res = {"records": n, "rate": a.rate,
           "achieved_rate": round(n / max(t_sent - t0, 1) * 1e9, 1),
           "send_s": round((t_sent - t0) / 1e9, 3),
           "schedule_lag_p99_ms": round(percentile(lags, 99) / 1e6, 3) if lags else None,
           "schedule_lag_max_ms": round(lags[-1] / 1e6, 3) if lags else None,
           "errors": errors.count}
    return errors.verdict(res, remaining, n, a.timeout)


def latency_timeline(seqs, latencies_ns, rate: float, first_seq: int) -> list[dict]:
    """Per second of the producer's schedule (record i is due at i / rate s),
    from the window's first record on: p99 and max latency in ms of the
    records due in that second. A tail that comes from one stall shows as
    one bad second; steady queueing as many."""
    buckets: dict[int, list[int]] = {}
    for seq, ns in zip(seqs, latencies_ns):
        buckets.setdefault(int((seq - first_seq) / rate), []).append(ns)
    out = []
    for second in sorted(buckets):
        values = sorted(buckets[second])
        out.append({"s": second, "count": len(values), "p99_ms": round(percentile(values, 99) / 1e6, 1),
                    "max_ms": round(values[-1] / 1e6, 1)})
    return out


# ------------------------------------------------------------------ consume
def phase_consume(a) -> dict:
    from confluent_kafka import Consumer, KafkaError

    lo, n = window_bounds(a.rate, a.warmup_s, a.window_s)
    hi = n
    assigned = []
    c = Consumer(base_conf(a) | {
        "group.id": f"raykafka-bench-latency-{os.getpid()}-{time.time_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([a.topic], on_assign=lambda _c, parts: assigned.extend(parts))
    seen = bytearray(n)
    latencies = array("q")
    latency_seqs = array("q")  # the sequence number of each latency, for the timeline
    got = dup = foreign = nbytes = 0
    now_ns, unpack = time.monotonic_ns, STAMP.unpack_from
    t_start = now_ns()
    t_assigned = None
    last_progress = None
    try:
        consume, poll = c.consume, c.poll
        while got < n:
            # consume() with a timeout waits until it has num_messages: the
            # first record would wait for the last. Take what is queued now,
            # and when nothing is, block for the next single record.
            msgs = consume(num_messages=500, timeout=0)
            if not msgs:
                m = poll(0.05)
                msgs = [m] if m is not None else msgs
            now = now_ns()
            if t_assigned is None and assigned:
                t_assigned = now
                # The harness starts the producer only after this file exists.
                with open(a.ready_file, "w") as f:
                    f.write(f"{len(assigned)}\n")
            if not msgs:
                if t_assigned is None and now - t_start > a.join_timeout * 1e9:
                    return {"ok": False, "error": f"no partition assigned {a.join_timeout:.0f}s "
                            f"after subscribe (group join did not finish)"}
                since = last_progress or t_assigned
                if since is not None and now - since > a.idle_timeout * 1e9:
                    break
                continue
            last_progress = now
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    return {"ok": False, "error": f"consume error: {err}", "consumed": got}
                value = m.value()
                try:
                    seq = int(m.key())
                    if not 0 <= seq < n:
                        raise ValueError(seq)
                except (TypeError, ValueError):
                    foreign += 1
                    continue
                if seen[seq]:
                    dup += 1
                    continue
                seen[seq] = 1
                got += 1
                nbytes += len(value)
                if seq >= lo:
                    latencies.append(now - unpack(value)[0])
                    latency_seqs.append(seq)
        log_start = None
        if got < n and assigned:
            # Did the broker delete records before they were read (the mock
            # keeps 5 MiB per partition)? The harness needs to know why.
            try:
                log_start = sum(c.get_watermark_offsets(tp, timeout=10)[0] for tp in assigned)
            except Exception as e:  # report what we have; the run is FAIL anyway
                print(f"watermarks after the run: {e}", file=sys.stderr)
    finally:
        c.close()
    res = {"records": got, "expected": n, "duplicates": dup, "foreign": foreign,
           "log_start_offsets": log_start,
           "partitions": len(assigned),
           "join_s": round((t_assigned - t_start) / 1e9, 2) if t_assigned else None,
           "window": {"first_seq": lo, "end_seq": hi},
           "latency": latency_summary(latencies),
           "timeline": latency_timeline(latency_seqs, latencies, a.rate, lo)}
    if got != n or dup or foreign:
        stalled = f" (no record for {a.idle_timeout:.0f}s)" if got < n else ""
        res.update(ok=False, error=f"received {got}/{n} distinct records{stalled}, "
                   f"{n - got} missing, {dup} duplicates, {foreign} with a foreign key")
    elif nbytes != n * a.record_size:
        res.update(ok=False, error=f"received {nbytes} value bytes, expected "
                   f"{n * a.record_size}")
    elif len(latencies) != hi - lo:
        res.update(ok=False, error=f"{len(latencies)} latencies in the window, "
                   f"expected {hi - lo}")
    else:
        res["ok"] = True
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.latency")
    ap.add_argument("phase", choices=["produce", "consume"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=float, required=True, help="records/s offered")
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--window-s", type=float, default=15.0)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--linger-ms", type=float, default=5.0)
    ap.add_argument("--partition", type=int, default=-1,
                    help="produce: send every record to this partition (-1: by key hash)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="produce: message.timeout.ms in seconds and the final flush's limit")
    ap.add_argument("--ready-file", help="consume: written once partitions are assigned")
    ap.add_argument("--join-timeout", type=float, default=90.0,
                    help="consume: FAIL if no partition is assigned this long after subscribe")
    ap.add_argument("--idle-timeout", type=float, default=30.0,
                    help="consume: FAIL after this long without a new record")
    a = ap.parse_args(argv)
    if a.rate <= 0 or a.record_size < STAMP.size:
        ap.error("--rate must be positive and --record-size at least 8")
    if a.phase == "consume" and not a.ready_file:
        ap.error("consume needs --ready-file")
    return run_main({"produce": phase_produce, "consume": phase_consume}, a,
                    "latency-" + a.phase)


if __name__ == "__main__":
    sys.exit(main())
