"""The in-memory ZooKeeper (metadata/zk/memory.py) against the real one: every
test runs twice, on the embedded ZooKeeper and on the in-memory server, with the
same assertions, so the fake cannot drift from what the controller's unit tests
take it to be.

Two levels: the kazoo client API the fake stands in for (stats, versions,
zxids, sequential names, multi-op results, errors, one-shot watches and their
order), and ZkSession over it (kazoo's watch recipes, ephemerals, session
expiry and the new session after it, fenced writes)."""
from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
from kazoo import exceptions as kazoo_errors
from kazoo.protocol.states import EventType, ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from metadata import embedded_zookeeper, zk_paths
from metadata.kafka_zk import ControllerMovedError, KafkaZkClient
from metadata.testing import ZkTarget, expire_session
from metadata.zk.memory import MemoryZooKeeper
from tests.unit.kafka_zk_fixtures import wait_for_value

# Short sessions, so that the real server's expiry takes seconds.
SESSION_TIMEOUT_MS = 2000


@pytest.fixture(params=["real", "memory"])
def target(request) -> ZkTarget:
    if request.param == "memory":
        return ZkTarget.on(MemoryZooKeeper(), "contract")
    if not embedded_zookeeper.DEBIAN_ZOOKEEPER_JAR.is_file():
        pytest.skip("Debian's zookeeper package is not installed")
    return ZkTarget.on(request.getfixturevalue("zookeeper"), "contract")


@pytest.fixture
def kazoo_clients(target):
    """kazoo_clients(): a started kazoo client (KazooClient or the in-memory one) on the test's chroot."""
    hosts, chroot = zk_paths.split_chroot(target.connect_string)
    bootstrap = target.client_factory(hosts=hosts, timeout=10.0)
    bootstrap.start(timeout=10)
    bootstrap.ensure_path(chroot)
    bootstrap.stop()
    bootstrap.close()
    started = []

    def start() -> Any:
        client = target.client_factory(hosts=target.connect_string, timeout=SESSION_TIMEOUT_MS / 1000)
        client.start(timeout=10)
        started.append(client)
        return client

    yield start
    for client in started:
        client.stop()
        client.close()


@pytest.fixture
def kz(kazoo_clients):
    return kazoo_clients()


@pytest.fixture
def zk_clients(target):
    """zk_clients(): a started KafkaZkClient on the test's chroot."""
    started: list[KafkaZkClient] = []

    def start() -> KafkaZkClient:
        client = target.client(session_timeout_ms=SESSION_TIMEOUT_MS, connection_timeout_ms=10_000).start()
        started.append(client)
        return client

    yield start
    for client in started:
        client.close()


class Events:
    """A watch function that queues (event type, path), for the test to read in order."""

    def __init__(self) -> None:
        self._queue: "queue.Queue[tuple[str, str]]" = queue.Queue()

    def __call__(self, event: Any) -> None:
        self._queue.put((event.type, event.path))

    def next(self, timeout_s: float = 10.0) -> tuple[str, str]:
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError("no watch event in time") from None


# ---- znodes, stats, versions and zxids ---------------------------------------------------------------------


def test_a_new_znode_and_its_parent_stat(kz):
    kz.create("/p")
    assert kz.create("/p/a", b"abc") == "/p/a"
    data, stat = kz.get("/p/a")
    assert isinstance(stat, ZnodeStat)
    assert data == b"abc" and stat.dataLength == 3 and stat.numChildren == 0 and stat.ephemeralOwner == 0
    assert (stat.version, stat.cversion, stat.aversion) == (0, 0, 0)
    assert stat.czxid == stat.mzxid == stat.pzxid
    parent = kz.exists("/p")
    assert parent.numChildren == 1 and parent.cversion == 1 and parent.pzxid == stat.czxid
    assert parent.mzxid < stat.czxid and parent.version == 0  # a child is not a change of the parent's data
    assert kz.get_children("/p") == ["a"]
    assert kz.exists("/p/missing") is None


