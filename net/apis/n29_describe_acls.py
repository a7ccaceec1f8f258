"""DescribeAcls (29): the ACLs matching one filter (Kafka's AclApis); needs
DESCRIBE on the cluster; SECURITY_DISABLED without an authorizer."""
from core.error_codes import ErrorCode

from cluster.security.acls import (AccessControlEntryFilter, AclBindingFilter, Operation, PatternType,
                                   PermissionType, ResourcePatternFilter, ResourceType)
from net import authorization
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for
from net.actor_calls import internal_error

_TESTS = ("tests/integration/test_acls.py::test_acl_tool_add_list_remove",
          "tests/unit/test_acls.py::test_filters_follow_kafka")


def binding_filter(item, *, prefix: str = "") -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter -> AclBindingFilter."""
    pattern_type = getattr(item, "pattern_type_filter", int(PatternType.LITERAL))
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType(item.resource_type_filter), item.resource_name_filter,
                              PatternType(pattern_type)),
        AccessControlEntryFilter(item.principal_filter, item.host_filter, Operation(item.operation),
                                 PermissionType(item.permission_type)))


@api(29, 1, 3, tests=_TESTS)
async def handle_describe_acls(ctx, request):
    schema = response_schema_for(request)
    resource_cls, acl_cls = nested(schema, "DescribeAclsResource"), nested(schema, "AclDescription")

    def answer(error: ErrorCode, message: str | None = None, resources: tuple = ()):
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, error_message=message,
                     resources=resources)

    if not await authorization.authorize_cluster(ctx, Operation.DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    try:
        store = await authorization.acl_store(ctx.edge)
    except Exception as exc:  # ZooKeeper unreachable
        return answer(ErrorCode.unknown_server_error, internal_error(exc, "DescribeAcls"))
    if store is None:
        return answer(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    try:
        wanted = binding_filter(request)
    except ValueError as exc:
        return answer(ErrorCode.invalid_request, str(exc))
    if wanted.invalid() is not None:
        return answer(ErrorCode.invalid_request, wanted.invalid())
    by_pattern: dict = {}
    for binding in store.authorizer.bindings(wanted):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    resources = tuple(
        build(resource_cls, resource_type=int(pattern.resource_type), resource_name=pattern.name,
              pattern_type=int(pattern.pattern_type),
              acls=tuple(build(acl_cls, principal=e.principal, host=e.host, operation=int(e.operation),
                               permission_type=int(e.permission_type)) for e in entries))
        for pattern, entries in by_pattern.items())
    return answer(ErrorCode.none, None, resources)
