"""The network edge actor: a Kafka listener inside an async Ray actor, one per
node. It registers the node's broker id in /brokers/ids once it accepts
connections, and takes UpdateMetadata from the controller.
"""
from __future__ import annotations

import asyncio
import logging

import ray

from core.config import BrokerConfig, parse_listener
from metadata.kafka_zk import KafkaZkClient
from net.edge_service import EdgeService
from net.metadata_cache import StaleControllerEpoch
from net.server import ConnectionLimits, KafkaServer

log = logging.getLogger("raykafka.edge")


class EdgeActor:
    def __init__(self, broker_id: int, config: dict, zk_connect: str, log_dirs: list[str], purgatory=None):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.broker_id = broker_id
        self.config = BrokerConfig(config)
        self.zk_connect = zk_connect
        self.log_dirs = log_dirs
        self.listener = parse_listener(self.config["listeners"])
        self.service: EdgeService | None = None
        self.server: KafkaServer | None = None
        self.zk: KafkaZkClient | None = None
        self.bound_port: int | None = None
        self.purgatory = purgatory

    async def start(self) -> tuple[str, int]:
        """Bind, then register the broker; returns the advertised (host, port)."""
        config = self.config
        advertised = parse_listener(config["advertised.listeners"], "advertised.listeners") \
            if config["advertised.listeners"] else None
        limits = ConnectionLimits(
            max_request_bytes=config["socket.request.max.bytes"],
            max_inflight_requests=config["queued.max.requests"],
            max_inflight_bytes=config["raykafka.edge.max.inflight.bytes"],
            max_connections=config["max.connections"],
            idle_timeout_s=config["connections.max.idle.ms"] / 1000,
            max_queued_bytes=config["queued.max.request.bytes"],
        )
        from core.shared_region import remove_orphans

        removed = remove_orphans()
        if removed:
            log.info("removed %d shared-memory regions left by crashed edges", removed)
        # The service needs the advertised port, known only after binding port 0.
        self.service = EdgeService(config, self.broker_id, "", 0)
        self.service.purgatory = self.purgatory
        self.server = KafkaServer(self.service.dispatch, limits)
        self.bound_port = await self.server.start(self.listener.host, self.listener.port)
        host = advertised.host if advertised else self.listener.host
        port = advertised.port if advertised and advertised.port else self.bound_port
        if host in ("0.0.0.0", "::", ""):
            import socket

            host = socket.getfqdn()
        self.service.advertised_host, self.service.advertised_port = host, port
        self.zk = KafkaZkClient(self.zk_connect, session_timeout_ms=config["zookeeper.session.timeout.ms"])
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.zk.start)
        extra = {"ray_node_id": ray.get_runtime_context().get_node_id(), "log_dirs": self.log_dirs}
        # broker.rack, else the Ray node's "rack" label: racks follow the machines Ray knows.
        rack = config["broker.rack"] or ray.get_runtime_context().get_node_labels().get("rack")
        await loop.run_in_executor(None, lambda: self.zk.register_broker(
            self.broker_id, host, port, rack=rack, extra=extra))
        log.info("broker %d listening on %s:%d, advertised as %s:%d", self.broker_id, self.listener.host,
                 self.bound_port, host, port)
        return host, port

    async def wait_ready(self, timeout_s: float) -> bool:
        """True once the controller has sent this edge its first metadata."""
        try:
            await asyncio.wait_for(self.service.metadata_ready.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def update_metadata(self, snapshot: dict, leader_handles: dict, controller_handle) -> int:
        try:
            self.service.apply_update_metadata(snapshot, leader_handles, controller_handle)
        except StaleControllerEpoch as exc:
            log.warning("%s", exc)
            return 11  # STALE_CONTROLLER_EPOCH
        return 0

    async def pid(self) -> int:
        import os

        return os.getpid()

    async def park(self) -> None:
        """Never returns: the controller holds this call open so Ray tells it
        within milliseconds when this edge (its node) dies."""
        await asyncio.Event().wait()

    async def live_broker_ids(self) -> list[int]:
        return sorted(self.service.metadata.brokers) if self.service is not None else []

    async def controlled_shutdown(self, max_retries: int, backoff_ms: int) -> dict:
        """Kafka's broker side of ControlledShutdown: ask the controller to move this
        broker's leaders and take it out of the ISRs, retried while it still leads
        partitions or the controller cannot be reached, at most max_retries + 1 times.
        -> {"attempts", "remaining": [(topic, p)], "error": str | None}"""
        from net.edge_service import ActorCallFailed

        attempt, remaining, error = 0, [], None
        while True:
            attempt += 1
            try:
                answer = await self.service.controller_call("controlled_shutdown", self.broker_id)
                error = None if answer["error_code"] == 0 else f"controller answered {answer['error_code']}"
                remaining = [tuple(tp) for tp in answer["remaining"]]
            except ActorCallFailed as exc:
                error = str(exc)
            if error is None and not remaining:
                break
            log.warning("controlled shutdown attempt %d of broker %d: %s", attempt, self.broker_id,
                        error or f"still leads {len(remaining)} partitions")
            if attempt > max_retries:
                break
            await asyncio.sleep(backoff_ms / 1000)
        log.info("controlled shutdown of broker %d %s after %d attempt(s)", self.broker_id,
                 "succeeded" if error is None and not remaining else "gave up", attempt)
        return {"attempts": attempt, "remaining": remaining, "error": error}

    async def stats(self) -> dict:
        return {"connections": self.server.connection_count, **self.server.stats,
                "metadata_version": self.service.metadata.version}

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self.zk is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.zk.close)
        if self.service is not None:
            self.service.close()


EdgeActorRemote = ray.remote(EdgeActor)
