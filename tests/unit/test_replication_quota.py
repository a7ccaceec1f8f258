"""Replication quotas (KIP-73): Kafka's sampled rate with a fake clock, the
throttled-replica lists, the config keys, and the replica actor's leader and
follower roles driven without Ray (the actor class is a plain class)."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from actors.partition_leader import ReplicaActor
from cluster.log_config import log_config_for, throttled_replicas_for
from cluster.replication_quota import (
    ALL,
    UNLIMITED_RATE,
    ReplicaThrottle,
    ReplicationQuota,
    is_throttled,
    parse_throttled_replicas,
)
from core.config import BROKER_CONFIGS, INT64_MAX, TOPIC_CONFIGS, BrokerConfig, ConfigError, validate_topic_configs
from core.replica_messages import AppendRequest
from storage.log import LogConfig
from storage.records import SimpleRecord, build_batch


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


# ------------------------------------------------------------------------ config


def test_broker_config_keys_have_kafkas_defaults():
    defaults = BrokerConfig.from_sources()
    assert defaults["controlled.shutdown.max.retries"] == 3
    assert defaults["controlled.shutdown.retry.backoff.ms"] == 5000
    assert defaults["auto.leader.rebalance.enable"] is True
    assert defaults["leader.imbalance.per.broker.percentage"] == 10
    assert defaults["leader.imbalance.check.interval.seconds"] == 300
    assert defaults["leader.replication.throttled.rate"] == INT64_MAX
    assert defaults["follower.replication.throttled.rate"] == INT64_MAX
    assert defaults["replication.quota.window.num"] == 11
    assert defaults["replication.quota.window.size.seconds"] == 1
    for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
        assert BROKER_CONFIGS[key].parse("0") == 0  # Kafka: atLeast(0)
        with pytest.raises(ConfigError):
            BROKER_CONFIGS[key].parse("-1")
    for key in ("replication.quota.window.num", "replication.quota.window.size.seconds",
                "leader.imbalance.check.interval.seconds"):
        with pytest.raises(ConfigError):
            BROKER_CONFIGS[key].parse("0")


@pytest.mark.parametrize("key", ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"])
def test_throttled_replicas_topic_configs_are_validated(key):
    definition = TOPIC_CONFIGS[key]
    assert not definition.no_effect
    assert definition.parse("") == []
    assert definition.parse("*") == ["*"]
    assert definition.parse(" 0:1 , 12:340") == ["0:1", "12:340"]
    assert validate_topic_configs({key: "0:1,1:2"}) == {key: ["0:1", "1:2"]}
    for bad in ("0", "a:1", "0:1:2", "*,0:1", "0:-1", "0:1,x"):
        with pytest.raises(ConfigError, match="must be the literal"):
            definition.parse(bad)


def test_throttled_replicas_travel_beside_the_log_config():
    broker = BrokerConfig.from_sources()
    topic = {"leader.replication.throttled.replicas": " 0:1,1:2 ", "follower.replication.throttled.replicas": "*",
             "segment.bytes": "1048576"}
    assert throttled_replicas_for(topic) == {"leader_throttled_replicas": "0:1,1:2",
                                             "follower_throttled_replicas": "*"}
    assert throttled_replicas_for({}) == {"leader_throttled_replicas": "", "follower_throttled_replicas": ""}
    # The log config stays what storage takes.
    assert LogConfig(**log_config_for(topic, broker)).segment_bytes == 1048576


# ------------------------------------------------------------------ parsing lists


def test_parse_throttled_replicas():
    assert parse_throttled_replicas("") == frozenset()
    assert parse_throttled_replicas(None) == frozenset()
    assert parse_throttled_replicas("*") is ALL
    assert parse_throttled_replicas(["*"]) is ALL
    assert parse_throttled_replicas("0:1, 0:2,3:1") == {(0, 1), (0, 2), (3, 1)}
    assert is_throttled(ALL, 9, 9)
    listed = parse_throttled_replicas("0:1,3:1")
    assert is_throttled(listed, 3, 1)
    assert not is_throttled(listed, 1, 3)
    for bad in ("1", "x:1", "*,1:1", "1:1:1"):
        with pytest.raises(ValueError):
            parse_throttled_replicas(bad)


# ------------------------------------------------------------ the sampled rate


def test_rate_counts_the_first_window_as_a_whole_window():
    clock = FakeClock()
    quota = ReplicationQuota(1000, window_num=11, window_size_s=1, clock=clock)
    quota.record(500)
    # Elapsed 0 ms, but the span is never less than one window: 500 B/s, not infinite.
    assert quota.rate() == pytest.approx(500.0)
    assert not quota.is_exceeded()
    quota.record(500)
    assert quota.rate() == pytest.approx(1000.0)
    assert not quota.is_exceeded()  # at the bound is acceptable (Kafka: value <= bound)
    quota.record(1)
    assert quota.is_exceeded()


def test_rate_spreads_over_the_elapsed_time_and_samples_expire():
    clock = FakeClock()
    quota = ReplicationQuota(100, window_num=11, window_size_s=1, clock=clock)
    quota.record(1000)
    assert quota.rate() == pytest.approx(1000.0)
    assert quota.is_exceeded()
    # Kafka's throttle time: (rate - bound) / bound x span = 9 x 1 s.
    assert quota.throttle_time_ms() == 9000
    clock.advance(5000)
    assert quota.rate() == pytest.approx(200.0)
    assert quota.is_exceeded()
    clock.advance(5000)
    assert quota.rate() == pytest.approx(100.0)
    assert not quota.is_exceeded()
    assert quota.throttle_time_ms() == 0
    # window.num windows after its last event a sample is reset.
    clock.advance(1000)
    assert quota.rate() == 0.0


def test_rate_of_a_steady_stream_is_measured_over_the_retained_windows():
    clock = FakeClock()
    quota = ReplicationQuota(10_000, window_num=3, window_size_s=1, clock=clock)
    for _ in range(100):  # 100 bytes every 100 ms = 1000 B/s for 10 s
        quota.record(100)
        clock.advance(100)
    # 4 samples (window.num + 1) hold the last ~3-4 s; the rate stays ~1000 B/s.
    assert quota.rate() == pytest.approx(1000.0, rel=0.1)


def test_update_rate_keeps_the_samples():
    clock = FakeClock()
    quota = ReplicationQuota(UNLIMITED_RATE, clock=clock)
    quota.record(10_000)
    assert not quota.is_exceeded()
    assert quota.bytes_allowed_now() == UNLIMITED_RATE
    quota.update_rate(5000)
    assert quota.is_exceeded()
    quota.update_rate(20_000)
    assert not quota.is_exceeded()
    assert quota.bytes_allowed_now() == 10_000
    with pytest.raises(ValueError):
        quota.update_rate(-1)


def test_zero_rate_holds_back_until_the_samples_expire():
    clock = FakeClock()
    quota = ReplicationQuota(0, window_num=11, window_size_s=1, clock=clock)
    assert not quota.is_exceeded()  # nothing moved yet: 0 <= 0
    quota.record(1)
    assert quota.is_exceeded()
    assert quota.throttle_time_ms() == 11_000
    clock.advance(11_000)
    assert not quota.is_exceeded()


# -------------------------------------------------------------- both roles' rules


def test_leader_holds_back_only_lagging_followers_of_throttled_leader_replicas():
    clock = FakeClock()
    throttle = ReplicaThrottle(partition=0, broker_id=1, clock=clock)
    throttle.update(leader_rate=100, leader_throttled_replicas="0:1")
    assert not throttle.leader_should_hold_back(follower_in_isr=False)  # quota not exceeded yet
    throttle.record_leader(1000)
    assert throttle.leader_quota.is_exceeded()
    assert throttle.leader_should_hold_back(follower_in_isr=False)
    assert not throttle.leader_should_hold_back(follower_in_isr=True)  # never the ISR
    # The list names leader replicas by broker: partition 0 led by broker 2 is another replica.
    throttle.update(leader_throttled_replicas="0:2,1:1")
    assert not throttle.leader_should_hold_back(follower_in_isr=False)
    throttle.record_leader(10_000)  # not throttled: not counted
    throttle.update(leader_throttled_replicas="*")
    assert throttle.leader_quota.rate() == pytest.approx(1000.0)
    throttle.update(leader_rate=UNLIMITED_RATE)
    assert not throttle.leader_should_hold_back(follower_in_isr=False)


def test_follower_holds_back_until_caught_up():
    clock = FakeClock()
    throttle = ReplicaThrottle(partition=3, broker_id=2, clock=clock)
    throttle.update(follower_rate=100, follower_throttled_replicas="3:2")
    throttle.record_follower(300)
    assert throttle.follower_should_hold_back(caught_up=False)
    assert not throttle.follower_should_hold_back(caught_up=True)
    # Throttle time (300 - 100) / 100 x 1 s = 2000 ms, capped by the fetch backoff.
    assert throttle.follower_backoff_ms(1000) == 1000
    clock.advance(2000)
    assert throttle.follower_backoff_ms(5000) == 1000  # 150 B/s over 2 s: (150 - 100) / 100 x 2 s
    clock.advance(1000)
    assert throttle.follower_backoff_ms(5000) == 1  # 100 B/s: at the bound
    assert not throttle.follower_should_hold_back(caught_up=False)


def test_a_bad_update_changes_nothing():
    throttle = ReplicaThrottle(partition=0, broker_id=1)
    throttle.update(leader_rate=5, follower_rate=6, leader_throttled_replicas="0:1", follower_throttled_replicas="*")
    for bad in (dict(leader_rate=7, follower_throttled_replicas="0"),
                dict(leader_throttled_replicas="", follower_rate=-1)):
        with pytest.raises(ValueError):
            throttle.update(**bad)
    assert throttle.leader_quota.rate_bytes_per_s == 5 and throttle.follower_quota.rate_bytes_per_s == 6
    assert throttle.leader_throttled == {(0, 1)} and throttle.follower_throttled is ALL


# ------------------------------------------------- the replica actor, without Ray


def batch(tag: bytes) -> bytes:
    return build_batch([SimpleRecord(key=b"k", value=tag * 50)], compression=0)


REPLICA_CONFIG = {"replica.fetch.backoff.ms": 10, "replica.fetch.wait.max.ms": 50, "replica.fetch.max.bytes": 1,
                  "log.retention.check.interval.ms": 3_600_000}


def replica(tmp_path, broker_id: int, clock: FakeClock, **config) -> ReplicaActor:
    actor = ReplicaActor("t", 0, broker_id, [str(tmp_path / f"broker-{broker_id}")],
                         log_config_for({}, BrokerConfig.from_sources()), 1, zk_connect=None,
                         replica_config={**REPLICA_CONFIG, **config})
    actor._report_progress = lambda force=False: None  # no node purgatory to report to without Ray
    actor.replication_throttle = ReplicaThrottle(0, broker_id, clock=clock)
    return actor


def test_leader_replica_answers_a_throttled_lagging_follower_with_no_records(tmp_path):
    async def scenario():
        clock = FakeClock()
        leader = replica(tmp_path, 1, clock)
        assert await leader.become_leader(1, 0, [1], [1, 2]) == 0  # follower 2 is out of the ISR
        for tag in (b"a", b"b", b"c"):
            await leader.append(AppendRequest.from_sets([(batch(tag), 1, 1000)], 0))
        assert await leader.update_replication_throttle(100, None, "0:1", None) == 0
        first = await leader.fetch_for_follower(2, 0, -1, 0, 1, 0)
        served = len(first.records)
        assert served > 100
        assert leader.replication_throttle.leader_quota.rate() == pytest.approx(served)
        started = time.monotonic()
        held = await leader.fetch_for_follower(2, 1, 0, 0, 1, 100)
        assert held.error == 0 and held.records == b""
        assert time.monotonic() - started >= 0.09, "a held-back fetch waits like an empty one"
        # Time lifts the quota.
        clock.advance(11_000)
        assert (await leader.fetch_for_follower(2, 1, 0, 0, 1, 0)).records
        assert await leader.update_replication_throttle(None, None, "", None) == 0
        leader.replication_throttle.leader_quota.record(10_000)
        assert (await leader.fetch_for_follower(2, 2, 0, 0, 1, 0)).records, "unthrottled replicas never wait"
        assert await leader.update_replication_throttle(None, None, "0:x", None) == 40
        await leader.close()

    asyncio.run(scenario())


def test_leader_replica_never_holds_back_an_isr_follower(tmp_path):
    async def scenario():
        clock = FakeClock()
        leader = replica(tmp_path, 1, clock)
        assert await leader.become_leader(1, 0, [1, 2], [1, 2]) == 0
        await leader.append(AppendRequest.from_sets([(batch(b"a"), 1, 1000)], 0))
        assert await leader.update_replication_throttle(1, None, "*", None) == 0
        leader.replication_throttle.leader_quota.record(10_000)
        result = await leader.fetch_for_follower(2, 0, -1, 0, 1 << 20, 0)
        assert result.records
        await leader.close()

    asyncio.run(scenario())


async def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def test_throttled_follower_backs_off_while_its_quota_is_exceeded(tmp_path):
    async def scenario():
        clock = FakeClock()
        leader = replica(tmp_path, 1, clock)
        follower = replica(tmp_path, 2, clock)
        assert await leader.become_leader(1, 0, [1], [1, 2]) == 0
        for tag in (b"a", b"b", b"c"):
            await leader.append(AppendRequest.from_sets([(batch(tag), 1, 1000)], 0))
        assert await follower.update_replication_throttle(None, 50, None, "0:2") == 0
        # The leader replica's own methods, called the way a Ray handle's .remote would be.
        handle = SimpleNamespace(fetch_for_follower=SimpleNamespace(remote=leader.fetch_for_follower))
        assert await follower.become_follower(1, 1, 0, [1], [1, 2], leader_handle=handle) == 0
        # One batch per fetch (replica.fetch.max.bytes=1): the first puts the quota over 50 B/s.
        await wait_until(lambda: follower.log.log_end_offset == 1)
        await asyncio.sleep(0.3)
        assert follower.log.log_end_offset == 1, "a lagging throttled follower must not fetch over its quota"
        clock.advance(11_000)
        await wait_until(lambda: follower.log.log_end_offset == 2)
        await asyncio.sleep(0.3)
        assert follower.log.log_end_offset == 2
        # Lifting the throttle lets it catch up at once.
        assert await follower.update_replication_throttle(None, None, None, "") == 0
        await wait_until(lambda: follower.log.log_end_offset == 3)
        await follower.close()
        await leader.close()

    asyncio.run(scenario())


def test_replica_takes_its_starting_throttle_from_replica_config(tmp_path):
    actor = ReplicaActor("t", 0, 2, [str(tmp_path)], log_config_for({}, BrokerConfig.from_sources()), 1,
                         zk_connect=None, replica_config={
                             **REPLICA_CONFIG, "leader.replication.throttled.rate": 10,
                             "follower.replication.throttled.rate": 20, "replication.quota.window.num": 5,
                             "follower.replication.throttled.replicas": "0:2,1:2"})
    throttle = actor.replication_throttle
    assert throttle.leader_quota.rate_bytes_per_s == 10 and throttle.follower_quota.rate_bytes_per_s == 20
    assert throttle.leader_quota.window_num == 5
    assert throttle.follower_side_throttled and not throttle.leader_side_throttled
    asyncio.run(actor.close())
    # A malformed list leaves the replica unthrottled rather than failing its start.
    actor = ReplicaActor("t", 0, 2, [str(tmp_path)], log_config_for({}, BrokerConfig.from_sources()), 1,
                         zk_connect=None,
                         replica_config={**REPLICA_CONFIG, "follower.replication.throttled.replicas": "0"})
    assert not actor.replication_throttle.follower_side_throttled
    assert actor.replication_throttle.follower_quota.unlimited
    asyncio.run(actor.close())
