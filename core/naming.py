"""Names of Ray actors, so any component can find another after a restart.

Broker ids survive node restarts (meta.properties); Ray node ids do not, so
every name is keyed by broker id.
"""
from __future__ import annotations

import re

TOPIC_NAME_MAX = 249
# Kafka's internal topics: group offsets and transaction state.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
# Kafka's Topic.isInternal: clients never append to them nor delete their records
# (only their coordinators write them), and only their own spec creates them.
INTERNAL_TOPICS = frozenset((OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC))
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")  # fullmatch: "$" would accept a trailing newline


def replica_actor_name(topic: str, partition: int, broker_id: int) -> str:
    return f"{topic}-{partition}@{broker_id}"


def edge_actor_name(broker_id: int) -> str:
    return f"edge@{broker_id}"


def edge_sibling_actor_name(broker_id: int, index: int) -> str:
    """Edge number `index` (1..raykafka.edge.processes-1) of a broker that runs
    several; edge 0 is the primary, named edge_actor_name(broker_id). The name
    must not end with `@<broker id>`: that suffix marks the replicas and
    coordinators the CLI closes per broker."""
    return f"edge@{broker_id}/{index}"


def controller_actor_name(broker_id: int) -> str:
    return f"controller@{broker_id}"


def purgatory_actor_name(broker_id: int) -> str:
    return f"purgatory@{broker_id}"


def group_coordinator_actor_name(partition: int, broker_id: int) -> str:
    """The group coordinator of __consumer_offsets partition `partition`
    on the broker that leads it."""
    return f"group-coordinator-{partition}@{broker_id}"


def transaction_coordinator_actor_name(partition: int, broker_id: int) -> str:
    """The transaction coordinator of __transaction_state partition
    `partition` on the broker that leads it."""
    return f"txn-coordinator-{partition}@{broker_id}"


def topic_name_error(name: str) -> str | None:
    """Kafka's topic-name rules (Topic.validate); None when legal."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > TOPIC_NAME_MAX:
        return f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"
