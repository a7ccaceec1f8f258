"""The edge's way to the group and transaction coordinators of its node.

The coordinator of a group is the leader of its __consumer_offsets
partition (Kafka's partitionFor); its actor (a GroupCoordinatorActor, named
core.naming.group_coordinator_actor_name) lives on that leader's node, and
the edge finds it by name on first use (net/ports.ActorCalls.find). Transaction coordinators are found
the same way (net/txn_coordinators.py).

A failed coordinator call means the same to every handler, so it is mapped
to a Kafka error code here, once (``coordinator_failure``): the coordinator
gone (its node died, or the partition moved) is NOT_COORDINATOR and its
handle is forgotten, a bug in it UNKNOWN_SERVER_ERROR, and a timeout what
Kafka answers for that request (``GROUP_TIMEOUT_ERRORS``).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from core.error_codes import ErrorCode

from core.local_calls import LocalCallFailed, LocalCallLost
from core.naming import OFFSETS_TOPIC, group_coordinator_actor_name
from net.actor_calls import ActorCallFailed

log = logging.getLogger("raykafka.edge")

# What a group request that timed out in its coordinator answers. A member
# joining or syncing retries on REBALANCE_IN_PROGRESS; a commit reports its
# timeout as Kafka's DelayedProduce would; the others ask the client to find
# the coordinator again.
GROUP_TIMEOUT_ERRORS: dict[str, ErrorCode] = {
    "join_group": ErrorCode.rebalance_in_progress,
    "sync_group": ErrorCode.rebalance_in_progress,
    "commit_offsets": ErrorCode.request_timed_out,
    "txn_commit_offsets": ErrorCode.request_timed_out,
}
GROUP_TIMEOUT_DEFAULT = ErrorCode.coordinator_not_available


def coordinator_failure(exc: BaseException, kind: str, method: str, timed_out: ErrorCode) -> ErrorCode | None:
    """The Kafka error of a failed call to a coordinator, or None for an
    error of the edge's own (re-raised). NOT_COORDINATOR means the caller
    must forget the coordinator's handle."""
    if isinstance(exc, asyncio.TimeoutError):
        return timed_out
    if isinstance(exc, LocalCallFailed) or type(exc).__name__.startswith("RayTaskError"):
        # a bug in the coordinator, not a move
        log.error("%s coordinator %s failed: %s", kind, method, str(exc).splitlines()[-1][:300] if str(exc) else
                  type(exc).__name__)
        return ErrorCode.unknown_server_error
    if isinstance(exc, LocalCallLost) or type(exc).__module__.startswith("ray"):
        return ErrorCode.not_coordinator  # gone (its node died, or it moved): rediscover
    return None


async def coordinator_answer(handles: dict, partition: int, kind: str, method: str, pending: Awaitable,
                             timed_out: ErrorCode) -> tuple[ErrorCode | None, Any]:
    """-> (None, the answer of ``pending``), or (its failure's error, None)."""
    try:
        return None, await pending
    except Exception as exc:
        error = coordinator_failure(exc, kind, method, timed_out)
        if error is None:
            raise
        if error == ErrorCode.not_coordinator:
            handles.pop(partition, None)
        return error, None