def test_set_moves_the_version_and_mzxid_only(kz):
    kz.create("/a", b"1")
    _, before = kz.get("/a")
    after = kz.set("/a", b"22")
    assert after.version == 1 and after.dataLength == 2
    assert after.czxid == before.czxid and after.mzxid > before.mzxid and after.ctime == before.ctime
    assert kz.set("/a", b"3", version=1).version == 2
    with pytest.raises(kazoo_errors.BadVersionError):
        kz.set("/a", b"x", version=1)
    with pytest.raises(kazoo_errors.NoNodeError):
        kz.set("/missing", b"x")
    assert kz.get("/a")[0] == b"3"


def test_zxids_order_writes_across_znodes(kz):
    kz.create("/a")
    kz.create("/b")
    a, b = kz.exists("/a"), kz.exists("/b")
    assert b.czxid > a.czxid
    assert kz.set("/a", b"x").mzxid > b.czxid


def test_create_errors_and_makepath(kz):
    kz.create("/a")
    with pytest.raises(kazoo_errors.NodeExistsError):
        kz.create("/a")
    with pytest.raises(kazoo_errors.NoNodeError):
        kz.create("/x/y/z")
    assert kz.create("/x/y/z", b"deep", makepath=True) == "/x/y/z"
    assert kz.get("/x/y/z")[0] == b"deep" and kz.exists("/x/y").ephemeralOwner == 0
    assert kz.ensure_path("/x/y/w/v") and kz.exists("/x/y/w/v") is not None
    kz.create("/eph", ephemeral=True)
    with pytest.raises(kazoo_errors.NoChildrenForEphemeralsError):
        kz.create("/eph/child")
    with pytest.raises(kazoo_errors.NodeExistsError):  # an existing name is reported before an ephemeral parent
        kz.create("/eph")


def test_delete_errors_and_the_parents_counters(kz):
    kz.create("/p")
    kz.create("/p/c")
    with pytest.raises(kazoo_errors.NotEmptyError):
        kz.delete("/p")
    with pytest.raises(kazoo_errors.BadVersionError):
        kz.delete("/p/c", version=3)
    with pytest.raises(kazoo_errors.NoNodeError):
        kz.delete("/p/missing")
    created = kz.exists("/p/c").czxid
    assert kz.delete("/p/c", version=0) is True
    parent = kz.exists("/p")
    assert parent.cversion == 2 and parent.numChildren == 0 and parent.pzxid > created
    assert kz.get_children("/p") == []
    with pytest.raises(kazoo_errors.NoNodeError):
        kz.get_children("/missing")


def test_sequential_names_count_the_children_ever_created(kz):
    kz.create("/q")
    kz.create("/r")
    assert kz.create("/q/item-", b"", sequence=True) == "/q/item-0000000000"
    second = kz.create("/q/item-", sequence=True)
    assert second == "/q/item-0000000001"
    kz.delete(second)
    # The delete counts in cversion but not in the suffix (ZooKeeper 3.8 as measured).
    assert kz.exists("/q").cversion == 3
    assert kz.create("/q/item-", sequence=True) == "/q/item-0000000002"
    kz.create("/q/plain")
    assert kz.create("/q/", sequence=True) == "/q/0000000004"
    assert kz.create("/r/x-", sequence=True) == "/r/x-0000000000"  # each parent has its own count
    ephemeral = kz.create("/q/e-", ephemeral=True, sequence=True)
    assert ephemeral == "/q/e-0000000005" and kz.exists(ephemeral).ephemeralOwner == kz.client_id[0]
    transaction = kz.transaction()
    transaction.create("/q/in-multi-a")
    transaction.delete("/q/plain")
    transaction.create("/q/in-multi-", sequence=True)
    assert transaction.commit()[2] == "/q/in-multi-0000000007"


