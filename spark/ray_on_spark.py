"""Ray-on-Spark with a raykafka broker on it.

    from spark.session import local_session
    from spark.ray_on_spark import RayOnSpark

    spark = local_session()                      # or any local SparkSession
    with RayOnSpark(spark) as cluster:           # setup_ray_cluster + ray.init(address=...)
        bootstrap = cluster.start_broker("/tmp/rk-data")    # `raykafka start --ray-address ...`
        ... produce with any Kafka client ...
        spark.read.format("raykafka").option("kafka.bootstrap.servers", bootstrap) \
             .option("subscribe", "events").load()          # Ray-native reads (readPath=auto)
    # broker stopped, Ray-on-Spark shut down, its temp dir removed

What this handles so the user does not have to (measured on this machine):
- Ray nodes are started from Spark tasks and need the interpreter's ``bin/``
  on PATH (``ray start`` is found by name) and Ray's token: the cluster runs
  with token authentication (``RAY_AUTH_MODE=token``; ``ray_auth="disabled"``
  or that environment variable turns it off), because whoever attaches a Ray
  driver can call every actor of the broker on it. Every node, the driver,
  the broker and the Spark planner get the same ``RAY_AUTH_MODE`` and
  ``RAY_AUTH_TOKEN_PATH`` (spark/ray_auth.py says why worker nodes failed
  with InvalidAuthToken when they did not). In local mode a Ray-on-Spark
  start hook (:class:`LocalStartHook`) passes these to every node's start
  command, whatever environment the Spark session was started with; the
  token is the operator's (RAY_AUTH_TOKEN_PATH, RAY_AUTH_TOKEN) or a new one
  in the cluster's temp dir. On a cluster the workers' environment is
  checked and the error says what is missing: there the token file must be
  at RAY_AUTH_TOKEN_PATH on every worker.
- Ray-on-Spark forces multi-node mode on its worker nodes, which rewrites a
  127.0.0.1 head address to the machine's outward-facing IP; on one machine
  the head goes on 127.0.0.2 instead, so Ray traffic stays on loopback.
- no dashboard (~1 GiB), small object stores, a short private
  ``ray_temp_root_dir`` (Unix socket paths must stay under ~107 bytes; Ray
  never cleans its session dirs), removed on stop;
- ``ray.init(address=...)`` after ``setup_ray_cluster``;
- registering the ``raykafka`` format with ``ray.address`` defaulting to the
  cluster, so the Ray-native read path works without options.
"""
from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from spark import ray_auth
from spark.session import PROJECT_ROOT, worker_environment

log = logging.getLogger("raykafka.spark")

_READY = re.compile(r"raykafka ready on (\S+):(\d+)")

# Ray-on-Spark forces RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 on its worker nodes,
# and in that mode `ray start --address 127.0.0.1:P` rewrites the loopback
# address to the machine's outward-facing IP, where a loopback-bound head is not
# listening. Any other loopback address is left alone, so on a single machine
# the head goes on 127.0.0.2: all Ray traffic stays on 127.0.0.0/8.
LOCAL_HEAD_IP = "127.0.0.2"


class RayOnSparkError(RuntimeError):
    pass


def _check_worker_environment(spark, auth_mode: str) -> None:
    """Run one tiny task to see the environment Spark's Python workers really get."""
    wanted_bin = str(Path(sys.executable).parent)

    def probe(_):
        import os as _os
        import shutil as _shutil

        token_path = _os.environ.get("RAY_AUTH_TOKEN_PATH") or _os.path.expanduser("~/.ray/auth_token")
        has_token = bool(_os.environ.get("RAY_AUTH_TOKEN")) or _os.access(token_path, _os.R_OK)
        yield (_os.environ.get("PATH", ""), _os.environ.get("RAY_AUTH_MODE"), _shutil.which("ray") or "",
               has_token)

    path, auth, ray_bin, has_token = spark.sparkContext.parallelize([0], 1).mapPartitions(probe).collect()[0]
    problems = []
    if wanted_bin not in path.split(os.pathsep) and not ray_bin:
        problems.append(f"{wanted_bin} (with the `ray` command) is not on the workers' PATH")
    if (auth or "disabled").lower() != auth_mode:
        # `ray start --address` turns token auth on only when told to (spark/ray_auth.py).
        problems.append(f"RAY_AUTH_MODE is {auth!r} for the workers, {auth_mode!r} here: their Ray nodes "
                        "would be rejected (InvalidAuthToken)")
    if auth_mode == "token" and not has_token:
        problems.append("the workers have no Ray token (RAY_AUTH_TOKEN_PATH naming a readable file on each "
                        "worker, or ~/.ray/auth_token)")
    if problems:
        raise RayOnSparkError(
            "Spark's Python workers cannot start Ray worker nodes: " + "; ".join(problems) + ". Create the "
            "SparkSession with spark.session.local_session(ray=True), or call "
            "spark.session.prepare_environment(ray=True) before the session starts.")


