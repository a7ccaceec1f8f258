"""DescribeClientQuotas (48): the user / client-id quotas in ZooKeeper that
match a filter, as Kafka's ZkAdminManager.describeClientQuotas: a component
per entity type (EXACT name, DEFAULT, or any SPECIFIED), and with `strict`
only entities with no other parts."""
import asyncio

from core.error_codes import ErrorCode

from cluster.quotas import zk_store
from cluster.quotas.model import DEFAULT, ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER
from net import authorization
from net.authorization import Operation
from net.client_quotas import quotas_of
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for
from net.actor_calls import internal_error

_TESTS = ("tests/integration/test_quotas.py::test_describe_and_alter_client_quotas",
          "tests/unit/test_client_quotas.py::test_describe_filter")

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# A component's wanted name: ANY (a SPECIFIED component), DEFAULT, or a name.
ANY = object()


class FilterError(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error


def parse_filter(components) -> dict[str, object]:
    """{entity type: wanted name} from the request's components (Kafka's errors)."""
    wanted: dict[str, object] = {}
    for component in components:
        entity_type = component.entity_type
        if entity_type == "":
            raise FilterError(ErrorCode.invalid_request, "Unexpected empty filter component entity type")
        if entity_type not in (ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP):
            raise FilterError(ErrorCode.unsupported_version, f"Custom entity type '{entity_type}' not supported")
        if entity_type in wanted:
            name = {ENTITY_USER: "user", ENTITY_CLIENT_ID: "client", ENTITY_IP: "ip"}[entity_type]
            raise FilterError(ErrorCode.invalid_request, f"Duplicate {name} filter component entity type")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise FilterError(ErrorCode.invalid_request, "Unexpected null match string for type EXACT")
            wanted[entity_type] = component.match
        elif component.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if component.match is not None:
                kind = "DEFAULT" if component.match_type == MATCH_DEFAULT else "SPECIFIED"
                raise FilterError(ErrorCode.invalid_request, f"Unexpected match for type {kind}")
            wanted[entity_type] = DEFAULT if component.match_type == MATCH_DEFAULT else ANY
        else:
            raise FilterError(ErrorCode.invalid_request, f"Unexpected match type {component.match_type}")
    if ENTITY_IP in wanted and len(wanted) > 1:
        raise FilterError(ErrorCode.invalid_request,
                          "Invalid entity filter component combination, IP filter component should not be used "
                          "with user or clientId filter component.")
    return wanted


def matching(configs, wanted: dict[str, object], strict: bool) -> list:
    """[(QuotaEntity, {key: value})] of the quotas the filter selects."""
    if ENTITY_IP in wanted:
        return []  # no IP quotas are kept

    def matches(entity_type: str, name) -> bool:
        if entity_type not in wanted:
            return name is None or not strict
        want = wanted[entity_type]
        if want is ANY:
            return name is not None
        return name == want

    return [(entity, values) for entity, values in sorted(
        configs.entries.items(), key=lambda item: (item[0].user or "", item[0].client_id or ""))
        if matches(ENTITY_USER, entity.user) and matches(ENTITY_CLIENT_ID, entity.client_id)]


def _wire_name(name: str) -> str | None:
    return None if name == DEFAULT else name


@api(48, 0, 1, tests=_TESTS)
async def handle_describe_client_quotas(ctx, request):
    schema = response_schema_for(request)
    entry_cls, entity_cls, value_cls = (nested(schema, "EntryData"), nested(schema, "EntityData"),
                                        nested(schema, "ValueData"))
    if not await authorization.authorize_cluster(ctx, Operation.DESCRIBE_CONFIGS):  # Kafka: on the cluster
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                     error_message=None, entries=None)
    try:
        wanted = parse_filter(request.components)
    except FilterError as exc:
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=exc.error, error_message=str(exc),
                     entries=None)
    quotas = quotas_of(ctx.edge)
    try:
        configs = await asyncio.get_running_loop().run_in_executor(
            None, lambda: zk_store.read_all(quotas.zk_client()))
    except Exception as exc:  # ZooKeeper unreachable
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.unknown_server_error,
                     error_message=internal_error(exc, "DescribeClientQuotas"), entries=None)
    entries = []
    for entity, values in matching(configs, wanted, bool(request.strict)):
        parts = []
        if entity.user is not None:
            parts.append(build(entity_cls, entity_type=ENTITY_USER, entity_name=_wire_name(entity.user)))
        if entity.client_id is not None:
            parts.append(build(entity_cls, entity_type=ENTITY_CLIENT_ID, entity_name=_wire_name(entity.client_id)))
        entries.append(build(entry_cls, entity=tuple(parts),
                             values=tuple(build(value_cls, key=key, value=float(value))
                                          for key, value in sorted(values.items()))))
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                 entries=tuple(entries))
