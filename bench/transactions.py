"""Exactly-once costs (issue 19): idempotent and transactional produce, and
read_committed consume, side by side on raykafka, Tansu and librdkafka's mock.

    flock /tmp/raykafka-heavy.lock .venv/bin/python -m bench.transactions
        [--records 200000] [--record-size 1024] [--partitions 3]
        [--txn-records 1000] [--repeat 3] [--quick]
        [--targets raykafka,tansu,mock] [--mock-records N]
        [--raykafka-override KEY=VALUE ...] [--raykafka-variant KEY=VALUE ...]
        [--raykafka-bootstrap HOST:PORT] [--raykafka-cmd CMD] [--output FILE]

Brokers are started and stopped by bench.run's targets (one broker up at a
time; every target once per round, the order rotating). Per round and
target, after bench.client's group warm-up, three fresh topics, each phase a
client process of its own (bench.txn_client), acks=all throughout, keyed,
lz4, linger.ms=5, batch.size=1000000 (bench.client's producer):

  plain          produce (enable.idempotence=false), read back read_uncommitted
  idempotent     produce (enable.idempotence=true),  read back read_uncommitted
  transactional  produce, --txn-records per transaction (begin, produce x
                 1000, commit), then read back twice: read_uncommitted and
                 read_committed (which one first alternates by round)

The order of the three topics rotates by round too. A produce figure counts
only if its read-back found every record exactly once (for the
transactional topic: the read_committed read); a consume figure only if it
did. A broker that deleted records before the read (the mock keeps 5 MiB per
partition) makes the cell n/a, never a number.

Reported: MB/s and records/s per row and target (median over rounds), the
transactional row's transactions/s and commit latency; the ratios inside a
target (idempotent/plain, transactional/plain, read_committed/
read_uncommitted: ratio of the medians and the median of the per-round
ratios, each round's pair measured minutes apart on the same broker), and
raykafka's ratio to each peer that ran the same record count. Issue 19's
target (idempotent >= 0.9x plain on raykafka) is reported, never asserted:
the exit status is 1 only if a cell FAILed or the run was interrupted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.matrix_report import _f, cpu_and_runs, print_cell, print_table_head
from bench.matrix_run import case_line, rotated
from bench.matrix_summary import MIB, ratio, summarize_cell
from bench.phases import (
    Workload,
    create_topic,
    delete_topic,
    finish_client,
    one_partition_args,
    start_client,
    warm_up_groups,
    with_throughput,
)
from bench.run import (
    StopsEverything,
    add_raykafka_options,
    begin_run,
    config_of,
    end_report,
    make_targets,
    parse_targets,
    save_results,
    standard_targets,
)
from bench.targets import PYTHON, RESULTS, MockTarget, RaykafkaTarget, Target, TargetError
from bench.txn_client import ISOLATIONS, MODES

BASELINE = "tansu"
VARIANT = "raykafka_v"  # --raykafka-variant's target (a legal topic-name part)
# (row label, phase, topic mode, isolation of the read it comes from)
ROWS = (
    ("produce plain", "produce", "plain", "read_uncommitted"),
    ("produce idempotent", "produce", "idempotent", "read_uncommitted"),
    ("produce transactional", "produce", "transactional", "read_committed"),
    ("consume read_uncommitted", "consume", "transactional", "read_uncommitted"),
    ("consume read_committed", "consume", "transactional", "read_committed"),
)
# Ratios inside one target: (label, numerator row, denominator row).
PAIRS = (
    ("idempotent / plain", "produce idempotent", "produce plain"),
    ("transactional / plain", "produce transactional", "produce plain"),
    ("read_committed / read_uncommitted", "consume read_committed", "consume read_uncommitted"),
)
GOAL_IDEMPOTENT_RATIO = 0.9  # issue 19: idempotent >= 0.9x plain on raykafka
MOCK_FILL = 0.6  # share of the mock's per-partition retention a run may fill
LZ4_RATIO = 0.55  # ~what the payload pool compresses to (bench.client: 0.52)


def override_env(key: str) -> str:
    """The environment variable raykafka reads a config key from."""
    return "RAYKAFKA_" + key.strip().upper().replace(".", "_")


def mock_records(records: int, record_size: int) -> int:
    """Records that fit the mock's retention (5 MiB per partition, 4
    partitions) with room to spare for uneven key hashing and batch headers."""
    fits = int(MockTarget.keeps_mib_per_partition * MockTarget.fixed_partitions * MIB
               * MOCK_FILL / (record_size * LZ4_RATIO))
    return max(1, min(records, fits))


class RaykafkaVariant(RaykafkaTarget):
    """raykafka started with extra broker configs (RAYKAFKA_<KEY> variables),
    run as a target of its own, interleaved with the others: an A/B of a
    setting inside one run."""

    def __init__(self, workdir, start_timeout, overrides: list[str], cmd=None):
        super().__init__(workdir, start_timeout, None, cmd)
        self.name = VARIANT
        self.env = {override_env(k): v for k, v in (kv.split("=", 1) for kv in overrides)}

    def _start(self) -> str:
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # copied by RaykafkaTarget._start's Popen
        try:
            return super()._start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


# ------------------------------------------------------------------ running
def run_txn_phase(t: Target, phase: str, topic: str, records: int, a,
                  extra: list[str]) -> dict:
    """One bench.txn_client process; adds mb_s / records_s to a good result."""
    tag = extra[1] if phase != "warmup" and len(extra) > 1 else phase
    cmd = [PYTHON, "-m", "bench.txn_client", phase, "--bootstrap", t.bootstrap,
           "--topic", topic, "--records", str(records), "--record-size", str(a.record_size),
           "--txn-records", str(a.txn_records), "--timeout", str(a.phase_timeout),
           "--idle-timeout", str(a.idle_timeout),
           "--broker-pid", str(t.proc.pid if t.proc else 0), *extra]
    err_log = t.workdir / f"{topic}-{phase}-{tag}.stderr"
    # A transactional produce commits many times, each within phase_timeout;
    # the warm-up waits up to start_timeout (passed as its --timeout).
    limit = {"produce": a.phase_timeout * 3, "warmup": a.start_timeout}.get(
        phase, a.phase_timeout) + 60
    return with_throughput(finish_client(start_client(cmd, err_log), err_log, limit, phase))


def run_topic(t: Target, mode: str, r: int, records: int, a, topic: str) -> dict:
    """create, produce in `mode`, read back (both isolations for the
    transactional topic, the order alternating by round), delete."""
    case: dict = {"topic": topic, "mode": mode, "records": records}
    wl = Workload(records, a.record_size, a.partitions, "all")
    if not create_topic(t, topic, wl, a, case):
        return case
    case["produce"] = run_txn_phase(t, "produce", topic, records, a,
                                    ["--mode", mode, *one_partition_args(t, a.partitions)])
    if case["produce"].get("ok"):
        reads = rotated(list(ISOLATIONS), r) if mode == "transactional" else ["read_uncommitted"]
        for iso in reads:
            case[iso] = run_txn_phase(t, "consume", topic, records, a, ["--isolation", iso])
    delete_topic(t, topic, wl, a, case)
    return case


def _transactions_details(phase: str, res: dict) -> str:
    if phase == "produce" and res.get("transactions"):
        return (f" ({res['transactions'] / res['elapsed_s']:.1f} txn/s, commit "
                f"p50 {res['commit'].get('p50_ms')} ms)")
    return ""


def _line(case: dict) -> str:
    return case_line(case, ("produce", *ISOLATIONS), ".1f", _transactions_details, first_error)


def run_session(t: Target, r: int, a, run_id: str) -> dict:
    """Start the target, run the three topics of round r on it, stop it."""
    records = a.mock_records if t.name == "mock" else a.records
    session: dict = {"round": r, "records": records, "topics": {}}
    t0 = time.monotonic()
    try:
        bootstrap = t.start()
        session.update(bootstrap=bootstrap, startup_s=round(time.monotonic() - t0, 2))
        print(f"  {t.name}: up on {bootstrap} in {session['startup_s']}s", flush=True)
        session["warmup"] = warm_up_groups(t, f"txn-{run_id}-warmup", a)
        # The first transactional id a broker sees may make it set up its
        # transaction coordinators (raykafka: __transaction_state, 50
        # partitions by default, a replica actor each): untimed, here, before
        # every mode, so all three run on a broker in the same state.
        tw = session["txn_warmup"] = run_txn_phase(
            t, "warmup", f"txn-{run_id}-warmup", 1, a,
            ["--timeout", str(a.start_timeout)])
        print(f"  {t.name}: transactional warm-up (first init_transactions) "
              + (f"{tw['init_transactions_s']:.1f}s" if tw.get("ok")
                 else f"FAIL: {tw.get('error')}"), flush=True)
        if not tw.get("ok"):
            t.note(f"transactional warm-up failed: {tw.get('error')}", key="txn_warmup")
        for mode in rotated(list(MODES), r):
            topic = f"txn-{run_id}-{t.name}-r{r}-{mode}"
            session["loadavg_1m"] = round(os.getloadavg()[0], 2)
            case = session["topics"][mode] = run_topic(t, mode, r, records, a, topic)
            print(f"  {t.name:8s} {mode:13s} {_line(case)}", flush=True)
    except TargetError as e:
        print(f"  {t.name}: FAIL: {e}", flush=True)
        session["error"] = str(e)
    finally:
        t.stop()
    return session


# ------------------------------------------------------------------ summary
def first_error(case: dict) -> str:
    for key in ("create", "produce", *ISOLATIONS):
        res = case.get(key)
        if res is not None and not res.get("ok"):
            return f"{key}: {res.get('error') or 'failed'}"
    return case.get("error") or "not run"


def cell_from_topic(phase: str, isolation: str, case: dict | None) -> dict:
    """One round's figure of one row. A produce counts only if the read-back
    (`isolation`) found every record exactly once; a read the broker had
    truncated first (retention) is n/a."""
    if case is None:
        return {"status": "fail", "error": "not run"}
    prod, read = case.get("produce"), case.get(isolation)
    if read is not None and read.get("retention_deleted_offsets"):
        return {"status": "na", "reason":
                f"broker deleted {read['retention_deleted_offsets']} offsets before the "
                f"{isolation} read (retention)"}
    if not (prod and prod.get("ok")) or not (read and read.get("ok")):
        if prod and prod.get("ok") and read is None:
            return {"status": "fail", "error": f"{isolation}: not run"}
        return {"status": "fail", "error": first_error(case)}
    src = prod if phase == "produce" else read
    cpu = src.get("cpu") or {}
    cell = {"status": "ok", "mb_s": src["mb_s"], "records_s": src["records_s"],
            "elapsed_s": src["elapsed_s"],
            "partitions": read.get("partitions") or prod.get("partitions_seen"),
            "client_cpu_pct": cpu.get("client_cpu_pct"),
            "broker_cpu_pct": cpu.get("broker_cpu_pct"),
            "other_cpu_pct": cpu.get("other_cpu_pct")}
    if phase == "produce" and prod.get("transactions"):
        cell["txn_s"] = prod["transactions"] / prod["elapsed_s"]
        cell["commit_p50_ms"] = (prod.get("commit") or {}).get("p50_ms")
        cell["commit_p99_ms"] = (prod.get("commit") or {}).get("p99_ms")
    return cell


def round_cells(session: dict) -> dict[str, dict]:
    """{row: cell} of one round of one target."""
    out = {}
    for label, phase, mode, iso in ROWS:
        case = session.get("topics", {}).get(mode)
        if case is None and session.get("error"):
            out[label] = {"status": "fail", "error": session["error"]}
        else:
            out[label] = cell_from_topic(phase, iso, case)
    return out


def summarize_rows(sessions: dict[str, list[dict]]) -> dict:
    """{row: {target: cell}}: medians over rounds (bench.matrix_summary.summarize_cell:
    one failed round fails the cell), transactions/s and commit latency
    medians for the transactional row, and each cell's ratio to Tansu when
    both ran the same number of records."""
    per_round = {n: [round_cells(s) for s in ss] for n, ss in sessions.items()}
    records = {n: {s.get("records") for s in ss} for n, ss in sessions.items()}
    out = {}
    for label, *_ in ROWS:
        cells = {}
        for name, rounds in per_round.items():
            rc = [x[label] for x in rounds]
            cell = summarize_cell(rc)
            if cell["status"] == "ok" and any("txn_s" in c for c in rc):
                for k in ("txn_s", "commit_p50_ms", "commit_p99_ms"):
                    vals = [c.get(k) for c in rc]
                    cell[k] = statistics.median(vals) if None not in vals else None
            cells[name] = cell
        base = cells.get(BASELINE, {})
        for name, cell in cells.items():
            same = records.get(name) == records.get(BASELINE)
            ok = same and cell["status"] == "ok" and base.get("status") == "ok"
            cell["ratio"] = ratio(cell["mb_s"], base["mb_s"]) if ok else None
        out[label] = cells
    return out


def pair_ratios(sessions: dict[str, list[dict]], summary: dict) -> dict:
    """{pair label: {target: {ratio, paired, rounds}}}: ratio of the row
    medians, and the median over rounds of each round's own ratio (both
    measured on the same broker minutes apart, so drifting load mostly
    cancels). None where either side is not a figure."""
    out = {}
    for label, num, den in PAIRS:
        per_target = {}
        for name, ss in sessions.items():
            n, d = summary[num].get(name, {}), summary[den].get(name, {})
            med = ratio(n.get("mb_s"), d.get("mb_s")) if \
                n.get("status") == "ok" and d.get("status") == "ok" else None
            rounds = []
            for s in ss:
                cells = round_cells(s)
                if cells[num]["status"] == "ok" and cells[den]["status"] == "ok":
                    rounds.append(cells[num]["mb_s"] / cells[den]["mb_s"])
            paired = statistics.median(rounds) if med is not None and rounds else None
            why = None
            if med is None:
                bad = n if n.get("status") != "ok" else d
                why = bad.get("reason") or bad.get("error") or "not run"
            per_target[name] = {"ratio": med, "paired": paired,
                                "rounds": [round(x, 3) for x in rounds], "why_not": why}
        out[label] = per_target
    return out


def setup_times(sessions: dict[str, list[dict]]) -> dict:
    """{target: {first_init_s, init_transactions_s, init_producer_id_s}}:
    medians over rounds of the untimed warm-up's first init_transactions()
    (raykafka: creates __transaction_state) and of the producers' own
    InitProducerId waits before their clocks started; None where missing."""
    out = {}
    for name, ss in sessions.items():
        def med(vals):
            vals = [v for v in vals if v is not None]
            return statistics.median(vals) if vals else None
        out[name] = {
            "first_init_s": med([(s.get("txn_warmup") or {}).get("init_transactions_s")
                                 for s in ss]),
            "init_transactions_s": med([((s.get("topics", {}).get("transactional") or {})
                                         .get("produce") or {}).get("init_transactions_s")
                                        for s in ss]),
            "init_producer_id_s": med([((s.get("topics", {}).get("idempotent") or {})
                                        .get("produce") or {}).get("init_producer_id_s")
                                       for s in ss]),
        }
    return out


def goal(pairs: dict) -> dict:
    """Issue 19's target, judged on the paired ratio (each round's idempotent
    and plain topic ran on the same broker minutes apart; the medians of
    the two rows may come from different, differently disturbed rounds)."""
    r = pairs.get("idempotent / plain", {}).get("raykafka", {})
    value = r.get("paired")
    return {"goal": "raykafka idempotent produce / plain produce (acks=all)",
            "target": f">= {GOAL_IDEMPOTENT_RATIO}x", "value": r.get("ratio"), "paired": value,
            "met": None if value is None else value >= GOAL_IDEMPOTENT_RATIO}


# ------------------------------------------------------------------ report
def print_report(doc: dict) -> None:
    cfg, summary, pairs = doc["config"], doc["summary"], doc["pairs"]
    targets = cfg["targets"]
    print()
    mock = (f" (mock: {cfg['mock_records']}, what its retention keeps)"
            if "mock" in targets and cfg["mock_records"] != cfg["records"] else "")
    print(f"Workload: {cfg['records']} records x {cfg['record_size']} B{mock}, keyed, {cfg['partitions']} partitions "
          f"(mock: 4), acks=all, lz4, linger.ms=5, batch.size=1000000; transactional: "
          f"{cfg['txn_records']} records per transaction; median of {cfg['repeat']} "
          f"round(s); MB = 10^6 bytes of record values")
    if cfg.get("raykafka_override"):
        print(f"raykafka started with: {', '.join(cfg['raykafka_override'])}")
    if cfg.get("raykafka_variant"):
        print(f"{VARIANT} = raykafka started with: {', '.join(cfg['raykafka_variant'])}")
    m = doc["machine"]
    print(f"Machine: {m['cpus_usable']} usable cores shared by client and broker; load "
          f"average {m.get('loadavg_at_start')} at start, {m.get('loadavg_at_end')} at end")
    print()
    hdr = (f"{'row':25s} {'target':10s} {'parts':>5s} {'MB/s':>8s} {'records/s':>10s} "
           f"{'txn/s':>7s} {'/' + BASELINE:>7s} {'cli%':>5s} {'brk%':>5s} {'oth%':>5s}  runs MB/s")
    print_table_head(hdr)
    for label, *_ in ROWS:
        first = label
        for name in targets:
            cell = summary[label].get(name, {})
            parts = cell.get("partitions")
            ptxt = str(parts) if parts is not None else "-"
            print_cell(f"{first:25s} {name:10s} {ptxt:>5s}", cell, lambda c: (
                f"{c['mb_s']:8.1f} {c['records_s']:10.0f} {_f(c.get('txn_s'), '.1f', 7)} "
                f"{_f(c.get('ratio'), '.2f', 7)} {cpu_and_runs(c)}"), 100)
            first = ""
    txn = summary["produce transactional"]
    lat = [f"{n} p50 {c['commit_p50_ms']:.1f} / p99 {c['commit_p99_ms']:.1f} ms"
           for n, c in txn.items() if c.get("status") == "ok"
           and c.get("commit_p50_ms") is not None and c.get("commit_p99_ms") is not None]
    if lat:
        print(f"commit_transaction() latency (median over rounds): {'; '.join(lat)}")
    if VARIANT in targets and "raykafka" in targets:
        ab = []
        for label, *_ in ROWS:
            v, r = summary[label].get(VARIANT, {}), summary[label].get("raykafka", {})
            x = ratio(v.get("mb_s"), r.get("mb_s")) if \
                v.get("status") == "ok" and r.get("status") == "ok" else None
            ab.append(f"{label} {_f(x, '.2f', 0)}")
        print(f"{VARIANT} / raykafka (ratio of medians): " + "; ".join(ab))
    setup = doc.get("setup") or {}
    if setup:
        fmt = lambda v: f"{v:.2f}s" if isinstance(v, (int, float)) else "n/a"
        print("untimed set-up (median): " + "; ".join(
            f"{n} first init_transactions {fmt(x['first_init_s'])}, then "
            f"{fmt(x['init_transactions_s'])}" for n, x in setup.items()))
    print("cli/brk/oth% = CPU during the timed window in % of ONE core: client process, "
          "broker process tree, everything else. /tansu only where both ran the same records.")
    print()
    print(f"{'ratio inside a target':34s} " + " ".join(f"{n:>20s}" for n in targets))
    for label, per in pairs.items():
        vals = []
        for n in targets:
            p = per.get(n, {})
            vals.append(f"{p['ratio']:.2f} (paired {p['paired']:.2f})" if p.get("ratio")
                        is not None and p.get("paired") is not None else "n/a")
        print(f"{label:34s} " + " ".join(f"{v:>20s}" for v in vals))
    for label, per in pairs.items():
        for n in targets:
            why = per.get(n, {}).get("why_not")
            if why:
                print(f"  n/a {label} [{n}]: {why.splitlines()[0][:140]}")
    print("(ratio of the medians; paired = median over rounds of each round's own ratio)")
    g = doc["goal"]
    verdict = "n/a" if g["met"] is None else ("met" if g["met"] else "NOT met")
    x = lambda v: f"{v:.2f}x" if isinstance(v, (int, float)) else "n/a"
    print(f"issue 19 target: {g['goal']} {g['target']}: paired {x(g['paired'])} "
          f"(ratio of medians {x(g['value'])}) -> {verdict} (reported, not asserted)")


# ------------------------------------------------------------------ main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.transactions",
        description="Idempotent/transactional produce and read_committed consume, "
                    "raykafka vs Tansu vs librdkafka mock (issue 19).")
    ap.add_argument("--records", type=int, default=None,
                    help="records per topic (200000; 20000 with --quick)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--txn-records", type=int, default=1000,
                    help="records per transaction in the transactional row")
    ap.add_argument("--repeat", type=int, default=None,
                    help="interleaved rounds; medians are reported (3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="20000 records, 1 round")
    ap.add_argument("--targets", default="raykafka,tansu,mock",
                    help="comma-separated subset of raykafka,tansu,mock")
    ap.add_argument("--mock-records", type=int, default=None,
                    help="records per topic on the mock (default: --records, capped to "
                         "what its 5 MiB per partition retention keeps)")
    add_raykafka_options(ap)
    ap.add_argument("--raykafka-override", metavar="KEY=VALUE", action="append", default=[],
                    help="a broker config for the raykafka starts, passed as its "
                         "RAYKAFKA_<KEY> environment variable (repeatable), e.g. "
                         "transaction.state.log.num.partitions=3")
    ap.add_argument("--raykafka-variant", metavar="KEY=VALUE", action="append", default=[],
                    help="also run raykafka with these broker configs (repeatable) as a "
                         "target of its own, 'raykafka_v', interleaved with the others")
    ap.add_argument("--start-timeout", type=float, default=180.0)
    ap.add_argument("--phase-timeout", type=float, default=60.0,
                    help="message.timeout.ms and the longest flush / commit wait, s")
    ap.add_argument("--idle-timeout", type=float, default=30.0,
                    help="a read gives up (FAIL) after this long without a record")
    ap.add_argument("--output", type=Path,
                    help="JSON result path (default bench/results/txn-<run id>.json)")
    a = ap.parse_args(argv)
    a.targets = parse_targets(ap, a.targets)
    if a.records is None:
        a.records = 20000 if a.quick else 200000
    if a.repeat is None:
        a.repeat = 1 if a.quick else 3
    if min(a.records, a.record_size, a.partitions, a.txn_records, a.repeat) <= 0:
        ap.error("--records, --record-size, --partitions, --txn-records, --repeat "
                 "must be positive")
    for kv in a.raykafka_override + a.raykafka_variant:
        if "=" not in kv or not kv.split("=", 1)[0].strip():
            ap.error(f"--raykafka-override wants KEY=VALUE, got {kv!r}")
    if a.raykafka_variant:
        if "raykafka" not in a.targets:
            ap.error("--raykafka-variant needs the raykafka target")
        a.targets.insert(a.targets.index("raykafka") + 1, VARIANT)
    if a.mock_records is None:
        a.mock_records = mock_records(a.records, a.record_size)
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    machine, run_id = begin_run()
    print(f"raykafka txn bench {run_id}: targets={','.join(a.targets)}; {a.records} records "
          f"(mock {a.mock_records}) x {a.record_size} B, {a.repeat} round(s); load average "
          f"{machine['loadavg_at_start'][0]:.2f}", flush=True)
    for kv in a.raykafka_override:
        # RaykafkaTarget starts the broker with a copy of this environment;
        # only raykafka reads RAYKAFKA_* (core/config.py: env over defaults).
        key, value = kv.split("=", 1)
        os.environ[override_env(key)] = value
    workroot = Path(tempfile.mkdtemp(prefix=f"raykafka-bench-{run_id}-txn-"))
    targets = make_targets(a.targets, workroot, standard_targets(a) | {
        VARIANT: lambda wd: RaykafkaVariant(wd, a.start_timeout, a.raykafka_variant,
                                            a.raykafka_cmd)})
    sessions: dict[str, list[dict]] = {t.name: [] for t in targets}
    with StopsEverything(targets) as run:
        for r in range(a.repeat):
            print(f"[round {r + 1}/{a.repeat}]", flush=True)
            for t in rotated(targets, r):
                sessions[t.name].append(run_session(t, r, a, run_id))
    interrupted = run.interrupted
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize_rows(sessions)
    pairs = pair_ratios(sessions, summary)
    doc = {"run_id": run_id, "mode": "transactions", "machine": machine,
           "config": config_of(a), "summary": summary, "pairs": pairs, "goal": goal(pairs), "interrupted": interrupted,
           "setup": setup_times(sessions),
           "sessions": sessions, "notes": {t.name: t.notes for t in targets},
           "broker_logs": {t.name: t.logs for t in targets}, "workdir": str(workroot)}
    path = a.output or RESULTS / f"txn-{run_id}.json"
    save_results(doc, path, indent=1)
    print_report(doc)
    end_report(interrupted, targets, summary, "prefer the paired ratios or rerun.", path, workroot)
    failed = interrupted or any(c["status"] == "fail" for cells in summary.values()
                                for c in cells.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
