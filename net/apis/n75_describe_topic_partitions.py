"""DescribeTopicPartitions (75, KIP-966): topics and their partitions (leader,
epoch, replicas, ISR) from the metadata cache, paged: at most
``response_partition_limit`` partitions per answer, resuming at ``cursor``
(topics in name order), with ``next_cursor`` naming where the next page
starts. No topics named = every topic the principal may describe. This
cluster keeps no ELR (ZooKeeper mode), so those fields are null, as Kafka
answers when ELR is off."""
from core.error_codes import ErrorCode

from core.naming import topic_name_error
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

OPERATIONS_OMITTED = -(2**31)
# Kafka's max.request.partition.size.limit (the most partitions one answer holds).
PARTITION_LIMIT_MAX = 2000


@api(75, 0, 0, tests=("tests/integration/test_consumer_protocol.py::test_describe_topic_partitions_pages",))
async def handle_describe_topic_partitions(ctx, request):
    cache = ctx.edge.metadata
    schema = response_schema_for(request)
    topic_cls = nested(schema, "DescribeTopicPartitionsResponseTopic")
    part_cls = nested(schema, "DescribeTopicPartitionsResponsePartition")
    cursor_cls = nested(schema, "Cursor")
    may = await authorization.checker(ctx)
    if request.topics:
        names = sorted({t.name for t in request.topics})
    else:
        names = sorted(n for n in cache.topics if may(Operation.DESCRIBE, ResourceType.TOPIC, n))
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    limit = max(1, min(int(request.response_partition_limit), PARTITION_LIMIT_MAX))
    topics, budget, next_cursor = [], limit, None
    for name in names:
        info = cache.topics.get(name)
        if info is None or not may(Operation.DESCRIBE, ResourceType.TOPIC, name):
            error = ErrorCode.unknown_topic_or_partition if info is None else ErrorCode.topic_authorization_failed
            if info is None and topic_name_error(name):
                error = ErrorCode.invalid_topic_exception
            topics.append(build(topic_cls, error_code=error, name=name, topic_id=None, is_internal=False,
                                partitions=(), topic_authorized_operations=OPERATIONS_OMITTED))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = [i for i in sorted(info.partitions) if i >= first]
        if budget == 0:
            next_cursor = build(cursor_cls, topic_name=name, partition_index=indexes[0] if indexes else 0)
            break
        taken, rest = indexes[:budget], indexes[budget:]
        budget -= len(taken)
        partitions = tuple(build(part_cls, error_code=ErrorCode.none if p.leader >= 0
                                 else ErrorCode.leader_not_available, partition_index=i, leader_id=p.leader,
                                 leader_epoch=p.leader_epoch, replica_nodes=p.replicas, isr_nodes=p.isr,
                                 eligible_leader_replicas=None, last_known_elr=None, offline_replicas=p.offline)
                           for i in taken for p in (info.partitions[i],))
        topics.append(build(topic_cls, error_code=ErrorCode.none, name=name, topic_id=info.topic_id,
                            is_internal=info.internal, partitions=partitions,
                            topic_authorized_operations=authorization.operations_field(may, ResourceType.TOPIC, name)))
        if rest:
            next_cursor = build(cursor_cls, topic_name=name, partition_index=rest[0])
            break
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(topics), next_cursor=next_cursor)
