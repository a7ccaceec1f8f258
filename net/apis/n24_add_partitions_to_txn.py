"""AddPartitionsToTxn (24).

v0-v3 (clients): one transaction; every partition answers the transaction's
error. v4+ (KIP-890, batched, as brokers send it): several transactions, each
answered on its own, ``verify_only`` asks whether the partitions are already
in the transaction (TRANSACTION_ABORTABLE for those that are not). As in
KafkaApis, a partition of a topic this broker does not know fails the whole
transaction: UNKNOWN_TOPIC_OR_PARTITION for it and OPERATION_NOT_ATTEMPTED for
the others. The coordinator answers NOT_COORDINATOR when this broker does not
host it; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
"""
from core.error_codes import ErrorCode
from core.txn_messages import AddPartitionsToTxn, VerifyTxnPartitions

from net.apis.n22_init_producer_id import routing
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


async def _one(edge, version: int, transactional_id: str, producer_id: int, epoch: int, verify_only: bool,
               topics, may=authorization._allow_all) -> dict:
    """-> {(topic, partition): error}. Kafka: WRITE on the transactional id
    (else every partition fails), WRITE on each topic."""
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    if not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {tp: ErrorCode.transactional_id_authorization_failed for tp in wanted}
    denied = {tp for tp in wanted if not may(Operation.WRITE, ResourceType.TOPIC, tp[0])}
    unknown = {tp for tp in wanted if edge.metadata.partition(*tp) is None}
    if unknown or denied:
        return {tp: (ErrorCode.topic_authorization_failed if tp in denied else ErrorCode.unknown_topic_or_partition if tp in unknown
                     else ErrorCode.operation_not_attempted) for tp in wanted}
    if not wanted:
        return {}
    if verify_only:
        error, answer = await routing(edge).call(transactional_id, "verify_partitions",
                                                 VerifyTxnPartitions(transactional_id, producer_id, epoch, wanted))
        if error is not None:
            return {tp: error for tp in wanted}
        return {tuple(tp): ErrorCode(code) for tp, code in answer.items()}
    error, code = await routing(edge).call(transactional_id, "add_partitions",
                                           AddPartitionsToTxn(transactional_id, producer_id, epoch, wanted))
    error = error if error is not None else ErrorCode(code)
    if error == ErrorCode.producer_fenced and version < 2:
        error = ErrorCode.invalid_producer_epoch
    return {tp: error for tp in wanted}


def _topic_results(schema, errors: dict) -> tuple:
    topic_cls = nested(schema, "AddPartitionsToTxnTopicResult")
    part_cls = nested(schema, "AddPartitionsToTxnPartitionResult")
    by_topic: dict[str, list] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(build(part_cls, partition_index=partition,
                                                    partition_error_code=error))
    return tuple(build(topic_cls, name=topic, results_by_partition=tuple(parts))
                 for topic, parts in by_topic.items())


@api(24, 0, 5, tests=("tests/integration/test_transactions_coordinator.py::test_commit_and_abort",
                      "tests/integration/test_transactions_coordinator.py::test_add_partitions_wire_versions"))
async def handle_add_partitions_to_txn(ctx, request):
    import asyncio

    schema = response_schema_for(request)
    edge = ctx.edge
    may = await authorization.checker(ctx)
    if ctx.api_version < 4:
        errors = await _one(edge, ctx.api_version, request.v3_and_below_transactional_id,
                            request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, False,
                            request.v3_and_below_topics, may)
        return build(schema, throttle_time=ZERO_THROTTLE, results_by_topic_v3_and_below=_topic_results(schema, errors))
    transactions = list(request.transactions)
    if not may(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, authorization.CLUSTER_NAME):
        # v4+ is the brokers' batched form: Kafka wants CLUSTER_ACTION
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                     results_by_transaction=())
    answers = await asyncio.gather(*(_one(edge, ctx.api_version, t.transactional_id, t.producer_id, t.producer_epoch,
                                          t.verify_only, t.topics, may) for t in transactions))
    result_cls = nested(schema, "AddPartitionsToTxnResult")
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(
        build(result_cls, transactional_id=t.transactional_id, topic_results=_topic_results(schema, errors))
        for t, errors in zip(transactions, answers)))
