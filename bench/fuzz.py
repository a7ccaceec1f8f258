"""A long protocol-fuzz campaign against a real broker (the suite runs a
CI-sized one: tests/integration/test_protocol_fuzz.py).

    .venv/bin/python -m bench.fuzz --inputs 1000000            # starts its own broker
    .venv/bin/python -m bench.fuzz --bootstrap 127.0.0.1:9092  # an existing one (pid checks off)

Inputs come in rounds of --round inputs, each round seeded from --seed. After
every round the edge's pid and RSS are read: a changed pid is a crash even if
a supervisor replaced the edge in between, and RSS growth is reported per
100,000 inputs. Prints a markdown table and exits non-zero on any crash or hang.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.protocol_fuzz import Campaign, CampaignResult, generate_inputs, served_versions  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--round", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--bootstrap", help="fuzz a running broker instead of starting one")
    args = parser.parse_args(argv)

    broker = None
    if args.bootstrap:
        host, port = args.bootstrap.rsplit(":", 1)
        edge_pid = None
    else:
        data = Path(tempfile.mkdtemp(prefix="rk-fuzz-")) / "data"
        broker = BrokerProcess(data, log_name="fuzz-broker.log",
                               overrides={"auto.create.topics.enable": "false", "offsets.topic.num.partitions": "1",
                                          "num.partitions": "1"}).start()
        host, port = broker.host, int(broker.port)
        edge_pid = broker.nodes()[0]["edge_pid"]
        print(f"broker on {host}:{port}, edge pid {edge_pid}, log {broker.log_path}", flush=True)
    versions = served_versions()
    total = CampaignResult()
    crashes_by_pid = 0
    rows = []
    first_rss = rss = _rss_mib(edge_pid)
    first_inputs = 0
    started = time.monotonic()
    try:
        sent = 0
        round_index = 0
        while sent < args.inputs:
            count = min(args.round, args.inputs - sent)
            before = total.inputs
            Campaign(host, int(port)).run(generate_inputs(args.seed + round_index, count, versions), total)
            sent += total.inputs - before
            if edge_pid is not None:
                current = broker.nodes()[0]["edge_pid"]
                if current != edge_pid or not psutil.pid_exists(edge_pid):
                    crashes_by_pid += 1
                    edge_pid = current
            rss = _rss_mib(edge_pid)
            if round_index == 0:
                # The first round imports kio's schema modules for every API
                # version and fills the codec's caches: growth counts from here.
                first_rss, first_inputs = rss, total.inputs
            rows.append((sent, total.answered, total.closed, total.unanswered, total.crashes + crashes_by_pid,
                         total.hangs, rss, time.monotonic() - started))
            print(f"{sent} inputs: answered {total.answered} closed {total.closed} unanswered {total.unanswered} "
                  f"crashes {total.crashes + crashes_by_pid} hangs {total.hangs} edge RSS {rss:.1f} MiB "
                  f"({sent / (time.monotonic() - started):.0f} inputs/s)", flush=True)
            round_index += 1
    finally:
        if broker is not None:
            broker.stop()
    seconds = time.monotonic() - started
    crashes = total.crashes + crashes_by_pid
    print()
    print("| inputs | answered | closed | no answer in 0.5 s | crashes | hangs | edge RSS MiB | s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sent, answered, closed, unanswered, crash, hangs, rss_row, at in rows:
        print(f"| {sent} | {answered} | {closed} | {unanswered} | {crash} | {hangs} | {rss_row:.1f} | {at:.0f} |")
    if first_rss is not None and rss is not None and total.inputs > first_inputs:
        growth = (rss - first_rss) / (total.inputs - first_inputs) * 100_000
        print(f"\nedge RSS after the first round {first_rss:.1f} -> {rss:.1f} MiB at the end: "
              f"{growth:+.2f} MiB per 100k inputs")
    print(f"{total.inputs} inputs in {seconds:.0f} s ({total.inputs / seconds:.0f}/s), "
          f"{crashes} crashes, {total.hangs} hangs, by mutation: {dict(sorted(total.by_mutation.items()))}")
    return 1 if crashes or total.hangs else 0


def _rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.NoSuchProcess:
        return None


if __name__ == "__main__":
    sys.exit(main())
