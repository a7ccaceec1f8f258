"""OffsetForLeaderEpoch (23): the end offset of a leader epoch on the leader,
which consumers use to detect log truncation after an unclean leader change
(KIP-320). Replicas among themselves use the diverging-epoch field of their
fetch instead (actors/follower.py)."""
import asyncio

from core.error_codes import ErrorCode

from core.replica_messages import EpochEndOffset
from net.leader_calls import call_leader
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


async def _one(edge, topic, partition, current_leader_epoch, leader_epoch):
    return await call_leader(edge, topic, partition,
                             lambda: edge.leaders.offset_for_leader_epoch(topic, partition, current_leader_epoch,
                                                                          leader_epoch),
                             failure=lambda code: EpochEndOffset(code, -1, -1))


@api(23, 2, 4, tests=("tests/integration/test_protocol_edge.py::test_offset_for_leader_epoch",))
async def handle_offset_for_leader_epoch(ctx, request):
    edge = ctx.edge
    describable = await authorization.authorized(ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                                 {t.topic for t in request.topics})
    denied = (ErrorCode.topic_authorization_failed, -1, -1)
    answers = iter(await asyncio.gather(*(
        _one(edge, t.topic, p.partition, getattr(p, "current_leader_epoch", -1), p.leader_epoch)
        if t.topic in describable else authorization.answer(denied)
        for t in request.topics for p in t.partitions)))
    schema = response_schema_for(request)
    topic_cls, part_cls = nested(schema, "OffsetForLeaderTopicResult"), nested(schema, "EpochEndOffset")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            found = next(answers)
            parts.append(build(part_cls, error_code=ErrorCode(found.error), partition=p.partition,
                               leader_epoch=found.leader_epoch, end_offset=found.end_offset))
        topics.append(build(topic_cls, topic=t.topic, partitions=tuple(parts)))
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(topics))
