"""JoinGroup (11): handed to the group's coordinator actor on this node,
which answers once the member's place in the next generation is settled
(KIP-394 member ids from v4, static members from v5, KIP-814 from v9)."""
from core.group_messages import JoinGroup
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for, timedelta_ms


def client_host(ctx) -> str:
    """Kafka's form: "/" + the client's address."""
    peer = getattr(ctx.conn, "peer", None) or "?"
    return "/" + peer.rsplit(":", 1)[0].strip("[]")


@api(11, 0, 9, tests=("tests/integration/test_groups.py::test_three_members_share_six_partitions",
                      "tests/integration/test_groups.py::test_static_member_restart_keeps_assignment"))
async def handle_join_group(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    session_ms = timedelta_ms(request.session_timeout)
    rebalance_ms = timedelta_ms(request.rebalance_timeout) if has_field(type(request), "rebalance_timeout") \
        else session_ms
    error, result = ErrorCode.invalid_group_id, None
    if not await authorization.authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed  # Kafka: READ on the group
    elif request.group_id:
        # The topics image (last argument) serves classic members of consumer groups.
        join = JoinGroup(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                         ctx.header.client_id or "", client_host(ctx), rebalance_ms, session_ms,
                         request.protocol_type, tuple((p.name, bytes(p.metadata)) for p in request.protocols),
                         ctx.api_version, getattr(request, "reason", None))
        error, result = await edge.coordinators.group_call_with_topics(
            request.group_id, "join_group", join,
            timeout_s=max(rebalance_ms, session_ms) / 1000 + edge.call_timeout_s)
    if result is None:
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, generation_id=-1,
                     protocol_type=None, protocol_name=None if ctx.api_version >= 7 else "", leader="",
                     skip_assignment=False, member_id=request.member_id, members=())
    member_cls = nested(schema, "JoinGroupResponseMember")
    protocol_name = result.protocol_name
    if protocol_name is None and ctx.api_version < 7:
        protocol_name = ""
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=result.error, generation_id=result.generation_id,
                 protocol_type=result.protocol_type, protocol_name=protocol_name, leader=result.leader_id or "",
                 skip_assignment=result.skip_assignment, member_id=result.member_id,
                 members=tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                                     metadata=m.metadata) for m in result.members))
