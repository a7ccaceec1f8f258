"""EndTxn (26): commit or abort. The coordinator writes PrepareCommit /
PrepareAbort and answers; the markers and the Complete state follow
(cluster/transactions/markers.py). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
below v2. Served up to v4: v5 is KIP-890's transaction version 2 (an epoch
bump per transaction), which this broker does not advertise."""
from core.error_codes import ErrorCode
from core.txn_messages import EndTxn

from net.apis.n22_init_producer_id import routing
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, response_schema_for


@api(26, 0, 4, tests=("tests/integration/test_transactions_coordinator.py::test_commit_and_abort",
                      "tests/integration/test_transactions_coordinator.py::test_init_transactions_and_fencing"))
async def handle_end_txn(ctx, request):
    schema = response_schema_for(request)
    if not await authorization.authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                         request.transactional_id):
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed)
    failure, result = await routing(ctx.edge).call(request.transactional_id, "end_txn",
                                                   EndTxn(request.transactional_id, request.producer_id,
                                                          request.producer_epoch, bool(request.committed)))
    error = failure if failure is not None else ErrorCode(result.error)
    if error == ErrorCode.producer_fenced and ctx.api_version < 2:
        error = ErrorCode.invalid_producer_epoch
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error)
