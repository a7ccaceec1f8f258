"""The Ray side of a coordinator that keeps its state in an internal topic
partition (cluster/internal_topic_log.py): its calls to the actors of its
node (``RayNodeCalls``), and the controller's placement of the coordinators
after a LeaderAndIsr round (``sync_coordinators``), shared by the group and
transaction coordinator actors."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable, NamedTuple

import ray
from core.error_codes import ErrorCode

from core.local_channels import LocalChannels
from core.naming import purgatory_actor_name, replica_actor_name
from core.replica_messages import AppendAnswer, AppendRequest, AppendResult, ReadResult
from core.txn_messages import ORIGIN_COORDINATOR

log = logging.getLogger("raykafka.coordinators")


class RayNodeCalls:
    """cluster.internal_topic_log.NodeCalls over Ray and this node's direct
    channels: each append is a call on the leader replica (and, while
    followers lag, a DelayedProduce in the purgatory); over a channel each
    costs ~0.15 ms of CPU a side instead of Ray's ~1.3 ms."""

    def __init__(self, topic: str, partition: int, broker_id: int, namespace: str, call_timeout_s: float,
                 local_calls_enabled: bool):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.namespace = namespace
        self.call_timeout_s = call_timeout_s
        self.local_calls_enabled = local_calls_enabled
        self.purgatory: Any = None  # the node purgatory's handle, looked up on first use
        self._channels: LocalChannels | None = None

    def channels(self) -> LocalChannels:
        if self._channels is None:
            self._channels = LocalChannels.here(self.local_calls_enabled, self.call_timeout_s)
        return self._channels

    async def find_actor(self, name: str) -> Any:
        """The named actor's handle (ray.get_actor blocks: off the event loop)."""
        return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
            None, lambda: ray.get_actor(name, namespace=self.namespace)), self.call_timeout_s)

    async def find_replica(self) -> Any:
        return await self.find_actor(replica_actor_name(self.topic, self.partition, self.broker_id))

    async def replica_state(self, replica: Any) -> dict:
        return await asyncio.wait_for(replica.state.remote(), self.call_timeout_s)

    async def read(self, replica: Any, offset: int, max_bytes: int, leader_epoch: int) -> ReadResult:
        answer = await self.channels().call(replica, "read", (offset, max_bytes, 0, leader_epoch),
                                            self.call_timeout_s)
        return ReadResult._make(answer)

    async def append(self, replica: Any, batches: list[bytes], leader_epoch: int,
                     timeout_ms: int) -> list[AppendResult]:
        # Kafka's AppendOrigin.COORDINATOR: no producer sequence checks.
        request = AppendRequest(list(batches), [-1] * len(batches), [timeout_ms] * len(batches), leader_epoch,
                                origin=ORIGIN_COORDINATOR)
        answer = await self.channels().call(replica, "append", (request,), timeout_ms / 1000 + self.call_timeout_s)
        return [AppendResult._make(result) for result in AppendAnswer._make(answer).results]

    async def delay_produce(self, topic: str, partition: int, offset: int, timeout_ms: int) -> ErrorCode:
        try:
            if self.purgatory is None:
                self.purgatory = ray.get_actor(purgatory_actor_name(self.broker_id), namespace=self.namespace)
            statuses = await self.channels().call(self.purgatory, "delay_produce",
                                                  ([(topic, partition, offset)], timeout_ms),
                                                  timeout_ms / 1000 + self.call_timeout_s)
        except asyncio.TimeoutError:
            raise
        except Exception:
            self.purgatory = None  # look it up again next time (a restarted purgatory)
            raise
        return ErrorCode(statuses.get((topic, partition), ErrorCode.request_timed_out))


def restarted_by_ray() -> bool:
    """True in an actor process Ray started again after the previous one died."""
    if not ray.is_initialized():
        return False  # driven without Ray (unit tests)
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - not inside an actor
        return False


# ---- the controller's side ------------------------------------------------------------------------------
class CoordinatorKind(NamedTuple):
    """One kind of coordinator that follows the leaders of an internal topic."""
    topic: str
    label: str  # for the log lines: "group coordinator"
    actor_name: Callable[[int, int], str]  # (partition, broker id) -> actor name
    remote_class: Any  # the ray.remote class
    # (service, partition, broker id, partitions of the topic) -> the constructor's arguments
    constructor_args: Callable[[Any, int, int, int], tuple]
    handles: Callable[[Any], dict]  # service -> {(partition, broker id): handle}


async def sync_coordinators(kind: CoordinatorKind, service: Any, partitions: Iterable[tuple[str, int]]) -> None:
    """After a LeaderAndIsr round: the coordinator of each partition's leader
    of ``kind.topic`` is created if needed and elected at the partition's
    leader epoch; the other live replicas' coordinators (if any) resign.
    ``service`` is the controller channel's coordinator side (its ctx,
    config, namespace and the replicas' handles)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ctx = service.ctx
    topic = ctx.topics.get(kind.topic)
    if topic is None or kind.topic in ctx.topics_being_deleted:
        return
    mine = sorted({p for t, p in partitions if t == kind.topic and (t, p) in ctx.states})
    if not mine:
        return
    handles = kind.handles(service)
    calls = []
    for p in mine:
        state = ctx.states[(kind.topic, p)]
        for broker_id in topic.assignment[p]:
            if broker_id not in ctx.brokers:
                continue
            key = (p, broker_id)
            name = kind.actor_name(p, broker_id)
            handle = handles.get(key)
            if broker_id == state.leader:
                if handle is None:
                    broker = ctx.brokers[broker_id]
                    strategy = NodeAffinitySchedulingStrategy(broker.ray_node_id, soft=False) \
                        if broker.ray_node_id else "DEFAULT"
                    handle = kind.remote_class.options(
                        name=name, namespace=service.namespace, lifetime="detached", get_if_exists=True,
                        num_cpus=0, max_concurrency=10_000, scheduling_strategy=strategy,
                        # A dead coordinator process comes back (and reloads: InternalTopicLog.recover).
                        max_restarts=-1,
                    ).remote(*kind.constructor_args(service, p, broker_id, len(topic.assignment)))
                    handles[key] = handle
                ref = handle.elect.remote(state.leader_epoch, service._replica(kind.topic, p, broker_id))
            else:
                if handle is None:
                    try:
                        handle = handles[key] = ray.get_actor(name, namespace=service.namespace)
                    except ValueError:
                        continue  # never coordinated here: nothing to resign
                ref = handle.resign.remote(state.leader_epoch)
            calls.append((key, ref))
    results = await asyncio.gather(*(asyncio.wait_for(ref, service.call_timeout_s) for _, ref in calls),
                                   return_exceptions=True)
    for (key, _), result in zip(calls, results):
        if isinstance(result, Exception):
            text = str(result)
            log.error("%s %s: elect/resign failed: %s", kind.label, kind.actor_name(*key),
                      text.splitlines()[0][:300] if text else type(result).__name__)
            handles.pop(key, None)
        elif result:
            log.warning("%s %s answered %s", kind.label, kind.actor_name(*key), ErrorCode(result).name)


def forget_coordinators(kind: CoordinatorKind, service: Any, broker_id: int) -> None:
    """A broker died: its coordinators died with its node."""
    handles = kind.handles(service)
    for key in [k for k in handles if k[1] == broker_id]:
        del handles[key]
