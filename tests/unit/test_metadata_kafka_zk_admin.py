"""KafkaZkClient's admin znodes against a real ZooKeeper: partition reassignment
and preferred replica election requests (Kafka's JSON), broker dynamic configs,
and the conditional delete of a dead controller's /controller."""
from __future__ import annotations

import queue
from typing import Any

import pytest

from metadata import zk_paths
from metadata.kafka_zk import (
    ControllerMovedError,
    InvalidReplicaAssignmentError,
    PreferredReplicaElectionInProgressError,
)
from tests.unit.kafka_zk_fixtures import (  # noqa: F401 - fixtures, found by pytest by name
    chroot_connect,
    make_client,
    raw,
    raw_json,
    wait_for_value,
    zk,
)

# ------------------------------------------------------------ reassign_partitions


def test_partition_reassignment_round_trip_in_kafkas_format(zk, raw):
    assert zk.admin.reassignment() == {}
    zk.admin.set_reassignment({("orders", 1): [3, 1, 2], ("orders", 0): [1, 2, 3], ("audit", 0): [2]})
    assert raw_json(raw, "/admin/reassign_partitions") == {
        "version": 1,
        "partitions": [
            {"topic": "audit", "partition": 0, "replicas": [2]},
            {"topic": "orders", "partition": 0, "replicas": [1, 2, 3]},
            {"topic": "orders", "partition": 1, "replicas": [3, 1, 2]},
        ],
    }
    assert zk.admin.reassignment() == {
        ("orders", 0): [1, 2, 3], ("orders", 1): [3, 1, 2], ("audit", 0): [2],
    }
    # Overwrite: the controller rewrites it as reassignments complete.
    zk.admin.set_reassignment({("orders", 1): [3, 1, 2]})
    assert zk.admin.reassignment() == {("orders", 1): [3, 1, 2]}
    # Empty deletes the znode, as Kafka's controller does after the last one.
    zk.admin.set_reassignment({})
    assert raw.exists("/admin/reassign_partitions") is None
    assert zk.admin.delete_reassignment() is False


def test_partition_reassignment_written_by_kafkas_tool_is_read(zk, raw):
    # kafka-reassign-partitions --zookeeper (Kafka 2.x) writes this; field order differs.
    raw.create("/admin/reassign_partitions",
               b'{"partitions":[{"replicas":[4,5],"partition":7,"topic":"t.x"}],"version":1}')
    assert zk.admin.reassignment() == {("t.x", 7): [4, 5]}


def test_partition_reassignment_refuses_bad_replica_lists(zk, raw):
    for bad in ({("t", 0): []}, {("t", 0): [1, 1]}, {("t", -1): [1]}, {("t", 0): [-2]}, {("", 0): [1]}):
        with pytest.raises(InvalidReplicaAssignmentError):
            zk.admin.set_reassignment(bad)
    assert raw.exists("/admin/reassign_partitions") is None


def test_partition_reassignment_watch_fires_on_create_change_and_delete(make_client):
    watcher, admin = make_client(), make_client()
    seen: "queue.Queue[Any]" = queue.Queue()
    watcher.admin.watch_reassignment(seen.put)
    wait_for_value(seen, None)
    admin.admin.set_reassignment({("t", 0): [2, 3]})
    wait_for_value(seen, {("t", 0): [2, 3]})
    admin.admin.set_reassignment({("t", 0): [2, 3], ("t", 1): [3, 1]})
    wait_for_value(seen, {("t", 0): [2, 3], ("t", 1): [3, 1]})
    assert admin.admin.delete_reassignment() is True
    wait_for_value(seen, None)


