"""SyncGroup (14): the leader's assignment is persisted to __consumer_offsets
(acks=-1) before any member of the generation gets its share."""
from core.group_messages import SyncGroup
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, response_schema_for

# A follower's SyncGroup waits for the leader's (bounded by the group's
# rebalance timeout inside the coordinator); this bounds the edge's wait.
SYNC_WAIT_S = 600


@api(14, 0, 5, tests=("tests/integration/test_groups.py::test_three_members_share_six_partitions",))
async def handle_sync_group(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    error, result = ErrorCode.invalid_group_id, None
    if not await authorization.authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed  # Kafka: READ on the group
    elif request.group_id:
        error, result = await edge.group_call(
            request.group_id, "sync_group",
            SyncGroup(request.group_id, request.generation_id, request.member_id,
                      getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
                      getattr(request, "protocol_name", None),
                      {a.member_id: bytes(a.assignment) for a in request.assignments}),
            timeout_s=SYNC_WAIT_S + edge.call_timeout_s)
    if result is None:
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, protocol_type=None,
                     protocol_name=None, assignment=b"")
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=result.error, protocol_type=result.protocol_type,
                 protocol_name=result.protocol_name, assignment=result.assignment or b"")