def test_acls_are_kept_with_their_own_version(kz):
    kz.create("/a")
    acls, stat = kz.get_acls("/a")
    assert list(acls) == list(OPEN_ACL_UNSAFE) and stat.aversion == 0
    assert kz.set_acls("/a", OPEN_ACL_UNSAFE, version=0).aversion == 1
    with pytest.raises(kazoo_errors.BadVersionError):
        kz.set_acls("/a", OPEN_ACL_UNSAFE, version=0)
    assert kz.exists("/a").version == 0


def test_requests_after_stop_raise_connection_closed(kazoo_clients):
    client = kazoo_clients()
    client.stop()
    with pytest.raises(kazoo_errors.ConnectionClosedError):
        client.get("/")


# ---- multi-op transactions ---------------------------------------------------------------------------------


def test_a_multi_applies_every_op_in_one_zxid(kz):
    kz.create("/m", b"0")
    kz.create("/gone")
    transaction = kz.transaction()
    transaction.check("/m", 0)
    transaction.create("/m/child", b"c")
    transaction.set_data("/m", b"1", 0)
    transaction.delete("/gone")
    transaction.create("/m/seq-", sequence=True)
    transaction.create("/m/child/grandchild")  # sees the create before it
    check, created, stat, deleted, sequential, grandchild = transaction.commit()
    assert check is True and deleted is True
    assert created == "/m/child" and sequential == "/m/seq-0000000001" and grandchild == "/m/child/grandchild"
    assert isinstance(stat, ZnodeStat) and stat.version == 1
    assert kz.exists("/m/child").czxid == stat.mzxid == kz.exists("/m/child/grandchild").czxid
    assert kz.exists("/gone") is None and kz.get("/m")[0] == b"1"


def test_a_failed_multi_changes_nothing_and_marks_every_op(kz):
    kz.create("/m", b"0")
    transaction = kz.transaction()
    transaction.create("/m/new")
    transaction.set_data("/m", b"1", 0)
    transaction.check("/m", 5)
    transaction.delete("/m/new")
    transaction.create("/m/other")
    results = transaction.commit()
    assert [type(r) for r in results] == [kazoo_errors.RolledBackError, kazoo_errors.RolledBackError,
                                          kazoo_errors.BadVersionError, kazoo_errors.RuntimeInconsistency,
                                          kazoo_errors.RuntimeInconsistency]
    data, stat = kz.get("/m")
    assert data == b"0" and stat.version == 0 and stat.cversion == 0 and stat.numChildren == 0
    assert kz.exists("/m/new") is None
    # The rolled-back create did not use up a sequence number.
    assert kz.create("/m/s-", sequence=True) == "/m/s-0000000000"

    transaction = kz.transaction()
    transaction.create("/m")
    transaction.delete("/m/s-0000000000")
    assert [type(r) for r in transaction.commit()] == [kazoo_errors.NodeExistsError,
                                                       kazoo_errors.RuntimeInconsistency]
    assert kz.exists("/m/s-0000000000") is not None


def test_a_multi_can_create_an_ephemeral_and_a_committed_one_cannot_be_reused(kz):
    transaction = kz.transaction()
    transaction.create("/owned", b"me", ephemeral=True)
    assert transaction.commit() == ["/owned"]
    assert kz.exists("/owned").ephemeralOwner == kz.client_id[0]
    with pytest.raises(ValueError):
        transaction.commit()


# ---- one-shot watches ----------------------------------------------------------------------------------------


def test_a_data_watch_fires_once(kz):
    events = Events()
    kz.create("/w")
    kz.get("/w", watch=events)
    kz.set("/w", b"1")
    assert events.next() == (EventType.CHANGED, "/w")
    kz.set("/w", b"2")  # no watch left: nothing (the next event proves it, events arrive in order)
    kz.exists("/w", watch=events)
    kz.set("/w", b"3")
    assert events.next() == (EventType.CHANGED, "/w")
    kz.get("/w", watch=events)
    kz.delete("/w")
    assert events.next() == (EventType.DELETED, "/w")


def test_an_exists_watch_waits_for_creation_and_a_failed_get_leaves_none(kz):
    events = Events()
    with pytest.raises(kazoo_errors.NoNodeError):
        kz.get("/x", watch=events)
    assert kz.exists("/y", watch=events) is None
    kz.create("/x")
    kz.create("/y")
    assert events.next() == (EventType.CREATED, "/y")


