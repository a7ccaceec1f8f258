"""Side-by-side benchmark: raykafka vs Tansu vs librdkafka's mock cluster.

    .venv/bin/python -m bench.run [--records N] [--record-size B]
        [--partitions P] [--targets raykafka,tansu,mock] [--acks 1|all]
        [--repeat R] [--raykafka-bootstrap HOST:PORT]
    .venv/bin/python -m bench.run --matrix [--quick] [--repeat R]
        [--latency-rate R] [--targets ...]

Single workload (default): for every target the harness starts the broker
itself (own process group, killed at the end, also on Ctrl-C / errors), then
per repeat: creates a fresh topic (AdminClient; falls back to auto-create and
says so), runs the produce phase and then the consume phase, each in a fresh
client process (bench.client). It prints MB/s, records/s and raykafka/peer
ratios (medians over repeats) and writes everything as JSON under
bench/results/.

--matrix (issue 8): produce rows {1 KiB, 16 KiB} x {1, 6 partitions} x
{acks=1, acks=all} and consume rows (16 KiB), every target once per round
with the broker reused across that round's rows, a fresh topic per row;
then end-to-end latency at a fixed rate, broker memory, and raykafka's PSS
per idle replica actor. See bench/README.md.

A phase that does not account for every record is FAIL, never a number.

Here: the command line, the single-workload report and main_matrix. The
brokers are bench/targets.py, one phase in a client process
bench/phases.py, the matrix bench/matrix_run.py (running it),
bench/matrix_summary.py (medians, ratios, goals) and bench/matrix_report.py.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.matrix_report import print_matrix_report, print_table_head
from bench.matrix_run import rotated, run_latency_session, run_session
from bench.matrix_summary import (goal_report, latency_rate, matrix_rows, matrix_workloads, PEAK_ROW, summarize_latency,
                                  summarize_matrix, summarize_memory)
from bench.phases import _children, run_round
from bench.targets import (ALL_TARGETS, kill_tree, MockTarget, OTHER_CPU_WARN, PEERS, RaykafkaTarget, RESULTS,
                           TansuTarget, Target, TargetError)


# ------------------------------------------------------------------ report
def summarize(target_result: dict) -> dict:
    s = {}
    for phase in ("produce", "consume"):
        rs = [r.get(phase) for r in target_result.get("runs", [])]
        if not rs or any(r is None or not r.get("ok") for r in rs):
            # One bad round fails the target: a lost record is never averaged away.
            errs = [r.get("error") for r in rs if r and not r.get("ok")]
            bad = sum(1 for r in rs if r is None or not r.get("ok"))
            err = target_result.get("error") or (errs[0] if errs else "not run")
            if rs and bad < len(rs):
                err = f"{bad}/{len(rs)} rounds failed: {err}"
            s[phase] = {"ok": False, "error": err}
            continue
        s[phase] = {
            "ok": True,
            "mb_s": statistics.median(r["mb_s"] for r in rs),
            "records_s": statistics.median(r["records_s"] for r in rs),
            "elapsed_s": statistics.median(r["elapsed_s"] for r in rs),
            "all_mb_s": [round(r["mb_s"], 1) for r in rs],
            # Interference only ever slows a run down, so on a shared machine
            # the best round is the least disturbed one.
            "best_mb_s": max(r["mb_s"] for r in rs),
        }
        for k in ("client_cpu_pct", "broker_cpu_pct", "other_cpu_pct"):
            vals = [r.get("cpu", {}).get(k) for r in rs]
            s[phase][k] = statistics.median(vals) if None not in vals else None
    parts = set()
    for r in target_result.get("runs", []):
        n = (r.get("consume") or {}).get("partitions") or \
            (r.get("produce") or {}).get("partitions_seen")
        if n:
            parts.add(n)
    s["partitions"] = parts.pop() if len(parts) == 1 else (sorted(parts) or None)
    return s


def print_report(summary: dict, ratios: dict, a, machine: dict) -> None:
    print()
    print(f"Workload: {a.records} records x {a.record_size} B, keyed, "
          f"{a.partitions} partitions, acks={a.acks}, lz4, linger.ms=5, "
          f"batch.size=1000000; median of {a.repeat} repeat(s); MB = 10^6 bytes "
          f"of record values")
    print(f"Machine: {machine['cpus']} CPU cores ({machine['cpus_usable']} usable), "
          f"{machine['platform']}; client and broker run on the SAME "
          f"{machine['cpus_usable']} cores, so the client's CPU use is part of "
          f"every figure (Ray workers run at nice 15).")
    print()
    hdr = (f"{'target':10s} {'phase':8s} {'parts':>5s} {'MB/s':>9s} {'records/s':>11s} "
           f"{'time s':>7s} {'CPU%cli':>7s} {'brk':>5s} {'other':>5s}  runs MB/s")
    print_table_head(hdr)
    for name, s in summary.items():
        for phase in ("produce", "consume"):
            r = s[phase]
            parts = str(s.get("partitions") or "-")
            if r["ok"]:
                f = lambda v: f"{v:.0f}" if isinstance(v, (int, float)) else "?"
                print(f"{name:10s} {phase:8s} {parts:>5s} {r['mb_s']:9.1f} {r['records_s']:11.0f} "
                      f"{r['elapsed_s']:7.2f} {f(r['client_cpu_pct']):>7s} "
                      f"{f(r['broker_cpu_pct']):>5s} {f(r['other_cpu_pct']):>5s}  {r['all_mb_s']}")
            else:
                err = (r.get("error") or "").splitlines()[0][:100]
                print(f"{name:10s} {phase:8s} {parts:>5s} {'FAIL':>9s}  {err}")
    print("CPU% = median CPU use during the timed window in % of ONE core (the machine has "
          f"{machine['cpus_usable'] * 100}%): cli = client process, brk = broker process tree, "
          "other = everything else on the machine (high = disturbed run).")
    if ratios:
        print()
        print(f"{'ratio (MB/s)':18s} {'produce':>9s} {'consume':>9s}   "
              f"{'best-round produce':>18s} {'consume':>8s}")
        for peer, rr in ratios.items():
            fmt = lambda v, w=9: f"{v:{w}.2f}" if isinstance(v, float) else f"{'n/a':>{w}s}"
            print(f"{'raykafka/' + peer:18s} {fmt(rr['produce'])} {fmt(rr['consume'])}   "
                  f"{fmt(rr['produce_best'], 18)} {fmt(rr['consume_best'], 8)}")
        print("(median ratio = ratio of the medians; best-round = ratio of each side's "
              "fastest round, the least disturbed one)")


def machine_info() -> dict:
    try:
        import confluent_kafka
        ck = {"confluent_kafka": confluent_kafka.version()[0],
              "librdkafka": confluent_kafka.libversion()[0]}
    except ImportError:
        ck = {}
    return {"cpus": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
            "platform": platform.platform(), "python": platform.python_version(),
            "hostname": platform.node(), **ck}




def main_matrix(a, machine: dict, run_id: str, targets: list[Target], workroot: Path) -> int:
    workloads = matrix_workloads(a.row_mib)
    rows = matrix_rows(workloads)
    sessions: dict[str, list[dict]] = {t.name: [] for t in targets}
    latency_sessions: dict[str, list[dict]] = {t.name: [] for t in targets}
    doc: dict = {"run_id": run_id, "mode": "matrix", "machine": machine,
                 "config": config_of(a), "rows": rows, "workdir": str(workroot)}
    rate, rate_source = None, None
    with StopsEverything(targets) as run:
        for r in range(0 if a.latency_only else a.repeat):
            print(f"[round {r + 1}/{a.repeat}]", flush=True)
            for t in rotated(targets, r):
                sessions[t.name].append(run_session(t, r, workloads, a, run_id))
        summary = summarize_matrix(rows, sessions)
        rate, rate_source = latency_rate(summary, a.latency_rate)
        if rate and a.latency_rounds > 0:
            print(f"[latency: {rate:.0f} records/s, {rate_source}]", flush=True)
            for lr in range(a.latency_rounds):
                for t in rotated(targets, lr):
                    latency_sessions[t.name].append(run_latency_session(
                        t, lr, rate, a, run_id,
                        measure_idle=(t.name == "raykafka" and lr == 0 and a.idle_partitions > 0)))
    interrupted = run.interrupted
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize_matrix(rows, sessions)
    if rate is None:
        rate, rate_source = latency_rate(summary, a.latency_rate)
    lat_runs = {n: [s["latency"] for s in ss if "latency" in s] for n, ss in latency_sessions.items()}
    doc["latency"] = ({"rate": rate, "rate_source": rate_source,
                       "summary": {n: summarize_latency(rs) for n, rs in lat_runs.items()},
                       "runs": lat_runs}
                      if rate and a.latency_rounds > 0 else
                      {"skipped": rate_source if not rate else "--latency-rounds 0"})
    idle = next((s["idle_replicas"] for s in latency_sessions.get("raykafka", [])
                 if "idle_replicas" in s), None)
    doc.update(summary=summary, idle_replicas=idle, interrupted=interrupted,
               memory={n: summarize_memory(ss) for n, ss in sessions.items()},
               goals=goal_report(summary, doc["latency"].get("summary", {}), idle),
               sessions=sessions, latency_sessions=latency_sessions,
               notes={t.name: t.notes for t in targets},
               broker_logs={t.name: t.logs for t in targets})
    path = a.output or RESULTS / f"matrix-{run_id}.json"
    save_results(doc, path, indent=1)
    print_matrix_report(doc)
    end_report(interrupted, targets, summary,
               "{cells} cell(s) above " + f"{OTHER_CPU_WARN:.0f}%: ratios are noisy, prefer "
               "the best-round column or rerun.", path, workroot)
    failed = interrupted or (not a.latency_only and any(
        c["status"] == "fail" for cells in summary.values() for c in cells.values()))
    failed |= any(s.get("ok") is False for s in doc["latency"].get("summary", {}).values())
    failed |= bool(idle and idle.get("error"))
    return 1 if failed else 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Produce/consume throughput of raykafka vs Tansu vs librdkafka mock.")
    ap.add_argument("--matrix", action="store_true",
                    help="run issue 8's matrix (produce/consume rows, latency, memory) "
                         "instead of one workload")
    ap.add_argument("--quick", action="store_true",
                    help="matrix: small rows (--row-mib 16), 1 round, short latency "
                         "window: a few minutes in all")
    ap.add_argument("--records", type=int, default=200000, help="single workload only")
    ap.add_argument("--record-size", type=int, default=1024, help="single workload only")
    ap.add_argument("--partitions", type=int, default=3, help="single workload only")
    ap.add_argument("--targets", default="raykafka,tansu,mock",
                    help="comma-separated subset of raykafka,tansu,mock")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"],
                    help="single workload only")
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds (fresh topic each); the median is reported "
                         "(default 3; 1 with --quick)")
    ap.add_argument("--row-mib", type=float, default=None,
                    help="matrix: MiB of record values per row (default 192; 16 with --quick)")
    ap.add_argument("--latency-rate", type=float, default=None,
                    help="matrix: records/s for the latency phase (default: half of "
                         "raykafka's median records/s in the row " + repr(PEAK_ROW) + ")")
    ap.add_argument("--latency-warmup-s", type=float, default=None,
                    help="matrix: seconds of warm-up before the latency window (5; 2 quick)")
    ap.add_argument("--latency-window-s", type=float, default=None,
                    help="matrix: seconds of the steady latency window (15; 5 quick)")
    ap.add_argument("--latency-only", action="store_true",
                    help="matrix: skip the throughput rows, run only latency and the "
                         "idle-replica measurement (needs --latency-rate)")
    ap.add_argument("--latency-rounds", type=int, default=1,
                    help="matrix: latency rounds per target, interleaved (0: skip latency "
                         "and the idle-replica measurement)")
    ap.add_argument("--idle-partitions", type=int, default=20,
                    help="matrix: partitions of the idle topic whose raykafka replica "
                         "actors are measured (0: skip)")
    ap.add_argument("--idle-settle-s", type=float, default=None,
                    help="matrix: seconds the idle replicas sit before their PSS is read "
                         "(10; 5 quick)")
    add_raykafka_options(ap)
    ap.add_argument("--start-timeout", type=float, default=180.0,
                    help="seconds to wait for a broker to become ready (tansu's first run "
                         "pip-installs it)")
    ap.add_argument("--phase-timeout", type=float, default=60.0,
                    help="produce: a record not acknowledged this many seconds after "
                         "produce() fails (message.timeout.ms), and flush() waits at "
                         "most this long; the client process is killed 60 s later")
    ap.add_argument("--idle-timeout", type=float, default=30.0,
                    help="consume gives up (FAIL) after this long without a record")
    ap.add_argument("--output", type=Path, help="JSON result path (default bench/results/<ts>.json)")
    a = ap.parse_args(argv)
    a.targets = parse_targets(ap, a.targets)
    quick = a.matrix and a.quick
    for key, full, small in (("repeat", 3, 1), ("row_mib", 192.0, 16.0),
                             ("latency_warmup_s", 5.0, 2.0), ("latency_window_s", 15.0, 5.0),
                             ("idle_settle_s", 10.0, 5.0)):
        if getattr(a, key) is None:
            setattr(a, key, small if quick else full)
    if a.records <= 0 or a.record_size <= 0 or a.partitions <= 0 or a.repeat <= 0:
        ap.error("--records, --record-size, --partitions, --repeat must be positive")
    if a.row_mib <= 0 or a.latency_window_s <= 0 or a.latency_warmup_s < 0 \
            or a.latency_rounds < 0 or a.idle_partitions < 0 or a.idle_settle_s < 0:
        ap.error("--row-mib and --latency-window-s must be positive, the other matrix "
                 "options non-negative")
    if a.latency_rate is not None and a.latency_rate <= 0:
        ap.error("--latency-rate must be positive")
    if a.latency_only and not (a.matrix and a.latency_rate):
        ap.error("--latency-only needs --matrix and --latency-rate")
    return a


def add_raykafka_options(ap: argparse.ArgumentParser) -> None:
    """--raykafka-bootstrap and --raykafka-cmd: which raykafka RaykafkaTarget runs."""
    ap.add_argument("--raykafka-bootstrap", metavar="HOST:PORT",
                    help="benchmark an already running raykafka instead of starting one")
    ap.add_argument("--raykafka-cmd", metavar="CMD",
                    help="command prefix that starts raykafka (default .venv/bin/raykafka); "
                         "'start --data-dir ... --override listeners=...' is appended")


def parse_targets(ap: argparse.ArgumentParser, text: str) -> list[str]:
    """The targets of a comma-separated --targets (an argparse error if one is unknown)."""
    targets = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in targets if t not in ALL_TARGETS]
    if bad or not targets:
        ap.error(f"unknown target(s) {bad}; choose from {','.join(ALL_TARGETS)}")
    return targets


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def begin_run() -> tuple[dict, str]:
    """Ctrl-C, SIGTERM and SIGHUP made KeyboardInterrupt (a run then stops
    what it started); returns the machine (with its load average now) and
    the run id."""
    # Explicit: a shell that starts us in the background ignores SIGINT, and
    # Python then never installs its KeyboardInterrupt handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)
    machine = machine_info()
    machine["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    return machine, time.strftime("%Y%m%d-%H%M%S")


def warn_if_loaded(machine: dict) -> None:
    load = machine["loadavg_at_start"][0]
    if load > 0.5:
        print(f"warning: 1-minute load average is {load:.2f} before the run: other "
              f"work shares these cores, figures will be noisy", flush=True)


def standard_targets(a) -> dict:
    """name -> (workdir -> Target) of the three targets."""
    return {
        "raykafka": lambda wd: RaykafkaTarget(wd, a.start_timeout,
                                              a.raykafka_bootstrap, a.raykafka_cmd),
        "tansu": lambda wd: TansuTarget(wd, a.start_timeout),
        "mock": lambda wd: MockTarget(wd, a.start_timeout),
    }


def make_targets(names: list[str], workroot: Path, makers: dict) -> list[Target]:
    """The targets named, each with its own work directory under workroot."""
    targets = []
    for name in names:
        (workroot / name).mkdir()
        targets.append(makers[name](workroot / name))
    return targets


class StopsEverything:
    """``with StopsEverything(targets) as run:`` a KeyboardInterrupt (Ctrl-C,
    SIGTERM, SIGHUP) ends the block and sets run.interrupted; either way every
    client process and broker this run started is stopped after it."""

    def __init__(self, targets: list[Target]):
        self.targets = targets
        self.interrupted = False

    def __enter__(self) -> "StopsEverything":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.interrupted = True
            print("\ninterrupted; stopping brokers and clients", file=sys.stderr)
        _cleanup(self.targets)
        return self.interrupted


def config_of(a) -> dict:
    """The run's options as JSON values."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}


