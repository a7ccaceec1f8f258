"""Heartbeat (12): keeps a member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
from core.group_messages import Heartbeat
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, response_schema_for


@api(12, 0, 4, tests=("tests/integration/test_groups.py::test_three_members_share_six_partitions",
                      "tests/integration/test_groups.py::test_killed_member_partitions_reassigned_offsets_resume"))
async def handle_heartbeat(ctx, request):
    error = ErrorCode.invalid_group_id
    if not await authorization.authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed  # Kafka: READ on the group
    elif request.group_id:
        error, answer = await ctx.edge.group_call(
            request.group_id, "heartbeat",
            Heartbeat(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                      request.generation_id))
        if error is None:
            error = ErrorCode(answer)
    return build(response_schema_for(request), throttle_time=ZERO_THROTTLE, error_code=error)
