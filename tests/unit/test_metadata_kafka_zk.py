"""KafkaZkClient against a real ZooKeeper: Kafka's znode layout and JSON, ephemerals,
conditional updates, controller election, notifications and session loss.

One server per module; each test gets its own chroot on it, which also exercises
chroot support everywhere."""
from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from metadata import embedded_zookeeper, zk_paths
from metadata.kafka_zk import (
    BadVersionError,
    BrokerIdInUseError,
    ControllerMovedError,
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    KafkaZkClient,
    PartitionState,
    PartitionStateExistsError,
    TopicAssignment,
    TopicExistsError,
    TopicNotFoundError,
    ZkClientClosedError,
    ZkConnectionError,
    ZkTimeoutError,
)
from metadata.testing import expire_session, running_zookeeper, spawn_registered_broker, unique_chroot
from tests.unit.kafka_zk_fixtures import (  # noqa: F401 - fixtures, found by pytest by name
    SESSION_TIMEOUT_MS,
    chroot_connect,
    make_client,
    raw,
    raw_json,
    wait_for_value,
    zk,
)

pytestmark = pytest.mark.skipif(
    not embedded_zookeeper.DEBIAN_ZOOKEEPER_JAR.is_file(), reason="Debian's zookeeper package is not installed"
)

BASE64URL_UUID = re.compile(r"^[A-Za-z0-9_-]{22}$")


def next_value(values: "queue.Queue[Any]", timeout_s: float = 10.0) -> Any:
    """The next value a watch callback queued."""
    return values.get(timeout=timeout_s)


# ------------------------------------------------------------------ structure


def test_chroot_is_created_and_holds_everything(zookeeper, chroot_connect, zk):
    zk.brokers.register(1, "127.0.0.1", 9092)
    chroot = zk_paths.split_chroot(chroot_connect)[1]
    root_view = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    root_view.start(timeout=10)
    try:
        assert root_view.exists(f"{chroot}/brokers/ids/1") is not None
        assert root_view.exists("/brokers/ids/1") is None
    finally:
        root_view.stop()
        root_view.close()


def test_nested_chroot_is_created(zookeeper):
    connect = f"{unique_chroot(zookeeper.connect_string)}/deeper/still"
    with KafkaZkClient(connect, session_timeout_ms=SESSION_TIMEOUT_MS) as client:
        assert client.topics.names() == []


def test_persistent_paths_are_created(zk, raw):
    for path in zk_paths.PERSISTENT_PATHS:
        assert raw.exists(path) is not None, path
    for path in ("/config/topics", "/config/brokers", "/config/users", "/config/clients", "/config/changes",
                 "/brokers/seqid", "/admin/delete_topics", "/isr_change_notification"):
        assert raw.exists(path) is not None, path


def test_cluster_id_is_created_once(make_client, raw):
    first, second = make_client(), make_client()
    cluster_id = first.cluster.get_or_create_id()
    assert BASE64URL_UUID.match(cluster_id)
    assert second.cluster.get_or_create_id() == cluster_id
    assert raw.get("/cluster/id")[0] == ('{"version":"1","id":"%s"}' % cluster_id).encode()


# -------------------------------------------------------------------- brokers