class LocalCoordinators:
    """The coordinator actors on this node of the partitions of an internal
    topic (__consumer_offsets, __transaction_state) that this broker leads,
    their handles cached until a call finds one gone."""

    def __init__(self, edge: Any, topic: str, actor_name: Callable[[int, int], str], kind: str):
        self.edge = edge
        self.kind = kind  # "group" or "transaction", for the log
        self.topic = topic
        self.actor_name = actor_name
        self.handles: dict[int, Any] = {}  # partition -> coordinator actor

    def leads(self, partition: int) -> bool:
        info = self.edge.metadata.partition(self.topic, partition)
        return info is not None and info.leader == self.edge.broker_id

    async def handle(self, partition: int):
        """The coordinator actor of ``partition`` if this broker leads it, else None."""
        if not self.leads(partition):
            return None
        handle = self.handles.get(partition)
        if handle is None:
            edge = self.edge
            handle = await edge.calls.find(self.actor_name(partition, edge.broker_id), edge.call_timeout_s)
            if handle is None:
                return None
            self.handles[partition] = handle
        return handle

    async def all(self) -> list:
        """(partition, handle) of every coordinator of a partition this broker leads."""
        info = self.edge.metadata.topics.get(self.topic)
        broker_id = self.edge.broker_id
        partitions = sorted(p for p, s in info.partitions.items() if s.leader == broker_id) if info else []
        handles = await asyncio.gather(*(self.handle(p) for p in partitions))
        return [(p, h) for p, h in zip(partitions, handles) if h is not None]

    async def partition_call(self, partition: int, method: str, *args, timeout_s: float | None = None,
                             timed_out: ErrorCode = ErrorCode.request_timed_out) -> tuple[ErrorCode | None, Any]:
        """``method`` on the coordinator of ``partition`` if this broker leads it -> (error or None,
        answer); NOT_COORDINATOR when it does not (or its coordinator is gone)."""
        handle = await self.handle(partition)
        if handle is None:
            return ErrorCode.not_coordinator, None
        edge = self.edge
        pending = edge.calls.call(handle, method, args, timeout_s or edge.call_timeout_s)
        return await coordinator_answer(self.handles, partition, self.kind, method, pending, timed_out)

    async def each(self, method: str, *args, timeout_s: float | None = None) -> list[tuple[ErrorCode | None, Any]]:
        """``method`` on every coordinator of this broker -> (error or None, answer) each."""
        partitions = [p for p, _ in await self.all()]
        return list(await asyncio.gather(*(self.partition_call(p, method, *args, timeout_s=timeout_s)
                                           for p in partitions)))