def test_controller_writes_of_the_reassignment_are_fenced(make_client):
    old_controller, new_controller = make_client(), make_client()
    old_controller.controller.try_elect(1)
    _, old_version = old_controller.controller.epoch()
    old_controller.admin.set_reassignment({("t", 0): [1, 2]}, expected_controller_epoch_zk_version=old_version)
    old_controller.admin.set_reassignment({("t", 0): [2, 1]}, expected_controller_epoch_zk_version=old_version)
    assert new_controller.admin.reassignment() == {("t", 0): [2, 1]}
    old_controller.controller.resign()
    new_controller.controller.try_elect(2)
    with pytest.raises(ControllerMovedError):
        old_controller.admin.set_reassignment({("t", 0): [1]}, expected_controller_epoch_zk_version=old_version)
    with pytest.raises(ControllerMovedError):
        old_controller.admin.delete_reassignment(expected_controller_epoch_zk_version=old_version)
    assert new_controller.admin.reassignment() == {("t", 0): [2, 1]}
    _, new_version = new_controller.controller.epoch()
    assert new_controller.admin.delete_reassignment(expected_controller_epoch_zk_version=new_version) is True
    assert new_controller.admin.delete_reassignment(expected_controller_epoch_zk_version=new_version) is False
    # A fenced write creates the znode when absent.
    new_controller.admin.set_reassignment({("t", 1): [2]}, expected_controller_epoch_zk_version=new_version)
    assert new_controller.admin.reassignment() == {("t", 1): [2]}


# ------------------------------------------------------- preferred_replica_election


def test_preferred_replica_election_round_trip_and_in_progress_refusal(zk, raw):
    assert zk.admin.preferred_replica_election() == []
    zk.admin.create_preferred_replica_election([("orders", 0), ("orders", 2)])
    assert raw_json(raw, "/admin/preferred_replica_election") == {
        "version": 1,
        "partitions": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 2}],
    }
    assert zk.admin.preferred_replica_election() == [("orders", 0), ("orders", 2)]
    with pytest.raises(PreferredReplicaElectionInProgressError, match="in progress for orders-0,orders-2"):
        zk.admin.create_preferred_replica_election([("audit", 0)])
    assert zk.admin.preferred_replica_election() == [("orders", 0), ("orders", 2)]
    assert zk.admin.delete_preferred_replica_election() is True
    assert zk.admin.delete_preferred_replica_election() is False
    zk.admin.create_preferred_replica_election([("audit", 0)])
    assert zk.admin.preferred_replica_election() == [("audit", 0)]


def test_preferred_replica_election_refuses_duplicates_and_nothing(zk, raw):
    with pytest.raises(ValueError, match="duplicate"):
        zk.admin.create_preferred_replica_election([("t", 0), ("t", 1), ("t", 0)])
    with pytest.raises(ValueError):
        zk.admin.create_preferred_replica_election([])
    assert raw.exists("/admin/preferred_replica_election") is None


def test_preferred_replica_election_watch_and_fenced_delete(make_client):
    controller, admin = make_client(), make_client()
    controller.controller.try_elect(1)
    _, epoch_version = controller.controller.epoch()
    seen: "queue.Queue[Any]" = queue.Queue()
    controller.admin.watch_preferred_replica_election(seen.put)
    wait_for_value(seen, None)
    admin.admin.create_preferred_replica_election([("t", 3)])
    wait_for_value(seen, [("t", 3)])
    with pytest.raises(ControllerMovedError):
        controller.admin.delete_preferred_replica_election(expected_controller_epoch_zk_version=epoch_version + 1)
    assert controller.admin.delete_preferred_replica_election(expected_controller_epoch_zk_version=epoch_version) is True
    wait_for_value(seen, None)


# ------------------------------------------------------------------ /controller


def test_controller_znode_reports_owner_session_and_version(make_client):
    first, second = make_client(), make_client()
    assert first.controller.znode() is None
    assert first.controller.try_elect(7) == 1
    assert second.controller.znode() == (7, first.session_id, 0)


def test_delete_controller_if_deletes_only_that_owners_znode(make_client):
    controller, survivor = make_client(), make_client()
    controller.controller.try_elect(1)
    broker_id, owner, _version = survivor.controller.znode()
    assert survivor.controller.delete_if(owner + 1, broker_id) is False  # another session
    assert survivor.controller.delete_if(owner, broker_id + 1) is False  # another broker
    assert survivor.controller.znode() == (1, owner, 0)
    assert survivor.controller.delete_if(owner, broker_id) is True
    assert survivor.controller.znode() is None
    assert survivor.controller.delete_if(owner, broker_id) is False  # already gone
    # The survivor can now be elected at once, with the next epoch.
    assert survivor.controller.try_elect(2) == 2


