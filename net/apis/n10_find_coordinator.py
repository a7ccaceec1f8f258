"""FindCoordinator (10): the broker whose node leads the group's
__consumer_offsets partition (Kafka's partitionFor: Java hashCode of the
group id modulo the partition count), from this edge's metadata cache.

The first GROUP lookup creates __consumer_offsets through the controller, as
Kafka creates it lazily. TRANSACTION keys: the leader of the transactional
id's __transaction_state partition (the same hash), the topic created by the
first lookup (net/txn_coordinators.py). Batched keys from v4. SHARE (v6) keys
INVALID_REQUEST (no share groups).
"""
import asyncio

from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for

KEY_GROUP, KEY_TRANSACTION = 0, 1

_MESSAGES = {
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.invalid_request: "Only GROUP and TRANSACTION coordinator keys are served.",
}


async def find_group_coordinator(edge, group_id: str) -> tuple[ErrorCode, int, str, int]:
    """-> (error, node id, host, port) of the coordinator of ``group_id``."""
    from core.naming import OFFSETS_TOPIC

    failure = await edge.ensure_offsets_topic()
    if failure is not None:
        return failure, -1, "", -1
    partition = edge.group_partition(group_id)
    info = None if partition is None else edge.metadata.partition(OFFSETS_TOPIC, partition)
    broker = None if info is None else edge.metadata.brokers.get(info.leader)
    if broker is None:
        return ErrorCode.coordinator_not_available, -1, "", -1
    return ErrorCode.none, broker.broker_id, broker.host, broker.port


async def _find_any(edge, key_type: int, key: str):
    if key_type == KEY_GROUP:
        return await find_group_coordinator(edge, key or "")
    if key_type == KEY_TRANSACTION:
        from net.apis.n22_init_producer_id import routing

        return await routing(edge).find(key or "")
    return ErrorCode.invalid_request, -1, "", -1


async def _find(ctx, key_type: int, key: str):
    """The coordinator, with its endpoint on the listener the request came in on."""
    # Kafka: DESCRIBE on the group or transactional id.
    resource, denied = {KEY_GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
                        KEY_TRANSACTION: (ResourceType.TRANSACTIONAL_ID,
                                          ErrorCode.transactional_id_authorization_failed)}.get(key_type, (None, None))
    if resource is not None and not await authorization.authorize(ctx, Operation.DESCRIBE, resource, key or ""):
        return denied, -1, "", -1
    error, node, host, port = await _find_any(ctx.edge, key_type, key)
    broker = ctx.edge.metadata.brokers.get(node) if node >= 0 else None
    if broker is not None and getattr(ctx.conn, "listener", None) is not None:
        from net.listeners import broker_address

        host, port = broker_address(ctx, broker)
    return error, node, host, port


@api(10, 0, 6, tests=("tests/integration/test_groups.py::test_find_coordinator_batched_and_key_types",
                      "tests/integration/test_groups.py::test_three_members_share_six_partitions",
                      "tests/integration/test_transactions_coordinator.py::test_find_transaction_coordinator"))
async def handle_find_coordinator(ctx, request):
    schema = response_schema_for(request)
    key_type = getattr(request, "key_type", KEY_GROUP)
    if has_field(type(request), "coordinator_keys"):
        keys = list(request.coordinator_keys)
        answers = await asyncio.gather(*(_find(ctx, key_type, k) for k in keys))
        coordinator_cls = nested(schema, "Coordinator")
        return build(schema, throttle_time=ZERO_THROTTLE, coordinators=tuple(
            build(coordinator_cls, key=key, node_id=node, host=host, port=port, error_code=error,
                  error_message=_MESSAGES.get(error) if error else None)
            for key, (error, node, host, port) in zip(keys, answers)))
    error, node, host, port = await _find(ctx, key_type, request.key)
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error,
                 error_message=_MESSAGES.get(error) if error else None, node_id=node, host=host, port=port)
