"""`raykafka reassign`: move partition replicas between brokers, like Kafka's
kafka-reassign-partitions.sh (same options, same JSON files, same messages).

    raykafka reassign --bootstrap-server H:P --generate --topics-to-move-json-file F --broker-list 1,2,3
                      [--disable-rack-aware]
    raykafka reassign --bootstrap-server H:P --execute --reassignment-json-file F [--additional]
    raykafka reassign --bootstrap-server H:P --verify  --reassignment-json-file F
    raykafka reassign --bootstrap-server H:P --cancel  --reassignment-json-file F
    raykafka reassign --bootstrap-server H:P --list

Topics to move: {"version":1,"topics":[{"topic":"foo"}]}. Reassignments:
{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}
(log_dirs optional; only "any" is supported: no AlterReplicaLogDirs).

Exit status: 0 done (for --verify: every partition's reassignment completed);
1 refused, unreachable, or (--verify) a partition whose replicas differ from
the target with no reassignment running; 2 usage error or unreadable file;
3 (--verify only) some reassignments are still in progress: run it again.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from typing import Optional

from cli.admin_client import (AdminClient, AdminError, BrokerInfo, OngoingReassignment, add_command_config_option,
                              admin_client_for)
from cluster.topic_admin import TopicSpecError, assign_replicas, assign_replicas_rack_aware

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_IN_PROGRESS = 0, 1, 2, 3
ANY_LOG_DIR = "any"

TopicPartition = tuple[str, int]


class UsageError(Exception):
    pass


def tp_text(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# ---- files (pure) -----------------------------------------------------------------------------------------------
def _load(text: str, what: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} must hold a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise UsageError(f"Not supported version field value {version}")
    return data


def parse_topics_to_move(text: str) -> list[str]:
    data = _load(text, "the topics-to-move file")
    try:
        topics = [entry["topic"] for entry in data.get("topics", [])]
    except (TypeError, KeyError):
        raise UsageError('the topics-to-move file must look like {"version":1,"topics":[{"topic":"foo"}]}') from None
    if not all(isinstance(t, str) for t in topics):
        raise UsageError("topic names must be strings")
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise UsageError(f"List of topics to reassign contains duplicate entries: {', '.join(duplicates)}")
    if not topics:
        raise UsageError("the topics-to-move file names no topics")
    return topics


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise UsageError(f"--broker-list {text!r}: expected broker ids separated by commas") from None
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise UsageError(f"Broker list contains duplicate entries: {', '.join(map(str, duplicates))}")
    return brokers


def parse_reassignment(text: str) -> dict[TopicPartition, list[int]]:
    """The partitions to move and their target replicas, checked as Kafka checks them."""
    data = _load(text, "the reassignment file")
    entries = data.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise UsageError("Partition reassignment list cannot be empty")
    targets: dict[TopicPartition, list[int]] = {}
    duplicated_partitions = []
    for entry in entries:
        try:
            tp = (entry["topic"], int(entry["partition"]))
            replicas = [int(r) for r in entry["replicas"]]
        except (TypeError, KeyError, ValueError):
            raise UsageError('each partition needs "topic", "partition" and "replicas": '
                             f'{json.dumps(entry)}') from None
        log_dirs = entry.get("log_dirs") or [ANY_LOG_DIR] * len(replicas)
        if len(log_dirs) != len(replicas):
            raise UsageError(f"Size of replicas list {replicas} is different from size of log dirs list "
                             f"{log_dirs} for partition {tp_text(tp)}")
        if any(d != ANY_LOG_DIR for d in log_dirs):
            raise UsageError(f"{tp_text(tp)}: log_dirs other than \"any\" need AlterReplicaLogDirs, which this tool "
                             "does not support")
        if not replicas:
            raise UsageError("Partition replica list cannot be empty")
        duplicates = sorted({r for r in replicas if replicas.count(r) > 1})
        if duplicates:
            raise UsageError("Partition replica lists may not contain duplicate entries: "
                             f"{tp_text(tp)} contains multiple entries for {','.join(map(str, duplicates))}")
        if tp in targets:
            duplicated_partitions.append(tp_text(tp))
        targets[tp] = replicas
    if duplicated_partitions:
        raise UsageError("Partition reassignment contains duplicate topic partitions: "
                         + ",".join(duplicated_partitions))
    return targets


def reassignment_json(assignment: dict[TopicPartition, list[int]]) -> str:
    """Kafka's compact JSON, partitions sorted by topic then partition."""
    partitions = [{"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
                   "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])} for t, p in sorted(assignment)]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


# ---- --generate (pure) ------------------------------------------------------------------------------------------
def propose(current: dict[TopicPartition, list[int]], brokers: list[BrokerInfo], rack_aware: bool = True,
            rng: Optional[random.Random] = None) -> dict[TopicPartition, list[int]]:
    """A fresh assignment of each topic over `brokers`, keeping its partition count
    and replication factor (Kafka's assignReplicasToBrokers, rack-aware when every
    broker has a rack). Raises UsageError/TopicSpecError when it cannot be done."""
    racks = {b.node_id: b.rack for b in brokers if b.rack} if rack_aware else {}
    if racks and len(racks) != len(brokers):
        raise UsageError("Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                         "replica assignment without rack information.")
    ids = sorted(b.node_id for b in brokers)
    if not ids:
        raise UsageError("none of the brokers in --broker-list is in the cluster")
    by_topic: dict[str, list[int]] = {}
    for (t, p) in current:
        by_topic.setdefault(t, []).append(p)
    proposal = {}
    for topic, partitions in sorted(by_topic.items()):
        factor = len(current[(topic, min(partitions))])
        if racks:
            assigned = assign_replicas_rack_aware(len(partitions), factor, racks, rng=rng)
        else:
            assigned = assign_replicas(len(partitions), factor, ids, rng=rng)
        for p, replicas in assigned.items():
            proposal[(topic, p)] = replicas
    return proposal


# ---- --verify (pure) --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PartitionState:
    current: list[int]  # the replicas now (with a reassignment running: all of them, adding included)
    target: list[int]
    done: bool  # no reassignment of this partition is running


def reassignment_states(targets: dict[TopicPartition, list[int]],
                        ongoing: dict[TopicPartition, OngoingReassignment],
                        replicas_now: dict[TopicPartition, list[int]]) -> dict[TopicPartition, PartitionState]:
    states = {}
    for tp, target in targets.items():
        if tp in ongoing:
            states[tp] = PartitionState(list(ongoing[tp].replicas), target, done=False)
        else:
            # A partition that no longer exists has no replicas, which never equals a target.
            states[tp] = PartitionState(replicas_now.get(tp, []), target, done=True)
    return states


def verify_report(states: dict[TopicPartition, PartitionState]) -> tuple[list[str], int]:
    """Kafka's status lines and this tool's exit status for them."""
    lines = ["Status of partition reassignment:"]
    in_progress = failed = False
    for tp in sorted(states):
        state = states[tp]
        if not state.done:
            lines.append(f"Reassignment of partition {tp_text(tp)} is still in progress.")
            in_progress = True
        elif state.current == state.target:
            lines.append(f"Reassignment of partition {tp_text(tp)} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp_text(tp)}, but replica set is "
                         f"{','.join(map(str, state.current))} rather than {','.join(map(str, state.target))}.")
            failed = True
    return lines, EXIT_FAILED if failed else EXIT_IN_PROGRESS if in_progress else EXIT_OK


def ongoing_text(ongoing: dict[TopicPartition, OngoingReassignment]) -> str:
    if not ongoing:
        return "No partition reassignments found."
    lines = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp_text(tp)}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding:
            line += f" adding: {','.join(map(str, r.adding))}."
        if r.removing:
            line += f" removing: {','.join(map(str, r.removing))}."
        lines.append(line)
    return "\n".join(lines)


def cancellable(ongoing: dict[TopicPartition, OngoingReassignment],
                wanted: set[TopicPartition]) -> list[TopicPartition]:
    return sorted(tp for tp in ongoing if tp in wanted)


# ---- commands ---------------------------------------------------------------------------------------------------
def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def cmd_generate(client: AdminClient, args) -> int:
    topics, wanted = args.topics_to_move, args.brokers_wanted
    cluster = client.metadata(topics)
    missing = [t for t in topics if t not in cluster.topics]
    if missing:
        print(f"Error: Topic {missing[0]} not found.", file=sys.stderr)
        return EXIT_FAILED
    current = {(t, p): list(info.replicas) for t in topics for p, info in cluster.topics[t].partitions.items()}
    brokers = [cluster.brokers[b] for b in wanted if b in cluster.brokers]
    try:
        proposal = propose(current, brokers, rack_aware=not args.disable_rack_aware)
    except TopicSpecError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"Current partition replica assignment\n{reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{reassignment_json(proposal)}")
    return EXIT_OK


def _replicas_now(cluster) -> dict[TopicPartition, list[int]]:
    return {(t, p): list(info.replicas) for t, topic in cluster.topics.items() for p, info in topic.partitions.items()}


def cmd_execute(client: AdminClient, args) -> int:
    targets = args.targets
    ongoing = client.list_partition_reassignments()
    if ongoing and not args.additional:
        print("Cannot execute because there is an existing partition assignment.  Use --additional to override "
              "this and create a new partition assignment in addition to the existing one.", file=sys.stderr)
        return EXIT_FAILED
    cluster = client.metadata(sorted({t for t, _ in targets}))
    unknown = sorted({b for replicas in targets.values() for b in replicas} - set(cluster.brokers))
    if unknown:
        print(f"Error: Unknown broker id {unknown[0]}", file=sys.stderr)
        return EXIT_FAILED
    now = _replicas_now(cluster)
    missing = sorted(tp for tp in targets if tp not in now)
    if missing:
        print(f"Error: Unable to find partition: {', '.join(map(tp_text, missing))}", file=sys.stderr)
        return EXIT_FAILED
    # Printed first so the operator can roll back with it.
    print(f"Current partition replica assignment\n\n{reassignment_json({tp: now[tp] for tp in targets})}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    errors = {tp: o for tp, o in client.alter_partition_reassignments(dict(targets)).items() if not o.ok}
    if errors:
        print("Error reassigning partition(s):", file=sys.stderr)
        for tp in sorted(errors):
            print(f"{tp_text(tp)}: {errors[tp].text()}", file=sys.stderr)
        return EXIT_FAILED
    print(f"Successfully started partition reassignment{'' if len(targets) == 1 else 's'} for "
          + ",".join(tp_text(tp) for tp in sorted(targets)))
    return EXIT_OK


def cmd_verify(client: AdminClient, args) -> int:
    targets = args.targets
    ongoing = client.list_partition_reassignments()
    now = _replicas_now(client.metadata(sorted({t for t, _ in targets})))
    lines, code = verify_report(reassignment_states(targets, ongoing, now))
    print("\n".join(lines))
    return code


def cmd_cancel(client: AdminClient, args) -> int:
    targets = args.targets
    active = cancellable(client.list_partition_reassignments(sorted(targets)), set(targets))
    if not active:
        print("None of the specified partition reassignments are active.")
        return EXIT_OK
    errors = {tp: o for tp, o in client.alter_partition_reassignments({tp: None for tp in active}).items()
              if not o.ok}
    if errors:
        print(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:", file=sys.stderr)
        for tp in sorted(errors):
            print(f"{tp_text(tp)}: {errors[tp].text()}", file=sys.stderr)
        return EXIT_FAILED
    print(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for: "
          + ",".join(map(tp_text, active)))
    return EXIT_OK


def cmd_list(client: AdminClient, args) -> int:
    print(ongoing_text(client.list_partition_reassignments()))
    return EXIT_OK


COMMANDS = {"generate": cmd_generate, "execute": cmd_execute, "verify": cmd_verify, "cancel": cmd_cancel,
            "list": cmd_list}
REQUIRED = {"generate": ("topics_to_move_json_file", "broker_list"), "execute": ("reassignment_json_file",),
            "verify": ("reassignment_json_file",), "cancel": ("reassignment_json_file",), "list": ()}
PERMITTED = {"generate": {"disable_rack_aware"}, "execute": {"additional"}, "verify": set(), "cancel": set(),
             "list": set()}
OPTIONAL = ("topics_to_move_json_file", "broker_list", "reassignment_json_file", "disable_rack_aware", "additional")


def action_of(args) -> str:
    return next(a for a in COMMANDS if getattr(args, a))


def usage_problem(args) -> Optional[str]:
    """Kafka's rule: each action takes its required options and a few permitted ones."""
    action = action_of(args)
    for name in REQUIRED[action]:
        if getattr(args, name) is None:
            return f"Missing required argument \"[{name.replace('_', '-')}]\""
    for name in OPTIONAL:
        if getattr(args, name) not in (None, False) and name not in REQUIRED[action] and \
                name not in PERMITTED[action]:
            return f"Option \"--{name.replace('_', '-')}\" can't be used with action \"--{action}\""
    return None


def add_parser(sub) -> None:
    """Register `reassign` under the raykafka command's subparsers."""
    reassign = sub.add_parser("reassign", help="move partition replicas between brokers "
                                               "(kafka-reassign-partitions.sh)",
                              description="Generate, execute, verify, cancel or list partition reassignments. "
                                          "Exit status: 0 done, 1 refused or failed, 2 usage error, "
                                          "3 (--verify) still in progress.")
    reassign.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    add_command_config_option(reassign)
    reassign.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each request")
    reassign.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    actions = reassign.add_mutually_exclusive_group(required=True)
    actions.add_argument("--generate", action="store_true", help="propose an assignment over --broker-list")
    actions.add_argument("--execute", action="store_true", help="start the reassignment in the file")
    actions.add_argument("--verify", action="store_true", help="report whether the file's reassignment completed")
    actions.add_argument("--cancel", action="store_true", help="cancel the file's reassignments still running")
    actions.add_argument("--list", action="store_true", help="list the reassignments running now")
    reassign.add_argument("--topics-to-move-json-file", help='{"version":1,"topics":[{"topic":"foo"}]}')
    reassign.add_argument("--broker-list", help="broker ids to assign to, e.g. 1,2,3 (--generate)")
    reassign.add_argument("--reassignment-json-file", help="the reassignment, as --generate proposes it")
    reassign.add_argument("--disable-rack-aware", action="store_true", help="--generate: ignore racks")
    reassign.add_argument("--additional", action="store_true",
                          help="--execute: even while other reassignments are running")
    reassign.set_defaults(run_admin_command=run)


def read_inputs(args) -> None:
    """Read and check the files and lists before connecting (errors here are usage errors)."""
    args.targets = args.topics_to_move = args.brokers_wanted = None
    if args.reassignment_json_file is not None:
        args.targets = parse_reassignment(_read(args.reassignment_json_file))
    if args.topics_to_move_json_file is not None:
        args.topics_to_move = parse_topics_to_move(_read(args.topics_to_move_json_file))
    if args.broker_list is not None:
        args.brokers_wanted = parse_broker_list(args.broker_list)


def run(args) -> int:
    problem = usage_problem(args)
    if problem is None:
        try:
            read_inputs(args)
        except UsageError as exc:
            problem = str(exc)
    if problem is not None:
        print(f"raykafka reassign: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        client = admin_client_for(args, "reassign-partitions-tool")
    except (AdminError, OSError) as exc:
        print(f"raykafka reassign: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        return COMMANDS[action_of(args)](client, args)
    except UsageError as exc:
        print(f"raykafka reassign: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (AdminError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        client.close()
