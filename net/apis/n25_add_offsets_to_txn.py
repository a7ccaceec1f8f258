"""AddOffsetsToTxn (25): the group's __consumer_offsets partition joins the
transaction (Kafka's handleAddOffsetsToTxnRequest: AddPartitions of that
partition), so the coordinator writes a marker there at the end and the group
coordinator completes the transaction's TxnOffsetCommits. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH below v2."""
from core.error_codes import ErrorCode
from core.txn_messages import AddPartitionsToTxn

from net.apis.n22_init_producer_id import routing
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, response_schema_for


@api(25, 0, 4, tests=("tests/integration/test_transactions_coordinator.py::test_send_offsets_to_transaction",))
async def handle_add_offsets_to_txn(ctx, request):
    from core.naming import OFFSETS_TOPIC

    schema = response_schema_for(request)
    edge = ctx.edge
    # Kafka: WRITE on the transactional id, READ on the group.
    if not await authorization.authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                         request.transactional_id):
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed)
    if not await authorization.authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.group_authorization_failed)
    error = await edge.ensure_offsets_topic()
    partition = edge.group_partition(request.group_id) if error is None else None
    if error is None and partition is None:
        error = ErrorCode.coordinator_not_available
    if error is None:
        failure, code = await routing(edge).call(request.transactional_id, "add_partitions", AddPartitionsToTxn(
            request.transactional_id, request.producer_id, request.producer_epoch, [(OFFSETS_TOPIC, partition)]))
        error = failure if failure is not None else ErrorCode(code)
    if error == ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error)
