"""The internal topics the controller creates on first use (FindCoordinator):
their names and how their CreateTopics entry is built. The specs live with the
coordinators (actors/group_coordinator.py, actors/transaction_coordinator.py);
actors/controller.py hands them in."""
from __future__ import annotations

from typing import Callable, NamedTuple

from core.config import BrokerConfig

# Also in actors/group_coordinator.py (issue 20, part 3 moves the shared names to core/).
OFFSETS_TOPIC = "__consumer_offsets"


class InternalTopic(NamedTuple):
    name: str
    # (broker config, live brokers) -> a CreateTopics entry (replication capped at the live brokers)
    spec: Callable[[BrokerConfig, int], dict]
