"""Replicated produce: raykafka on a 3-node local Ray cluster vs Tansu, one command.

    .venv/bin/python -m bench.replication [--records 100000] [--rate 5000]
        [--latency-records 20000] [--partitions 3] [--nodes 3] [--repeat 1]
        [--targets raykafka,tansu] [--no-rf1] [--no-paced]

raykafka: ``raykafka start --nodes 3`` (one broker per Ray node, all on this
machine), bootstrap = all brokers; a topic with replication.factor=3 and
min.insync.replicas=2. Tansu: one broker with memory storage, so its topic
has replication.factor=1 (it cannot do 3); its acks=all is acks=all on a
single replica. The table gives the RF of every row.

Per target and round the broker(s) start fresh. Then, each phase in its own
client process (bench.repl_client), on one topic per RF: acks=1 and
acks=all (acks=1 first in even rounds, acks=all first in odd ones), each once flat out ('max': throughput; latency then is mostly
client queueing) and once paced at --rate records/s (latency). For raykafka
the same phases run again on an RF=1 topic of the same 3-node cluster (the
cost of replication without the start-up noise of a second cluster; the
RF=3 topic is deleted first); --no-rf1 skips them.

Verification: every record gets exactly one successful delivery report; the
reported offsets are contiguous per partition and each phase continues where
the previous one on the topic ended; for raykafka RF=3 every replica's
segment files on disk reach the same size (followers copy the leader's
batches byte for byte). A failed check is FAIL, never a number.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import repl_profile
from bench.matrix_report import print_table_head
from bench.phases import finish_client, start_client
from bench.run import StopsEverything, begin_run, config_of, save_results, warn_if_loaded
from bench.targets import OTHER_CPU_WARN, PYTHON, REPO, RESULTS, RaykafkaTarget, TansuTarget, TargetError


class RaykafkaClusterTarget(RaykafkaTarget):
    """``raykafka start --nodes N`` on one machine; bootstrap = every broker."""

    def __init__(self, workdir, start_timeout, nodes: int, cmd=None):
        super().__init__(workdir, start_timeout, None, cmd)
        self.nodes = nodes
        self.data_dir: Path | None = None
        self.brokers: list[tuple[int, str, int]] = []

    def _start(self) -> str:
        data = self.data_dir = self.workdir / f"raykafka-data-{self.starts}"
        data.mkdir()
        env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
                   RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")
        cmd = self._command() + ["start", "--nodes", str(self.nodes), "--data-dir", str(data),
                                 "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
        self._spawn(cmd, r"raykafka ready on (\S+):(\d+)", env=env, cwd=REPO)
        self._wait_pattern()
        # The pump writes (and flushes) every line before it matches the
        # ready line, so the per-broker lines are in the log by now.
        text = Path(self.logs[-1]).read_text(errors="replace")
        self.brokers = [(int(b), h, int(p)) for b, h, p in
                        re.findall(r"raykafka broker (\d+) on (\S+):(\d+)", text)]
        if len(self.brokers) != self.nodes:
            raise TargetError(f"raykafka printed {len(self.brokers)} broker lines for "
                              f"--nodes {self.nodes}:\n{self.pump.tail()}")
        return ",".join(f"{h}:{p}" for _, h, p in self.brokers)

    def log_dirs(self) -> dict[int, list[str]]:
        """broker id -> its log dirs, from the nodes.json the CLI writes."""
        try:
            nodes = json.loads((self.data_dir / "nodes.json").read_text())
            return {n["broker_id"]: n["log_dirs"] for n in nodes}
        except (OSError, ValueError, KeyError, TypeError):
            return {}


def run_client(t, bootstrap: str, topic: str, rf: int, min_insync: int, acks: str,
               records: int, rate: float, a, *, create: bool, delete: bool, expect_hw: int,
               tag: str, replica_dirs: dict | None = None, pacing: str = "tick") -> dict:
    cmd = [PYTHON, "-m", "bench.repl_client", "--bootstrap", bootstrap, "--topic", topic,
           "--partitions", str(a.partitions), "--replication-factor", str(rf),
           "--min-insync", str(min_insync), "--acks", acks, "--records", str(records),
           "--record-size", str(a.record_size), "--rate", str(rate),
           "--linger-ms", str(a.linger_ms), "--timeout", str(a.phase_timeout),
           "--batch-size", str(a.batch_size), "--pacing", pacing,
           "--broker-pid", str(t.proc.pid if t.proc else 0),
           "--expect-hw", str(expect_hw)] + (["--create"] if create else []) + (
               ["--unkeyed"] if a.unkeyed else []) + (
               ["--delete-after"] if delete else []) + (
               ["--replica-dirs", json.dumps(replica_dirs),
                "--replica-timeout", str(a.replica_timeout)] if replica_dirs else [])
    err_log = t.workdir / f"{topic}-{tag}.stderr"
    limit = a.phase_timeout + 180  # create + ready + produce + HW wait
    # "phase" of the result is replaced by the phase's description (run_round).
    return finish_client(start_client(cmd, err_log), err_log, limit, tag)


def profile_snapshot(t, topic: str, a) -> dict | None:
    """bench.repl_profile's snapshot of the topic's replicas and the nodes'
    edges and purgatories (a subprocess: it joins the cluster's Ray)."""
    import subprocess

    cmd = [PYTHON, "-m", "bench.repl_profile", "--nodes-json", str(t.data_dir / "nodes.json"),
           "--topic", topic, "--partitions", str(a.partitions)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
        return json.loads(done.stdout)
    except (subprocess.SubprocessError, ValueError) as exc:
        t.note(f"profile snapshot failed: {exc}")
        return None


def profile_figures(res: dict) -> dict:
    """The profile's headline figures for one phase: CPU per acknowledged MB by
    component, calls per appended record set, follower fetch sizes, append
    -> high watermark time."""
    prof = res["profile"]
    c = prof["counters"]
    mb = res["bytes"] / 1e6
    sets = max(1, c.get("append_sets", 0))
    served = c.get("follower_fetches", 0)
    with_data = served - c.get("follower_fetch_empty", 0)
    return {
        "mb": round(mb, 2),
        "cpu_ms_per_mb": {k: round(v * 1000 / mb, 2) for k, v in prof["cpu_s"].items()} if mb else {},
        "append_calls_per_set": round(c.get("append_calls", 0) / sets, 3),
        "follower_fetches_per_set": round(served / sets, 2),
        "empty_follower_fetches": c.get("follower_fetch_empty", 0),
        "progress_reports_per_set": round(c.get("progress_reports", 0) / sets, 2),
        "commit_waits_per_set": round(c.get("commit_waits", 0) / sets, 2),
        "commit_notices_per_set": round(c.get("commit_notices", 0) / sets, 2),
        "fetches_as_slices": f"{c.get('fetched_as_slices', 0)}/{c.get('fetches_sent', 0)}",
        "mean_set_kb": round(c.get("append_bytes", 0) / sets / 1024, 1),
        "mean_follower_fetch_kb": round(c.get("follower_fetch_bytes", 0) / with_data / 1024, 1) if with_data else 0,
        "commit_mean_ms": round(c["commit_total_ms"] / c["commit_count"], 2) if c.get("commit_count") else None,
        "commit_max_ms": c.get("commit_max_ms"),
        "commit_histogram": c.get("commit_histogram"),
        "serve_mean_ms": round(c["serve_total_ms"] / c["serve_count"], 2) if c.get("serve_count") else None,
        "serve_max_ms": c.get("serve_max_ms"),
        "serve_histogram": c.get("serve_histogram"),
        "follower_apply_mean_ms": round(c.get("apply_total_ms", 0) / (c.get("apply_count") or 1), 2),
    }


def print_profile(ph: dict, res: dict) -> None:
    f = res["profile_figures"] = profile_figures(res)
    cpu = " ".join(f"{k} {v}" for k, v in f["cpu_ms_per_mb"].items())
    print(f"    profile RF={ph['rf']} acks={ph['acks']} {ph['mode']}: CPU ms/MB {cpu}; per record set: "
          f"{f['append_calls_per_set']} append calls, {f['follower_fetches_per_set']} follower fetches "
          f"({f['empty_follower_fetches']} empty; {f['mean_follower_fetch_kb']} KiB each with data), "
          f"{f['progress_reports_per_set']} progress reports, {f['commit_waits_per_set']} commit waits, "
          f"{f['commit_notices_per_set']} commit notices; "
          f"fetches answered as slices {f['fetches_as_slices']}; sets {f['mean_set_kb']} KiB; "
          f"append->HW mean {f['commit_mean_ms']} ms max {f['commit_max_ms']} ms "
          f"hist(<=1,2,5,10,20,50,100,200,500,1000,>) {f['commit_histogram']}; of which append->"
          f"answer to a follower mean {f['serve_mean_ms']} ms max {f['serve_max_ms']} ms hist "
          f"{f['serve_histogram']}; follower answer->next fetch mean {f['follower_apply_mean_ms']} ms",
          flush=True)


def acks_order(round_index: int) -> tuple[str, str]:
    """acks=1 first in even rounds, acks=all first in odd ones, so a drift
    within a round does not always land on the same setting. There is one
    here: the broker CPU per GB grows with what a round has written (external
    workload, 600,000 records per phase, 2026-11-29: a third and fourth phase
    on the same topic cost 1.5-2x the first, whatever their acks), and with
    acks=1 always first, acks=all came out at 1.10-1.38x of acks=1 per GB in
    every round (median 1.33), alternated at a median of 1.02. An even
    --repeat balances the two orders exactly."""
    return ("1", "all") if round_index % 2 == 0 else ("all", "1")


def phases_for(name: str, a, round_index: int = 0) -> list[dict]:
    """The phases of one target, in the order they run. Phases with the same
    rf share one topic (created by the first, deleted after the last)."""
    out = []
    combos = []
    if name == "raykafka":
        combos.append((a.nodes if a.rf is None else a.rf, a.min_insync))
        if not a.no_rf1:
            combos.append((1, 0))
    else:
        combos.append((1, 0))
    for rf, mis in combos:
        if name == "raykafka":
            # Creates the topic and starts its replicas outside the timed phases: a fresh
            # cluster's first produce otherwise pays every replica's process start (its
            # replicas start on first use), and that landed on whichever phase came first.
            out.append({"target": name, "rf": rf, "min_insync": mis, "acks": "1",
                        "mode": "warmup", "records": 2000, "rate": 0})
        for acks in acks_order(round_index):
            out.append({"target": name, "rf": rf, "min_insync": mis, "acks": acks,
                        "mode": "max", "records": a.records, "rate": 0})
            if not a.no_paced:
                # --pacing both: the old busy-polling client first, then the ticking one.
                for pacing in (("spin", "tick") if a.pacing == "both" else (a.pacing,)):
                    out.append({"target": name, "rf": rf, "min_insync": mis, "acks": acks,
                                "mode": paced_mode(a) + (" spin" if pacing == "spin" else ""),
                                "records": a.latency_records, "rate": a.rate, "pacing": pacing,
                                "rate_of_max": a.rate_of_max})
        if a.profile and name == "raykafka":
            # Deletes the topic, so the last profiled phase can be read first.
            out.append({"target": name, "rf": rf, "min_insync": mis, "acks": "1",
                        "mode": "cleanup", "records": 100, "rate": 0})
    return out


def paced_mode(a) -> str:
    """The paced phases' label: a fixed rate, or a fraction of the round's flat-out rate."""
    return f"{a.rate_of_max:g}x max" if a.rate_of_max else f"{a.rate:g}/s"


def paced_rate(ph: dict, done: list[dict]) -> float:
    """records/s of a paced phase: --rate, or --rate-of-max times the records/s of this
    round's flat-out phase with the same RF and acks (0 when that phase failed)."""
    if not ph.get("rate_of_max"):
        return ph["rate"]
    for res in reversed(done):
        p = res["phase"]
        if p["rf"] == ph["rf"] and p["acks"] == ph["acks"] and p["mode"] == "max":
            return round(ph["rate_of_max"] * res["records_s"]) if res.get("ok") else 0
    return 0


def key_of(ph: dict) -> str:
    return f"{ph['target']}|rf{ph['rf']}|acks={ph['acks']}|{ph['mode']}"


def continuity_error(ranges: dict, ends: dict) -> str | None:
    """Each phase's offsets must start where the previous phase on the same
    topic ended (at 0 for the first): no record lost or duplicated across
    phases. ``ends`` (partition -> next offset) is updated."""
    bad = []
    for pid, (lo, hi) in ranges.items():
        want = ends.get(pid, 0)
        if lo != want:
            bad.append(f"partition {pid} starts at {lo}, expected {want}")
        ends[pid] = hi + 1
    return "; ".join(bad) or None


def run_round(t, r: int, a, run_id: str) -> list[dict]:
    done = []
    t0 = time.monotonic()
    try:
        bootstrap = t.start()
        up = round(time.monotonic() - t0, 1)
        print(f"  {t.name} #{r}: up on {bootstrap} in {up}s", flush=True)
        phases = phases_for(t.name, a, r)
        held: dict[str, int] = {}  # topic -> records produced to it so far
        ends: dict[str, dict] = {}  # topic -> partition -> next offset
        for i, ph in enumerate(phases):
            if ph.get("rate_of_max"):
                ph = dict(ph, rate=paced_rate(ph, done))
                if ph["rate"] <= 0:
                    print(f"  {t.name} #{r} RF={ph['rf']} acks={ph['acks']:3s} {ph['mode']}: skipped, "
                          f"no flat-out rate to pace at", flush=True)
                    continue
                print(f"  {t.name} #{r} RF={ph['rf']} acks={ph['acks']:3s} {ph['mode']}: "
                      f"paced at {ph['rate']:g} records/s", flush=True)
            topic = f"repl-{run_id}-{t.name}-r{r}-rf{ph['rf']}"
            create = topic not in held
            last = i + 1 == len(phases) or phases[i + 1]["rf"] != ph["rf"]
            held[topic] = held.get(topic, 0) + ph["records"]
            dirs = None
            if isinstance(t, RaykafkaClusterTarget) and ph["rf"] > 1:
                dirs = t.log_dirs()
                if not dirs:
                    t.note("nodes.json not found: replica files on disk were not checked")
            tag = f"acks{ph['acks']}-{ph['mode'] if ph['rate'] == 0 else 'paced-' + ph['pacing']}"
            profiling = a.profile and isinstance(t, RaykafkaClusterTarget) and not create
            before = profile_snapshot(t, topic, a) if profiling else None
            res = run_client(t, bootstrap, topic, ph["rf"], ph["min_insync"], ph["acks"],
                             ph["records"], ph["rate"], a, create=create,
                             delete=last and not a.keep_topics, expect_hw=held[topic],
                             tag=tag, replica_dirs=dirs, pacing=ph.get("pacing", "tick"))
            res.update(phase=ph, key=key_of(ph), round=r, startup_s=up)
            if before is not None and res.get("ok") and not last:
                after = profile_snapshot(t, topic, a)
                if after is not None:
                    res["profile"] = repl_profile.delta(before, after)
                    print_profile(ph, res)
            if res.get("ok") and ends.get(topic, {}) is not None:
                err = continuity_error(res.get("offset_ranges") or {},
                                       ends.setdefault(topic, {}))
                if err:
                    res.update(ok=False, error=f"offsets do not continue the previous phase "
                                               f"on {topic}: {err}")
            if not res.get("ok"):
                ends[topic] = None  # what the topic holds is unknown from here on
            lat = res.get("latency_ms") or {}
            cpu = res.get("cpu") or {}
            print(f"  {t.name} #{r} RF={ph['rf']} acks={ph['acks']:3s} {ph['mode']:>7s} " + (
                f"{res['mb_s']:7.1f} MB/s {res['records_s']:8.0f} rec/s  p50 {lat.get('p50')} "
                f"p99 {lat.get('p99')} ms ({res['elapsed_s']:.2f}s; CPU% client "
                f"{cpu.get('client_cpu_pct')} broker {cpu.get('broker_cpu_pct')} other "
                f"{cpu.get('other_cpu_pct')}; broker CPU-s/GB {res.get('broker_cpu_s_per_gb')})" + (
                    f"; replicas equal after {res['replica_files']['after_s']}s"
                    if res.get("replica_files", {}).get("ok") else "")
                if res.get("ok") else f"FAIL: {res.get('error')}"), flush=True)
            for w in res.get("warnings", []):
                print(f"  {t.name} #{r}: warning: {w}", flush=True)
            if res.get("latency_timeline") and lat.get("p99", 0) > 50:
                # [second, records, p99 ms, max ms]: one stall or a spread tail
                print(f"    per second of send time: {res['latency_timeline']}", flush=True)
            done.append(res)
            if ph["mode"] == "warmup":
                # The warm-up woke the topic's replicas; each node now starts spare
                # processes to replace the ones adopted (~0.5 s of a core each), which
                # would land on the first timed phase.
                waited = settle()
                print(f"  {t.name} #{r}: machine settled {waited:.1f}s after the warm-up", flush=True)
    finally:
        t.stop()
    return done


def _busy_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def settle(busy_below: float = 0.35, quiet_windows: int = 2, max_s: float = 30.0) -> float:
    """Wait until the machine's cores were less than ``busy_below`` busy in
    ``quiet_windows`` one-second windows in a row (or ``max_s`` passed); -> seconds
    waited. One quiet second was not enough: in this session's runs, 8 of the 20
    first timed phases that followed a 1-second settle ran at a fraction of the
    rate (67-149 MB/s at RF=3 against ~300), and none of the 51 that followed a
    2-4 s settle did (presumably the nodes' spare replica starts after the
    warm-up had not begun yet)."""
    start = time.monotonic()
    quiet = 0
    while time.monotonic() - start < max_s and quiet < quiet_windows:
        busy0, total0 = _busy_ticks()
        time.sleep(1.0)
        busy1, total1 = _busy_ticks()
        quiet = quiet + 1 if total1 > total0 and (busy1 - busy0) / (total1 - total0) < busy_below else 0
    return time.monotonic() - start


def summarize(results: list[dict]) -> dict:
    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["key"], []).append(r)
    out = {}
    for k, rs in by.items():
        ph = rs[0]["phase"]
        if any(not r.get("ok") for r in rs):
            bad = [r for r in rs if not r.get("ok")]
            out[k] = {"ok": False, "phase": ph,
                      "error": f"{len(bad)}/{len(rs)} rounds failed: {bad[0].get('error')}"}
            continue
        med = lambda f: statistics.median(f(r) for r in rs)
        s = {"ok": True, "phase": ph, "mb_s": med(lambda r: r["mb_s"]),
             "records_s": med(lambda r: r["records_s"]),
             "elapsed_s": med(lambda r: r["elapsed_s"]),
             "all_mb_s": [round(r["mb_s"], 1) for r in rs],
             "best_mb_s": max(r["mb_s"] for r in rs)}
        keyed = all(r.get("latency_ms") for r in rs)  # unkeyed phases have no per-record latency
        for q in ("p50", "p99", "p999", "max"):
            s[f"{q}_ms"] = med(lambda r: r["latency_ms"][q]) if keyed else None
        gb = [r.get("broker_cpu_s_per_gb") for r in rs]
        s["broker_cpu_s_per_gb"] = None if None in gb else statistics.median(gb)
        for c in ("client_cpu_pct", "broker_cpu_pct", "other_cpu_pct"):
            vals = [r.get("cpu", {}).get(c) for r in rs]
            s[c] = statistics.median(vals) if None not in vals else None
        s["max_other_cpu_pct"] = max((r.get("cpu", {}).get("other_cpu_pct") or 0) for r in rs)
        hw = [r.get("hw_catchup_s") for r in rs]
        s["hw_catchup_s"] = None if None in hw else statistics.median(hw)
        out[k] = s
    return out


def ratios(summary: dict, a) -> list[dict]:
    """raykafka RF=3 vs tansu RF=1, and raykafka RF=3 vs raykafka RF=1."""
    rf = a.nodes if a.rf is None else a.rf
    out = []
    modes = ["max"] + ([] if a.no_paced else [paced_mode(a)] + (
        [f"{paced_mode(a)} spin"] if a.pacing == "both" else []))
    for other, other_rf, label in (("tansu", 1, f"raykafka RF={rf} / tansu RF=1"),
                                   ("raykafka", 1, f"raykafka RF={rf} / raykafka RF=1")):
        for acks in ("1", "all"):
            for mode in modes:
                x = summary.get(f"raykafka|rf{rf}|acks={acks}|{mode}")
                y = summary.get(f"{other}|rf{other_rf}|acks={acks}|{mode}")
                if not x or not y:
                    continue
                ok = x["ok"] and y["ok"]
                div = lambda k: x[k] / y[k] if ok and y[k] else None
                out.append({"pair": label, "acks": acks, "mode": mode,
                            "mb_s": div("mb_s"), "best_mb_s": div("best_mb_s"),
                            "p50": div("p50_ms"), "p99": div("p99_ms"),
                            "cpu_gb": div("broker_cpu_s_per_gb")})
    # Issue 27's targets: acks=all against acks=1 on the replicated topic, and
    # against RF=1 acks=all (throughput and broker CPU-s per GB).
    for label, xk, yk in ((f"raykafka RF={rf} all / RF={rf} acks=1", f"rf{rf}|acks=all", f"rf{rf}|acks=1"),
                          (f"raykafka RF={rf} all / RF=1 all", f"rf{rf}|acks=all", "rf1|acks=all")):
        for mode in modes:
            x, y = summary.get(f"raykafka|{xk}|{mode}"), summary.get(f"raykafka|{yk}|{mode}")
            if x and y and x is not y:
                ok = x["ok"] and y["ok"]
                div = lambda k: x[k] / y[k] if ok and x.get(k) is not None and y.get(k) else None
                out.append({"pair": label, "acks": "all", "mode": mode, "mb_s": div("mb_s"),
                            "best_mb_s": div("best_mb_s"), "p50": div("p50_ms"), "p99": div("p99_ms"),
                            "cpu_gb": div("broker_cpu_s_per_gb")})
    return out


def print_report(summary: dict, rat: list[dict], a, machine: dict, notes: list[str]) -> None:
    rf = a.nodes if a.rf is None else a.rf
    print()
    print(f"Workload: {a.records} records x {a.record_size} B flat out ('max') and "
          f"{a.latency_records} records paced at " + (
              f"{a.rate_of_max:g} x the round's flat-out records/s with the same RF and acks"
              if a.rate_of_max else f"{a.rate:g} records/s") + f" ({a.pacing} pacing); "
          f"{'unkeyed' if a.unkeyed else 'keyed'}, {a.partitions} partitions, lz4, "
          f"linger.ms={a.linger_ms:g}, batch.size={a.batch_size}, a delivery report per record; "
          f"median of {a.repeat} round(s); MB = 10^6 bytes of record values")
    print(f"raykafka: {a.nodes} brokers (one per Ray node) on this machine, topic RF={rf}, "
          f"min.insync.replicas={a.min_insync}. tansu: ONE broker, memory storage, RF=1 "
          f"(it cannot replicate): its acks=all waits for one replica only.")
    print(f"Machine: {machine['cpus_usable']} cores shared by the client, every broker and "
          f"other people's work.")
    print()
    hdr = (f"{'target':9s} {'RF':>2s} {'acks':>4s} {'mode':>7s} {'MB/s':>7s} {'records/s':>9s} "
           f"{'p50 ms':>8s} {'p99 ms':>8s} {'p99.9':>8s} {'CPU%cli':>7s} {'brk':>5s} "
           f"{'other':>5s} {'CPUs/GB':>7s}  runs MB/s")
    print_table_head(hdr)
    f0 = lambda v: f"{v:.0f}" if isinstance(v, (int, float)) else "?"
    f1 = lambda v, w: f"{v:{w}.1f}" if isinstance(v, (int, float)) else f"{'-':>{w}s}"
    for k, s in summary.items():
        ph = s["phase"]
        head = f"{ph['target']:9s} {ph['rf']:>2d} {ph['acks']:>4s} {ph['mode']:>7s}"
        if not s["ok"]:
            print(f"{head} {'FAIL':>7s}  {s['error'].splitlines()[0][:110]}")
            continue
        print(f"{head} {s['mb_s']:7.1f} {s['records_s']:9.0f} {f1(s['p50_ms'], 8)} "
              f"{f1(s['p99_ms'], 8)} {f1(s['p999_ms'], 8)} {f0(s['client_cpu_pct']):>7s} "
              f"{f0(s['broker_cpu_pct']):>5s} {f0(s['other_cpu_pct']):>5s} "
              f"{f1(s.get('broker_cpu_s_per_gb'), 7)}  {s['all_mb_s']}")
    print("latency = delivery report time - send time, per record; in 'max' rows every record "
          "is queued at once, so latency there is mostly the producer's own queue")
    print("CPU% = % of ONE core during the timed window: cli = client process, brk = broker "
          "process tree (all Ray nodes), other = everything else (high = disturbed); CPUs/GB = "
          "broker CPU-seconds per GB of record values acknowledged")
    if rat:
        print()
        print(f"{'ratio':38s} {'acks':>4s} {'mode':>7s} {'MB/s':>6s} {'best':>6s} "
              f"{'p50':>6s} {'p99':>6s} {'CPU/GB':>6s}")
        fr = lambda v: f"{v:6.2f}" if isinstance(v, float) else f"{'n/a':>6s}"
        for r in rat:
            print(f"{r['pair']:38s} {r['acks']:>4s} {r['mode']:>7s} {fr(r['mb_s'])} "
                  f"{fr(r['best_mb_s'])} {fr(r['p50'])} {fr(r['p99'])} {fr(r.get('cpu_gb'))}")
        print("(MB/s: ratio of medians, > 1 = raykafka faster; best: ratio of best rounds; "
              "p50/p99: latency ratios, > 1 = raykafka slower; CPU/GB: broker CPU per GB ratio)")
    for n in notes:
        print(f"note: {n}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.replication",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=None,
                    help="records per flat-out phase (100,000; 150,000 with --workload external)")
    ap.add_argument("--latency-records", type=int, default=20000, help="records per paced phase")
    ap.add_argument("--rate", type=float, default=5000, help="records/s in the paced phases")
    ap.add_argument("--rate-of-max", type=float, default=0, metavar="F",
                    help="pace at F times the records/s of the same round's flat-out phase with the "
                         "same RF and acks instead of --rate (issue 27's target: 0.5, half the max)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=3, help="raykafka brokers (Ray nodes)")
    ap.add_argument("--rf", type=int, default=None, help="raykafka replication factor "
                    "(default: --nodes)")
    ap.add_argument("--min-insync", type=int, default=2, help="min.insync.replicas of the "
                    "replicated raykafka topic")
    ap.add_argument("--linger-ms", type=float, default=5)
    ap.add_argument("--batch-size", type=int, default=1000000, help="librdkafka batch.size")
    ap.add_argument("--unkeyed", action="store_true",
                    help="null keys (librdkafka's partitioner spreads them); no per-record latency")
    ap.add_argument("--pacing", choices=("tick", "spin", "both"), default="tick",
                    help="paced phases' client: tick (waits >= 1 ms between sends), spin (the old "
                         "busy-polling client, a core at nice 0), both (spin then tick, same run)")
    ap.add_argument("--workload", choices=("default", "external"), default="default",
                    help="external: issue 27's outside workload (150,000 unkeyed 1 KiB records flat "
                         "out, lz4, linger 5 ms, batch 1 MB, 3 partitions, 3 nodes, median of 3 "
                         "rounds, no paced phases; RF=1/RF=3 x acks=1/all with broker CPU-s per GB); "
                         "explicit --records/--repeat still apply")
    ap.add_argument("--targets", default="raykafka,tansu")
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds (interleaved); median reported (1; 3 with --workload external)")
    ap.add_argument("--no-rf1", action="store_true", help="skip raykafka's RF=1 baseline phases")
    ap.add_argument("--no-paced", action="store_true", help="skip the paced latency phases")
    ap.add_argument("--keep-topics", action="store_true",
                    help="do not delete a topic after its last phase (default: delete, "
                         "so the RF=1 phases run without the RF=3 topic's replicas)")
    ap.add_argument("--raykafka-cmd", metavar="CMD")
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--phase-timeout", type=float, default=60.0,
                    help="message.timeout.ms and the final flush() limit, in seconds")
    ap.add_argument("--replica-timeout", type=float, default=20.0,
                    help="how long RF>1 replicas may take to reach equal sizes on disk")
    ap.add_argument("--profile", action="store_true",
                    help="raykafka: per phase, CPU per acknowledged MB by component, calls per "
                         "record set, follower fetch sizes and append -> HW times "
                         "(bench.repl_profile)")
    ap.add_argument("--output", type=Path)
    a = ap.parse_args(argv)
    external = a.workload == "external"
    if external:
        a.unkeyed, a.no_paced = True, True
    if a.records is None:
        a.records = 150000 if external else 100000
    if a.repeat is None:
        a.repeat = 3 if external else 1
    a.targets = [x.strip() for x in a.targets.split(",") if x.strip()]
    if not a.targets or any(x not in ("raykafka", "tansu") for x in a.targets):
        ap.error("--targets: a subset of raykafka,tansu")
    if min(a.records, a.latency_records, a.record_size, a.partitions, a.nodes, a.repeat) <= 0 \
            or a.rate <= 0 or not 0 <= a.rate_of_max <= 1:
        ap.error("counts, sizes and --rate must be positive")
    rf = a.nodes if a.rf is None else a.rf
    if not 1 <= rf <= a.nodes or not 0 <= a.min_insync <= rf:
        ap.error("need 1 <= --rf <= --nodes and 0 <= --min-insync <= rf")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    machine, run_id = begin_run()
    print(f"raykafka replication bench {run_id}: targets={','.join(a.targets)}; "
          f"{machine['cpus_usable']} cores shared; load average "
          f"{machine['loadavg_at_start'][0]:.2f}", flush=True)
    warn_if_loaded(machine)
    workroot = Path(tempfile.mkdtemp(prefix=f"raykafka-repl-bench-{run_id}-"))
    targets = []
    for name in a.targets:
        (workroot / name).mkdir()
        if name == "raykafka":
            targets.append(RaykafkaClusterTarget(workroot / name, a.start_timeout, a.nodes,
                                                 a.raykafka_cmd))
        else:
            targets.append(TansuTarget(workroot / name, a.start_timeout))
    results: list[dict] = []
    errors: dict[str, str] = {}
    started = time.monotonic()
    with StopsEverything(targets) as run:
        for r in range(a.repeat):
            print(f"[round {r + 1}/{a.repeat}]", flush=True)
            for t in targets:
                if t.name in errors:
                    continue
                try:
                    results.extend(run_round(t, r, a, run_id))
                except TargetError as e:
                    print(f"  {t.name}: FAIL: {e}", flush=True)
                    errors[t.name] = str(e)
    interrupted = run.interrupted

    summary = summarize(results)
    for name, err in errors.items():  # a target that never came up: every phase FAILs
        for ph in phases_for(name, a):
            summary.setdefault(key_of(ph), {"ok": False, "phase": ph, "error": err})
    rat = ratios(summary, a)
    notes = [n for t in targets for n in t.notes]
    print_report(summary, rat, a, machine, notes)
    if interrupted:
        print("INTERRUPTED: only the phases completed before the interrupt are shown")
    busy = max((s.get("max_other_cpu_pct") or 0 for s in summary.values() if s["ok"]), default=0)
    if busy > OTHER_CPU_WARN:
        print(f"warning: other processes used up to {busy:.0f}% of a core during timed windows; "
              f"ratios are unreliable, rerun when the machine is quiet and/or with --repeat 3")
    doc = {"run_id": run_id, "interrupted": interrupted, "machine": machine,
           "config": config_of(a),
           "summary": summary, "ratios": rat, "results": results, "target_errors": errors,
           "notes": notes, "wall_s": round(time.monotonic() - started, 1),
           "workdir": str(workroot)}
    path = a.output or RESULTS / f"replication-{run_id}.json"
    save_results(doc, path, indent=2)
    print(f"\nresults: {path}  (broker/client logs: {workroot}; {doc['wall_s']}s)")
    failed = interrupted or bool(errors) or any(not s["ok"] for s in summary.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
