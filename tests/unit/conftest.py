"""Fixtures shared by the unit tests.

`zookeeper`: ONE real embedded ZooKeeper for every unit module that tests our
ZooKeeper code against the real server (KafkaZkClient, the ACL store, ZK
security, the in-memory server's contract): each test works in a fresh chroot
on it (metadata.testing.unique_chroot), so sharing the server shares no state,
and the JVM starts once (~2-4 s under load) rather than once per module. A test
that stops or restarts a server starts its own.

`memory_zookeeper`: a fresh in-memory ZooKeeper (metadata/zk/memory.py) per
test, for tests that use ZooKeeper only as the store of the code under test
(the controller's fake-channel scenarios, the balancer): no JVM. What it
models is held to the real server by tests/unit/test_zk_contract.py."""
from __future__ import annotations

import pytest

from metadata.testing import running_zookeeper
from metadata.zk.memory import MemoryZooKeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def memory_zookeeper():
    return MemoryZooKeeper()
