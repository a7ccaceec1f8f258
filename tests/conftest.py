"""Shared fixtures. Integration tests share ONE broker per test session (Ray and
ZooKeeper start once); tests that kill brokers start their own."""
from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from tests.broker_process import BrokerProcess

# Hypothesis's default 200 ms per-example deadline is a timed assertion: on a
# loaded 2-core machine it fails property tests whose logic is fine. The
# properties stay; only the wall-clock limit goes.
hypothesis_settings.register_profile("raykafka", deadline=None)
hypothesis_settings.load_profile("raykafka")

_SHARED_FIXTURES = __file__


def _starts(source: str) -> tuple[bool, bool]:
    """(starts a broker, starts several nodes) as `source` reads."""
    own = any(start in source for start in ("BrokerProcess(", "RayOnSpark(", "setup_ray_cluster("))
    return own, own and '"--nodes"' in source


# The suite runs as two pytest-xdist workers (`./dev test` passes `-n 2 --dist
# loadgroup`), one stream each. Measured serially, most modules wait on
# protocol timers (rebalances, session timeouts, clients' retries) with the
# two cores 20-30% busy, while the cluster tests (node kills, revivals,
# saturation, Spark) keep them 50-80% busy. So the streams are split by what
# a test does, not alphabetically: "clusters" holds the tests that start
# brokers or clusters of their own and are busy; "waits" holds the session
# broker's tests, the unit tests and the modules below, which spend their
# time waiting and so leave the cores to the other stream. Each stream is one
# worker, in collection order, so module brokers stay shared within it and
# the session broker starts in one worker only.
_WAITING_MODULES = frozenset({
    "test_groups.py", "test_security.py", "test_acls.py", "test_default_security.py", "test_quotas.py",
    "test_zookeeper_tls.py", "test_protocol_fuzz.py", "test_transactions_coordinator.py",
})


def _stream(item) -> str:
    if "three_nodes" in getattr(item, "fixturenames", ()) or item.get_closest_marker("multinode"):
        return "clusters"
    if not item.get_closest_marker("own_broker") or item.path.name in _WAITING_MODULES:
        return "waits"
    return "clusters"


# tryfirst: the markers must be on the items before xdist's worker reads
# `xdist_group` in its own hook of the same name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark `own_broker` / `multinode` every test that starts a broker or a cluster
    itself or through a fixture other than this file's shared ones, so
    `-m "not own_broker"` selects what shares the session broker, and a test
    added later is classified without anyone remembering to mark it."""
    sources: dict[object, str] = {}

    def source_of(func) -> str:
        if func not in sources:
            try:
                sources[func] = inspect.getsource(func)
            except (OSError, TypeError):
                sources[func] = ""
        return sources[func]

    for item in items:
        own = multinode = False
        funcs = [getattr(item, "function", None)]
        fixture_info = getattr(item, "_fixtureinfo", None)
        for defs in (fixture_info.name2fixturedefs.values() if fixture_info else ()):
            funcs += [d.func for d in defs[-1:]]  # the definition this test gets
        for func in funcs:
            if func is None or inspect.getsourcefile(func) == _SHARED_FIXTURES:
                continue
            starts, several = _starts(source_of(func))
            own, multinode = own or starts, multinode or several
        if "three_nodes" in getattr(item, "fixturenames", ()):
            multinode = True  # the shared cluster below: not the session broker
        if own or multinode or item.get_closest_marker("multinode"):
            item.add_marker(pytest.mark.own_broker)
        if multinode:
            item.add_marker(pytest.mark.multinode)
    # The tests on the shared 3-node cluster run last, one after the other: it
    # starts once, and no other test's broker shares the two cores with it.
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_stream(item)))
    shared = [item for item in items if "three_nodes" in getattr(item, "fixturenames", ())]
    if shared:
        items[:] = [item for item in items if item not in shared] + shared


@pytest.fixture(scope="session")
def session_dir():
    path = Path(tempfile.mkdtemp(prefix="rk-test-"))
    yield path
    if os.environ.get("RAYKAFKA_KEEP_TEST_DATA") != "1":
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def broker(session_dir):
    """A broker for the whole session: real Ray, real embedded ZooKeeper."""
    process = BrokerProcess(session_dir / "shared-broker" / "data",
                            overrides={"log.segment.bytes": str(8 * 1024 * 1024),
                                       # Fast log maintenance so retention/compaction tests run in seconds.
                                       "log.retention.check.interval.ms": "500",
                                       "log.cleaner.backoff.ms": "500",
                                       # One offsets partition: fewer actor processes for the shared broker.
                                       "offsets.topic.num.partitions": "1",
                                       # Likewise one __transaction_state partition (one coordinator actor),
                                       # and expired transactions aborted within about a second.
                                       "transaction.state.log.num.partitions": "1",
                                       "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
                                       # As Kafka's own integration tests: a group's first join completes
                                       # at once, not after 3 s (members that join later rebalance it,
                                       # which the group tests wait for as a condition anyway).
                                       "group.initial.rebalance.delay.ms": "0",
                                       # The suite's tests hold ~35 replicas on this broker at most (most
                                       # delete their topics), under the computed default (90 on 2 cores,
                                       # 45 on 1): pinned so the suite does not depend on the runner's
                                       # cores; the limit itself is tested in test_capacity.py.
                                       "raykafka.replicas.per.node.max": "200"})
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


@pytest.fixture(scope="session")
def _three_node_cluster(session_dir):
    from tests import three_nodes

    cluster = three_nodes.start(session_dir / "three-nodes" / "data")
    yield cluster
    cluster.stop()  # its tests kill nodes: the exit status says nothing about them


@pytest.fixture
def three_nodes(_three_node_cluster):
    """The session's 3-node cluster (tests/three_nodes.py), whole again: a test
    may kill its nodes; the next one gets them revived, in sync, leaders preferred."""
    from tests import three_nodes

    three_nodes.restore(_three_node_cluster)
    return _three_node_cluster


@pytest.fixture
def topic_name(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"{base}-{uuid.uuid4().hex[:6]}"
