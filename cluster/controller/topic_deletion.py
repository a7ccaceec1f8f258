"""Topic deletion, a part of the controller (Kafka's TopicDeletionManager): DeleteTopics,
/admin/delete_topics written by anyone, and the replica state machine's way to
NonExistentReplica. Runs inside the controller's events."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from cluster.controller.channel import ReplicaKey
from cluster.controller.partition_state_machine import PartitionStateName as PS
from cluster.controller.replica_state_machine import ReplicaState as RS
from core.controller_messages import NOT_CONTROLLER_MESSAGE, TopicOutcome
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.controller")

# A topic whose replica could not be deleted (StopReplica failed) is tried again after this.
TOPIC_DELETION_RETRY_BACKOFF_S = 2.0


class TopicDeletionManager:
    """`c` is the controller (its context, ZooKeeper, channel, event queue)."""

    def __init__(self, controller: Any):
        self.c = controller

    async def delete_topics(self, names: list[str]) -> list[TopicOutcome]:
        """DeleteTopics: one outcome per name, in order."""
        async def event():
            if not self.c.is_active:
                return [TopicOutcome(n, ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE) for n in names]
            outcome = []
            to_delete = []
            for name in names:
                if name not in self.c.ctx.topics:
                    outcome.append(TopicOutcome(name, ErrorCode.unknown_topic_or_partition,
                                                "This server does not host this topic-partition."))
                elif not self.c.config["delete.topic.enable"]:
                    outcome.append(TopicOutcome(name, ErrorCode.topic_deletion_disabled,
                                                "Topic deletion is disabled."))
                else:
                    if name not in to_delete:
                        to_delete.append(name)
                    outcome.append(TopicOutcome(name))
            for name in to_delete:
                await self.c.azk.admin.mark_topic_for_deletion(name)
            if to_delete:
                await self.delete(to_delete)
            return outcome

        event.__name__ = "delete_topics"
        return await self.c.submit(event)

    async def delete(self, names: list[str]) -> None:
        """Kafka's TopicDeletionManager over the replica state machine: each replica
        OfflineReplica -> ReplicaDeletionStarted -> ReplicaDeletionSuccessful ->
        NonExistentReplica; a replica whose broker is down or whose StopReplica
        failed becomes ReplicaDeletionIneligible and is retried (when its broker
        returns, or after a backoff). The znodes go only once every replica is gone."""
        ctx = self.c.ctx
        names = [n for n in names if n in ctx.topics]
        if not names:
            return
        ctx.topics_being_deleted.update(names)
        await self.c._send_update_metadata()  # edges stop routing to them first
        calls, waiting = [], []
        for name in names:
            for (topic, p), replicas in ctx.partitions_of(name):
                ctx.partition_sm.transition([(topic, p)], PS.OFFLINE_PARTITION)
                for broker_id in replicas:
                    replica = (topic, p, broker_id)
                    if ctx.replica_sm.state(replica) in (RS.REPLICA_DELETION_SUCCESSFUL,):
                        continue
                    ctx.replica_sm.transition([replica], RS.OFFLINE_REPLICA)
                    if broker_id in ctx.brokers:
                        ctx.replica_sm.transition([replica], RS.REPLICA_DELETION_STARTED)
                        calls.append((replica, self.c.channel.stop_replica(ReplicaKey(*replica), ctx.epoch, True)))
                    else:
                        ctx.replica_sm.transition([replica], RS.REPLICA_DELETION_INELIGIBLE)
                        waiting.append(replica)
        outcomes = await self.c._await_calls(calls)
        failed = False
        for replica, outcome in outcomes.items():
            if outcome == 0:
                ctx.replica_sm.transition([replica], RS.REPLICA_DELETION_SUCCESSFUL)
                self.c.channel.remove_replica(ReplicaKey(*replica))
            else:
                failed = True
                ctx.replica_sm.transition([replica], RS.REPLICA_DELETION_INELIGIBLE)
        if waiting:
            log.info("deletion of %s waits for brokers %s to return", names, sorted({r[2] for r in waiting}))
        done = []
        for name in names:
            if not ctx.replica_sm.is_topic_deletion_successful(name):
                continue
            await self.c.azk.topics.delete(name)
            for p in ctx.topics[name].assignment:
                ctx.states.pop((name, p), None)
                ctx.reassignments.pop((name, p), None)
                ctx.partition_sm.transition([(name, p)], PS.NON_EXISTENT_PARTITION)
            ctx.replica_sm.forget_topic(name)
            del ctx.topics[name]
            ctx.topics_being_deleted.discard(name)
            done.append(name)
            log.info("deleted topic %s", name)
        if done:
            await self.c._send_update_metadata()
        if failed:
            retry = [n for n in names if n in ctx.topics_being_deleted]

            async def later():
                await asyncio.sleep(TOPIC_DELETION_RETRY_BACKOFF_S)
                self.c.enqueue(lambda: self.delete(retry) if self.c.is_active else asyncio.sleep(0))

            self.c.loop.create_task(later())

    async def on_marked(self) -> None:
        if not self.c.is_active:
            return
        marked = [t for t in await self.c.azk.admin.topics_marked_for_deletion()
                  if t not in self.c.ctx.topics_being_deleted]
        if marked:
            await self.delete(marked)
