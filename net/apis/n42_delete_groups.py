"""DeleteGroups (42): only Empty groups go (NON_EMPTY_GROUP otherwise);
their offsets and metadata are tombstoned in __consumer_offsets."""
import asyncio

from core.group_messages import DeleteGroups
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


async def _delete(edge, group_id: str) -> ErrorCode:
    error, answer = await edge.group_call(group_id, "delete_groups", DeleteGroups((group_id,)))
    if error is not None:
        return error
    return ErrorCode(answer[group_id])


@api(42, 0, 2, tests=("tests/integration/test_groups.py::test_groups_cli_list_describe_reset_delete",
                      "tests/integration/test_groups.py::test_describe_list_delete_groups_wire"))
async def handle_delete_groups(ctx, request):
    schema = response_schema_for(request)
    result_cls = nested(schema, "DeletableGroupResult")
    names = list(dict.fromkeys(request.groups_names))
    deletable = await authorization.authorized(ctx, Operation.DELETE, ResourceType.GROUP, names)
    errors = await asyncio.gather(*(_delete(ctx.edge, g) if g in deletable
                                    else authorization.answer(ErrorCode.group_authorization_failed) for g in names))
    return build(schema, throttle_time=ZERO_THROTTLE, results=tuple(
        build(result_cls, group_id=g, error_code=e) for g, e in zip(names, errors)))
