"""IncrementalAlterConfigs (44): SET / DELETE / APPEND / SUBTRACT per key on
topic configs, validated (INVALID_CONFIG naming the key) and applied by the
controller; running replicas take the change without a restart."""
from core.controller_messages import ConfigChange, ConfigOp, TopicOutcome
from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

TOPIC, BROKER = 2, 4


async def alter_via_controller(edge, changes: list[tuple[object, ConfigChange]], validate_only: bool, may=None):
    """changes: [(resource, its change)] -> [(resource, (error code, message))];
    may: the request's authorization checker (ALTER_CONFIGS, net/authorization.py)."""
    out: dict[int, tuple[ErrorCode, str | None]] = {}
    by_method: dict[str, list] = {"alter_topic_configs": [], "alter_broker_configs": []}
    for i, (resource, change) in enumerate(changes):
        denial = None if may is None else authorization.config_denial(
            may, Operation.ALTER_CONFIGS, resource.resource_type, resource.resource_name)
        if denial is not None:
            out[i] = (ErrorCode(int(denial)), "Authorization failed.")
        elif resource.resource_type == TOPIC:
            by_method["alter_topic_configs"].append((i, change))
        elif resource.resource_type == BROKER:
            # Dynamic broker configs: the replication throttle rates (the controller
            # refuses the rest with Kafka's "Cannot update these configs dynamically").
            by_method["alter_broker_configs"].append((i, change))
        else:
            out[i] = (ErrorCode.invalid_request, f"unsupported resource type {resource.resource_type}")
    for method, items in by_method.items():
        if not items:
            continue
        try:
            results = await edge.controller_call(method, [c for _, c in items], validate_only)
        except ActorCallFailed as exc:
            results = [TopicOutcome(c.name, exc.error, str(exc)) for _, c in items]
        for (i, _), r in zip(items, results):
            out[i] = (r.error, r.message)
    return [(resource, out[i]) for i, (resource, _) in enumerate(changes)]


@api(44, 0, 1, tests=("tests/integration/test_log_management.py::test_describe_and_alter_configs_confluent",))
async def handle_incremental_alter_configs(ctx, request):
    changes = [(r, ConfigChange(r.resource_name, ops=[ConfigOp(c.name, c.config_operation, c.value)
                                                      for c in r.configs]))
               for r in request.resources]
    results = await alter_via_controller(ctx.edge, changes, bool(request.validate_only),
                                         await authorization.checker(ctx))
    schema = response_schema_for(request)
    entry_cls = nested(schema, "AlterConfigsResourceResponse")
    return build(schema, throttle_time=ZERO_THROTTLE, responses=tuple(
        build(entry_cls, error_code=ErrorCode(code), error_message=message, resource_type=r.resource_type,
              resource_name=r.resource_name) for r, (code, message) in results))
