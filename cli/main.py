"""`raykafka` command line.

    raykafka start [--config server.properties] [--data-dir DIR] [--override key=value ...]

runs a broker in the foreground until SIGINT/SIGTERM (node/process.py). With
no zookeeper.connect it starts a ZooKeeper from the installed Debian package
under the data dir; with no --ray-address it starts a local Ray on loopback.
The other commands are the admin and console tools (cli/<command>.py). This
module only parses arguments.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from core.config import ConfigError


def _parse_overrides(items: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        if "=" not in item:
            raise ConfigError(item, "--override expects key=value")
        key, value = item.split("=", 1)
        pairs.append((key.strip(), value))
    return pairs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raykafka", description="Kafka-compatible broker on Ray")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="run a broker in the foreground")
    start.add_argument("--config", help="server.properties file (Kafka key names)")
    start.add_argument("--data-dir", default="raykafka-data",
                       help="where logs, ZooKeeper data and meta.properties live (default: ./raykafka-data)")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="set a broker config key (repeatable)")
    start.add_argument("--dashboard", action="store_true", help="start Ray's dashboard (~1 GiB more memory)")
    start.add_argument("--ray-address", help="join an existing Ray cluster instead of starting a local one")
    start.add_argument("--nodes", type=int, default=1,
                       help="start an N-node Ray cluster on this machine, one broker per node (for trying things out)")
    start.add_argument("--racks", help="with --nodes: comma-separated rack label per node (Ray node label 'rack')")
    start.add_argument("--log-level", default="INFO")
    from cli import groups

    groups.add_parser(sub)  # `raykafka groups ...` (cli/groups.py)
    from cli import elect_leaders, reassign, topics

    topics.add_parser(sub)  # `raykafka topics ...` (cli/topics.py)
    reassign.add_parser(sub)  # `raykafka reassign ...` (cli/reassign.py)
    elect_leaders.add_parser(sub)  # `raykafka elect-leaders ...` (cli/elect_leaders.py)
    from cli import balancer

    balancer.add_parser(sub)  # `raykafka balancer ...` (cli/balancer.py)
    from cli import configs

    configs.add_parser(sub)  # `raykafka configs ...` (cli/configs.py)
    from cli import transactions

    transactions.add_parser(sub)  # `raykafka transactions ...` (cli/transactions.py)
    from cli import acls

    acls.add_parser(sub)  # `raykafka acls ...` (cli/acls.py)
    from cli import console

    console.add_producer_parser(sub)  # `raykafka console-producer ...` (cli/console.py)
    console.add_consumer_parser(sub)  # `raykafka console-consumer ...` (cli/console.py)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.command == "start":
        return _start(args)
    if args.command == "groups":
        from cli import groups

        return groups.run(args)
    if getattr(args, "run_admin_command", None) is not None:  # topics, reassign, elect-leaders, console-*
        return args.run_admin_command(args)
    return 2


def _start(args: argparse.Namespace) -> int:
    from node.config import load_broker_config
    from node.process import StartOptions, run_broker

    try:
        config = load_broker_config(args.config, _parse_overrides(args.override), os.environ)
    except ConfigError as exc:
        print(f"raykafka: invalid configuration: {exc}", file=sys.stderr)
        return 2
    racks = tuple(args.racks.split(",")) if args.racks else ()
    options = StartOptions(nodes=args.nodes, racks=racks, ray_address=args.ray_address, dashboard=args.dashboard)
    return run_broker(config, Path(args.data_dir).resolve(), options)


if __name__ == "__main__":
    sys.exit(main())
