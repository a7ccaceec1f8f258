"""OffsetCommit (8): stored by the group's coordinator as records in
__consumer_offsets; answered once the offsets partition's high watermark has
passed them (acks=-1, offsets.commit.timeout.ms). Partitions of topics this
broker does not know get UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id,
v10), as Kafka checks in KafkaApis."""
import time

from core.group_messages import OffsetCommit, OffsetToCommit
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for, timedelta_ms

DEFAULT_RETENTION = -1


@api(8, 2, 10, tests=("tests/integration/test_groups.py::test_killed_member_partitions_reassigned_offsets_resume",
                      "tests/integration/test_groups.py::test_offsets_wire_versions"))
async def handle_offset_commit(ctx, request):
    edge = ctx.edge
    by_id = ctx.api_version >= 10
    retention_ms = timedelta_ms(request.retention_time) if has_field(type(request), "retention_time") \
        else DEFAULT_RETENTION
    expire = None if retention_ms == DEFAULT_RETENTION else int(time.time() * 1000) + retention_ms
    errors: dict[tuple[str | None, int], ErrorCode] = {}
    offsets = {}
    rows = []  # (topic key for the response, name, partition index)
    # Kafka: READ on the group (else every partition fails), then READ on each topic.
    may = await authorization.checker(ctx)
    group_denied = not may(Operation.READ, ResourceType.GROUP, request.group_id)
    for topic in request.topics:
        if by_id:
            info = edge.metadata.topics_by_id.get(topic.topic_id)
            name, key, unknown = (info.name if info else None), topic.topic_id, ErrorCode.unknown_topic_id
        else:
            name, key, unknown = topic.name, topic.name, ErrorCode.unknown_topic_or_partition
        for part in topic.partitions:
            rows.append((key, name, part.partition_index))
            if group_denied or (name is not None and not may(Operation.READ, ResourceType.TOPIC, name)):
                errors[(name, part.partition_index)] = ErrorCode.group_authorization_failed if group_denied \
                    else ErrorCode.topic_authorization_failed
                continue
            if name is None or edge.metadata.partition(name, part.partition_index) is None:
                errors[(name, part.partition_index)] = unknown
                continue
            offsets[(name, part.partition_index)] = OffsetToCommit(part.committed_offset,
                                                                   getattr(part, "committed_leader_epoch", -1),
                                                                   part.committed_metadata, expire)
    if offsets:
        error, answer = await edge.group_call(
            request.group_id, "commit_offsets",
            OffsetCommit(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                         request.generation_id_or_member_epoch, offsets, ctx.api_version),
            timeout_s=edge.config["offsets.commit.timeout.ms"] / 1000 + edge.call_timeout_s)
        if error is not None:
            errors.update({tp: error for tp in offsets})
        else:
            errors.update({tuple(tp): ErrorCode(e) for tp, e in answer.items()})
    schema = response_schema_for(request)
    topic_cls = nested(schema, "OffsetCommitResponseTopic")
    part_cls = nested(schema, "OffsetCommitResponsePartition")
    topics, index = [], {}
    for key, name, partition in rows:
        if key not in index:
            index[key] = len(topics)
            topics.append((key, []))
        topics[index[key]][1].append(build(part_cls, partition_index=partition,
                                           error_code=errors.get((name, partition), ErrorCode.unknown_server_error)))
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(
        build(topic_cls, name=key, topic_id=key, partitions=tuple(parts)) for key, parts in topics))
