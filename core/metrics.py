"""The broker's metrics: Kafka's names, recorded locally, reported by Ray.

Recording stays off the hot path: a request adds to plain dicts in its own
process (a few hundred nanoseconds; no Ray call, no lock). A daemon thread
per process hands what changed to Ray's metrics API (`ray.util.metrics`)
every `raykafka.metrics.report.interval.ms`, and Ray's own reporting takes it
from there to the node's metrics agent, whose Prometheus endpoint serves it
(port `raykafka.metrics.port` on a cluster raykafka starts).

Names follow Kafka's JMX metrics the way Prometheus' JMX exporter renders
them: `kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t` ->
`kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`. Ray prefixes
every metric with `ray_` and appends `_total` to counters, so the endpoint
shows `ray_kafka_server_brokertopicmetrics_bytesin_total{topic="t",...}`.
CATALOGUE below is the one list of them (README "Metrics" is made from it).

A Kafka meter (XxxPerSec) is a counter here: Prometheus takes the rate
(`rate(...[1m])`). A Kafka timer (XxxTimeMs) is a histogram in
milliseconds, exported as the series a Prometheus histogram has
(`<name>_bucket{le=...}` cumulative, `<name>_count`, `<name>_sum`), each a
Ray gauge holding this process's running total. Why not a Ray Histogram:
it takes one observe() per event (~2.3 us each), so handing it a flush's
worth of requests would cost the reporting thread (and the edge's GIL)
time in proportion to the request rate; gauges cost the same per flush at
any rate. PromQL treats the series as it treats a histogram's
(`histogram_quantile(0.99, sum by (le) (rate(..._bucket[1m])))`); only the
endpoint's `# TYPE` line says gauge.
"""
from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Iterable, NamedTuple

log = logging.getLogger("raykafka.metrics")