def test_broker_registration_has_kafkas_v5_shape(zk, raw):
    written = zk.brokers.register(3, "10.0.0.7", 9093, rack="rack-a", extra={"ray_node_id": "abc123"})
    body = raw_json(raw, "/brokers/ids/3")
    assert body == written
    assert body["version"] == 5
    assert body["host"] == "10.0.0.7" and body["port"] == 9093
    assert body["endpoints"] == ["PLAINTEXT://10.0.0.7:9093"]
    assert body["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert body["jmx_port"] == -1
    assert body["features"] == {}
    assert body["rack"] == "rack-a"
    assert body["ray_node_id"] == "abc123"
    assert isinstance(body["timestamp"], str) and abs(int(body["timestamp"]) - time.time() * 1000) < 60_000
    assert raw.exists("/brokers/ids/3").ephemeralOwner == zk.session_id
    # Compact JSON, as Jackson writes it.
    assert b" " not in raw.get("/brokers/ids/3")[0]
    assert zk.brokers.get(3) == body
    assert zk.brokers.all() == {3: body}
    assert "rack" not in zk.brokers.register(4, "h", 1)
    with pytest.raises(ValueError):
        zk.brokers.register(5, "h", 1, extra={"port": 2})


def test_registration_disappears_when_the_session_closes(make_client):
    observer, broker = make_client(), make_client()
    live: "queue.Queue[list[int]]" = queue.Queue()
    observer.brokers.watch(live.put)
    assert next_value(live) == []
    broker.brokers.register(7, "127.0.0.1", 9092)
    wait_for_value(live, [7])
    assert observer.brokers.get(7) is not None
    broker.close()
    wait_for_value(live, [])
    assert observer.brokers.get(7) is None
    assert observer.brokers.all() == {}


def test_registering_again_in_the_same_session_is_idempotent(zk):
    zk.brokers.register(8, "127.0.0.1", 9092)
    again = zk.brokers.register(8, "127.0.0.1", 9094)
    assert zk.brokers.get(8)["port"] == 9094 == again["port"]


def test_broker_id_held_by_a_live_session_is_refused(make_client):
    holder, newcomer = make_client(), make_client()
    holder.brokers.register(9, "127.0.0.1", 9092)
    started = time.monotonic()
    with pytest.raises(BrokerIdInUseError) as raised:
        newcomer.brokers.register(9, "127.0.0.1", 9093, wait_for_stale_s=0.5)
    assert time.monotonic() - started < 5
    assert raised.value.owner_session_id == holder.session_id
    assert holder.brokers.get(9)["port"] == 9092


def test_stale_registration_of_a_killed_broker_is_waited_for(chroot_connect, make_client):
    child, child_session = spawn_registered_broker(chroot_connect, 11, SESSION_TIMEOUT_MS)
    try:
        os.kill(child.pid, signal.SIGKILL)  # no session close: ZooKeeper keeps the ephemeral
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=10)
    restarted = make_client()
    assert restarted.brokers.get(11)["owner"] == "child"
    started = time.monotonic()
    body = restarted.brokers.register(11, "127.0.0.1", 9095)
    waited = time.monotonic() - started
    assert 0.2 < waited < SESSION_TIMEOUT_MS / 1000.0 + 5
    assert restarted.brokers.get(11) == body
    assert restarted.session_id != child_session


def test_generated_broker_ids_increase_above_the_reserved_range(make_client, raw):
    first, second = make_client(), make_client()
    ids = [first.brokers.generate_id(), second.brokers.generate_id(), first.brokers.generate_id()]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert all(broker_id > 1000 for broker_id in ids)
    assert ids[0] == 1000 + raw.exists("/brokers/seqid").version - 2
    assert first.brokers.generate_id(reserved_max=5000) == 5000 + raw.exists("/brokers/seqid").version


# --------------------------------------------------------------------- topics


