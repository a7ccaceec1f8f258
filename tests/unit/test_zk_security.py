"""ZooKeeper security against a real ZooKeeper (Debian's 3.8): with
zookeeper.set.acl=true and digest credentials, what the broker writes is
the brokers' own; an unauthenticated session can read what Kafka leaves
world-readable and write nothing (metadata/zk_security.py)."""
from __future__ import annotations

import json
import os
import stat

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from cluster.security.acls import (AccessControlEntry as Ace, AclBinding, Operation as Op,
                                   PatternType as Pt, PermissionType as Perm, ResourcePattern,
                                   ResourceType as Rt)
from cluster.security.authorizer import AclAuthorizer, ZkAclStore
from core.config import BrokerConfig
from metadata import embedded_zookeeper, zk_security
from metadata.kafka_zk import KafkaZkClient
from tests.unit.kafka_zk_fixtures import chroot_connect, raw  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(
    not embedded_zookeeper.DEBIAN_ZOOKEEPER_JAR.is_file(), reason="Debian's zookeeper package is not installed")


@pytest.fixture
def secure(tmp_path, monkeypatch):
    """This process's ZooKeeper settings: set.acl with generated digest credentials."""
    digest = zk_security.generate_digest_file(tmp_path / "digest")
    security = zk_security.ZkClientSecurity(set_acl=True, digest=digest)
    monkeypatch.setattr(zk_security, "_installed", security)
    return security


def _anonymous(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=10)
    return client


def test_set_acl_keeps_acls_and_credentials_from_unauthenticated_sessions(secure, chroot_connect):  # noqa: F811
    broker = KafkaZkClient(chroot_connect, session_timeout_ms=4000).start()
    store = ZkAclStore(broker, AclAuthorizer()).start()  # the broker process's one client
    intruder = _anonymous(chroot_connect)
    try:
        broker.configs.set("users", "alice", {"SCRAM-SHA-256": "salt=abc,stored_key=x,server_key=y"})
        binding = AclBinding(ResourcePattern(Rt.TOPIC, "orders", Pt.LITERAL),
                             Ace("User:alice", "*", Op.READ, Perm.ALLOW))
        assert store.create_acls([binding]) == [(0, None)]

        # /kafka-acl: readable (as in Kafka), never writable without the brokers' credentials.
        assert json.loads(intruder.get("/kafka-acl/Topic/orders")[0])["acls"][0]["principal"] == "User:alice"
        writes = [
            lambda: intruder.set("/kafka-acl/Topic/orders", b'{"version":1,"acls":[]}'),
            lambda: intruder.create("/kafka-acl/Topic/secret", b'{"version":1,"acls":[]}'),
            lambda: intruder.delete("/kafka-acl/Topic/orders"),
            lambda: intruder.create("/kafka-acl-changes/acl_changes_", b"TOPIC:orders", sequence=True),
            # /config/users: SCRAM credentials; neither readable nor writable.
            lambda: intruder.get("/config/users/alice"),
            lambda: intruder.set("/config/users/alice", b'{"version":1,"config":{}}'),
            lambda: intruder.create("/config/users/mallory", b'{"version":1,"config":{}}'),
            lambda: intruder.get_children("/config/users"),
            lambda: intruder.create("/config/changes/config_change_", b"{}", sequence=True),
            lambda: intruder.create("/brokers/ids/7", b"{}", ephemeral=True),
        ]
        for attempt in writes:
            with pytest.raises(NoAuthError):
                attempt()
        # The brokers themselves (same credentials, another session) can.
        other = KafkaZkClient(chroot_connect, session_timeout_ms=4000).start()
        try:
            assert other.configs.get("users", "alice")["SCRAM-SHA-256"].startswith("salt=")
        finally:
            other.close()
    finally:
        intruder.stop()
        intruder.close()
        store.close()
        broker.close()