def save_results(doc: dict, path: Path, indent: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=indent, default=str))


def print_notes(targets: list[Target]) -> None:
    for t in targets:
        for note in t.notes:
            print(f"note [{t.name}]: {note}")


def end_report(interrupted: bool, targets: list[Target], summary: dict, advice: str,
               path: Path, workroot: Path) -> None:
    """What follows a run's table: whether it was interrupted, the targets'
    notes, a warning if other processes disturbed timed windows (then
    `advice`, where {cells} is how many cells), where the results are."""
    if interrupted:
        print("INTERRUPTED: only what completed before the interrupt is shown")
    print_notes(targets)
    disturbed = [(label, n, c.get("other_cpu_pct")) for label, cells in summary.items()
                 for n, c in cells.items() if c.get("status") == "ok"
                 and (c.get("other_cpu_pct") or 0) > OTHER_CPU_WARN]
    if disturbed:
        worst = max(disturbed, key=lambda x: x[2])
        print(f"warning: other processes used up to {worst[2]:.0f}% of a core during timed "
              f"windows ({worst[1]}, {worst[0]}); " + advice.format(cells=len(disturbed)))
    print(f"\nresults: {path}  (broker/client logs: {workroot})")


def _cleanup(targets: list[Target]) -> None:
    """Stop every client process and broker this run started."""
    # A second Ctrl-C must not abort the cleanup half way.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    for p in list(_children):
        kill_tree(p, grace=2)
    for t in targets:
        t.stop()


