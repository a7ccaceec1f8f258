"""`raykafka start` with its defaults, as a user runs it (no RAY_AUTH_MODE in
the environment, embedded ZooKeeper): the broker's Ray cluster refuses a
driver without its token, and an unauthenticated ZooKeeper session can
write none of the broker's metadata (README, Security)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from tests.broker_process import BrokerProcess

# A Ray driver that attaches to the cluster at argv[1] and lists the named actors
# (through them it could call every actor of the broker).
ATTACH = """
import sys
import ray
try:
    ray.init(address=sys.argv[1], namespace="raykafka", logging_level="ERROR", log_to_driver=False)
    print("ATTACHED", sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)), flush=True)
except Exception as exc:
    print("REFUSED", type(exc).__name__, exc, flush=True)
    sys.exit(3)
"""
NO_RAY_AUTH = {"RAY_AUTH_MODE": None, "RAY_AUTH_TOKEN": None, "RAY_AUTH_TOKEN_PATH": None}


@pytest.fixture(scope="module")
def default_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("default-security") / "data", env_changes=NO_RAY_AUTH)
    broker.start()
    yield broker
    code = broker.stop()
    assert code == 0, broker.log_tail()


def _attach(address: str, home, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in NO_RAY_AUTH}
    # An empty home: no ~/.ray/auth_token for Ray to find by itself.
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", **env_changes)
    return subprocess.run([sys.executable, "-c", ATTACH, address], env=env, capture_output=True, text=True,
                          timeout=150)


def test_a_driver_without_the_token_is_refused(default_broker, tmp_path):
    node = default_broker.nodes()[0]
    token_path = node["ray_auth_token_path"]
    assert token_path and token_path.startswith(str(default_broker.data_dir))
    assert stat.S_IMODE(os.stat(token_path).st_mode) == 0o600
    address = node["ray_address"]
    # A refused driver retries the GCS about once a second for 20 s before it
    # gives up (ray's NUM_REDIS_GET_RETRIES); 3 tries show the refusal as well.
    give_up = {"RAY_gcs_server_port_wait_time_s": "3"}
    with ThreadPoolExecutor(3) as pool:
        without = pool.submit(_attach, address, tmp_path, **give_up)
        wrong = pool.submit(_attach, address, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64, **give_up)
        right = pool.submit(_attach, address, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_path)
        for attempt in (without.result(), wrong.result()):
            assert attempt.returncode == 3, attempt.stdout + attempt.stderr
            assert "REFUSED" in attempt.stdout and "ATTACHED" not in attempt.stdout
            assert "InvalidAuthToken" in attempt.stderr, attempt.stderr[-2000:]
        # The same driver with the token gets in: the refusals were the token's doing.
        granted = right.result()
        assert granted.returncode == 0, granted.stdout + granted.stderr[-2000:]
        assert f"edge@{node['broker_id']}" in granted.stdout
    # And the broker itself works as usual.
    producer = Producer({"bootstrap.servers": default_broker.bootstrap})
    producer.produce("default-security", b"v")
    assert producer.flush(60) == 0


def test_an_unauthenticated_zookeeper_session_cannot_write_acls_or_credentials(default_broker):
    node = default_broker.nodes()[0]
    digest_file = node["zk_digest_file"]
    assert stat.S_IMODE(os.stat(digest_file).st_mode) == 0o600
    intruder = KazooClient(hosts=node["zk_connect"], timeout=10)
    intruder.start(timeout=15)
    try:
        assert json.loads(intruder.get("/brokers/ids/%d" % node["broker_id"])[0])["port"] == node["port"]
        attempts = {
            "create an ACL": lambda: intruder.create("/kafka-acl/Topic/orders",
                                                     b'{"version":1,"acls":[]}', makepath=True),
            "create a prefixed ACL": lambda: intruder.create("/kafka-acl-extended/prefixed/Topic",
                                                             b"", makepath=True),
            "notify an ACL change": lambda: intruder.create("/kafka-acl-changes/acl_changes_", b"TOPIC:orders",
                                                            sequence=True),
            "create SCRAM credentials": lambda: intruder.create("/config/users/mallory",
                                                                b'{"version":1,"config":{}}'),
            "list users": lambda: intruder.get_children("/config/users"),
            "change a topic": lambda: intruder.create("/brokers/topics/evil", b"{}"),
            "notify a config change": lambda: intruder.create("/config/changes/config_change_", b"{}",
                                                              sequence=True),
        }
        for what, attempt in attempts.items():
            with pytest.raises(NoAuthError):
                attempt()
                pytest.fail(f"an unauthenticated session could {what}")
        # With the broker's generated credentials, the same session could.
        intruder.add_auth("digest", open(digest_file).read().strip())
        assert intruder.get_children("/config/users") is not None
    finally:
        intruder.stop()
        intruder.close()
