"""Authorization (issue 21 part 4): Kafka's AclAuthorizer with real clients.

One broker for the module: PLAINTEXT (first: the ready line; User:ANONYMOUS)
and SASL_PLAINTEXT with PLAIN users admin (super.users), alice and bob;
authorizer.class.name=kafka.security.authorizer.AclAuthorizer. For each API
family a principal without the ACL gets Kafka's error and with it succeeds.
The last test restarts the broker: the ACLs live in ZooKeeper.
"""
from __future__ import annotations

import datetime
import socket
import subprocess
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (ConsumerGroupTopicPartitions, Consumer, KafkaError, KafkaException, Producer,  # noqa: E402
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,  # noqa: E402
                                   AdminClient, ConfigResource, NewTopic, ResourcePatternType, ResourceType)

from net.codec import request_schema  # noqa: E402
from net.schema_build import nested  # noqa: E402
from storage.records import build_batch  # noqa: E402
from tests.broker_process import REPO, BrokerProcess  # noqa: E402
from tests.wire_client import WireClient  # noqa: E402

RAYKAFKA = REPO / ".venv" / "bin" / "raykafka"
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("acls")
    sasl_port = _free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.jaas.config": JAAS,  # the fallback: a secret DescribeConfigs must not show (issue 28)
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "raykafka.replicas.per.node.max": "60",
    }
    process = BrokerProcess(base / "data", overrides=overrides, log_name="acls-broker.log").start()
    properties = base / "admin.properties"
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          f'sasl.jaas.config={JAAS.split(" user_")[0]};\n')
    state = {"broker": process, "sasl": f"127.0.0.1:{sasl_port}", "admin_properties": properties}
    yield state
    code = state["broker"].stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{state['broker'].log_tail()}"


def _config(broker, user: str, **extra) -> dict:
    return {"bootstrap.servers": broker["sasl"], "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], **extra}


def _admin(broker, user: str = "admin") -> AdminClient:
    """One admin client per user for the module (a client destroyed early fails its futures with _DESTROY)."""
    clients = broker.setdefault("admins", {})
    if user not in clients:
        clients[user] = AdminClient(_config(broker, user))
    return clients[user]


def _wait(futures: dict, timeout_s: float = 30) -> dict:
    """{key: None or the KafkaError code} of admin futures."""
    outcome = {}
    for key, future in futures.items():
        try:
            future.result(timeout_s)
            outcome[key] = None
        except KafkaException as exc:
            outcome[key] = exc.args[0].code()
    return outcome


def _allow(broker, principal: str, operation, resource_type, name: str,
           pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW) -> None:
    binding = AclBinding(resource_type, name, pattern, f"User:{principal}" if ":" not in principal else principal,
                         "*", operation, permission)
    assert set(_wait(_admin(broker).create_acls([binding])).values()) == {None}


def _topic(broker, partitions: int = 1) -> str:
    name = f"acl-{uuid.uuid4().hex[:8]}"
    assert _wait(_admin(broker).create_topics([NewTopic(name, partitions, 1)]))[name] is None
    return name


def _produce(config: dict, topic: str, n: int = 3, timeout_s: float = 20) -> set:
    """The delivery error codes of n records (empty: all delivered)."""
    errors = set()
    producer = Producer({**config, "message.timeout.ms": int(timeout_s * 1000)})

    def delivered(err, _msg):
        if err is not None:
            errors.add(err.code())

    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode(), on_delivery=delivered)
    assert producer.flush(timeout_s + 10) == 0
    return errors


