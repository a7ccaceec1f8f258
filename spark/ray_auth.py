"""Ray's token authentication for the Spark side: Ray-on-Spark's nodes, the
driver, and the Spark planner that connects to the broker's Ray cluster for
the Ray-native read path.

Why Ray-on-Spark worker nodes once failed with InvalidAuthToken (~45 s after
start): `ray start --head` turns token auth on by itself when it finds a
token (``~/.ray/auth_token``, which any local ``ray.init()`` of Ray >= 2.59
writes), while `ray start --address` on a worker node never does: without
``RAY_AUTH_MODE=token`` in its own environment it runs with auth disabled,
sends no token, and the head's GCS rejects its raylet until it gives up.
So the mode and the token are given to every node explicitly: the same
``RAY_AUTH_MODE`` and ``RAY_AUTH_TOKEN_PATH`` for the head, each worker
node's `ray start`, the driver and the broker joining the cluster.
"""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

TOKEN_FILE_NAME = "ray-auth-token"


def token_file(directory: str | os.PathLike) -> str:
    """The token to use, as a file (mode 0600): RAY_AUTH_TOKEN_PATH when set;
    else RAY_AUTH_TOKEN, or a new random token, written under ``directory``."""
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return os.environ["RAY_AUTH_TOKEN_PATH"]
    path = Path(directory) / TOKEN_FILE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32))
    return str(path)


def use_token(path: str | None) -> None:
    """Make this process's next Ray connection use token auth with the token
    in ``path`` (None: auth disabled). Ray reads its auth mode once per
    process, so an already imported Ray is told to read it again, as Ray's
    own ``_enable_token_auth`` does."""
    if path is None:
        os.environ["RAY_AUTH_MODE"] = "disabled"
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    else:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the file
    reload_ray_auth()


def reload_ray_auth() -> None:
    """Have an imported Ray read RAY_AUTH_MODE and the token again (a no-op before Ray is imported)."""
    if "ray" not in sys.modules:
        return
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # another Ray version: its own ray.init reads the environment
        pass
