"""Printing the --matrix report from its summary (bench.matrix_summary)."""
from __future__ import annotations


from bench.matrix_summary import BASELINE, MIB, ratio, REPLICA_ACTOR_CLASS


def _f(v, fmt: str, width: int) -> str:
    return f"{v:{width}{fmt}}" if isinstance(v, (int, float)) else f"{'n/a':>{width}s}"


def cpu_and_runs(cell: dict) -> str:
    """A summary cell's last columns: client, broker and other CPU %, then
    every round's MB/s."""
    return (f"{_f(cell['client_cpu_pct'], '.0f', 5)} {_f(cell['broker_cpu_pct'], '.0f', 5)} "
            f"{_f(cell['other_cpu_pct'], '.0f', 5)}  {cell['all_mb_s']}")


def print_table_head(hdr: str) -> None:
    print(hdr)
    print("-" * len(hdr))


def print_cell(head: str, cell: dict, figures, cut: int) -> None:
    """A table line of one summary cell: head (row, target, partitions),
    then figures(cell) if it has figures, else n/a or FAIL and why (its
    first `cut` characters)."""
    if cell.get("status") == "ok":
        print(f"{head} {figures(cell)}")
    elif cell.get("status") == "na":
        print(f"{head} {'n/a':>8s}  {cell['reason'][:cut]}")
    else:
        err = (cell.get("error") or "not run").splitlines()[0][:cut]
        print(f"{head} {'FAIL':>8s}  {err}")


def print_rows(doc: dict) -> None:
    """The throughput table: one line per (row, target)."""
    targets, summary = doc["config"]["targets"], doc["summary"]
    print()
    hdr = (f"{'row':24s} {'target':9s} {'parts':>5s} {'MB/s':>8s} {'records/s':>10s} "
           f"{'/' + BASELINE:>7s} {'best':>5s} {'cli%':>5s} {'brk%':>5s} {'oth%':>5s}  runs MB/s")
    print_table_head(hdr)
    footnotes = set()
    for row in doc["rows"]:
        label = row["row"]
        for name in targets:
            cell = summary[row["row"]].get(name, {})
            parts = cell.get("partitions")
            ptxt = str(parts) if parts is not None else "-"
            if name == "mock" and cell.get("status") == "ok":
                ptxt += "*"
                footnotes.add("mock")
            print_cell(f"{label:24s} {name:9s} {ptxt:>5s}", cell, lambda c: (
                f"{c['mb_s']:8.1f} {c['records_s']:10.0f} {_f(c['ratio'], '.2f', 7)} "
                f"{_f(c['best_ratio'], '.2f', 5)} {cpu_and_runs(c)}"), 90)
            label = ""
    print("parts = partitions the topic had; cli/brk/oth% = CPU during the timed window in % "
          "of ONE core: client process, broker process tree, everything else.")
    if "mock" in footnotes:
        print("* mock: no CreateTopics, every topic is auto-created with 4 partitions; its "
              "p1 rows write only partition 0, its p6 rows use all 4.")


