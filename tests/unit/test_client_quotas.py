"""Client quotas without Ray: precedence, Kafka's sampled rate and throttle
time, the ZooKeeper format, the DescribeClientQuotas filter and
AlterClientQuotas validation."""
import json
import types

import pytest

from cluster.quotas import zk_store
from cluster.quotas.model import (DEFAULT, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, ClientQuotaManager, QuotaConfigs,
                                  QuotaEntity, SampledRate, throttle_time_ms)
from metadata.zk.configs import ConfigsZk
from net.apis.n48_describe_client_quotas import ANY, FilterError, matching, parse_filter
from net.apis.n49_alter_client_quotas import AlterError, parse_entity, parse_ops

LEVELS = [
    (QuotaEntity("alice", "app"), ("alice", "app")),
    (QuotaEntity("alice", DEFAULT), ("alice", "app")),
    (QuotaEntity("alice", None), ("alice", "")),
    (QuotaEntity(DEFAULT, "app"), ("alice", "app")),
    (QuotaEntity(DEFAULT, DEFAULT), ("alice", "app")),
    (QuotaEntity(DEFAULT, None), ("alice", "")),
    (QuotaEntity(None, "app"), ("", "app")),
    (QuotaEntity(None, DEFAULT), ("", "app")),
]


def test_eight_levels_of_precedence():
    # With levels i.. present, level i wins, and its tags say whose rate is measured.
    for i, (entity, tags) in enumerate(LEVELS):
        configs = QuotaConfigs({e: {PRODUCER_BYTE_RATE: 1000 + j} for j, (e, _) in enumerate(LEVELS) if j >= i})
        assert configs.resolve(PRODUCER_BYTE_RATE, "alice", "app") == (tags, 1000 + i), entity
    assert QuotaConfigs().resolve(PRODUCER_BYTE_RATE, "alice", "app") == (("", "app"), None)
    # Another key of the same entity does not count.
    configs = QuotaConfigs({QuotaEntity("alice", "app"): {REQUEST_PERCENTAGE: 50.0},
                            QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 7}})
    assert configs.resolve(PRODUCER_BYTE_RATE, "alice", "app") == (("", "app"), 7)
    with pytest.raises(ValueError):
        QuotaEntity(None, None)


def test_sampled_rate_counts_at_least_one_window():
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(10_000, now_ms=0)
    # One whole window assumed although only 0 ms passed (Kafka's SimpleRate): 10000 / 1 s.
    assert rate.window_size_ms(0) == 1000
    assert rate.measure(0) == pytest.approx(10_000)
    assert rate.measure(4000) == pytest.approx(2500)
    for second in range(1, 20):
        rate.record(1000, now_ms=second * 1000)
    # Samples older than 11 windows are gone: 11 samples of 1000 over the 10.5 s they span.
    assert rate.measure(19_500) == pytest.approx(11_000 / 10.5)
    assert rate.measure(100_000) == 0 and rate.idle(100_000)


def test_a_client_at_full_speed_gets_at_most_the_quota_plus_one_window_over_12_s():
    # A client sending 64 KB requests as fast as its throttles let it (each
    # throttle honoured before the next request, as the edge now reads a
    # quota-bound connection), against 1 MiB/s: over 12 s from its first
    # byte it sends at most 1.2x the quota (issue 28).
    quota, request = 1 << 20, 64 * 1024
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=11, window_s=1)
    configs = QuotaConfigs({QuotaEntity(None, "slow"): {PRODUCER_BYTE_RATE: quota}})
    now, sent = 0, 0
    while now < 12_000:
        sent += request
        now += 1 + manager.record_and_throttle_ms(configs, "", "slow", request, now)
    assert sent <= 1.2 * quota * 12, sent / (quota * 12)
    assert sent >= 0.9 * quota * 12, sent / (quota * 12)


def test_each_of_n_edges_enforces_a_share_of_the_quota():
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=11, window_s=1, share=0.5)
    configs = QuotaConfigs({QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 1000}})
    assert manager.record_and_throttle_ms(configs, "u", "app", 500, now_ms=0) == 0
    # 1000/s measured against 500/s: (1000 - 500) / 500 * 1000 ms.
    assert manager.record_and_throttle_ms(configs, "u", "app", 500, now_ms=0) == 1000


