"""AlterConfigs (33): replaces a topic's whole override set (the legacy API;
IncrementalAlterConfigs is the per-key one). Applied by the controller, which
stores it in /config/topics/<t> and pushes it to running replicas."""
from core.controller_messages import ConfigChange
from core.error_codes import ErrorCode

from net.apis.n44_incremental_alter_configs import alter_via_controller
from net import authorization
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


@api(33, 0, 2, tests=("tests/integration/test_log_management.py::test_describe_and_alter_configs_kafka_python",))
async def handle_alter_configs(ctx, request):
    changes = [(r, ConfigChange(r.resource_name, replace={c.name: c.value for c in r.configs}))
               for r in request.resources]
    results = await alter_via_controller(ctx.edge, changes, bool(request.validate_only),
                                         await authorization.checker(ctx))
    schema = response_schema_for(request)
    entry_cls = nested(schema, "AlterConfigsResourceResponse")
    return build(schema, throttle_time=ZERO_THROTTLE, responses=tuple(
        build(entry_cls, error_code=ErrorCode(code), error_message=message, resource_type=r.resource_type,
              resource_name=r.resource_name) for r, (code, message) in results))
