"""The benchmark harness's own logic: summarizing rounds into cells, ratios
to the baseline, latency percentiles and pacing, /proc memory parsing and
finding Ray actor workers by process title. No broker is started."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from bench.client import fetch_totals
from bench.latency import latency_summary, latency_timeline, percentile, records_due, window_bounds
from bench.procstat import (
    CpuWindow,
    RssSampler,
    actor_processes,
    cpu_snapshot,
    cpu_split,
    disk_read_bytes,
    is_actor_process,
    parse_smaps_rollup,
    process_memory,
    process_title,
    process_tree,
    tree_memory,
)
from bench.matrix_run import _fmt_case, rotated
from bench.matrix_summary import (
    PEAK_ROW,
    cell_from_case,
    goal_report,
    latency_rate,
    matrix_rows,
    matrix_workloads,
    ratio,
    summarize_cell,
    summarize_idle_replicas,
    summarize_latency,
    summarize_matrix,
)
from bench.phases import Workload

MIB = 1024 * 1024

SMAPS_ROLLUP = """\
55d0c3a6f000-7ffd2b5fe000 ---p 00000000 00:00 0                          [rollup]
Rss:              131552 kB
Pss:               69041 kB
Pss_Dirty:         40120 kB
Pss_Anon:          39876 kB
Pss_File:          29165 kB
Pss_Shmem:             0 kB
Shared_Clean:      60212 kB
Shared_Dirty:       1024 kB
Private_Clean:     30100 kB
Private_Dirty:     40216 kB
Referenced:       131552 kB
Anonymous:         40000 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
"""


# ------------------------------------------------------------------ procstat
def test_smaps_rollup_fields_are_bytes_and_the_header_is_skipped():
    fields = parse_smaps_rollup(SMAPS_ROLLUP)
    assert fields["Rss"] == 131552 * 1024
    assert fields["Pss"] == 69041 * 1024
    assert fields["Private_Dirty"] == 40216 * 1024
    assert len(fields) == 15
    assert not any(k.startswith("55d0") for k in fields)


def test_actor_titles_match_the_class_idle_or_running_a_method_only():
    assert is_actor_process("ray::ReplicaActor", "ReplicaActor")
    assert is_actor_process("ray::ReplicaActor.append", "ReplicaActor")
    assert not is_actor_process("ray::ReplicaActorProxy", "ReplicaActor")
    assert not is_actor_process("ray::EdgeActor", "ReplicaActor")
    assert not is_actor_process("ReplicaActor", "ReplicaActor")
    assert not is_actor_process("", "ReplicaActor")


@pytest.fixture
def titled_child():
    """A child whose argv[0] reads like an idle Ray replica actor worker,
    under a parent of its own: the test session may run Ray (real replica
    actors below this process), so lookups are rooted at that parent."""
    parent = subprocess.Popen(["bash", "-c", "exec -a 'ray::ReplicaActor' sleep 30 & wait"])
    deadline = time.monotonic() + 5
    child = None
    while child is None and time.monotonic() < deadline:
        kids = [p for p in process_tree(parent.pid) if p != parent.pid]
        if kids and process_title(kids[0]) == "ray::ReplicaActor":
            child = kids[0]
        else:
            time.sleep(0.02)
    assert child is not None, "the titled child did not start"
    yield parent.pid, child
    os.kill(child, signal.SIGKILL)
    parent.wait()


def test_replica_actor_workers_are_found_by_title_and_measured(titled_child):
    root, child = titled_child
    assert process_title(child) == "ray::ReplicaActor"
    assert actor_processes(root, "ReplicaActor") == [child]
    assert actor_processes(root, "EdgeActor") == []
    mem = process_memory(child)
    assert mem["title"] == "ray::ReplicaActor"
    assert 0 < mem["uss"] <= mem["pss"] <= mem["rss"]


def test_tree_memory_adds_up_the_children(titled_child):
    root, child_pid = titled_child
    own = process_memory(root)
    child = process_memory(child_pid)
    tree = tree_memory(root)
    assert tree["processes"] >= 2
    assert tree["rss_bytes"] >= own["rss"] + child["rss"] - 4 * MIB  # pages move a little
    assert tree["pss_bytes"] <= tree["rss_bytes"]


def test_process_memory_of_a_finished_process_is_none():
    p = subprocess.Popen(["true"])
    p.wait()
    assert process_memory(p.pid) is None


def test_rss_sampler_sees_at_least_the_current_rss():
    sampler = RssSampler(os.getpid(), period=0.05).start()
    time.sleep(0.2)
    peak = sampler.stop()
    assert sampler.samples >= 2
    assert peak >= process_memory(os.getpid())["rss"] // 2


def test_cpu_split_attributes_clients_broker_and_other():
    before = {"wall": 100.0, "busy": 10.0, "own_tree": 5.0, "broker": 2.0}
    after = {"wall": 102.0, "busy": 13.0, "own_tree": 7.5, "broker": 3.5}
    assert cpu_split(before, after) == {"window_s": 2.0, "clients_cpu_pct": 50.0,
                                        "broker_cpu_pct": 75.0, "other_cpu_pct": 25.0}
    # A broker we did not start (no pid): its CPU is not ours, so it is "other".
    unknown = cpu_split(dict(before, broker=None), dict(after, broker=None))
    assert unknown["broker_cpu_pct"] is None
    assert unknown["clients_cpu_pct"] == 125.0 and unknown["other_cpu_pct"] == 25.0


def test_cpu_window_counts_the_clients_kernel_time_and_page_faults():
    import mmap

    window = CpuWindow(None).start()
    region = mmap.mmap(-1, 64 << 20)
    for offset in range(0, len(region), 4096):  # 16384 first touches: one fault each
        region[offset] = 1
    region.close()
    cpu = window.stop()
    assert cpu["client_page_faults"] >= 16384
    assert 0 < cpu["client_kernel_cpu_pct"] <= cpu["client_cpu_pct"] + 1
    line = _fmt_case({"consume": {"ok": True, "mb_s": 100.0, "cpu": {
        "client_kernel_cpu_pct": 85.2, "client_page_faults": 102400}}})
    assert "(kernel 85%, 102k faults)" in line


def test_cpu_snapshot_counts_a_reaped_busy_child():
    # In a fresh interpreter: this test process may have Ray workers below
    # it whose exits (CPU not reaped by us) would make its tree's total drop.
    code = textwrap.dedent("""
        import subprocess, sys
        from bench.procstat import cpu_snapshot
        before = cpu_snapshot(None)
        subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\n"
                        "while time.process_time() - t < 0.3: pass"], check=True)
        after = cpu_snapshot(None)
        assert after["own_tree"] - before["own_tree"] >= 0.25, (before, after)
        assert after["busy"] - before["busy"] >= 0.25, (before, after)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------ latency
