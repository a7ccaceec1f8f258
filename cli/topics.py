"""`raykafka topics`: create, list, describe, alter and delete topics over the
Kafka protocol, with kafka-topics.sh's option names and output.

    raykafka topics --bootstrap-server H:P --list [--topic REGEX] [--exclude-internal]
    raykafka topics --bootstrap-server H:P --describe [--topic REGEX]
                    [--under-replicated-partitions | --unavailable-partitions |
                     --under-min-isr-partitions | --at-min-isr-partitions | --topics-with-overrides]
    raykafka topics --bootstrap-server H:P --create --topic T [--partitions N] [--replication-factor R]
                    [--config k=v ...] [--replica-assignment 0:1,1:2] [--if-not-exists]
    raykafka topics --bootstrap-server H:P --alter --topic REGEX [--partitions N [--replica-assignment ...]]
                    [--config k=v ...] [--delete-config k ...] [--if-exists]
    raykafka topics --bootstrap-server H:P --delete --topic REGEX [--if-exists]

--topic is a regular expression matched against whole names (as in Kafka),
except with --create. Exit status: 0 done; 1 the broker refused an item (its
Kafka error name is printed) or could not be reached; 2 usage error.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Optional

from cli.admin_client import (DESCRIBE_CONFIGS, LIST_PARTITION_REASSIGNMENTS, OP_DELETE, OP_SET, AdminClient,
                              AdminError, ConfigEntry, NewTopic, OngoingReassignment, PartitionInfo, TopicInfo,
                              add_command_config_option, admin_client_for)
from cluster.capacity import CAPACITY_KEY, HOSTED_KEY  # the keys brokers state their limits under

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
REPORT_FILTERS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
                  "at_min_isr_partitions")


class UsageError(Exception):
    pass


# ---- argument checks (pure) ------------------------------------------------------------------------------------
def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """`0:1,1:2` -> {0: [0, 1], 1: [1, 2]}: partitions by position, replicas split by ':'."""
    assignment: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise UsageError(f"--replica-assignment: {part!r} is not a list of broker ids separated by ':'") from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise UsageError("Partition replica lists may not contain duplicate entries: "
                             + ",".join(map(str, duplicates)))
        if assignment and len(brokers) != len(assignment[0]):
            raise UsageError(f"Partition {index} has different replication factor: {brokers}")
        assignment[index] = brokers
    return assignment


def parse_configs(items: list[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or "=" in value:
            raise UsageError(f"Invalid topic config {item!r}: all configs to be added must be in the format "
                             "\"key=val\".")
        configs[key.strip()] = value.strip()
    return configs


def usage_problem(args) -> Optional[str]:
    """What kafka-topics.sh would refuse before connecting, or None."""
    action = action_of(args)
    filters = [f for f in REPORT_FILTERS if getattr(args, f)]
    if action != "list" and action != "describe" and not args.topic:
        return f"--topic is required with --{action}"
    if args.config and action not in ("create", "alter"):
        return "--config is only valid with --create or --alter"
    if args.delete_config and action != "alter":
        return "--delete-config is only valid with --alter"
    if args.partitions is not None and action not in ("create", "alter"):
        return "--partitions is only valid with --create or --alter"
    if args.replication_factor is not None and action != "create":
        return "--replication-factor is only valid with --create"
    if args.replica_assignment is not None and action not in ("create", "alter"):
        return "--replica-assignment is only valid with --create or --alter"
    if action == "create" and args.replica_assignment is not None and \
            (args.partitions is not None or args.replication_factor is not None):
        return "--replica-assignment cannot be used with --partitions or --replication-factor"
    if action == "create" and args.partitions is not None and args.partitions < 1:
        return "The partitions must be greater than 0"
    if action == "create" and args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        return "The replication factor must be between 1 and 32767 inclusive"
    if action == "alter" and args.partitions is None and not args.config and not args.delete_config:
        return "--alter needs --partitions, --config or --delete-config"
    if action == "alter" and args.replica_assignment is not None and args.partitions is None:
        return "--replica-assignment with --alter needs --partitions"
    if (filters or args.topics_with_overrides) and action != "describe":
        return "the partition report options are only valid with --describe"
    if len(filters) + bool(args.topics_with_overrides) > 1:
        return "choose one of --under-replicated-partitions, --unavailable-partitions, " \
               "--under-min-isr-partitions, --at-min-isr-partitions, --topics-with-overrides"
    if args.if_exists and action not in ("alter", "delete", "describe"):
        return "--if-exists is only valid with --alter, --delete or --describe"
    if args.if_not_exists and action != "create":
        return "--if-not-exists is only valid with --create"
    if args.exclude_internal and action not in ("list", "describe"):
        return "--exclude-internal is only valid with --list or --describe"
    if args.topic and action != "create":
        try:
            re.compile(args.topic)
        except re.error as exc:
            return f"--topic {args.topic!r} is not a valid regular expression: {exc}"
    return None


def action_of(args) -> str:
    for action in ("list", "describe", "create", "alter", "delete"):
        if getattr(args, action):
            return action
    raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")


def select_topics(topics: dict[str, TopicInfo], pattern: Optional[str], exclude_internal: bool) -> list[str]:
    """Sorted names matching the whole-name regex (every topic without one)."""
    chosen = []
    for name, info in topics.items():
        if exclude_internal and info.internal:
            continue
        if pattern is None or re.fullmatch(pattern, name):
            chosen.append(name)
    return sorted(chosen)


# ---- describe (pure) --------------------------------------------------------------------------------------------
def replication_factor(partition: PartitionInfo, reassignment: Optional[OngoingReassignment]) -> int:
    """While a reassignment runs, replicas include the ones being added: Kafka counts without them."""
    if reassignment is not None and set(partition.replicas) & (set(reassignment.adding) | set(reassignment.removing)):
        return len(reassignment.replicas) - len(reassignment.adding)
    return len(partition.replicas)


def min_isr(configs: list[ConfigEntry]) -> int:
    for entry in configs:
        if entry.name == "min.insync.replicas" and entry.value is not None:
            return int(entry.value)
    return 1


def partition_reported(filter_name: Optional[str], partition: PartitionInfo, live_brokers: set[int],
                       min_insync: int, reassignment: Optional[OngoingReassignment]) -> bool:
    """Whether a --describe report option keeps this partition (None: every partition)."""
    has_leader = partition.leader >= 0
    if filter_name is None:
        return True
    if filter_name == "under_replicated_partitions":
        return replication_factor(partition, reassignment) - len(partition.isr) > 0
    if filter_name == "unavailable_partitions":
        return not has_leader or partition.leader not in live_brokers
    if filter_name == "under_min_isr_partitions":
        return not has_leader or len(partition.isr) < min_insync
    if filter_name == "at_min_isr_partitions":
        return len(partition.isr) == min_insync
    raise ValueError(filter_name)


def _ids(ids) -> str:
    return ",".join(map(str, ids))


def topic_line(topic: TopicInfo, configs: list[ConfigEntry],
               reassignments: dict[tuple[str, int], OngoingReassignment]) -> str:
    """kafka-topics.sh's topic line; Configs lists every value not at its default."""
    first = topic.partitions[min(topic.partitions)] if topic.partitions else None
    factor = replication_factor(first, reassignments.get((topic.name, first.partition))) if first else 0
    overrides = ",".join(f"{c.name}={c.value}" for c in sorted(configs, key=lambda c: c.name) if not c.is_default)
    fields = [f"Topic: {topic.name}"]
    if topic.topic_id:
        fields.append(f"TopicId: {topic.topic_id}")
    fields += [f"PartitionCount: {len(topic.partitions)}", f"ReplicationFactor: {factor}", f"Configs: {overrides}"]
    return "\t".join(fields)


