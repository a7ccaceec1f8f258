"""Types that cross actors for hibernating replicas (issue 30, cluster/replica_pool.py)."""
from __future__ import annotations

from typing import NamedTuple


class PooledReplica(NamedTuple):
    """Stands for a leader replica whose actor the node's replica pool keeps
    (live or hibernated): the controller sends it in UpdateMetadata instead of
    an actor handle, and the edge resolves it to a live handle per request."""
    topic: str
    partition: int
    broker_id: int


class HibernateAnswer(NamedTuple):
    """A replica's answer to hibernate(): closed (ok), or what holds it live (blocker).
    A replicated leader says where it closed, for its followers to close at the same place."""
    ok: bool
    blocker: str = ""
    leader_epoch: int = -1
    high_watermark: int = -1
    log_end_offset: int = -1
