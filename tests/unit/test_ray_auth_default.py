"""`raykafka start`'s Ray token (node/ray_cluster.py): on by default, the operator's
token when given, else one generated in the data dir and kept. Run in a
fresh interpreter: Ray's auth mode is per process."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from tests.broker_process import REPO

PROBE = """
import json, os, sys
from pathlib import Path
from node.ray_cluster import ray_token_for_own_cluster
first = ray_token_for_own_cluster(Path(sys.argv[1]))
second = ray_token_for_own_cluster(Path(sys.argv[1]))
print(json.dumps({"path": first, "again": second, "mode": os.environ["RAY_AUTH_MODE"],
                  "env_path": os.environ.get("RAY_AUTH_TOKEN_PATH")}))
"""


def _probe(data_dir, **env_changes) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(env_changes)
    done = subprocess.run([sys.executable, "-c", PROBE, str(data_dir)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_token_auth_is_the_default_with_a_private_generated_token(tmp_path):
    seen = _probe(tmp_path)
    assert seen["mode"] == "token"
    assert seen["path"] == seen["again"] == seen["env_path"] == str(tmp_path / "ray-auth-token")
    assert stat.S_IMODE(os.stat(seen["path"]).st_mode) == 0o600
    token = open(seen["path"]).read()
    assert len(token) == 64 and _probe(tmp_path)["path"] == seen["path"] and open(seen["path"]).read() == token


def test_the_operators_token_or_an_explicit_opt_out_wins(tmp_path):
    mine = tmp_path / "mine"
    mine.write_text("operator-token")
    assert _probe(tmp_path, RAY_AUTH_TOKEN_PATH=str(mine))["path"] == str(mine)
    assert open(mine).read() == "operator-token"
    assert _probe(tmp_path, RAY_AUTH_TOKEN="t" * 32)["path"] is None  # Ray reads it from the environment
    off = _probe(tmp_path, RAY_AUTH_MODE="disabled")
    assert off["mode"] == "disabled" and off["path"] is None and not (tmp_path / "ray-auth-token").exists()
