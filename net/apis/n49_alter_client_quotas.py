"""AlterClientQuotas (49): set or remove user / client-id quotas in ZooKeeper
(cluster/quotas/zk_store.py; a users znode keeps its SCRAM credentials), each
write announced in /config/changes so every edge applies it. Entries succeed
or fail on their own, with Kafka's errors (ZkAdminManager.alterClientQuotas)."""
import asyncio

from core.error_codes import ErrorCode

from cluster.quotas import zk_store
from cluster.quotas.model import (CONTROLLER_MUTATION_RATE, DEFAULT, ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER,
                                  QUOTA_KEYS, QuotaEntity, quota_value_text)
from net import authorization
from net.authorization import Operation
from net.client_quotas import quotas_of
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for
from net.actor_calls import internal_error

_TESTS = ("tests/integration/test_quotas.py::test_describe_and_alter_client_quotas",
          "tests/unit/test_client_quotas.py::test_alter_validation")


class AlterError(Exception):
    pass


def parse_entity(parts) -> QuotaEntity:
    """The quota entity of an entry; AlterError (INVALID_REQUEST) with Kafka's message."""
    if not parts:
        raise AlterError("Invalid empty client quota entity")
    names: dict[str, str] = {}
    for part in parts:
        if part.entity_type not in (ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP):
            raise AlterError(f"Unhandled client quota entity type: {part.entity_type}")
        if part.entity_name is not None and part.entity_name == "":
            raise AlterError(f"Empty {part.entity_type} not supported")
        names[part.entity_type] = DEFAULT if part.entity_name is None else part.entity_name
    if ENTITY_IP in names:
        if len(names) > 1:
            raise AlterError("Invalid quota entity combination, IP entity should not be used with user/client ID "
                             "entity.")
        raise AlterError("IP quotas (connection_creation_rate) are not supported by this broker")
    return QuotaEntity(names.get(ENTITY_USER), names.get(ENTITY_CLIENT_ID))


def parse_ops(ops) -> tuple[dict[str, float], list[str]]:
    sets, removes = {}, []
    for op in ops:
        if op.remove:
            removes.append(op.key)
            continue
        if op.key not in QUOTA_KEYS:
            raise AlterError(f"Invalid configuration key {op.key}")
        if op.key == CONTROLLER_MUTATION_RATE:
            # Refused rather than stored and ignored: nothing here would enforce it.
            raise AlterError("controller_mutation_rate (KIP-599) is not enforced by this broker")
        try:
            quota_value_text(op.key, op.value)
        except ValueError as exc:
            raise AlterError(str(exc)) from None
        sets[op.key] = op.value
    return sets, removes


@api(49, 0, 1, tests=_TESTS)
async def handle_alter_client_quotas(ctx, request):
    schema = response_schema_for(request)
    entry_cls, entity_cls = nested(schema, "EntryData"), nested(schema, "EntityData")
    quotas = quotas_of(ctx.edge)
    loop = asyncio.get_running_loop()
    validate_only = bool(request.validate_only)
    allowed = await authorization.authorize_cluster(ctx, Operation.ALTER_CONFIGS)  # Kafka: on the cluster
    results = []
    for entry in request.entries:
        error, message = ErrorCode.none, None
        try:
            if not allowed:
                raise PermissionError()
            entity = parse_entity(entry.entity)
            sets, removes = parse_ops(entry.ops)
            await loop.run_in_executor(
                None, lambda: zk_store.alter(quotas.zk_client(), entity, sets, removes, validate_only))
        except PermissionError:
            error, message = ErrorCode.cluster_authorization_failed, None
        except AlterError as exc:
            error, message = ErrorCode.invalid_request, str(exc)
        except Exception as exc:  # ZooKeeper unreachable
            error, message = ErrorCode.unknown_server_error, internal_error(exc, "AlterClientQuotas")
        results.append(build(entry_cls, error_code=error, error_message=message,
                             entity=tuple(build(entity_cls, entity_type=part.entity_type,
                                                entity_name=part.entity_name) for part in entry.entity)))
    return build(schema, throttle_time=ZERO_THROTTLE, entries=tuple(results))
