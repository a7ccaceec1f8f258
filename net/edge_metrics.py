"""What the edge records (core/metrics.py has the names and the reporting).

Three sources, none of them a Ray call per request:
- each request, in the edge's server and dispatch: Kafka's RequestMetrics
  (rate, errors, total/queue/local/remote/response times) and, from the
  Produce and Fetch requests and responses the edge already holds,
  BrokerTopicMetrics (bytes and records in, bytes out, failed requests);
- each UpdateMetadata from the controller: ISR shrinks/expands of the
  partitions led here, leader elections (on the controller's broker);
- a sample every raykafka.metrics.report.interval.ms on the primary edge of
  a node: partition counts from its metadata, each hosted replica's state()
  (offsets; followers' lag behind their leader), segment sizes from the log
  dirs, the purgatory's sizes and the local group coordinators' groups.
"""
from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import logging
import os
import struct
import time
from typing import Any

from core import metrics as m
from core.error_codes import ErrorCode
from core.pooled_replica import PooledReplica

log = logging.getLogger("raykafka.metrics")

PRODUCE, FETCH, OFFSET_COMMIT, JOIN_GROUP, TXN_OFFSET_COMMIT = 0, 1, 8, 11, 28
_INT32 = struct.Struct(">i")
_RECORD_COUNT_AT = 57  # v2 batch header: ... attributes, lastOffsetDelta, timestamps, producer, records count
_BATCH_HEADER = 61


class RequestTimes:
    """Moments of one request (time.perf_counter seconds); the handler's task
    finds its own through CURRENT (asyncio copies the context into each task)."""

    __slots__ = ("api_key", "version", "received", "started", "handled", "remote")

    def __init__(self, api_key: int, version: int, received: float):
        self.api_key = api_key
        self.version = version
        self.received = received
        self.started = 0.0
        self.handled = 0.0
        self.remote = 0.0


CURRENT: contextvars.ContextVar[RequestTimes | None] = contextvars.ContextVar("raykafka_request", default=None)


def count_records(records) -> int:
    """Records in a v2 record set, from its batch headers (no decoding)."""
    if not records:
        return 0
    view = memoryview(records)
    total, position, end = 0, 0, len(view)
    while position + _BATCH_HEADER <= end:
        total += _INT32.unpack_from(view, position + _RECORD_COUNT_AT)[0]
        position += 12 + _INT32.unpack_from(view, position + 8)[0]
    return total


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_TUPLE_FIELDS: dict[type, tuple[str, ...]] = {}


def _nested_fields(cls: type) -> tuple[str, ...]:
    names = _TUPLE_FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls)
                      if "tuple[" in str(f.type) and "error_code" not in f.name)
        _TUPLE_FIELDS[cls] = names
    return names


def error_codes(obj: Any, out: list, depth: int = 0) -> None:
    """Every non-zero error_code in a kio response (Kafka's errorCounts)."""
    code = getattr(obj, "error_code", None)
    if code is not None and code != ErrorCode.none:
        out.append(code)
    if depth >= 3 or not dataclasses.is_dataclass(obj):
        return
    for name in _nested_fields(type(obj)):
        items = getattr(obj, name, None)
        if items and dataclasses.is_dataclass(items[0]):
            for item in items:
                error_codes(item, out, depth + 1)