class CoordinatorRouter:
    """Group coordinators of the offsets partitions this broker leads, and
    the creation of Kafka's internal topics through the controller."""

    def __init__(self, edge: Any):
        self.edge = edge  # metadata, broker_id, config, call_timeout_s, calls, controller_call
        self.groups = LocalCoordinators(edge, OFFSETS_TOPIC, group_coordinator_actor_name, "group")
        self.handles = self.groups.handles  # __consumer_offsets partition -> group coordinator actor
        self.leads_offsets_partition = self.groups.leads
        self.each = self.groups.each
        self.partition_call = self.groups.partition_call
        self._topic_creations: dict[str, asyncio.Future] = {}
        self.topics_images = TopicsImageShipping()

    # ---- which coordinator ----------------------------------------------------------------
    def group_partition(self, group_id: str) -> int | None:
        """The __consumer_offsets partition owning a group; None before the topic exists."""
        from cluster.groups import partition_for_group

        info = self.edge.metadata.topics.get(OFFSETS_TOPIC)
        return partition_for_group(group_id, len(info.partitions)) if info and info.partitions else None

    # ---- calls ------------------------------------------------------------------------------
    async def group_call(self, group_id: str, method: str, *args, timeout_s: float | None = None):
        """Call the coordinator of a group on this node -> (error or None, answer).
        NOT_COORDINATOR when this broker does not lead the group's offsets
        partition (or its coordinator is gone); a timeout as GROUP_TIMEOUT_ERRORS says."""
        partition = self.group_partition(group_id)
        if partition is None:
            return ErrorCode.not_coordinator, None
        return await self.groups.partition_call(partition, method, *args, timeout_s=timeout_s,
                                                timed_out=GROUP_TIMEOUT_ERRORS.get(method, GROUP_TIMEOUT_DEFAULT))

    async def group_call_with_topics(self, group_id: str, method: str, *args, timeout_s: float | None = None):
        """``group_call`` with this edge's topics image as the last argument
        (consumer groups resolve subscriptions with it): a reference while the
        coordinator holds this metadata version, the whole image otherwise,
        and again whole when the coordinator asks for it (TopicsImageWanted:
        it restarted, or never saw this version)."""
        from cluster.groups.consumer import TopicsImageWanted

        partition = self.group_partition(group_id)
        shipping = self.topics_images
        image = shipping.image_for(partition, self.edge.metadata)
        error, answer = await self.group_call(group_id, method, *args, image, timeout_s=timeout_s)
        if error is None and isinstance(answer, TopicsImageWanted):
            shipping.forget(partition)
            image = shipping.image_for(partition, self.edge.metadata)
            error, answer = await self.group_call(group_id, method, *args, image, timeout_s=timeout_s)
            if error is None and isinstance(answer, TopicsImageWanted):  # whole images are never refused
                return ErrorCode.coordinator_not_available, None
        if error is None and image.topics is not None:
            shipping.held(partition, image.version)
        return error, answer

    # ---- internal topics ------------------------------------------------------------------------
    def ensure_offsets_topic(self) -> Awaitable[ErrorCode | None]:
        """Ask the controller to create __consumer_offsets (once; concurrent
        callers share the request). None once it exists."""
        return self.ensure_topic(OFFSETS_TOPIC, "ensure_offsets_topic")

    async def ensure_topic(self, topic: str, controller_method: str) -> ErrorCode | None:
        """Have the controller create the internal ``topic`` with its
        ``controller_method`` (once; concurrent callers share the request).
        None once it exists, else COORDINATOR_NOT_AVAILABLE."""
        if topic in self.edge.metadata.topics:
            return None
        creation = self._topic_creations.get(topic)
        if creation is None or creation.done():
            creation = self._topic_creations[topic] = asyncio.ensure_future(
                self._create_topic(topic, controller_method))
        return await asyncio.shield(creation)

    async def _create_topic(self, topic: str, controller_method: str) -> ErrorCode | None:
        edge = self.edge
        try:
            code, message = await edge.controller_call(controller_method, timeout_s=2 * edge.call_timeout_s)
        except ActorCallFailed as exc:
            log.warning("creating %s failed: %s", topic, exc)
            return ErrorCode.coordinator_not_available
        except AttributeError:
            log.warning("the controller cannot create %s", topic)
            return ErrorCode.coordinator_not_available
        if code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.warning("creating %s failed: %s (%s)", topic, ErrorCode(code).name, message)
            return ErrorCode.coordinator_not_available
        return None


class TopicsImageShipping:
    """The topics image as this edge ships it to the group coordinators:
    built once per metadata version, sent whole to a coordinator that may
    not hold that version, as a reference (the version alone) to one that
    does. A coordinator that gets a reference to a version newer than its
    own answers TopicsImageWanted and is sent the whole image."""

    def __init__(self) -> None:
        import uuid

        # Our versions count from this process's start: the source tells a
        # coordinator whose versions they are.
        self.source = uuid.uuid4().hex
        self._image = None
        self._held: dict[int, int] = {}  # __consumer_offsets partition -> version its coordinator holds

    def image_for(self, partition: int | None, metadata: Any):
        import dataclasses

        from cluster.groups.consumer import TopicsImage

        if self._image is None or self._image.version != metadata.version:
            self._image = dataclasses.replace(topics_image(metadata), source=self.source)
        if partition is not None and self._held.get(partition) == metadata.version:
            return TopicsImage(metadata.version, None, source=self.source)
        return self._image

    def held(self, partition: int | None, version: int) -> None:
        if partition is not None:
            self._held[partition] = version

    def forget(self, partition: int | None) -> None:
        self._held.pop(partition, None)


def topics_image(metadata: Any):
    """The topics this edge knows, as the consumer group coordinator needs
    them to resolve subscriptions (names, regexes) into topic ids and
    partition counts (cluster.groups.consumer.TopicsImage)."""
    from cluster.groups.consumer import TopicsImage

    topics = tuple(sorted((info.name, info.topic_id, len(info.partitions))
                          for info in metadata.topics.values() if info.topic_id is not None))
    internal = frozenset(info.name for info in metadata.topics.values() if info.internal)
    return TopicsImage(metadata.version, topics, internal)