# Milliseconds; Kafka's request timers span sub-millisecond to the 30 s timeout.
TIME_MS_BUCKETS = (0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

# Every tag set a metric is ever given is a series for the life of the
# process, here and in Ray's metrics agent (OpenCensus keeps each view's
# tag sets). Some tag values derive from client input, so each metric that
# records per event (inc / set / observe) holds at most this many series;
# a new tag set past it is counted in its metric's overflow series (the
# broker tag kept, every other tag OTHER). Recorders fold what they can
# themselves (unknown topics, unsupported versions); this is the backstop.
MAX_SERIES_PER_METRIC = 10_000
OTHER = "other"


def overflow_tags(tags: tuple) -> tuple:
    """Where a metric past MAX_SERIES_PER_METRIC counts a new tag set."""
    return tags[:1] + (OTHER,) * (len(tags) - 1)


class MetricDef(NamedTuple):
    name: str  # as handed to Ray (no "ray_" prefix, no "_total")
    kind: str  # counter | gauge | histogram
    tags: tuple[str, ...]
    kafka: str  # the Kafka metric it stands for
    doc: str


def _c(name, tags, kafka, doc):
    return MetricDef(name, "counter", tags, kafka, doc)


def _g(name, tags, kafka, doc):
    return MetricDef(name, "gauge", tags, kafka, doc)


def _h(name, tags, kafka, doc):
    return MetricDef(name, "histogram", tags, kafka, doc)


_BT = "kafka.server:type=BrokerTopicMetrics,name="
_RM = "kafka.network:type=RequestMetrics,name="
_REQ = ("broker", "request")
_RPM = "kafka.server:type=ReplicaManager,name="

CATALOGUE: tuple[MetricDef, ...] = (
    # per topic (the edge, at each Produce / Fetch response)
    _c("kafka_server_brokertopicmetrics_bytesin", ("broker", "topic"), _BT + "BytesInPerSec",
       "Bytes of record batches appended from producers"),
    _c("kafka_server_brokertopicmetrics_bytesout", ("broker", "topic"), _BT + "BytesOutPerSec",
       "Bytes of record batches sent to consumers"),
    _c("kafka_server_brokertopicmetrics_messagesin", ("broker", "topic"), _BT + "MessagesInPerSec",
       "Records appended from producers (the batch headers' record counts)"),
    _c("kafka_server_brokertopicmetrics_totalproducerequests", ("broker", "topic"),
       _BT + "TotalProduceRequestsPerSec", "Partition appends asked for"),
    _c("kafka_server_brokertopicmetrics_totalfetchrequests", ("broker", "topic"),
       _BT + "TotalFetchRequestsPerSec", "Partition reads asked for by consumers"),
    _c("kafka_server_brokertopicmetrics_failedproducerequests", ("broker", "topic"),
       _BT + "FailedProduceRequestsPerSec", "Partition appends answered with an error"),
    _c("kafka_server_brokertopicmetrics_failedfetchrequests", ("broker", "topic"),
       _BT + "FailedFetchRequestsPerSec", "Partition reads answered with an error"),
    # per API (the edge's server and dispatch)
    _c("kafka_network_requestmetrics_requests", ("broker", "request", "version"), _RM + "RequestsPerSec",
       "Requests answered (or, acks=0, taken)"),
    _c("kafka_network_requestmetrics_errors", ("broker", "request", "error"), _RM + "ErrorsPerSec",
       "Error codes in responses, one per partition/resource that carries one"),
    _h("kafka_network_requestmetrics_totaltimems", _REQ, _RM + "TotalTimeMs",
       "Request fully read -> response handed to the socket"),
    _h("kafka_network_requestmetrics_requestqueuetimems", _REQ, _RM + "RequestQueueTimeMs",
       "Request read -> its handler starts (the edge's event loop backlog)"),
    _h("kafka_network_requestmetrics_localtimems", _REQ, _RM + "LocalTimeMs",
       "Handler time, less the time parked in the purgatory"),
    _h("kafka_network_requestmetrics_remotetimems", _REQ, _RM + "RemoteTimeMs",
       "Time parked in the purgatory (acks=all, fetch.min.bytes / max.wait.ms)"),
    _h("kafka_network_requestmetrics_responsequeuetimems", _REQ, _RM + "ResponseQueueTimeMs",
       "Handler done -> response written (waiting behind earlier responses of its connection)"),
    _h("kafka_network_requestmetrics_responsesendtimems", _REQ, _RM + "ResponseSendTimeMs",
       "Writing the response (sendfile included)"),
    # connections (the edge's server)
    _g("kafka_server_socketservermetrics_connectioncount", ("broker",),
       "kafka.server:type=socket-server-metrics,name=connection-count", "Open client connections"),
    _c("kafka_server_socketservermetrics_connectioncreation", ("broker",),
       "kafka.server:type=socket-server-metrics,name=connection-creation-total", "Connections accepted"),
    _c("kafka_server_socketservermetrics_connectionclose", ("broker",),
       "kafka.server:type=socket-server-metrics,name=connection-close-total", "Connections closed"),
    # replica manager (the primary edge samples its node's replicas)
    _g("kafka_server_replicamanager_underreplicatedpartitions", ("broker",), _RPM + "UnderReplicatedPartitions",
       "Partitions led here whose ISR is smaller than their replica set"),
    _g("kafka_server_replicamanager_underminisrpartitioncount", ("broker",), _RPM + "UnderMinIsrPartitionCount",
       "Partitions led here whose ISR is smaller than min.insync.replicas"),
    _g("kafka_server_replicamanager_atminisrpartitioncount", ("broker",), _RPM + "AtMinIsrPartitionCount",
       "Partitions led here whose ISR size equals min.insync.replicas"),
    _g("kafka_server_replicamanager_leadercount", ("broker",), _RPM + "LeaderCount", "Partitions led here"),
    _g("kafka_server_replicamanager_partitioncount", ("broker",), _RPM + "PartitionCount",
       "Partition replicas hosted here"),
    # issue 30: live replica actors are a cache over the partitions hosted (cluster/replica_pool.py)
    _g("raykafka_replica_pool_hosted", ("broker",), "raykafka:type=ReplicaPool,name=Hosted",
       "Partition replicas in this node's pool, live or hibernated"),
    _g("raykafka_replica_pool_live", ("broker",), "raykafka:type=ReplicaPool,name=Live",
       "Pooled replicas with a live actor (bounded by raykafka.replicas.per.node.max)"),
    _g("raykafka_replica_pool_hibernated", ("broker",), "raykafka:type=ReplicaPool,name=Hibernated",
       "Pooled replicas hibernating (log on disk, no actor)"),
    _g("raykafka_replica_pool_wake_p99_ms", ("broker",), "raykafka:type=ReplicaPool,name=WakeTimeMs,p99",
       "99th percentile of the last 1,024 wakes' time (actor start and LeaderAndIsr), ms"),
    _c("raykafka_replica_pool_wakeups", ("broker",), "raykafka:type=ReplicaPool,name=WakeupsPerSec",
       "Hibernated replicas woken by a request"),
    _c("raykafka_replica_pool_wake_starts", ("broker", "how"), "raykafka:type=ReplicaPool,name=WakeStartsPerSec",
       "Wakes by how their process came: adopted (a started spare took the partition) or cold (a process start)"),
    _c("raykafka_replica_pool_wakes_over_limit", ("broker",), "raykafka:type=ReplicaPool,name=WakesOverLimitPerSec",
       "Wakes that found no idle replica to hibernate within the slot wait and started past the live limit"),
    _c("raykafka_replica_pool_prestarts", ("broker",), "raykafka:type=ReplicaPool,name=PrestartsPerSec",
       "Just-created partitions' leaders started into free live slots before their first request"),
    _c("raykafka_replica_pool_hibernations", ("broker",), "raykafka:type=ReplicaPool,name=HibernationsPerSec",
       "Idle replicas hibernated (idle for raykafka.replica.hibernate.ms, or evicted for the live limit)"),
    _c("kafka_server_replicamanager_isrshrinks", ("broker",), _RPM + "IsrShrinksPerSec",
       "Replicas removed from the ISR of partitions led here"),
    _c("kafka_server_replicamanager_isrexpands", ("broker",), _RPM + "IsrExpandsPerSec",
       "Replicas added to the ISR of partitions led here"),
    _g("kafka_server_replicafetchermanager_maxlag", ("broker",),
       "kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica",
       "Largest lag in records of a follower replica hosted here"),
    _g("kafka_server_fetcherlagmetrics_consumerlag", ("broker", "topic", "partition"),
       "kafka.server:type=FetcherLagMetrics,name=ConsumerLag", "Follower replica's lag behind its leader, records"),
    # controller (from the metadata the controller sends every edge)
    _g("kafka_controller_kafkacontroller_activecontrollercount", ("broker",),
       "kafka.controller:type=KafkaController,name=ActiveControllerCount", "1 on the controller's broker"),
    _g("kafka_controller_kafkacontroller_controllerepoch", ("broker",),
       "kafka.controller:type=KafkaController,name=ActiveControllerEpoch (ZooKeeper /controller_epoch)",
       "Epoch of the active controller"),
    _g("kafka_controller_kafkacontroller_offlinepartitionscount", ("broker",),
       "kafka.controller:type=KafkaController,name=OfflinePartitionsCount", "Partitions with no leader"),
    _g("kafka_controller_kafkacontroller_globalpartitioncount", ("broker",),
       "kafka.controller:type=KafkaController,name=GlobalPartitionCount", "Partitions in the cluster"),
    _g("kafka_controller_kafkacontroller_globaltopiccount", ("broker",),
       "kafka.controller:type=KafkaController,name=GlobalTopicCount", "Topics in the cluster"),
    _c("kafka_controller_controllerstats_leaderelections", ("broker",),
       "kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs (count)",
       "Leader changes (a partition's leader epoch moving), counted on the controller's broker"),
    # the balancer (issue 31; cluster/controller/balancer.py), on the active controller's broker
    _g("kafka_controller_balancer_movesinflight", ("broker",), "raykafka balancer (Cruise Control: ongoing-execution)",
       "Replica moves the balancer has in flight"),
    _g("kafka_controller_balancer_plannedmoves", ("broker",), "raykafka balancer (Cruise Control: num-proposals)",
       "Moves left in the balancer's plan, not started yet"),
    _g("kafka_controller_balancer_bytesleft", ("broker",), "raykafka balancer",
       "Bytes the moves in flight still have to copy"),
    _g("kafka_controller_balancer_imbalancescore", ("broker",), "raykafka balancer",
       "Largest relative deviation of a live node's replica or preferred-leader count from the mean"),
    # purgatory
    _g("kafka_server_delayedoperationpurgatory_purgatorysize", ("broker", "delayedOperation"),
       "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize",
       "Operations parked in the node's purgatory (Produce: acks=all; Fetch: long polls)"),
    # log, per partition replica hosted here
    _g("kafka_log_log_size", ("broker", "topic", "partition"), "kafka.log:type=Log,name=Size",
       "Bytes of the partition's segment files"),
    _g("kafka_log_log_numlogsegments", ("broker", "topic", "partition"), "kafka.log:type=Log,name=NumLogSegments",
       "Segment files"),
    _g("kafka_log_log_logstartoffset", ("broker", "topic", "partition"), "kafka.log:type=Log,name=LogStartOffset",
       "Log start offset"),
    _g("kafka_log_log_logendoffset", ("broker", "topic", "partition"), "kafka.log:type=Log,name=LogEndOffset",
       "Log end offset"),
    _g("kafka_cluster_partition_underreplicated", ("broker", "topic", "partition"),
       "kafka.cluster:type=Partition,name=UnderReplicated", "1 when a partition led here is under-replicated"),
    # groups (the coordinators of the __consumer_offsets partitions led here)
    _g("kafka_coordinator_group_groupmetadatamanager_numgroups", ("broker", "state"),
       "kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups<State>", "Groups by state"),
    _c("kafka_server_groupcoordinatormetrics_groupcompletedrebalance", ("broker",),
       "kafka.server:type=group-coordinator-metrics,name=group-completed-rebalance-count",
       "Rebalances completed (a group's generation moving in a JoinGroup answer)"),
    _c("kafka_server_groupcoordinatormetrics_offsetcommit", ("broker",),
       "kafka.server:type=group-coordinator-metrics,name=offset-commit-count",
       "Partition offsets committed (OffsetCommit, TxnOffsetCommit)"),
    # coordinators (the __consumer_offsets / __transaction_state partitions led here)
    _c("kafka_coordinator_skippedrecords", ("topic", "partition"),
       "(none: Kafka's coordinator fails the load)",
       "Records a coordinator could not parse while loading its partition, skipped (each also logged)"),
)

BY_NAME = {m.name: m for m in CATALOGUE}


class _Counter:
    __slots__ = ("definition", "values", "pushed")

    def __init__(self, definition: MetricDef):
        self.definition = definition
        self.values: dict[tuple, float] = {}
        self.pushed: dict[tuple, float] = {}

    def inc(self, tags: tuple, value: float = 1) -> None:
        values = self.values
        current = values.get(tags)
        if current is None:
            if len(values) >= MAX_SERIES_PER_METRIC:
                tags = overflow_tags(tags)
            current = values.get(tags, 0)
        values[tags] = current + value


class _Gauge:
    __slots__ = ("definition", "values")

    def __init__(self, definition: MetricDef):
        self.definition = definition
        self.values: dict[tuple, float] = {}

    def set(self, tags: tuple, value: float) -> None:
        values = self.values
        if tags not in values and len(values) >= MAX_SERIES_PER_METRIC:
            tags = overflow_tags(tags)
        values[tags] = value

    def replace(self, values: dict[tuple, float]) -> None:
        """A whole new sample (series no longer present stop being reported;
        Ray lets an unreported gauge series expire)."""
        self.values = values


class _Histogram:
    """Per tags: a count per bucket (the last one above every bound), then the sum."""

    __slots__ = ("definition", "bounds", "counts", "pushed", "le")

    def __init__(self, definition: MetricDef, bounds: tuple = TIME_MS_BUCKETS):
        self.definition = definition
        self.bounds = bounds
        self.counts: dict[tuple, list] = {}
        self.pushed: dict[tuple, list] = {}
        self.le = [str(float(b)) for b in bounds] + ["+Inf"]

    def observe(self, tags: tuple, value: float) -> None:
        counts = self.counts.get(tags)
        if counts is None:
            if len(self.counts) >= MAX_SERIES_PER_METRIC:
                tags = overflow_tags(tags)
                counts = self.counts.get(tags)
            if counts is None:
                counts = self.counts[tags] = [0] * (len(self.bounds) + 2)
        counts[bisect.bisect_left(self.bounds, value)] += 1
        counts[-1] += value


class Registry:
    """One per process. Metrics are looked up by their CATALOGUE name."""

    def __init__(self) -> None:
        self.counters: dict[str, _Counter] = {}
        self.gauges: dict[str, _Gauge] = {}
        self.histograms: dict[str, _Histogram] = {}
        for definition in CATALOGUE:
            if definition.kind == "counter":
                self.counters[definition.name] = _Counter(definition)
            elif definition.kind == "gauge":
                self.gauges[definition.name] = _Gauge(definition)
            else:
                self.histograms[definition.name] = _Histogram(definition)
        self._ray: dict[str, object] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.interval_s = 5.0
        self.flushes = 0

    def counter(self, name: str) -> _Counter:
        return self.counters[name]

    def gauge(self, name: str) -> _Gauge:
        return self.gauges[name]

    def histogram(self, name: str) -> _Histogram:
        return self.histograms[name]

    # ---- reporting --------------------------------------------------------------------------
    def start_reporting(self, interval_s: float) -> None:
        """Start this process's reporter thread (once; later calls only change the interval)."""
        self.interval_s = interval_s
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="raykafka-metrics", daemon=True)
        self._thread.start()

    def stop_reporting(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception:  # never take the process down for a metric
                log.exception("reporting metrics to Ray failed")

    def _ray_metric(self, definition: MetricDef, bounds=None):
        metric = self._ray.get(definition.name)
        if metric is None:
            from ray.util import metrics as ray_metrics

            if definition.kind == "counter":
                metric = ray_metrics.Counter(definition.name, definition.doc, tag_keys=definition.tags)
            elif definition.kind == "gauge":
                metric = ray_metrics.Gauge(definition.name, definition.doc, tag_keys=definition.tags)
            else:  # the three series of a Prometheus histogram (module docstring)
                metric = (
                    ray_metrics.Gauge(definition.name + "_bucket", definition.doc + " (cumulative buckets)",
                                      tag_keys=(*definition.tags, "le")),
                    ray_metrics.Gauge(definition.name + "_count", definition.doc + " (count)",
                                      tag_keys=definition.tags),
                    ray_metrics.Gauge(definition.name + "_sum", definition.doc + " (sum)", tag_keys=definition.tags),
                )
            self._ray[definition.name] = metric
        return metric

    def flush(self) -> None:
        """Hand everything that changed since the last flush to Ray (runs on
        the reporter thread; the recording side only ever adds keys, and a
        dict copied in one C call is consistent under the GIL)."""
        for counter in self.counters.values():
            values = dict(counter.values)
            if not values:
                continue
            ray_counter = None
            for tags, value in values.items():
                delta = value - counter.pushed.get(tags, 0)
                if delta > 0:
                    ray_counter = ray_counter or self._ray_metric(counter.definition)
                    ray_counter.inc(delta, _tag_dict(counter.definition.tags, tags))
                    counter.pushed[tags] = value
        for gauge in self.gauges.values():
            values = dict(gauge.values)
            if not values:
                continue
            ray_gauge = self._ray_metric(gauge.definition)
            for tags, value in values.items():
                ray_gauge.set(value, _tag_dict(gauge.definition.tags, tags))
        for histogram in self.histograms.values():
            counts = dict(histogram.counts)
            if not counts:
                continue
            buckets_gauge, count_gauge, sum_gauge = self._ray_metric(histogram.definition)
            for tags, values in counts.items():
                # Set every time, changed or not: the agent drops a gauge series
                # not refreshed for two report intervals.
                now = list(values)
                tag_dict = _tag_dict(histogram.definition.tags, tags)
                cumulative = 0
                for le, count in zip(histogram.le, now[:-1]):
                    cumulative += count
                    buckets_gauge.set(cumulative, {**tag_dict, "le": le})
                count_gauge.set(cumulative, tag_dict)
                sum_gauge.set(now[-1], tag_dict)
                histogram.pushed[tags] = now
        self.flushes += 1

    def snapshot(self) -> dict:
        """Local values, for tests and `stats()` calls."""
        return {
            "counters": {n: dict(c.values) for n, c in self.counters.items() if c.values},
            "gauges": {n: dict(g.values) for n, g in self.gauges.items() if g.values},
            "histograms": {n: {t: sum(v[:-1]) for t, v in h.counts.items()} for n, h in self.histograms.items()
                           if h.counts},
        }


def _tag_dict(keys: Iterable[str], values: tuple) -> dict[str, str]:
    return {k: str(v) for k, v in zip(keys, values)}


_registry: Registry | None = None
_lock = threading.Lock()


def registry() -> Registry:
    """This process's registry."""
    global _registry
    if _registry is None:
        with _lock:
            if _registry is None:
                _registry = Registry()
    return _registry


def now() -> float:
    return time.perf_counter()


def markdown_table() -> str:
    """The README's table: Prometheus name -> Kafka metric."""
    rows = ["| Prometheus (on Ray's endpoint) | type | labels | Kafka |", "|---|---|---|---|"]
    for m in CATALOGUE:
        shown = f"ray_{m.name}" + {"counter": "_total", "histogram": "_bucket/_count/_sum"}.get(m.kind, "")
        labels = ", ".join(t for t in m.tags)
        rows.append(f"| `{shown}` | {m.kind} | {labels} | `{m.kafka}` |")
    return "\n".join(rows)


def count_skipped_coordinator_record(topic: str, partition: int) -> None:
    """A coordinator skipped a record of its internal topic it could not parse.
    Coordinators report no other metric, so their process starts reporting at
    the first skip (rare: only a bug or a hand-written record leads here)."""
    import sys

    r = registry()
    r.counter("kafka_coordinator_skippedrecords").inc((topic, str(partition)))
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # in a Ray worker (not a unit test)
        r.start_reporting(r.interval_s)
