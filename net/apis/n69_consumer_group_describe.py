"""ConsumerGroupDescribe (69, KIP-848): epochs, assignor, and each member's
subscription, current and target assignment, from the group's coordinator
on this node. A classic group is GROUP_ID_NOT_FOUND ("not a consumer
group"), as in Kafka: clients then describe it with DescribeGroups."""
import asyncio

from core.group_messages import ConsumerGroupDescribe
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.coordinator_router import topics_image
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

OPERATIONS_OMITTED = -(2**31)


@api(69, 0, 1, tests=("tests/integration/test_consumer_protocol.py::test_consumer_protocol_members_join_and_leave_under_load",
                      "tests/integration/test_consumer_protocol.py::test_consumer_group_survives_a_coordinator_crash"))
async def handle_consumer_group_describe(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    group_cls, member_cls = nested(schema, "DescribedGroup"), nested(schema, "Member")
    assignment_cls, tp_cls = nested(schema, "Assignment"), nested(schema, "TopicPartitions")
    describable = await authorization.authorized(ctx, Operation.DESCRIBE, ResourceType.GROUP, request.group_ids)
    image = topics_image(edge.metadata)

    async def one(group_id):
        if group_id not in describable:
            return ErrorCode.group_authorization_failed, None
        error, answer = await edge.group_call(group_id, "consumer_group_describe", ConsumerGroupDescribe((group_id,)),
                                              image)
        return (error, None) if error is not None else (answer[0].error, answer[0])

    answers = await asyncio.gather(*(one(g) for g in request.group_ids))
    may = await authorization.checker(ctx)

    def assignment(parts):
        return build(assignment_cls, topic_partitions=tuple(
            build(tp_cls, topic_id=p.topic_id, topic_name=p.topic_name, partitions=p.partitions) for p in parts))

    groups = []
    for group_id, (error, d) in zip(request.group_ids, answers):
        if d is None or error != ErrorCode.none:
            groups.append(build(group_cls, error_code=error, error_message=getattr(d, "error_message", None),
                                group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1,
                                assignor_name="", members=(), authorized_operations=OPERATIONS_OMITTED))
            continue
        members = tuple(build(member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                              member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                              subscribed_topic_names=m.subscribed_topic_names,
                              subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assignment),
                              target_assignment=assignment(m.target_assignment), member_type=m.member_type)
                        for m in d.members)
        groups.append(build(group_cls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                            group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
                            assignor_name=d.assignor_name, members=members,
                            authorized_operations=authorization.operations_field(may, ResourceType.GROUP, group_id)
                            if request.include_authorized_operations else OPERATIONS_OMITTED))
    return build(schema, throttle_time=ZERO_THROTTLE, groups=tuple(groups))