def test_throttle_time_is_kafkas():
    assert throttle_time_ms(observed=2000, bound=1000, window_ms=10_000) == 10_000
    assert throttle_time_ms(observed=1100, bound=1000, window_ms=11_000) == 1100
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=11, window_s=1)
    configs = QuotaConfigs({QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 1000}})
    assert manager.record_and_throttle_ms(configs, "u", "app", 500, now_ms=0) == 0   # 500/s over 1 s
    # 1500 over 1 s = 1500/s: (1500 - 1000) / 1000 * 1000 ms.
    assert manager.record_and_throttle_ms(configs, "u", "app", 1000, now_ms=0) == 500
    # Another user with the same client id shares the client-id quota's rate.
    assert manager.record_and_throttle_ms(configs, "v", "app", 0, now_ms=0) == 500
    # No quota: never throttled, and no sensor kept for it (client ids are client input).
    assert manager.record_and_throttle_ms(configs, "u", "other", 10**9, now_ms=0) == 0
    assert ("", "other") not in manager._rates
    manager.unrecord(configs, "u", "app", 1000, now_ms=0)
    assert manager.record_and_throttle_ms(configs, "u", "app", 0, now_ms=0) == 0
    capped = ClientQuotaManager(REQUEST_PERCENTAGE, samples=11, window_s=1, max_throttle_ms=1000)
    configs = QuotaConfigs({QuotaEntity("u", None): {REQUEST_PERCENTAGE: 1.0}})
    assert capped.record_and_throttle_ms(configs, "u", "c", 100.0, now_ms=0) == 1000


def test_the_quota_watch_is_retried_until_zookeeper_answers():
    import asyncio

    from net.client_quotas import WATCH_RETRY_MIN_S, EdgeClientQuotas

    now = [0.0]
    unreachable = object()  # a client whose ZooKeeper is down: start_watching below fails twice
    quotas = EdgeClientQuotas({"quota.window.num": 11, "quota.window.size.seconds": 1}, unreachable,
                              clock=lambda: now[0])
    attempts = []

    def start_watching():
        attempts.append(now[0])
        if len(attempts) < 3:
            raise ConnectionError("ZooKeeper down")
        quotas.configs = QuotaConfigs({QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 1000}})

    quotas.start_watching = start_watching

    async def run():
        for step in range(40):
            quotas.ensure_watching()
            await asyncio.sleep(0)  # the executor's answer
            await asyncio.sleep(0.01)
            now[0] += 0.5
            if quotas.watching:
                return step

    asyncio.run(run())
    assert quotas.watching and quotas.configs and quotas.watch_failures == 2
    assert attempts[1] - attempts[0] >= WATCH_RETRY_MIN_S and attempts[2] - attempts[1] >= 2 * WATCH_RETRY_MIN_S


class FakeZk:
    """A KafkaZkClient whose configs family (the one zk_store uses) runs over
    a dict of znodes: the session primitives ConfigsZk calls, faked."""

    def __init__(self):
        self.nodes: dict[str, bytes] = {}
        self.sequence = 0
        self.configs = ConfigsZk(self)

    def get(self, path):
        return (self.nodes[path], None) if path in self.nodes else None

    def children(self, path):
        prefix = path + "/"
        names = {p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)}
        return sorted(names) if names or path in self.nodes else None

    def set_or_create(self, path, data):
        self.nodes[path] = data

    def create(self, path, data, sequence=False, makepath=False):
        name = f"{path}{self.sequence:010d}"
        self.sequence += 1
        self.nodes[name] = data
        return name


def test_zk_format_keeps_scram_credentials_and_announces():
    zk = FakeZk()
    zk.nodes["/config/users/alice"] = json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": "salt=x,stored_key=y,server_key=z,iterations=8192"}}).encode()
    zk_store.alter(zk, QuotaEntity("alice", None), {PRODUCER_BYTE_RATE: 1048576.0}, [])
    body = json.loads(zk.nodes["/config/users/alice"])
    assert body == {"version": 1, "config": {"SCRAM-SHA-256": "salt=x,stored_key=y,server_key=z,iterations=8192",
                                             "producer_byte_rate": "1048576"}}
    zk_store.alter(zk, QuotaEntity("bob smith", DEFAULT), {REQUEST_PERCENTAGE: 50}, [])
    zk_store.alter(zk, QuotaEntity(None, DEFAULT), {"consumer_byte_rate": 2048}, [])
    assert "/config/users/bob%20smith/clients/<default>" in zk.nodes
    changes = [json.loads(v) for k, v in sorted(zk.nodes.items()) if k.startswith("/config/changes/config_change_")]
    assert changes == [{"version": 2, "entity_path": "users/alice"},
                       {"version": 2, "entity_path": "users/bob%20smith/clients/<default>"},
                       {"version": 2, "entity_path": "clients/<default>"}]
    configs = zk_store.read_all(zk)
    assert configs.entries == {QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1048576.0},
                               QuotaEntity("bob smith", DEFAULT): {REQUEST_PERCENTAGE: 50.0},
                               QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 2048.0}}
    zk_store.alter(zk, QuotaEntity("alice", None), {}, [PRODUCER_BYTE_RATE])
    assert json.loads(zk.nodes["/config/users/alice"])["config"] == {
        "SCRAM-SHA-256": "salt=x,stored_key=y,server_key=z,iterations=8192"}
    # validate_only writes nothing.
    before = dict(zk.nodes)
    zk_store.alter(zk, QuotaEntity("carol", None), {PRODUCER_BYTE_RATE: 5}, [], validate_only=True)
    assert zk.nodes == before


