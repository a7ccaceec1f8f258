"""Kafka's throttled-replica list syntax, for core.config (validating topic
configs) and cluster.replication_quota (in every replica actor). Its own
module so a replica does not import core.config and its config tables
(~1.6 MiB PSS per replica process, issue 18)."""
from __future__ import annotations

import re

INT64_MAX = 2**63 - 1

_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def validate_throttled_replicas(items: list[str]) -> None:
    """Kafka's ThrottledReplicaListValidator: the literal "*" (every replica of
    the topic) or a list of "partitionId:brokerId" entries ([] = none)."""
    if "".join(items).strip() == "*":
        return
    for item in items:
        if not _THROTTLED_REPLICA.fullmatch(item.strip()):
            raise ValueError(
                "must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