def test_topic_create_get_exists_and_delete(zk, raw):
    topic_id = zk.topics.create("orders", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"})
    assert BASE64URL_UUID.match(topic_id)
    assert raw.get("/brokers/topics/orders")[0] == (
        '{"version":3,"partitions":{"0":[1,2],"1":[2,1]},"topic_id":"%s",'
        '"adding_replicas":{},"removing_replicas":{}}' % topic_id
    ).encode()
    assert raw.get("/config/topics/orders")[0] == b'{"version":1,"config":{"retention.ms":"1000"}}'
    # Creating a topic is not a config change: no notification.
    assert raw.get_children("/config/changes") == []

    assert zk.topics.get("orders") == TopicAssignment({0: [1, 2], 1: [2, 1]}, topic_id)
    assert zk.topics.exists("orders")
    assert zk.topics.names() == ["orders"]
    assert zk.configs.topic("orders") == {"retention.ms": "1000"}
    assert zk.topics.assignments() == {"orders": zk.topics.get("orders")}
    with pytest.raises(TopicExistsError):
        zk.topics.create("orders", {0: [1]})

    assert zk.admin.mark_topic_for_deletion("orders") is True
    assert zk.admin.mark_topic_for_deletion("orders") is False
    assert zk.admin.topics_marked_for_deletion() == ["orders"]
    zk.partitions.create_state("orders", 0, 1, 0, [1, 2], 1)
    zk.topics.delete("orders")
    for path in ("/brokers/topics/orders", "/config/topics/orders", "/admin/delete_topics/orders"):
        assert raw.exists(path) is None, path
    assert zk.topics.get("orders") is None
    assert zk.topics.names() == []
    assert zk.configs.topic("orders") == {}
    zk.topics.delete("orders")  # nothing left to delete: no error

    fresh_id = zk.topics.create("orders", {0: [1]}, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
    assert fresh_id == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert zk.topics.get("orders").topic_id == fresh_id


def test_topic_marked_for_deletion_cannot_be_recreated(zk, raw):
    zk.topics.create("doomed", {0: [1]})
    zk.admin.mark_topic_for_deletion("doomed")
    # Half-way through the controller's deletion: the assignment is gone, the mark is not.
    raw.delete("/brokers/topics/doomed", recursive=True)
    with pytest.raises(TopicExistsError, match="marked for deletion"):
        zk.topics.create("doomed", {0: [1]})
    with pytest.raises(TopicNotFoundError):
        zk.admin.mark_topic_for_deletion("never-existed")


def test_topic_validation(zk):
    with pytest.raises(InvalidTopicError):
        zk.topics.create("bad/name", {0: [1]})
    with pytest.raises(InvalidTopicError):
        zk.topics.create("..", {0: [1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.topics.create("gap", {0: [1], 2: [1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.topics.create("uneven", {0: [1, 2], 1: [1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.topics.create("twice", {0: [1, 1]})
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.topics.create("empty", {})
    zk.topics.create("metrics.cpu", {0: [1]})
    with pytest.raises(InvalidTopicError, match="collides"):
        zk.topics.create("metrics_cpu", {0: [1]})
    assert zk.topics.names() == ["metrics.cpu"]


def test_topic_config_change_writes_a_notification(zk, raw):
    zk.topics.create("configured", {0: [1]}, {"cleanup.policy": "delete"})
    name = zk.configs.set_topic("configured", {"cleanup.policy": "compact"})
    assert name.startswith("config_change_")
    assert raw.get(f"/config/changes/{name}")[0] == b'{"version":2,"entity_path":"topics/configured"}'
    assert zk.configs.topic("configured") == {"cleanup.policy": "compact"}
    assert zk.configs.change_notifications() == [(name, {"version": 2, "entity_path": "topics/configured"})]
    with pytest.raises(TopicNotFoundError):
        zk.configs.set_topic("missing", {})


def test_add_partitions_keeps_the_topic_id(zk):
    topic_id = zk.topics.create("growing", {0: [1, 2]})
    assert zk.topics.add_partitions("growing", {1: [2, 1], 2: [1, 2]}) == {0: [1, 2], 1: [2, 1], 2: [1, 2]}
    assignment = zk.topics.get("growing")
    assert assignment.topic_id == topic_id
    assert sorted(assignment.partitions) == [0, 1, 2]
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.topics.add_partitions("growing", {5: [1, 2]})
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.topics.add_partitions("growing", {0: [2, 1], 3: [1, 2]})
    with pytest.raises(TopicNotFoundError):
        zk.topics.add_partitions("missing", {1: [1]})


def test_topic_watches(make_client):
    watcher, admin = make_client(), make_client()
    topics: "queue.Queue[list[str]]" = queue.Queue()
    deletions: "queue.Queue[list[str]]" = queue.Queue()
    handle = watcher.topics.watch_names(topics.put)
    watcher.admin.watch_topic_deletions(deletions.put)
    assert next_value(topics) == []
    assert next_value(deletions) == []
    admin.topics.create("b", {0: [1]})
    admin.topics.create("a", {0: [1]})
    wait_for_value(topics, ["a", "b"])
    admin.admin.mark_topic_for_deletion("a")
    assert next_value(deletions) == ["a"]
    handle.cancel()
    admin.topics.create("c", {0: [1]})
    time.sleep(0.5)
    assert all("c" not in names for names in list(topics.queue))


# ------------------------------------------------------------ partition state


def test_partition_state_conditional_updates(zk, raw):
    zk.topics.create("events", {0: [1, 2], 1: [2, 1]})
    assert zk.partitions.state("events", 0) is None
    assert zk.partitions.create_state("events", 0, leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=3) == 0
    assert raw.get("/brokers/topics/events/partitions/0/state")[0] == (
        b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
    )
    state, version = zk.partitions.state("events", 0)
    assert state == PartitionState(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=3)
    assert version == 0
    with pytest.raises(PartitionStateExistsError):
        zk.partitions.create_state("events", 0, 1, 0, [1, 2], 3)

    shrunk = PartitionState(leader=1, leader_epoch=0, isr=[1], controller_epoch=3)
    assert zk.partitions.update_state("events", 0, shrunk, expected_zk_version=0) == 1
    # A second writer still holding version 0 lost the race.
    with pytest.raises(BadVersionError):
        zk.partitions.update_state("events", 0, PartitionState(2, 1, [2], 3), expected_zk_version=0)
    assert zk.partitions.state("events", 0) == (shrunk, 1)

    zk.partitions.create_state("events", 1, 2, 0, [2, 1], 3)
    assert zk.partitions.states("events") == {
        0: (shrunk, 1),
        1: (PartitionState(2, 0, [2, 1], 3), 0),
    }
    assert zk.partitions.states("missing") == {}
    with pytest.raises(TopicNotFoundError):
        zk.partitions.create_state("missing", 0, 1, 0, [1], 3)


def test_recovering_partition_writes_leader_recovery_state(zk, raw):
    zk.topics.create("recovering", {0: [1]})
    zk.partitions.create_state("recovering", 0, 1, 0, [1], 1)
    zk.partitions.update_state("recovering", 0, PartitionState(1, 1, [1], 1, leader_recovery_state=1), 0)
    assert raw_json(raw, "/brokers/topics/recovering/partitions/0/state")["leader_recovery_state"] == 1
    assert zk.partitions.state("recovering", 0)[0].leader_recovery_state == 1


def test_controller_writes_are_fenced_by_the_epoch_version(make_client):
    old_controller, new_controller = make_client(), make_client()
    epoch = old_controller.controller.try_elect(1)
    _, epoch_version = old_controller.controller.epoch()
    old_controller.topics.create("fenced", {0: [1], 1: [1]})
    old_controller.partitions.create_state("fenced", 0, 1, 0, [1], epoch,
                                          expected_controller_epoch_zk_version=epoch_version)
    # The old controller's session ends and another broker takes over.
    old_controller.controller.resign()
    assert new_controller.controller.try_elect(2) == epoch + 1
    with pytest.raises(ControllerMovedError):
        old_controller.partitions.update_state("fenced", 0, PartitionState(1, 1, [1], epoch), 0,
                                              expected_controller_epoch_zk_version=epoch_version)
    with pytest.raises(ControllerMovedError):
        old_controller.partitions.create_state("fenced", 1, 1, 0, [1], epoch,
                                              expected_controller_epoch_zk_version=epoch_version)
    _, new_version = new_controller.controller.epoch()
    assert new_controller.partitions.update_state(
        "fenced", 0, PartitionState(2, 1, [2], epoch + 1), 0, expected_controller_epoch_zk_version=new_version
    ) == 1
    with pytest.raises(BadVersionError):
        new_controller.partitions.update_state(
            "fenced", 0, PartitionState(2, 2, [2], epoch + 1), 0, expected_controller_epoch_zk_version=new_version
        )


# ----------------------------------------------------------------- controller


def test_controller_election_race_has_one_winner(make_client, raw):
    first, second = make_client(), make_client()
    assert first.controller.epoch() is None
    assert first.controller.id() is None
    barrier = threading.Barrier(2)
    results: dict[int, int | None] = {}

    def campaign(client: KafkaZkClient, broker_id: int) -> None:
        barrier.wait(timeout=10)
        results[broker_id] = client.controller.try_elect(broker_id)

    threads = [threading.Thread(target=campaign, args=(c, b)) for c, b in ((first, 1), (second, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [broker_id for broker_id, epoch in results.items() if epoch is not None]
    assert len(winners) == 1, results
    winner_id = winners[0]
    loser_id = 3 - winner_id
    winner, loser = (first, second) if winner_id == 1 else (second, first)
    assert results[winner_id] == 1
    assert results[loser_id] is None
    assert raw.get("/controller_epoch")[0] == b"1"  # plain text, as Kafka writes it
    controller = raw_json(raw, "/controller")
    assert controller["version"] == 1 and controller["brokerid"] == winner_id
    assert isinstance(controller["timestamp"], str)
    assert raw.exists("/controller").ephemeralOwner == winner.session_id
    assert loser.controller.id() == winner_id
    assert loser.controller.epoch() == (1, raw.exists("/controller_epoch").version)
    assert loser.controller.try_elect(loser_id) is None

    seen: "queue.Queue[int | None]" = queue.Queue()
    loser.controller.watch(seen.put)
    assert next_value(seen) == winner_id
    winner.close()
    assert next_value(seen) is None
    # The watch is the cue to run the election again: the epoch moves by one.
    assert loser.controller.try_elect(loser_id) == 2
    assert next_value(seen) == loser_id
    assert raw.get("/controller_epoch")[0] == b"2"


def test_resign_controller(make_client):
    first, second = make_client(), make_client()
    assert first.controller.try_elect(1) == 1
    assert second.controller.resign() is False  # not ours
    assert first.controller.try_elect(1) == 1  # already controller: same epoch
    assert first.controller.resign() is True
    assert first.controller.id() is None
    assert second.controller.try_elect(2) == 2


def test_controller_epoch_from_an_older_deployment_continues(zk, raw):
    raw.create("/controller_epoch", b"41")
    assert zk.controller.try_elect(5) == 42
    assert zk.controller.epoch()[0] == 42


# -------------------------------------------------------- ISR notifications


def test_isr_change_notifications(make_client, raw):
    leader, controller = make_client(), make_client()
    names: "queue.Queue[list[str]]" = queue.Queue()
    controller.isr_changes.watch(names.put)
    assert next_value(names) == []
    first = leader.isr_changes.add([("events", 0), ("events", 1)])
    second = leader.isr_changes.add([("orders", 3)])
    assert first.startswith("isr_change_") and len(first) == len("isr_change_") + 10
    assert zk_paths.isr_change_sequence_number(second) > zk_paths.isr_change_sequence_number(first)
    assert raw.get(f"/isr_change_notification/{first}")[0] == (
        b'{"version":1,"partitions":[{"topic":"events","partition":0},{"topic":"events","partition":1}]}'
    )
    assert raw.exists(f"/isr_change_notification/{first}").ephemeralOwner == 0  # persistent
    wait_for_value(names, [first, second])
    pending = controller.isr_changes.pending()
    assert [(n.name, n.partitions) for n in pending] == [
        (first, [("events", 0), ("events", 1)]),
        (second, [("orders", 3)]),
    ]
    controller.isr_changes.delete([n.name for n in pending])
    assert controller.isr_changes.pending() == []
    controller.isr_changes.delete([first])  # already gone: no error
    wait_for_value(names, [])


# ------------------------------------------------------------- session events


def test_session_loss_is_reported_and_a_new_session_follows(make_client, raw):
    broker = make_client()
    observer = make_client()
    broker.brokers.register(21, "127.0.0.1", 9092)
    lost = threading.Event()
    new_sessions: "queue.Queue[int]" = queue.Queue()
    broker.on_session_lost(lost.set)

    def reregister(session_id: int) -> None:
        # Runs on the client's event thread, so it may call ZooKeeper.
        broker.brokers.register(21, "127.0.0.1", 9092)
        new_sessions.put(session_id)

    broker.on_new_session(reregister)
    old_session = expire_session(broker)
    assert lost.wait(15)
    new_session = new_sessions.get(timeout=15)
    assert new_session != old_session
    assert broker.session_id == new_session
    assert observer.brokers.get(21) is not None
    assert raw.exists("/brokers/ids/21").ephemeralOwner == new_session


def test_close_does_not_report_session_loss(make_client):
    client = make_client()
    lost = threading.Event()
    client.on_session_lost(lost.set)
    client.close()
    assert not lost.wait(1)
    with pytest.raises(ZkClientClosedError):
        client.topics.names()


def test_connecting_to_nothing_times_out(tmp_path):
    # Port 1 is privileged: nothing listens there.
    client = KafkaZkClient("127.0.0.1:1", session_timeout_ms=2000, connection_timeout_ms=1000)
    started = time.monotonic()
    with pytest.raises(ZkTimeoutError):
        client.start()
    assert time.monotonic() - started < 10


def test_requests_are_bounded_while_the_server_is_down(tmp_path):
    with running_zookeeper(tmp_path / "zk") as server:
        client = KafkaZkClient(server.connect_string, session_timeout_ms=4000, request_timeout_ms=1500)
        client.start()
        try:
            client.topics.create("t", {0: [1]})
            server.stop()
            started = time.monotonic()
            with pytest.raises(ZkConnectionError):
                client.topics.names()
            with pytest.raises(ZkConnectionError):
                client.topics.create("u", {0: [1]})
            assert time.monotonic() - started < 10
            # Back on the same port: the session survives a short outage.
            server.start()
            assert client.wait_connected(15)
            assert client.topics.names() == ["t"]
        finally:
            client.close()
