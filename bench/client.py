"""One phase of the benchmark workload, run in its own process by bench.run.

    python -m bench.client create  --bootstrap H:P --topic T --partitions P
    python -m bench.client produce --bootstrap H:P --topic T --records N ...
    python -m bench.client consume --bootstrap H:P --topic T --records N ...
    python -m bench.client delete  --bootstrap H:P --topic T
    python -m bench.client warmup  --bootstrap H:P --topic T

Each phase prints exactly one JSON object on the last line of stdout (the
harness parses that line); diagnostics go to stderr. A phase that cannot
account for every record reports ``"ok": false`` with an ``error``; the
harness turns that into FAIL, never into a throughput figure.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from bench.procstat import CpuWindow

POOL_SIZE = 256  # distinct payloads cycled through by the producer


def make_payloads(record_size: int, seed: int = 42) -> list[bytes]:
    """A fixed pool of values: first half os.urandom, second half a repeated
    short pattern. lz4 then compresses a batch to roughly half its size,
    which is realistic for JSON/log-like traffic and not a trivial 100x."""
    rnd = random.Random(seed)
    pool = []
    half = record_size // 2
    for _ in range(POOL_SIZE):
        pattern = bytes(rnd.randrange(32, 127) for _ in range(16))
        rep = (pattern * (record_size // 16 + 1))[: record_size - half]
        pool.append(os.urandom(half) + rep)
    return pool


def lz4_ratio(pool: list[bytes]) -> float | None:
    """Compressed/raw size of the pool as one lz4 frame (roughly what a batch
    gets); None if the lz4 module is not available."""
    try:
        import lz4.frame
    except ImportError:
        return None
    raw = b"".join(pool)
    return round(len(lz4.frame.compress(raw)) / len(raw), 3)


def emit(result: dict) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def base_conf(a) -> dict:
    return {"bootstrap.servers": a.bootstrap, "client.id": "raykafka-bench"}


def batching_conf(a, acks, linger_ms: float = 5) -> dict:
    """The producer settings every bench workload shares: lz4, linger.ms,
    batch.size=1000000, errors-only delivery reports, a.timeout as
    message.timeout.ms."""
    return base_conf(a) | {
        "acks": acks,
        "compression.type": "lz4",
        "linger.ms": linger_ms,
        "batch.size": 1000000,
        # No Python callback per record in the hot path: flush() returning 0
        # means every record got a delivery report, and with this setting
        # every failed one reaches on_delivery (DeliveryErrors).
        "delivery.report.only.error": True,
        # A broker that stops answering turns into delivery errors (FAIL)
        # after this long instead of librdkafka's default 5 minutes.
        "message.timeout.ms": int(a.timeout * 1000),
    }


class DeliveryErrors:
    """A producer's on_delivery callback: counts the failed deliveries and
    keeps the first one's error."""

    def __init__(self):
        self.count = 0
        self.first: str | None = None

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.count += 1
            if self.first is None:
                self.first = str(err)

    def verdict(self, res: dict, remaining: int, n: int, timeout: float) -> dict:
        """res marked ok, or not ok with why: records flush() left
        undelivered, or records that failed delivery."""
        if remaining:
            res.update(ok=False, error=f"{remaining} records still undelivered after "
                       f"flush({timeout:.0f}s)")
        elif self.count:
            res.update(ok=False, error=f"{self.count}/{n} records failed delivery "
                       f"(first: {self.first})")
        else:
            res["ok"] = True
        return res


def partitions_seen(client, topic: str) -> int | None:
    """Partitions of `topic` in a Metadata response, None if unknown. Called
    before the clock starts, it also connects (the same for every target);
    with auto-create this request may create the topic."""
    try:
        tmd = client.list_topics(topic, timeout=30).topics.get(topic)
    except KafkaException as e:
        print(f"metadata before produce failed: {e}", file=sys.stderr)
        return None
    return len(tmd.partitions) if tmd and not tmd.error else None


