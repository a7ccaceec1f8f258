"""Starting a Spark session that can run the raykafka data source (and
Ray-on-Spark) on this machine.

Python workers inherit their environment from the JVM, which inherits it from
the process that starts the session, so everything here must happen before
the first SparkSession is created.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

PROJECT_ROOT = str(Path(__file__).resolve().parents[1])


def _prepend_path(var: str, entry: str) -> None:
    parts = [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    if entry not in parts:
        os.environ[var] = os.pathsep.join([entry, *parts])


def worker_environment(*, local: bool = True, ray: bool = False) -> dict[str, str]:
    """What Spark's Python workers (and Ray nodes started from them) need."""
    env = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        # the workers import spark.*, storage.*, net.* from this project
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(
            [PROJECT_ROOT, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])),
    }
    if local:
        env["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    if ray:
        # Ray-on-Spark starts `ray` processes by name from the workers: the
        # interpreter's bin/ (the virtualenv's) must be on PATH.
        bin_dir = str(Path(sys.executable).parent)
        parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
        env["PATH"] = os.pathsep.join(dict.fromkeys([bin_dir, *parts]))
        # Every Ray node needs the cluster's auth mode and token explicitly:
        # `ray start --address` does not turn token auth on by itself, and its
        # raylet is then rejected with InvalidAuthToken (spark/ray_auth.py).
        env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "token")
        if os.environ.get("RAY_AUTH_TOKEN_PATH"):
            env["RAY_AUTH_TOKEN_PATH"] = os.environ["RAY_AUTH_TOKEN_PATH"]
        env["RAY_USAGE_STATS_ENABLED"] = os.environ.get("RAY_USAGE_STATS_ENABLED", "0")
        if local:
            # keep every Ray address on 127.0.0.1 (single machine)
            env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    return env


def prepare_environment(*, local: bool = True, ray: bool = False) -> dict[str, str]:
    """Put :func:`worker_environment` into ``os.environ`` (before the session starts)."""
    env = worker_environment(local=local, ray=ray)
    os.environ.update(env)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return env


def local_session(master: str = "local[2]", app_name: str = "raykafka", conf: dict | None = None,
                  ray: bool = False, register: bool = True):
    """A local SparkSession with the raykafka format registered.

    ``ray=True`` prepares the environment Ray-on-Spark needs (see
    ``spark.ray_on_spark``)."""
    env = prepare_environment(local=True, ray=ray)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.memory", "1g")
               .config("spark.python.worker.reuse", "true"))
    for key, value in env.items():
        builder = builder.config(f"spark.executorEnv.{key}", value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if register:
        from spark.registration import register as _register

        _register(spark)
    return spark
