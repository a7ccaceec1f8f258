"""How long a broker takes to make N partitions ready (issue 18, part 2).

Starts a fresh single-node broker (tests/broker_process.py), creates either
one N-partition topic or N one-partition topics with confluent-kafka's
AdminClient, and times from the CreateTopics call until Metadata shows a
leader for every partition. The broker's own start is not timed.

    .venv/bin/python -m bench.creation --partitions 100 [--topics] [--override k=v ...]

Prints one JSON line with the figures (and the per-phase split: CreateTopics
answered, all leaders in Metadata).
"""
from __future__ import annotations

import argparse
import json
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
