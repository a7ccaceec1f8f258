"""core/metrics.py and net/edge_metrics.py without Ray: local recording, the
hand-over to Ray's metric objects, what the edge counts from requests and
responses; the README and the Grafana dashboard name only metrics that exist."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from types import SimpleNamespace as NS

from core import metrics
from core.controller_messages import BrokerEndpoint, MetadataSnapshot, PartitionSnapshot, TopicSnapshot
from net.edge_metrics import EdgeMetrics, count_records, error_codes

REPO = Path(__file__).resolve().parents[2]


def batch(records: int, payload: bytes = b"x" * 10) -> bytes:
    """A v2 batch header (only the fields count_records reads matter) + payload."""
    header = bytearray(61)
    struct.pack_into(">q", header, 0, 0)
    struct.pack_into(">i", header, 8, 49 + len(payload))  # batchLength: from the leader epoch on
    header[16] = 2
    struct.pack_into(">i", header, 57, records)
    return bytes(header) + payload


def test_count_records_reads_every_batch_header():
    assert count_records(batch(3) + batch(5, b"") + batch(7, b"y" * 100)) == 15
    assert count_records(b"") == 0 and count_records(None) == 0
    assert count_records(batch(4) + b"\x00" * 20) == 4  # a trailing partial batch is not counted


class FakeRay:
    def __init__(self):
        self.calls = []

    def inc(self, value, tags):
        self.calls.append(("inc", value, tags))

    def set(self, value, tags):
        self.calls.append(("set", value, tags))

    def observe(self, value, tags):
        self.calls.append(("observe", value, tags))


def test_flush_hands_deltas_and_cumulative_buckets_to_ray(monkeypatch):
    registry = metrics.Registry()
    fakes = {}

    def ray_metric(definition, bounds=None):
        if definition.kind == "histogram":
            return fakes.setdefault(definition.name, (FakeRay(), FakeRay(), FakeRay()))
        return fakes.setdefault(definition.name, FakeRay())

    monkeypatch.setattr(registry, "_ray_metric", ray_metric)
    bytes_in = registry.counter("kafka_server_brokertopicmetrics_bytesin")
    bytes_in.inc(("1", "t"), 100)
    bytes_in.inc(("1", "t"), 50)
    total = registry.histogram("kafka_network_requestmetrics_totaltimems")
    for value in (0.1, 0.1, 3, 100000):
        total.observe(("1", "Produce"), value)
    registry.gauge("kafka_server_replicamanager_leadercount").set(("1",), 4)
    registry.flush()
    assert fakes["kafka_server_brokertopicmetrics_bytesin"].calls == [("inc", 150, {"broker": "1", "topic": "t"})]
    buckets, count, total_sum = fakes["kafka_network_requestmetrics_totaltimems"]
    by_le = {tags["le"]: value for _op, value, tags in buckets.calls}
    assert by_le["0.25"] == 2 and by_le["2.5"] == 2 and by_le["5.0"] == 3 and by_le["30000.0"] == 3
    assert by_le["+Inf"] == 4
    assert count.calls == [("set", 4, {"broker": "1", "request": "Produce"})]
    assert total_sum.calls[0][1] == 100003.2
    assert fakes["kafka_server_replicamanager_leadercount"].calls == [("set", 4, {"broker": "1"})]
    bytes_in.inc(("1", "t"), 25)
    total.observe(("1", "Produce"), 0.1)
    registry.flush()
    assert fakes["kafka_server_brokertopicmetrics_bytesin"].calls[-1] == ("inc", 25, {"broker": "1", "topic": "t"})
    assert count.calls[-1][1] == 5


def test_edge_counts_topics_from_produce_and_fetch(monkeypatch):
    monkeypatch.setattr(metrics, "_registry", metrics.Registry())
    edge = EdgeMetrics(7, {0: "produce", 1: "fetch", 11: "join_group"})
    meta = NS(topics_by_id={}, topics={"t": NS()})
    data = batch(5)
    # A topic that does not exist gets no series of its own (its name is client input).
    ghost = NS(topic_data=[NS(name="no-such-topic", partition_data=[NS(index=0, records=data)])])
    edge.response_ready(0, ghost, NS(responses=[NS(name="no-such-topic", partition_responses=[
        NS(index=0, error_code=3)])]), meta)
    assert metrics.registry().snapshot()["counters"]["kafka_server_brokertopicmetrics_failedproducerequests"] == \
        {("7", "unknown"): 1}
    monkeypatch.setattr(metrics, "_registry", metrics.Registry())
    edge = EdgeMetrics(7, {0: "produce", 1: "fetch", 11: "join_group"})
    request = NS(topic_data=[NS(name="t", partition_data=[NS(index=0, records=data), NS(index=1, records=data)])])
    response = NS(responses=[NS(name="t", partition_responses=[NS(index=0, error_code=0),
                                                                 NS(index=1, error_code=6)])])
    edge.response_ready(0, request, response, meta)
    snap = metrics.registry().snapshot()["counters"]
    assert snap["kafka_server_brokertopicmetrics_bytesin"] == {("7", "t"): len(data)}
    assert snap["kafka_server_brokertopicmetrics_messagesin"] == {("7", "t"): 5}
    assert snap["kafka_server_brokertopicmetrics_failedproducerequests"] == {("7", "t"): 1}
    assert snap["kafka_network_requestmetrics_errors"] == {("7", "Produce", "NOT_LEADER_OR_FOLLOWER"): 1}
    fetch = NS(error_code=0, responses=[NS(topic="t", partitions=[NS(error_code=0, records=data),
                                                                  NS(error_code=0, records=None)])])
    edge.response_ready(1, NS(), fetch, meta)
    assert metrics.registry().snapshot()["counters"]["kafka_server_brokertopicmetrics_bytesout"] == \
        {("7", "t"): len(data)}
    for generation in (1, 1, 2):  # two members get generation 1: one rebalance
        edge.response_ready(11, NS(group_id="g"), NS(error_code=0, generation_id=generation), meta)
    assert metrics.registry().snapshot()["counters"][
        "kafka_server_groupcoordinatormetrics_groupcompletedrebalance"] == {("7",): 2}


def test_error_codes_walk_nested_responses():
    from kio.schema.errors import ErrorCode
    from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse

    def result(name, code):
        return CreatableTopicResult(name=name, topic_id=None, error_code=code, error_message=None,
                                    num_partitions=1, replication_factor=1, configs=())

    import datetime

    response = CreateTopicsResponse(throttle_time=datetime.timedelta(0), topics=(
        result("a", ErrorCode.none), result("b", ErrorCode.topic_already_exists)))
    found = []
    error_codes(response, found)
    assert found == [ErrorCode.topic_already_exists]


def test_readme_and_dashboard_name_real_metrics():
    names = {m.name for m in metrics.CATALOGUE}
    readme = (REPO / "README.md").read_text()
    for m in metrics.CATALOGUE:
        assert f"ray_{m.name}" in readme, f"README does not list {m.name}"
    dashboard = json.loads((REPO / "deploy" / "grafana" / "raykafka.json").read_text())
    used = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            used |= set(re.findall(r"ray_(kafka_\w+?)(?:_total|_bucket|_count|_sum)?\b", target["expr"]))
    assert used and used <= names, used - names


def _info(leader, replicas, isr, epoch=1):
    from net.metadata_cache import PartitionInfo

    return PartitionInfo(leader=leader, leader_epoch=epoch, replicas=tuple(replicas), isr=tuple(isr))


def test_metadata_changes_count_isr_changes_and_elections(monkeypatch):
    monkeypatch.setattr(metrics, "_registry", metrics.Registry())
    edge = EdgeMetrics(1, {})
    before = {"t": NS(partitions={0: _info(1, [1, 2, 3], [1, 2, 3]), 1: _info(2, [2, 1], [2, 1])})}
    after = {"t": NS(partitions={0: _info(1, [1, 2, 3], [1, 3]), 1: _info(1, [2, 1], [1], epoch=2)})}
    edge.metadata_changed(before, after, controller_id=1, broker_id=1)
    counters = metrics.registry().snapshot()["counters"]
    assert counters["kafka_server_replicamanager_isrshrinks"] == {("1",): 1}  # p1's leader moved: not an ISR change here
    assert counters["kafka_controller_controllerstats_leaderelections"] == {("1",): 1}
    edge.metadata_changed(after, before, controller_id=2, broker_id=1)  # not the controller: no elections counted
    counters = metrics.registry().snapshot()["counters"]
    assert counters["kafka_server_replicamanager_isrexpands"] == {("1",): 1}
    assert counters["kafka_controller_controllerstats_leaderelections"] == {("1",): 1}


class _Remote:
    def __init__(self, value):
        self.value = value

    def remote(self, *args):
        async def answer():
            return self.value

        return answer()


def test_node_sample_reads_metadata_replicas_purgatory_and_groups(monkeypatch, tmp_path):
    import asyncio

    from cluster.groups.api import GroupListing
    from net.edge_metrics import NodeSampler
    from net.metadata_cache import MetadataCache

    monkeypatch.setattr(metrics, "_registry", metrics.Registry())
    cache = MetadataCache()
    cache.update(MetadataSnapshot(3, 1, "c", [BrokerEndpoint(1, "h", 1), BrokerEndpoint(2, "h", 2)], {
        "t": TopicSnapshot("00000000-0000-0000-0000-000000000001", {
            0: PartitionSnapshot(leader=1, leader_epoch=1, isr=[1], replicas=[1, 2]),
            1: PartitionSnapshot(leader=2, leader_epoch=1, isr=[2, 1], replicas=[2, 1]),
            2: PartitionSnapshot(leader=-1, leader_epoch=1, isr=[], replicas=[2])})}))
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(b"x" * 1000)
    leader = NS(state=_Remote({"log_start_offset": 5, "log_end_offset": 100}))

    class Calls:  # net/ports.ActorCalls over the stand-ins
        def call_via_runtime(self, ref, method, args, timeout_s):
            return getattr(ref, method).remote(*args)

        async def find(self, name, timeout_s):
            return None

        async def find_replicas(self, partitions, broker_id, timeout_s):
            return [None] * len(partitions)

    async def each(method, *args, timeout_s=None):
        assert method == "list_groups"
        return [(None, (0, [GroupListing("g", "consumer", "Stable")]))]

    service = NS(metadata=cache, calls=Calls(), coordinators=NS(each=each),
                 replicas=NS(leader_handle=lambda t, p: leader if (t, p) == ("t", 0) else None, pool=None,
                             purgatory=NS(stats=_Remote({"produce_delayed": 2, "fetch_delayed": 7}))))
    sampler = NodeSampler(service, 1, [str(tmp_path)], min_isr=2)
    sampler._handles[("t", 1, 1)] = NS(state=_Remote({"log_start_offset": 0, "log_end_offset": 40}))
    sampler._handles[("t", 1, 2)] = NS(state=_Remote({"log_start_offset": 0, "log_end_offset": 50}))
    asyncio.run(sampler.sample())
    gauges = metrics.registry().snapshot()["gauges"]
    one = ("1",)
    assert gauges["kafka_server_replicamanager_leadercount"] == {one: 1}
    assert gauges["kafka_server_replicamanager_partitioncount"] == {one: 2}
    assert gauges["kafka_server_replicamanager_underreplicatedpartitions"] == {one: 1}
    assert gauges["kafka_server_replicamanager_underminisrpartitioncount"] == {one: 1}
    assert gauges["kafka_controller_kafkacontroller_offlinepartitionscount"] == {one: 1}
    assert gauges["kafka_controller_kafkacontroller_activecontrollercount"] == {one: 1}
    assert gauges["kafka_controller_kafkacontroller_controllerepoch"] == {one: 3}
    assert gauges["kafka_log_log_size"] == {("1", "t", "0"): 1000}
    assert gauges["kafka_log_log_logstartoffset"] == {("1", "t", "0"): 5, ("1", "t", "1"): 0}
    assert gauges["kafka_server_fetcherlagmetrics_consumerlag"] == {("1", "t", "1"): 10}
    assert gauges["kafka_server_replicafetchermanager_maxlag"] == {one: 10}
    assert gauges["kafka_server_delayedoperationpurgatory_purgatorysize"] == {("1", "Produce"): 2, ("1", "Fetch"): 7}
    assert gauges["kafka_coordinator_group_groupmetadatamanager_numgroups"][("1", "Stable")] == 1


def _series(registry: metrics.Registry) -> int:
    return (sum(len(c.values) for c in registry.counters.values())
            + sum(len(g.values) for g in registry.gauges.values())
            + sum(len(h.counts) for h in registry.histograms.values()))


def test_series_stay_bounded_under_client_controlled_values(monkeypatch):
    """Issue 28 item 9: every tag set is a series kept for the life of the edge
    (and of Ray's metrics agent). Versions, error codes and topic names a
    client sends come from a bounded set of tag values, whatever it sends."""
    monkeypatch.setattr(metrics, "_registry", metrics.Registry())
    edge = EdgeMetrics(7, {0: "produce", 18: "api_versions"}, {0: (3, 11), 18: (0, 4)})
    meta = NS(topics_by_id={}, topics={"t": NS()})
    for version in [*range(5), *range(-(2 ** 15), 2 ** 15, 7)]:  # served, then probes answered UNSUPPORTED_VERSION
        edge.request_done(metrics_request(18, version), 0.0, 0.0)
    for n in range(3_000):  # produce to topics that do not exist; codes Kafka does not define
        request = NS(topic_data=[NS(name=f"fuzz-{n}", partition_data=[NS(index=n, records=None)])])
        edge.response_ready(0, request, NS(responses=[NS(name=f"fuzz-{n}", partition_responses=[
            NS(index=n, error_code=3)])]), meta)
        edge.response_ready(18, NS(), NS(error_code=1000 + n), meta)
    counters = metrics.registry().snapshot()["counters"]
    assert set(counters["kafka_network_requestmetrics_requests"]) == {
        ("7", "ApiVersions", str(v)) for v in range(5)} | {("7", "ApiVersions", "unsupported")}
    assert set(counters["kafka_server_brokertopicmetrics_failedproducerequests"]) == {("7", "unknown")}
    assert set(counters["kafka_network_requestmetrics_errors"]) == {
        ("7", "Produce", "UNKNOWN_TOPIC_OR_PARTITION"), ("7", "ApiVersions", "other")}
    assert len(edge._req_tags) <= 5 and len(edge._time_tags) == 1
    assert _series(metrics.registry()) < 50


def metrics_request(api_key: int, version: int):
    from net.edge_metrics import RequestTimes

    return RequestTimes(api_key, version, 0.0)


def test_each_metric_holds_at_most_max_series_then_overflows(monkeypatch):
    """The backstop: a metric given more distinct tag sets than
    MAX_SERIES_PER_METRIC counts the rest in one overflow series, and a
    flush hands Ray no more series than that."""
    monkeypatch.setattr(metrics, "MAX_SERIES_PER_METRIC", 100)
    registry = metrics.Registry()
    ray_series: dict[str, set] = {}

    class FakeRay:
        def __init__(self, name):
            self.name = name

        def inc(self, value, tags):
            ray_series.setdefault(self.name, set()).add(tuple(sorted(tags.items())))

        set = inc

    monkeypatch.setattr(registry, "_ray_metric", lambda d: FakeRay(d.name) if d.kind != "histogram" else (
        FakeRay(d.name + "_bucket"), FakeRay(d.name + "_count"), FakeRay(d.name + "_sum")))
    errors = registry.counter("kafka_network_requestmetrics_errors")
    lag = registry.gauge("kafka_server_fetcherlagmetrics_consumerlag")
    total = registry.histogram("kafka_network_requestmetrics_totaltimems")
    for n in range(1_000):
        errors.inc(("1", f"api{n}", f"E{n}"))
        lag.set(("1", f"t{n}", "0"), n)
        total.observe(("1", f"api{n}"), 1.0)
        if n % 250 == 0:
            registry.flush()
    registry.flush()
    assert len(errors.values) == 101 and errors.values[("1", "other", "other")] == 900
    assert sum(errors.values.values()) == 1_000  # nothing lost, only folded
    assert len(lag.values) == 101 and lag.values[("1", "other", "other")] == 999
    assert len(total.counts) == 101 and sum(total.counts[("1", "other")][:-1]) == 900
    assert len(ray_series["kafka_network_requestmetrics_errors"]) == 101
    assert len(ray_series["kafka_network_requestmetrics_totaltimems_count"]) == 101
    errors.inc(("1", "api0", "E0"))  # a series it already has still counts on its own
    assert errors.values[("1", "api0", "E0")] == 2