def main(argv=None) -> int:
    a = parse_args(argv)
    machine, run_id = begin_run()
    print(f"raykafka bench {run_id}: targets={','.join(a.targets)}; "
          f"{machine['cpus']} cores ({machine['cpus_usable']} usable) shared by "
          f"client and broker", flush=True)
    warn_if_loaded(machine)
    if a.matrix:
        print(f"matrix: {a.row_mib:g} MiB per row, {a.repeat} round(s), latency "
              f"{a.latency_warmup_s:g}+{a.latency_window_s:g} s x {a.latency_rounds}, "
              f"{a.idle_partitions} idle partitions", flush=True)
    workroot = Path(tempfile.mkdtemp(prefix=f"raykafka-bench-{run_id}-"))
    targets = make_targets(a.targets, workroot, standard_targets(a))
    if a.matrix:
        return main_matrix(a, machine, run_id, targets, workroot)
    results: dict[str, dict] = {t.name: {"target": t.name, "runs": [], "notes": t.notes,
                                         "broker_logs": t.logs} for t in targets}
    with StopsEverything(targets) as run:
        # Rounds are interleaved (round r runs every target once, one broker at
        # a time) so drifting background load hits all targets alike.
        for r in range(a.repeat):
            print(f"[round {r + 1}/{a.repeat}]", flush=True)
            for t in targets:
                res = results[t.name]
                if "error" in res:
                    continue  # could not start before; do not retry
                try:
                    res["runs"].append(run_round(t, r, a, run_id))
                except TargetError as e:
                    print(f"  {t.name}: FAIL: {e}", flush=True)
                    res["error"] = str(e)
    interrupted = run.interrupted

    summary = {n: summarize(r) for n, r in results.items()}
    ratios = {}
    if "raykafka" in summary:
        for peer in PEERS:
            if peer in summary:
                ratios[peer] = {}
                for phase in ("produce", "consume"):
                    rk, pr = summary["raykafka"][phase], summary[peer][phase]
                    ok = rk["ok"] and pr["ok"]
                    ratios[peer][phase] = rk["mb_s"] / pr["mb_s"] if ok else None
                    ratios[peer][phase + "_best"] = (rk["best_mb_s"] / pr["best_mb_s"]
                                                     if ok else None)
    print_report(summary, ratios, a, machine)
    if interrupted:
        print("INTERRUPTED: only the rounds completed before the interrupt are shown")
    print_notes(targets)
    busy = [(n, p, s[p].get("other_cpu_pct")) for n, s in summary.items()
            for p in ("produce", "consume") if s[p].get("ok")]
    busy = [(n, p, v) for n, p, v in busy if v is not None and v > OTHER_CPU_WARN]
    if busy:
        worst = max(busy, key=lambda x: x[2])
        print(f"warning: other processes used up to {worst[2]:.0f}% of a core during timed "
              f"windows ({worst[0]} {worst[1]}); on this machine even the same broker "
              f"measured twice can differ by 30% or more then. Ratios are unreliable: "
              f"rerun when the machine is quiet and/or with a larger --repeat.")

    doc = {"run_id": run_id, "interrupted": interrupted, "machine": machine,
           "config": config_of(a), "summary": summary, "ratios": ratios, "targets": results,
           "workdir": str(workroot)}
    path = a.output or RESULTS / f"{run_id}.json"
    save_results(doc, path, indent=2)
    print(f"\nresults: {path}  (broker/client logs: {workroot})")
    failed = interrupted or any(not s[p]["ok"] for s in summary.values()
                                for p in ("produce", "consume"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