def partition_line(topic: str, partition: PartitionInfo, reassignment: Optional[OngoingReassignment]) -> str:
    fields = ["", f"Topic: {topic}", f"Partition: {partition.partition}",
              f"Leader: {partition.leader if partition.leader >= 0 else 'none'}",
              f"Replicas: {_ids(partition.replicas)}", f"Isr: {_ids(partition.isr)}"]
    if reassignment is not None:
        fields += [f"Adding Replicas: {_ids(reassignment.adding)}", f"Removing Replicas: {_ids(reassignment.removing)}"]
    if partition.offline:
        fields.append(f"Offline: {_ids(partition.offline)}")
    return "\t".join(fields)


def describe_lines(topics: list[TopicInfo], configs: dict[str, list[ConfigEntry]],
                   reassignments: dict[tuple[str, int], OngoingReassignment], live_brokers: set[int],
                   filter_name: Optional[str], with_overrides_only: bool) -> list[str]:
    """The whole --describe output. A report option (filter_name) prints matching
    partitions only, without topic lines; --topics-with-overrides prints only the
    topic lines of topics with a non-default config (as Kafka does)."""
    lines = []
    for topic in topics:
        entries = configs.get(topic.name, [])
        if filter_name is None:
            if not with_overrides_only or any(not c.is_default for c in entries):
                lines.append(topic_line(topic, entries, reassignments))
        if with_overrides_only:
            continue
        floor = min_isr(entries)
        for index in sorted(topic.partitions):
            partition = topic.partitions[index]
            reassignment = reassignments.get((topic.name, index))
            if partition_reported(filter_name, partition, live_brokers, floor, reassignment):
                lines.append(partition_line(topic.name, partition, reassignment))
    return lines


