"""DeleteAcls (31): remove the ACLs matching each filter (Kafka's
AclAuthorizer.deleteAcls), answering what each filter removed; needs ALTER on
the cluster; SECURITY_DISABLED without an authorizer."""
import asyncio

from core.error_codes import ErrorCode

from cluster.security.acls import Operation
from net import authorization
from net.apis.n29_describe_acls import binding_filter
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for
from net.actor_calls import internal_error

_TESTS = ("tests/integration/test_acls.py::test_acl_tool_add_list_remove",)


@api(31, 1, 3, tests=_TESTS)
async def handle_delete_acls(ctx, request):
    schema = response_schema_for(request)
    result_cls, matching_cls = nested(schema, "DeleteAclsFilterResult"), nested(schema, "DeleteAclsMatchingAcl")

    def answer(results):
        return build(schema, throttle_time=ZERO_THROTTLE, filter_results=tuple(
            build(result_cls, error_code=ErrorCode(code), error_message=message, matching_acls=tuple(
                build(matching_cls, error_code=ErrorCode.none, error_message=None,
                      resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
                      pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal, host=b.entry.host,
                      operation=int(b.entry.operation), permission_type=int(b.entry.permission_type))
                for b in deleted))
            for code, message, deleted in results))

    def every(code: ErrorCode, message: str):
        return answer([(code, message, [])] * len(request.filters))

    if not await authorization.authorize_cluster(ctx, Operation.ALTER):
        return every(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    try:
        store = await authorization.acl_store(ctx.edge)
    except Exception as exc:  # ZooKeeper unreachable
        return every(ErrorCode.unknown_server_error, internal_error(exc, "DeleteAcls"))
    if store is None:
        return every(ErrorCode.security_disabled, "No Authorizer is configured.")
    filters, results = [], {}
    for index, item in enumerate(request.filters):
        try:
            filters.append((index, binding_filter(item)))
        except ValueError as exc:
            results[index] = (ErrorCode.invalid_request, str(exc), [])
    try:
        deleted = await asyncio.get_running_loop().run_in_executor(None, store.delete_acls, [f for _, f in filters])
    except Exception as exc:  # ZooKeeper unreachable
        return every(ErrorCode.unknown_server_error, internal_error(exc, "DeleteAcls"))
    for (index, _filter), result in zip(filters, deleted):
        results[index] = result
    return answer([results[i] for i in range(len(request.filters))])
