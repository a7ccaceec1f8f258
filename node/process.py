"""One `raykafka start` process: everything it owns, started in order and
stopped in reverse. ZooKeeper (embedded unless zookeeper.connect names one)
and its security, each broker's identity (node/identity.py), Ray (a local
cluster, --nodes N local nodes, or a joined one: node/ray_cluster.py), each
broker's purgatory, controller candidate and edges on its Ray node, then the
supervision loop (node/supervision.py) until SIGTERM/SIGINT, and the
controlled shutdown."""
from __future__ import annotations

import concurrent.futures
import dataclasses
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
from typing import Optional

from core.config import BrokerConfig
from core.naming import controller_actor_name, edge_actor_name, edge_sibling_actor_name, purgatory_actor_name
from core.security_config import shift_ports
from core.worker_setup import BROKER_RUNTIME_ENV, HOOK, SETUP_HOOK_ENV_VAR
from node.errors import StartupError, quietly
from node.identity import identify_broker
from node.named_actors import create_named, edge_options, named_actors_of_broker, purgatory_options
from node.ray_cluster import (NO_AUTOSCALER, environment_for_ray, kill_autoscaler_monitor,
                              metrics_through_opencensus, ray_system_config, ray_token_for_own_cluster,
                              raylet_pid)
from node.supervision import Supervisor

log = logging.getLogger("raykafka")

READY_TIMEOUT_S = 120


@dataclasses.dataclass(frozen=True)
class StartOptions:
    """How to run the brokers, besides their configuration (`raykafka start`'s options)."""
    nodes: int = 1  # brokers, each on its own local Ray node (a local cluster when > 1)
    racks: tuple[str, ...] = ()  # with nodes > 1: the Ray node label 'rack' of each
    ray_address: Optional[str] = None  # join this Ray cluster instead of starting one
    dashboard: bool = False  # start Ray's dashboard (~1 GiB more memory)


def run_broker(config: BrokerConfig, data_dir: Path, options: StartOptions) -> int:
    """Run until SIGTERM/SIGINT; the process's exit status."""
    for key in config.no_effect_keys_set():
        log.warning("config %s is accepted for compatibility but has no effect", key)
    return BrokerProcess(config, data_dir, options).run()


