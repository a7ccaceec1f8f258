"""What the edge needs from the rest of the cluster, as interfaces
(``typing.Protocol``): net/ names no actor runtime.

Two layers:

- ``ActorCalls``: how the edge reaches another actor at all, a call by
  method name with a timeout on every await, and a lookup by name.
  actors/edge_ports.py implements it over Ray (the node's direct channels
  first, core/local_channels.py); unit tests hand in fakes. The references it
  takes (``ActorRef``) come from UpdateMetadata or from its own ``find`` and
  are only ever handed back to it: no handler calls one.
- The roles handlers use, each built once by EdgeService over
  ``ActorCalls``: ``Leaders`` and ``Purgatory`` (net/replica_router.py),
  ``GroupCoordinators`` (net/coordinator_router.py),
  ``TransactionCoordinators`` (net/txn_coordinators.py), ``Controller``
  (net/edge_service.ControllerClient) and ``MetadataView``
  (net/metadata_cache.py). Failed calls are Kafka error codes by the time a
  handler sees them (net/actor_calls.py, net/coordinator_router.py).
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Optional, Protocol, runtime_checkable

from core.error_codes import ErrorCode
from core.replica_messages import PartitionOffset

# An opaque reference to another actor (a replica, a coordinator, the
# controller, the purgatory): only the ActorCalls that gave it calls it.
ActorRef = Any


@runtime_checkable
class ActorCalls(Protocol):
    """Calls from the edge to other actors. ``call`` takes the actor's
    direct channel when one is open (same node), else the runtime's own call;
    ``call_via_runtime`` always the runtime's. Both end within ``timeout_s``
    (asyncio.TimeoutError) and raise the runtime's or the channel's errors,
    which net/actor_calls.call_failure maps to Kafka's."""

    counters: dict

    def call(self, ref: ActorRef, method: str, args: tuple, timeout_s: float) -> Awaitable[Any]: ...

    def call_via_runtime(self, ref: ActorRef, method: str, args: tuple, timeout_s: float) -> Awaitable[Any]: ...

    def call_local(self, ref: ActorRef, method: str, args: tuple, timeout_s: float,
                   later_timeout_s: float) -> Optional[Awaitable[Any]]:
        """``call`` over the direct channel only, for a method that may answer in
        two parts (core.local_calls.TwoPartAnswer, the second part due within
        ``later_timeout_s``); None when there is no channel to ``ref``."""

    async def find(self, name: str, timeout_s: float) -> Optional[ActorRef]:
        """The actor registered as ``name`` (in this cluster's namespace), or
        None: absent, or the lookup took longer than ``timeout_s``."""

    async def find_replicas(self, partitions: list[tuple[str, int]], broker_id: int,
                            timeout_s: float) -> list[Optional[ActorRef]]:
        """The live replica of each (topic, partition) on ``broker_id`` under its
        name, wherever it runs (its node's pool knows one a spare adopted), or
        None: absent, hibernated (never woken for this) or not found in time."""

    def keep_only(self, refs) -> None:
        """Close the direct channels of actors not among ``refs``."""

    def forget(self, ref: ActorRef) -> None: ...

    def close(self) -> None: ...


class Leaders(Protocol):
    """The leader replicas this broker hosts: the one way a handler reaches
    one. A partition not led here, or its replica gone or slow, is
    ActorCallFailed (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT)."""

    def leads(self, topic: str, partition: int) -> bool: ...

    def append(self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
               leader_epoch: int) -> asyncio.Future:
        """Queue a produce request's record set (opaque bytes) -> a future of its AppendResult."""

    async def read_run(self, topic: str, partition: int, offset: int, max_bytes: int, isolation: int,
                       leader_epoch: int, min_bytes: int, wait_ms: int, runs: int, timeout_s: float) -> Any: ...

    async def list_offsets(self, topic: str, partition: int, timestamp: int, isolation: int,
                           leader_epoch: int) -> Any: ...

    async def offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                      leader_epoch: int) -> Any: ...

    async def delete_records(self, topic: str, partition: int, offset: int, timeout_ms: int) -> Any: ...

    async def describe_producers(self, topic: str, partition: int) -> Any: ...

    async def write_txn_markers(self, topic: str, partition: int, markers: list, timeout_ms: int) -> list: ...

    async def wait_committed(self, required: list[tuple[str, int, int, int]], timeout_ms: int) -> dict:
        """acks=all: (topic, partition, offset, leader epoch) -> {(topic, partition): error code}."""


class Purgatory(Protocol):
    """This node's purgatory (DelayedFetch)."""

    async def delay_fetch(self, known_ends: list[PartitionOffset], isolation_level: int,
                          timeout_ms: int) -> bool: ...


class GroupCoordinators(Protocol):
    """The group coordinators of the __consumer_offsets partitions this
    broker leads. Answers are ``(error or None, answer)``."""

    def group_partition(self, group_id: str) -> Optional[int]: ...

    async def group_call(self, group_id: str, method: str, *args, timeout_s: Optional[float] = None
                         ) -> tuple[Optional[ErrorCode], Any]: ...

    async def each(self, method: str, *args) -> list[tuple[Optional[ErrorCode], Any]]:
        """``method`` on every coordinator of this broker (ListGroups)."""

    async def partition_call(self, partition: int, method: str, *args) -> tuple[Optional[ErrorCode], Any]:
        """``method`` on the coordinator of one __consumer_offsets partition led here."""

    def ensure_offsets_topic(self) -> Awaitable[Optional[ErrorCode]]: ...


class TransactionCoordinators(Protocol):
    """Producer ids, and the transaction coordinators of the
    __transaction_state partitions (net/txn_coordinators.TransactionRouting)."""

    async def generate_producer_id(self) -> int: ...

    async def find(self, transactional_id: str) -> tuple[ErrorCode, int, str, int]: ...

    async def call(self, transactional_id: str, method: str, *args, timeout_s: Optional[float] = None
                   ) -> tuple[Optional[ErrorCode], Any]: ...

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: list[tuple[str, int]]) -> tuple[Optional[ErrorCode], Any]: ...

    async def each(self, method: str, *args) -> list[tuple[Optional[ErrorCode], Any]]:
        """``method`` on every transaction coordinator of this broker (ListTransactions)."""


class Controller(Protocol):
    """The active controller's admin operations. Raises ActorCallFailed
    (NOT_CONTROLLER while there is none, or it is failing over)."""

    async def call(self, method: str, *args, timeout_s: Optional[float] = None) -> Any: ...


class MetadataView(Protocol):
    """What the edge knows of the cluster (net/metadata_cache.MetadataCache)."""

    version: int
    controller_id: int
    topics: dict
    brokers: dict

    def partition(self, topic: str, partition: int) -> Any: ...


__all__ = ["ActorRef", "ActorCalls", "Leaders", "Purgatory", "GroupCoordinators", "TransactionCoordinators",
           "Controller", "MetadataView"]
