"""Kafka's AclAuthorizer decisions and ACL filters, without Ray or ZooKeeper."""
import pytest

from cluster.security.acls import (AccessControlEntry as Ace, AccessControlEntryFilter, AclBinding,
                                   AclBindingFilter, Operation as Op, PatternType as Pt,
                                   PermissionType as Perm, ResourcePattern, ResourcePatternFilter,
                                   ResourceType as Rt, validate_binding)
from cluster.security.authorizer import (AclAuthorizer, decode_acls, decode_change, encode_acls,
                                         encode_change, acl_path, parse_super_users)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def allow(principal, op, host="*"):
    return Ace(principal, host, op, Perm.ALLOW)


def deny(principal, op, host="*"):
    return Ace(principal, host, op, Perm.DENY)


def topic(name, pattern_type=Pt.LITERAL):
    return ResourcePattern(Rt.TOPIC, name, pattern_type)


def test_literal_allow_and_default_deny():
    auth = AclAuthorizer()
    auth.set_acls(topic("orders"), [allow(ALICE, Op.READ)])
    assert auth.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")
    assert not auth.authorize(BOB, HOST, Op.READ, Rt.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "other")  # no ACL, allow.everyone off


def test_allow_everyone_if_no_acl_found_only_without_acls():
    auth = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    auth.set_acls(topic("orders"), [allow(ALICE, Op.READ)])
    assert auth.authorize(BOB, HOST, Op.WRITE, Rt.TOPIC, "other")
    assert not auth.authorize(BOB, HOST, Op.READ, Rt.TOPIC, "orders")


def test_implied_operations():
    auth = AclAuthorizer()
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        auth.set_acls(topic("t"), [allow(ALICE, op)])
        assert auth.authorize(ALICE, HOST, Op.DESCRIBE, Rt.TOPIC, "t"), op
    auth.set_acls(topic("t"), [allow(ALICE, Op.CREATE)])
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, Rt.TOPIC, "t")
    auth.set_acls(topic("t"), [allow(ALICE, Op.ALTER_CONFIGS)])
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, Rt.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, Rt.TOPIC, "t")
    auth.set_acls(topic("t"), [allow(ALICE, Op.DESCRIBE)])
    assert not auth.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "t")  # no implication upwards
    auth.set_acls(topic("t"), [allow(ALICE, Op.ALL)])
    assert all(auth.authorize(ALICE, HOST, op, Rt.TOPIC, "t") for op in (Op.READ, Op.WRITE, Op.DESCRIBE_CONFIGS))


def test_deny_wins_over_allow_wildcard_and_prefix():
    auth = AclAuthorizer()
    auth.set_acls(topic("*"), [allow(ALICE, Op.READ)])
    auth.set_acls(topic("pay", Pt.PREFIXED), [deny(ALICE, Op.READ)])
    assert auth.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "payments")
    auth.set_acls(topic("orders"), [deny("User:*", Op.ALL, HOST)])
    assert not auth.authorize(ALICE, HOST, Op.READ, Rt.TOPIC, "orders")
    assert auth.authorize(ALICE, "10.0.0.2", Op.READ, Rt.TOPIC, "orders")  # deny names another host
    # A DENY of READ does not deny DESCRIBE (implied only for ALLOW).
    auth.set_acls(topic("x"), [allow(ALICE, Op.DESCRIBE), deny(ALICE, Op.READ)])
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, Rt.TOPIC, "x")


def test_prefixed_matching_and_hosts():
    auth = AclAuthorizer()
    auth.set_acls(topic("app-", Pt.PREFIXED), [allow(ALICE, Op.WRITE, HOST)])
    assert auth.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "app-1")
    assert not auth.authorize(ALICE, "10.9.9.9", Op.WRITE, Rt.TOPIC, "app-1")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "ap")
    # the literal "*" topic name is not matched by a PREFIXED "*"-less pattern
    assert not auth.authorize(ALICE, HOST, Op.WRITE, Rt.GROUP, "app-1")


def test_super_users():
    assert parse_super_users("User:admin; User:ops;") == {"User:admin", "User:ops"}
    auth = AclAuthorizer(super_users=parse_super_users("User:admin"))
    auth.set_acls(topic("t"), [deny("User:*", Op.ALL)])
    assert auth.authorize("User:admin", HOST, Op.WRITE, Rt.TOPIC, "t")
    assert auth.authorize("User:admin", HOST, Op.ALTER, Rt.CLUSTER, "kafka-cluster")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, Rt.TOPIC, "t")