class BrokerProcess:
    """Everything one `raykafka start` owns, started in order and stopped in reverse."""

    def __init__(self, config: BrokerConfig, data_dir: Path, options: StartOptions):
        self.config = config
        self.data_dir = data_dir
        self.options = options
        self.zookeeper = None
        self.ray_temp_dir: str | None = None
        self._raylet_pids: list[int | None] = []
        self.started_ray = False
        self.broker_id = -1
        self.stop_requested = threading.Event()
        self.revive_requested = threading.Event()
        self.add_node_requested = threading.Event()
        self.zk_connect: str | None = None
        self.zk_digest_file: str | None = None
        self.ray_auth_token_path: str | None = None
        self.cluster = None  # ray.cluster_utils.Cluster with --nodes
        self.nodes: list[dict] = []  # one per broker this process started
        self.supervisor: Supervisor | None = None  # once the brokers are up (node/supervision.py)

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
        self.supervisor = Supervisor(self.config, self.zk_connect, self.nodes, self.stop_requested,
                                     on_replaced=self._write_nodes_file)
        for node in self.nodes:
            self.supervisor.watch(node)
        while not self.stop_requested.wait(0.5):
            try:
                self.supervisor.supervise()
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
        self._setup_zookeeper_security(embedded=not self.config["zookeeper.connect"])
        count = max(1, self.options.nodes)
        # ZooKeeper (its JVM's start) and the brokers' identities need nothing of
        # Ray, and Ray's start (GCS, dashboard head, raylet: ~3 s, most of it
        # waiting on those processes) nothing of ZooKeeper: they run side by side.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="zookeeper") as pool:
            identified = pool.submit(self._start_zookeeper_and_identify, count)
            try:
                node_ids = self._start_ray(count)
            finally:
                identities = identified.result()  # its error first: it is why the start failed
        for index, ((broker_id, log_dirs), node_id) in enumerate(zip(identities, node_ids)):
            self.nodes.append(self._start_node(self.zk_connect, broker_id, log_dirs, node_id, index))
        self._wait_ready(self.nodes)
        self._write_nodes_file()
        return self.nodes[0]["host"], self.nodes[0]["port"]

    def _start_zookeeper_and_identify(self, count: int) -> list[tuple[int, list[str]]]:
        """The embedded ZooKeeper unless zookeeper.connect names one, then each
        local broker's id and log dirs (node/identity.py)."""
        zk_connect = self.config["zookeeper.connect"]
        if not zk_connect:
            from metadata.embedded_zookeeper import EmbeddedZooKeeper

            self.zookeeper = EmbeddedZooKeeper(self.data_dir / "zookeeper")
            zk_connect = self.zookeeper.start()
            log.info("embedded ZooKeeper on %s (pid %s)", zk_connect, self.zookeeper.pid)
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
            broker_id, cluster_id = identify_broker(self.config, zk_connect, log_dirs,
                                                    configured + index if configured >= 0 else -1)
            identities.append((broker_id, log_dirs))
        self.broker_id = identities[0][0]
        self.zk_connect, self.cluster_id = zk_connect, cluster_id
        return identities

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
        # Written whole and renamed into place: readers (the tests, `raykafka balancer
        # --data-dir`) poll it while nodes come and go and must never see it half-written.
        target = self.data_dir / "nodes.json"
        staging = target.with_name(f".nodes.json.{os.getpid()}")
        staging.write_text(json.dumps(plain, indent=1))
        os.replace(staging, target)

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
            racks = self.options.racks
            extra = {"labels": {"rack": racks[index]}} if racks else {}
            metrics_port = self.config["raykafka.metrics.port"]
            if metrics_port:  # the dead node's endpoint port (its agent died with it)
                extra["metrics_export_port"] = metrics_port + index
            ray_node = self.cluster.add_node(num_cpus=os.cpu_count() or 2,
                                             object_store_memory=256 * 1024 * 1024, **extra)
            # Starting a Ray node installs Ray's SIGTERM handler (exit 1): take it back.
            self._install_signal_handlers()
            self._raylet_pids[index] = raylet_pid(ray_node)
            fresh = self._start_node(self.zk_connect, node["broker_id"], node["log_dirs"], ray_node.node_id, index)
            self._wait_ready([fresh])
            self.nodes[index] = fresh
            self.supervisor.forget_broker(node["broker_id"])
            self.supervisor.watch(fresh)
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
        broker_id, _cluster_id = identify_broker(self.config, self.zk_connect, log_dirs,
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
        self._raylet_pids.append(raylet_pid(ray_node))
        fresh = self._start_node(self.zk_connect, broker_id, log_dirs, ray_node.node_id, index)
        self._wait_ready([fresh])
        self.nodes.append(fresh)
        self.supervisor.watch(fresh)
        self._write_nodes_file()

    def _start_ray(self, count: int) -> list[str]:
        """Start (or join) Ray; returns the Ray node id for each broker to start."""
        environment_for_ray()
        if not self.options.ray_address:
            metrics_through_opencensus()
            # Before Ray's first import: its config reads RAY_AUTH_MODE once per process.
            self.ray_auth_token_path = ray_token_for_own_cluster(self.data_dir)
        import ray

        namespace = self.config["raykafka.namespace"]
        if self.options.ray_address:
            # The cluster's own token settings apply (RAY_AUTH_MODE, RAY_AUTH_TOKEN[_PATH]
            # or ~/.ray/auth_token, as for any Ray driver). The workers read the
            # ZooKeeper client settings from the same path on every node.
            from metadata import zk_security

            runtime_env = {**BROKER_RUNTIME_ENV,
                           "env_vars": {zk_security.ENV_VAR: os.environ[zk_security.ENV_VAR]}}
            ray.init(address=self.options.ray_address, namespace=namespace, logging_level=logging.WARNING,
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
            ray.init(namespace=namespace, include_dashboard=self.options.dashboard, _temp_dir=self.ray_temp_dir,
                     logging_level=logging.WARNING, num_cpus=cpus, object_store_memory=512 * 1024 * 1024,
                     _system_config=system_config, _metrics_export_port=metrics_port)
            node_ids = [ray.get_runtime_context().get_node_id()]
        else:
            from ray.cluster_utils import Cluster

            # cluster_utils writes its address file under Ray's default temp
            # dir; keep it (and every session dir) in ours, not in /tmp/ray.
            os.environ["RAY_TMPDIR"] = self.ray_temp_dir
            os.makedirs(os.path.join(self.ray_temp_dir, "ray"), exist_ok=True)
            racks = self.options.racks
            if racks and len(racks) != count:
                raise StartupError(f"--racks names {len(racks)} racks for {count} nodes")

            def labels(i: int) -> dict:
                return {"labels": {"rack": racks[i]}} if racks else {}

            self.cluster = Cluster(initialize_head=True, head_node_args={
                **labels(0), **metrics_port_of(0), **NO_AUTOSCALER, "num_cpus": cpus,
                "include_dashboard": self.options.dashboard, "object_store_memory": 256 * 1024 * 1024,
                "_system_config": system_config})
            # In the order they were added: node i carries labels(i). (cluster_utils keeps its
            # worker nodes in a set, so list_all_nodes() comes back in no particular order, and a
            # broker revived on racks[i] would then share a rack with a live one.)
            ray_nodes = [self.cluster.head_node] + [
                self.cluster.add_node(num_cpus=cpus, object_store_memory=256 * 1024 * 1024, **labels(i),
                                      **metrics_port_of(i))
                for i in range(1, count)]
            ray.init(address=self.cluster.address, namespace=namespace, logging_level=logging.WARNING)
            node_ids = [n.node_id for n in ray_nodes]
            self._raylet_pids = [raylet_pid(n) for n in ray_nodes]
        self.started_ray = True
        # ray.init installs a SIGTERM handler that aborts the driver; SIGTERM
        # here means controlled shutdown, so take the signals back.
        self._install_signal_handlers()
        return node_ids

    def _start_node(self, zk_connect: str, broker_id: int, log_dirs: list[str], node_id: str,
                    index: int) -> dict:
        """One broker on one Ray node: purgatory, controller candidate, edge."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from actors.controller import ControllerActorRemote
        from actors.edge import EdgeActorRemote
        from actors.purgatory import PurgatoryActorRemote

        namespace = self.config["raykafka.namespace"]
        here = NodeAffinitySchedulingStrategy(node_id, soft=False)
        config = self.config
        if index and shift_ports(config["listeners"], index) != config["listeners"]:  # a fixed port to move
            config = config.with_values({"listeners": shift_ports(config["listeners"], index),
                                         "advertised.listeners": None})
        purgatory = create_named(PurgatoryActorRemote, purgatory_actor_name(broker_id), namespace,
                                 purgatory_options(here), broker_id, namespace)
        controller = create_named(ControllerActorRemote, controller_actor_name(broker_id), namespace,
                                  dict(num_cpus=0, max_concurrency=1000, scheduling_strategy=here),
                                  broker_id, config, zk_connect, namespace)
        edge = create_named(EdgeActorRemote, edge_actor_name(broker_id), namespace, edge_options(node_id),
                            broker_id, config, zk_connect, log_dirs, purgatory)
        ray.get(controller.start.remote(), timeout=READY_TIMEOUT_S)
        host, port = ray.get(edge.start.remote(), timeout=READY_TIMEOUT_S)
        edge_pid = ray.get(edge.pid.remote(), timeout=READY_TIMEOUT_S)
        # raykafka.edge.processes > 1: more edges on this node, on the primary's
        # port (SO_REUSEPORT), fed metadata by the primary.
        siblings = [create_named(EdgeActorRemote, edge_sibling_actor_name(broker_id, k), namespace,
                                 edge_options(node_id), broker_id, config, zk_connect, log_dirs, purgatory)
                    for k in range(1, config["raykafka.edge.processes"])]
        sibling_pids = []
        # The port actually bound (listeners may name port 0): a replacement edge binds it again.
        bound_port = ray.get(edge.listening_port.remote(), timeout=READY_TIMEOUT_S)
        if siblings:
            sibling_pids = ray.get([s.start_sibling.remote(bound_port, host, port) for s in siblings],
                                   timeout=READY_TIMEOUT_S)
            ray.get(edge.set_siblings.remote(siblings), timeout=READY_TIMEOUT_S)
        print(f"raykafka broker {broker_id} on {host}:{port}", flush=True)
        return {"broker_id": broker_id, "host": host, "port": port, "ray_node_id": node_id,
                "log_dirs": log_dirs, "edge_pid": edge_pid, "edge_pids": [edge_pid, *sibling_pids],
                "purgatory_pid": ray.get(purgatory.pid.remote(), timeout=READY_TIMEOUT_S),
                "bound_port": bound_port, "index": index,
                "raylet_pid": self._raylet_pids[index] if self.cluster else None,
                "_edge": edge, "_edge_siblings": siblings, "_controller": controller, "_purgatory": purgatory,
                "_config": config}

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
        for name in named_actors_of_broker(namespace, broker_id):
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
            quietly(lambda: ray.get(ref, timeout=60))
        if not self.started_ray:
            for handle in handles:
                quietly(lambda: ray.kill(handle))
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
                    quietly(lambda: ray.get(edge.stop.remote(), timeout=10))
            for node in self.nodes:
                broker_id = node["broker_id"]
                quietly(lambda: self._close_broker_actors(broker_id))
            for node in self.nodes:
                controller = node["_controller"]
                quietly(lambda: ray.get(controller.stop.remote(), timeout=10))
            log.info("brokers %s stopped cleanly in %.1f s", [n["broker_id"] for n in self.nodes],
                     time.monotonic() - started)
            if self.started_ray:
                quietly(kill_autoscaler_monitor)  # a no-op for a --nodes cluster, started without one
                quietly(ray.shutdown)
        if self.cluster is not None:
            quietly(self.cluster.shutdown)
        if self.zookeeper is not None:
            quietly(self.zookeeper.stop)
        if self.ray_temp_dir:
            shutil.rmtree(self.ray_temp_dir, ignore_errors=True)
