"""OffsetDelete (47, KIP-496): removes a group's committed offsets; a group
with members keeps those of topics it subscribes to
(GROUP_SUBSCRIBED_TO_TOPIC). Unknown topics: UNKNOWN_TOPIC_OR_PARTITION."""
from core.group_messages import OffsetDelete
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


@api(47, 0, 0, tests=("tests/integration/test_groups.py::test_describe_list_delete_groups_wire",))
async def handle_offset_delete(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    topic_cls = nested(schema, "OffsetDeleteResponseTopic")
    part_cls = nested(schema, "OffsetDeleteResponsePartition")
    if not await authorization.authorize(ctx, Operation.DELETE, ResourceType.GROUP, request.group_id):
        return build(schema, error_code=ErrorCode.group_authorization_failed, throttle_time=ZERO_THROTTLE, topics=())
    readable = await authorization.authorized(ctx, Operation.READ, ResourceType.TOPIC, {t.name for t in request.topics})
    errors: dict[tuple[str, int], ErrorCode] = {}
    wanted = []
    for t in request.topics:
        for p in t.partitions:
            if t.name not in readable:
                errors[(t.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif edge.metadata.partition(t.name, p.partition_index) is None:
                errors[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append((t.name, p.partition_index))
    error, answer = await edge.group_call(request.group_id, "delete_offsets",
                                          OffsetDelete(request.group_id, tuple(wanted)))
    if error is None:
        error, by_partition = answer
        error = ErrorCode(error)
        errors.update({tuple(tp): ErrorCode(e) for tp, e in by_partition.items()})
    if error != ErrorCode.none:
        return build(schema, error_code=error, throttle_time=ZERO_THROTTLE, topics=())
    return build(schema, error_code=ErrorCode.none, throttle_time=ZERO_THROTTLE, topics=tuple(
        build(topic_cls, name=t.name, partitions=tuple(
            build(part_cls, partition_index=p.partition_index,
                  error_code=errors.get((t.name, p.partition_index), ErrorCode.none))
            for p in t.partitions))
        for t in request.topics))
