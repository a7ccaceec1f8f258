"""How long a broker takes to make N partitions ready (issue 18, part 2).

Starts a fresh single-node broker (tests/broker_process.py), creates either
one N-partition topic or N one-partition topics with confluent-kafka's
AdminClient, and times from the CreateTopics call until Metadata shows a
leader for every partition. The broker's own start is not timed.

    .venv/bin/python -m bench.creation --partitions 100 [--topics] [--override k=v ...]

Prints one JSON line with the figures (and the per-phase split: CreateTopics
answered, all leaders in Metadata).

Figures, 2-core / 24 GiB VM shared with other sessions' benchmarks (load
average 25-85 during the runs), one 100-partition topic, RF 1:

- before (22029ea): CreateTopics failed after 30 s: the LeaderAndIsr that
  creates the replicas timed out (its wait covered the actors' start), and
  the timeout's log line raised IndexError, so no UpdateMetadata was sent and
  Metadata never showed the leaders; Ray itself took ~78 s to start the 100
  replica processes.
- after (ACTOR_START_BUDGET_S in cluster/controller/broker_requests.py): answered without
  error with every leader in Metadata in 60.0 s, 62.0 s and 68.1 s (load 85,
  25 and 7 at the start); 1.16-1.23 CPU-s of the broker's process tree per
  replica. 100 one-partition topics in one request (--topics): 79.5 s,
  1.30 CPU-s each. The partition state znodes are now written concurrently
  off the controller's loop (100: 0.51 s serial -> 0.24 s), a small share.
- the same with the worker setup hook passed to the raylet as the
  environment variable Ray reads it from (`__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR`)
  instead of a job runtime_env (cli/main.py, not changed here): 36.0 s,
  0.67 CPU-s per replica. Any non-empty runtime_env makes the raylet start
  every worker through setup_worker.py (a second Python start that imports
  Ray) and the runtime-env agent: 30 trivial actors took 0.83-0.94 CPU-s
  each that way and 0.40-0.44 CPU-s with the environment variable (the hook
  ran in 30/30 both ways).

Replica actors start as many at a time as the node has cores (the raylet's
maximum_startup_concurrency), all of a topic's at once; the floor is the
CPU: 100 x ~0.67 CPU-s / 2 cores is ~34 s, so 100 partitions in 15 s on
2 cores needs fewer processes than one per replica.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess


def leaders_ready(admin: AdminClient, names: list[str]) -> int:
    """Partitions of `names` that have a leader now."""
    md = admin.list_topics(timeout=30)
    ready = 0
    for name in names:
        topic = md.topics.get(name)
        if topic is None or topic.error is not None:
            continue
        ready += sum(1 for p in topic.partitions.values() if p.leader >= 0 and p.error is None)
    return ready


def run(partitions: int, as_topics: bool, overrides: dict[str, str]) -> dict:
    data = Path(tempfile.mkdtemp(prefix="rk-bench-creation-"))
    broker = BrokerProcess(data / "data", overrides=overrides).start()
    try:
        # librdkafka caps a request's wait at socket.timeout.ms (60 s by default).
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 300000})
        if as_topics:
            new = [NewTopic(f"c-{i}", num_partitions=1, replication_factor=1) for i in range(partitions)]
        else:
            new = [NewTopic("c-all", num_partitions=partitions, replication_factor=1)]
        names = [t.topic for t in new]
        cpu0 = broker.cpu_seconds()
        t0 = time.monotonic()
        futures = admin.create_topics(new, request_timeout=300, operation_timeout=280)
        errors = {}
        for name, f in futures.items():
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001 - reported, not hidden
                errors[name] = str(exc)
        answered = time.monotonic() - t0
        while leaders_ready(admin, names) < partitions - len(errors):
            if time.monotonic() - t0 > 600:
                break
            time.sleep(0.2)
        ready = time.monotonic() - t0
        return {"partitions": partitions, "mode": "topics" if as_topics else "one topic",
                "create_answered_s": round(answered, 2), "all_leaders_s": round(ready, 2),
                "broker_cpu_s": round(broker.cpu_seconds() - cpu0, 1), "errors": len(errors),
                "first_error": next(iter(errors.values()), None), "overrides": overrides}
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--topics", action="store_true", help="N one-partition topics instead of one topic")
    parser.add_argument("--override", action="append", default=[], help="broker config key=value")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.override)
    print(json.dumps(run(args.partitions, args.topics, overrides)))


if __name__ == "__main__":
    main()