def test_set_acl_secures_znodes_created_before_it(tmp_path, chroot_connect, monkeypatch):  # noqa: F811
    open_client = KafkaZkClient(chroot_connect, session_timeout_ms=4000,
                                security=zk_security.ZkClientSecurity()).start()
    open_client.configs.set("users", "bob", {"SCRAM-SHA-512": "salt=1"})
    open_client.close()
    digest = zk_security.generate_digest_file(tmp_path / "digest")
    secured = KafkaZkClient(chroot_connect, session_timeout_ms=4000,
                            security=zk_security.ZkClientSecurity(set_acl=True, digest=digest)).start()
    secured.secure_existing_paths()  # what `raykafka start` does once per start
    intruder = _anonymous(chroot_connect)
    try:
        with pytest.raises(NoAuthError):
            intruder.set("/config/users/bob", b"{}")
        with pytest.raises(NoAuthError):
            intruder.create("/config/users/mallory", b"{}")
        with pytest.raises(NoAuthError):
            intruder.create("/brokers/topics/evil", b"{}")
        for root in ("/kafka-acl", "/kafka-acl-extended/prefixed", "/kafka-acl-changes"):
            with pytest.raises(NoAuthError):  # made by the broker, before any authorizer, so nobody else can
                intruder.create(f"{root}/Topic", b"")
    finally:
        intruder.stop()
        intruder.close()
        secured.close()


def test_without_set_acl_znodes_stay_open(chroot_connect, raw):  # noqa: F811
    client = KafkaZkClient(chroot_connect, session_timeout_ms=4000, security=zk_security.ZkClientSecurity()).start()
    try:
        client.configs.set("users", "carol", {"SCRAM-SHA-256": "salt=1"})
        raw.set("/config/users/carol", b"{}")  # Kafka's default (zookeeper.set.acl=false): world-open
    finally:
        client.close()


def test_settings_from_broker_config(tmp_path):
    digest_file = tmp_path / "zk-digest"
    credentials = zk_security.generate_digest_file(digest_file)
    assert stat.S_IMODE(os.stat(digest_file).st_mode) == 0o600
    assert zk_security.generate_digest_file(digest_file) == credentials  # kept across starts
    assert credentials.startswith("raykafka:") and len(credentials) > 40

    config = BrokerConfig.from_sources({"zookeeper.set.acl": "true",
                                        "raykafka.zookeeper.digest.file": str(digest_file)})
    security = zk_security.from_config(config)
    assert security.set_acl and security.digest == credentials
    kwargs = security.kazoo_kwargs()
    assert kwargs["auth_data"] == [("digest", credentials)]
    assert [a.id.scheme for a in security.acl_for("/brokers/topics/t")] == ["auth", "world"]
    assert [a.id.scheme for a in security.acl_for("/config/users/alice")] == ["auth"]
    assert [a.id.scheme for a in security.acl_for("/config/brokers")] == ["auth"]

    # Kafka refuses set.acl without credentials to put in the ACLs.
    with pytest.raises(zk_security.ZkSecurityError, match="needs credentials"):
        zk_security.from_config(BrokerConfig.from_sources({"zookeeper.set.acl": "true"}))
    # TLS: PEM only, through kazoo's ssl arguments.
    tls = zk_security.from_config(BrokerConfig.from_sources({
        "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": "/ca.pem",
        "zookeeper.ssl.keystore.location": "/client.pem", "zookeeper.ssl.keystore.password": "pw",
        "zookeeper.set.acl": "true"}))
    assert tls.kazoo_kwargs() == {"use_ssl": True, "verify_certs": True, "check_hostname": True, "ca": "/ca.pem",
                                  # kazoo sends a client certificate only when given a keyfile too
                                  "certfile": "/client.pem", "keyfile": "/client.pem", "keyfile_password": "pw",
                                  "default_acl": zk_security.default_acl("/")}
    with pytest.raises(zk_security.ZkSecurityError, match="zookeeper.ssl.client.enable is false"):
        zk_security.from_config(BrokerConfig.from_sources({"zookeeper.ssl.truststore.location": "/ca.pem"}))


def test_process_settings_come_from_the_file_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.setattr(zk_security, "_installed", None)
    security = zk_security.ZkClientSecurity(set_acl=True, digest="raykafka:secret")
    path = zk_security.write_client_config(security, tmp_path / "client.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    monkeypatch.setenv(zk_security.ENV_VAR, path)
    assert zk_security.current() == security
    monkeypatch.setattr(zk_security, "_installed", None)
    monkeypatch.setenv(zk_security.ENV_VAR, str(tmp_path / "missing.json"))
    with pytest.raises(zk_security.ZkSecurityError):  # never an unauthenticated session instead
        zk_security.current()
    monkeypatch.setattr(zk_security, "_installed", None)
