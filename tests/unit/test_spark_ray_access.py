"""The Spark source's Ray-native path hands out file slices only for
partitions the broker says the reading principal may READ (pure logic; the
broker's answer is tested in tests/integration/test_acls.py), and
Ray-on-Spark's nodes all get the same Ray auth settings."""
from __future__ import annotations

import os
import stat
from collections import namedtuple

import pytest

from core.error_codes import ErrorCode
from spark import ray_auth
from spark.ray_path import RayPathUnavailable, authorize_slices
from spark.wire import KafkaError

Range = namedtuple("Range", "topic partition start end")


class Broker:
    def __init__(self, answers):
        self.answers = answers
        self.asked = None

    def read_access(self, positions):
        self.asked = dict(positions)
        return {tp: self.answers[tp[0]] for tp in positions if tp[0] in self.answers}


def test_slices_are_kept_only_where_the_broker_allows_read():
    ranges = [Range("ok", 0, 0, 10), Range("moved", 0, 0, 5), Range("kafka-path", 0, 0, 3), Range("end", 0, 4, 9)]
    slices = [[("f", 0, 1)], [("g", 0, 1)], None, [("h", 0, 1)]]
    broker = Broker({"ok": ErrorCode.none, "moved": ErrorCode.not_leader_or_follower,
                     "end": ErrorCode.offset_out_of_range})
    assert authorize_slices(broker, ranges, slices) == [[("f", 0, 1)], None, None, [("h", 0, 1)]]
    # Asked at each range's end (nothing to send back), only for planned slices.
    assert broker.asked == {("ok", 0): 10, ("moved", 0): 5, ("end", 0): 9}
    with pytest.raises(RayPathUnavailable, match="did not confirm READ on moved-0"):
        authorize_slices(broker, ranges, slices, required=True)


def test_a_principal_without_read_fails_the_query_as_over_the_kafka_path():
    broker = Broker({"secret": ErrorCode.topic_authorization_failed})
    with pytest.raises(KafkaError, match="TOPIC_AUTHORIZATION_FAILED") as caught:
        authorize_slices(broker, [Range("secret", 0, 0, 1)], [[("f", 0, 1)]])
    assert caught.value.code == ErrorCode.topic_authorization_failed
    nothing = Broker({})
    assert authorize_slices(nothing, [Range("t", 0, 0, 1)], [None]) == [None] and nothing.asked is None


def test_token_file_is_the_operators_or_a_new_private_one(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    path = ray_auth.token_file(tmp_path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and len(open(path).read()) == 64
    monkeypatch.setenv("RAY_AUTH_TOKEN", "operator-token")
    assert open(ray_auth.token_file(tmp_path)).read() == "operator-token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/etc/ray/token")
    assert ray_auth.token_file(tmp_path) == "/etc/ray/token"


def test_every_ray_on_spark_node_gets_the_mode_and_the_token(monkeypatch):
    from spark.ray_on_spark import LocalStartHook

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/tmp/rk-ros-x/ray-auth-token")
    env = LocalStartHook().custom_environment_variables()
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == "/tmp/rk-ros-x/ray-auth-token"
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    assert LocalStartHook().custom_environment_variables()["RAY_AUTH_MODE"] == "token"  # the default


# ---- finding the leader replicas: by name, else through the node's edge (issue 30) ------------------

class FakeRay:
    """The three calls _leader_replicas makes: get_actor by name, a pooled_replicas call, get."""

    def __init__(self, named: dict, pooled: dict):
        self.named, self.pooled = named, pooled
        self.edge_asked: list = []

    def get_actor(self, name, namespace):
        if name not in self.named:
            raise ValueError(f"Failed to look up actor {name}")
        return self.named[name]

    def get(self, value, timeout):
        return value

    def edge(self, broker_id):
        ray = self

        class Method:
            def remote(self, keys, wake):
                ray.edge_asked.append((broker_id, list(keys), wake))
                return [ray.pooled.get((t, p, broker_id)) for t, p in keys]

        return type("Edge", (), {"pooled_replicas": Method()})()


def test_leader_replicas_without_a_name_are_found_and_woken_through_their_edge():
    from core.naming import edge_actor_name, replica_actor_name
    from spark.ray_path import _leader_replicas

    ray = FakeRay({}, {("adopted", 0, 1): "spare-7", ("hibernated", 1, 2): "woken"})
    ray.named = {replica_actor_name("named", 0, 1): "named-0", edge_actor_name(1): ray.edge(1),
                 edge_actor_name(2): ray.edge(2)}
    found = _leader_replicas(ray, {("named", 0, 1), ("adopted", 0, 1), ("hibernated", 1, 2), ("gone", 0, 2),
                                   ("no-leader", 0, -1)}, "raykafka", 5)
    assert found == {("named", 0, 1): "named-0", ("adopted", 0, 1): "spare-7", ("hibernated", 1, 2): "woken"}
    # One call per broker for its unnamed replicas, asking it to wake the hibernated ones.
    assert sorted((b, sorted(k), w) for b, k, w in ray.edge_asked) == [(1, [("adopted", 0)], True),
                                                                        (2, [("gone", 0), ("hibernated", 1)], True)]
    # A broker without an edge: nothing found there, no error.
    assert _leader_replicas(ray, {("x", 0, 3)}, "raykafka", 5) == {}
