"""Kafka's delayed operations of the node's purgatory (DelayedProduce.scala,
DelayedFetch.scala), completed by the partition progress its leaders report.

- DelayedProduce (acks=-1): every partition's HW has passed the produced
  offsets, or the deadline passes (REQUEST_TIMED_OUT), or leadership moved.
- DelayedFetch (consumers' fetch.min.bytes / max.wait.ms): some watched
  partition's fetchable end moved past what the edge last read.

Plain classes over delayed/ (no Ray): cluster/purgatory_service.py parks and
completes them, actors/purgatory.py is its actor shell.
"""
from __future__ import annotations

import asyncio

from core.error_codes import ErrorCode
from delayed import DelayedOperation

PartitionKey = tuple[str, int]


class DelayedProduce(DelayedOperation):
    def __init__(self, delay_ms: int, required: dict[PartitionKey, int], progress: dict, future: asyncio.Future):
        super().__init__(delay_ms)
        self.required = required
        self.progress = progress
        self.status: dict[PartitionKey, int] = {}
        self.future = future

    def try_complete(self) -> bool:
        for key, offset in self.required.items():
            if key in self.status:
                continue
            state = self.progress.get(key)
            if state is None:
                continue
            if not state.is_leader:
                self.status[key] = ErrorCode.not_leader_or_follower
            elif state.high_watermark >= offset:
                # Kafka's checkEnoughReplicasReachOffset.
                self.status[key] = ErrorCode.none if state.isr_size >= state.min_insync_replicas \
                    else ErrorCode.not_enough_replicas_after_append
        if len(self.status) == len(self.required):
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        for key in self.required:
            self.status.setdefault(key, ErrorCode.request_timed_out)

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.status)


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, known_ends: dict[PartitionKey, int], isolation_level: int, progress: dict,
                 future: asyncio.Future):
        super().__init__(delay_ms)
        self.known_ends = known_ends
        self.isolation_level = isolation_level
        self.progress = progress
        self.future = future
        self.moved = False

    def try_complete(self) -> bool:
        for key, known_end in self.known_ends.items():
            state = self.progress.get(key)
            if state is None:
                continue
            end = state.last_stable_offset if self.isolation_level == 1 else state.high_watermark
            if end > known_end or not state.is_leader:
                self.moved = True
                return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.moved)
