"""AlterUserScramCredentials (51): upsert or delete SCRAM credentials in
/config/users/<user> (Kafka's ScramCredentialUtils format, with a
/config/changes notification). The client sends the salted password
(Hi(password, salt, i)); the stored and server keys are derived here. All
alterations of one user succeed or fail together, as in Kafka."""
import asyncio
import collections

from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation
from net.registry import api
from net.sasl import (SCRAM_BY_TYPE, SCRAM_MAX_ITERATIONS, SCRAM_MECHANISMS, credential_to_string,
                      scram_keys)
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for
from net.actor_calls import internal_error

_TESTS = ("tests/integration/test_security.py::test_scram_credentials_admin",
          "tests/unit/test_security.py::test_alter_validation")


def validate(deletions, upsertions) -> tuple[dict[str, tuple[int, str]], dict[str, list]]:
    """-> ({user: (error, message)} for refused users, {user: [alterations]} for the others)."""
    errors: dict[str, tuple[int, str]] = {}
    by_user: dict[str, list] = collections.defaultdict(list)
    for item in [*deletions, *upsertions]:
        by_user[item.name].append(item)
    for user, items in by_user.items():
        mechanisms = [item.mechanism for item in items]
        if not user:
            errors[user] = (ErrorCode.unacceptable_credential, "Username must not be empty")
        elif any(m not in SCRAM_BY_TYPE for m in mechanisms):
            errors[user] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif len(set(mechanisms)) != len(mechanisms):
            errors[user] = (ErrorCode.duplicate_resource,
                            "A user credential cannot be altered twice in the same request")
        else:
            for item in items:
                if not hasattr(item, "iterations"):
                    continue
                minimum = SCRAM_MECHANISMS[SCRAM_BY_TYPE[item.mechanism]][2]
                if item.iterations < minimum:
                    errors[user] = (ErrorCode.unacceptable_credential, "Too few iterations")
                elif item.iterations > SCRAM_MAX_ITERATIONS:
                    errors[user] = (ErrorCode.unacceptable_credential, "Too many iterations")
                elif not item.salt or not item.salted_password:
                    errors[user] = (ErrorCode.unacceptable_credential, "Salt and salted password must be set")
    return errors, {user: items for user, items in by_user.items() if user not in errors}


def _apply(store, user: str, items) -> tuple[int, str | None]:
    """Blocking (ZooKeeper): one user's alterations, all or none."""
    existing = store.user_config(user)
    sets, deletes = {}, []
    for item in items:
        mechanism = SCRAM_BY_TYPE[item.mechanism]
        if hasattr(item, "iterations"):
            algorithm = SCRAM_MECHANISMS[mechanism][0]
            stored_key, server_key = scram_keys(algorithm, bytes(item.salted_password))
            sets[mechanism] = credential_to_string(bytes(item.salt), stored_key, server_key, item.iterations)
        elif mechanism not in existing:
            return ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
        else:
            deletes.append(mechanism)
    store.alter(user, sets, deletes)
    return ErrorCode.none, None


@api(51, 0, 0, tests=_TESTS)
async def handle_alter_user_scram_credentials(ctx, request):
    schema = response_schema_for(request)
    result_cls = nested(schema, "AlterUserScramCredentialsResult")
    errors, valid = validate(request.deletions, request.upsertions)
    if not await authorization.authorize_cluster(ctx, Operation.ALTER):  # Kafka: ALTER on the cluster
        errors = {user: (ErrorCode.cluster_authorization_failed, None) for user in [*errors, *valid]}
        valid = {}
    loop = asyncio.get_running_loop()
    store = getattr(ctx.edge, "scram_store", None)  # set by the edge actor (actors/edge.py)
    answers = dict(errors)
    for user, items in valid.items():
        try:
            answers[user] = await loop.run_in_executor(None, _apply, store, user, items)
        except Exception as exc:  # ZooKeeper unreachable
            answers[user] = (ErrorCode.unknown_server_error, internal_error(exc, "AlterUserScramCredentials"))
    return build(schema, throttle_time=ZERO_THROTTLE,
                 results=tuple(build(result_cls, user=user, error_code=error, error_message=message)
                               for user, (error, message) in answers.items()))
