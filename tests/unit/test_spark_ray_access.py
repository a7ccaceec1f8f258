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