def test_nearest_rank_percentile():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 99.9) == 100
    assert percentile(values, 100) == 100
    assert percentile(values, 0) == 1
    assert percentile([7], 99) == 7
    # Nearest rank never interpolates: p50 of two values is the lower one.
    assert percentile([10, 20], 50) == 10


def test_percentile_rejects_nothing_and_out_of_range():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_latency_summary_in_milliseconds_unsorted_input():
    ns = [5_000_000, 1_000_000, 3_000_000, 2_000_000, 4_000_000]
    s = latency_summary(ns)
    assert s == {"count": 5, "p50_ms": 3.0, "p99_ms": 5.0, "p999_ms": 5.0,
                 "max_ms": 5.0, "mean_ms": 3.0}
    assert latency_summary([]) == {"count": 0}


def test_latency_timeline_buckets_by_scheduled_second():
    # rate 10/s, window from seq 20: seqs 20..29 are second 0, 30..39 second 1;
    # arrival order does not matter, only each record's schedule.
    seqs = [31, 20, 25, 39, 29]
    lat_ns = [400_000_000, 1_000_000, 3_000_000, 2_000_000, 2_000_000]
    assert latency_timeline(seqs, lat_ns, 10, 20) == [
        {"s": 0, "count": 3, "p99_ms": 3.0, "max_ms": 3.0},
        {"s": 1, "count": 2, "p99_ms": 400.0, "max_ms": 400.0},
    ]
    assert latency_timeline([], [], 10, 0) == []


def test_window_and_schedule():
    assert window_bounds(1000, 2, 5) == (2000, 7000)
    assert window_bounds(333.3, 0, 3) == (0, 999)
    assert records_due(-1, 1000, 50) == 0
    assert records_due(0, 1000, 50) == 1  # record 0 is due at once
    assert records_due(10_000_000, 1000, 50) == 11  # 10 ms at 1000/s
    assert records_due(10_000_000_000, 1000, 50) == 50  # never past the total


# ------------------------------------------------------------------ matrix
def produce_ok(mb_s, records=1000, size=1024, parts=1):
    return {"ok": True, "mb_s": mb_s, "records_s": mb_s * 1e6 / size,
            "elapsed_s": records * size / mb_s / 1e6, "records": records,
            "partitions_seen": parts,
            "cpu": {"client_cpu_pct": 90.0, "broker_cpu_pct": 80.0, "other_cpu_pct": 2.0}}


def consume_ok(mb_s, records=1000, size=1024, parts=1, deleted=0):
    r = {"ok": True, "mb_s": mb_s, "records_s": mb_s * 1e6 / size,
         "elapsed_s": records * size / mb_s / 1e6, "records": records, "partitions": parts,
         "cpu": {"client_cpu_pct": 50.0, "broker_cpu_pct": 40.0, "other_cpu_pct": 1.0}}
    if deleted:
        r.update(retention_deleted_records=deleted, kept_records=records - deleted)
    return r


def case(produce_mb=100.0, consume_mb=200.0, **kw):
    return {"create": {"ok": True, "created": True}, "produce": produce_ok(produce_mb),
            "consume": consume_ok(consume_mb, **kw)}


