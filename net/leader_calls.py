"""Calls from an API handler to the local leader replica of a partition, with
Kafka's answers when there is none (unknown partition, not the leader here,
the actor gone or slow)."""
from __future__ import annotations

from typing import Any, Callable

from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed


async def call_leader(edge, topic: str, partition: int, method: str, *args: Any,
                      failure: Callable[[int], Any], timeout_s: float | None = None) -> Any:
    """`failure(error_code)` builds the result when the call cannot be made or fails."""
    info = edge.metadata.partition(topic, partition)
    if info is None:
        return failure(ErrorCode.unknown_topic_or_partition)
    handle = edge.leader_handle(topic, partition)
    if info.leader != edge.broker_id or handle is None:
        return failure(ErrorCode.not_leader_or_follower)
    try:
        return await edge.node_call(handle, method, *args, timeout_s=timeout_s)
    except ActorCallFailed as exc:
        return failure(exc.error)
