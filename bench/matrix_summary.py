"""The --matrix rows and their summaries: medians per cell, ratios against
the baseline, latency, memory, idle replicas, and issue 8's goals (reported,
never asserted)."""
from __future__ import annotations

import statistics

from bench.phases import size_label, Workload


MATRIX_RECORD_SIZES = (1024, 16384)
MATRIX_PARTITIONS = (1, 6)
MATRIX_ACKS = ("1", "all")
# Consume rows read back the topic its acks=1 produce row wrote (the other
# topics are read too, to verify them; those figures stay in the JSON).
CONSUME_RECORD_SIZE = 16384
CONSUME_ACKS = "1"
BASELINE = "tansu"
# The row whose raykafka records/s sets the latency phase's rate (half of it).
PEAK_ROW = "produce 1KiB p1 acks=1"
REPLICA_ACTOR_CLASS = "ReplicaActor"
# Issue 8's targets: reported against each run's figures, never asserted.
GOAL_PRODUCE_RATIO = 1.2
GOAL_CONSUME_RATIO = 1.5
GOAL_P99_MS = 20.0
GOAL_IDLE_PSS_MIB = 60.0
MIB = 1024 * 1024


def matrix_workloads(row_mib: float) -> list[Workload]:
    """Every (record size, partitions, acks) case, each writing row_mib MiB
    of record values (so 16 KiB rows have 1/16 of the records)."""
    row_bytes = int(row_mib * MIB)
    return [Workload(max(1, row_bytes // size), size, parts, acks)
            for size in MATRIX_RECORD_SIZES for parts in MATRIX_PARTITIONS
            for acks in MATRIX_ACKS]


def matrix_rows(workloads: list[Workload]) -> list[dict]:
    """The table's rows in order: a produce row per case, then the consume
    rows. `case` names the topic a row's figure comes from."""
    rows = [{"row": f"produce {wl.case_id}", "phase": "produce", "case": wl.case_id,
             "records": wl.records, "record_size": wl.record_size,
             "partitions": wl.partitions, "acks": wl.acks} for wl in workloads]
    rows += [{"row": f"consume {size_label(wl.record_size)} p{wl.partitions}",
              "phase": "consume", "case": wl.case_id, "records": wl.records,
              "record_size": wl.record_size, "partitions": wl.partitions, "acks": wl.acks}
             for wl in workloads
             if wl.record_size == CONSUME_RECORD_SIZE and wl.acks == CONSUME_ACKS]
    return rows


def _first_error(case: dict) -> str:
    for phase in ("create", "produce", "consume"):
        r = case.get(phase)
        if r is not None and not r.get("ok"):
            return f"{phase}: {r.get('error') or 'failed'}"
    return case.get("error") or "not run"


def cell_from_case(phase: str, case: dict | None) -> dict:
    """One round's figure for one row from the case (topic) it reads.
    A produce figure counts only if the read-back of the same topic found
    every record exactly once: a fast but lossy broker is FAIL. A consume
    figure of a topic the broker had already truncated (the mock's 5 MiB per
    partition) is n/a: fewer bytes were read than the row says."""
    if case is None:
        return {"status": "fail", "error": "not run"}
    prod, cons = case.get("produce"), case.get("consume")
    if case.get("error") or not (prod and prod.get("ok")) or not (cons and cons.get("ok")):
        return {"status": "fail", "error": _first_error(case)}
    src = prod if phase == "produce" else cons
    if phase == "consume" and cons.get("retention_deleted_records"):
        return {"status": "na", "reason":
                f"broker deleted {cons['retention_deleted_records']} of {prod['records']} "
                f"records before the read (retention), kept {cons.get('kept_records')}"}
    cpu = src.get("cpu") or {}
    return {"status": "ok", "mb_s": src["mb_s"], "records_s": src["records_s"],
            "elapsed_s": src["elapsed_s"],
            "partitions": cons.get("partitions") or prod.get("partitions_seen"),
            "client_cpu_pct": cpu.get("client_cpu_pct"),
            "broker_cpu_pct": cpu.get("broker_cpu_pct"),
            "other_cpu_pct": cpu.get("other_cpu_pct")}


def _median_or_none(values: list):
    return statistics.median(values) if values and None not in values else None


def summarize_cell(cells: list[dict]) -> dict:
    """Rounds of one (row, target) -> one table cell. One failed round fails
    the cell (a lost record is never averaged away); n/a if any round was
    n/a; otherwise medians over rounds."""
    if not cells:
        return {"status": "fail", "error": "not run"}
    fails = [c for c in cells if c["status"] == "fail"]
    if fails:
        prefix = f"{len(fails)}/{len(cells)} rounds failed: " if len(fails) < len(cells) else ""
        return {"status": "fail", "error": prefix + fails[0]["error"]}
    nas = [c for c in cells if c["status"] == "na"]
    if nas:
        return {"status": "na", "reason": nas[0]["reason"]}
    parts = {c["partitions"] for c in cells}
    return {
        "status": "ok",
        "mb_s": statistics.median(c["mb_s"] for c in cells),
        "records_s": statistics.median(c["records_s"] for c in cells),
        "elapsed_s": statistics.median(c["elapsed_s"] for c in cells),
        # Interference only ever slows a run down: the best round is the
        # least disturbed one.
        "best_mb_s": max(c["mb_s"] for c in cells),
        "all_mb_s": [round(c["mb_s"], 1) for c in cells],
        "partitions": parts.pop() if len(parts) == 1 else sorted(parts, key=str),
        **{k: _median_or_none([c[k] for c in cells])
           for k in ("client_cpu_pct", "broker_cpu_pct", "other_cpu_pct")},
    }


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def summarize_matrix(rows: list[dict], sessions: dict[str, list[dict]]) -> dict:
    """{row: {target: cell}} with each cell's ratio to the baseline (Tansu)
    as ratio of medians (`ratio`) and of best rounds (`best_ratio`)."""
    out = {}
    for row in rows:
        cells = {}
        for target, target_sessions in sessions.items():
            per_round = []
            for s in target_sessions:
                case = s.get("cases", {}).get(row["case"])
                if case is None and s.get("error"):  # the broker did not start
                    per_round.append({"status": "fail", "error": s["error"]})
                else:
                    per_round.append(cell_from_case(row["phase"], case))
            cells[target] = summarize_cell(per_round)
        base = cells.get(BASELINE, {})
        for cell in cells.values():
            ok = cell["status"] == "ok" and base.get("status") == "ok"
            cell["ratio"] = ratio(cell["mb_s"], base["mb_s"]) if ok else None
            cell["best_ratio"] = ratio(cell["best_mb_s"], base["best_mb_s"]) if ok else None
        out[row["row"]] = cells
    return out


def latency_rate(summary: dict, fixed: float | None) -> tuple[float | None, str]:
    """Records/s for the latency phase and where it came from."""
    if fixed:
        return fixed, "--latency-rate"
    cell = summary.get(PEAK_ROW, {}).get("raykafka", {})
    if cell.get("status") != "ok":
        return None, f"no raykafka figure for '{PEAK_ROW}' (and no --latency-rate)"
    return round(cell["records_s"] / 2), f"half of raykafka's median '{PEAK_ROW}' records/s"


def summarize_latency(runs: list[dict]) -> dict:
    """Latency rounds of one target -> medians of p50/p99/p99.9, max of max."""
    if not runs:
        return {"ok": False, "error": "not run"}
    na = [r for r in runs if r.get("na")]
    if na:
        return {"ok": None, "na": na[0]["na"]}
    bad = [r for r in runs if not r.get("ok")]
    if bad:
        return {"ok": False, "error": bad[0].get("error") or "failed"}
    lat = [r["consume"]["latency"] for r in runs]
    out = {"ok": True, "rounds": len(runs),
           **{k: statistics.median(x[k] for x in lat) for k in ("p50_ms", "p99_ms", "p999_ms")},
           "max_ms": max(x["max_ms"] for x in lat),
           "window_records": statistics.median(x["count"] for x in lat),
           "achieved_rate": statistics.median(r["produce"]["achieved_rate"] for r in runs),
           "schedule_lag_max_ms": max(r["produce"]["schedule_lag_max_ms"] or 0 for r in runs),
           "join_s": statistics.median(r["consume"].get("join_s") or 0 for r in runs)}
    for k in ("clients_cpu_pct", "broker_cpu_pct", "other_cpu_pct"):
        out[k] = _median_or_none([(r.get("cpu") or {}).get(k) for r in runs])
    return out


def summarize_memory(target_sessions: list[dict]) -> dict:
    """Broker memory over a target's throughput sessions: medians of what
    the tree held after its rows, the highest sampled RSS."""
    after = [s["memory"]["after_rows"] for s in target_sessions
             if s.get("memory", {}).get("after_rows")]
    started = [s["memory"]["after_start"] for s in target_sessions
               if s.get("memory", {}).get("after_start")]
    if not after:
        return {}
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    return {"rss_after_rows": med(after, "rss_bytes"), "pss_after_rows": med(after, "pss_bytes"),
            "processes": med(after, "processes"),
            "rss_after_start": med(started, "rss_bytes") if started else None,
            "pss_after_start": med(started, "pss_bytes") if started else None,
            "peak_rss": max(max(s["memory"].get("peak_rss_bytes") or 0,
                                s["memory"].get("after_rows", {}).get("rss_bytes", 0))
                            for s in target_sessions)}


def summarize_idle_replicas(procs: list[dict], partitions: int,
                            tree_before: dict | None, tree_after: dict | None) -> dict:
    """Per idle replica actor process: median/min/max PSS, median RSS/USS;
    and how much the whole tree's PSS grew per partition created."""
    out = {"partitions": partitions, "replica_processes": len(procs)}
    if procs:
        pss = sorted(p["pss"] for p in procs)
        out.update(pss_median=statistics.median(pss), pss_min=pss[0], pss_max=pss[-1],
                   rss_median=statistics.median(p["rss"] for p in procs),
                   uss_median=statistics.median(p["uss"] for p in procs))
    if tree_before and tree_after and partitions:
        out["tree_pss_growth_per_partition"] = \
            (tree_after["pss_bytes"] - tree_before["pss_bytes"]) / partitions
    if len(procs) != partitions:
        out["error"] = (f"expected {partitions} ray::{REPLICA_ACTOR_CLASS} processes, "
                        f"found {len(procs)}")
    return out


def goal_report(summary: dict, latency: dict, idle: dict | None) -> list[dict]:
    """Issue 8's four targets against this run's figures."""
    def cell(row):
        return summary.get(row, {}).get("raykafka", {})

    goals = []
    c = cell(PEAK_ROW)
    goals.append({"goal": "produce 1 KiB lz4 acks=1 p1, raykafka/tansu", "value": c.get("ratio"),
                  "unit": "x", "target": f">= {GOAL_PRODUCE_RATIO}x",
                  "met": None if c.get("ratio") is None else c["ratio"] >= GOAL_PRODUCE_RATIO})
    for parts in MATRIX_PARTITIONS:
        c = cell(f"consume {size_label(CONSUME_RECORD_SIZE)} p{parts}")
        goals.append({"goal": f"consume 16 KiB p{parts}, raykafka/tansu", "value": c.get("ratio"),
                      "unit": "x", "target": f">= {GOAL_CONSUME_RATIO}x",
                      "met": None if c.get("ratio") is None else c["ratio"] >= GOAL_CONSUME_RATIO})
    lat = latency.get("raykafka", {})
    p99 = lat.get("p99_ms") if lat.get("ok") else None
    goals.append({"goal": "p99 end-to-end at half of peak, raykafka", "value": p99, "unit": "ms",
                  "target": f"<= {GOAL_P99_MS:g} ms",
                  "met": None if p99 is None else p99 <= GOAL_P99_MS})
    pss = (idle or {}).get("pss_median")
    pss_mib = pss / MIB if pss is not None else None
    goals.append({"goal": "PSS per idle replica actor (median)", "value": pss_mib, "unit": "MiB",
                  "target": f"<= {GOAL_IDLE_PSS_MIB:g} MiB",
                  "met": None if pss_mib is None else pss_mib <= GOAL_IDLE_PSS_MIB})
    return goals
