"""DescribeGroups (15): state, protocol and members (with their metadata and
assignment while Stable) of each group, from its coordinator on this node;
NOT_COORDINATOR for groups coordinated elsewhere. From v6 (KIP-1043) a group
that does not exist is GROUP_ID_NOT_FOUND rather than state "Dead"."""
import asyncio

from core.group_messages import DescribeGroups
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

OPERATIONS_OMITTED = -(2**31)


async def _describe(edge, group_id: str):
    error, answer = await edge.group_call(group_id, "describe_groups", DescribeGroups((group_id,)))
    if error is not None:
        return error, None
    return answer[0].error, answer[0]


@api(15, 0, 6, tests=("tests/integration/test_groups.py::test_groups_cli_list_describe_reset_delete",
                      "tests/integration/test_groups.py::test_describe_list_delete_groups_wire"))
async def handle_describe_groups(ctx, request):
    schema = response_schema_for(request)
    group_cls = nested(schema, "DescribedGroup")
    member_cls = nested(schema, "DescribedGroupMember")
    describable = await authorization.authorized(ctx, Operation.DESCRIBE, ResourceType.GROUP, request.groups)
    answers = await asyncio.gather(*(
        _describe(ctx.edge, g) if g in describable
        else authorization.answer((ErrorCode.group_authorization_failed, None)) for g in request.groups))
    groups = []
    may = await authorization.checker(ctx)
    for group_id, (error, d) in zip(request.groups, answers):
        if d is None or error != ErrorCode.none:
            groups.append(build(group_cls, error_code=error, error_message=None, group_id=group_id, group_state="",
                                protocol_type="", protocol_data="", members=(),
                                authorized_operations=OPERATIONS_OMITTED))
            continue
        if ctx.api_version >= 6 and d.state == "Dead":
            groups.append(build(group_cls, error_code=ErrorCode.group_id_not_found,
                                error_message=f"Group {group_id} not found.", group_id=group_id, group_state="Dead",
                                protocol_type="", protocol_data="", members=(),
                                authorized_operations=OPERATIONS_OMITTED))
            continue
        members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                              client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                              member_assignment=m.assignment) for m in d.members)
        groups.append(build(group_cls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                            group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol,
                            members=members, authorized_operations=authorization.operations_field(
                                may, ResourceType.GROUP, group_id)
                            if getattr(request, "include_authorized_operations", False) else OPERATIONS_OMITTED))
    return build(schema, throttle_time=ZERO_THROTTLE, groups=tuple(groups))
