"""DeleteRecords (21): moves each partition's log start offset; answered with
the low watermark once every in-sync replica has moved its own log start
(DelayedDeleteRecords, held by the leader replica) or the timeout passes."""
import asyncio

from core.error_codes import ErrorCode
from core.naming import INTERNAL_TOPICS

from net.leader_calls import call_leader
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for, timedelta_ms


async def _one(edge, topic, partition, offset, timeout_ms):
    # Fetches answered after this one must see the new log start: drop what
    # the edge keeps for the partition (what other edge processes keep
    # expires within raykafka.fetch.read.ahead.ttl.ms).
    edge.forget_cached_reads(topic, partition)
    return await call_leader(edge, topic, partition,
                             lambda: edge.leaders.delete_records(topic, partition, offset, timeout_ms),
                             failure=lambda code: (code, -1))


@api(21, 0, 2, tests=("tests/integration/test_log_management.py::test_delete_records_moves_log_start",))
async def handle_delete_records(ctx, request):
    timeout_ms = timedelta_ms(request.timeout)
    deletable = await authorization.authorized(ctx, Operation.DELETE, ResourceType.TOPIC,
                                               {t.name for t in request.topics})
    denied = (ErrorCode.topic_authorization_failed, -1)
    internal = (ErrorCode.invalid_topic_exception, -1)  # Kafka: never, even for a super user
    answers = iter(await asyncio.gather(*(
        authorization.answer(denied) if t.name not in deletable
        else authorization.answer(internal) if t.name in INTERNAL_TOPICS
        else _one(ctx.edge, t.name, p.partition_index, p.offset, timeout_ms)
        for t in request.topics for p in t.partitions)))
    schema = response_schema_for(request)
    topic_cls, part_cls = nested(schema, "DeleteRecordsTopicResult"), nested(schema, "DeleteRecordsPartitionResult")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            error, low = next(answers)
            parts.append(build(part_cls, partition_index=p.partition_index, low_watermark=low,
                               error_code=ErrorCode(error)))
        topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(topics))
