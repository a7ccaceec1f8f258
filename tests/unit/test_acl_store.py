"""ZkAclStore against a real ZooKeeper: Kafka's znodes and JSON, change
notifications reaching another broker's cache, loading at start."""
from __future__ import annotations

import json
import time

import pytest

from cluster.security.acls import (AccessControlEntry as Ace, AccessControlEntryFilter, AclBinding,
                                   AclBindingFilter, Operation as Op, PatternType as Pt, PermissionType as Perm,
                                   ResourcePattern, ResourcePatternFilter, ResourceType as Rt)
from cluster.security.authorizer import AclAuthorizer, ZkAclStore
from metadata import embedded_zookeeper
from metadata.kafka_zk import KafkaZkClient
from tests.unit.kafka_zk_fixtures import chroot_connect, raw  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(
    not embedded_zookeeper.DEBIAN_ZOOKEEPER_JAR.is_file(), reason="Debian's zookeeper package is not installed")

ALICE = "User:alice"


@pytest.fixture
def stores(chroot_connect):  # noqa: F811
    started = []

    def start() -> ZkAclStore:
        # One broker process each: its own ZooKeeper client, which the store uses.
        zk = KafkaZkClient(chroot_connect, session_timeout_ms=4000).start()
        store = ZkAclStore(zk, AclAuthorizer()).start()
        started.append(store)
        return store

    yield start
    for store in started:
        store.close()
        store.zk.close()


