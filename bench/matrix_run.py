"""Running the --matrix: a session of rows per target and round, the
fixed-rate latency phase, and the idle-replica memory measurement."""
from __future__ import annotations

import time

from bench.matrix_summary import _first_error, MIB, REPLICA_ACTOR_CLASS, summarize_idle_replicas
from bench.phases import (_children, _client_kernel_note, create_topic, delete_topic, finish_client, one_partition_args,
                          run_phase, start_client, warm_up_groups, Workload)
from bench.procstat import RssSampler, actor_processes, cpu_snapshot, cpu_split, process_memory, tree_memory
from bench.targets import kill_tree, PYTHON, Target, TargetError


def run_case(t: Target, wl: Workload, a, topic: str) -> dict:
    """One topic: create, produce (timed), consume (timed; also the
    exactly-once check of the produce), delete."""
    case: dict = {"topic": topic, "records": wl.records}
    pid = t.proc.pid if t.proc else None
    if not create_topic(t, topic, wl, a, case):
        return case
    case["produce"] = run_phase("produce", t.bootstrap, topic, wl, a, t.workdir, pid,
                                one_partition_args(t, wl.partitions))
    if case["produce"].get("ok"):
        consume_extra = ("--tolerate-retention",) if t.keeps_mib_per_partition else ()
        case["consume"] = run_phase("consume", t.bootstrap, topic, wl, a, t.workdir, pid,
                                    consume_extra)
    delete_topic(t, topic, wl, a, case)
    return case


def case_line(case: dict, phases: tuple[str, ...], mb_s_format: str, details,
              first_error) -> str:
    """The progress line of one topic: per phase that ran its MB/s and
    details(phase, result), or FAIL and why; FAIL and first_error(case) if
    none ran."""
    parts = []
    for phase in phases:
        r = case.get(phase)
        if r is None:
            continue
        if r.get("ok"):
            parts.append(f"{phase} {r['mb_s']:{mb_s_format}} MB/s{details(phase, r)}")
        else:
            parts.append(f"{phase} FAIL: {(r.get('error') or '').splitlines()[0][:120]}")
    if not parts:
        parts.append(f"FAIL: {first_error(case)[:140]}")
    return "; ".join(parts)


def _consume_details(phase: str, r: dict) -> str:
    if phase != "consume":
        return ""
    cpu = r.get("cpu") or {}
    disk = cpu.get("disk_read_mb") or 0
    # page-cache reads that went to the disk (see procstat)
    out = f" ({disk:.0f} MB from disk)" if disk >= 1 else ""
    out += _client_kernel_note(cpu)
    f = r.get("fetches")
    if f and f.get("fetch_requests"):
        # how the bytes came: a slow round with more, smaller
        # fetches differs from one with the same fetches, slower
        out += (f" [{f['fetch_requests']} fetches, "
                f"{f['rx_bytes'] / f['fetch_requests'] / 1e3:.0f} kB each]")
    return out


def _fmt_case(case: dict) -> str:
    return case_line(case, ("produce", "consume"), "7.1f", _consume_details, _first_error)


def run_session(t: Target, r: int, workloads: list[Workload], a, run_id: str) -> dict:
    """Start the target once, run every case of the round on it (a fresh
    topic each), record its memory, stop it."""
    session: dict = {"round": r, "cases": {}}
    t0 = time.monotonic()
    sampler = None
    try:
        bootstrap = t.start()
        session["bootstrap"] = bootstrap
        session["startup_s"] = round(time.monotonic() - t0, 2)
        print(f"  {t.name}: up on {bootstrap} in {session['startup_s']}s", flush=True)
        root = t.proc.pid if t.proc else None
        session["warmup"] = warm_up_groups(t, f"bench-{run_id}-warmup", a)
        if root:
            session["memory"] = {"after_start": tree_memory(root)}
            sampler = RssSampler(root).start()
        for i, wl in enumerate(workloads):
            topic = f"bench-{run_id}-{t.name}-r{r}-{i}"
            case = run_case(t, wl, a, topic)
            session["cases"][wl.case_id] = case
            for phase in ("create", "produce", "consume"):
                for w in (case.get(phase) or {}).get("warnings", []):
                    t.note(f"{phase}: {w} (first seen: {wl.case_id}, round {r + 1})", key=w[:24])
            print(f"  {t.name:8s} {wl.case_id:20s} {_fmt_case(case)}", flush=True)
        if root:
            session["memory"]["after_rows"] = tree_memory(root)
    except TargetError as e:
        print(f"  {t.name}: FAIL: {e}", flush=True)
        session["error"] = str(e)
    finally:
        if sampler is not None:
            session.setdefault("memory", {})["peak_rss_bytes"] = sampler.stop()
        t.stop()
    return session


