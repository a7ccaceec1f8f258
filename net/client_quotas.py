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

Quota values come from ZooKeeper (cluster/quotas/zk_store.py): loaded on the
edge's first request and reloaded on every /config/changes notification, on
the ZooKeeper client's event thread, never on the event loop. Each edge
process measures its own connections, as each Kafka broker does.
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


class EdgeClientQuotas:
    """One edge process's quota values and measured rates."""

    def __init__(self, config, zk_connect: str | None, session_timeout_ms: int = 18000):
        samples, window_s = config["quota.window.num"], config["quota.window.size.seconds"]
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_s)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window_s, max_throttle_ms=window_s * 1000)
        # Replaced whole by the ZooKeeper thread; read on the event loop.
        self.configs = QuotaConfigs()
        self.zk_connect = zk_connect
        self.session_timeout_ms = session_timeout_ms
        self._zk = None
        self._lock = threading.Lock()
        self._watch = None

    def zk_client(self):
        """Blocking: the ZooKeeper session of this edge's quotas, opened on first use."""
        with self._lock:
            if self._zk is None:
                if not self.zk_connect:
                    raise RuntimeError("no ZooKeeper to keep client quotas in")
                from metadata.kafka_zk import KafkaZkClient

                zk = KafkaZkClient(self.zk_connect, session_timeout_ms=self.session_timeout_ms)
                zk.start()
                self._zk = zk
            return self._zk

    def start_watching(self) -> None:
        """Blocking: load the quotas and reload them on every change notification."""
        zk = self.zk_client()
        self._watch = zk.watch_config_changes(lambda _names: self.reload())

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
            if self._zk is not None:
                self._zk.close()
                self._zk = None


def quotas_of(edge) -> EdgeClientQuotas:
    """The edge's quotas, created (and their ZooKeeper watch started, off the loop) on first use."""
    quotas = getattr(edge, "client_quotas", None)
    if quotas is None:
        config = getattr(edge, "config", None)
        try:
            quotas = EdgeClientQuotas(config, getattr(edge, "zk_connect", None),
                                      config["zookeeper.session.timeout.ms"])
        except (TypeError, KeyError):  # an edge without a broker config (unit tests): no quotas
            quotas = EdgeClientQuotas(_DEFAULT_WINDOWS, None)
        edge.client_quotas = quotas
        if quotas.zk_connect:
            future = asyncio.get_running_loop().run_in_executor(None, quotas.start_watching)
            future.add_done_callback(_log_failure)
    return quotas


def _log_failure(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("client quotas are not watched: %s", future.exception())


def enforce(ctx, api_key: int, request, handling):
    """The awaitable of the response, throttled when some quota applies."""
    quotas = quotas_of(ctx.edge)
    if not quotas.configs or ctx.conn is None:
        return handling
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
