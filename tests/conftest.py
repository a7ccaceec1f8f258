"""Shared fixtures. Integration tests share ONE broker per test session (Ray and
ZooKeeper start once); tests that kill brokers start their own."""
from __future__ import annotations

import inspect
import json
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


# `./dev test` runs the suite in one process; with RAYKAFKA_TEST_WORKERS=N (or
# -n N) it runs as N pytest-xdist workers (`--dist loadscope`). On 2 cores that
# was no faster here and failed time-bounded tests on the CI machine
# (docs/test-suite-durations.md); on more cores a second worker fills the waits
# on protocol timers. What a second worker must not do is run two tests that
# each saturate the cores at once (measured: the balancer's join-and-heal went
# from 60 s to 169 s beside the 3-node cluster's start, the 100-partition
# CreateTopics from 32 s to 123 s). So the "heavy" tests -- every multi-node
# test, the shared 3-node cluster's first, and the single-node ones marked
# `cpu_heavy` -- are one unit of work, first in the queue, which one worker runs
# in order while the other takes the remaining modules one at a time (a module
# is never split, so its broker starts once) and the first joins in when done.
HEAVY_SCOPE = "heavy"
_HEAVY_TESTS_FILE = "RAYKAFKA_HEAVY_TESTS_FILE"  # how the workers tell the controller which tests those are


def _uses_three_nodes(item) -> bool:
    return item is not None and "three_nodes" in getattr(item, "fixturenames", ())


def _heavy(item) -> bool:
    return _uses_three_nodes(item) or item.get_closest_marker("multinode") is not None or \
        item.get_closest_marker("cpu_heavy") is not None


def pytest_configure(config):
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        os.environ[_HEAVY_TESTS_FILE] = str(Path(tempfile.mkdtemp(prefix="rk-xdist-")) / "heavy-tests.json")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and _HEAVY_TESTS_FILE in os.environ:
        shutil.rmtree(Path(os.environ.pop(_HEAVY_TESTS_FILE)).parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope with the heavy tests as one scope, scopes in collection order."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class HeavyFirstScheduling(LoadScopeScheduling):
        _heavy_tests: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._heavy_tests is None:
                try:
                    self._heavy_tests = frozenset(json.loads(Path(os.environ[_HEAVY_TESTS_FILE]).read_text()))
                except (KeyError, OSError, ValueError):
                    self._heavy_tests = frozenset()
            return HEAVY_SCOPE if nodeid in self._heavy_tests else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False  # collection order: the heavy unit first, the quick unit modules last
    return HeavyFirstScheduling(config, log)


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
    # The tests on the shared 3-node cluster run one after the other, so it
    # starts once: run serially, last, where no other test's broker shares the
    # two cores with it; under xdist, first of the heavy tests, which come first.
    shared = [item for item in items if _uses_three_nodes(item)]
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        items[:] = [item for item in items if not _uses_three_nodes(item)] + shared
        return
    heavy = shared + [item for item in items if _heavy(item) and not _uses_three_nodes(item)]
    items[:] = heavy + [item for item in items if not _heavy(item)]
    path = os.environ.get(_HEAVY_TESTS_FILE)
    if path:  # written whole and renamed: the controller reads it once every worker has collected
        staging = Path(f"{path}.{workerinput['workerid']}")
        staging.write_text(json.dumps([item.nodeid for item in heavy]))
        os.replace(staging, path)


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


_three_node_clusters: list = []  # the session's cluster while it runs


@pytest.fixture(scope="session")
def _three_node_cluster(session_dir):
    from tests import three_nodes

    cluster = three_nodes.start(session_dir / "three-nodes" / "data")
    _three_node_clusters.append(cluster)
    yield cluster
    _stop_three_node_cluster()


def _stop_three_node_cluster() -> None:
    while _three_node_clusters:
        _three_node_clusters.pop().stop()  # its tests kill nodes: the exit status says nothing about them


def pytest_runtest_teardown(item, nextitem):
    """The 3-node cluster's tests run one after the other: after the last of
    them its nodes stop, rather than idle on the two cores until the session ends."""
    if _uses_three_nodes(item) and not _uses_three_nodes(nextitem):
        _stop_three_node_cluster()


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