def broker_usage_lines(topics: list[TopicInfo], brokers: list[int],
                       capacities: dict[int, Optional[int]], pools: Optional[dict[int, str]] = None) -> list[str]:
    """One line per live broker: the partition replicas it hosts (every topic,
    internal ones included) and its capacity, the limit creations are refused
    past ("unknown" when the broker states none): raykafka.replicas.per.node.max,
    or raykafka.partitions.per.node.max where replicas hibernate (issue 30; the
    live limit then shows as Live: n/max). Not in kafka-topics.sh: every live
    replica here is a process, and a broker refuses creations past its capacity
    (issue 18)."""
    hosted = {b: 0 for b in brokers}
    for topic in topics:
        for partition in topic.partitions.values():
            for b in partition.replicas:
                hosted[b] = hosted.get(b, 0) + 1
    lines = []
    for b in sorted(hosted):
        cap = capacities.get(b)
        fields = [f"Broker: {b}", f"Replicas: {hosted[b]}", f"Capacity: {cap if cap is not None else 'unknown'}"]
        pool = (pools or {}).get(b)
        if pool:  # replicas hibernate there (issue 30): how many are live processes now
            stats = dict(item.split("=", 1) for item in pool.split(",") if "=" in item)
            fields += [f"Live: {stats.get('live')}/{stats.get('live_max')}", f"Hibernated: {stats.get('hibernated')}",
                       f"Wakeups: {stats.get('wakeups')}",
                       f"WakeMs p50/p99: {stats.get('wake_p50_ms')}/{stats.get('wake_p99_ms')}",
                       f"Adopted/Cold: {stats.get('adopted', 0)}/{stats.get('cold_starts', 0)}",
                       f"OverLimit: {stats.get('over_limit', 0)}", f"Prestarts: {stats.get('prestarts', 0)}"]
        lines.append("\t".join(fields))
    return lines


POOL_STATS_KEY = "raykafka.replica.pool.stats"  # net/apis/n32_describe_configs.py
RESOURCE_BROKER = 4


def broker_capacities(client: AdminClient, brokers: list[int],
                      pools: Optional[dict[int, str]] = None) -> dict[int, Optional[int]]:
    """Each broker's capacity, by DescribeConfigs on the broker resources (the
    controller answers each with that broker's own values, computed on its node
    when not set): its raykafka.partitions.per.node.max where it states one
    (its replicas hibernate), else its raykafka.replicas.per.node.max. Missing
    or unparsable: None. With
    `pools`, fills it with the replica pool counts of brokers that answer them
    (the bootstrap broker's own, where replicas hibernate)."""
    from net.codec import request_schema
    from net.schema_build import build, nested

    if not brokers or not client.supports(DESCRIBE_CONFIGS):
        return {}
    conn = client.bootstrap
    resource_cls = nested(request_schema(DESCRIBE_CONFIGS, conn.version_for(DESCRIBE_CONFIGS)),
                          "DescribeConfigsResource")
    answer = conn.request(DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=False,
                          resources=tuple(build(resource_cls, resource_type=RESOURCE_BROKER, resource_name=str(b),
                                                configuration_keys=(CAPACITY_KEY, HOSTED_KEY, POOL_STATS_KEY))
                                     for b in brokers))
    out: dict[int, Optional[int]] = {}
    for r in answer.results:
        pool = next((c.value for c in r.configs if c.name == POOL_STATS_KEY), None)
        if pool and pools is not None:
            try:
                pools[int(r.resource_name)] = pool
            except ValueError:
                pass
        values = {c.name: c.value for c in r.configs}
        value = values.get(HOSTED_KEY) or values.get(CAPACITY_KEY)
        try:
            out[int(r.resource_name)] = int(value) if value is not None else None
        except ValueError:
            continue
    return out