def produce_keyed(p: Producer, topic: str, pool: list[bytes], keys: list[bytes],
                  part: int, start: int, stop: int) -> None:
    """produce() records start..stop-1: record i has key keys[i] and value
    pool[i % POOL_SIZE]. part -1 lets librdkafka's partitioner hash the key;
    >= 0 sends every record to that partition."""
    produce, poll = p.produce, p.poll
    mask = POOL_SIZE - 1
    for i in range(start, stop):
        try:
            produce(topic, pool[i & mask], keys[i], part)
        except BufferError:  # local queue full: let deliveries drain
            while True:
                poll(0.005)
                try:
                    produce(topic, pool[i & mask], keys[i], part)
                    break
                except BufferError:
                    pass
        if not i & 1023:
            poll(0)


def run_main(phases: dict, a, label: str) -> int:
    """Run phase a.phase, print its result as the last stdout line (named
    `label`); exit status 0 only if it is ok."""
    try:
        res = phases[a.phase](a)
    except Exception as e:  # report, never crash without a result line
        res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    res["phase"] = label
    emit(res)
    return 0 if res.get("ok") else 1


# --------------------------------------------------------------------------
def phase_create(a) -> dict:
    admin = AdminClient(base_conf(a))
    md = admin.list_topics(timeout=30)
    if md.controller_id not in md.brokers:
        # e.g. librdkafka's mock cluster: controller id 0, broker id 1 and no
        # CreateTopics API; the AdminClient would only time out. A producer's
        # Metadata request auto-creates the topic instead (with the broker's
        # default partition count), before any clock starts.
        res = {"ok": True, "created": False, "note":
               f"CreateTopics impossible (metadata names controller "
               f"{md.controller_id}, brokers are {sorted(md.brokers)}); "
               f"auto-created by a Metadata request instead"}
        tmd = Producer(base_conf(a)).list_topics(a.topic, timeout=30).topics.get(a.topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            res.update(ok=False, error=f"auto-create of {a.topic} failed "
                       f"({tmd.error if tmd else 'absent from metadata'})")
        else:
            res["partitions"] = len(tmd.partitions)
        return res
    fut = admin.create_topics(
        [NewTopic(a.topic, num_partitions=a.partitions, replication_factor=1)],
        operation_timeout=30, request_timeout=30,
    )[a.topic]
    try:
        fut.result(timeout=45)
        created, note = True, None
    except Exception as e:  # KafkaException, timeout, unsupported API...
        created = False
        note = f"CreateTopics failed ({e}); falling back to auto-create on first produce"
    res = {"ok": True, "created": created, "note": note}
    if created:
        # A broker may answer CreateTopics before every partition has a
        # leader; waiting here keeps leader start-up out of the timed window.
        waited = wait_for_leaders(admin, a.topic, a.partitions, a.timeout)
        if waited is None:
            res.update(ok=False, error=f"topic {a.topic}: not all {a.partitions} "
                       f"partitions had a leader {a.timeout:.0f}s after CreateTopics")
        else:
            res["leaders_after_s"] = round(waited, 3)
    return res


def wait_for_leaders(admin: AdminClient, topic: str, partitions: int,
                     timeout: float) -> float | None:
    """Seconds until Metadata shows `partitions` partitions of `topic`, each
    with a leader; None if that did not happen within `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            tmd = admin.list_topics(topic, timeout=10).topics.get(topic)
        except KafkaException:
            tmd = None
        if tmd is not None and tmd.error is None and len(tmd.partitions) == partitions \
                and all(p.leader >= 0 and p.error is None for p in tmd.partitions.values()):
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def phase_warmup(a) -> dict:
    """Ask the group coordinator for a group's committed offset (no topic
    needs to exist): whatever the broker sets up for the first group it
    sees happens now, not inside a timed consume."""
    c = Consumer(base_conf(a) | {"group.id": f"raykafka-bench-warmup-{os.getpid()}",
                                 "enable.auto.commit": False})
    t0 = time.monotonic()
    try:
        c.committed([TopicPartition(a.topic, 0)], timeout=a.timeout)
    except KafkaException as e:
        return {"ok": False, "error": f"OffsetFetch failed: {e}"}
    finally:
        c.close()
    return {"ok": True, "coordinator_s": round(time.monotonic() - t0, 3)}


def phase_delete(a) -> dict:
    """Delete the topic so a long run does not pile up partitions (for
    raykafka: one replica actor each) and in-memory logs (Tansu)."""
    admin = AdminClient(base_conf(a))
    fut = admin.delete_topics([a.topic], operation_timeout=30, request_timeout=30)[a.topic]
    try:
        fut.result(timeout=45)
    except Exception as e:
        return {"ok": False, "error": f"DeleteTopics failed: {e!r}"}
    return {"ok": True}


# --------------------------------------------------------------------------
def make_keys(n: int) -> list[bytes]:
    """Key of record i: its sequence number, zero-padded ASCII. Distinct keys
    spread records over the partitions by hash and let the consumer prove
    that every record arrived exactly once (built before the clock starts)."""
    return [b"%010d" % i for i in range(n)]


def phase_produce(a) -> dict:
    pool = make_payloads(a.record_size)
    keys = make_keys(a.records)
    errors = DeliveryErrors()
    p = Producer(batching_conf(a, a.acks) | {"on_delivery": errors})
    seen = partitions_seen(p, a.topic)
    n = a.records
    # a.partition is passed on every call (-1: by key hash; the mock cannot
    # create a one-partition topic), so the loop is the same for all.
    cpu = CpuWindow(a.broker_pid).start()
    t0 = time.perf_counter()
    produce_keyed(p, a.topic, pool, keys, a.partition, 0, n)
    remaining = p.flush(a.timeout)
    t1 = time.perf_counter()
    cpu = cpu.stop()

    res = {
        "elapsed_s": t1 - t0,
        "records": n,
        "bytes": n * a.record_size,
        "errors": errors.count,
        "partitions_seen": seen,
        "lz4_pool_ratio": lz4_ratio(pool),
        "cpu": cpu,
    }
    return errors.verdict(res, remaining, n, a.timeout)


# --------------------------------------------------------------------------
def fetch_totals(stats_json: str | None) -> dict | None:
    """Fetch requests, responses and bytes so far, summed over the brokers of
    a librdkafka statistics document (its per-broker ``req.Fetch``, ``rx``,
    ``rxbytes``, ``rxpartial``): how the consumer's bytes arrived, so a slow
    round can be told apart as more and smaller fetches or as slower ones."""
    if not stats_json:
        return None
    brokers = json.loads(stats_json).get("brokers", {}).values()
    real = [b for b in brokers if b.get("nodeid", -1) >= 0]
    return {"fetch_requests": sum(b.get("req", {}).get("Fetch", 0) for b in real),
            "responses": sum(b.get("rx", 0) for b in real),
            "rx_bytes": sum(b.get("rxbytes", 0) for b in real),
            "partial_message_sets": sum(b.get("rxpartial", 0) for b in real)}


def consumer_conf(a, group_prefix: str, last_stats: list) -> dict:
    """A consumer of a fresh group that reads from the beginning and keeps
    its latest statistics document in last_stats[0]."""
    return base_conf(a) | {
        "group.id": f"{group_prefix}-{os.getpid()}-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # librdkafka stops fetching for fetch.queue.backoff.ms (default 1 s)
        # whenever its local queue passes queued.max.messages.kbytes (64 MiB),
        # which happens when a broker delivers faster than this loop drains:
        # a whole second of a ~1 s phase spent idle. 10 ms keeps the client
        # fetching as soon as there is room (every target gets the same).
        "fetch.queue.backoff.ms": 10,
        # Statistics (fetch counts) come with consume() calls, at most every 500 ms.
        "statistics.interval.ms": 500,
        "stats_cb": lambda doc: last_stats.__setitem__(0, doc),
    }


def topic_partitions(c: Consumer, topic: str) -> tuple[list[int], dict | None]:
    """The sorted partition ids of `topic` from Metadata, or no ids and a
    failed result saying why."""
    tmd = c.list_topics(topic, timeout=30).topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        return [], {"ok": False, "error": f"topic {topic} not found in metadata "
                    f"({tmd.error if tmd else 'absent'})"}
    return sorted(tmd.partitions), None


def watermark_totals(c: Consumer, topic: str, parts: list[int]) -> tuple[int, int]:
    """(records the broker says it holds, sum of the log start offsets) over
    `parts`, by ListOffsets."""
    held = start = 0
    for pid in parts:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, pid), timeout=30)
        held += hi - lo
        start += lo
    return held, start


@dataclass
class KeyedRead:
    """What a timed read of records keyed by sequence number (0..n-1) saw."""
    got: int = 0  # records received
    nbytes: int = 0  # their value bytes
    bad_key: int = 0  # records whose key is no sequence number below n
    distinct: int = 0  # sequence numbers received at least once
    elapsed_s: float = 0.0  # until the last record arrived
    cpu: dict | None = None
    fetches: dict | None = None  # fetch_totals of the last statistics
    # High watermarks (read_committed: last stable offsets) the fetches
    # reported, summed; None if a partition reported none.
    end_offsets: int | None = None
    error: str | None = None  # a consume error that ended the read


def read_keyed(c: Consumer, topic: str, parts: list[int], n: int, expect: int,
               idle_timeout: float, broker_pid: int, last_stats: list) -> KeyedRead:
    """Assign `parts` from the beginning and read until `expect` records
    arrived or none came for idle_timeout seconds, timed."""
    r = KeyedRead()
    got = nbytes = bad_key = 0
    seen = bytearray(n)  # seen[seq] = 1 once record seq has arrived
    last_progress = time.perf_counter()
    consume = c.consume
    cpu = CpuWindow(broker_pid).start()
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, pid, OFFSET_BEGINNING) for pid in parts])
    while got < expect:
        # consume() returns only once it has num_messages or the timeout
        # passed: never ask for more than are still to come, or the last
        # call idles out its full second inside the timed window.
        msgs = consume(num_messages=min(10000, expect - got), timeout=1.0)
        now = time.perf_counter()
        if not msgs:
            if now - last_progress > idle_timeout:
                break
            continue
        last_progress = now
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                r.got, r.error = got, f"consume error: {err}"
                return r
            got += 1
            nbytes += len(m.value())
            try:
                seen[int(m.key())] = 1
            except (IndexError, TypeError, ValueError):
                bad_key += 1
    r.elapsed_s = last_progress - t0  # until the last record arrived
    r.cpu = cpu.stop()
    # The stats document may be up to 500 ms old; one more short consume
    # lets the latest one through (outside the timed window).
    consume(num_messages=1, timeout=0.6)
    r.fetches = fetch_totals(last_stats[0])
    r.got, r.nbytes, r.bad_key, r.distinct = got, nbytes, bad_key, n - seen.count(0)
    end = 0
    for pid in parts:
        _, hi = c.get_watermark_offsets(TopicPartition(topic, pid), cached=True)
        end = None if end is None or hi < 0 else end + hi
    r.end_offsets = end
    return r


def phase_consume(a) -> dict:
    last_stats: list[str | None] = [None]
    c = Consumer(consumer_conf(a, "raykafka-bench", last_stats))
    try:
        parts, failed = topic_partitions(c, a.topic)
        if failed:
            return failed
        # How many records does the broker say the topic holds?
        held, start = watermark_totals(c, a.topic, parts)
        n = a.records
        # Records this consumer must see: all n, unless the broker already
        # deleted the oldest ones (below).
        expect = n
        if start > 0 and not a.tolerate_retention:
            # The topic is fresh: a log start offset above 0 means the broker
            # already deleted records (e.g. the librdkafka mock keeps at most
            # 5 MiB / 100000 batches per partition, hard-coded). Fail now
            # instead of waiting idle_timeout for records that are gone.
            return {"ok": False, "partitions": len(parts),
                    "list_offsets_records": held, "log_start_offsets": start,
                    "error": f"broker deleted records before they were read: "
                             f"log start offsets sum to {start}, it holds {held} "
                             f"of {n} (retention limit; use fewer --records)"}
        if start > 0:
            # --tolerate-retention (the mock only): check the tail it kept,
            # exactly once, and that its high watermarks still count all n.
            expect = held
        r = read_keyed(c, a.topic, parts, n, expect, a.idle_timeout, a.broker_pid, last_stats)
        if r.error:
            return {"ok": False, "error": r.error, "consumed": r.got}
        got, distinct, nbytes, bad_seq = r.got, r.distinct, r.nbytes, r.bad_key
        # High watermarks seen in Fetch responses (what the broker really holds)
        fetched_hwm = r.end_offsets
        res = {
            "elapsed_s": r.elapsed_s,
            "records": got,
            "distinct_records": distinct,
            "bytes": nbytes,
            "partitions": len(parts),
            "list_offsets_records": held,
            "fetch_high_watermark_records": fetched_hwm,
            "cpu": r.cpu,
            "fetches": r.fetches,
            "warnings": [],
        }
        if start > 0:
            res.update(retention_deleted_records=start, kept_records=held)
            res["warnings"].append(
                f"broker had deleted the oldest {start} of {n} records (retention); "
                f"verified the {held} it kept")
        if got != expect or distinct != expect:
            stalled = f" (no record for {a.idle_timeout:.0f}s)" if got < expect else ""
            kept = f" (of the {expect} the broker kept)" if expect != n else ""
            res.update(ok=False, error=f"consumed {got}/{expect} records{kept}{stalled}: "
                       f"{distinct} distinct, {expect - distinct} missing, "
                       f"{got - distinct - bad_seq} duplicates, {bad_seq} with a "
                       f"foreign key")
        elif nbytes != expect * a.record_size:
            res.update(ok=False, error=f"consumed {nbytes} value bytes, expected "
                       f"{expect * a.record_size}")
        elif fetched_hwm is not None and fetched_hwm != n:
            res.update(ok=False, error=f"all {expect} records consumed, but Fetch "
                       f"high watermarks sum to {fetched_hwm}, not {n}")
        else:
            res["ok"] = True
        if held != n and start == 0:
            res["warnings"].append(
                f"ListOffsets(latest) before consuming summed to {held} records, "
                f"expected {n} (broker reports stale/incorrect high watermarks)")
        return res
    finally:
        c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.client")
    ap.add_argument("phase", choices=["create", "produce", "consume", "delete", "warmup"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="produce: message.timeout.ms in seconds, and the max wait "
                         "for the final flush")
    ap.add_argument("--broker-pid", type=int, default=0,
                    help="root pid of the broker's process tree, for CPU accounting")
    ap.add_argument("--idle-timeout", type=float, default=30.0,
                    help="consume: give up after this many seconds without a record")
    ap.add_argument("--partition", type=int, default=-1,
                    help="produce: send every record to this partition (-1: by key hash)")
    ap.add_argument("--tolerate-retention", action="store_true",
                    help="consume: if the broker already deleted the oldest records "
                         "(log start offset > 0), verify the ones it kept instead of "
                         "failing (for librdkafka's mock, which keeps 5 MiB per partition)")
    a = ap.parse_args(argv)
    return run_main({"create": phase_create, "produce": phase_produce,
                     "consume": phase_consume, "delete": phase_delete,
                     "warmup": phase_warmup}, a, a.phase)


if __name__ == "__main__":
    sys.exit(main())
