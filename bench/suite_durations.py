"""Where the test suite's time goes, from pytest's `--durations=0` output.

    ./dev test tests/unit -q --durations=0 > unit.log
    ./dev test tests/integration/test_replication.py -q --durations=0 > repl.log
    .venv/bin/python -m bench.suite_durations unit.log repl.log [--slowest 30]

Prints setup / call / teardown seconds per module (setup is mostly a broker
or cluster starting, teardown stopping it) and the slowest single phases.
Figures from a shared machine vary with its load: compare runs made under a
similar load, and say what it was.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys

LINE = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S+)")


def parse(paths: list[str]) -> list[tuple[float, str, str]]:
    """[(seconds, phase, test node id)] of every line pytest reported."""
    rows = []
    for path in paths:
        with open(path, errors="replace") as log:
            for line in log:
                found = LINE.match(line)
                if found:
                    rows.append((float(found.group(1)), found.group(2), found.group(3)))
    return rows


def report(rows: list[tuple[float, str, str]], slowest: int) -> str:
    modules: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for seconds, phase, node in rows:
        modules[node.split("::")[0]][phase] += seconds
    out = ["| module | total s | setup s | call s | teardown s |", "|---|---:|---:|---:|---:|"]
    for module, phases in sorted(modules.items(), key=lambda kv: -sum(kv[1].values())):
        out.append(f"| {module} | {sum(phases.values()):.1f} | {phases['setup']:.1f} | {phases['call']:.1f} | "
                   f"{phases['teardown']:.1f} |")
    total = sum(seconds for seconds, _, _ in rows)
    out.append(f"| all | {total:.1f} | | | |")
    out += ["", f"{slowest} slowest phases:", "", "| s | phase | test |", "|---:|---|---|"]
    for seconds, phase, node in sorted(rows, reverse=True)[:slowest]:
        out.append(f"| {seconds:.1f} | {phase} | {node} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--slowest", type=int, default=30)
    args = parser.parse_args(argv)
    rows = parse(args.logs)
    if not rows:
        print("no --durations lines found", file=sys.stderr)
        return 1
    print(report(rows, args.slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