def new_partition_assignment(assignment: dict[int, list[int]], current_count: int) -> list[list[int]]:
    """--alter --replica-assignment lists every partition: only those past the current count are new."""
    return [assignment[p] for p in sorted(assignment) if p >= current_count]


# ---- commands ---------------------------------------------------------------------------------------------------
def _error(text: str) -> None:
    print(f"Error while executing topic command : {text}", file=sys.stderr)


def _matching(client: AdminClient, args) -> Optional[list[str]]:
    """Topics --topic names; None (after printing why) when it must exist and does not."""
    cluster = client.metadata(None)
    names = select_topics(cluster.topics, args.topic, args.exclude_internal)
    if args.topic and not names and not args.if_exists:
        _error(f"Topic '{args.topic}' does not exist as expected")
        return None
    return names


def cmd_list(client: AdminClient, args) -> int:
    cluster = client.metadata(None)
    for name in select_topics(cluster.topics, args.topic, args.exclude_internal):
        print(name)
    return EXIT_OK


def cmd_describe(client: AdminClient, args) -> int:
    names = _matching(client, args)
    if names is None:
        return EXIT_FAILED
    if not names:
        return EXIT_OK
    cluster = client.cluster
    code = EXIT_OK
    configs: dict[str, list[ConfigEntry]] = {}
    for name, (outcome, entries) in client.describe_topic_configs(names).items():
        if not outcome.ok:
            _error(f"cannot describe the configs of topic '{name}': {outcome.text()}")
            code = EXIT_FAILED
        configs[name] = entries
    reassignments: dict[tuple[str, int], OngoingReassignment] = {}
    if client.supports(LIST_PARTITION_REASSIGNMENTS):
        reassignments = client.list_partition_reassignments(
            [(n, p) for n in names for p in cluster.topics[n].partitions])
    filter_name = next((f for f in REPORT_FILTERS if getattr(args, f)), None)
    if filter_name is None and not args.topics_with_overrides:
        # Usage first, so the topic and partition lines keep kafka-topics.sh's shape and order.
        brokers = sorted(cluster.brokers)
        pools: dict[int, str] = {}
        try:
            capacities = broker_capacities(client, brokers, pools)
        except AdminError as exc:
            _error(f"cannot read the brokers' capacities: {exc}")
            capacities = {}
        for line in broker_usage_lines(list(cluster.topics.values()), brokers, capacities, pools):
            print(line)
    for line in describe_lines([cluster.topics[n] for n in names], configs, reassignments, set(cluster.brokers),
                               filter_name, args.topics_with_overrides):
        print(line)
    return code


def cmd_create(client: AdminClient, args) -> int:
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else {}
    spec = NewTopic(args.topic,
                    num_partitions=-1 if assignment or args.partitions is None else args.partitions,
                    replication_factor=-1 if assignment or args.replication_factor is None else args.replication_factor,
                    assignment=assignment, configs=parse_configs(args.config or []))
    if "." in args.topic or "_" in args.topic:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    outcome = client.create_topics([spec])[args.topic]
    if outcome.ok:
        print(f"Created topic {args.topic}.")
        return EXIT_OK
    if outcome.error.name == "topic_already_exists" and args.if_not_exists:
        return EXIT_OK
    _error(outcome.text())
    return EXIT_FAILED


