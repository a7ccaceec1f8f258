"""Topic configs and dynamic broker configs, a part of the controller:
AlterConfigs / IncrementalAlterConfigs / DescribeConfigs, /config/changes written
by anyone, and pushing changes to running replicas (log configs, KIP-73
replication throttle rates). Runs inside the controller's events."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from cluster.controller.channel import ReplicaKey
from cluster.log_config import log_config_for, throttled_replicas_for
from cluster.topic_admin import (TopicSpecError, apply_config_ops, describe_broker_config_entries,
                                 describe_topic_config_entries)
from core.config import BROKER_CONFIGS, ConfigError, TOPIC_CONFIGS
from core.controller_messages import (NOT_CONTROLLER_MESSAGE, ConfigChange, ConfigResource, DescribedConfigs,
                                      TopicOutcome)
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.controller")

# The broker configs that can change at runtime (Kafka's dynamic broker configs we support).
DYNAMIC_BROKER_CONFIGS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


class ConfigManager:
    """Holds the /config/brokers overrides; `c` is the controller (its context, ZooKeeper, channel)."""

    def __init__(self, controller: Any):
        self.c = controller
        # /config/brokers/<id or <default>> overrides (dynamic broker configs).
        self.broker_overrides: dict[str, dict[str, str]] = {}
        self.last_config_change: str | None = None

    # ---- topic configs: AlterConfigs / IncrementalAlterConfigs / DescribeConfigs ------------------
    async def alter_topic_configs(self, changes: list[ConfigChange], validate_only: bool) -> list[TopicOutcome]:
        """AlterConfigs (``replace``: the new full override set) or
        IncrementalAlterConfigs (``ops``) of topics."""
        async def event():
            if not self.c.is_active:
                return [TopicOutcome(c.name, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE) for c in changes]
            results = []
            for change in changes:
                name = change.name
                topic = self.c.ctx.topics.get(name)
                if topic is None or name in self.c.ctx.topics_being_deleted:
                    results.append(TopicOutcome(name, ErrorCode.unknown_topic_or_partition,
                                                f"Topic {name} does not exist."))
                    continue
                try:
                    new = apply_config_ops({} if change.replace is not None else topic.configs,
                                           change.operations())
                except TopicSpecError as exc:
                    results.append(TopicOutcome(name, ErrorCode(exc.error), str(exc)))
                    continue
                if not validate_only and new != topic.configs:
                    await self.c.azk.configs.set_topic(name, new)  # also writes /config/changes
                    topic.configs = new
                    await self.push_topic_config(name)
                results.append(TopicOutcome(name))
            return results

        event.__name__ = "alter_topic_configs"
        return await self.c.submit(event)

    async def push_topic_config(self, name: str) -> None:
        """Running replicas pick the change up at once (no restart)."""
        topic = self.c.ctx.topics[name]
        configs = topic.configs
        log_config = log_config_for(configs, self.c.config)
        min_isr = TOPIC_CONFIGS["min.insync.replicas"].parse(configs["min.insync.replicas"]) \
            if "min.insync.replicas" in configs else self.c.config["min.insync.replicas"]
        calls = []
        for (t, p), replicas in self.c.ctx.partitions_of(name):
            for broker_id in replicas:
                if broker_id in self.c.ctx.brokers:
                    key = ReplicaKey(t, p, broker_id)
                    calls.append((key, self.c.channel.update_log_config(key, log_config, min_isr)))
                    calls.append((key, self.c.channel.update_replication_throttle(
                        key, None, None, **throttled_replicas_for(configs))))
        await self.c._await_all(calls, "UpdateLogConfig")

    # ---- replication throttle rates: dynamic broker configs (KIP-73) ------------------------------
    def throttle_rates(self, broker_id: int) -> tuple[int, int]:
        """Effective rates for one broker: its /config/brokers/<id> entry, else
        /config/brokers/<default>, else the static configuration."""
        overrides = self.broker_overrides

        def rate(key: str) -> int:
            for entity in (str(broker_id), "<default>"):
                value = overrides.get(entity, {}).get(key)
                if value is not None:
                    return BROKER_CONFIGS[key].parse(value)
            return self.c.config[key]

        return rate("leader.replication.throttled.rate"), rate("follower.replication.throttled.rate")

    async def load_broker_overrides(self) -> None:
        entities = ["<default>", *self.c.ctx.brokers]
        found = await asyncio.gather(*(self.c.azk.configs.broker(e) for e in entities))  # pipelined
        self.broker_overrides = {str(e): c for e, c in zip(entities, found)}

    async def push_throttle_rates(self) -> None:
        calls = []
        for key in self.c.channel.replica_keys():
            if key.broker_id in self.c.ctx.brokers:
                leader_rate, follower_rate = self.throttle_rates(key.broker_id)
                calls.append((key, self.c.channel.update_replication_throttle(key, leader_rate, follower_rate)))
        await self.c._await_all(calls, "UpdateReplicationThrottle")

    async def alter_broker_configs(self, changes: list[ConfigChange], validate_only: bool) -> list[TopicOutcome]:
        """Dynamic broker configs (only the replication throttle rates are dynamic here);
        a change's name is "" (cluster default) or a broker id."""
        async def event():
            if not self.c.is_active:
                return [TopicOutcome(c.name, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE) for c in changes]
            results, touched = [], False
            for change in changes:
                name = change.name
                try:
                    entity = "<default>" if name in ("", "<default>") else int(name)
                except ValueError:
                    results.append(TopicOutcome(name, ErrorCode.invalid_request, f"Invalid broker id {name!r}"))
                    continue
                current = dict(self.broker_overrides.get(str(entity), {}))
                new = {} if change.replace is not None else dict(current)
                ops = change.operations()
                problem = None
                for key, op, value in ops:
                    if key not in DYNAMIC_BROKER_CONFIGS:
                        problem = (ErrorCode.invalid_request, f"Cannot update these configs dynamically: {key}")
                        break
                    if op == 0:  # SET
                        try:
                            BROKER_CONFIGS[key].parse(value)
                        except ConfigError as exc:
                            problem = (ErrorCode.invalid_config, str(exc))
                            break
                        new[key] = str(value)
                    elif op == 1:  # DELETE
                        new.pop(key, None)
                    else:
                        problem = (ErrorCode.invalid_config, f"{key}: APPEND/SUBTRACT apply to list configs only")
                        break
                if problem is not None:
                    results.append(TopicOutcome(name, *problem))
                    continue
                if not validate_only and new != current:
                    await self.c.azk.configs.set_broker(entity, new)
                    self.broker_overrides[str(entity)] = new
                    touched = True
                results.append(TopicOutcome(name))
            if touched:
                await self.push_throttle_rates()
            return results

        event.__name__ = "alter_broker_configs"
        return await self.c.submit(event)

    async def on_config_change(self) -> None:
        """/config/changes written by anyone (an admin tool writing ZooKeeper directly)."""
        if not self.c.is_active:
            return
        for name, body in await self.c.azk.configs.change_notifications():
            if self.last_config_change is not None and name <= self.last_config_change:
                continue
            self.last_config_change = name
            entity = (body or {}).get("entity_path", "")
            if entity.startswith("brokers/"):
                await self.load_broker_overrides()
                await self.push_throttle_rates()
            if entity.startswith("topics/"):
                topic = entity.split("/", 1)[1]
                if topic in self.c.ctx.topics:
                    fresh = await self.c.azk.configs.topic(topic)
                    if fresh != self.c.ctx.topics[topic].configs:
                        self.c.ctx.topics[topic].configs = fresh
                        await self.push_topic_config(topic)

    async def describe_configs(self, resources: list[ConfigResource]) -> list[DescribedConfigs]:
        """Topics (type 2) and brokers (4; 8 broker loggers, none here): entries or an error."""
        async def event():
            out = []
            for resource_type, name in resources:
                if resource_type == 2:
                    topic = self.c.ctx.topics.get(name) if self.c.ctx else None
                    if topic is None:
                        out.append(DescribedConfigs(name, ErrorCode.unknown_topic_or_partition,
                                                    f"Topic {name} does not exist."))
                        continue
                    out.append(DescribedConfigs(name, entries=describe_topic_config_entries(topic.configs,
                                                                                            self.c.config)))
                elif resource_type in (4, 8):  # BROKER, BROKER_LOGGER
                    out.append(DescribedConfigs(name, entries=describe_broker_config_entries(
                        self.c._described_broker_config(name)) if resource_type == 4 else ()))
                else:
                    out.append(DescribedConfigs(name, ErrorCode.invalid_request,
                                                f"Unsupported resource type {resource_type}"))
            return out

        event.__name__ = "describe_configs"
        return await self.c.submit(event)

