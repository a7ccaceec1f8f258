"""Where a replicated produce's CPU and calls go, by component: one snapshot
of a running `raykafka start --nodes N` cluster, taken before and after a
phase of bench.replication (--profile) and subtracted.

    .venv/bin/python -m bench.repl_profile --nodes-json DATA/nodes.json --topic T --partitions 3

prints one JSON object: per replica of the topic (role, CPU seconds of its
process, its counters: appends, follower fetches served and made, bytes,
progress reports, append -> high watermark times), and the CPU seconds of
each node's edge and purgatory processes. It joins the cluster's Ray as a
driver for the few calls it makes (the replicas' and edges' `state`), so it
runs outside the timed windows.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

from bench.procstat import _TICK, _stat


def process_cpu_s(pid: int) -> float | None:
    st = _stat(pid)
    return None if st is None else (int(st[11]) + int(st[12])) / _TICK


def snapshot(nodes_json: str, topic: str, partitions: int) -> dict:
    import ray

    from actors.replica_lookup import find_replicas
    from core.naming import edge_actor_name, purgatory_actor_name

    with open(nodes_json) as f:
        nodes = json.load(f)
    ray.init(address=nodes[0]["ray_address"], namespace="raykafka", logging_level=logging.ERROR,
             log_to_driver=False)
    try:
        brokers = [n["broker_id"] for n in nodes]
        names, refs = [], []
        for b in brokers:
            # By name, or through the broker's pool (a replica a spare adopted has no Ray name);
            # a hibernated one is not woken for the profile.
            found = asyncio.run(find_replicas([(topic, p) for p in range(partitions)], b, "raykafka", False, 30))
            for p, handle in enumerate(found):
                if handle is not None:
                    names.append((p, b))
                    refs.append(handle.state.remote())
        replicas = {}
        for (p, b), state in zip(names, ray.get(refs, timeout=30)):
            state["role"] = "leader" if state["is_leader"] else "follower"
            replicas[f"{p}@{b}"] = state
        processes = {}
        for b in brokers:
            for kind, name, method in (("edge", edge_actor_name(b), "pid"),
                                       ("purgatory", purgatory_actor_name(b), "pid")):
                try:
                    pid = ray.get(getattr(ray.get_actor(name, namespace="raykafka"), method).remote(), timeout=30)
                except Exception:  # noqa: BLE001 - a missing actor is reported as missing
                    continue
                processes[f"{kind}@{b}"] = {"pid": pid, "cpu_s": process_cpu_s(pid)}
        return {"replicas": replicas, "processes": processes}
    finally:
        ray.shutdown()


def delta(before: dict, after: dict) -> dict:
    """after - before, summed by component: leader replicas, follower
    replicas, edges, purgatories; plus the replication counters."""
    out = {"cpu_s": {"leader": 0.0, "follower": 0.0, "edge": 0.0, "purgatory": 0.0}, "counters": {}}
    counters = out["counters"]
    keys = ("append_calls", "append_sets", "append_bytes", "follower_fetches", "follower_fetch_bytes",
            "follower_fetch_empty", "fetches_sent", "fetched_bytes", "fetched_as_slices", "commit_waits",
            "commit_notices", "progress_reports", "commit_count", "commit_total_ms", "serve_count",
            "serve_total_ms", "apply_total_ms", "apply_count")
    for name, a in after.get("replicas", {}).items():
        b = before.get("replicas", {}).get(name)
        if b is None or b.get("pid") != a.get("pid"):
            b = {}
        out["cpu_s"][a["role"]] += a["cpu_s"] - b.get("cpu_s", 0.0)
        for k in keys:
            counters[k] = counters.get(k, 0) + a.get(k, 0) - b.get(k, 0)
        for what in ("commit", "serve"):
            counters[f"{what}_max_ms"] = max(counters.get(f"{what}_max_ms", 0.0), a.get(f"{what}_max_ms", 0.0))
            hist = [x - y for x, y in zip(a.get(f"{what}_histogram", []),
                                          b.get(f"{what}_histogram", [0] * 11))]
            counters[f"{what}_histogram"] = [x + y for x, y in
                                             zip(counters.get(f"{what}_histogram", [0] * len(hist)), hist)]
    for name, a in after.get("processes", {}).items():
        b = before.get("processes", {}).get(name, {})
        if a.get("cpu_s") is None or b.get("pid") not in (None, a["pid"]):
            continue
        out["cpu_s"][name.split("@")[0]] += a["cpu_s"] - (b.get("cpu_s") or 0.0)
    out["cpu_s"] = {k: round(v, 3) for k, v in out["cpu_s"].items()}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.repl_profile", description=__doc__.split("\n")[0])
    ap.add_argument("--nodes-json", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    a = ap.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    json.dump(snapshot(a.nodes_json, a.topic, a.partitions), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
