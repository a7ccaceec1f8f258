"""Kafka's ZooKeeper layout and the pure helpers around it (no server needed)."""
from __future__ import annotations

import pytest

from metadata import zk_paths
from metadata.kafka_zk import (
    InvalidReplicaAssignmentError,
    PartitionState,
    TopicAssignment,
    broker_registration_json,
    encode_json,
    generate_kafka_uuid,
    validate_replica_assignment,
)


def test_paths_match_kafkas_layout():
    assert zk_paths.broker_path(1) == "/brokers/ids/1"
    assert zk_paths.topic_path("t") == "/brokers/topics/t"
    assert zk_paths.partition_state_path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert zk_paths.CONTROLLER == "/controller"
    assert zk_paths.CONTROLLER_EPOCH == "/controller_epoch"
    assert zk_paths.delete_topic_path("t") == "/admin/delete_topics/t"
    assert zk_paths.REASSIGN_PARTITIONS == "/admin/reassign_partitions"
    assert zk_paths.PREFERRED_REPLICA_ELECTION == "/admin/preferred_replica_election"
    assert zk_paths.ISR_CHANGE_SEQUENTIAL_PREFIX == "/isr_change_notification/isr_change_"
    assert zk_paths.isr_change_notification_path("isr_change_0000000004") == "/isr_change_notification/isr_change_0000000004"
    assert zk_paths.isr_change_sequence_number("isr_change_0000000004") == 4
    assert zk_paths.topic_config_path("t") == "/config/topics/t"
    assert zk_paths.broker_config_path(2) == "/config/brokers/2"
    assert zk_paths.broker_config_path("<default>") == "/config/brokers/<default>"
    assert zk_paths.user_config_path("alice") == "/config/users/alice"
    assert zk_paths.client_config_path("app") == "/config/clients/app"
    assert zk_paths.CONFIG_CHANGE_SEQUENTIAL_PREFIX == "/config/changes/config_change_"
    assert zk_paths.config_change_entity_path("topics", "t") == "topics/t"
    assert zk_paths.BROKER_SEQUENCE_ID == "/brokers/seqid"
    assert zk_paths.CLUSTER_ID == "/cluster/id"
    assert zk_paths.KAFKA_ACL == "/kafka-acl"
    assert zk_paths.LOG_DIR_EVENT_NOTIFICATION == "/log_dir_event_notification"
    assert zk_paths.LATEST_PRODUCER_ID_BLOCK == "/latest_producer_id_block"
    assert "/config/ips" in zk_paths.PERSISTENT_PATHS
    assert "/brokers/seqid" in zk_paths.PERSISTENT_PATHS


@pytest.mark.parametrize("bad", ["", "a/b", ".", "..", "x\x00"])
def test_names_that_would_address_another_znode_are_refused(bad):
    with pytest.raises(ValueError):
        zk_paths.topic_path(bad)


def test_bad_ids_are_refused():
    for bad in (-1, True, "1"):
        with pytest.raises(ValueError):
            zk_paths.broker_path(bad)
    with pytest.raises(ValueError):
        zk_paths.config_entity_path("groups", "x")
    with pytest.raises(ValueError):
        zk_paths.isr_change_notification_path("config_change_0000000001")


def test_split_chroot():
    assert zk_paths.split_chroot("h:1") == ("h:1", None)
    assert zk_paths.split_chroot("h:1,g:2/kafka") == ("h:1,g:2", "/kafka")
    assert zk_paths.split_chroot("h:1/a/b") == ("h:1", "/a/b")
    assert zk_paths.split_chroot("h:1/") == ("h:1", None)
    for bad in ("", "/kafka", "h:1/a/", "h:1/a//b", "h:1/a/../b"):
        with pytest.raises(ValueError):
            zk_paths.split_chroot(bad)


def test_sanitize_entity_name_like_kafkas_sanitizer():
    assert zk_paths.sanitize_entity_name("User:alice") == "User%3Aalice"
    assert zk_paths.sanitize_entity_name("a b*c~d") == "a%20b%2Ac%7Ed"
    assert zk_paths.sanitize_entity_name("plain-name_1.x") == "plain-name_1.x"
    assert zk_paths.sanitize_entity_name("é") == "%C3%A9"
    for name in ("User:alice", "a b*c~d", "é/x"):
        assert zk_paths.desanitize_entity_name(zk_paths.sanitize_entity_name(name)) == name


def test_kafka_uuid_shape():
    for _ in range(200):
        value = generate_kafka_uuid()
        assert len(value) == 22 and not value.startswith("-")
        assert set(value) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_payload_encodings():
    assert encode_json(PartitionState(1, 2, [1, 3], 4).to_json()) == (
        b'{"controller_epoch":4,"leader":1,"version":1,"leader_epoch":2,"isr":[1,3]}'
    )
    assignment = TopicAssignment({1: [2], 0: [1]}, "AAAAAAAAAAAAAAAAAAAAAQ", adding_replicas={0: [3]})
    assert encode_json(assignment.to_json()) == (
        b'{"version":3,"partitions":{"0":[1],"1":[2]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ",'
        b'"adding_replicas":{"0":[3]},"removing_replicas":{}}'
    )
    assert TopicAssignment.from_json(assignment.to_json()) == assignment
    # Kafka 2.x wrote version 1 without topic_id or reassignment maps.
    old = TopicAssignment.from_json({"version": 1, "partitions": {"0": [1, 2]}})
    assert old == TopicAssignment({0: [1, 2]}, None)
    body = broker_registration_json(1, "h", 9092, timestamp_ms=5)
    assert encode_json(body) == (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://h:9092"],"jmx_port":-1,"port":9092,"host":"h","version":5,"timestamp":"5"}'
    )


def test_replica_assignment_rules():
    validate_replica_assignment({0: [1, 2], 1: [2, 3]})
    validate_replica_assignment({3: [1], 4: [2]}, first_partition=3)
    for bad in ({}, {1: [1]}, {0: []}, {0: [1, 1]}, {0: [1], 1: [1, 2]}, {0: [-1]}):
        with pytest.raises(InvalidReplicaAssignmentError):
            validate_replica_assignment(bad)
