"""CreateAcls (30): add ACLs to Kafka's /kafka-acl znodes with a change
notification per resource (cluster/security/authorizer.ZkAclStore); needs
ALTER on the cluster; SECURITY_DISABLED without an authorizer."""
import asyncio

from core.error_codes import ErrorCode

from cluster.security.acls import (AccessControlEntry, AclBinding, Operation, PatternType, PermissionType,
                                   ResourcePattern, ResourceType)
from net import authorization
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for
from net.actor_calls import internal_error

_TESTS = ("tests/integration/test_acls.py::test_acl_tool_add_list_remove",
          "tests/unit/test_acls.py::test_validation")


def _binding(creation) -> AclBinding:
    pattern_type = getattr(creation, "resource_pattern_type", int(PatternType.LITERAL))
    return AclBinding(
        ResourcePattern(ResourceType(creation.resource_type), creation.resource_name, PatternType(pattern_type)),
        AccessControlEntry(creation.principal, creation.host, Operation(creation.operation),
                           PermissionType(creation.permission_type)))


@api(30, 1, 3, tests=_TESTS)
async def handle_create_acls(ctx, request):
    schema = response_schema_for(request)
    result_cls = nested(schema, "AclCreationResult")

    def answer(results):
        return build(schema, throttle_time=ZERO_THROTTLE,
                     results=tuple(build(result_cls, error_code=ErrorCode(code), error_message=message)
                                   for code, message in results))

    def every(code: ErrorCode, message: str):
        return answer([(code, message)] * len(request.creations))

    if not await authorization.authorize_cluster(ctx, Operation.ALTER):
        return every(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    try:
        store = await authorization.acl_store(ctx.edge)
    except Exception as exc:  # ZooKeeper unreachable
        return every(ErrorCode.unknown_server_error, internal_error(exc, "CreateAcls"))
    if store is None:
        return every(ErrorCode.security_disabled, "No Authorizer is configured.")
    bindings, results = [], {}
    for index, creation in enumerate(request.creations):
        try:
            bindings.append((index, _binding(creation)))
        except ValueError as exc:  # a type/operation code Kafka does not know
            results[index] = (ErrorCode.invalid_request, f"Failed to create ACL: {exc}")
    created = await asyncio.get_running_loop().run_in_executor(None, store.create_acls, [b for _, b in bindings])
    for (index, _binding_), result in zip(bindings, created):
        results[index] = result
    return answer([results[i] for i in range(len(request.creations))])