def print_matrix_report(doc: dict) -> None:
    cfg, machine, summary = doc["config"], doc["machine"], doc["summary"]
    targets = cfg["targets"]
    print()
    print(f"Matrix: {cfg['row_mib']:g} MiB of record values per row (1 KiB: "
          f"{doc['rows'][0]['records']} records, 16 KiB: {doc['rows'][-1]['records']}), keyed, "
          f"lz4, linger.ms=5, batch.size=1000000; median of {cfg['repeat']} interleaved "
          f"round(s); MB = 10^6 bytes of record values; /{BASELINE} = this target's median "
          f"MB/s / {BASELINE}'s (best = same for each side's best round)")
    print(f"Machine: {machine['cpus_usable']} usable cores shared by client and broker; "
          f"load average at start {machine['loadavg_at_start']}, at end "
          f"{machine.get('loadavg_at_end')}")
    if cfg.get("latency_only"):
        print("(--latency-only: no throughput rows were run)")
    else:
        print_rows(doc)

    lat = doc.get("latency") or {}
    if lat.get("rate"):
        print()
        print(f"End-to-end latency at {lat['rate']:.0f} records/s ({lat['rate'] * 1024 / 1e6:.1f} "
              f"MB/s; {lat['rate_source']}): 1 KiB, 1 partition, acks=1, lz4, linger.ms=5, "
              f"subscribed consumer; {cfg['latency_window_s']:g} s window after "
              f"{cfg['latency_warmup_s']:g} s warm-up")
        print(f"{'target':9s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99.9 ms':>9s} {'max ms':>8s} "
              f"{'p99/' + BASELINE:>10s} {'sent rec/s':>10s} {'lag max ms':>10s} "
              f"{'cli%':>5s} {'brk%':>5s} {'oth%':>5s}")
        base = lat["summary"].get(BASELINE, {})
        for name in targets:
            x = lat["summary"].get(name, {})
            if x.get("ok"):
                rp99 = ratio(x["p99_ms"], base.get("p99_ms")) if base.get("ok") else None
                print(f"{name:9s} {x['p50_ms']:8.2f} {x['p99_ms']:8.2f} {x['p999_ms']:9.2f} "
                      f"{x['max_ms']:8.2f} {_f(rp99, '.2f', 10)} {x['achieved_rate']:10.0f} "
                      f"{x['schedule_lag_max_ms']:10.1f} {_f(x.get('clients_cpu_pct'), '.0f', 5)} "
                      f"{_f(x.get('broker_cpu_pct'), '.0f', 5)} {_f(x.get('other_cpu_pct'), '.0f', 5)}")
            elif x.get("na"):
                print(f"{name:9s} n/a: {x['na']}")
            else:
                print(f"{name:9s} FAIL: {(x.get('error') or 'not run').splitlines()[0][:100]}")
        print("lag max = how far the producer's worst burst went out behind its schedule "
              "(a producer that cannot keep the rate shows here); cli/brk/oth% = CPU while "
              "the producer ran: both client processes, broker tree, everything else.")
    elif lat.get("skipped"):
        print(f"\nEnd-to-end latency: not run ({lat['skipped']})")

    mem = doc.get("memory") or {}
    if mem:
        print()
        print(f"Broker memory (MiB; whole process tree the harness started)")
        print(f"{'target':9s} {'RSS after rows':>14s} {'PSS after rows':>14s} {'peak RSS':>9s} "
              f"{'PSS at start':>12s} {'procs':>5s}")
        for name in targets:
            m = mem.get(name) or {}
            if not m:
                print(f"{name:9s} n/a")
                continue
            mib = lambda v: v / MIB if v is not None else None
            print(f"{name:9s} {_f(mib(m['rss_after_rows']), '.0f', 14)} "
                  f"{_f(mib(m['pss_after_rows']), '.0f', 14)} {_f(mib(m['peak_rss']), '.0f', 9)} "
                  f"{_f(mib(m['pss_after_start']), '.0f', 12)} {m['processes']:5.0f}")
        print("RSS counts shared pages once per process (Ray's workers share much); PSS "
              "splits them, so the PSS sum is the tree's real footprint. peak RSS: sampled "
              "every second during the rows.")
    idle = doc.get("idle_replicas")
    if idle:
        print()
        if "pss_median" in idle:
            grow = idle.get("tree_pss_growth_per_partition")
            print(f"raykafka idle replica actors: {idle['partitions']} partitions -> "
                  f"{idle['replica_processes']} ray::{REPLICA_ACTOR_CLASS} processes after "
                  f"{idle['settle_s']:g} s idle; per process PSS median "
                  f"{idle['pss_median'] / MIB:.1f} MiB (min {idle['pss_min'] / MIB:.1f}, max "
                  f"{idle['pss_max'] / MIB:.1f}), RSS {idle['rss_median'] / MIB:.1f}, USS "
                  f"{idle['uss_median'] / MIB:.1f}; whole tree PSS "
                  + (f"+{grow / MIB:.1f} MiB per partition" if grow is not None else "n/a"))
        if idle.get("error"):
            print(f"raykafka idle replica actors: {idle['error']}")

    print()
    print(f"{'issue 8 target':46s} {'measured':>10s} {'goal':>12s}  met")
    for g in doc.get("goals", []):
        v = g["value"]
        shown = f"{v:.2f}{g['unit']}" if g["unit"] == "x" and v is not None else \
            (f"{v:.1f} {g['unit']}" if v is not None else "n/a")
        met = {True: "yes", False: "NO", None: "n/a"}[g["met"]]
        print(f"{g['goal']:46s} {shown:>10s} {g['target']:>12s}  {met}")
    print("(reported, not asserted: the exit status only reflects correctness)")
