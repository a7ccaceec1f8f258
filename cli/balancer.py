"""`raykafka balancer`: see and steer the controller's balancer (issue 31,
cluster/controller/balancer.py, README "Scaling out").

    raykafka balancer --zookeeper H:P[/chroot] --status     # plan, moves in flight, bytes left, absent brokers
    raykafka balancer --zookeeper H:P[/chroot] --dry-run    # the full balancing plan for the cluster as it is now
    raykafka balancer --zookeeper H:P[/chroot] --pause      # no new moves from now on (moves in flight finish)
    raykafka balancer --zookeeper H:P[/chroot] --resume

`--data-dir D` instead of `--zookeeper` reads the ZooKeeper address from the
nodes.json a local `raykafka start` wrote. The balancer's state lives in
ZooKeeper (/balancer/paused, written here and watched by every controller
candidate, so a pause survives a controller failover; /balancer/state,
published by the active controller), as Kafka's /admin/reassign_partitions:
this tool needs ZooKeeper, not a broker. The moves themselves are KIP-455
reassignments: `raykafka reassign --list` (ListPartitionReassignments) shows
them too.

Exit status: 0 done; 1 ZooKeeper unreachable or no state published yet
(--status); 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(sub) -> None:
    """Register `balancer` under the raykafka command's subparsers."""
    cmd = sub.add_parser("balancer", help="the controller's replica balancer: status, dry run, pause, resume",
                         description="See and steer the balancer. Exit status: 0 done, 1 ZooKeeper unreachable or "
                                     "nothing published yet, 2 usage error.")
    where = cmd.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", help="HOST:PORT[/chroot] of the cluster's ZooKeeper")
    where.add_argument("--data-dir", help="a local `raykafka start` data dir (its nodes.json names ZooKeeper)")
    action = cmd.add_mutually_exclusive_group(required=True)
    action.add_argument("--status", action="store_true", help="the plan, moves in flight and bytes left")
    action.add_argument("--dry-run", action="store_true", help="the moves that would balance the cluster now")
    action.add_argument("--pause", action="store_true", help="start no new moves (honoured at once)")
    action.add_argument("--resume", action="store_true", help="carry on with the plan")
    cmd.add_argument("--zookeeper-client-config", metavar="FILE",
                     help="the brokers' ZooKeeper credentials/TLS (the zookeeper-client.json `raykafka start` "
                          "writes in its data dir; default: $RAYKAFKA_ZOOKEEPER_CLIENT_CONFIG, or the one in "
                          "--data-dir)")
    cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
    cmd.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    cmd.set_defaults(run_admin_command=run)


def _zk_connect(args) -> str:
    if args.zookeeper:
        return args.zookeeper
    nodes = json.loads((Path(args.data_dir) / "nodes.json").read_text())
    return nodes[0]["zk_connect"]


def _security(args):
    """The brokers' own ZooKeeper identity: with zookeeper.set.acl (the embedded
    ZooKeeper's default) their znodes are writable by it alone."""
    from metadata import zk_security

    path = args.zookeeper_client_config
    if path is None and args.data_dir and not os.environ.get(zk_security.ENV_VAR):
        found = Path(args.data_dir) / zk_security.CLIENT_CONFIG_FILE_NAME
        path = str(found) if found.exists() else None
    if path is None:
        return None  # the process's own (zk_security.current())
    return zk_security.ZkClientSecurity.from_json(json.loads(Path(path).read_text()))


