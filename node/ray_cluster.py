"""The Ray cluster under a broker: the environment and token a cluster
raykafka starts itself gets, its _system_config, and the pid of a node's
raylet (node/process.py starts or joins the cluster)."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("raykafka")


RAY_AUTH_TOKEN_FILE_NAME = "ray-auth-token"


def environment_for_ray() -> None:
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


# Ray's autoscaler monitor, which a head node starts, has no work on a cluster
# raykafka starts itself (local nodes, nothing to scale) and holds no state,
# but it does not exit on SIGTERM: every stop gave it Ray's full 1 s of grace
# before killing it (of a single-node broker's ~2.4 s stop, measured).
NO_AUTOSCALER = {"no_monitor": True}  # head_node_args of ray.cluster_utils.Cluster (RayParams)


def kill_autoscaler_monitor() -> None:
    """Kill the autoscaler monitor of the head node this process started with
    ray.init (which, unlike cluster_utils, cannot be told not to start it), so
    that ray.shutdown does not wait out its grace period."""
    from ray._private import ray_constants, worker

    node = worker._global_node
    if node is None or not node.head:
        return
    for info in node.all_processes.get(ray_constants.PROCESS_TYPE_MONITOR, []):
        if info.process.poll() is None:
            info.process.kill()
            info.process.wait(timeout=5)


def raylet_pid(node) -> int | None:
    from ray._private import ray_constants

    try:
        return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
    except (KeyError, IndexError, AttributeError):
        return None
