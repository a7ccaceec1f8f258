"""DescribeUserScramCredentials (50): the SCRAM mechanisms and iteration counts
of users, from /config/users/<user> (net/sasl.ScramStore); never the keys."""
import asyncio

from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation
from net.registry import api
from net.sasl import SCRAM_MECHANISMS, credential_from_string
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

_TESTS = ("tests/integration/test_security.py::test_scram_credentials_admin",)


def _describe(store, names: list[str] | None) -> list[tuple[str, int, str | None, list[tuple[int, int]]]]:
    """Blocking (ZooKeeper): -> [(user, error, message, [(mechanism type, iterations)])]."""
    results = []
    listed = names is None
    for user in (store.users() if listed else names):
        try:
            config = store.user_config(user)
        except ValueError:  # a name no znode can have ("", ".", ".."): no such user
            config = {}
        infos = []
        for mechanism, (_, kind, _) in SCRAM_MECHANISMS.items():
            if mechanism in config:
                try:
                    infos.append((kind, credential_from_string(config[mechanism])[3]))
                except (ValueError, TypeError):
                    continue
        if infos:
            results.append((user, ErrorCode.none, None, infos))
        elif not listed:
            results.append((user, ErrorCode.resource_not_found,
                            f"Attempt to describe a user credential that does not exist: {user}", []))
    return results


@api(50, 0, 0, tests=_TESTS)
async def handle_describe_user_scram_credentials(ctx, request):
    schema = response_schema_for(request)
    result_cls, info_cls = nested(schema, "DescribeUserScramCredentialsResult"), nested(schema, "CredentialInfo")
    names = [u.name for u in request.users] if request.users else None
    if not await authorization.authorize_cluster(ctx, Operation.DESCRIBE):  # Kafka: DESCRIBE on the cluster
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                     error_message=None, results=tuple(
                         build(result_cls, user=user, error_code=ErrorCode.cluster_authorization_failed,
                               error_message=None, credential_infos=()) for user in names or ()))
    duplicates = set()
    if names is not None:
        seen = set()
        for name in names:
            (duplicates if name in seen else seen).add(name)
        names = [n for n in dict.fromkeys(names) if n not in duplicates]
    store = getattr(ctx.edge, "scram_store", None)  # set by the edge actor (actors/edge.py)
    found = await asyncio.get_running_loop().run_in_executor(None, _describe, store, names)
    results = [build(result_cls, user=user, error_code=error, error_message=message,
                     credential_infos=tuple(build(info_cls, mechanism=kind, iterations=iterations)
                                            for kind, iterations in infos))
               for user, error, message, infos in found]
    results += [build(result_cls, user=user, error_code=ErrorCode.duplicate_resource,
                      error_message=f"Cannot describe SCRAM credentials for the same user twice in a single "
                                    f"request: {user}", credential_infos=())
                for user in sorted(duplicates)]
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                 results=tuple(results))
