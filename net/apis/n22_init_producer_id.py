"""InitProducerId (22).

Without a transactional id (an idempotent producer) any broker answers: a new
producer id at epoch 0 from this edge's block of ids (net/txn_coordinators.py;
blocks from ZooKeeper's /latest_producer_id_block), whatever id/epoch the
producer held (KIP-360: it asks again after UNKNOWN_PRODUCER_ID or an epoch
overflow). With a transactional id the transaction coordinator of that id
answers (epoch bump, fencing, abort of the previous epoch's open transaction);
a broker that does not host it answers NOT_COORDINATOR. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH below v4, as Kafka answers old clients. Served up to
v5 (v6 is KIP-939's two-phase commit).
"""
import logging

from core.error_codes import ErrorCode
from core.txn_messages import InitProducerId

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, response_schema_for, timedelta_ms

log = logging.getLogger("raykafka.edge.transactions")
NO_PRODUCER_ID, NO_PRODUCER_EPOCH = -1, -1


def routing(edge):
    """The edge's TransactionRouting (net/ports.TransactionCoordinators, built by EdgeService)."""
    return edge.transactions


@api(22, 0, 5, tests=("tests/integration/test_transactions_coordinator.py::test_idempotent_producer_gets_an_id",
                      "tests/integration/test_transactions_coordinator.py::test_init_transactions_and_fencing"))
async def handle_init_producer_id(ctx, request):
    schema = response_schema_for(request)

    def answer(error: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH):
        if error == ErrorCode.producer_fenced and ctx.api_version < 4:
            error = ErrorCode.invalid_producer_epoch
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, producer_id=producer_id,
                     producer_epoch=epoch)

    producer_id = int(getattr(request, "producer_id", NO_PRODUCER_ID))
    epoch = int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH))
    transactional_id = request.transactional_id
    # Kafka: WRITE on the transactional id; an idempotent producer needs
    # IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
    if transactional_id is not None:
        if not await authorization.authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return answer(ErrorCode.transactional_id_authorization_failed)
    elif not (await authorization.authorize_cluster(ctx, Operation.IDEMPOTENT_WRITE)
              or await authorization.authorize_by_resource_type(ctx, Operation.WRITE, ResourceType.TOPIC)):
        return answer(ErrorCode.cluster_authorization_failed)
    if (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        return answer(ErrorCode.invalid_request)
    edge = ctx.edge
    if transactional_id is None:
        try:
            return answer(ErrorCode.none, await routing(edge).generate_producer_id(), 0)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable, slow or exhausted
            log.warning("allocating a producer id failed: %s", str(exc).splitlines()[0][:300] if str(exc) else exc)
            # Retriable for every client (Kafka answers the same while its next block is on the way).
            return answer(ErrorCode.coordinator_load_in_progress)
    expected = None if producer_id == NO_PRODUCER_ID else (producer_id, epoch)
    error, result = await routing(edge).call(transactional_id, "init_producer_id",
                                             InitProducerId(transactional_id, timedelta_ms(request.transaction_timeout),
                                                            expected))
    if error is not None:
        return answer(error)
    return answer(ErrorCode(result.error), result.producer_id, result.producer_epoch)