def test_matrix_rows_cover_the_issue_8_workloads_with_equal_bytes():
    wls = matrix_workloads(16)
    assert len(wls) == 8
    assert {(w.record_size, w.partitions, w.acks) for w in wls} == {
        (s, p, a) for s in (1024, 16384) for p in (1, 6) for a in ("1", "all")}
    assert all(w.records * w.record_size == 16 * MIB for w in wls)
    rows = matrix_rows(wls)
    assert [r["row"] for r in rows if r["phase"] == "consume"] == [
        "consume 16KiB p1", "consume 16KiB p6"]
    consume_cases = {r["case"] for r in rows if r["phase"] == "consume"}
    assert consume_cases == {"16KiB p1 acks=1", "16KiB p6 acks=1"}
    assert PEAK_ROW in [r["row"] for r in rows]
    assert Workload(1, 1024, 1, "1").case_id == "1KiB p1 acks=1"


def test_a_fast_produce_whose_read_back_lost_records_fails():
    lossy = case()
    lossy["consume"] = {"ok": False, "error": "consumed 990/1000 records: 10 missing"}
    cell = cell_from_case("produce", lossy)
    assert cell["status"] == "fail"
    assert "10 missing" in cell["error"]


def test_failed_produce_and_missing_case_fail():
    bad = {"create": {"ok": True}, "produce": {"ok": False, "error": "Message timed out"}}
    assert cell_from_case("produce", bad) == {"status": "fail",
                                              "error": "produce: Message timed out"}
    assert cell_from_case("consume", None)["status"] == "fail"
    nocreate = {"create": {"ok": False, "error": "no leader"}}
    assert cell_from_case("produce", nocreate)["error"] == "create: no leader"


def test_retention_makes_the_consume_figure_na_but_keeps_the_produce_figure():
    truncated = case(deleted=600)
    assert cell_from_case("consume", truncated)["status"] == "na"
    assert "deleted 600 of 1000" in cell_from_case("consume", truncated)["reason"]
    p = cell_from_case("produce", truncated)
    assert p["status"] == "ok" and p["mb_s"] == 100.0


def test_summarize_cell_takes_medians_and_one_failed_round_fails_it():
    cells = [cell_from_case("produce", case(produce_mb=m)) for m in (90.0, 120.0, 100.0)]
    s = summarize_cell(cells)
    assert s["status"] == "ok"
    assert s["mb_s"] == 100.0 and s["best_mb_s"] == 120.0
    assert s["all_mb_s"] == [90.0, 120.0, 100.0]
    assert s["client_cpu_pct"] == 90.0
    failed = summarize_cell(cells[:2] + [{"status": "fail", "error": "boom"}])
    assert failed == {"status": "fail", "error": "1/3 rounds failed: boom"}
    assert summarize_cell([{"status": "fail", "error": "boom"}])["error"] == "boom"
    assert summarize_cell([])["status"] == "fail"
    na = summarize_cell(cells[:1] + [{"status": "na", "reason": "retention"}])
    assert na == {"status": "na", "reason": "retention"}


def test_summarize_matrix_ratios_to_tansu():
    rows = matrix_rows([Workload(1000, 1024, 1, "1")])
    sessions = {
        "raykafka": [{"cases": {"1KiB p1 acks=1": case(produce_mb=m)}} for m in (60.0, 80.0)],
        "tansu": [{"cases": {"1KiB p1 acks=1": case(produce_mb=m)}} for m in (100.0, 100.0)],
        "mock": [{"error": "mock exited with code 1"}, {"error": "mock exited with code 1"}],
    }
    out = summarize_matrix(rows, sessions)[PEAK_ROW]
    assert out["raykafka"]["ratio"] == pytest.approx(0.7)
    assert out["raykafka"]["best_ratio"] == pytest.approx(0.8)
    assert out["tansu"]["ratio"] == pytest.approx(1.0)
    assert out["mock"] == {"status": "fail", "error": "mock exited with code 1",
                           "ratio": None, "best_ratio": None}


def test_no_ratio_without_a_baseline_figure():
    rows = matrix_rows([Workload(1000, 1024, 1, "1")])
    sessions = {"raykafka": [{"cases": {"1KiB p1 acks=1": case()}}],
                "tansu": [{"cases": {"1KiB p1 acks=1": {"produce": {"ok": False,
                                                                    "error": "x"}}}}]}
    out = summarize_matrix(rows, sessions)[PEAK_ROW]
    assert out["raykafka"]["status"] == "ok" and out["raykafka"]["ratio"] is None
    assert ratio(1.0, None) is None and ratio(1.0, 0) is None and ratio(3.0, 2.0) == 1.5


def test_latency_rate_is_half_of_raykafkas_peak_row_unless_fixed():
    summary = {PEAK_ROW: {"raykafka": {"status": "ok", "records_s": 150001.0}}}
    assert latency_rate(summary, None)[0] == 75000
    assert latency_rate(summary, 5000.0) == (5000.0, "--latency-rate")
    rate, why = latency_rate({PEAK_ROW: {"raykafka": {"status": "fail"}}}, None)
    assert rate is None and "no raykafka figure" in why


def latency_run(p50, p99, mx, lag=1.0):
    return {"ok": True,
            "produce": {"achieved_rate": 1000.0, "schedule_lag_max_ms": lag},
            "consume": {"join_s": 3.0, "latency": {"count": 5000, "p50_ms": p50, "p99_ms": p99,
                                                   "p999_ms": p99 + 1, "max_ms": mx}}}


