"""ApiVersions (18): built from the handler registry, so advertised == implemented."""
from core.error_codes import ErrorCode

from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


@api(18, 0, 4, tests=("tests/integration/test_protocol_edge.py::test_api_versions_matches_registry",
                      "tests/integration/test_protocol_edge.py::test_api_versions_unknown_version_answers_v0"))
async def handle_api_versions(ctx, request):
    schema = response_schema_for(request)
    if ctx.api_version >= 3 and ctx.conn is not None:
        ctx.conn.client_software = (request.client_software_name, request.client_software_version)
    return build(
        schema,
        error_code=ErrorCode.none,
        api_keys=ctx.edge.api_versions_entries(nested(schema, "ApiVersion")),
        throttle_time=ZERO_THROTTLE,
    )
