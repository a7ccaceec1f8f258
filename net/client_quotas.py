"""Client quota enforcement at the edge (KIP-13/124/219), as Kafka's KafkaApis does:

- Produce: the request's record bytes against producer_byte_rate;
- Fetch (consumers; followers pull by actor calls): the response's record
  bytes against consumer_byte_rate; a throttled fetch is answered without
  data (and its bytes taken back), as Kafka's getThrottledResponse;
- every other request but the exempt ones: its handling time against
  request_percentage (time in the purgatory excluded; capped at one window).

The response carries the larger throttle time in throttle_time_ms and the
connection reads no further request for that long (net/server.py), so the
client is slowed whether or not it honours the field.

Kafka handles one request per connection at a time, so a throttled client
has nothing else accepted meanwhile. This edge pipelines requests; a
connection that some quota bounds is read one request at a time instead
(``Connection.quota_bound``, net/server.py), so the throttle of one response
applies before the next request is read.

Quota values come from ZooKeeper (cluster/quotas/zk_store.py): loaded on the
edge's first request and reloaded on every /config/changes notification, on
the ZooKeeper client's event thread, never on the event loop. If ZooKeeper
cannot be reached, the load is retried on later requests (backing off up to
WATCH_RETRY_MAX_S) until it succeeds.

Each edge process measures its own connections, as each Kafka broker does.
With raykafka.edge.processes = N on a node, a client's connections may land
on any of the N edges, so each edge enforces 1/N of every quota: the node
never lets more than the quota through (a client whose connections all land
on one edge gets 1/N of it).

controller_mutation_rate (KIP-599) is not enforced: AlterClientQuotas
refuses it (net/apis/n49_alter_client_quotas.py).
"""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import threading
import time

from cluster.quotas import zk_store
from cluster.quotas.model import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, ClientQuotaManager,
                                  QuotaConfigs)
from net.edge_metrics import CURRENT as CURRENT_REQUEST
from net.file_region import SplicedResponse

log = logging.getLogger("raykafka.quotas")

PRODUCE, FETCH = 0, 1
# Not measured against request_percentage: the connection's set-up requests
# (Kafka exempts ApiVersions and the SASL exchange as well as cluster actions).
EXEMPT_API_KEYS = frozenset({17, 18, 36})
_DEFAULT_WINDOWS = {"quota.window.num": 11, "quota.window.size.seconds": 1}
# Retries of the first load of the quotas when ZooKeeper is unreachable.
WATCH_RETRY_MIN_S = 1.0
WATCH_RETRY_MAX_S = 30.0
_BOUND_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)