def test_authorize_by_resource_type():
    auth = AclAuthorizer()
    assert not auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    auth.set_acls(topic("a", Pt.PREFIXED), [allow(ALICE, Op.WRITE)])
    assert auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    auth.set_acls(topic("a", Pt.PREFIXED), [allow(ALICE, Op.WRITE), deny(ALICE, Op.WRITE)])
    assert not auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    auth.set_acls(topic("b"), [allow(ALICE, Op.WRITE)])
    assert auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    auth.set_acls(topic("*"), [deny(ALICE, Op.WRITE)])
    assert not auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)


def test_filters_follow_kafka():
    lit, star, pre = topic("payments"), topic("*"), topic("pay", Pt.PREFIXED)
    match = ResourcePatternFilter(Rt.TOPIC, "payments", Pt.MATCH)
    assert match.matches(lit) and match.matches(star) and match.matches(pre)
    assert not match.matches(topic("pay"))
    assert ResourcePatternFilter(Rt.ANY, "pay", Pt.ANY).matches(pre)
    assert ResourcePatternFilter(Rt.ANY, "pay", Pt.ANY).matches(topic("pay"))
    assert not ResourcePatternFilter(Rt.TOPIC, "pay", Pt.LITERAL).matches(pre)
    assert ResourcePatternFilter(Rt.TOPIC, None, Pt.PREFIXED).matches(pre)
    assert not ResourcePatternFilter(Rt.GROUP).matches(lit)
    entry = allow(ALICE, Op.READ)
    assert AccessControlEntryFilter(principal=ALICE).matches(entry)
    assert not AccessControlEntryFilter(operation=Op.WRITE).matches(entry)
    assert AclBindingFilter().matches(AclBinding(lit, entry))
    auth = AclAuthorizer()
    auth.set_acls(lit, [entry])
    auth.set_acls(pre, [deny(BOB, Op.WRITE)])
    assert {b.pattern for b in auth.bindings(AclBindingFilter(match))} == {lit, pre}


def test_validation():
    ok = AclBinding(topic("t"), allow(ALICE, Op.READ))
    assert validate_binding(ok) is None
    assert validate_binding(AclBinding(ResourcePattern(Rt.CLUSTER, "c", Pt.LITERAL), allow(ALICE, Op.ALTER)))
    assert validate_binding(AclBinding(topic(""), allow(ALICE, Op.READ)))
    assert validate_binding(AclBinding(topic("t"), allow(ALICE, Op.IDEMPOTENT_WRITE)))
    assert validate_binding(AclBinding(topic("t", Pt.MATCH), allow(ALICE, Op.READ)))
    assert validate_binding(AclBinding(ResourcePattern(Rt.TRANSACTIONAL_ID, "tx", Pt.LITERAL), allow(ALICE, Op.ALL))) is None


def test_zookeeper_layout_is_kafkas():
    assert acl_path(topic("t")) == "/kafka-acl/Topic/t"
    assert acl_path(ResourcePattern(Rt.TRANSACTIONAL_ID, "x", Pt.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/x"
    data = encode_acls([allow(ALICE, Op.DESCRIBE_CONFIGS)])
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                    b'"operation":"DescribeConfigs","host":"*"}]}')
    assert decode_acls(data) == {allow(ALICE, Op.DESCRIBE_CONFIGS)}
    kafka_written = b'{"version": 1, "acls": [{"host":"h","permissionType":"Deny","operation":"Read",' \
                    b'"principal":"User:bob"}]}'
    assert decode_acls(kafka_written) == {Ace(BOB, "h", Op.READ, Perm.DENY)}
    path, data = encode_change(topic("t"))
    assert (path, data) == ("/kafka-acl-changes", b"TOPIC:t")
    assert decode_change(path, data) == topic("t")
    path, data = encode_change(topic("p", Pt.PREFIXED))
    assert path == "/kafka-acl-extended-changes"
    assert decode_change(path, data) == topic("p", Pt.PREFIXED)


@pytest.mark.parametrize("text,op", [("Read", Op.READ), ("alterconfigs", Op.ALTER_CONFIGS),
                                     ("IDEMPOTENT_WRITE", Op.IDEMPOTENT_WRITE), ("All", Op.ALL)])
def test_operation_names(text, op):
    assert Op.parse(text) == op


def test_authorized_operations_bit_field():
    from net.authorization import _allow_all, operations_field

    assert operations_field(_allow_all, Rt.TOPIC, "t") == 3576  # Kafka's value for every topic operation
    auth = AclAuthorizer()
    auth.set_acls(topic("t"), [allow(ALICE, Op.WRITE)])

    def may(op, resource_type, name):
        return auth.authorize(ALICE, HOST, op, resource_type, name)

    assert operations_field(may, Rt.TOPIC, "t") == (1 << Op.WRITE) | (1 << Op.DESCRIBE)