def _eventually(check, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def test_create_writes_kafkas_znodes_and_other_brokers_follow(stores, raw):  # noqa: F811
    here, there = stores(), stores()
    literal = AclBinding(ResourcePattern(Rt.TOPIC, "orders", Pt.LITERAL), Ace(ALICE, "*", Op.READ, Perm.ALLOW))
    prefixed = AclBinding(ResourcePattern(Rt.GROUP, "app-", Pt.PREFIXED), Ace(ALICE, "*", Op.ALL, Perm.DENY))
    assert here.create_acls([literal, prefixed]) == [(0, None), (0, None)]
    data, _ = raw.get("/kafka-acl/Topic/orders")
    assert json.loads(data) == {"version": 1, "acls": [{"principal": ALICE, "permissionType": "Allow",
                                                        "operation": "Read", "host": "*"}]}
    assert json.loads(raw.get("/kafka-acl-extended/prefixed/Group/app-")[0])["acls"][0]["operation"] == "All"
    changes = raw.get_children("/kafka-acl-changes")
    assert [raw.get(f"/kafka-acl-changes/{c}")[0] for c in changes] == [b"TOPIC:orders"]
    extended = raw.get_children("/kafka-acl-extended-changes")
    assert json.loads(raw.get(f"/kafka-acl-extended-changes/{extended[0]}")[0]) == {
        "version": 1, "resourceType": "GROUP", "name": "app-", "patternType": "PREFIXED"}
    _eventually(lambda: there.authorizer.authorize(ALICE, "h", Op.READ, Rt.TOPIC, "orders"))
    _eventually(lambda: there.authorizer.bindings() == here.authorizer.bindings())
    # DeleteAcls through the other broker; the first follows.
    deleted = there.delete_acls([AclBindingFilter(ResourcePatternFilter(Rt.ANY, None, Pt.ANY),
                                                  AccessControlEntryFilter(principal=ALICE, operation=Op.READ))])
    assert deleted == [(0, None, [literal])]
    assert raw.exists("/kafka-acl/Topic/orders") is None
    _eventually(lambda: not here.authorizer.authorize(ALICE, "h", Op.READ, Rt.TOPIC, "orders"))
    assert here.authorizer.bindings() == [prefixed]


def test_loaded_at_start_and_changes_written_by_kafka_are_followed(stores, raw):  # noqa: F811
    first = stores()
    assert first.create_acls([AclBinding(ResourcePattern(Rt.CLUSTER, "kafka-cluster", Pt.LITERAL),
                                         Ace(ALICE, "*", Op.ALTER, Perm.ALLOW))]) == [(0, None)]
    later = stores()  # a restarted broker reads what is stored
    assert later.authorizer.authorize(ALICE, "h", Op.DESCRIBE, Rt.CLUSTER, "kafka-cluster")
    # Kafka's own tools (ZooKeeper mode) write the znode, then the change node.
    raw.create("/kafka-acl/Topic/t", json.dumps({"version": 1, "acls": [
        {"host": "*", "permissionType": "Allow", "operation": "Write", "principal": "User:bob"}]}).encode(),
        makepath=True)
    raw.create("/kafka-acl-changes/acl_changes_", b"Topic:t", sequence=True)
    _eventually(lambda: later.authorizer.authorize("User:bob", "h", Op.WRITE, Rt.TOPIC, "t"))


def test_invalid_bindings_are_refused_one_by_one(stores):
    store = stores()
    good = AclBinding(ResourcePattern(Rt.TOPIC, "t", Pt.LITERAL), Ace(ALICE, "*", Op.READ, Perm.ALLOW))
    bad = AclBinding(ResourcePattern(Rt.CLUSTER, "other", Pt.LITERAL), Ace(ALICE, "*", Op.ALTER, Perm.ALLOW))
    results = store.create_acls([good, bad])
    assert results[0] == (0, None) and results[1][0] == 42  # INVALID_REQUEST
    assert store.authorizer.bindings() == [good]


def test_names_with_a_slash_are_refused_and_nested_ones_written_earlier_still_hold(stores, raw):  # noqa: F811
    """Issue 28 item 7: Kafka keeps /kafka-acl/<type>/<name> unencoded, so 'team/a' would nest."""
    store = stores()
    slash = AclBinding(ResourcePattern(Rt.GROUP, "team/a", Pt.LITERAL), Ace(ALICE, "*", Op.READ, Perm.DENY))
    [(code, message)] = store.create_acls([slash])
    assert code == 42 and "'/'" in message  # INVALID_REQUEST
    assert raw.exists("/kafka-acl/Group/team") is None
    # An older version wrote such a DENY as a nested znode under the parent name's own ACL.
    parent = AclBinding(ResourcePattern(Rt.GROUP, "team", Pt.LITERAL), Ace(ALICE, "*", Op.READ, Perm.ALLOW))
    assert store.create_acls([parent]) == [(0, None)]
    raw.create("/kafka-acl/Group/team/a", json.dumps({"version": 1, "acls": [
        {"host": "*", "permissionType": "Deny", "operation": "Read", "principal": ALICE}]}).encode())
    restarted = stores()
    assert not restarted.authorizer.authorize(ALICE, "h", Op.READ, Rt.GROUP, "team/a")  # the DENY holds
    assert restarted.authorizer.authorize(ALICE, "h", Op.READ, Rt.GROUP, "team")
    # Deleting the parent's ACL keeps the znode the nested one lives under, and returns.
    everything = AclBindingFilter(ResourcePatternFilter(Rt.GROUP, "team", Pt.LITERAL), AccessControlEntryFilter())
    assert restarted.delete_acls([everything]) == [(0, None, [parent])]
    assert raw.exists("/kafka-acl/Group/team/a") is not None
    assert not stores().authorizer.authorize(ALICE, "h", Op.READ, Rt.GROUP, "team/a")
    nested = AclBindingFilter(ResourcePatternFilter(Rt.GROUP, "team/a", Pt.LITERAL), AccessControlEntryFilter())
    assert [len(d) for _, _, d in restarted.delete_acls([nested])] == [1]


def test_scram_credentials_come_from_memory_and_follow_change_notifications(chroot_connect):  # noqa: F811
    """Issue 28 item 10: Kafka's CredentialCache: no ZooKeeper read per SCRAM first message."""
    from net.sasl import ScramStore

    from metadata.kafka_zk import KafkaZkClient

    clients = [KafkaZkClient(chroot_connect, session_timeout_ms=4000).start() for _ in range(2)]
    edge, admin = ScramStore(clients[0]), ScramStore(clients[1])
    try:
        admin.alter("alice", {"SCRAM-SHA-256": "salt=a,stored_key=b,server_key=c,iterations=4096"}, [])
        assert edge.credential("alice", "SCRAM-SHA-256").startswith("salt=a")  # loads everything once
        reads = []
        edge.user_config = lambda user: reads.append(user) or {}  # any further read is seen
        for _ in range(50):
            assert edge.credential("mallory", "SCRAM-SHA-256") is None
        assert reads == []
        del edge.user_config
        admin.alter("bob", {"SCRAM-SHA-512": "salt=x,stored_key=y,server_key=z,iterations=4096"}, [])
        _eventually(lambda: edge.credential("bob", "SCRAM-SHA-512") is not None)
        admin.alter("alice", {}, ["SCRAM-SHA-256"])
        _eventually(lambda: edge.credential("alice", "SCRAM-SHA-256") is None)
    finally:
        edge.close()
        admin.close()
        for client in clients:
            client.close()
