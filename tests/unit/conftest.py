"""Fixtures shared by the unit tests.

`zookeeper`: ONE real embedded ZooKeeper for every unit module that tests our
ZooKeeper code against the real server (KafkaZkClient, ACL store, ZK
security, the controller's fake-channel scenarios, the balancer): each test
works in a fresh chroot on it (metadata.testing.unique_chroot), so sharing the
server shares no state, and the JVM starts once (~2-4 s under load) rather
than once per module. A test that stops or restarts a server starts its own."""
from __future__ import annotations

import pytest

from metadata.testing import running_zookeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server