def run(args) -> int:
    from metadata.kafka_zk import KafkaZkClient

    try:
        connect = _zk_connect(args)
        security = _security(args)
    except (OSError, ValueError, KeyError, IndexError) as exc:
        print(f"raykafka balancer: cannot read the ZooKeeper address or credentials: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        zk = KafkaZkClient(connect, session_timeout_ms=10_000, connection_timeout_ms=10_000,
                           security=security).start()
    except Exception as exc:
        print(f"raykafka balancer: cannot reach ZooKeeper at {connect}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        if args.pause or args.resume:
            changed = zk.balancer.set_paused(bool(args.pause), reason="raykafka balancer --pause")
            word = "paused" if args.pause else "resumed"
            print(f"Balancer {word}." if changed else f"Balancer was already {word}.")
            return EXIT_OK
        if args.status:
            state = zk.balancer.state()
            if state is None:
                print("No balancer state published yet (no active controller has run the balancer).",
                      file=sys.stderr)
                return EXIT_FAILED
            state["paused"] = zk.balancer.paused()  # the switch itself, even before the controller acts
            print(json.dumps(state, indent=1) if args.json else format_status(state))
            return EXIT_OK
        moves, before, after = dry_run(zk)
        if args.json:
            print(json.dumps({"moves": [m.to_json() for m in moves], "before": before, "after": after}, indent=1))
        else:
            print(format_dry_run(moves, before, after))
        return EXIT_OK
    finally:
        zk.close()


def dry_run(zk) -> tuple[list, dict, dict]:
    """The plan for the cluster in ZooKeeper now, with every goal (what a join would start);
    -> (moves, replicas per broker before, after)."""
    from cluster.controller.balancer_plan import BrokerView, measure, plan

    registered = zk.brokers.all()
    brokers = {b: BrokerView(info.get("rack"), info.get("replicas_max")) for b, info in registered.items()}
    state = zk.balancer.state() or {}
    delay_ms = state.get("healing_delay_ms")
    now_ms = time.time() * 1000
    lost = {int(b) for b, since in (state.get("absent_since_ms") or {}).items()
            if delay_ms is not None and now_ms - since >= delay_ms and int(b) not in brokers}
    assignments, frozen = {}, set()
    for topic, found in zk.topics.assignments().items():
        for p, replicas in found.partitions.items():
            removing = found.removing_replicas.get(p, [])
            assignments[(topic, p)] = [r for r in replicas if r not in removing]
            if removing or found.adding_replicas.get(p):
                frozen.add((topic, p))
            elif any(r not in brokers and r not in lost for r in replicas):
                frozen.add((topic, p))
    moves = plan(brokers, assignments, lost=lost, frozen=frozen, balance=True)
    after = dict(assignments)
    for m in moves:
        after[m.tp] = m.target(after[m.tp])
    return moves, measure(brokers, assignments, lost).replicas, measure(brokers, after, lost).replicas


def format_dry_run(moves, before: dict, after: dict) -> str:
    lines = [f"Proposed plan: {len(moves)} moves"]
    lines += [f"  {m.describe()}" for m in moves]
    lines.append("Replicas per broker (now -> after the plan):")
    lines += [f"  Broker: {b}  Replicas: {before.get(b, 0)} -> {after.get(b, 0)}" for b in sorted(before)]
    return "\n".join(lines)


def format_status(state: dict) -> str:
    from cluster.controller.balancer_plan import Move

    now_ms = time.time() * 1000
    lines = [
        f"Balancer: {'disabled' if not state.get('enabled', True) else 'paused' if state.get('paused') else 'running'}"
        f" (controller {state.get('controller')}, epoch {state.get('controller_epoch')},"
        f" updated {max(0, (now_ms - state.get('updated_ms', now_ms)) / 1000):.0f} s ago)",
        f"Imbalance score: {state.get('imbalance_score', 0)}"
        f"{'  (balancing)' if state.get('balancing') else ''}",
        f"Moves in flight: {len(state.get('in_flight') or [])}  Bytes left: {state.get('bytes_left', 0)}"
        f"  Planned moves: {state.get('planned_moves', 0)}"
        f"  Done: {state.get('moves_completed', 0)} of {state.get('moves_started', 0)} started",
    ]
    for body in state.get("in_flight") or []:
        lines.append(f"  in flight: {Move.from_json(body).describe()}")
    for body in state.get("plan") or []:
        lines.append(f"  planned:   {Move.from_json(body).describe()}")
    replicas = state.get("replicas") or {}
    leaders = state.get("preferred_leaders") or {}
    for b in sorted(replicas, key=int):
        lines.append(f"Broker: {b}  Replicas: {replicas[b]}  Preferred leaders: {leaders.get(b, 0)}")
    delay = state.get("healing_delay_ms", 0)
    for b, since in sorted((state.get("absent_since_ms") or {}).items()):
        due = (since + delay - now_ms) / 1000
        lines.append(f"Absent broker {b}: for {(now_ms - since) / 1000:.0f} s, "
                     + (f"healed in {due:.0f} s unless it returns" if due > 0 else "being healed"))
    stale = state.get("stale_replicas") or []
    if stale:
        lines.append(f"Stale replicas, deleted when their broker returns: {len(stale)}")
    return "\n".join(lines)
