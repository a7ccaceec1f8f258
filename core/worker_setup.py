"""Run in every Ray worker process of the broker before its first task
(node/process.py: through the node environment on a Ray cluster the broker
starts itself, through the job's runtime environment on one it joins).

Why: when Ray creates a worker's serialization context it registers
serializers for Arrow tables and pydantic models, importing pyarrow and
pydantic if they are installed (ray/util/serialization_addons.py). Where
they are (a node that also runs Spark, or the dev venv), every replica
actor then carries them: ~14 MiB of PSS per replica, measured (README,
bench/PROFILE.md). No broker actor sends or receives either kind of object,
so the broker's workers make both unimportable before Ray gets there;
Ray skips those serializers when the import fails.

How the hook reaches the workers matters for the cost of a replica:

- On a cluster the broker starts itself (`raykafka start`, `--nodes`), the
  raylets inherit SETUP_HOOK_ENV_VAR, the variable Ray's worker entry point
  reads, and the broker's job has no runtime environment. Its workers start
  once, as plain default workers; a job runtime environment makes Ray start
  each worker through its runtime-env setup process first, about twice the
  CPU (100 partitions: 62 s -> 36 s to create on the 2-core dev VM,
  bench/creation.py). That cluster is the broker's own: every job on it runs
  the hook.
- On a cluster it joins (`--ray-address`), the hook travels in the broker
  job's runtime environment (BROKER_RUNTIME_ENV), so other jobs there (the
  Spark reader's) are not affected.
"""
from __future__ import annotations

import sys

# Packages Ray imports into every worker only to register serializers for
# their types, which the broker never passes between its actors.
NOT_IN_BROKER_WORKERS = ("pyarrow", "pydantic")


def keep_workers_lean() -> None:
    for name in NOT_IN_BROKER_WORKERS:
        # None in sys.modules makes ``import name`` raise ModuleNotFoundError.
        # A package something imported already stays as it is.
        sys.modules.setdefault(name, None)


HOOK = "core.worker_setup.keep_workers_lean"
# Ray's worker entry point (ray/_private/workers/default_worker.py) runs the
# hook this variable names; a runtime environment's hook ends up there too.
SETUP_HOOK_ENV_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
# The broker job's runtime environment on a Ray cluster it joins.
BROKER_RUNTIME_ENV = {"worker_process_setup_hook": HOOK}