def cmd_alter(client: AdminClient, args) -> int:
    names = _matching(client, args)
    if names is None:
        return EXIT_FAILED
    code = EXIT_OK
    if names and args.partitions is not None:
        assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
        increases = {}
        for name in names:
            current = len(client.cluster.topics[name].partitions)
            new = None if assignment is None else new_partition_assignment(assignment, current)
            increases[name] = (args.partitions, new)
        for name, outcome in sorted(client.create_partitions(increases).items()):
            if outcome.ok:
                print(f"Adding partitions succeeded for topic {name}: now {args.partitions} partitions.")
            else:
                _error(f"topic '{name}': {outcome.text()}")
                code = EXIT_FAILED
    ops = [(k, OP_SET, v) for k, v in parse_configs(args.config or []).items()]
    ops += [(k.strip(), OP_DELETE, None) for k in args.delete_config or []]
    if names and ops:
        for name, outcome in sorted(client.alter_topic_configs({n: ops for n in names}).items()):
            if outcome.ok:
                print(f"Completed updating config for topic {name}.")
            else:
                _error(f"topic '{name}': {outcome.text()}")
                code = EXIT_FAILED
    return code


def cmd_delete(client: AdminClient, args) -> int:
    names = _matching(client, args)
    if names is None:
        return EXIT_FAILED
    if not names:
        return EXIT_OK
    code = EXIT_OK
    for name, outcome in sorted(client.delete_topics(names).items()):
        if outcome.ok:
            print(f"Deleted topic {name}.")
        else:
            _error(f"topic '{name}': {outcome.text()}")
            code = EXIT_FAILED
    return code


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "create": cmd_create, "alter": cmd_alter,
            "delete": cmd_delete}


def add_parser(sub) -> None:
    """Register `topics` under the raykafka command's subparsers."""
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics (kafka-topics.sh)",
                            description="Create, list, describe, alter and delete topics. Exit status: 0 done, "
                                        "1 the broker refused an item or could not be reached, 2 usage error.")
    topics.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    add_command_config_option(topics)
    topics.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each request")
    topics.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    actions = topics.add_mutually_exclusive_group(required=True)
    for action, text in (("list", "list the topics"), ("describe", "partitions, leaders, replicas, ISR, configs"),
                         ("create", "create a topic"), ("alter", "add partitions or change configs"),
                         ("delete", "delete topics")):
        actions.add_argument(f"--{action}", action="store_true", help=text)
    topics.add_argument("--topic", help="topic name (a whole-name regular expression except with --create)")
    topics.add_argument("--partitions", type=int, help="partition count (--create, --alter)")
    topics.add_argument("--replication-factor", type=int, help="replicas per partition (--create)")
    topics.add_argument("--replica-assignment", metavar="B:B,B:B",
                        help="replicas per partition, partitions separated by ',' (--create, --alter)")
    topics.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config (repeatable)")
    topics.add_argument("--delete-config", action="append", metavar="KEY", help="remove a topic config override "
                                                                                "(--alter, repeatable)")
    topics.add_argument("--under-replicated-partitions", action="store_true",
                        help="--describe: only partitions with fewer in-sync replicas than replicas")
    topics.add_argument("--unavailable-partitions", action="store_true",
                        help="--describe: only partitions whose leader is not available")
    topics.add_argument("--under-min-isr-partitions", action="store_true",
                        help="--describe: only partitions with fewer in-sync replicas than min.insync.replicas")
    topics.add_argument("--at-min-isr-partitions", action="store_true",
                        help="--describe: only partitions with exactly min.insync.replicas in-sync replicas")
    topics.add_argument("--topics-with-overrides", action="store_true",
                        help="--describe: only topics with non-default configs")
    topics.add_argument("--if-exists", action="store_true", help="--alter/--delete/--describe: no error if absent")
    topics.add_argument("--if-not-exists", action="store_true", help="--create: no error if it exists")
    topics.add_argument("--exclude-internal", action="store_true", help="--list/--describe: skip internal topics")
    topics.set_defaults(run_admin_command=run)


def run(args) -> int:
    problem = usage_problem(args)
    if problem is None:
        try:
            if args.replica_assignment:
                parse_replica_assignment(args.replica_assignment)
            parse_configs(args.config or [])
        except UsageError as exc:
            problem = str(exc)
    if problem is not None:
        print(f"raykafka topics: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        client = admin_client_for(args, "raykafka-topics")
    except (AdminError, OSError) as exc:
        print(f"raykafka topics: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        return COMMANDS[action_of(args)](client, args)
    except (AdminError, OSError) as exc:
        _error(str(exc))
        return EXIT_FAILED
    finally:
        client.close()