def _error_name(code) -> str:
    """A code Kafka does not define (never ours to send, but a tag value
    must come from a bounded set) is counted as OTHER."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return m.OTHER


UNSUPPORTED_VERSION = "unsupported"


class EdgeMetrics:
    def __init__(self, broker_id: int, api_names: dict[int, str],
                 versions: dict[int, tuple[int, int]] | None = None):
        """`versions`: api key -> (min, max) served. A request's version is
        client input: one outside these (an ApiVersions probe, answered with
        UNSUPPORTED_VERSION) is tagged "unsupported", so a client walking
        the int16 range adds one series, not 65,536."""
        registry = self.registry = m.registry()
        self.broker = str(broker_id)
        self.api_names = {key: _camel(name) for key, name in api_names.items()}
        self.versions = versions
        c, h, g = registry.counter, registry.histogram, registry.gauge
        self.requests = c("kafka_network_requestmetrics_requests")
        self.errors = c("kafka_network_requestmetrics_errors")
        self.total_time = h("kafka_network_requestmetrics_totaltimems")
        self.queue_time = h("kafka_network_requestmetrics_requestqueuetimems")
        self.local_time = h("kafka_network_requestmetrics_localtimems")
        self.remote_time = h("kafka_network_requestmetrics_remotetimems")
        self.response_queue_time = h("kafka_network_requestmetrics_responsequeuetimems")
        self.send_time = h("kafka_network_requestmetrics_responsesendtimems")
        self.bytes_in = c("kafka_server_brokertopicmetrics_bytesin")
        self.bytes_out = c("kafka_server_brokertopicmetrics_bytesout")
        self.messages_in = c("kafka_server_brokertopicmetrics_messagesin")
        self.produce_requests = c("kafka_server_brokertopicmetrics_totalproducerequests")
        self.fetch_requests = c("kafka_server_brokertopicmetrics_totalfetchrequests")
        self.failed_produce = c("kafka_server_brokertopicmetrics_failedproducerequests")
        self.failed_fetch = c("kafka_server_brokertopicmetrics_failedfetchrequests")
        self.connections = g("kafka_server_socketservermetrics_connectioncount")
        self.connections_created = c("kafka_server_socketservermetrics_connectioncreation")
        self.connections_closed = c("kafka_server_socketservermetrics_connectionclose")
        self.isr_shrinks = c("kafka_server_replicamanager_isrshrinks")
        self.isr_expands = c("kafka_server_replicamanager_isrexpands")
        self.elections = c("kafka_controller_controllerstats_leaderelections")
        self.rebalances = c("kafka_server_groupcoordinatormetrics_groupcompletedrebalance")
        self.offset_commits = c("kafka_server_groupcoordinatormetrics_offsetcommit")
        self._generations: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._connection_count = 0
        self._req_tags: dict[tuple[int, int], tuple] = {}
        self._time_tags: dict[int, tuple] = {}

    # ---- connections ----------------------------------------------------------------------------
    def connection_opened(self) -> None:
        self._connection_count += 1
        self.connections_created.inc((self.broker,))
        self.connections.set((self.broker,), self._connection_count)

    def connection_closed(self) -> None:
        self._connection_count -= 1
        self.connections_closed.inc((self.broker,))
        self.connections.set((self.broker,), self._connection_count)

    # ---- each request ---------------------------------------------------------------------------
    def _api(self, api_key: int) -> str:
        """Unknown keys (closed before they get here) would be OTHER, not a series each."""
        return self.api_names.get(api_key) or m.OTHER

    def _version(self, api_key: int, version: int) -> str:
        if self.versions is not None:
            served = self.versions.get(api_key)
            if served is None or not served[0] <= version <= served[1]:
                return UNSUPPORTED_VERSION
        return str(version)

    def request_done(self, times: RequestTimes, write_started: float, written: float) -> None:
        """From the server, once the response is on the socket (or, acks=0, at once)."""
        key = (times.api_key, times.version)
        tags = self._req_tags.get(key)
        if tags is None:
            tags = (self.broker, self._api(times.api_key), self._version(times.api_key, times.version))
            if tags[2] != UNSUPPORTED_VERSION and times.api_key in self.api_names:
                self._req_tags[key] = tags  # cached for served (key, version) pairs only: bounded
        self.requests.inc(tags)
        time_tags = self._time_tags.get(times.api_key)
        if time_tags is None:
            time_tags = (self.broker, self._api(times.api_key))
            if times.api_key in self.api_names:
                self._time_tags[times.api_key] = time_tags
        self.total_time.observe(time_tags, (written - times.received) * 1000)
        if times.handled:
            self.queue_time.observe(time_tags, (times.started - times.received) * 1000)
            self.local_time.observe(time_tags, (times.handled - times.started - times.remote) * 1000)
            self.remote_time.observe(time_tags, times.remote * 1000)
            self.response_queue_time.observe(time_tags, (write_started - times.handled) * 1000)
            self.send_time.observe(time_tags, (written - write_started) * 1000)

    def response_ready(self, api_key: int, request: Any, response: Any, metadata) -> None:
        """From dispatch, with the handler's answer (None: acks=0): per-topic
        counts and error codes."""
        try:
            if api_key == PRODUCE:
                self._produce(request, response, metadata)
            elif api_key == FETCH:
                self._fetch(response, metadata)
            else:
                if response is not None:
                    found: list = []
                    error_codes(response, found)
                    self._count_errors(api_key, found)
                if api_key == JOIN_GROUP and response is not None:
                    self._join_group(request, response)
                elif api_key in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
                    committed = sum(len(t.partitions) for t in request.topics)
                    if committed:
                        self.offset_commits.inc((self.broker,), committed)
        except Exception:  # a metric must never fail a request
            log.exception("recording metrics of api %d failed", api_key)

    def _count_errors(self, api_key: int, codes: list) -> None:
        if codes:
            api = self._api(api_key)
            for code in codes:
                self.errors.inc((self.broker, api, _error_name(code)))

    @staticmethod
    def _topic(entry, metadata) -> str:
        """The topic's name as a metric tag: only topics that exist get a
        series of their own. A name is client input, and every series lives
        as long as the edge (and in Ray's metrics agent): a client naming
        random topics must not add series."""
        name = getattr(entry, "name", None) or getattr(entry, "topic", None)
        if name:
            return name if name in metadata.topics else "unknown"
        info = metadata.topics_by_id.get(getattr(entry, "topic_id", None))
        return info.name if info is not None else "unknown"

    def _produce(self, request, response, metadata) -> None:
        broker = self.broker
        sent = {}
        for topic in request.topic_data:
            name = self._topic(topic, metadata)
            for part in topic.partition_data:
                sent[(name, part.index)] = part.records
        if response is None:  # acks=0: taken as appended
            for (name, _index), records in sent.items():
                tags = (broker, name)
                self.produce_requests.inc(tags)
                if records:
                    self.bytes_in.inc(tags, len(records))
                    self.messages_in.inc(tags, count_records(records))
            return
        failed = []
        for topic in response.responses:
            name = self._topic(topic, metadata)
            tags = (broker, name)
            for part in topic.partition_responses:
                self.produce_requests.inc(tags)
                if part.error_code != ErrorCode.none:
                    self.failed_produce.inc(tags)
                    failed.append(part.error_code)
                    continue
                records = sent.get((name, part.index))
                if records:
                    self.bytes_in.inc(tags, len(records))
                    self.messages_in.inc(tags, count_records(records))
        self._count_errors(PRODUCE, failed)

    def _fetch(self, response, metadata) -> None:
        if response is None:
            return
        sizes = {}
        blobs = getattr(response, "blobs", None)
        if blobs is not None:  # SplicedResponse: file regions stand behind markers
            sizes = {marker: len(records) for marker, records in blobs}
            response = response.response
        broker = self.broker
        failed = []
        if response.error_code != ErrorCode.none:
            failed.append(response.error_code)
        for topic in response.responses:
            name = self._topic(topic, metadata)
            tags = (broker, name)
            out = 0
            for part in topic.partitions:
                self.fetch_requests.inc(tags)
                if part.error_code != ErrorCode.none:
                    self.failed_fetch.inc(tags)
                    failed.append(part.error_code)
                    continue
                records = part.records
                if records:
                    out += sizes.get(records, len(records)) if sizes else len(records)
            if out:
                self.bytes_out.inc(tags, out)
        self._count_errors(FETCH, failed)

    def _join_group(self, request, response) -> None:
        if response.error_code != ErrorCode.none:
            return
        group, generation = request.group_id, response.generation_id
        seen = self._generations
        if seen.get(group) != generation:  # each member gets the new generation: count it once
            self.rebalances.inc((self.broker,))
            seen[group] = generation
            seen.move_to_end(group)
            while len(seen) > 10_000:
                seen.popitem(last=False)

    # ---- each UpdateMetadata ----------------------------------------------------------------------
    def metadata_changed(self, before: dict, after: dict, controller_id: int, broker_id: int) -> None:
        """ISR changes of the partitions led here; leader elections, counted
        on the controller's broker only (every edge sees each election)."""
        shrinks = expands = elections = 0
        controller_here = controller_id == broker_id
        for name, topic in after.items():
            old_topic = before.get(name)
            if old_topic is None:
                continue
            for index, part in topic.partitions.items():
                old = old_topic.partitions.get(index)
                if old is None:
                    continue
                if controller_here and part.leader_epoch > old.leader_epoch and part.leader != old.leader:
                    elections += 1
                if part.leader == broker_id and old.leader == broker_id and part.isr != old.isr:
                    old_isr, new_isr = set(old.isr), set(part.isr)
                    shrinks += len(old_isr - new_isr)
                    expands += len(new_isr - old_isr)
        broker = (self.broker,)
        if shrinks:
            self.isr_shrinks.inc(broker, shrinks)
        if expands:
            self.isr_expands.inc(broker, expands)
        if elections:
            self.elections.inc(broker, elections)


class NodeSampler:
    """The primary edge's periodic look at its node (see the module docstring).
    Calls are bounded by a timeout; a replica that does not answer is skipped
    for this round."""

    CALL_TIMEOUT_S = 5.0

    def __init__(self, service, broker_id: int, log_dirs: list[str], min_isr: int):
        """service: the EdgeService (its replicas, coordinators, and ``calls``:
        net/ports.ActorCalls, how replicas of other brokers are found and asked)."""
        self.service = service
        self.calls = service.calls
        self.broker_id = broker_id
        self.broker = str(broker_id)
        self.log_dirs = log_dirs
        self.min_isr = min_isr
        self.registry = m.registry()
        self._handles: dict[tuple[str, int, int], Any] = {}
        self.rounds = 0

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.sample()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sampling metrics failed")

    def _local(self, topic: str, partition: int):
        """(True, handle) for a replica here that the edge itself routes to: its leader's
        handle, or a pooled one's live handle (None while it hibernates: a sample never wakes
        one); (False, None) for one looked up like another broker's (a follower not pooled)."""
        handle = self.service.replicas.leader_handle(topic, partition)
        pool = _replica_pool(self.service)
        if type(handle) is PooledReplica or (handle is None and pool is not None and pool.knows((topic, partition))):
            return True, (pool.live_handle((topic, partition)) if pool is not None else None)
        return handle is not None, handle

    async def _find_missing(self, keys: list[tuple[str, int, int]]) -> None:
        """Look up the replicas not known yet, by name or through their node's pool (an
        adopted replica has no name), one call per broker; never wakes one."""
        by_broker: dict[int, list[tuple[str, int, int]]] = {}
        for key in keys:
            if key not in self._handles and not (key[2] == self.broker_id and self._local(key[0], key[1])[0]):
                by_broker.setdefault(key[2], []).append(key)

        async def find(broker_id: int, wanted: list[tuple[str, int, int]]) -> None:
            found = await self.calls.find_replicas([(t, p) for t, p, _b in wanted], broker_id, self.CALL_TIMEOUT_S)
            for key, handle in zip(wanted, found):
                if handle is not None:
                    self._handles[key] = handle

        await asyncio.gather(*(find(b, w) for b, w in by_broker.items()))

    async def _handle(self, topic: str, partition: int, broker_id: int):
        if broker_id == self.broker_id:
            routed, handle = self._local(topic, partition)
            if routed:
                return handle
        return self._handles.get((topic, partition, broker_id))

    async def _state(self, topic: str, partition: int, broker_id: int) -> dict | None:
        handle = await self._handle(topic, partition, broker_id)
        if handle is None:
            return None
        try:
            return await self.calls.call_via_runtime(handle, "state", (), self.CALL_TIMEOUT_S)
        except Exception:
            self._handles.pop((topic, partition, broker_id), None)
            return None

    def _log_sizes(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        from core.naming import partition_dir_name

        found = {}
        for topic, partition in partitions:
            for log_dir in self.log_dirs:
                path = os.path.join(log_dir, partition_dir_name(topic, partition))
                try:
                    entries = [e for e in os.scandir(path) if e.name.endswith(".log")]
                except OSError:
                    continue
                size = 0
                for entry in entries:
                    try:
                        size += entry.stat().st_size
                    except OSError:
                        pass
                found[(topic, partition)] = (size, len(entries))
                break
        return found

    async def sample(self) -> None:
        service, me, broker = self.service, self.broker_id, self.broker
        metadata = service.metadata
        g = self.registry.gauge
        one = (broker,)
        hosted, led = [], []
        under_replicated = offline = 0
        partitions = 0
        for name, topic in metadata.topics.items():
            for index, part in topic.partitions.items():
                partitions += 1
                if part.leader < 0:
                    offline += 1
                if me in part.replicas:
                    hosted.append((name, index, part))
                    if part.leader == me:
                        led.append((name, index, part))
                        if len(part.isr) < len(part.replicas):
                            under_replicated += 1
        g("kafka_server_replicamanager_leadercount").set(one, len(led))
        pool = _replica_pool(service)
        if pool is not None:  # issue 30: live replicas are a cache over the hosted ones
            stats = pool.stats()
            g("raykafka_replica_pool_hosted").set(one, stats.hosted)
            g("raykafka_replica_pool_live").set(one, stats.live)
            g("raykafka_replica_pool_hibernated").set(one, stats.hibernated)
            g("raykafka_replica_pool_wake_p99_ms").set(one, stats.wake_p99_ms)
            wakeups = self.registry.counter("raykafka_replica_pool_wakeups")
            wakeups.values[one] = stats.wakeups
            hibernations = self.registry.counter("raykafka_replica_pool_hibernations")
            hibernations.values[one] = stats.hibernations
            # How wakes got their process: a spare adopting the partition, or a cold start.
            starts = self.registry.counter("raykafka_replica_pool_wake_starts")
            starts.values[(broker, "adopted")] = stats.adopted
            starts.values[(broker, "cold")] = stats.cold_starts
            # Wakes that found no idle replica to evict in time and started past the live limit.
            over = self.registry.counter("raykafka_replica_pool_wakes_over_limit")
            over.values[one] = stats.over_limit
            prestarts = self.registry.counter("raykafka_replica_pool_prestarts")
            prestarts.values[one] = stats.prestarts
        g("kafka_server_replicamanager_partitioncount").set(one, len(hosted))
        g("kafka_server_replicamanager_underreplicatedpartitions").set(one, under_replicated)
        controller_here = metadata.controller_id == me
        g("kafka_controller_kafkacontroller_activecontrollercount").set(one, 1 if controller_here else 0)
        g("kafka_controller_kafkacontroller_controllerepoch").set(one, metadata.controller_epoch)
        # Cluster-wide counts come from the controller's broker only, as in Kafka.
        cluster = g("kafka_controller_kafkacontroller_offlinepartitionscount")
        if controller_here:
            cluster.set(one, offline)
            g("kafka_controller_kafkacontroller_globalpartitioncount").set(one, partitions)
            g("kafka_controller_kafkacontroller_globaltopiccount").set(one, len(metadata.topics))
        else:
            cluster.replace({})
            g("kafka_controller_kafkacontroller_globalpartitioncount").replace({})
            g("kafka_controller_kafkacontroller_globaltopiccount").replace({})

        # Replica states: every replica hosted here, and the leaders of the followers here.
        wanted = {(n, i, me) for n, i, _p in hosted}
        wanted |= {(n, i, p.leader) for n, i, p in hosted if p.leader != me and p.leader >= 0}
        keys = sorted(wanted)
        await self._find_missing(keys)
        states = await asyncio.gather(*(self._state(*k) for k in keys))
        by_key = dict(zip(keys, states))
        loop = asyncio.get_running_loop()
        sizes = await loop.run_in_executor(None, self._log_sizes, [(n, i) for n, i, _p in hosted])
        size, segments, start, end, lag, urp = {}, {}, {}, {}, {}, {}
        under_min = at_min = 0
        max_lag = 0
        for name, index, part in hosted:
            tags = (broker, name, str(index))
            if (name, index) in sizes:
                size[tags], segments[tags] = sizes[(name, index)]
            state = by_key.get((name, index, me))
            if state is None:
                continue
            start[tags] = state["log_start_offset"]
            end[tags] = state["log_end_offset"]
            if part.leader == me:
                urp[tags] = 1 if len(part.isr) < len(part.replicas) else 0
                min_isr = state.get("min_insync_replicas", self.min_isr)
                if len(part.isr) < min_isr:
                    under_min += 1
                elif len(part.isr) == min_isr:
                    at_min += 1
            else:
                leader_state = by_key.get((name, index, part.leader))
                if leader_state is not None:
                    behind = max(0, leader_state["log_end_offset"] - state["log_end_offset"])
                    lag[tags] = behind
                    max_lag = max(max_lag, behind)
        g("kafka_log_log_size").replace(size)
        g("kafka_log_log_numlogsegments").replace(segments)
        g("kafka_log_log_logstartoffset").replace(start)
        g("kafka_log_log_logendoffset").replace(end)
        g("kafka_cluster_partition_underreplicated").replace(urp)
        g("kafka_server_fetcherlagmetrics_consumerlag").replace(lag)
        g("kafka_server_replicafetchermanager_maxlag").set(one, max_lag)
        g("kafka_server_replicamanager_underminisrpartitioncount").set(one, under_min)
        g("kafka_server_replicamanager_atminisrpartitioncount").set(one, at_min)

        # Purgatory sizes.
        purgatory = service.replicas.purgatory
        if purgatory is not None:
            try:
                stats = await self.calls.call_via_runtime(purgatory, "stats", (), self.CALL_TIMEOUT_S)
                g("kafka_server_delayedoperationpurgatory_purgatorysize").replace({
                    (broker, "Produce"): stats.get("produce_delayed", 0),
                    (broker, "Fetch"): stats.get("fetch_delayed", 0)})
            except Exception as exc:
                log.debug("purgatory stats: %r", exc)

        # Groups by state, from the coordinators of the offsets partitions led here.
        counts: dict[tuple, int] = collections.Counter()
        try:
            answers = await asyncio.wait_for(service.coordinators.each("list_groups", timeout_s=self.CALL_TIMEOUT_S),
                                             2 * self.CALL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a sample is skipped, never the edge's problem
            answers = []
        for failure, answer in answers:
            if failure is not None:
                continue
            _error, listings = answer
            for listing in listings:
                counts[(broker, _state_name(listing))] += 1
        for state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"):
            counts.setdefault((broker, state), 0)
        g("kafka_coordinator_group_groupmetadatamanager_numgroups").replace(dict(counts))
        self.rounds += 1


def _state_name(listing) -> str:
    state = getattr(listing, "group_state", None) or getattr(listing, "state", None)
    if state is None and isinstance(listing, (tuple, list)) and len(listing) >= 3:
        state = listing[2]
    return str(state or "Unknown")


def now() -> float:
    return time.perf_counter()


def _replica_pool(service):
    """The edge's replica pool (issue 30), or None (hibernation off)."""
    replicas = getattr(service, "replicas", None)
    return getattr(replicas, "pool", None)