def _consume(config: dict, topic: str, group: str, n: int, timeout_s: float = 30) -> tuple[list, set]:
    """(values read, error codes seen) until n values or the first error."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    values, errors, deadline = [], set(), time.monotonic() + timeout_s
    try:
        while len(values) < n and not errors and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    errors.add(message.error().code())
                continue
            values.append(message.value())
        if values and not errors:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values, errors


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([str(RAYKAFKA), "acls", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, input=stdin)


def test_acl_tool_add_list_remove(acl_broker):
    sasl, props = acl_broker["sasl"], str(acl_broker["admin_properties"])
    common = ("--bootstrap-server", sasl, "--command-config", props)
    added = _cli(*common, "--add", "--allow-principal", "User:carol", "--operation", "Read",
                 "--operation", "Describe", "--topic", "tool-topic", "--group", "tool-", "--resource-pattern-type",
                 "prefixed")
    assert added.returncode == 0, added.stderr
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=tool-topic, patternType=PREFIXED)`" \
        in added.stdout
    listed = _cli(*common, "--list", "--topic", "tool-topic-1", "--resource-pattern-type", "match")
    assert listed.returncode == 0, listed.stderr
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
    assert "name=tool-topic, patternType=PREFIXED" in listed.stdout
    everything = _cli(*common, "--list", "--principal", "User:carol")
    assert "ACLs for principal `User:carol`" in everything.stdout and "resourceType=GROUP" in everything.stdout
    # Without --force the tool asks; "n" keeps the ACLs.
    kept = _cli(*common, "--remove", "--topic", "tool-topic", "--resource-pattern-type", "prefixed", stdin="n\n")
    assert kept.returncode == 0 and "Are you sure you want to delete all ACLs" in kept.stdout
    removed = _cli(*common, "--remove", "--force", "--allow-principal", "User:carol", "--operation", "Read",
                   "--topic", "tool-topic", "--resource-pattern-type", "prefixed")
    assert removed.returncode == 0, removed.stderr
    after = _cli(*common, "--list", "--topic", "tool-topic", "--resource-pattern-type", "prefixed").stdout
    assert "operation=DESCRIBE" in after and "operation=READ" not in after
    assert _cli(*common, "--remove", "--force", "--group", "tool-", "--topic", "tool-topic",
                "--resource-pattern-type", "prefixed").returncode == 0
    assert "carol" not in _cli(*common, "--list").stdout
    # DescribeAcls needs DESCRIBE on the cluster: ANONYMOUS (PLAINTEXT) has none.
    refused = _cli("--bootstrap-server", acl_broker["broker"].bootstrap, "--list")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    # A resource type's operations are checked before anything is sent.
    assert _cli(*common, "--add", "--allow-principal", "User:carol", "--operation", "IdempotentWrite",
                "--topic", "t").returncode == 2


def test_produce_and_fetch_need_write_and_read(acl_broker):
    topic = _topic(acl_broker)
    alice = _config(acl_broker, "alice")
    assert _produce(alice, topic, timeout_s=10) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    _allow(acl_broker, "alice", AclOperation.WRITE, ResourceType.TOPIC, topic)
    assert _produce(alice, topic) == set()
    group = f"g-{topic}"
    # WRITE implies DESCRIBE, not READ: the fetch is refused.
    _allow(acl_broker, "alice", AclOperation.READ, ResourceType.GROUP, group)
    values, errors = _consume(alice, topic, group, 3, timeout_s=15)
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, (values, errors)
    _allow(acl_broker, "alice", AclOperation.READ, ResourceType.TOPIC, topic)
    values, errors = _consume(alice, topic, group, 3)
    assert (values, errors) == ([b"v0", b"v1", b"v2"], set())
    # Offsets: OffsetFetch needs DESCRIBE on the group (implied by READ).
    committed = _admin(acl_broker, "alice").list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])
    assert [tp.offset for tp in committed[group].result(30).topic_partitions] == [3]


def test_groups_need_read_on_the_group(acl_broker):
    topic = _topic(acl_broker)
    assert _produce(_config(acl_broker, "admin"), topic) == set()
    _allow(acl_broker, "bob", AclOperation.READ, ResourceType.TOPIC, topic)
    bob = _config(acl_broker, "bob")
    values, errors = _consume(bob, topic, f"nogroup-{topic}", 1, timeout_s=15)
    assert errors == {KafkaError.GROUP_AUTHORIZATION_FAILED}, (values, errors)
    admin_group = f"admins-{topic}"
    assert _consume(_config(acl_broker, "admin"), topic, admin_group, 3)[0]  # a super user needs no ACL
    # DescribeGroups / DeleteGroups: GROUP_AUTHORIZATION_FAILED without DESCRIBE / DELETE.
    bob_admin = _admin(acl_broker, "bob")
    described = bob_admin.describe_consumer_groups([admin_group])[admin_group]
    with pytest.raises(KafkaException) as refused:
        described.result(30)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _wait(bob_admin.delete_consumer_groups([admin_group])) == {admin_group: KafkaError.GROUP_AUTHORIZATION_FAILED}
    # ListGroups without DESCRIBE on the cluster: only the groups bob may DESCRIBE.
    _allow(acl_broker, "bob", AclOperation.DELETE, ResourceType.GROUP, admin_group)
    described = bob_admin.describe_consumer_groups([admin_group], include_authorized_operations=True)
    assert set(described[admin_group].result(30).authorized_operations) == {AclOperation.DELETE,
                                                                            AclOperation.DESCRIBE}
    listed = {g.group_id for g in bob_admin.list_consumer_groups().result(30).valid}
    assert admin_group in listed and all(g == admin_group for g in listed)
    assert _wait(bob_admin.delete_consumer_groups([admin_group])) == {admin_group: None}


def test_admin_and_configs(acl_broker):
    alice = _admin(acl_broker, "alice")
    name = f"alice-{uuid.uuid4().hex[:6]}"
    assert _wait(alice.create_topics([NewTopic(name, 1, 1)])) == {name: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    _allow(acl_broker, "alice", AclOperation.CREATE, ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED)
    assert _wait(alice.create_topics([NewTopic(name, 1, 1)])) == {name: None}
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    with pytest.raises(KafkaException) as refused:
        alice.describe_configs([resource])[resource].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _allow(acl_broker, "alice", AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name)  # implies DESCRIBE_CONFIGS
    assert "retention.ms" in alice.describe_configs([resource])[resource].result(30)
    broker_id = next(iter(_admin(acl_broker).list_topics(timeout=30).brokers))
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    with pytest.raises(KafkaException) as refused:
        alice.describe_configs([broker_resource])[broker_resource].result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert _wait(alice.delete_topics([name])) == {name: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    _allow(acl_broker, "alice", AclOperation.DELETE, ResourceType.TOPIC, name)
    assert _wait(alice.delete_topics([name])) == {name: None}
    # The ACL APIs themselves need ALTER / DESCRIBE on the cluster.
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    assert set(_wait(alice.create_acls([binding])).values()) == {KafkaError.CLUSTER_AUTHORIZATION_FAILED}


def test_transactions_need_the_transactional_id(acl_broker):
    topic = _topic(acl_broker)
    _allow(acl_broker, "alice", AclOperation.WRITE, ResourceType.TOPIC, topic)
    txn_id = f"tx-{topic}"
    producer = Producer(_config(acl_broker, "alice", **{"transactional.id": txn_id}))
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _allow(acl_broker, "alice", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    producer = Producer(_config(acl_broker, "alice", **{"transactional.id": txn_id}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"in-txn")
    producer.commit_transaction(30)
    values, errors = _consume(_config(acl_broker, "admin", **{"isolation.level": "read_committed"}), topic,
                              f"g-{topic}", 1)
    assert (values, errors) == ([b"in-txn"], set())
    # An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic: alice has the latter.
    assert _produce(_config(acl_broker, "alice", **{"enable.idempotence": True}), topic) == set()


def test_prefixed_and_deny_acls(acl_broker):
    topic = _topic(acl_broker)
    assert _produce(_config(acl_broker, "admin"), topic) == set()
    prefix = topic[:8]  # "acl-" + 4 characters
    _allow(acl_broker, "User:*", AclOperation.ALL, ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED)
    _allow(acl_broker, "User:*", AclOperation.READ, ResourceType.GROUP, "*")
    _allow(acl_broker, "bob", AclOperation.READ, ResourceType.TOPIC, topic,
           permission=AclPermissionType.DENY)
    values, errors = _consume(_config(acl_broker, "bob"), topic, f"bob-{topic}", 3, timeout_s=15)
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, (values, errors)
    values, errors = _consume(_config(acl_broker, "alice"), topic, f"alice-{topic}", 3)
    assert (values, errors) == ([b"v0", b"v1", b"v2"], set())
    assert _produce(_config(acl_broker, "bob"), topic) == set()  # the DENY names READ only


def test_metadata_hides_undescribable_topics(acl_broker):
    seen, hidden = _topic(acl_broker), _topic(acl_broker)
    _allow(acl_broker, "bob", AclOperation.DESCRIBE, ResourceType.TOPIC, seen)
    bob = _admin(acl_broker, "bob")
    listed = set(bob.list_topics(timeout=30).topics)
    assert seen in listed and hidden not in listed
    named = bob.list_topics(topic=hidden, timeout=30).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    everything = set(_admin(acl_broker).list_topics(timeout=30).topics)
    assert {seen, hidden} <= everything  # the super user sees all
    # KIP-430: the operations a principal may do on the cluster.
    assert not bob.describe_cluster(include_authorized_operations=True).result(30).authorized_operations
    admin_ops = _admin(acl_broker).describe_cluster(include_authorized_operations=True).result(30)
    assert AclOperation.ALTER in admin_ops.authorized_operations and len(admin_ops.authorized_operations) == 7


def test_spark_ray_path_serves_only_principals_with_read(acl_broker):
    """The Spark source's Ray-native path reads segment files past the broker:
    before it uses them it asks the broker, as the principal the source reads
    as (User:ANONYMOUS on PLAINTEXT here), for READ on the topic (spark/ray_path.py)."""
    from collections import namedtuple

    from spark.ray_path import authorize_slices
    from spark.wire import KafkaError as WireError, KafkaWireClient

    topic = _topic(acl_broker)
    assert _produce(_config(acl_broker, "admin"), topic) == set()
    _allow(acl_broker, "ANONYMOUS", AclOperation.DESCRIBE, ResourceType.TOPIC, topic)  # may plan, not read
    Range = namedtuple("Range", "topic partition start end")
    ranges, slices = [Range(topic, 0, 0, 3)], [[("/segment", 0, 100)]]
    client = KafkaWireClient(acl_broker["broker"].bootstrap)
    try:
        assert client.read_access({(topic, 0): 3}) == {(topic, 0): 29}  # TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(WireError, match="TOPIC_AUTHORIZATION_FAILED"):
            authorize_slices(client, ranges, slices)
        _allow(acl_broker, "ANONYMOUS", AclOperation.READ, ResourceType.TOPIC, topic)
        deadline = time.monotonic() + 30
        while client.read_access({(topic, 0): 3})[(topic, 0)] != 0:
            assert time.monotonic() < deadline, "READ for User:ANONYMOUS never took effect"
            time.sleep(0.2)
        assert authorize_slices(client, ranges, slices) == slices
    finally:
        client.close()


# ---- issue 28: the protocol-layer holes, closed ------------------------------------------------------

def _wire(broker) -> WireClient:
    """A raw Kafka protocol client on the PLAINTEXT listener (User:ANONYMOUS)."""
    return WireClient(broker["broker"].bootstrap)


def _watermarks(broker, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer(_config(broker, "admin", **{"group.id": f"wm-{uuid.uuid4().hex[:6]}"}))
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()


def test_describe_configs_shows_no_secret_even_to_a_super_user(acl_broker):
    broker_id = next(iter(_admin(acl_broker).list_topics(timeout=30).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    entries = _admin(acl_broker).describe_configs([resource])[resource].result(30)
    jaas = entries["sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    shown = [(e.name, e.value) for e in entries.values()] + \
        [(s.name, s.value) for e in entries.values() for s in e.synonyms.values()]
    assert not [name for name, value in shown if value and "secret" in value], shown
    # With synonyms asked for on the wire (ANONYMOUS given DESCRIBE_CONFIGS on the cluster).
    _allow(acl_broker, "User:ANONYMOUS", AclOperation.DESCRIBE_CONFIGS, ResourceType.BROKER, "kafka-cluster")
    schema = request_schema(32, 4)
    client = _wire(acl_broker)
    try:
        answer = client.request(32, 4, include_synonyms=True, include_documentation=False, resources=(
            nested(schema, "DescribeConfigsResource")(resource_type=4, resource_name=str(broker_id),
                                                      configuration_keys=None),))
    finally:
        client.close()
    [result] = answer.results
    assert result.error_code == 0, result
    [wire_jaas] = [c for c in result.configs if c.name == "sasl.jaas.config"]
    assert wire_jaas.is_sensitive and wire_jaas.value is None
    assert wire_jaas.synonyms and all(s.value is None for s in wire_jaas.synonyms)
    values = [c.value for c in result.configs] + [s.value for c in result.configs for s in c.synonyms]
    assert not [v for v in values if v and "secret" in v]
    described = subprocess.run(
        [str(RAYKAFKA), "configs", "--bootstrap-server", acl_broker["sasl"], "--command-config",
         str(acl_broker["admin_properties"]), "--describe", "--all", "--entity-type", "brokers", "--entity-name",
         str(broker_id)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert described.returncode == 0, described.stderr
    assert "sasl.jaas.config=null sensitive=true" in described.stdout
    assert "secret" not in described.stdout + described.stderr


def test_internal_topics_refuse_client_writes_and_foreign_specs(acl_broker):
    admin_config = _config(acl_broker, "admin")
    topic = _topic(acl_broker)
    assert _produce(admin_config, topic) == set()
    assert _consume(admin_config, topic, f"g-{topic}", 3)[1] == set()  # __consumer_offsets exists
    before = _watermarks(acl_broker, "__consumer_offsets")
    # Even a super user: INVALID_TOPIC_EXCEPTION, and the end offset stays.
    assert _produce(admin_config, "__consumer_offsets", n=2, timeout_s=10) == {KafkaError.TOPIC_EXCEPTION}
    refused = _admin(acl_broker).delete_records([TopicPartition("__consumer_offsets", 0, before[1])])
    assert set(_wait(refused).values()) == {KafkaError.TOPIC_EXCEPTION}
    assert _watermarks(acl_broker, "__consumer_offsets") == before
    # CreateTopics may not pre-create an internal topic with its own settings.
    exists = "__transaction_state" in _admin(acl_broker).list_topics(timeout=30).topics
    created = _wait(_admin(acl_broker).create_topics([NewTopic("__transaction_state", 7, 1)]))
    assert created == {"__transaction_state": KafkaError.TOPIC_ALREADY_EXISTS if exists
                       else KafkaError.INVALID_REQUEST}
    producer = Producer({**admin_config, "transactional.id": f"spec-{topic}"})
    producer.init_transactions(30)  # FindCoordinator creates it, from transaction.state.log.* only
    assert len(_admin(acl_broker).list_topics(timeout=30).topics["__transaction_state"].partitions) == 1


def _txn_produce(client: WireClient, topic: str, batch: bytes, transactional_id: str | None):
    schema = request_schema(0, 9)
    topic_cls, part_cls = nested(schema, "TopicProduceData"), nested(schema, "PartitionProduceData")
    body = client.request(0, 9, transactional_id=transactional_id, acks=-1,
                          timeout=datetime.timedelta(seconds=5), topic_data=(
                              topic_cls(name=topic, partition_data=(part_cls(index=0, records=batch),)),))
    return body.responses[0].partition_responses[0]


def test_transactional_batches_need_an_authorized_and_registered_transactional_id(acl_broker):
    topic = _topic(acl_broker)
    _allow(acl_broker, "User:ANONYMOUS", AclOperation.WRITE, ResourceType.TOPIC, topic)
    before = _watermarks(acl_broker, topic)
    client = _wire(acl_broker)
    try:
        def attack(producer_id: int, epoch: int, transactional_id: str | None):
            return _txn_produce(client, topic, build_batch([(b"k", b"forged", [])], producer_id=producer_id,
                                                           producer_epoch=epoch, base_sequence=0,
                                                           is_transactional=True), transactional_id)

        # Only WRITE on the topic: Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
        assert attack(987654321, 0, None).error_code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        txn_id = f"attack-{topic}"
        assert attack(987654321, 0, txn_id).error_code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # An authorized transactional id, but a producer id its coordinator never registered.
        _allow(acl_broker, "User:ANONYMOUS", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
        assert attack(987654321, 0, txn_id).error_code == KafkaError.INVALID_PRODUCER_ID_MAPPING
        # Its own producer id, but the partition was never added to a transaction (KIP-890).
        schema = request_schema(22, 3)
        init = client.request(22, 3, **{k: v for k, v in dict(
            transactional_id=txn_id, transaction_timeout=datetime.timedelta(minutes=1),
            transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1).items()
            if k in schema.__dataclass_fields__})
        assert init.error_code == 0, init
        refused = attack(int(init.producer_id), int(init.producer_epoch), txn_id)
        assert refused.error_code == KafkaError.INVALID_TXN_STATE, refused
    finally:
        client.close()
    assert _watermarks(acl_broker, topic) == before  # nothing appended, nothing pins the LSO
    assert _produce(_config(acl_broker, "admin"), topic) == set()


def test_acl_on_a_name_with_a_slash_is_refused(acl_broker):
    binding = AclBinding(ResourceType.GROUP, "team/a", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.READ, AclPermissionType.DENY)
    assert set(_wait(_admin(acl_broker).create_acls([binding])).values()) == {KafkaError.INVALID_REQUEST}


def test_topic_names_and_ids(acl_broker):
    bad = "orders\n"
    assert _wait(_admin(acl_broker).create_topics([NewTopic(bad, 1, 1)])) == {bad: KafkaError.TOPIC_EXCEPTION}
    topic = _topic(acl_broker)
    described = _admin(acl_broker).describe_topics(TopicCollection([topic]))[topic].result(30)
    topic_id = uuid.UUID(int=((described.topic_id.get_most_significant_bits() & (2**64 - 1)) << 64)
                         | (described.topic_id.get_least_significant_bits() & (2**64 - 1)))
    client = _wire(acl_broker)  # ANONYMOUS: may not DESCRIBE or DELETE the topic
    try:
        metadata_schema = request_schema(3, 12)
        answer = client.request(3, 12, topics=(nested(metadata_schema, "MetadataRequestTopic")(
            topic_id=topic_id, name=None),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)
        [hidden] = answer.topics
        assert (hidden.error_code, hidden.name) == (KafkaError.TOPIC_AUTHORIZATION_FAILED, None)
        delete_schema = request_schema(20, 6)
        answer = client.request(20, 6, topics=(nested(delete_schema, "DeleteTopicState")(
            name=None, topic_id=topic_id),), timeout=datetime.timedelta(seconds=10))
        [refused] = answer.responses
        assert (refused.error_code, refused.name) == (KafkaError.TOPIC_AUTHORIZATION_FAILED, None)
        named = client.request(3, 12, topics=(nested(metadata_schema, "MetadataRequestTopic")(
            topic_id=None, name=bad),), allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        assert named.topics[0].error_code in (KafkaError.TOPIC_EXCEPTION, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    finally:
        client.close()


def test_acls_survive_a_restart(acl_broker):
    topic = _topic(acl_broker)
    _allow(acl_broker, "alice", AclOperation.WRITE, ResourceType.TOPIC, topic)
    process = acl_broker["broker"]
    assert process.stop() == 0
    acl_broker["broker"] = process.start()
    acl_broker.pop("admins", None)  # connected to the broker before the restart
    bindings = _admin(acl_broker).describe_acls(AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(30)
    assert [(b.principal, b.operation) for b in bindings] == [("User:alice", AclOperation.WRITE)]
    assert _produce(_config(acl_broker, "alice"), topic) == set()
    assert _produce(_config(acl_broker, "bob"), topic, timeout_s=10) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