def test_delete_controller_if_spares_a_new_session_of_the_same_broker(make_client):
    old = make_client()
    old.controller.try_elect(1)
    _, old_owner, _ = old.controller.znode()
    old.close()  # its session ends; the same broker comes back with a new session
    returning, survivor = make_client(), make_client()
    assert returning.controller.try_elect(1) == 2
    assert survivor.controller.delete_if(old_owner, 1) is False
    assert survivor.controller.znode() == (1, returning.session_id, 0)


def test_delete_controller_if_loses_to_an_election_between_its_reads_and_its_delete(make_client):
    dead, successor, survivor = make_client(), make_client(), make_client()
    dead.controller.try_elect(1)
    _, dead_owner, _ = survivor.controller.znode()
    commit = survivor.session.commit

    def commit_after_a_new_election(what, build):
        # Between the survivor's checks and its transaction, the old controller
        # goes and another broker is elected.
        dead.controller.resign()
        assert successor.controller.try_elect(2) == 2
        return commit(what, build)

    survivor.session.commit = commit_after_a_new_election
    assert survivor.controller.delete_if(dead_owner, 1) is False
    survivor.session.commit = commit
    assert survivor.controller.znode() == (2, successor.session_id, 0)


def test_a_zombie_controller_stays_fenced_after_its_znode_is_deleted(make_client):
    zombie, survivor = make_client(), make_client()
    zombie.controller.try_elect(1)
    _, zombie_epoch_version = zombie.controller.epoch()
    zombie.topics.create("t", {0: [1]})
    _, owner, _ = survivor.controller.znode()
    assert survivor.controller.delete_if(owner, 1) is True
    assert survivor.controller.try_elect(2) == 2
    with pytest.raises(ControllerMovedError):
        zombie.partitions.create_state("t", 0, 1, 0, [1], 1, expected_controller_epoch_zk_version=zombie_epoch_version)


# ---------------------------------------------------------------- broker configs


def test_broker_config_round_trip_with_change_notification(zk, raw):
    assert zk.configs.broker(1) == {}
    name = zk.configs.set_broker(1, {"leader.replication.throttled.rate": "1048576",
                                    "follower.replication.throttled.rate": "2097152"})
    assert raw_json(raw, "/config/brokers/1") == {
        "version": 1,
        "config": {"leader.replication.throttled.rate": "1048576", "follower.replication.throttled.rate": "2097152"},
    }
    assert raw_json(raw, f"/config/changes/{name}") == {"version": 2, "entity_path": "brokers/1"}
    assert zk.configs.broker(1) == {"leader.replication.throttled.rate": "1048576",
                                       "follower.replication.throttled.rate": "2097152"}
    default_name = zk.configs.set_broker(zk_paths.CONFIG_DEFAULT_ENTITY, {"leader.replication.throttled.rate": "10"})
    assert raw_json(raw, f"/config/changes/{default_name}") == {"version": 2, "entity_path": "brokers/<default>"}
    assert zk.configs.broker("<default>") == {"leader.replication.throttled.rate": "10"}
    # Replacing drops keys not given, as Kafka's changeBrokerConfig does.
    zk.configs.set_broker(1, {"follower.replication.throttled.rate": "5"})
    assert zk.configs.broker(1) == {"follower.replication.throttled.rate": "5"}
    assert zk.configs.broker("1") == {"follower.replication.throttled.rate": "5"}


def test_broker_config_refuses_bad_entities_and_values(zk, raw):
    for entity in ("broker-1", "", -1, "../topics/x"):
        with pytest.raises(ValueError):
            zk.configs.set_broker(entity, {"leader.replication.throttled.rate": "1"})
    with pytest.raises(ValueError):
        zk.configs.set_broker(1, {"leader.replication.throttled.rate": 1})
    assert raw.get_children("/config/brokers") == []
