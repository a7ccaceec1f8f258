"""LeaveGroup (13): one member (v0-2) or a batch (v3+, KIP-345: static
members removed by group instance id with an empty member id)."""
from core.group_messages import LeaveGroup, LeavingMemberIdentity
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for


@api(13, 0, 5, tests=("tests/integration/test_groups.py::test_three_members_share_six_partitions",
                      "tests/integration/test_groups.py::test_leave_group_batched_wire"))
async def handle_leave_group(ctx, request):
    schema = response_schema_for(request)
    batched = has_field(type(request), "members")
    if batched:
        leaving = [LeavingMemberIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None))
                   for m in request.members]
    else:
        leaving = [LeavingMemberIdentity(request.member_id)]
    error, result = ErrorCode.invalid_group_id, None
    if not await authorization.authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed  # Kafka: READ on the group
    elif request.group_id:
        error, result = await ctx.edge.group_call(request.group_id, "leave_group",
                                                  LeaveGroup(request.group_id, tuple(leaving)))
    if result is not None:
        error = result.error
    if not batched:
        if result is not None and error == ErrorCode.none and result.members:
            error = result.members[0].error
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=error)
    member_cls = nested(schema, "MemberResponse")
    members = () if result is None else tuple(
        build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error)
        for m in result.members)
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, members=members)