def run_latency(t: Target, topic: str, rate: float, a) -> dict:
    """A subscribed consumer process, then (once it has its partition) a
    producer process at `rate` records/s; both must account for every record."""
    res: dict = {"topic": topic, "rate": rate}
    common = ["--bootstrap", t.bootstrap, "--topic", topic, "--rate", str(rate),
              "--warmup-s", str(a.latency_warmup_s), "--window-s", str(a.latency_window_s),
              "--record-size", "1024", "--acks", "1"]
    ready = t.workdir / f"{topic}.ready"
    err_c = t.workdir / f"{topic}-latency-consume.stderr"
    consumer = start_client([PYTHON, "-m", "bench.latency", "consume", *common,
                             "--ready-file", str(ready), "--join-timeout", str(a.start_timeout),
                             "--idle-timeout", str(a.idle_timeout)], err_c)
    while not ready.exists() and consumer.poll() is None:
        time.sleep(0.1)  # the consumer enforces its own join timeout
    if not ready.exists():
        res["consume"] = finish_client(consumer, err_c, 10, "latency-consume")
        res.update(ok=False, error=f"consumer: {res['consume'].get('error')}")
        return res
    produce_extra = ["--partition", "0"] if t.fixed_partitions is not None else []
    err_p = t.workdir / f"{topic}-latency-produce.stderr"
    send_s = a.latency_warmup_s + a.latency_window_s
    # While the producer runs (its start-up and final flush included): who
    # had the CPU. A producer or consumer starved by other work shows up as
    # latency, so the figure needs this next to it.
    cpu0 = cpu_snapshot(t.proc.pid if t.proc else None)
    res["produce"] = finish_client(
        start_client([PYTHON, "-m", "bench.latency", "produce", *common, *produce_extra,
                      "--timeout", str(a.phase_timeout)], err_p),
        err_p, send_s + a.phase_timeout + 60, "latency-produce")
    res["cpu"] = cpu_split(cpu0, cpu_snapshot(t.proc.pid if t.proc else None))
    if not res["produce"].get("ok"):
        kill_tree(consumer, grace=2)  # it would only wait out its idle timeout
        _children.discard(consumer)
        res.update(ok=False, error=f"producer: {res['produce'].get('error')}")
        return res
    res["consume"] = finish_client(consumer, err_c, a.idle_timeout + 60, "latency-consume")
    if not res["consume"].get("ok"):
        res.update(ok=False, error=f"consumer: {res['consume'].get('error')}")
        deleted = res["consume"].get("log_start_offsets")
        if t.keeps_mib_per_partition and deleted:
            # 5 MiB of batches is a fraction of a second of this stream:
            # the consumer must never lag more than that.
            stream_ms = t.keeps_mib_per_partition * MIB / (rate * 1024) * 1000
            res["na"] = (f"broker deleted {deleted} records before the consumer read them "
                         f"(keeps {t.keeps_mib_per_partition} MiB per partition: "
                         f"{stream_ms:.0f} ms of this stream before lz4)")
        return res
    res["ok"] = True
    return res


def stable_actor_pids(root: int, timeout: float, quiet: float = 3.0) -> set[int]:
    """The broker's ReplicaActor worker pids once that set has not changed
    for `quiet` seconds (a deleted topic's actors take a moment to exit)."""
    deadline = time.monotonic() + timeout
    pids = set(actor_processes(root, REPLICA_ACTOR_CLASS))
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = set(actor_processes(root, REPLICA_ACTOR_CLASS))
        if now != pids:
            pids, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return pids


