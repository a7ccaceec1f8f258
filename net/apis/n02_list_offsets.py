"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest
local (-4), latest tiered (-5) and lookups by timestamp through .timeindex."""
import asyncio

from kio.schema.errors import ErrorCode

from net.edge_service import ActorCallFailed
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


async def _one(edge, topic, partition, timestamp, isolation, leader_epoch):
    info = edge.metadata.partition(topic, partition)
    if info is None:
        return int(ErrorCode.unknown_topic_or_partition), -1, -1, -1
    handle = edge.leader_handle(topic, partition)
    if info.leader != edge.broker_id or handle is None:
        return int(ErrorCode.not_leader_or_follower), -1, -1, -1
    try:
        return await edge.call(handle.list_offsets.remote(timestamp, isolation, leader_epoch))
    except ActorCallFailed as exc:
        return int(exc.error), -1, -1, -1


@api(2, 1, 11, tests=("tests/integration/test_clients.py::test_list_offsets_by_timestamp",))
async def handle_list_offsets(ctx, request):
    edge = ctx.edge
    isolation = getattr(request, "isolation_level", 0)
    jobs = []
    for topic in request.topics:
        for part in topic.partitions:
            jobs.append(_one(edge, topic.name, part.partition_index, part.timestamp, isolation,
                             getattr(part, "current_leader_epoch", -1)))
    answers = iter(await asyncio.gather(*jobs))
    schema = response_schema_for(request)
    topic_cls = nested(schema, "ListOffsetsTopicResponse")
    part_cls = nested(schema, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            error, offset, timestamp, epoch = next(answers)
            parts.append(build(part_cls, partition_index=part.partition_index, error_code=ErrorCode(error),
                               timestamp=timestamp, offset=offset, leader_epoch=epoch,
                               old_style_offsets=(offset,) if offset >= 0 else ()))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(topics))
