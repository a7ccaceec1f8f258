"""The controller actor: one candidate per node, one active at a time.

The logic is cluster/controller/ (Controller, with its partition operations);
this shell owns the ZooKeeper session and wires the Ray channel
(actors/controller_channel.py) and the internal topics' specs into it.
"""
from __future__ import annotations

import asyncio
from typing import Any

import ray

from actors.controller_channel import RayControllerChannel
from actors.group_coordinator import OFFSETS_TOPIC, offsets_topic_spec
from actors.transaction_coordinator import transaction_state_topic_spec
from cluster.controller.controller import Controller
from cluster.controller.internal_topics import InternalTopic
from cluster.transactions.state_manager import TRANSACTION_STATE_TOPIC
from core.config import BrokerConfig
from core.controller_messages import (AlterReassignmentsResult, ConfigChange, ConfigResource, ControlledShutdownResult,
                                      CreatePartitionsSpec, CreateTopicResult, CreateTopicSpec, DescribedConfigs,
                                      ElectLeadersResult, InternalTopicOutcome, ListReassignmentsResult,
                                      PartitionReassignment, TopicOutcome)
from metadata.kafka_zk import KafkaZkClient


class ControllerService(Controller):
    """The controller logic wired to Ray: its channel, and the internal topics' specs."""

    def __init__(self, broker_id: int, config: BrokerConfig, zk: KafkaZkClient, namespace: str,
                 zk_connect: str | None = None):
        channel = RayControllerChannel(namespace, config, zk_connect, config["raykafka.actor.call.timeout.ms"] / 1000)
        super().__init__(broker_id, config, zk, namespace, zk_connect, channel,
                         InternalTopic(OFFSETS_TOPIC, offsets_topic_spec),
                         InternalTopic(TRANSACTION_STATE_TOPIC, transaction_state_topic_spec))

    @property
    def replica_handles(self) -> dict:
        """The Ray channel's replica handles (for tests and tools that read them)."""
        return self.channel.replica_handles

    def start(self, self_handle: Any = None) -> None:
        # Sent with UpdateMetadata: edges call the controller back with it.
        self.channel.self_handle = self_handle
        super().start()


class ControllerActor:
    """Ray shell: owns the ZooKeeper session and hands everything to ControllerService."""

    def __init__(self, broker_id: int, config: dict, zk_connect: str, namespace: str):
        import logging as _logging

        _logging.basicConfig(level=_logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from core.memory_trace import start_if_asked

        start_if_asked("controller")  # debug only: RAYKAFKA_TRACEMALLOC_DIR
        self.broker_id = broker_id
        self.config = BrokerConfig(config)
        self.zk_connect = zk_connect
        self.namespace = namespace
        self.service: ControllerService | None = None

    async def start(self) -> None:
        zk = KafkaZkClient(self.zk_connect, session_timeout_ms=self.config["zookeeper.session.timeout.ms"])
        await asyncio.get_running_loop().run_in_executor(None, zk.start)
        self.service = ControllerService(self.broker_id, self.config, zk, self.namespace, self.zk_connect)
        if self.config["raykafka.metrics.enabled"]:
            # The balancer's gauges (core/metrics.py) are recorded in this process.
            from core.metrics import registry

            registry().start_reporting(self.config["raykafka.metrics.report.interval.ms"] / 1000)
        self.service.start(ray.get_runtime_context().current_actor)

    async def is_active(self) -> bool:
        return self.service is not None and self.service.is_active

    async def create_topics(self, specs: list[CreateTopicSpec], validate_only: bool,
                            timeout_ms: int | None = None) -> list[CreateTopicResult]:
        return await self.service.create_topics(specs, validate_only, timeout_ms)

    async def delete_topics(self, names: list[str]) -> list[TopicOutcome]:
        return await self.service.delete_topics(names)

    async def ensure_offsets_topic(self) -> InternalTopicOutcome:
        return await self.service.ensure_offsets_topic()

    async def ensure_transaction_state_topic(self) -> InternalTopicOutcome:
        return await self.service.ensure_transaction_state_topic()

    async def close_local_replicas(self, broker_id: int) -> int:
        return await self.service.close_local_replicas(broker_id)

    async def alter_topic_configs(self, changes: list[ConfigChange], validate_only: bool) -> list[TopicOutcome]:
        return await self.service.alter_topic_configs(changes, validate_only)

    async def describe_configs(self, resources: list[ConfigResource]) -> list[DescribedConfigs]:
        return await self.service.describe_configs(resources)

    async def create_partitions(self, specs: list[CreatePartitionsSpec], validate_only: bool) -> list[TopicOutcome]:
        return await self.service.create_partitions(specs, validate_only)

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None,
                            timeout_ms: int = 0) -> ElectLeadersResult:
        return await self.service.elect_leaders(election_type, partitions, timeout_ms)

    async def alter_partition_reassignments(self, reassignments: list[PartitionReassignment],
                                            timeout_ms: int = 0) -> AlterReassignmentsResult:
        return await self.service.alter_partition_reassignments(reassignments, timeout_ms)

    async def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None,
                                           timeout_ms: int = 0) -> ListReassignmentsResult:
        return await self.service.list_partition_reassignments(partitions, timeout_ms)

    async def controlled_shutdown(self, broker_id: int) -> ControlledShutdownResult:
        return await self.service.controlled_shutdown(broker_id)

    async def alter_broker_configs(self, changes: list[ConfigChange], validate_only: bool) -> list[TopicOutcome]:
        return await self.service.alter_broker_configs(changes, validate_only)

    async def status(self) -> dict:
        """For operators and tests: is this candidate active, and at which epoch."""
        s = self.service
        active = s is not None and s.is_active
        return {"broker_id": self.broker_id, "active": active, "epoch": s.ctx.epoch if active else None}

    async def park(self) -> None:
        """Never answers: standby candidates await it as a death watch on this actor."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.close()


ControllerActorRemote = ray.remote(ControllerActor)
