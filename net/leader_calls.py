"""Calls from an API handler to the local leader replica of a partition
(net/ports.Leaders), with Kafka's answers when there is none (unknown
partition, not the leader here, the actor gone or slow)."""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed


async def call_leader(edge, topic: str, partition: int, request: Callable[[], Awaitable[Any]],
                      failure: Callable[[int], Any]) -> Any:
    """``request()``: the call on ``edge.leaders``; ``failure(error_code)`` builds
    the result when it cannot be made or fails."""
    info = edge.metadata.partition(topic, partition)
    if info is None:
        return failure(ErrorCode.unknown_topic_or_partition)
    if info.leader != edge.broker_id or not edge.leaders.leads(topic, partition):
        return failure(ErrorCode.not_leader_or_follower)
    try:
        return await request()
    except ActorCallFailed as exc:
        return failure(exc.error)