def test_summarize_latency_medians_and_worst_max():
    s = summarize_latency([latency_run(2, 10, 30), latency_run(4, 30, 50, lag=7.0),
                           latency_run(3, 20, 40)])
    assert (s["p50_ms"], s["p99_ms"], s["max_ms"]) == (3, 20, 50)
    assert s["schedule_lag_max_ms"] == 7.0
    failed = summarize_latency([latency_run(2, 10, 30), {"ok": False, "error": "lost 3"}])
    assert failed == {"ok": False, "error": "lost 3"}
    assert summarize_latency([])["ok"] is False


def test_idle_replica_summary_and_count_check():
    procs = [{"rss": r * MIB, "pss": p * MIB, "uss": u * MIB}
             for r, p, u in ((128, 70, 40), (130, 68, 39), (129, 69, 41))]
    before, after = {"pss_bytes": 1000 * MIB}, {"pss_bytes": 1300 * MIB}
    s = summarize_idle_replicas(procs, 3, before, after)
    assert s["pss_median"] == 69 * MIB
    assert (s["pss_min"], s["pss_max"]) == (68 * MIB, 70 * MIB)
    assert s["rss_median"] == 129 * MIB and s["uss_median"] == 40 * MIB
    assert s["tree_pss_growth_per_partition"] == 100 * MIB
    assert "error" not in s
    short = summarize_idle_replicas(procs[:2], 3, before, after)
    assert short["error"] == "expected 3 ray::ReplicaActor processes, found 2"


def test_goal_report_against_issue_8_targets():
    summary = {PEAK_ROW: {"raykafka": {"ratio": 1.25}},
               "consume 16KiB p1": {"raykafka": {"ratio": 1.4}},
               "consume 16KiB p6": {"raykafka": {"ratio": None}}}
    goals = goal_report(summary, {"raykafka": {"ok": True, "p99_ms": 12.0}},
                        {"pss_median": 61 * MIB})
    met = {g["goal"]: (g["value"], g["met"]) for g in goals}
    assert met["produce 1 KiB lz4 acks=1 p1, raykafka/tansu"] == (1.25, True)
    assert met["consume 16 KiB p1, raykafka/tansu"] == (1.4, False)
    assert met["consume 16 KiB p6, raykafka/tansu"] == (None, None)
    assert met["p99 end-to-end at half of peak, raykafka"] == (12.0, True)
    assert met["PSS per idle replica actor (median)"] == (61.0, False)


