"""A controller under test: its logic with a fake channel (no Ray) and, by
default, the in-memory ZooKeeper (metadata/zk/memory.py, no JVM; held to the
real server's behaviour by test_zk_contract.py) under our real ZooKeeper client,
so elections, fencing and the znodes it writes are the real ones. Brokers are
registrations written by a separate ZooKeeper session; a broker's death is its
edge's death watch firing, or its registration going away, as with Ray and
ZooKeeper."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Iterable

from cluster.controller.channel import ControllerChannel, LeaderAndIsr, ReplicaKey, SpecFor
from cluster.controller.controller import Controller
from cluster.controller.internal_topics import OFFSETS_TOPIC, InternalTopic
from core.config import BrokerConfig
from core.controller_messages import CreateTopicSpec
from metadata.kafka_zk import KafkaZkClient
from metadata.testing import ZkTarget


class FakeChannel(ControllerChannel):
    """Records every request; replicas answer 0 unless `outcomes` says otherwise."""

    def __init__(self, edges: Iterable[int] = ()):
        self.spec_for: SpecFor | None = None
        self.replicas: dict[tuple, Any] = {}  # key -> the ReplicaSpec it was created with
        self.removed: list[tuple] = []
        self.edges = set(edges)
        self.sent: list[tuple] = []  # (kind, ...) in the order sent
        self.outcomes: dict[tuple, Any] = {}  # (kind, key) -> 0, an error code or an exception
        self.edge_deaths: dict[int, asyncio.Future] = {}
        self.controller_deaths: dict[int, asyncio.Future] = {}
        self.forgotten_brokers: list[int] = []
        self.coordinator_rounds: list[list] = []
        self.closed: list[int] = []

    # ---- what tests read ---------------------------------------------------------------------------
    def of(self, kind: str) -> list[tuple]:
        return [s for s in self.sent if s[0] == kind]

    def leader_and_isr(self) -> list[tuple[tuple, LeaderAndIsr]]:
        """(replica, request) of every LeaderAndIsr, leaders' and followers'."""
        return [(s[1], s[2]) for s in self.sent if s[0] in ("become_leader", "become_follower")]

    def clear(self) -> None:
        self.sent.clear()

    def kill_edge(self, broker_id: int, edge_id: str = "dead-edge") -> None:
        """The broker's node dies: its edge's death watch fires."""
        self.edges.discard(broker_id)
        future = self.edge_deaths.pop(broker_id, None)
        if future is not None and not future.done():
            future.set_result(edge_id)

    # ---- ControllerChannel ---------------------------------------------------------------------------
    def attach(self, spec_for: SpecFor) -> None:
        self.spec_for = spec_for

    def has_replica(self, key) -> bool:
        return tuple(key) in self.replicas

    def replica_keys(self) -> list[ReplicaKey]:
        return [ReplicaKey(*k) for k in self.replicas]

    def ensure_replica(self, key) -> None:
        key = tuple(key)
        if key not in self.replicas:
            self.replicas[key] = self.spec_for(ReplicaKey(*key))

    def forget_replica(self, key) -> None:
        self.replicas.pop(tuple(key), None)

    def _answer(self, kind: str, key) -> Awaitable:
        outcome = self.outcomes.get((kind, tuple(key)), 0)

        async def answer():
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        return answer()

    def become_leader(self, key, request: LeaderAndIsr) -> Awaitable:
        self.ensure_replica(key)
        self.sent.append(("become_leader", tuple(key), request))
        return self._answer("become_leader", key)

    def become_follower(self, key, request: LeaderAndIsr, leader) -> Awaitable:
        self.ensure_replica(key)
        if leader is not None:
            self.ensure_replica(leader)
        self.sent.append(("become_follower", tuple(key), request, None if leader is None else tuple(leader)))
        return self._answer("become_follower", key)

    def stop_replica(self, key, controller_epoch: int, delete: bool) -> Awaitable:
        self.ensure_replica(key)
        self.sent.append(("stop_replica", tuple(key), controller_epoch, delete))
        return self._answer("stop_replica", key)

    def remove_replica(self, key) -> None:
        self.replicas.pop(tuple(key), None)
        self.removed.append(tuple(key))

    def update_log_config(self, key, log_config, min_insync_replicas: int) -> Awaitable:
        self.ensure_replica(key)
        self.sent.append(("update_log_config", tuple(key), log_config, min_insync_replicas))
        return self._answer("update_log_config", key)

    def update_replication_throttle(self, key, leader_rate, follower_rate, **lists) -> Awaitable:
        self.ensure_replica(key)
        self.sent.append(("update_replication_throttle", tuple(key), leader_rate, follower_rate, lists))
        return self._answer("update_replication_throttle", key)

    async def close_replicas(self, broker_id: int, timeout_s: float) -> int:
        self.closed.append(broker_id)
        return sum(1 for k in self.replicas if k[2] == broker_id)

    def has_edge(self, broker_id: int) -> bool:
        return broker_id in self.edges

    def update_metadata(self, broker_id: int, snapshot, leaders) -> Awaitable:
        leaders = [tuple(k) for k in leaders]
        for key in leaders:
            self.ensure_replica(key)
        self.sent.append(("update_metadata", broker_id, snapshot, leaders))
        return self._answer("update_metadata", (broker_id,))

    def forget_edge(self, broker_id: int) -> None:
        pass

    def forget_broker(self, broker_id: int) -> None:
        self.forgotten_brokers.append(broker_id)
        for key in [k for k in self.replicas if k[2] == broker_id]:
            del self.replicas[key]

    async def sync_coordinators(self, ctx, partitions) -> None:
        self.coordinator_rounds.append(list(partitions))

    def watch_edge(self, broker_id: int):
        if broker_id not in self.edges:
            return None
        future = asyncio.get_running_loop().create_future()
        self.edge_deaths[broker_id] = future
        return future

    def watch_controller(self, controller_id: int):
        future = asyncio.get_running_loop().create_future()
        self.controller_deaths[controller_id] = future
        return future


def config(**overrides: str) -> BrokerConfig:
    settings = {"auto.leader.rebalance.enable": "false"}
    settings.update(overrides)
    return BrokerConfig.from_sources(overrides=list(settings.items()))


async def eventually(check: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    """Poll `check` (ZooKeeper watches arrive on kazoo's threads) until it is truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def idle(service) -> None:
    """Every queued controller event has run (and whatever it queued in turn)."""
    for _ in range(3):
        await service.submit(_noop)


async def _noop() -> None:
    return None


def start_zk(target: ZkTarget) -> KafkaZkClient:
    return target.client(session_timeout_ms=6000, connection_timeout_ms=10_000).start()


def register(admin: KafkaZkClient, broker_id: int, **extra: Any) -> None:
    admin.brokers.register(broker_id, "127.0.0.1", 9000 + broker_id, extra={"log_dirs": ["/tmp/none"], **extra})


def topic_spec(name: str, assignments: dict[int, list[int]], **configs: str) -> CreateTopicSpec:
    return CreateTopicSpec(name, -1, -1, assignments, dict(configs))


def ControllerService(broker_id: int, config: BrokerConfig, zk: KafkaZkClient, namespace: str, zk_connect: str,
                      channel: ControllerChannel) -> Controller:
    """The controller logic as actors/controller.ControllerService wires it, with `channel`."""
    return Controller(broker_id, config, zk, namespace, zk_connect, channel,
                      InternalTopic(OFFSETS_TOPIC, _internal_spec(OFFSETS_TOPIC)),
                      InternalTopic("__transaction_state", _internal_spec("__transaction_state")))


def _internal_spec(name: str):
    def spec(config: BrokerConfig, live_brokers: int) -> CreateTopicSpec:
        return CreateTopicSpec(name, 1, 1, configs={"cleanup.policy": "compact"})

    return spec
