"""The internal topics the controller creates on first use (FindCoordinator):
their names and how their CreateTopics entry is built (``internal_topic_spec``
over each topic's ``InternalTopicConfigs``). actors/controller.py hands
``offsets_topic_spec`` and ``transaction_state_topic_spec`` in."""
from __future__ import annotations

import functools
import logging
from typing import Callable, NamedTuple, Optional

from core.config import BrokerConfig
from core.controller_messages import CreateTopicSpec
from core.naming import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

__all__ = ["OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC", "InternalTopic", "InternalTopicConfigs", "internal_topic_spec",
           "offsets_topic_spec", "transaction_state_topic_spec"]

log = logging.getLogger("raykafka.controller")

class InternalTopic(NamedTuple):
    name: str
    # (broker config, live brokers) -> a CreateTopics entry (replication capped at the live brokers)
    spec: Callable[[BrokerConfig, int], CreateTopicSpec]


class InternalTopicConfigs(NamedTuple):
    """Which broker configs an internal topic is created from."""
    name: str
    replication_factor: str  # the broker config keys of ...
    num_partitions: str
    segment_bytes: str
    min_insync_replicas: Optional[str]  # None: the topic keeps the broker's default
    # Topic configs besides cleanup.policy=compact, segment.bytes and min.insync.replicas.
    configs: tuple[tuple[str, str], ...]


# Kafka's offsets topic configs: compacted, producer compression.
OFFSETS_TOPIC_CONFIGS = InternalTopicConfigs(
    OFFSETS_TOPIC, "offsets.topic.replication.factor", "offsets.topic.num.partitions",
    "offsets.topic.segment.bytes", None, (("compression.type", "producer"),))
# Kafka's transactionTopicConfigs: compacted, uncompressed, min.insync.replicas, no unclean election.
TRANSACTION_STATE_TOPIC_CONFIGS = InternalTopicConfigs(
    TRANSACTION_STATE_TOPIC, "transaction.state.log.replication.factor", "transaction.state.log.num.partitions",
    "transaction.state.log.segment.bytes", "transaction.state.log.min.isr",
    (("compression.type", "uncompressed"), ("unclean.leader.election.enable", "false")))


def internal_topic_spec(topic: InternalTopicConfigs, config: BrokerConfig, live_brokers: int) -> CreateTopicSpec:
    """CreateTopics entry for ``topic``. The replication factor is capped at
    the live brokers (see offsets.topic.replication.factor in core/config.py),
    and min.insync.replicas at the replication factor."""
    wanted = config[topic.replication_factor]
    replication = max(1, min(wanted, live_brokers))
    if replication < wanted:
        log.warning("creating %s with replication factor %d: %s=%d but only %d live brokers", topic.name,
                    replication, topic.replication_factor, wanted, live_brokers)
    configs = {"cleanup.policy": "compact", "segment.bytes": str(config[topic.segment_bytes])}
    if topic.min_insync_replicas is not None:
        configs["min.insync.replicas"] = str(min(config[topic.min_insync_replicas], replication))
    configs.update(topic.configs)
    return CreateTopicSpec(topic.name, config[topic.num_partitions], replication, configs=configs)


offsets_topic_spec = functools.partial(internal_topic_spec, OFFSETS_TOPIC_CONFIGS)
transaction_state_topic_spec = functools.partial(internal_topic_spec, TRANSACTION_STATE_TOPIC_CONFIGS)
