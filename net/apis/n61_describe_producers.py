"""DescribeProducers (61): the producers each partition's leader tracks
(id, epoch, last sequence and timestamp, coordinator epoch, open
transaction's first offset), as ``kafka-transactions.sh describe-producers``
shows them."""
import asyncio

from core.error_codes import ErrorCode

from core.txn_messages import DescribeProducersResult
from net.leader_calls import call_leader
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


async def _one(edge, topic: str, partition: int) -> DescribeProducersResult:
    return await call_leader(edge, topic, partition, lambda: edge.leaders.describe_producers(topic, partition),
                             failure=lambda code: DescribeProducersResult(code, ()))


@api(61, 0, 0, tests=("tests/integration/test_idempotence.py::test_describe_producers",))
async def handle_describe_producers(ctx, request):
    edge = ctx.edge
    readable = await authorization.authorized(ctx, Operation.READ, ResourceType.TOPIC,
                                              {t.name for t in request.topics})  # Kafka: READ on each topic
    denied = DescribeProducersResult(ErrorCode.topic_authorization_failed, ())
    jobs = [_one(edge, topic.name, index) if topic.name in readable else authorization.answer(denied)
            for topic in request.topics for index in topic.partition_indexes]
    answers = iter(await asyncio.gather(*jobs))
    schema = response_schema_for(request)
    topic_cls = nested(schema, "TopicResponse")
    part_cls = nested(schema, "PartitionResponse")
    state_cls = nested(schema, "ProducerState")
    topics = []
    for topic in request.topics:
        parts = []
        for index in topic.partition_indexes:
            result = next(answers)
            producers = tuple(build(state_cls, producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                                    last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
                                    coordinator_epoch=p.coordinator_epoch,
                                    current_txn_start_offset=p.current_txn_start_offset)
                              for p in result.producers)
            parts.append(build(part_cls, partition_index=index, error_code=ErrorCode(result.error),
                               error_message=None, active_producers=producers))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(topics))
