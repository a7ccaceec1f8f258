"""Several listeners on one edge (issue 21): one KafkaServer per listener,
all sharing the edge's EdgeService.

- PLAINTEXT: the server as before (sendfile, no per-request work added).
- SSL: the server with an SSLContext (net/tls.py); the principal comes from the
  client certificate at connection time.
- SASL_PLAINTEXT / SASL_SSL: the server's dispatch is wrapped by
  net/sasl.gate, which refuses everything but ApiVersions and the SASL
  requests until the connection has authenticated.

Metadata, FindCoordinator and DescribeCluster answer with the endpoints of
the listener the client came in on, as Kafka does (`broker_address`). The
controller's metadata carries each broker's first listener (the
registration's host/port); the other listeners' endpoints come from the
brokers' /brokers/ids registrations ("endpoints"), which the edge watches
(`BrokerEndpoints`) when it has more than one listener.
"""
from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from core.security_config import ListenerSpec, advertised_specs, listener_specs, listener_value

log = logging.getLogger("raykafka.listeners")


class ListenerRuntime:
    """One listener of this edge: its spec, advertised endpoint, TLS context and SASL settings."""

    def __init__(self, config, spec: ListenerSpec, primary: bool, endpoints: "BrokerEndpoints",
                 scram_store=None):
        self.spec = spec
        self.primary = primary
        self.endpoints = endpoints
        self.ssl_context = None
        self.mapper = None
        self.sasl = None
        self.advertised: tuple[str, int] | None = None
        if spec.uses_tls:
            from net.tls import PrincipalMapper, server_context

            self.ssl_context = server_context(config, spec)
            self.mapper = PrincipalMapper(listener_value(config, spec, "ssl.principal.mapping.rules"))
        if spec.uses_sasl:
            from net.sasl import SaslListener

            self.sasl = SaslListener(config, spec, scram_store)

    def on_connect(self, conn) -> None:
        """Per connection (never per request): the principal, or SASL state to earn one."""
        if self.sasl is not None:
            from net.sasl import SaslState

            conn.principal = None
            conn.sasl = SaslState()
            # Until it authenticates, a connection may send only small requests (Kafka's
            # sasl.server.max.receive.size); SaslAuthenticate restores the full bound.
            conn.max_request_bytes = min(conn.max_request_bytes, self.sasl.max_receive_bytes)
        elif self.ssl_context is not None:
            from net.tls import NoMatchingRule, ssl_principal

            try:
                conn.principal = ssl_principal(conn.writer.get_extra_info("peercert"), self.mapper)
            except NoMatchingRule as exc:
                # Kafka fails the authentication: never User:ANONYMOUS for a
                # certificate it cannot name. No request of it is read.
                log.warning("authentication of %s on %s failed: %s", conn.peer, self.spec.name, exc)
                conn.principal = None
                conn.closed = True
                conn.writer.close()


class BrokerEndpoints:
    """broker id -> {listener name: (host, port)}, from /brokers/ids registrations."""

    def __init__(self):
        self.by_broker: dict[int, dict[str, tuple[str, int]]] = {}
        self._zk = None
        self._watch = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refreshing = False

    def set_own(self, broker_id: int, endpoints: dict[str, tuple[str, int]]) -> None:
        self.by_broker[broker_id] = dict(endpoints)

    def address(self, listener_name: str, broker_id: int, host: str, port: int) -> tuple[str, int]:
        found = self.by_broker.get(broker_id, {}).get(listener_name)
        if found is None:
            self._schedule_refresh()
            return host, port
        return found

    def start_watch(self, zk, loop: asyncio.AbstractEventLoop) -> None:
        """Blocking (run it in an executor); refreshes run on `loop`, the edge's. `zk`: the
        edge process's ZooKeeper client (shared: close() leaves it open)."""
        self._loop = loop
        self._zk = zk
        self._watch = self._zk.brokers.watch(lambda ids: self._schedule_refresh_threadsafe())

    def _schedule_refresh_threadsafe(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._schedule_refresh)

    def _schedule_refresh(self) -> None:
        if self._zk is None or self._refreshing:
            return
        self._refreshing = True
        asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        try:
            registrations = await asyncio.get_running_loop().run_in_executor(None, self._zk.brokers.all)
            for broker_id, body in registrations.items():
                self.by_broker[broker_id] = parse_registration_endpoints(body)
        except Exception as exc:  # a watch must never take the edge down
            log.warning("reading broker endpoints failed: %s", exc)
        finally:
            self._refreshing = False

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._zk = None  # the edge's client: the edge closes it


def parse_registration_endpoints(body: dict) -> dict[str, tuple[str, int]]:
    """{"endpoints": ["SSL://h:9093", ...]} -> {"SSL": ("h", 9093)}."""
    found = {}
    for endpoint in (body or {}).get("endpoints", []):
        name, _, address = endpoint.partition("://")
        host, _, port = address.rpartition(":")
        try:
            found[name.upper()] = (host.strip("[]"), int(port))
        except ValueError:
            continue
    return found


def build_listeners(config, scram_store) -> list[ListenerRuntime]:
    """Every listener of `listeners`, the first being the primary one (the
    registration's host/port, what the controller's metadata carries).
    scram_store: net/sasl.ScramStore (it connects to ZooKeeper on first use)."""
    endpoints = BrokerEndpoints()
    return [ListenerRuntime(config, spec, index == 0, endpoints, scram_store)
            for index, spec in enumerate(listener_specs(config))]


def resolve_advertised(config, runtimes: list[ListenerRuntime], bound_ports: list[int]) -> None:
    """Each listener's advertised (host, port): advertised.listeners' entry of
    that name, else its own host and bound port (a meta-address becomes the FQDN)."""
    advertised = advertised_specs(config)
    for runtime, bound in zip(runtimes, bound_ports):
        entry = advertised.get(runtime.spec.name)
        host = entry.host if entry else runtime.spec.host
        port = entry.port if entry and entry.port else bound
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        runtime.advertised = (host, port)


def broker_address(ctx, broker) -> tuple[str, int]:
    """(host, port) of `broker` on the listener the request came in on."""
    conn = ctx.conn
    listener = getattr(conn, "listener", None) if conn is not None else None
    if listener is None or listener.primary:
        return broker.host, broker.port
    return listener.endpoints.address(listener.spec.name, broker.broker_id, broker.host, broker.port)


def registration_fields(runtimes: list[ListenerRuntime]) -> dict[str, Any]:
    """The "endpoints" and "listener_security_protocol_map" of /brokers/ids/<id>."""
    return {
        "endpoints": [f"{r.spec.name}://{r.advertised[0]}:{r.advertised[1]}" for r in runtimes],
        "listener_security_protocol_map": {r.spec.name: r.spec.protocol for r in runtimes},
    }


def listener_dispatch(runtime: ListenerRuntime, dispatch):
    """The server's dispatch for a listener: unchanged for PLAINTEXT and SSL
    (no per-request work added), gated until authentication for SASL."""
    if runtime.sasl is None:
        return dispatch
    from net.sasl import gate

    return gate(dispatch)