def test_rotation_changes_who_goes_first():
    assert rotated(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rotated(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert rotated(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert rotated([], 3) == []


def test_matrix_report_renders_ok_na_and_fail_cells(capsys):
    from bench.matrix_report import print_matrix_report
    from bench.matrix_summary import summarize_memory

    wls = [Workload(1000, 1024, 1, "1"), Workload(100, 16384, 1, "1")]
    rows = matrix_rows(wls)
    truncated = case(deleted=40)
    sessions = {
        "raykafka": [{"cases": {"1KiB p1 acks=1": case(produce_mb=70.0),
                                "16KiB p1 acks=1": case(consume_mb=300.0)},
                      "memory": {"after_start": {"rss_bytes": 900 * MIB, "pss_bytes": 500 * MIB,
                                                 "processes": 12},
                                 "after_rows": {"rss_bytes": 1200 * MIB, "pss_bytes": 700 * MIB,
                                                "processes": 18},
                                 "peak_rss_bytes": 1500 * MIB}}],
        "tansu": [{"cases": {"1KiB p1 acks=1": case(produce_mb=100.0),
                             "16KiB p1 acks=1": case(consume_mb=200.0)}}],
        "mock": [{"cases": {"1KiB p1 acks=1": {"produce": {"ok": False,
                                                           "error": "3/1000 records failed"}},
                            "16KiB p1 acks=1": truncated}}],
    }
    summary = summarize_matrix(rows, sessions)
    lat = {"raykafka": summarize_latency([latency_run(5, 25, 40)]),
           "tansu": summarize_latency([latency_run(2, 10, 20)]),
           "mock": {"ok": False, "error": "consumer: no partition assigned"}}
    idle = summarize_idle_replicas([{"rss": 128 * MIB, "pss": 70 * MIB, "uss": 40 * MIB}],
                                   1, {"pss_bytes": 0}, {"pss_bytes": 80 * MIB})
    idle["settle_s"] = 5
    doc = {"config": {"targets": ["raykafka", "tansu", "mock"], "row_mib": 1, "repeat": 1,
                      "latency_window_s": 5, "latency_warmup_s": 2},
           "machine": {"cpus_usable": 2, "loadavg_at_start": [0.1, 0.1, 0.1]},
           "rows": rows, "summary": summary,
           "latency": {"rate": 1000.0, "rate_source": "--latency-rate", "summary": lat},
           "memory": {n: summarize_memory(s) for n, s in sessions.items()},
           "idle_replicas": idle, "goals": goal_report(summary, lat, idle)}
    print_matrix_report(doc)
    out = capsys.readouterr().out
    lines = out.splitlines()
    peak = lines.index(next(line for line in lines if line.startswith(PEAK_ROW)))
    assert "raykafka" in lines[peak] and " 0.70 " in lines[peak]
    assert "FAIL" in lines[peak + 2] and "3/1000 records failed" in lines[peak + 2]
    consume = next(line for line in lines if line.startswith("consume 16KiB p1"))
    assert " 1.50 " in consume
    assert any(line.startswith(" " * 24) and "mock" in line and "n/a" in line
               and "deleted 40" in line for line in lines)
    assert any(line.startswith("raykafka") and "25.00" in line and "2.50" in line
               for line in lines)  # p99 and p99 ratio to tansu
    assert any(line.startswith("raykafka") and "1200" in line and "700" in line
               for line in lines)
    assert "PSS median 70.0 MiB" in out
    assert "consume 16 KiB p1, raykafka/tansu" in out and "1.50x" in out


def test_latency_lost_to_mock_retention_is_na_not_ok():
    s = summarize_latency([{"ok": False, "error": "consumer: received 10/100",
                            "na": "broker deleted 90 records before the consumer read them"}])
    assert s == {"ok": None, "na": "broker deleted 90 records before the consumer read them"}


# ------------------------------------------------------------------ profile
def test_profile_stack_summary_counts_self_and_inclusive_shares(tmp_path):
    from bench.profile import summarize_stacks

    raw = tmp_path / "stacks.txt"
    raw.write_text(
        "thread (0x1);run (ray/worker.py:10);append (actors/partition_leader.py:400);"
        "write (storage/segment.py:50) 60\n"
        "thread (0x1);run (ray/worker.py:10);append (actors/partition_leader.py:401) 30\n"
        "thread (0x2);poll (asyncio/base_events.py:1) 10\n"
        "garbage line without count\n")
    s = summarize_stacks(raw)
    assert s["samples"] == 100
    assert dict(s["self"]) == {"write (storage/segment.py)": 60.0, "append (actors/partition_leader.py)": 30.0,
                               "poll (asyncio/base_events.py)": 10.0}
    incl = dict(s["inclusive"])
    # Two lines of one function merge; a function counts once per stack.
    assert incl["append (actors/partition_leader.py)"] == 90.0
    assert incl["run (ray/worker.py)"] == 90.0
    assert summarize_stacks(tmp_path / "missing.txt")["samples"] == 0


def test_profile_cpu_delta_per_thread_name():
    from bench.profile import cpu_delta

    before = {10: {"title": "ray::EdgeActor", "threads": {"python": 1.0, "worker.io": 0.5}}}
    after = {10: {"title": "ray::EdgeActor", "threads": {"python": 3.0, "worker.io": 0.75, "new": 0.1}},
             11: {"title": "ray::ReplicaActor", "threads": {"python": 0.5}},
             12: {"title": "idle", "threads": {"python": 0.0}}}
    rows = cpu_delta(before, after)
    assert [r["pid"] for r in rows] == [10, 11]
    assert rows[0]["cpu_s"] == 2.35
    assert rows[0]["threads"] == {"python": 2.0, "worker.io": 0.25, "new": 0.1}


# ------------------------------------------------------------------ env_costs
def test_env_costs_page_cache_runs_clean_up_and_report_both_kinds(tmp_path):
    from bench.env_costs import measure_page_cache, process_cpu_s

    doc = measure_page_cache(str(tmp_path), 3, 2)
    assert len(doc["long_write_steps_mb_s"]) == 1 and len(doc["recycled_steps_mb_s"]) == 1
    assert doc["fresh_mb_s"] == min(doc["long_write_steps_mb_s"]) > 0
    assert doc["fresh_ms_per_mb"] == round(1000 / doc["fresh_mb_s"], 3)
    assert os.listdir(tmp_path) == []  # every file it wrote is gone
    assert process_cpu_s(os.getpid()) > 0


def test_consume_lines_name_reads_that_went_to_disk(tmp_path):
    consume = {"ok": True, "mb_s": 120.0, "cpu": {"disk_read_mb": 350.2}}
    produce = {"ok": True, "mb_s": 300.0, "cpu": {"disk_read_mb": 80.0}}
    line = _fmt_case({"produce": produce, "consume": consume})
    assert "consume   120.0 MB/s (350 MB from disk)" in line
    assert "produce   300.0 MB/s;" in line  # a producer's disk reads are not the point
    cached = dict(consume, cpu={"disk_read_mb": 0.0})
    assert "from disk" not in _fmt_case({"produce": produce, "consume": cached})
    fetched = dict(consume, fetches={"fetch_requests": 400, "rx_bytes": 200_000_000,
                                     "responses": 420, "partial_message_sets": 0})
    assert "[400 fetches, 500 kB each]" in _fmt_case({"produce": produce, "consume": fetched})
    # the counter is the machine's, in bytes, and never goes back
    before = disk_read_bytes()
    assert before >= 0 and disk_read_bytes() >= before


def test_fetch_totals_sum_the_real_brokers_of_a_statistics_document():
    doc = {"brokers": {
        "127.0.0.1:9092/1001": {"nodeid": 1001, "req": {"Fetch": 7, "Produce": 2}, "rx": 12,
                                "rxbytes": 9_000_000, "rxpartial": 1},
        "127.0.0.1:9093/1002": {"nodeid": 1002, "req": {"Fetch": 3}, "rx": 4, "rxbytes": 1_000_000,
                                "rxpartial": 0},
        # the bootstrap connection has no node id yet: its requests are metadata
        "127.0.0.1:9092/bootstrap": {"nodeid": -1, "req": {"Fetch": 99}, "rx": 5, "rxbytes": 500},
    }}
    assert fetch_totals(json.dumps(doc)) == {"fetch_requests": 10, "responses": 16,
                                             "rx_bytes": 10_000_000, "partial_message_sets": 1}
    assert fetch_totals(None) is None


# ------------------------------------------------------------------ transactions (issue 19)
def txn_topic(mode: str, produce_mb: float = 100.0, read_mb: dict | None = None,
              records: int = 1000, deleted: int = 0) -> dict:
    """A bench.transactions topic: produce in `mode`, read back (both
    isolations for the transactional topic) at the given MB/s."""
    cpu = {"client_cpu_pct": 90.0, "broker_cpu_pct": 80.0, "other_cpu_pct": 5.0}
    prod = {"ok": True, "mode": mode, "mb_s": produce_mb, "records_s": produce_mb * 1000,
            "elapsed_s": 1.0, "records": records, "partitions_seen": 3, "cpu": cpu}
    if mode == "transactional":
        prod.update(transactions=records // 100, commit={"p50_ms": 4.0, "p99_ms": 9.0})
    t = {"create": {"ok": True, "created": True}, "produce": prod}
    isos = ("read_uncommitted", "read_committed") if mode == "transactional" \
        else ("read_uncommitted",)
    for iso in isos:
        mb = (read_mb or {}).get(iso, 200.0)
        t[iso] = {"ok": True, "mb_s": mb, "records_s": mb * 1000, "elapsed_s": 0.5,
                  "partitions": 3, "cpu": cpu}
        if deleted:
            t[iso] = {"ok": False, "error": "broker deleted records",
                      "retention_deleted_offsets": deleted}
    return t


def txn_session(plain=100.0, idem=90.0, txn=50.0, ru=200.0, rc=190.0, records=1000) -> dict:
    return {"records": records, "topics": {
        "plain": txn_topic("plain", plain, records=records),
        "idempotent": txn_topic("idempotent", idem, records=records),
        "transactional": txn_topic("transactional", txn, records=records,
                                   read_mb={"read_uncommitted": ru, "read_committed": rc})}}


def test_txn_cells_count_only_read_back_produces_and_take_the_right_read():
    from bench.transactions import cell_from_topic, round_cells

    cells = round_cells(txn_session(plain=100.0, txn=50.0, ru=200.0, rc=180.0))
    assert cells["produce plain"]["mb_s"] == 100.0
    assert cells["produce transactional"]["txn_s"] == pytest.approx(10.0)
    assert cells["produce transactional"]["commit_p99_ms"] == 9.0
    assert cells["consume read_uncommitted"]["mb_s"] == 200.0
    assert cells["consume read_committed"]["mb_s"] == 180.0
    lossy = txn_topic("transactional")
    lossy["read_committed"] = {"ok": False, "error": "consumed 990/1000 records: 10 missing"}
    assert cell_from_topic("produce", "read_committed", lossy)["status"] == "fail"
    assert "10 missing" in cell_from_topic("consume", "read_committed", lossy)["error"]
    assert cell_from_topic("consume", "read_uncommitted", lossy)["status"] == "ok"
    unread = txn_topic("plain")
    del unread["read_uncommitted"]
    assert cell_from_topic("produce", "read_uncommitted", unread) == {
        "status": "fail", "error": "read_uncommitted: not run"}
    failed = {"create": {"ok": True}, "produce": {"ok": False, "error":
                                                  "init_transactions failed: timed out"}}
    assert cell_from_topic("produce", "read_committed", failed)["error"] == \
        "produce: init_transactions failed: timed out"
    gone = txn_topic("plain", deleted=700)
    assert cell_from_topic("produce", "read_uncommitted", gone)["status"] == "na"
    assert round_cells({"error": "raykafka exited"})["produce plain"] == {
        "status": "fail", "error": "raykafka exited"}


def test_txn_summary_medians_pairs_and_the_idempotence_goal():
    from bench.transactions import goal, pair_ratios, summarize_rows

    sessions = {
        "raykafka": [txn_session(plain=p, idem=i) for p, i in
                     ((100.0, 95.0), (200.0, 170.0), (120.0, 108.0))],
        "tansu": [txn_session(plain=300.0, idem=290.0)] * 3,
        "mock": [txn_session(records=500)] * 3,
    }
    summary = summarize_rows(sessions)
    rk = summary["produce idempotent"]["raykafka"]
    assert rk["mb_s"] == 108.0 and rk["all_mb_s"] == [95.0, 170.0, 108.0]
    assert rk["ratio"] == pytest.approx(108.0 / 290.0)
    assert summary["produce idempotent"]["mock"]["ratio"] is None  # other record count
    assert summary["produce transactional"]["raykafka"]["txn_s"] == pytest.approx(10.0)
    pairs = pair_ratios(sessions, summary)
    idem = pairs["idempotent / plain"]["raykafka"]
    assert idem["ratio"] == pytest.approx(108.0 / 120.0)
    assert idem["rounds"] == [0.95, 0.85, 0.9] and idem["paired"] == pytest.approx(0.9)
    assert pairs["read_committed / read_uncommitted"]["tansu"]["ratio"] == pytest.approx(0.95)
    g = goal(pairs)
    assert g["value"] == pytest.approx(0.9) and g["paired"] == pytest.approx(0.9)
    assert g["met"] is True
    pairs["idempotent / plain"]["raykafka"].update(ratio=1.2, paired=0.85)
    assert goal(pairs)["met"] is False  # judged on the paired ratio
    # a phase Tansu cannot do: its ratio is n/a with the reason, never a number
    bad = txn_session()
    bad["topics"]["transactional"]["produce"] = {"ok": False, "error":
                                                 "init_transactions failed: unsupported"}
    sessions["tansu"] = [bad]
    summary = summarize_rows(sessions)
    assert summary["produce transactional"]["tansu"]["status"] == "fail"
    assert summary["produce transactional"]["raykafka"]["ratio"] is None
    p = pair_ratios(sessions, summary)["transactional / plain"]["tansu"]
    assert p["ratio"] is None and p["paired"] is None and "unsupported" in p["why_not"]
    assert goal({})["met"] is None


def test_txn_report_renders_figures_ratios_and_failures(capsys):
    from bench.transactions import goal, pair_ratios, print_report, summarize_rows

    bad = txn_session()
    bad["topics"]["transactional"]["produce"] = {"ok": False, "error": "EndTxn: unsupported"}
    sessions = {"raykafka": [txn_session(plain=100.0, idem=80.0)], "tansu": [bad]}
    summary = summarize_rows(sessions)
    pairs = pair_ratios(sessions, summary)
    print_report({"config": {"targets": ["raykafka", "tansu"], "records": 1000,
                             "mock_records": 1000, "record_size": 1024, "partitions": 3,
                             "txn_records": 100, "repeat": 1},
                  "machine": {"cpus_usable": 2, "loadavg_at_start": [1, 1, 1],
                              "loadavg_at_end": [1, 1, 1]},
                  "summary": summary, "pairs": pairs, "goal": goal(pairs)})
    out = capsys.readouterr().out
    assert "0.80 (paired 0.80)" in out
    assert any(line.startswith("produce transactional") and "10.0" in line
               for line in out.splitlines())
    assert "FAIL" in out and "EndTxn: unsupported" in out
    assert "n/a transactional / plain [tansu]" in out
    assert "paired 0.80x (ratio of medians 0.80x) -> NOT met (reported, not asserted)" in out


def test_txn_mock_records_fit_its_retention():
    from bench.transactions import mock_records

    assert mock_records(1000, 1024) == 1000
    cap = mock_records(10**7, 1024)
    assert 10000 < cap < 5 * 4 * 1024 * 1024 / (1024 * 0.52)
    assert mock_records(10**7, 16384) < cap


def test_txn_consume_verdict_and_idempotence_state():
    from bench.txn_client import consume_verdict, idempotence_state, percentiles_ms

    assert consume_verdict(100, 10, 100, 100, 0, 1000, 103, 30) is None
    assert "3 missing" in consume_verdict(100, 10, 97, 97, 0, 970, 100, 30)
    assert "no record for 30s" in consume_verdict(100, 10, 97, 97, 0, 970, 100, 30)
    assert "2 duplicates" in consume_verdict(100, 10, 100, 98, 0, 1000, 100, 30)
    assert "value bytes" in consume_verdict(100, 10, 100, 100, 0, 999, 100, 30)
    assert "end offsets sum to 90" in consume_verdict(100, 10, 100, 100, 0, 1000, 90, 30)
    assert consume_verdict(100, 10, 100, 100, 0, 1000, None, 30) is None
    assert idempotence_state(json.dumps({"eos": {"idemp_state": "Assigned"}})) == "Assigned"
    assert idempotence_state(json.dumps({"brokers": {}})) is None
    assert idempotence_state(None) is None
    assert percentiles_ms([0.003, 0.001, 0.002]) == {"p50_ms": 2.0, "p99_ms": 3.0,
                                                     "max_ms": 3.0}
    assert percentiles_ms([]) == {}


def test_txn_setup_times_are_medians_of_what_each_round_reported():
    from bench.transactions import setup_times

    s1, s2 = txn_session(), txn_session()
    s1["txn_warmup"] = {"ok": True, "init_transactions_s": 40.0}
    s2["txn_warmup"] = {"ok": False, "error": "timed out"}
    s1["topics"]["transactional"]["produce"]["init_transactions_s"] = 0.02
    s2["topics"]["transactional"]["produce"]["init_transactions_s"] = 0.04
    out = setup_times({"raykafka": [s1, s2], "tansu": [{"error": "exited"}]})
    assert out["raykafka"] == {"first_init_s": 40.0, "init_transactions_s": pytest.approx(0.03),
                               "init_producer_id_s": None}
    assert out["tansu"] == {"first_init_s": None, "init_transactions_s": None,
                            "init_producer_id_s": None}


def test_txn_raykafka_overrides_are_the_env_names_raykafka_reads():
    from bench.transactions import override_env, parse_args
    from core.config import env_overrides

    name = override_env("transaction.state.log.num.partitions")
    assert env_overrides({name: "3"}) == {"transaction.state.log.num.partitions": "3"}
    a = parse_args(["--quick", "--raykafka-override", "transaction.state.log.num.partitions=3"])
    assert a.records == 20000 and a.repeat == 1 and a.mock_records == 20000
    with pytest.raises(SystemExit):
        parse_args(["--raykafka-override", "no-equals-sign"])


def test_txn_variant_target_starts_raykafka_with_its_configs_only(tmp_path, monkeypatch):
    from bench.targets import RaykafkaTarget
    from bench.transactions import VARIANT, RaykafkaVariant, parse_args

    seen = {}
    monkeypatch.setattr(RaykafkaTarget, "_start", lambda self: seen.update(
        {k: v for k, v in os.environ.items() if k.startswith("RAYKAFKA_TRANSACTION")})
        or "127.0.0.1:1")
    monkeypatch.delenv("RAYKAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS", raising=False)
    t = RaykafkaVariant(tmp_path, 1, ["transaction.state.log.num.partitions=3"])
    assert t.name == VARIANT and t.start() == "127.0.0.1:1"
    assert seen == {"RAYKAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "3"}
    assert "RAYKAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS" not in os.environ
    a = parse_args(["--targets", "raykafka,tansu", "--raykafka-variant", "a.b=1"])
    assert a.targets == ["raykafka", VARIANT, "tansu"]
    with pytest.raises(SystemExit):
        parse_args(["--targets", "tansu", "--raykafka-variant", "a.b=1"])


# ---- bench.replication: pacing at a fraction of the round's flat-out rate ------------------------

def test_paced_rate_follows_the_same_rounds_flat_out_phase_with_the_same_rf_and_acks():
    from bench.replication import paced_rate

    done = [
        {"phase": {"rf": 3, "acks": "1", "mode": "max"}, "ok": True, "records_s": 200_000},
        {"phase": {"rf": 3, "acks": "all", "mode": "max"}, "ok": True, "records_s": 180_000},
        {"phase": {"rf": 1, "acks": "all", "mode": "max"}, "ok": True, "records_s": 300_000},
    ]
    paced = {"rf": 3, "acks": "all", "mode": "0.5x max", "rate": 5000, "rate_of_max": 0.5}
    assert paced_rate(paced, done) == 90_000
    assert paced_rate(dict(paced, acks="1"), done) == 100_000
    assert paced_rate(dict(paced, rate_of_max=0), done) == 5000  # a fixed --rate
    failed = [dict(done[1], ok=False)]
    assert paced_rate(paced, failed) == 0  # no flat-out figure: the phase is skipped


def test_replicated_phases_alternate_the_acks_order_by_round():
    """The second flat-out phase on a topic costs more per GB on this VM: the
    rounds take turns, so neither acks setting always pays for the second place."""
    from bench.replication import parse_args, phases_for

    a = parse_args(["--targets", "raykafka", "--no-paced"])
    for round_index, first in ((0, "1"), (1, "all"), (2, "1"), (3, "all")):
        phases = phases_for("raykafka", a, round_index)
        for rf in (3, 1):
            flat_out = [ph["acks"] for ph in phases if ph["rf"] == rf and ph["mode"] == "max"]
            assert flat_out == [first, "all" if first == "1" else "1"], (round_index, rf, flat_out)
        # The warm-up still comes first on each topic (it creates the topic and starts its replicas).
        assert [ph["mode"] for ph in phases if ph["rf"] == 3][0] == "warmup"


def test_settle_waits_for_two_quiet_seconds_in_a_row(monkeypatch):
    from bench import replication

    # Busy share per one-second window: quiet, busy (a spare replica starting), quiet, quiet.
    shares = iter([0.1, 0.9, 0.1, 0.1, 0.1])
    ticks = {"busy": 0, "total": 0}

    def busy_ticks():
        return ticks["busy"], ticks["total"]

    def sleep(_s):
        ticks["busy"] += int(100 * next(shares))
        ticks["total"] += 100

    monkeypatch.setattr(replication, "_busy_ticks", busy_ticks)
    monkeypatch.setattr(replication.time, "sleep", sleep)
    replication.settle()
    assert next(shares) == 0.1 and ticks["total"] == 400, "it stopped after the 3rd and 4th windows, quiet in a row"


def test_replica_check_allows_partitions_unkeyed_records_never_reached(tmp_path):
    from bench.repl_client import check_replicas

    dirs = {}
    for broker in ("1001", "1002"):
        d = tmp_path / broker
        dirs[broker] = [str(d)]
        for p, size in ((0, 100), (1, 0)):
            (d / f"t-{p}").mkdir(parents=True)
            (d / f"t-{p}" / "00000000000000000000.log").write_bytes(b"x" * size)
    assert check_replicas(dirs, "t", 2, 2, timeout=0, written={0})["ok"]
    assert not check_replicas(dirs, "t", 2, 2, timeout=0)["ok"]  # every partition must hold data
    (tmp_path / "1002" / "t-0" / "00000000000000000000.log").write_bytes(b"x" * 50)
    assert not check_replicas(dirs, "t", 2, 2, timeout=0, written={0})["ok"]  # copies differ