def test_child_watches_and_a_deleted_parent(kz):
    children, data = Events(), Events()
    kz.create("/c")
    kz.get_children("/c", watch=children)
    kz.create("/c/1")
    assert children.next() == (EventType.CHILD, "/c")
    kz.get_children("/c", watch=children)
    kz.get("/c", watch=data)
    kz.set("/c/1", b"x")  # a child's data: neither watch
    kz.set("/c", b"y")  # the parent's data: the data watch only
    assert data.next() == (EventType.CHANGED, "/c")
    kz.delete("/c/1")
    assert children.next() == (EventType.CHILD, "/c")
    kz.get_children("/c", watch=children)
    kz.get("/c", watch=data)
    kz.delete("/c")
    assert children.next() == (EventType.DELETED, "/c") and data.next() == (EventType.DELETED, "/c")


def test_one_function_watching_data_and_children_is_called_for_each(kz):
    events = Events()
    kz.create("/c")
    kz.get("/c", watch=events)
    kz.get_children("/c", watch=events)
    kz.delete("/c")
    assert [events.next(), events.next()] == [(EventType.DELETED, "/c")] * 2


def test_another_sessions_writes_fire_my_watches_in_commit_order(kazoo_clients):
    mine, theirs = kazoo_clients(), kazoo_clients()
    events = Events()
    for name in ("a", "b", "c"):
        assert mine.exists(f"/{name}", watch=events) is None
    for name in ("c", "a", "b"):
        theirs.create(f"/{name}")
    assert [events.next() for _ in range(3)] == [(EventType.CREATED, f"/{n}") for n in ("c", "a", "b")]


def test_a_watch_callback_may_call_back_into_the_client(kz):
    # Callbacks run on kazoo's handler thread, never under the lock of the request that fired them.
    seen: "queue.Queue[Any]" = queue.Queue()
    kz.create("/w", b"1")
    kz.get("/w", watch=lambda event: seen.put(kz.get(event.path)[0]))
    kz.set("/w", b"2")
    assert seen.get(timeout=10) == b"2"


