"""Test helpers for code that talks to ZooKeeper: a throwaway server (a real
one, or metadata/zk/memory.py's in-memory one), unique chroots so tests sharing
one server do not see each other's znodes, and ways to lose a session the way a
crash or a network partition does."""
from __future__ import annotations

import contextlib
import select
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from kazoo.client import KazooClient

from metadata.embedded_zookeeper import EmbeddedZooKeeper
from metadata.kafka_zk import KafkaZkClient, KazooClientFactory
from metadata.zk.memory import MemoryKazooClient, MemoryZooKeeper

# The smallest tick keeps session expiry (bounded below by 2 ticks) fast in tests;
# fsync off because test data need not survive a power cut.
TEST_TICK_TIME_MS = 200
TEST_ZOOKEEPER_CONFIG = {"forceSync": "no"}
REPO_ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def running_zookeeper(data_dir: Path, port: int | None = None) -> Iterator[EmbeddedZooKeeper]:
    server = EmbeddedZooKeeper(data_dir, port=port, tick_time_ms=TEST_TICK_TIME_MS,
                               extra_config=TEST_ZOOKEEPER_CONFIG)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def unique_chroot(connect_string: str, prefix: str = "test") -> str:
    """The server's connect string with a fresh chroot, e.g. "127.0.0.1:2181/test-1a2b3c4d"."""
    return f"{connect_string}/{prefix}-{uuid.uuid4().hex[:8]}"


class ZkTarget(NamedTuple):
    """Where a test's ZooKeeper clients go: a connect string (usually with the
    test's own chroot) and what builds the kazoo client that reaches it."""
    connect_string: str
    client_factory: KazooClientFactory = KazooClient

    @classmethod
    def on(cls, server: "EmbeddedZooKeeper | MemoryZooKeeper", prefix: str = "test") -> "ZkTarget":
        """A fresh chroot on `server`, real or in memory."""
        factory = server.client if isinstance(server, MemoryZooKeeper) else KazooClient
        return cls(unique_chroot(server.connect_string, prefix), factory)

    def client(self, **settings: Any) -> KafkaZkClient:
        """A KafkaZkClient (not started) on this target; `settings` as KafkaZkClient takes them."""
        return KafkaZkClient(self.connect_string, client_factory=self.client_factory, **settings)


def expire_session(client: KafkaZkClient, timeout_s: float = 10.0) -> int:
    """Make ZooKeeper end `client`'s session, as after a long partition: a second
    connection takes over the session with its id and password and closes it
    (the in-memory server is told to expire it). Returns the expired session id."""
    kazoo_client = client.session._kazoo
    if kazoo_client is None or kazoo_client.client_id is None:
        raise RuntimeError("the client has no session to expire")
    session_id, password = kazoo_client.client_id
    if isinstance(kazoo_client, MemoryKazooClient):
        kazoo_client.server.expire_session(session_id)
        return session_id
    hosts, _chroot = client.session._hosts, client.chroot
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=client.session_timeout_ms / 1000.0)
    intruder.start(timeout=timeout_s)
    intruder.stop()
    intruder.close()
    return session_id


_REGISTER_AND_HANG = textwrap.dedent(
    """
    import sys, time
    from metadata.kafka_zk import KafkaZkClient
    connect_string, broker_id, session_timeout_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    client = KafkaZkClient(connect_string, session_timeout_ms=session_timeout_ms)
    client.start()
    client.brokers.register(broker_id, "127.0.0.1", 9092, extra={"owner": "child"})
    print(hex(client.session_id), flush=True)
    time.sleep(3600)
    """
)


def spawn_registered_broker(connect_string: str, broker_id: int, session_timeout_ms: int,
                            timeout_s: float = 30.0) -> tuple[subprocess.Popen, int]:
    """A child process that registers `broker_id` and then hangs, so a test can
    kill -9 it and leave a stale registration behind. Returns (process, session id)."""
    process = subprocess.Popen(
        [sys.executable, "-c", _REGISTER_AND_HANG, connect_string, str(broker_id), str(session_timeout_ms)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # select on the pipe so a child that hangs before printing cannot block the test.
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("0x"):
        process.kill()
        _out, err = process.communicate(timeout=10)
        raise RuntimeError(f"registering child failed: {line!r} {err[-2000:]}")
    return process, int(line, 16)
