"""A long protocol-fuzz campaign against a real broker (the suite runs a
CI-sized one: tests/integration/test_protocol_fuzz.py).

    .venv/bin/python -m bench.fuzz --inputs 1000000            # starts its own broker
    .venv/bin/python -m bench.fuzz --bootstrap 127.0.0.1:9092  # an existing one (pid checks off)

Inputs come in rounds of --round inputs, each round seeded from --seed. After
every round the edge's pid and the RSS of each broker process that holds
state clients can reach (edge, controller, purgatory, group coordinator:
tests/protocol_fuzz.role_processes), each on its own, are read: a changed
edge pid is a crash even if a supervisor replaced the edge in between, and
RSS growth after the first round (the warm-up) is reported per 100,000
inputs and extrapolated to 1,000,000. Prints a markdown table and exits
non-zero on any crash or hang, or (with --max-growth-mib) when the edge or
the controller grows past it, extrapolated to 1,000,000 inputs.
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
from tests.protocol_fuzz import (Campaign, CampaignResult, generate_inputs, role_processes, rss_mib,  # noqa: E402
                                 served_versions)

CHECKED_ROLES = ("edge", "controller")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--round", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--bootstrap", help="fuzz a running broker instead of starting one")
    parser.add_argument("--max-growth-mib", type=float, default=None,
                        help="fail when the edge or the controller grows more than this per 1,000,000 inputs "
                             "after the first round (issue 28: 50)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for the broker it starts (repeatable), e.g. to compare "
                             "raykafka.metrics.enabled=false side by side")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for the broker it starts (repeatable), e.g. "
                             "RAY_enable_open_telemetry=1 to compare Ray's two metrics paths")
    parser.add_argument("--tracemalloc", metavar="DIR",
                        help="the edge and the controller write tracemalloc reports to DIR (core/memory_trace.py): "
                             "Python heap growth by allocation site, and how much of the RSS growth it explains")
    args = parser.parse_args(argv)

    broker = None
    processes: dict = {}
    if args.bootstrap:
        host, port = args.bootstrap.rsplit(":", 1)
        edge_pid = None
    else:
        data = Path(tempfile.mkdtemp(prefix="rk-fuzz-")) / "data"
        broker = BrokerProcess(data, log_name="fuzz-broker.log",
                               overrides={"auto.create.topics.enable": "false", "offsets.topic.num.partitions": "1",
                                          "num.partitions": "1",
                                          **dict(o.split("=", 1) for o in args.override)},
                               env_changes={**dict(e.split("=", 1) for e in args.env),
                                            **({"RAYKAFKA_TRACEMALLOC_DIR": str(Path(args.tracemalloc).resolve())}
                                               if args.tracemalloc else {})}).start()
        host, port = broker.host, int(broker.port)
        edge_pid = broker.nodes()[0]["edge_pid"]
        processes = role_processes(broker)
        print(f"broker on {host}:{port}, processes { {r: p.pid for r, p in processes.items()} }, "
              f"log {broker.log_path}", flush=True)
    versions = served_versions()
    total = CampaignResult()
    crashes_by_pid = 0
    rows = []
    first_rss = rss = rss_mib(processes)
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
                    processes = role_processes(broker)
            rss = rss_mib(processes)
            if round_index == 0:
                # The first round imports kio's schema modules for every API
                # version and fills the codec's caches: growth counts from here.
                first_rss, first_inputs = rss, total.inputs
            rows.append((sent, total.answered, total.closed, total.unanswered, total.crashes + crashes_by_pid,
                         total.hangs, rss, time.monotonic() - started))
            shown = " ".join(f"{role} {value:.1f}" for role, value in rss.items() if value is not None)
            print(f"{sent} inputs: answered {total.answered} closed {total.closed} unanswered {total.unanswered} "
                  f"crashes {total.crashes + crashes_by_pid} hangs {total.hangs} RSS MiB: {shown} "
                  f"({sent / (time.monotonic() - started):.0f} inputs/s)", flush=True)
            round_index += 1
    finally:
        if broker is not None:
            broker.stop()
    seconds = time.monotonic() - started
    crashes = total.crashes + crashes_by_pid
    roles = list(first_rss)
    print()
    print("| inputs | answered | closed | no answer in 0.5 s | crashes | hangs | "
          + " | ".join(f"{r} RSS MiB" for r in roles) + " | s |")
    print("|---:|---:|---:|---:|---:|---:|" + "---:|" * len(roles) + "---:|")
    for sent, answered, closed, unanswered, crash, hangs, rss_row, at in rows:
        cells = " | ".join("-" if rss_row.get(r) is None else f"{rss_row[r]:.1f}" for r in roles)
        print(f"| {sent} | {answered} | {closed} | {unanswered} | {crash} | {hangs} | {cells} | {at:.0f} |")
    too_much = []
    if total.inputs > first_inputs:
        print()
        for role in roles:
            if first_rss.get(role) is None or rss.get(role) is None:
                continue
            per_100k = (rss[role] - first_rss[role]) / (total.inputs - first_inputs) * 100_000
            print(f"{role} RSS after the first round {first_rss[role]:.1f} -> {rss[role]:.1f} MiB at the end: "
                  f"{per_100k:+.2f} MiB per 100k inputs, {per_100k * 10:+.1f} MiB per 1M "
                  f"({'measured' if total.inputs - first_inputs >= 900_000 else 'extrapolated'})")
            if args.max_growth_mib is not None and role in CHECKED_ROLES and per_100k * 10 > args.max_growth_mib:
                too_much.append(role)
    print(f"{total.inputs} inputs in {seconds:.0f} s ({total.inputs / seconds:.0f}/s), "
          f"{crashes} crashes, {total.hangs} hangs, by mutation: {dict(sorted(total.by_mutation.items()))}")
    if too_much:
        print(f"grew past {args.max_growth_mib} MiB per 1M inputs: {', '.join(too_much)}")
    return 1 if crashes or total.hangs or too_much else 0


if __name__ == "__main__":
    sys.exit(main())