def test_concurrent_writers_get_distinct_sequence_numbers(kazoo_clients):
    writers = [kazoo_clients() for _ in range(4)]
    writers[0].create("/seq")
    created: "queue.Queue[str]" = queue.Queue()

    def write(client: Any) -> None:
        for _ in range(20):
            created.put(client.create("/seq/n-", sequence=True))

    threads = [threading.Thread(target=write, args=(client,)) for client in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    names = sorted(created.get_nowait() for _ in range(created.qsize()))
    assert names == [f"/seq/n-{i:010d}" for i in range(80)]
    assert writers[1].exists("/seq").numChildren == 80


def test_ephemerals_go_with_their_session(kazoo_clients):
    owner, other = kazoo_clients(), kazoo_clients()
    events = Events()
    owner.create("/e", ephemeral=True)
    stat = other.exists("/e", watch=events)
    assert stat.ephemeralOwner == owner.client_id[0] != other.client_id[0]
    owner.stop()
    assert other.exists("/e") is None  # at once: stop() closes the session
    assert events.next() == (EventType.DELETED, "/e")
    assert owner.client_id is None


# ---- ZkSession over it: recipes, session loss, fenced writes ----------------------------------------------


def test_the_watch_recipes_report_now_and_on_every_change(zk_clients):
    observer, broker = zk_clients(), zk_clients()
    brokers: "queue.Queue[Any]" = queue.Queue()
    controller: "queue.Queue[Any]" = queue.Queue()
    observer.brokers.watch(brokers.put)
    observer.controller.watch(controller.put)
    wait_for_value(brokers, [])
    wait_for_value(controller, None)
    broker.brokers.register(1, "127.0.0.1", 9001)
    wait_for_value(brokers, [1])
    broker.brokers.register(2, "127.0.0.1", 9002)
    wait_for_value(brokers, [1, 2])
    assert broker.controller.try_elect(2) == 1
    wait_for_value(controller, 2)
    assert broker.controller.resign()
    wait_for_value(controller, None)
    broker.close()
    wait_for_value(brokers, [])


def test_an_expired_session_loses_its_ephemerals_and_gets_a_new_one(zk_clients):
    observer, broker = zk_clients(), zk_clients()
    broker.brokers.register(7, "127.0.0.1", 9007)
    assert broker.controller.try_elect(7) == 1
    brokers: "queue.Queue[Any]" = queue.Queue()
    observer.brokers.watch(brokers.put)
    wait_for_value(brokers, [7])
    controller_seen_by_broker: "queue.Queue[Any]" = queue.Queue()
    broker.controller.watch(controller_seen_by_broker.put)
    wait_for_value(controller_seen_by_broker, 7)
    lost = threading.Event()
    new_sessions: "queue.Queue[int]" = queue.Queue()
    broker.on_session_lost(lost.set)
    broker.on_new_session(new_sessions.put)

    old_session = expire_session(broker)

    wait_for_value(brokers, [])
    assert lost.wait(15)
    new_session = new_sessions.get(timeout=15)
    assert new_session != old_session and broker.session_id == new_session
    assert observer.controller.id() is None
    # The expired client's watches carry over to its new session (kazoo's recipes re-read on CONNECTED).
    wait_for_value(controller_seen_by_broker, None)
    assert observer.controller.try_elect(3) == 2
    wait_for_value(controller_seen_by_broker, 3)
    broker.brokers.register(7, "127.0.0.1", 9007)
    wait_for_value(brokers, [7])
    assert observer.session.stat(zk_paths.broker_path(7)).ephemeralOwner == new_session


def test_close_does_not_report_a_session_loss(zk_clients):
    client = zk_clients()
    lost = threading.Event()
    client.on_session_lost(lost.set)
    other = zk_clients()
    client.brokers.register(4, "127.0.0.1", 9004)
    client.close()
    assert other.brokers.ids() == []
    assert not lost.is_set()


def test_fenced_writes_fail_once_the_controller_epoch_moves(zk_clients):
    zk = zk_clients()
    assert zk.controller.try_elect(1) == 1
    _epoch, epoch_zk_version = zk.controller.epoch()
    session = zk.session
    session.create_if_absent("/fenced")
    assert session.conditional_set("/fenced", b"1", 0, epoch_zk_version) == 1
    session.fenced_set_or_create("/fenced", "/fenced/child", b"c", epoch_zk_version)
    session.set(zk_paths.CONTROLLER_EPOCH, b"2")  # another controller was elected meanwhile
    with pytest.raises(ControllerMovedError):
        session.conditional_set("/fenced", b"2", 1, epoch_zk_version)
    with pytest.raises(ControllerMovedError):
        session.fenced_set_or_create("/fenced", "/fenced/child", b"d", epoch_zk_version)
    assert session.get("/fenced")[0] == b"1" and session.get("/fenced/child")[0] == b"c"


def test_the_sessions_other_primitives(zk_clients):
    zk = zk_clients()
    session = zk.session
    assert session.create_if_absent("/a/b", b"x") and not session.create_if_absent("/a/b", b"y")
    assert set(session.get_many(["/a/b", "/a/missing", "/a"])) == {"/a/b", "/a"}
    assert session.get_data_and_version("/a/b") == (b"x", 0)
    assert session.conditional_update_path("/a/b", b"z", 0) == (True, 1)
    assert session.conditional_update_path("/a/b", b"z", 0) == (False, -1)
    assert session.conditional_update_path("/a/c", b"new", -1) == (True, 0)
    session.set_or_create("/a/d/e", b"made")
    sequential = session.create("/a/n-", b"", sequence=True)
    assert sequential == "/a/n-0000000003"  # after b, c and d
    session.delete_recursive("/a")
    assert not session.exists("/a") and session.children("/a") is None and not session.delete("/a")

