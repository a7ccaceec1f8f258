"""DescribeCluster (60): brokers, cluster id and controller from the metadata cache."""
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import CLUSTER_NAME, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

# Kafka's "authorized operations omitted" marker (INT32_MIN).
OPERATIONS_OMITTED = -(2**31)


@api(60, 0, 2, tests=("tests/integration/test_clients.py::test_admin_describe_cluster",))
async def handle_describe_cluster(ctx, request):
    schema = response_schema_for(request)
    broker_cls = nested(schema, "DescribeClusterBroker")
    cache = ctx.edge.metadata
    if getattr(request, "endpoint_type", 1) != 1:
        # endpoint_type 2 (controllers) is a KRaft notion; this is a ZooKeeper-mode cluster.
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
                     error_message="only broker endpoints are served", endpoint_type=request.endpoint_type,
                     cluster_id=cache.cluster_id or "", controller_id=-1, brokers=(),
                     cluster_authorized_operations=OPERATIONS_OMITTED)
    from net.listeners import broker_address  # the endpoints of the listener the client came in on

    brokers = tuple(
        build(broker_cls, broker_id=b.broker_id, host=address[0], port=address[1], rack=b.rack, is_fenced=False)
        for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
        for address in (broker_address(ctx, b),)
    )
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                 endpoint_type=1, cluster_id=cache.cluster_id or "", controller_id=cache.controller_id,
                 brokers=brokers, cluster_authorized_operations=authorization.operations_field(
                     await authorization.checker(ctx), ResourceType.CLUSTER, CLUSTER_NAME)
                 if getattr(request, "include_cluster_authorized_operations", False) else OPERATIONS_OMITTED)
