"""ListGroups (16): the groups coordinated on this broker (every coordinator
of an offsets partition it leads), as in Kafka: admin clients ask every
broker. State filter from v4 (KIP-518), type filter from v5: "classic"
groups and KIP-848 "consumer" groups."""
from core.group_messages import ListGroups
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

@api(16, 0, 5, tests=("tests/integration/test_groups.py::test_groups_cli_list_describe_reset_delete",
                      "tests/integration/test_groups.py::test_describe_list_delete_groups_wire"))
async def handle_list_groups(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    listed_cls = nested(schema, "ListedGroup")
    states = list(getattr(request, "states_filter", ()) or ())
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    error = ErrorCode.none
    listings = []
    if not types or types & {"classic", "consumer"}:
        answers = await edge.coordinators.each("list_groups", ListGroups(states or None, sorted(types) or None))
        for failure, answer in answers:
            code, groups = (ErrorCode.coordinator_not_available, []) if failure is not None else answer
            if code != ErrorCode.none:
                error = ErrorCode(code)  # e.g. COORDINATOR_LOAD_IN_PROGRESS: the list is partial
            listings.extend(groups)
    if not await authorization.authorize_cluster(ctx, Operation.DESCRIBE):
        # Kafka: without DESCRIBE on the cluster, only the groups the principal may DESCRIBE
        visible = await authorization.authorized(ctx, Operation.DESCRIBE, ResourceType.GROUP,
                                                 [g.group_id for g in listings])
        listings = [g for g in listings if g.group_id in visible]
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, groups=tuple(
        build(listed_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
              group_type=getattr(g, "group_type", "classic")) for g in sorted(listings, key=lambda g: g.group_id)))
