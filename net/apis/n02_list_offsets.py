"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest
local (-4), latest tiered (-5) and lookups by timestamp through .timeindex."""
import asyncio

from core.error_codes import ErrorCode

from core.replica_messages import ListOffsetsResult
from net.leader_calls import call_leader
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


async def _one(edge, topic, partition, timestamp, isolation, leader_epoch):
    return await call_leader(edge, topic, partition,
                             lambda: edge.leaders.list_offsets(topic, partition, timestamp, isolation, leader_epoch),
                             failure=lambda code: ListOffsetsResult(code, -1, -1, -1))


@api(2, 1, 11, tests=("tests/integration/test_clients.py::test_list_offsets_by_timestamp",))
async def handle_list_offsets(ctx, request):
    edge = ctx.edge
    isolation = getattr(request, "isolation_level", 0)
    describable = await authorization.authorized(ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                                 {t.name for t in request.topics})
    denied = (ErrorCode.topic_authorization_failed, -1, -1, -1)
    jobs = []
    for topic in request.topics:
        for part in topic.partitions:
            jobs.append(_one(edge, topic.name, part.partition_index, part.timestamp, isolation,
                             getattr(part, "current_leader_epoch", -1)) if topic.name in describable
                        else authorization.answer(denied))
    answers = iter(await asyncio.gather(*jobs))
    schema = response_schema_for(request)
    topic_cls = nested(schema, "ListOffsetsTopicResponse")
    part_cls = nested(schema, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            found = next(answers)
            parts.append(build(part_cls, partition_index=part.partition_index, error_code=ErrorCode(found.error),
                               timestamp=found.timestamp, offset=found.offset, leader_epoch=found.leader_epoch,
                               old_style_offsets=(found.offset,) if found.offset >= 0 else ()))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(topics))