def _component(entity_type, match_type, match=None):
    return types.SimpleNamespace(entity_type=entity_type, match_type=match_type, match=match)


def test_describe_filter():
    configs = QuotaConfigs({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1},
                            QuotaEntity("alice", "app"): {PRODUCER_BYTE_RATE: 2},
                            QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 3},
                            QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 4}})
    found = lambda wanted, strict: [(e.user, e.client_id) for e, _ in matching(configs, wanted, strict)]
    assert found(parse_filter([_component("user", 0, "alice")]), True) == [("alice", None)]
    assert found(parse_filter([_component("user", 0, "alice")]), False) == [("alice", None), ("alice", "app")]
    assert found(parse_filter([_component("client-id", 1)]), True) == [(None, DEFAULT)]
    assert found(parse_filter([_component("client-id", 2)]), True) == [(None, DEFAULT), (None, "app")]
    assert found(parse_filter([]), False) == [(None, DEFAULT), (None, "app"), ("alice", None), ("alice", "app")]
    assert parse_filter([_component("client-id", 2)]) == {"client-id": ANY}
    for components, message in [([_component("user", 2), _component("user", 1)], "Duplicate user"),
                                ([_component("", 2)], "empty filter"),
                                ([_component("user", 0)], "null match"),
                                ([_component("user", 1, "x")], "Unexpected match"),
                                ([_component("ip", 2), _component("user", 2)], "combination")]:
        with pytest.raises(FilterError, match=message):
            parse_filter(components)
    with pytest.raises(FilterError) as raised:
        parse_filter([_component("group", 2)])
    assert raised.value.error == 35  # UNSUPPORTED_VERSION


def _part(entity_type, name):
    return types.SimpleNamespace(entity_type=entity_type, entity_name=name)


def _op(key, value=0.0, remove=False):
    return types.SimpleNamespace(key=key, value=value, remove=remove)


def test_alter_validation():
    assert parse_entity([_part("user", "alice"), _part("client-id", None)]) == QuotaEntity("alice", DEFAULT)
    assert parse_entity([_part("client-id", "app")]) == QuotaEntity(None, "app")
    for parts, message in [([], "empty client quota entity"), ([_part("group", "g")], "Unhandled"),
                           ([_part("user", "")], "Empty user"), ([_part("ip", "1.2.3.4"), _part("user", "a")],
                                                                 "combination")]:
        with pytest.raises(AlterError, match=message):
            parse_entity(parts)
    assert parse_ops([_op(PRODUCER_BYTE_RATE, 1024.0), _op("consumer_byte_rate", remove=True)]) == (
        {PRODUCER_BYTE_RATE: 1024.0}, ["consumer_byte_rate"])
    with pytest.raises(AlterError, match="Invalid configuration key foo"):
        parse_ops([_op("foo", 1.0)])
    with pytest.raises(AlterError, match="must be a LONG value"):
        parse_ops([_op(PRODUCER_BYTE_RATE, 1.5)])
    with pytest.raises(AlterError, match="controller_mutation_rate .* not enforced"):
        parse_ops([_op("controller_mutation_rate", 10.0)])
    assert parse_ops([_op(REQUEST_PERCENTAGE, 1.5)]) == ({REQUEST_PERCENTAGE: 1.5}, [])


def test_enforcement_sets_throttle_time_and_mutes_the_connection():
    import asyncio
    import dataclasses
    import datetime

    from net.client_quotas import EdgeClientQuotas, enforce

    @dataclasses.dataclass(frozen=True)
    class Response:
        throttle_time: datetime.timedelta

    quotas = EdgeClientQuotas({"quota.window.num": 11, "quota.window.size.seconds": 1})
    edge = types.SimpleNamespace(client_quotas=quotas)
    conn = types.SimpleNamespace(principal="User:alice", muted_until=0.0, quota_bound=None)
    ctx = types.SimpleNamespace(edge=edge, conn=conn, header=types.SimpleNamespace(client_id="app"))
    part = types.SimpleNamespace(records=b"x" * 20_000)
    request = types.SimpleNamespace(topic_data=[types.SimpleNamespace(partition_data=[part])])

    async def handled():
        return Response(throttle_time=datetime.timedelta(0))

    async def run():
        # No quota anywhere: the handler's own awaitable, untouched.
        coroutine = handled()
        assert enforce(ctx, 0, request, coroutine) is coroutine
        await coroutine
        assert conn.quota_bound is False
        quotas.configs = QuotaConfigs({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1000}})
        first = await enforce(ctx, 0, request, handled())
        return first

    response = asyncio.run(run())
    # 20000 bytes over the 1 s minimum window: 20000/s against 1000/s -> (20000-1000)/1000 * 1 s.
    assert response.throttle_time == datetime.timedelta(milliseconds=19_000)
    assert conn.muted_until > 0
    assert conn.quota_bound is True, "a quota binds the connection: it is read one request at a time"