try:
    from ray.util.spark.start_hook_base import RayOnSparkStartHook as _StartHookBase
except ImportError:  # ray without its Spark support: RayOnSpark.start fails later with Ray's own message
    _StartHookBase = object


class LocalStartHook(_StartHookBase):
    """Ray-on-Spark start hook for a single machine: the environment every Ray
    node needs goes with the node's start command, whatever environment the
    Spark session was created with (Ray-on-Spark passes
    ``custom_environment_variables`` to each `ray start`)."""

    def __init__(self, is_global: bool = False):
        self.is_global = is_global

    def get_default_temp_root_dir(self):
        return "/tmp"

    def custom_environment_variables(self):
        env = worker_environment(local=True, ray=True)
        return {key: env[key] for key in ("PATH", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_USAGE_STATS_ENABLED",
                                          "PYTHONPATH") if key in env}


def _is_loopback(host: str | None) -> bool:
    import socket

    try:
        return socket.gethostbyname(host or "localhost").startswith("127.")
    except OSError:
        return False


class RayOnSpark:
    """A Ray cluster on the Spark application (Ray-on-Spark) and, optionally,
    a raykafka broker joined to it. Stops everything it started."""

    def __init__(self, spark, max_worker_nodes: int = 1, *, object_store_memory_worker_node: int = 256 << 20,
                 object_store_memory_head_node: int = 128 << 20, setup_kwargs: dict | None = None,
                 ray_auth: str | None = None):
        """ray_auth: "token" or "disabled"; default: $RAY_AUTH_MODE, else "token"."""
        self.spark = spark
        self.ray_auth = (ray_auth or os.environ.get("RAY_AUTH_MODE") or "token").strip().lower()
        if self.ray_auth not in ("token", "disabled"):
            raise ValueError(f"ray_auth must be 'token' or 'disabled', got {self.ray_auth!r}")
        self.token_path: str | None = None
        self.max_worker_nodes = max_worker_nodes
        self.setup_kwargs = dict(setup_kwargs or {})
        self.setup_kwargs.setdefault("object_store_memory_worker_node", object_store_memory_worker_node)
        self.setup_kwargs.setdefault("object_store_memory_head_node", object_store_memory_head_node)
        self.address: str | None = None
        self.temp_root: str | None = None
        self.brokers: list[BrokerOnRay] = []
        self._started = False
        self._saved_env: dict[str, str | None] = {}

    def start(self) -> str:
        """setup_ray_cluster + ray.init; returns the Ray address."""
        import ray
        from ray.util.spark import setup_ray_cluster

        local = self.spark.sparkContext.master.startswith("local")
        if not local:
            _check_worker_environment(self.spark, self.ray_auth)
        self.temp_root = tempfile.mkdtemp(prefix="rk-ros-", dir="/tmp")
        for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
            self._saved_env.setdefault(key, os.environ.get(key))
        if self.ray_auth == "token":
            self.token_path = ray_auth.token_file(self.temp_root)
        ray_auth.use_token(self.token_path)
        # The head node runs under this process: same environment as the workers
        # (restored by stop()).
        for key, value in worker_environment(local=local, ray=True).items():
            if key != "PYSPARK_PYTHON":
                self._saved_env.setdefault(key, os.environ.get(key))
                os.environ[key] = value
        started = time.monotonic()
        kwargs = dict(self.setup_kwargs)
        head_options = dict(kwargs.pop("head_node_options", None) or {})
        head_options.setdefault("include_dashboard", False)  # ~1 GiB less; nothing here needs it
        from ray.util.spark import cluster_init

        original_host = cluster_init.get_spark_application_driver_host
        original_hook = os.environ.get(cluster_init.RAY_ON_SPARK_START_HOOK)
        if local:
            os.environ[cluster_init.RAY_ON_SPARK_START_HOOK] = f"{__name__}.LocalStartHook"
            if _is_loopback(original_host(self.spark)):
                cluster_init.get_spark_application_driver_host = lambda _spark: LOCAL_HEAD_IP
        try:
            address, _remote = setup_ray_cluster(max_worker_nodes=self.max_worker_nodes,
                                                 ray_temp_root_dir=self.temp_root, head_node_options=head_options,
                                                 **kwargs)
        except BaseException:
            shutil.rmtree(self.temp_root, ignore_errors=True)
            self.temp_root = None
            raise
        finally:
            cluster_init.get_spark_application_driver_host = original_host
            if original_hook is None:
                os.environ.pop(cluster_init.RAY_ON_SPARK_START_HOOK, None)
            else:
                os.environ[cluster_init.RAY_ON_SPARK_START_HOOK] = original_hook
        self._started = True
        self.address = address
        if not ray.is_initialized():
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        log.info("Ray-on-Spark up at %s in %.1f s", address, time.monotonic() - started)
        from spark import register

        register(self.spark, ray_address=address, ray_auth_token_path=self.token_path)
        return address

    def start_broker(self, data_dir: str | os.PathLike, overrides: dict[str, str] | None = None,
                     timeout_s: float = 180) -> str:
        """Run `raykafka start --ray-address <this cluster>` as a subprocess; returns its bootstrap address."""
        if self.address is None:
            self.start()
        broker = BrokerOnRay(self.address, Path(data_dir), overrides)
        self.brokers.append(broker)
        return broker.start(timeout_s)

    def stop(self) -> None:
        for broker in reversed(self.brokers):
            broker.stop()
        self.brokers.clear()
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        except Exception as exc:
            log.warning("ray.shutdown: %s", exc)
        if self._started:
            from ray.util.spark import shutdown_ray_cluster

            try:
                shutdown_ray_cluster()
            except Exception as exc:
                log.warning("shutdown_ray_cluster: %s", exc)
            self._started = False
        os.environ.pop("RAY_ADDRESS", None)
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
        ray_auth.reload_ray_auth()  # this process's next Ray connection: as before start()
        self.token_path = None
        if self.temp_root:
            shutil.rmtree(self.temp_root, ignore_errors=True)
            self.temp_root = None

    def __enter__(self) -> "RayOnSpark":
        if self.address is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class BrokerOnRay:
    """`raykafka start --ray-address ADDRESS` as a child process."""

    def __init__(self, ray_address: str, data_dir: Path, overrides: dict[str, str] | None = None):
        self.ray_address = ray_address
        self.data_dir = Path(data_dir)
        self.overrides = {"listeners": "PLAINTEXT://127.0.0.1:0", **(overrides or {})}
        self.proc: subprocess.Popen | None = None
        self.bootstrap: str | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self._lines: queue.Queue = queue.Queue()

    def command(self) -> list[str]:
        script = Path(sys.executable).parent / "raykafka"
        base = [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]
        args = [*base, "start", "--ray-address", self.ray_address, "--data-dir", str(self.data_dir)]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout_s: float = 180) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(worker_environment(local=True, ray=True))
        env["PYTHONUNBUFFERED"] = "1"
        log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log_file, env=env,
                                     cwd=PROJECT_ROOT, start_new_session=True)
        threading.Thread(target=self._pump, args=(self.proc.stdout, log_file), daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RayOnSparkError(f"raykafka exited with {self.proc.returncode}; see {self.log_path}")
                continue
            match = _READY.search(line)
            if match:
                self.bootstrap = f"{match.group(1)}:{match.group(2)}"
                return self.bootstrap
        self.stop()
        raise RayOnSparkError(f"raykafka not ready in {timeout_s} s; see {self.log_path}")

    def _pump(self, stream, log_file) -> None:
        for raw in iter(stream.readline, b""):
            log_file.write(raw)
            log_file.flush()
            self._lines.put(raw.decode(errors="replace"))

    def stop(self, timeout_s: float = 90) -> int | None:
        """SIGTERM (clean shutdown: logs flushed, checkpoints written), SIGKILL after ``timeout_s``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode
