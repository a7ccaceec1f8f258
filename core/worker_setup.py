"""Run in every Ray worker process of the broker's job before its first task
(``ray.init(runtime_env={"worker_process_setup_hook": ...})``, cli/main.py).

Why: when Ray creates a worker's serialization context it registers
serializers for Arrow tables and pydantic models, importing pyarrow and
pydantic if they are installed (ray/util/serialization_addons.py). Where
they are (a node that also runs Spark, or the dev venv), every replica
actor then carries them: ~14 MiB of PSS per replica, measured (README,
bench/PROFILE.md). No broker actor sends or receives either kind of object,
so the broker's workers make both unimportable before Ray gets there;
Ray skips those serializers when the import fails. Other jobs on the same
cluster (the Spark reader's) are not affected: the hook is the broker
job's.
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


# The broker job's runtime environment (every ray.init of cli/main.py).
BROKER_RUNTIME_ENV = {"worker_process_setup_hook": "core.worker_setup.keep_workers_lean"}
