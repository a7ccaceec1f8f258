"""Fixtures of the KafkaZkClient tests against a real ZooKeeper: the session's
server (tests/unit/conftest.py), a fresh chroot on it per test, clients on that chroot, and a
plain kazoo session to check the bytes as written. A test module imports the
fixtures it uses by name."""
from __future__ import annotations

import json
import queue
import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from metadata import zk_paths
from metadata.kafka_zk import KafkaZkClient
from metadata.testing import unique_chroot

# Short sessions so expiry-driven tests take seconds (the server allows down to 2 ticks).
SESSION_TIMEOUT_MS = 2000


@pytest.fixture
def chroot_connect(zookeeper):
    return unique_chroot(zookeeper.connect_string)


@pytest.fixture
def make_client(chroot_connect):
    """make_client(**settings): a started KafkaZkClient on the test's chroot, closed at the end."""
    clients: list[KafkaZkClient] = []

    def make(**overrides: Any) -> KafkaZkClient:
        settings = dict(session_timeout_ms=SESSION_TIMEOUT_MS, connection_timeout_ms=10_000)
        settings.update(overrides)
        client = KafkaZkClient(chroot_connect, **settings)
        client.start()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def zk(make_client):
    return make_client()


@pytest.fixture
def raw(zookeeper, chroot_connect):
    """A plain kazoo session on the same chroot, to check bytes as written."""
    root = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    root.start(timeout=10)
    root.ensure_path(zk_paths.split_chroot(chroot_connect)[1])
    root.stop()
    root.close()
    client = KazooClient(hosts=chroot_connect, timeout=10.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def raw_json(raw_client: KazooClient, path: str) -> Any:
    return json.loads(raw_client.get(path)[0])


def wait_for_value(values: "queue.Queue[Any]", expected: Any, timeout_s: float = 10.0) -> None:
    """Skip queued callback values until one equals `expected`."""
    deadline = time.monotonic() + timeout_s
    seen = []
    while True:
        remaining = deadline - time.monotonic()
        try:
            value = values.get(timeout=max(0.0, remaining))
        except queue.Empty:
            raise AssertionError(f"no callback with {expected!r} in time; got {seen}") from None
        if value == expected:
            return
        seen.append(value)
