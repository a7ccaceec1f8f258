"""`raykafka` command line.

    raykafka start [--config server.properties] [--data-dir DIR] [--override key=value ...]

runs a broker in the foreground until SIGINT/SIGTERM. With no
zookeeper.connect it starts a ZooKeeper from the installed Debian package
under the data dir; with no --ray-address it starts a local Ray on loopback.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from core.config import BrokerConfig, ConfigError
from core.worker_setup import BROKER_RUNTIME_ENV, HOOK, SETUP_HOOK_ENV_VAR
from node.config import load_broker_config

log = logging.getLogger("raykafka")

READY_TIMEOUT_S = 120
# Bounds on replacing a dead edge (cli/supervision.py): its start (bind,
# ZooKeeper registration) and its first metadata from the controller.
REPLACE_START_TIMEOUT_S = 30
REPLACE_READY_TIMEOUT_S = 30
# How long the supervisor waits for Ray to bring a restarted purgatory back.
RESTART_WAIT_S = 30


RAY_AUTH_TOKEN_FILE_NAME = "ray-auth-token"


def _environment_for_ray() -> None:
    # Keep every Ray address on loopback (see shared/notes/ENVIRONMENT.md).
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def metrics_through_opencensus() -> None:
    """On a cluster raykafka starts: Ray's metrics through OpenCensus, not
    OpenTelemetry (Ray 2.60's default). With OpenTelemetry a process that sets
    ~6,000 gauge series every report interval (the edge: Kafka's request-time
    histograms, core/metrics.py) grows without bound inside Ray's native
    metrics client, ~1.8 MiB/s measured with a plain actor and nothing of ours
    (bench/ray_metrics_growth.py; 1.7 GiB per 1M fuzz inputs in the edge,
    bench/README.md "Protocol fuzz"); through OpenCensus the same actor stays
    flat. Same series on the endpoint. The operator's own setting wins; a
    cluster the broker joins keeps its own (deploy/ray-cluster.yaml sets it)."""
    os.environ.setdefault("RAY_enable_open_telemetry", "0")


def ray_token_for_own_cluster(data_dir: Path) -> str | None:
    """Ray's token authentication for a cluster this process starts (README,
    Security): anyone who can attach a Ray driver can call every actor of the
    broker, so GCS, raylets and drivers require the cluster's token. It comes
    from RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH when the operator set one, else
    from <data-dir>/ray-auth-token, generated (mode 0600) at the first start.
    Not ~/.ray/auth_token: every Ray driver of the user finds that one by
    itself, and a broker's token is for the broker's operators only.
    RAY_AUTH_MODE=disabled (tests' throwaway clusters) turns it off.
    Returns the token file used (None: disabled, or a token in the environment)."""
    mode = os.environ.setdefault("RAY_AUTH_MODE", "token").strip().lower()
    if mode != "token":
        log.warning("RAY_AUTH_MODE=%s: the broker's Ray cluster accepts drivers without a token; anyone "
                    "who reaches its ports can call the broker's actors", mode)
        return None
    path = None
    if not os.environ.get("RAY_AUTH_TOKEN"):
        path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(data_dir / RAY_AUTH_TOKEN_FILE_NAME)
        if not os.path.exists(path):
            import secrets

            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32))
        os.environ["RAY_AUTH_TOKEN_PATH"] = path
    if "ray" in sys.modules:
        # Ray reads its auth mode once per process: an imported Ray reads it again
        # (as Ray's own _enable_token_auth does).
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    return path


# Ray replies above this size go through the shared-memory object store
# (a put and a get, 3-4x the cost of an inline reply); Ray's default is
# 100 KiB. Follower fetches answer with up to replica.fetch.max.bytes (1 MiB)
# of records: inlining them took RF=3 acks=1 produce from ~30 to ~42 MB/s
# (bench.replication, medians of 4 rounds each; acks=all unchanged).
MAX_INLINE_REPLY_BYTES = 4 * 1024 * 1024


def ray_system_config() -> dict:
    """_system_config for the Ray clusters raykafka starts itself (a joined
    cluster's own config applies there: `ray start --head --system-config`,
    as deploy/ray-cluster.yaml does)."""
    return {
        # Whole-node loss only (a dead actor process, replica or edge, is seen
        # by Ray's death watch in ~10-55 ms, independent of this): the GCS
        # asks every raylet each second and declares its node dead after 10
        # consecutive failed checks. A raylet that died on a reachable host
        # refuses the call at once: ~10 s. A host that vanishes silently costs
        # each check its 3 s timeout: at most ~40 s. A saturated node
        # (load average 75-160 with ~240 replicas, issue 18) answered late
        # under the old 500 ms x 3 / 1 s timeout (~1.5 s) and was declared
        # dead, taking every actor of a single-node broker with it; now its
        # raylet has to miss every check for 10-40 s in a row.
        "health_check_period_ms": 1000, "health_check_failure_threshold": 10, "health_check_timeout_ms": 3000,
        "max_direct_call_object_size": MAX_INLINE_REPLY_BYTES,
        # Ray starts a worker per CPU for the first driver. On a cluster the
        # broker joins, its actors run in the job's runtime environment
        # (BROKER_RUNTIME_ENV), so those workers would only sit idle (~44 MiB
        # each); on its own cluster they could serve, but a node's first
        # actors are its edge, controller and purgatory, started one by one.
        "prestart_worker_first_driver": False,
        # Each process hands its metrics to Ray every
        # raykafka.metrics.report.interval.ms (5 s, core/metrics.py); Ray's
        # workers then report to the node's agent this often (Ray: 10 s).
        "metrics_report_interval_ms": 5000,
    }


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
        try:
            config = load_broker_config(args.config, _parse_overrides(args.override), os.environ)
        except ConfigError as exc:
            print(f"raykafka: invalid configuration: {exc}", file=sys.stderr)
            return 2
        for key in config.no_effect_keys_set():
            log.warning("config %s is accepted for compatibility but has no effect", key)
        return BrokerProcess(config, Path(args.data_dir).resolve(), args).run()
    if args.command == "groups":
        from cli import groups

        return groups.run(args)
    if getattr(args, "run_admin_command", None) is not None:  # topics, reassign, elect-leaders, console-*
        return args.run_admin_command(args)
    return 2


class BrokerProcess:
    """Everything one `raykafka start` owns, started in order and stopped in reverse."""

    def __init__(self, config: BrokerConfig, data_dir: Path, args: argparse.Namespace):
        self.config = config
        self.data_dir = data_dir
        self.args = args
        self.zookeeper = None
        self.ray_temp_dir: str | None = None
        self._raylet_pids: list[int | None] = []
        self.started_ray = False
        self.controller = None
        self.edge = None
        self.broker_id = -1
        self.stop_requested = threading.Event()
        self.revive_requested = threading.Event()
        self.add_node_requested = threading.Event()
        self.zk_connect: str | None = None
        self.zk_digest_file: str | None = None
        self.ray_auth_token_path: str | None = None
        self.cluster = None  # ray.cluster_utils.Cluster with --nodes
        self.nodes: list[dict] = []  # one per broker this process started
        # Supervision (cli/supervision.py): a pending park() call per watched
        # actor, keyed (broker id, "edge", k) (k = 0 the primary, k >= 1 a
        # sibling) or (broker id, "purgatory", 0); it fails when the process dies.
        self._watches: dict[tuple, object] = {}
        from cli.supervision import RestartPolicy

        self.restarts = RestartPolicy()

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stop_requested.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_requested.set())
        # With --nodes: SIGHUP restarts the brokers whose Ray node died, as if
        # their machines came back (same broker id, same log dir).
        signal.signal(signal.SIGHUP, lambda *_: self.revive_requested.set())
        # With --nodes: SIGUSR1 adds a broker on a new Ray node, as if a machine
        # joined the cluster (README "Scaling out").
        signal.signal(signal.SIGUSR1, lambda *_: self.add_node_requested.set())

    def run(self) -> int:
        self._install_signal_handlers()
        try:
            host, port = self.start()
        except StartupError as exc:
            print(f"raykafka: {exc}", file=sys.stderr)
            self.shutdown()
            return 1
        except Exception:
            log.exception("startup failed")
            self.shutdown()
            return 1
        print(f"raykafka ready on {host}:{port}", flush=True)
        for url in self._metrics_urls():
            print(f"raykafka metrics on {url}", flush=True)
        for node in self.nodes:
            self._watch_node(node)
        while not self.stop_requested.wait(0.5):
            try:
                self._supervise()
            except Exception:
                log.exception("supervision round failed")
            if self.revive_requested.is_set():
                self.revive_requested.clear()
                try:
                    self._revive_dead_nodes()
                except Exception:
                    log.exception("reviving dead nodes failed")
            if self.add_node_requested.is_set():
                self.add_node_requested.clear()
                try:
                    self._add_node()
                except Exception:
                    log.exception("adding a node failed")
        log.info("stopping broker %d", self.broker_id)
        self.shutdown()
        return 0

    def start(self) -> tuple[str, int]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        zk_connect = self.config["zookeeper.connect"]
        self._setup_zookeeper_security(embedded=not zk_connect)
        if not zk_connect:
            from metadata.embedded_zookeeper import EmbeddedZooKeeper

            self.zookeeper = EmbeddedZooKeeper(self.data_dir / "zookeeper")
            zk_connect = self.zookeeper.start()
            log.info("embedded ZooKeeper on %s (pid %s)", zk_connect, self.zookeeper.pid)
        count = max(1, self.args.nodes)
        identities = []
        for index in range(count):
            if count == 1:
                log_dirs = [str(p.resolve()) for p in self.config.log_dirs(self.data_dir)]
            else:
                # Each local node is its own broker: own log dir, own meta.properties.
                log_dirs = [str((self.data_dir / f"node-{index}" / "logs").resolve())]
            for d in log_dirs:
                Path(d).mkdir(parents=True, exist_ok=True)
            configured = self.config["broker.id"]
            broker_id, cluster_id = self._identify(zk_connect, log_dirs,
                                                   configured + index if configured >= 0 else -1)
            identities.append((broker_id, log_dirs))
        self.broker_id = identities[0][0]
        self.zk_connect, self.cluster_id = zk_connect, cluster_id
        node_ids = self._start_ray(count)
        for index, ((broker_id, log_dirs), node_id) in enumerate(zip(identities, node_ids)):
            self.nodes.append(self._start_node(zk_connect, broker_id, log_dirs, node_id, index))
        self._wait_ready(self.nodes)
        self._write_nodes_file()
        return self.nodes[0]["host"], self.nodes[0]["port"]

    def _setup_zookeeper_security(self, embedded: bool) -> None:
        """Credentials, TLS and znode ACLs for every ZooKeeper session of this
        broker, its Ray workers' included (metadata/zk_security.py). The
        embedded ZooKeeper (loopback only) gets digest credentials generated at
        its first start, and Kafka's ACLs unless zookeeper.set.acl=false is set."""
        from metadata import zk_security

        digest_file = None
        if embedded and not self.config["raykafka.zookeeper.digest.file"]:
            digest_file = self.data_dir / "zookeeper" / zk_security.DIGEST_FILE_NAME
            zk_security.generate_digest_file(digest_file)
        config = self.config
        if embedded and not config.is_explicit("zookeeper.set.acl"):
            config = config.with_values({"zookeeper.set.acl": True})
        try:
            security = zk_security.from_config(config, str(digest_file) if digest_file else None)
        except (zk_security.ZkSecurityError, OSError) as exc:
            raise StartupError(f"ZooKeeper security: {exc}") from None
        self.zk_digest_file = str(digest_file or config["raykafka.zookeeper.digest.file"] or "") or None
        path = zk_security.write_client_config(security, self.data_dir / zk_security.CLIENT_CONFIG_FILE_NAME)
        os.environ[zk_security.ENV_VAR] = path  # inherited by the raylets, so by every worker
        zk_security.install(security)
        if security.set_acl:
            log.info("ZooKeeper: znodes get Kafka's ACLs (writable by the brokers' %s identity only)",
                     "digest" if security.digest else "TLS")

    def _metrics_urls(self) -> list[str]:
        """Ray's Prometheus endpoint of each node running a broker of this process."""
        import ray

        try:
            mine = {n["ray_node_id"] for n in self.nodes}
            return [f"http://{n['NodeManagerAddress']}:{n['MetricsExportPort']}/metrics" for n in ray.nodes()
                    if n.get("Alive") and n.get("NodeID") in mine and n.get("MetricsExportPort")]
        except Exception as exc:
            log.warning("could not read the metrics ports: %r", exc)
            return []

    def _write_nodes_file(self) -> None:
        """For operators and tests: which pids make up which broker."""
        import ray

        # What a broker joining this cluster from another process needs:
        # `raykafka start --ray-address <ray_address> --override zookeeper.connect=<zk_connect>`.
        ray_address = self.cluster.address if self.cluster is not None else \
            ray.get_runtime_context().gcs_address
        # The paths of the secrets (never the secrets): a driver attaching to this
        # Ray cluster needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=ray_auth_token_path;
        # another broker joining this ZooKeeper needs raykafka.zookeeper.digest.file.
        plain = [{**{k: v for k, v in n.items() if not k.startswith("_")}, "pid": os.getpid(),
                  "zk_connect": self.zk_connect, "ray_address": ray_address,
                  "ray_auth_token_path": self.ray_auth_token_path, "zk_digest_file": self.zk_digest_file}
                 for n in self.nodes]
        (self.data_dir / "nodes.json").write_text(json.dumps(plain, indent=1))

    def _revive_dead_nodes(self) -> None:
        import psutil

        if self.cluster is None:
            log.warning("SIGHUP: node revival needs --nodes")
            return
        for index, node in enumerate(list(self.nodes)):
            pid = node.get("raylet_pid")
            alive = pid is not None and psutil.pid_exists(pid) and \
                psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            if alive:
                continue
            log.info("reviving broker %d on a new Ray node", node["broker_id"])
            racks = (self.args.racks or "").split(",") if self.args.racks else []
            extra = {"labels": {"rack": racks[index]}} if racks else {}
            metrics_port = self.config["raykafka.metrics.port"]
            if metrics_port:  # the dead node's endpoint port (its agent died with it)
                extra["metrics_export_port"] = metrics_port + index
            ray_node = self.cluster.add_node(num_cpus=os.cpu_count() or 2,
                                             object_store_memory=256 * 1024 * 1024, **extra)
            # Starting a Ray node installs Ray's SIGTERM handler (exit 1): take it back.
            self._install_signal_handlers()
            self._raylet_pids[index] = _raylet_pid(ray_node)
            fresh = self._start_node(self.zk_connect, node["broker_id"], node["log_dirs"], ray_node.node_id, index)
            self._wait_ready([fresh])
            self.nodes[index] = fresh
            for key in [k for k in self._watches if k[0] == node["broker_id"]]:
                del self._watches[key]
            for key in [k for k in self.restarts.pending() if k[0] == node["broker_id"]]:
                self.restarts.forget(key)
            self._watch_node(fresh)
        self._write_nodes_file()

    def _add_node(self) -> None:
        """One more broker on a new Ray node of this process's local cluster (--nodes)."""
        if self.cluster is None:
            log.warning("SIGUSR1: adding a node needs --nodes")
            return
        index = len(self.nodes)
        log_dirs = [str((self.data_dir / f"node-{index}" / "logs").resolve())]
        for d in log_dirs:
            Path(d).mkdir(parents=True, exist_ok=True)
        configured = self.config["broker.id"]
        broker_id, _cluster_id = self._identify(self.zk_connect, log_dirs,
                                                configured + index if configured >= 0 else -1)
        log.info("adding broker %d on a new Ray node", broker_id)
        extra = {}
        metrics_port = self.config["raykafka.metrics.port"]
        if metrics_port:
            extra["metrics_export_port"] = metrics_port + index
        ray_node = self.cluster.add_node(num_cpus=os.cpu_count() or 2, object_store_memory=256 * 1024 * 1024,
                                         **extra)
        # Starting a Ray node installs Ray's SIGTERM handler (exit 1): take it back.
        self._install_signal_handlers()
        self._raylet_pids.append(_raylet_pid(ray_node))
        fresh = self._start_node(self.zk_connect, broker_id, log_dirs, ray_node.node_id, index)
        self._wait_ready([fresh])
        self.nodes.append(fresh)
        self._watch_node(fresh)
        self._write_nodes_file()

    def _identify(self, zk_connect: str, log_dirs: list[str], configured: int) -> tuple[int, str]:
        """broker.id from config, else meta.properties, else /brokers/seqid (Kafka's order)."""
        from metadata.kafka_zk import KafkaZkClient
        from storage.meta_properties import MetaProperties

        zk = KafkaZkClient(zk_connect, session_timeout_ms=self.config["zookeeper.session.timeout.ms"])
        zk.start()
        try:
            zk.ensure_persistent_paths()
            if zk.security.set_acl:
                zk.secure_existing_paths()
            cluster_id = zk.cluster.get_or_create_id()
            found = {}
            for d in log_dirs:
                meta = MetaProperties.read_if_exists(d)
                if meta is not None:
                    found[d] = meta
            ids = {m.broker_id for m in found.values()}
            clusters = {m.cluster_id for m in found.values() if m.cluster_id}
            if len(ids) > 1:
                raise StartupError(f"log dirs disagree on broker.id: {sorted(ids)} (InconsistentBrokerIdException)")
            if clusters and clusters != {cluster_id}:
                raise StartupError(f"log dirs belong to cluster {clusters.pop()} but ZooKeeper holds cluster "
                                   f"{cluster_id} (InconsistentClusterIdException)")
            stored = ids.pop() if ids else None
            if configured >= 0 and stored is not None and configured != stored:
                raise StartupError(f"configured broker.id {configured} doesn't match stored broker.id "
                                   f"{stored} in meta.properties (InconsistentBrokerIdException)")
            if configured >= 0:
                broker_id = configured
            elif stored is not None:
                broker_id = stored
            else:
                broker_id = zk.brokers.generate_id(self.config["reserved.broker.max.id"])
            for d in log_dirs:
                MetaProperties(cluster_id=cluster_id, broker_id=broker_id).write(d)
            return broker_id, cluster_id
        finally:
            zk.close()

    def _start_ray(self, count: int) -> list[str]:
        """Start (or join) Ray; returns the Ray node id for each broker to start."""
        _environment_for_ray()
        if not self.args.ray_address:
            metrics_through_opencensus()
            # Before Ray's first import: its config reads RAY_AUTH_MODE once per process.
            self.ray_auth_token_path = ray_token_for_own_cluster(self.data_dir)
        import ray

        namespace = self.config["raykafka.namespace"]
        if self.args.ray_address:
            # The cluster's own token settings apply (RAY_AUTH_MODE, RAY_AUTH_TOKEN[_PATH]
            # or ~/.ray/auth_token, as for any Ray driver). The workers read the
            # ZooKeeper client settings from the same path on every node.
            from metadata import zk_security

            runtime_env = {**BROKER_RUNTIME_ENV,
                           "env_vars": {zk_security.ENV_VAR: os.environ[zk_security.ENV_VAR]}}
            ray.init(address=self.args.ray_address, namespace=namespace, logging_level=logging.WARNING,
                     runtime_env=runtime_env)
            self._install_signal_handlers()
            return [ray.get_runtime_context().get_node_id()]
        # Our own cluster: the raylets (and so every worker) inherit the hook
        # from this process's environment, and the job has no runtime
        # environment, which would double each replica's start-up cost
        # (core/worker_setup.py).
        os.environ[SETUP_HOOK_ENV_VAR] = HOOK
        # Unix socket paths must stay under ~107 bytes: keep Ray's dir short.
        self.ray_temp_dir = tempfile.mkdtemp(prefix="rk-ray-", dir="/tmp")
        system_config = ray_system_config()
        cpus = os.cpu_count() or 2
        # raykafka.metrics.port: Ray's Prometheus endpoint (node k of --nodes: port + k); 0: Ray's choice.
        metrics_port = self.config["raykafka.metrics.port"] or None

        def metrics_port_of(i: int) -> dict:
            return {"metrics_export_port": metrics_port + i} if metrics_port else {}

        if count == 1:
            ray.init(namespace=namespace, include_dashboard=self.args.dashboard, _temp_dir=self.ray_temp_dir,
                     logging_level=logging.WARNING, num_cpus=cpus, object_store_memory=512 * 1024 * 1024,
                     _system_config=system_config, _metrics_export_port=metrics_port)
            node_ids = [ray.get_runtime_context().get_node_id()]
        else:
            from ray.cluster_utils import Cluster

            # cluster_utils writes its address file under Ray's default temp
            # dir; keep it (and every session dir) in ours, not in /tmp/ray.
            os.environ["RAY_TMPDIR"] = self.ray_temp_dir
            os.makedirs(os.path.join(self.ray_temp_dir, "ray"), exist_ok=True)
            racks = (self.args.racks or "").split(",") if self.args.racks else []
            if racks and len(racks) != count:
                raise StartupError(f"--racks names {len(racks)} racks for {count} nodes")

            def labels(i: int) -> dict:
                return {"labels": {"rack": racks[i]}} if racks else {}

            self.cluster = Cluster(initialize_head=True, head_node_args={
                **labels(0), **metrics_port_of(0), "num_cpus": cpus, "include_dashboard": self.args.dashboard,
                "object_store_memory": 256 * 1024 * 1024, "_system_config": system_config})
            for i in range(1, count):
                self.cluster.add_node(num_cpus=cpus, object_store_memory=256 * 1024 * 1024, **labels(i),
                                      **metrics_port_of(i))
            ray.init(address=self.cluster.address, namespace=namespace, logging_level=logging.WARNING)
            node_ids = [n.node_id for n in self.cluster.list_all_nodes()]
            self._raylet_pids = [_raylet_pid(n) for n in self.cluster.list_all_nodes()]
        self.started_ray = True
        # ray.init installs a SIGTERM handler that aborts the driver; SIGTERM
        # here means controlled shutdown, so take the signals back.
        self._install_signal_handlers()
        return node_ids

    def _start_node(self, zk_connect: str, broker_id: int, log_dirs: list[str], node_id: str,
                    index: int) -> tuple[str, int]:
        """One broker on one Ray node: purgatory, controller candidate, edge."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from actors.controller import ControllerActorRemote
        from actors.purgatory import PurgatoryActorRemote
        from core.config import parse_listener
        from core.naming import controller_actor_name, edge_actor_name, edge_sibling_actor_name, purgatory_actor_name
        from actors.edge import EdgeActorRemote

        namespace = self.config["raykafka.namespace"]
        here = NodeAffinitySchedulingStrategy(node_id, soft=False)
        config = self.config
        listener = parse_listener(config["listeners"])
        from core.security_config import shift_ports

        if index and shift_ports(config["listeners"], index) != config["listeners"]:  # a fixed port to move
            config = config.with_values({"listeners": shift_ports(config["listeners"], index),
                                         "advertised.listeners": None})
        purgatory = _create_named(PurgatoryActorRemote, purgatory_actor_name(broker_id), namespace,
                                  _purgatory_options(here), broker_id, namespace)
        controller = _create_named(ControllerActorRemote, controller_actor_name(broker_id), namespace,
                                   dict(num_cpus=0, max_concurrency=1000, scheduling_strategy=here),
                                   broker_id, config, zk_connect, namespace)
        edge = _create_named(EdgeActorRemote, edge_actor_name(broker_id), namespace,
                             dict(num_cpus=0, max_concurrency=10_000, scheduling_strategy=here),
                             broker_id, config, zk_connect, log_dirs, purgatory)
        ray.get(controller.start.remote(), timeout=READY_TIMEOUT_S)
        host, port = ray.get(edge.start.remote(), timeout=READY_TIMEOUT_S)
        edge_pid = ray.get(edge.pid.remote(), timeout=READY_TIMEOUT_S)
        # raykafka.edge.processes > 1: more edges on this node, on the primary's
        # port (SO_REUSEPORT), fed metadata by the primary.
        siblings = [_create_named(EdgeActorRemote, edge_sibling_actor_name(broker_id, k), namespace,
                                  dict(num_cpus=0, max_concurrency=10_000, scheduling_strategy=here),
                                  broker_id, config, zk_connect, log_dirs, purgatory)
                    for k in range(1, config["raykafka.edge.processes"])]
        sibling_pids = []
        # The port actually bound (listeners may name port 0): a replacement edge binds it again.
        bound_port = ray.get(edge.listening_port.remote(), timeout=READY_TIMEOUT_S)
        if siblings:
            sibling_pids = ray.get([s.start_sibling.remote(bound_port, host, port) for s in siblings],
                                   timeout=READY_TIMEOUT_S)
            ray.get(edge.set_siblings.remote(siblings), timeout=READY_TIMEOUT_S)
        print(f"raykafka broker {broker_id} on {host}:{port}", flush=True)
        if index == 0:
            self.controller, self.edge = controller, edge
        return {"broker_id": broker_id, "host": host, "port": port, "ray_node_id": node_id,
                "log_dirs": log_dirs, "edge_pid": edge_pid, "edge_pids": [edge_pid, *sibling_pids],
                "purgatory_pid": ray.get(purgatory.pid.remote(), timeout=READY_TIMEOUT_S),
                "bound_port": bound_port, "index": index,
                "raylet_pid": self._raylet_pids[index] if self.cluster else None,
                "_edge": edge, "_edge_siblings": siblings, "_controller": controller, "_purgatory": purgatory,
                "_config": config}

    # ---- supervision: dead edges are replaced, a restarted purgatory is seen (cli/supervision.py) ----
    def _watch_node(self, node: dict) -> None:
        broker_id = node["broker_id"]
        for k, edge in enumerate([node["_edge"], *node["_edge_siblings"]]):
            self._watches[(broker_id, "edge", k)] = edge.park.remote()
        self._watches[(broker_id, "purgatory", 0)] = node["_purgatory"].park.remote()

    def _supervise(self) -> None:
        """One round: note the watched actors that died, replace those due."""
        import ray

        if self._watches:
            refs = {ref: key for key, ref in self._watches.items()}
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in ready:
                key = refs[ref]
                del self._watches[key]
                try:
                    ray.get(ref, timeout=0)
                    log.warning("%s's park() returned; watching it again", _describe(key))
                    self._watches[key] = self._watched_handle(key).park.remote()
                except Exception as exc:
                    log.warning("%s died (%s)", _describe(key), type(exc).__name__)
                    self.restarts.died(key, time.monotonic())
        # Primaries before siblings: a replaced sibling is handed to its primary.
        for key in sorted(self.restarts.pending(), key=lambda k: (k[0], k[1] != "purgatory", k[2])):
            node = self._node(key[0])
            if node is None:
                self.restarts.forget(key)
                continue
            from cli.supervision import Action

            decision = self.restarts.decide(key, time.monotonic(), self._node_alive(node),
                                            self.stop_requested.is_set())
            if decision.action is Action.LEAVE:
                log.warning("not replacing %s: %s", _describe(key), decision.reason)
                self.restarts.forget(key)
            elif decision.action is Action.REPLACE:
                started = time.monotonic()
                try:
                    if key[1] == "purgatory":
                        self._recover_purgatory(node)
                    elif key[2] == 0:
                        self._replace_edge(node)
                    else:
                        self._replace_sibling(node, key[2])
                except Exception as exc:
                    due = self.restarts.died(key, time.monotonic())
                    log.error("replacing %s failed (%s); next try in %.1f s", _describe(key),
                              str(exc).splitlines()[0][:300] if str(exc) else repr(exc), due - time.monotonic())
                    continue
                self.restarts.replaced(key)
                self._watches[key] = self._watched_handle(key).park.remote()
                self._write_nodes_file()
                log.info("%s is back (%s) in %.0f ms", _describe(key), decision.reason,
                         (time.monotonic() - started) * 1000)

    def _node(self, broker_id: int) -> dict | None:
        return next((n for n in self.nodes if n["broker_id"] == broker_id), None)

    def _watched_handle(self, key: tuple):
        node = self._node(key[0])
        if key[1] == "purgatory":
            return node["_purgatory"]
        return node["_edge"] if key[2] == 0 else node["_edge_siblings"][key[2] - 1]

    def _node_alive(self, node: dict) -> bool:
        """Whether the broker's Ray node is up (its raylet, when this process
        started it, else Ray's view)."""
        import psutil
        import ray

        pid = node.get("raylet_pid")
        if pid is not None and not (psutil.pid_exists(pid) and
                                    psutil.Process(pid).status() != psutil.STATUS_ZOMBIE):
            return False
        return any(n.get("NodeID") == node["ray_node_id"] and n.get("Alive") for n in ray.nodes())

    def _edge_options(self, node: dict) -> dict:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return dict(num_cpus=0, max_concurrency=10_000,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["ray_node_id"], soft=False))

    def _replace_edge(self, node: dict) -> None:
        """A new primary edge for a broker whose edge process died: same name,
        same broker id, the port the dead one had bound; it deletes the dead
        one's ZooKeeper registration, and the controller re-admits the broker
        when the new one appears."""
        import ray

        from core.config import parse_listener
        from core.naming import edge_actor_name
        from actors.edge import EdgeActorRemote

        broker_id, namespace = node["broker_id"], self.config["raykafka.namespace"]
        dead = node["_edge"]
        listener = parse_listener(node["_config"]["listeners"])
        from core.security_config import rebind_first

        config = node["_config"].with_values({"listeners": rebind_first(node["_config"]["listeners"],
                                                                        node["bound_port"])})
        edge = _create_named(EdgeActorRemote, edge_actor_name(broker_id), namespace, self._edge_options(node),
                             broker_id, config, self.zk_connect, node["log_dirs"], node["_purgatory"])
        try:
            host, port = ray.get(edge.start.remote(dead._actor_id.hex()), timeout=REPLACE_START_TIMEOUT_S)
            pid = ray.get(edge.pid.remote(), timeout=REPLACE_START_TIMEOUT_S)
            if node["_edge_siblings"]:
                ray.get(edge.set_siblings.remote(node["_edge_siblings"]), timeout=REPLACE_START_TIMEOUT_S)
            if not ray.get(edge.wait_ready.remote(REPLACE_READY_TIMEOUT_S), timeout=REPLACE_READY_TIMEOUT_S + 5):
                raise StartupError(f"the replacement edge of broker {broker_id} got no metadata in time")
        except Exception:
            _quietly(lambda: ray.kill(edge, no_restart=True))
            raise
        node.update(_edge=edge, edge_pid=pid, host=host, port=port)
        node["edge_pids"][0] = pid
        if node["index"] == 0:
            self.edge = edge

    def _replace_sibling(self, node: dict, k: int) -> None:
        import ray

        from core.naming import edge_sibling_actor_name
        from actors.edge import EdgeActorRemote

        broker_id, namespace = node["broker_id"], self.config["raykafka.namespace"]
        sibling = _create_named(EdgeActorRemote, edge_sibling_actor_name(broker_id, k), namespace,
                                self._edge_options(node), broker_id, node["_config"], self.zk_connect,
                                node["log_dirs"], node["_purgatory"])
        try:
            pid = ray.get(sibling.start_sibling.remote(node["bound_port"], node["host"], node["port"]),
                          timeout=REPLACE_START_TIMEOUT_S)
        except Exception:
            _quietly(lambda: ray.kill(sibling, no_restart=True))
            raise
        node["_edge_siblings"][k - 1] = sibling
        node["edge_pids"][k] = pid
        # The primary forwards its latest metadata to the new sibling (if the
        # primary is itself being replaced, its replacement does).
        try:
            ray.get(node["_edge"].set_siblings.remote(node["_edge_siblings"]), timeout=REPLACE_START_TIMEOUT_S)
        except Exception as exc:
            log.warning("broker %d: handing the new edge %d to the primary failed: %r", broker_id, k, exc)

    def _recover_purgatory(self, node: dict) -> None:
        """Ray restarts the purgatory (max_restarts=-1): wait for it and note
        its pid. If Ray gave up on it (killed for good), a new one is created
        and handed to the edges; replicas and coordinators look it up by name."""
        import ray
        from ray.exceptions import ActorDiedError

        from actors.purgatory import PurgatoryActorRemote
        from core.naming import purgatory_actor_name

        try:
            node["purgatory_pid"] = ray.get(node["_purgatory"].pid.remote(), timeout=RESTART_WAIT_S)
            return
        except ActorDiedError:
            pass
        broker_id, namespace = node["broker_id"], self.config["raykafka.namespace"]
        log.warning("the purgatory of broker %d is gone for good: creating a new one", broker_id)
        opts = _purgatory_options(self._edge_options(node)["scheduling_strategy"])
        purgatory = _create_named(PurgatoryActorRemote, purgatory_actor_name(broker_id), namespace, opts,
                                  broker_id, namespace)
        node["purgatory_pid"] = ray.get(purgatory.pid.remote(), timeout=RESTART_WAIT_S)
        node["_purgatory"] = purgatory
        for edge in [node["_edge"], *node["_edge_siblings"]]:
            _quietly(lambda: ray.get(edge.set_purgatory.remote(purgatory), timeout=REPLACE_START_TIMEOUT_S))

    def _wait_ready(self, nodes: list[dict]) -> None:
        import ray

        for node in nodes:
            if not ray.get(node["_edge"].wait_ready.remote(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 5):
                raise StartupError(f"broker {node['broker_id']}'s edge got no metadata from a controller in time")
        log.info("brokers %s of cluster %s are up", [n["broker_id"] for n in nodes], self.cluster_id)

    def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown, when brokers outside this process stay up:
        the controller moves this process's leaders to them first (retried per
        controlled.shutdown.max.retries / .retry.backoff.ms), so clients see a
        leader change instead of an outage. Skipped when everything stops."""
        import ray

        if not self.config["controlled.shutdown.enable"] or not self.nodes:
            return
        mine = {n["broker_id"] for n in self.nodes}
        try:
            live = set(ray.get(self.nodes[0]["_edge"].live_broker_ids.remote(), timeout=10))
        except Exception as exc:
            log.warning("controlled shutdown skipped: %r", exc)
            return
        if not live - mine:
            return
        retries = self.config["controlled.shutdown.max.retries"]
        backoff_ms = self.config["controlled.shutdown.retry.backoff.ms"]
        started = time.monotonic()
        for node in self.nodes:
            edge = node["_edge"]
            budget = (retries + 1) * (backoff_ms / 1000 + self.config["raykafka.actor.call.timeout.ms"] / 1000)
            outcome = None
            try:
                outcome = ray.get(edge.controlled_shutdown.remote(retries, backoff_ms), timeout=budget + 5)
            except Exception as exc:
                log.warning("controlled shutdown of broker %d failed: %r", node["broker_id"], exc)
            if outcome is not None and outcome["remaining"]:
                log.warning("broker %d still leads %d partitions after controlled shutdown: %s", node["broker_id"],
                            len(outcome["remaining"]), outcome["remaining"][:10])
        log.info("controlled shutdown of brokers %s took %.0f ms", sorted(mine),
                 (time.monotonic() - started) * 1000)

    def _close_broker_actors(self, broker_id: int) -> None:
        """Flush, checkpoint and close this broker's replicas. They are detached
        actors: when this process shares a Ray cluster it did not start, they are
        killed too, or they would outlive their broker."""
        import ray

        namespace = self.config["raykafka.namespace"]
        handles = []
        for name in _named_actors_of_broker(namespace, broker_id):
            try:
                handles.append(ray.get_actor(name, namespace=namespace))
            except ValueError:
                continue
        closing = []
        for handle in handles:
            try:
                closing.append(handle.close.remote())  # replicas; group coordinators have no close()
            except AttributeError:
                pass
        for ref in closing:
            _quietly(lambda: ray.get(ref, timeout=60))
        if not self.started_ray:
            for handle in handles:
                _quietly(lambda: ray.kill(handle))
        log.info("closed %d actors of broker %d", len(handles), broker_id)

    def shutdown(self) -> None:
        try:
            import ray
        except ImportError:
            ray = None
        if ray is not None and ray.is_initialized():
            started = time.monotonic()
            self._controlled_shutdown()
            for node in self.nodes:
                for edge in [node["_edge"], *node.get("_edge_siblings", [])]:
                    _quietly(lambda: ray.get(edge.stop.remote(), timeout=10))
            for node in self.nodes:
                broker_id = node["broker_id"]
                _quietly(lambda: self._close_broker_actors(broker_id))
            for node in self.nodes:
                controller = node["_controller"]
                _quietly(lambda: ray.get(controller.stop.remote(), timeout=10))
            log.info("brokers %s stopped cleanly in %.1f s", [n["broker_id"] for n in self.nodes],
                     time.monotonic() - started)
            if self.started_ray:
                _quietly(ray.shutdown)
        if self.cluster is not None:
            _quietly(self.cluster.shutdown)
        if self.zookeeper is not None:
            _quietly(self.zookeeper.stop)
        if self.ray_temp_dir:
            shutil.rmtree(self.ray_temp_dir, ignore_errors=True)


def _named_actors_of_broker(namespace: str, broker_id: int) -> list[str]:
    """Names of the detached actors the controller placed for one broker (its
    replicas and group coordinators, named `...@<broker id>`)."""
    import ray

    from core.naming import controller_actor_name, edge_actor_name, purgatory_actor_name

    own = {edge_actor_name(broker_id), controller_actor_name(broker_id), purgatory_actor_name(broker_id)}
    suffix = f"@{broker_id}"
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == namespace and a["name"].endswith(suffix) and a["name"] not in own]


def _create_named(actor_class, name: str, namespace: str, options: dict, *args):
    """Create a named actor; a name still held by the dead incarnation of a
    restarted broker (its node just died) is reclaimed, within a bound."""
    import ray
    from ray.exceptions import ActorAlreadyExistsError

    deadline = time.monotonic() + 60
    while True:
        try:
            return actor_class.options(name=name, namespace=namespace, **options).remote(*args)
        except (ActorAlreadyExistsError, ValueError) as exc:
            if time.monotonic() > deadline:
                raise StartupError(f"actor name {name} is still taken: {exc}") from None
            try:
                ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
            except Exception:
                pass
            time.sleep(1)


def _purgatory_options(scheduling_strategy) -> dict:
    # Ray restarts a dead purgatory on its node, under the same actor id, so
    # every handle to it (the edges', replicas' and coordinators') stays
    # valid; it keeps nothing that must outlive its process.
    return dict(num_cpus=0, max_concurrency=100_000, scheduling_strategy=scheduling_strategy, max_restarts=-1)


def _describe(key: tuple) -> str:
    broker_id, role, k = key
    if role == "purgatory":
        return f"the purgatory of broker {broker_id}"
    return f"the edge of broker {broker_id}" if k == 0 else f"edge {k} of broker {broker_id}"


def _raylet_pid(node) -> int | None:
    from ray._private import ray_constants

    try:
        return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
    except (KeyError, IndexError, AttributeError):
        return None


class StartupError(Exception):
    pass


def _quietly(action) -> None:
    try:
        action()
    except Exception as exc:  # shutting down: report and carry on with the rest
        log.warning("during shutdown: %r", exc)


if __name__ == "__main__":
    sys.exit(main())
