"""`raykafka elect-leaders`: preferred or unclean leader election, like Kafka's
kafka-leader-election.sh (same options, same messages).

    raykafka elect-leaders --bootstrap-server H:P --election-type PREFERRED|UNCLEAN
                           (--all-topic-partitions | --topic T --partition P | --path-to-json-file F)

The JSON file: {"partitions":[{"topic":"foo","partition":1}]}.

Exit status: 0 every partition has the leader asked for, including those that
already had it (ELECTION_NOT_NEEDED, reported apart as Kafka does); 1 some
election failed or the broker could not be reached; 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from core.error_codes import ErrorCode

from cli.admin_client import (ELECTION_PREFERRED, ELECTION_UNCLEAN, AdminClient, AdminError, Outcome,
                              add_command_config_option, admin_client_for)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ELECTION_TYPES = {"PREFERRED": ELECTION_PREFERRED, "UNCLEAN": ELECTION_UNCLEAN}

TopicPartition = tuple[str, int]


class UsageError(Exception):
    pass


def election_type(text: str) -> str:
    """argparse type: case-insensitive, as Kafka's ElectionTypeConverter."""
    name = text.strip().upper()
    if name not in ELECTION_TYPES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PREFERRED or UNCLEAN")
    return name


def parse_partitions_file(text: str) -> list[TopicPartition]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"the partitions file is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "partitions" not in data:
        raise UsageError('Replica election data is missing "partitions" field')
    partitions = []
    try:
        for entry in data["partitions"]:
            partitions.append((str(entry["topic"]), int(entry["partition"])))
    except (TypeError, KeyError, ValueError):
        raise UsageError('each entry needs "topic" and "partition": '
                         '{"partitions":[{"topic":"foo","partition":1}]}') from None
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise UsageError("Replica election data contains duplicate partitions: "
                         + ", ".join(f"{t}-{p}" for t, p in duplicates))
    return sorted(partitions)


def usage_problem(args) -> Optional[str]:
    sources = [args.all_topic_partitions, args.topic is not None, args.path_to_json_file is not None]
    if sum(sources) != 1:
        return "exactly one of --all-topic-partitions, --topic or --path-to-json-file must be specified"
    if args.topic is not None and args.partition is None:
        return "--partition is required with --topic"
    if args.partition is not None and args.topic is None:
        return "--partition is only valid with --topic"
    return None


def election_report(type_name: str, results: dict[TopicPartition, Outcome]) -> tuple[list[str], list[str], int]:
    """(stdout lines, stderr lines, exit status): elected, already elected, failed."""
    elected = sorted(tp for tp, o in results.items() if o.ok)
    not_needed = sorted(tp for tp, o in results.items() if o.error == ErrorCode.election_not_needed)
    failed = sorted(tp for tp, o in results.items() if not o.ok and o.error != ErrorCode.election_not_needed)
    out, err = [], []
    if elected:
        out.append(f"Successfully completed leader election ({type_name}) for partitions "
                   + ", ".join(f"{t}-{p}" for t, p in elected))
    if not_needed:
        out.append("Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in not_needed))
    for t, p in failed:
        err.append(f"Error completing leader election ({type_name}) for partition: {t}-{p}: "
                   f"{results[(t, p)].text()}")
    if failed:
        err.append(f"{len(failed)} replica(s) could not be elected")
    return out, err, EXIT_FAILED if failed else EXIT_OK


def add_parser(sub) -> None:
    """Register `elect-leaders` under the raykafka command's subparsers."""
    elect = sub.add_parser("elect-leaders", help="preferred or unclean leader election (kafka-leader-election.sh)",
                           description="Elect partition leaders. Exit status: 0 every partition has the leader "
                                       "asked for (already elected counts), 1 some election failed, 2 usage error.")
    elect.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    add_command_config_option(elect)
    elect.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the elections")
    elect.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    elect.add_argument("--election-type", type=election_type, required=True, metavar="PREFERRED|UNCLEAN",
                       help="preferred: move leadership back to the first replica; unclean: elect any live "
                            "replica where no in-sync one is left (may lose records)")
    elect.add_argument("--all-topic-partitions", action="store_true", help="every eligible partition")
    elect.add_argument("--topic", help="one topic (with --partition)")
    elect.add_argument("--partition", type=int, help="the partition of --topic")
    elect.add_argument("--path-to-json-file", help='{"partitions":[{"topic":"foo","partition":1}]}')
    elect.set_defaults(run_admin_command=run)


def run(args) -> int:
    problem = usage_problem(args)
    partitions: Optional[list[TopicPartition]] = None
    if problem is None:
        try:
            if args.path_to_json_file is not None:
                with open(args.path_to_json_file, encoding="utf-8") as f:
                    partitions = parse_partitions_file(f.read())
            elif args.topic is not None:
                partitions = [(args.topic, args.partition)]
        except UsageError as exc:
            problem = str(exc)
        except OSError as exc:
            problem = f"cannot read {args.path_to_json_file}: {exc.strerror}"
    if problem is not None:
        print(f"raykafka elect-leaders: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with admin_client_for(args, "raykafka-elect-leaders") as client:
            results = client.elect_leaders(ELECTION_TYPES[args.election_type], partitions)
    except (AdminError, OSError) as exc:
        print(f"raykafka elect-leaders: {exc}", file=sys.stderr)
        return EXIT_FAILED
    out, err, code = election_report(args.election_type, results)
    for line in out:
        print(line)
    for line in err:
        print(line, file=sys.stderr)
    return code