def measure_idle_replicas(t: Target, a, topic: str) -> dict:
    """Create a topic of a.idle_partitions partitions, leave it idle for
    a.idle_settle_s, then read smaps_rollup of each `ray::ReplicaActor`
    process that appeared in the broker's process tree for it (Ray titles an
    actor's worker process after its class). Replica actors that existed
    before (__consumer_offsets' partitions) are not counted."""
    root = t.proc.pid
    existing = stable_actor_pids(root, 30)
    before = tree_memory(root)
    wl = Workload(1, 1024, a.idle_partitions, "1")
    c = run_phase("create", t.bootstrap, topic, wl, a, t.workdir)
    if not c.get("ok") or not c.get("created"):
        return {"error": f"create {topic}: {c.get('error') or c.get('note')}"}
    deadline = time.monotonic() + a.start_timeout
    new: list[int] = []
    while time.monotonic() < deadline:
        new = [p for p in actor_processes(root, REPLICA_ACTOR_CLASS) if p not in existing]
        if len(new) >= a.idle_partitions:
            break
        time.sleep(0.5)
    time.sleep(a.idle_settle_s)
    new = [p for p in actor_processes(root, REPLICA_ACTOR_CLASS) if p not in existing]
    procs = [m for m in (process_memory(p) for p in new) if m]
    after = tree_memory(root)
    out = summarize_idle_replicas(procs, a.idle_partitions, before, after)
    out.update(settle_s=a.idle_settle_s, other_replica_actors=len(existing),
               tree_before=before, tree_after=after, processes=procs,
               create_s=c.get("leaders_after_s"))
    return out


def run_latency_session(t: Target, lr: int, rate: float, a, run_id: str,
                        measure_idle: bool) -> dict:
    session: dict = {"round": lr}
    try:
        t.start()
        topic = f"bench-{run_id}-{t.name}-latency{lr}"
        c = run_phase("create", t.bootstrap, topic, Workload(1, 1024, 1, "1"), a, t.workdir)
        if not c.get("ok") or (t.fixed_partitions is None and not c.get("created")):
            session["latency"] = {"ok": False, "error": f"create: {c.get('error') or c.get('note')}"}
        else:
            session["latency"] = run_latency(t, topic, rate, a)
        lat = session["latency"]
        if lat.get("na"):
            print(f"  {t.name:8s} latency n/a: {lat['na']}", flush=True)
        elif lat.get("ok"):
            x = lat["consume"]["latency"]
            print(f"  {t.name:8s} latency p50 {x['p50_ms']:.1f} ms, p99 {x['p99_ms']:.1f} ms, "
                  f"max {x['max_ms']:.1f} ms over {x['count']} records "
                  f"(achieved {lat['produce']['achieved_rate']:.0f} rec/s)", flush=True)
            worst = sorted(lat["consume"].get("timeline", []), key=lambda b: -b["max_ms"])[:3]
            if worst:
                print(f"  {t.name:8s} worst seconds of the window: "
                      + ", ".join(f"s{b['s']} max {b['max_ms']:.0f} ms" for b in worst), flush=True)
        else:
            print(f"  {t.name:8s} latency FAIL: {lat.get('error')}", flush=True)
        if measure_idle and t.proc is not None:
            if t.deletes_topics:
                run_phase("delete", t.bootstrap, topic, Workload(1, 1024, 1, "1"), a, t.workdir)
            idle = session["idle_replicas"] = measure_idle_replicas(
                t, a, f"bench-{run_id}-{t.name}-idle")
            if "pss_median" in idle:
                print(f"  {t.name:8s} {idle['replica_processes']} idle replica actors: PSS median "
                      f"{idle['pss_median'] / MIB:.1f} MiB", flush=True)
            if idle.get("error"):
                print(f"  {t.name:8s} idle replicas: {idle['error']}", flush=True)
    except TargetError as e:
        print(f"  {t.name}: FAIL: {e}", flush=True)
        session["error"] = str(e)
        session.setdefault("latency", {"ok": False, "error": str(e)})
    finally:
        t.stop()
    return session


def rotated(items: list, k: int) -> list:
    """items rotated left by k: round k starts with a different target, so
    no target always runs first (or last) in a round."""
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]