class EdgeClientQuotas:
    """One edge process's quota values and measured rates."""

    def __init__(self, config, zk=None, edge_processes: int = 1, clock=time.monotonic):
        """`zk`: the edge process's ZooKeeper client (shared: close() leaves it open); None
        keeps no quotas there (unit tests' edges)."""
        samples, window_s = config["quota.window.num"], config["quota.window.size.seconds"]
        share = 1.0 / max(1, edge_processes)
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_s, share=share)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_s, share=share)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window_s, max_throttle_ms=window_s * 1000,
                                          share=share)
        # Replaced whole by the ZooKeeper thread; read on the event loop.
        self.configs = QuotaConfigs()
        self._zk = zk
        self._lock = threading.Lock()
        self._watch = None
        # The watch: started once it succeeds; retried after _retry_at while not.
        self._clock = clock
        self.watching = False
        self._starting = False
        self._retry_at = 0.0
        self._retry_s = WATCH_RETRY_MIN_S
        self.watch_failures = 0

    def ensure_watching(self) -> None:
        """On the event loop: start (or, after a failure and its back-off,
        retry) loading and watching the quotas, off the loop."""
        if self.watching or self._starting or self._zk is None or self._clock() < self._retry_at:
            return
        self._starting = True
        future = asyncio.get_running_loop().run_in_executor(None, self.start_watching)
        future.add_done_callback(self._watch_started)

    def _watch_started(self, future: asyncio.Future) -> None:
        self._starting = False
        failure = None if future.cancelled() else future.exception()
        if future.cancelled() or failure is not None:
            self.watch_failures += 1
            self._retry_at = self._clock() + self._retry_s
            log.error("client quotas are not watched (retry in %.0f s): %s", self._retry_s, failure)
            self._retry_s = min(self._retry_s * 2, WATCH_RETRY_MAX_S)
            return
        self.watching = True

    def bounds(self, user: str, client_id: str) -> bool:
        """Does some quota bind this (user, client id)?"""
        configs = self.configs
        return any(configs.resolve(key, user, client_id)[1] is not None for key in _BOUND_KEYS)

    def zk_client(self):
        """The edge's ZooKeeper client the quotas are kept in."""
        if self._zk is None:
            raise RuntimeError("no ZooKeeper to keep client quotas in")
        return self._zk

    def start_watching(self) -> None:
        """Blocking: load the quotas and reload them on every change notification.
        Raises when ZooKeeper cannot be reached (the caller retries)."""
        zk = self.zk_client()
        if self._watch is None:
            self._watch = zk.configs.watch_changes(lambda _names: self.reload())
        # The watch's first call reloads but keeps the old values on a failure:
        # read once more here so that a failure reaches the caller.
        self.configs = zk_store.read_all(zk)

    def reload(self) -> None:
        """Blocking (ZooKeeper's event thread)."""
        try:
            self.configs = zk_store.read_all(self.zk_client())
        except Exception:
            log.exception("reading client quotas from ZooKeeper failed; keeping the ones known")

    def close(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.cancel()
                self._watch = None


def quotas_of(edge) -> EdgeClientQuotas:
    """The edge's quotas, created (and their ZooKeeper watch started, off the loop) on first use."""
    quotas = getattr(edge, "client_quotas", None)
    if quotas is None:
        config = getattr(edge, "config", None)
        try:
            quotas = EdgeClientQuotas(config, getattr(edge, "zk", None), config["raykafka.edge.processes"])
        except (TypeError, KeyError):  # an edge without a broker config (unit tests): no quotas
            quotas = EdgeClientQuotas(_DEFAULT_WINDOWS)
        edge.client_quotas = quotas
    if not quotas.watching:
        quotas.ensure_watching()
    return quotas


def enforce(ctx, api_key: int, request, handling):
    """The awaitable of the response, throttled when some quota applies.
    Called in arrival order, before the connection reads its next request:
    it marks a connection some quota binds, which is then read one request
    at a time."""
    quotas = quotas_of(ctx.edge)
    conn = ctx.conn
    if conn is None:
        return handling
    configs = quotas.configs
    if not configs:
        conn.quota_bound = False
        return handling
    conn.quota_bound = quotas.bounds(_user(conn.principal), getattr(ctx.header, "client_id", None) or "")
    return _enforced(quotas, ctx, api_key, request, handling)


def _user(principal: str | None) -> str:
    if not principal:
        return ""
    return principal.split(":", 1)[1] if ":" in principal else principal


async def _enforced(quotas: EdgeClientQuotas, ctx, api_key: int, request, handling):
    started = time.perf_counter()
    response = await handling
    handled = time.perf_counter()
    configs = quotas.configs
    user, client_id = _user(ctx.conn.principal), getattr(ctx.header, "client_id", None) or ""
    now_ms = int(time.monotonic() * 1000)
    throttle = 0
    if api_key == PRODUCE:
        sent = sum(len(part.records or b"") for topic in request.topic_data for part in topic.partition_data)
        throttle = quotas.produce.record_and_throttle_ms(configs, user, client_id, sent, now_ms)
    elif api_key == FETCH and response is not None:
        size = fetch_response_bytes(response)
        throttle = quotas.fetch.record_and_throttle_ms(configs, user, client_id, size, now_ms)
        if throttle > 0:
            quotas.fetch.unrecord(configs, user, client_id, size, now_ms)
            response = _without_data(response)
    if api_key not in EXEMPT_API_KEYS:
        times = CURRENT_REQUEST.get()
        spent_s = max(handled - started - (times.remote if times is not None else 0.0), 0.0)
        # Kafka records thread time as a percentage of one second: nanos * 100 / 1e9.
        throttle = max(throttle, quotas.request.record_and_throttle_ms(
            configs, user, client_id, spent_s * 100, now_ms))
    if throttle > 0:
        conn = ctx.conn
        conn.muted_until = max(conn.muted_until, time.monotonic() + throttle / 1000)
        response = with_throttle_time(response, throttle)
    return response


def fetch_window_bytes(ctx) -> int | None:
    """The most record bytes one Fetch may return to a consumer under a
    consumer_byte_rate quota: one window's worth of it (Kafka's
    maxQuotaWindowBytes, over the span this edge's rate is measured over at
    least), so a throttled consumer's fetches fit its quota; None if unbound."""
    quotas = getattr(ctx.edge, "client_quotas", None)
    conn = ctx.conn
    if quotas is None or conn is None or not quotas.configs:
        return None
    _, bound = quotas.configs.resolve(CONSUMER_BYTE_RATE, _user(conn.principal),
                                      getattr(ctx.header, "client_id", None) or "")
    if bound is None:
        return None
    manager = quotas.fetch
    return max(1, int(bound * manager.share * manager.window_ms / 1000))


def fetch_response_bytes(response) -> int:
    """The record bytes of a Fetch response (file-backed ones by their length)."""
    sizes = {}
    if type(response) is SplicedResponse:
        sizes = {marker: len(records) for marker, records in response.blobs}
        response = response.response
    total = 0
    for topic in response.responses:
        for part in topic.partitions:
            records = part.records
            if records:
                total += sizes.get(records, len(records)) if isinstance(records, bytes) else len(records)
    return total


def _without_data(response):
    if type(response) is SplicedResponse:
        response.close()
        response = response.response
    return dataclasses.replace(response, responses=())


def with_throttle_time(response, throttle_ms: int):
    if response is None:
        return None
    if type(response) is SplicedResponse:
        response.response = with_throttle_time(response.response, throttle_ms)
        return response
    if "throttle_time" not in getattr(type(response), "__dataclass_fields__", ()):
        return response
    return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
