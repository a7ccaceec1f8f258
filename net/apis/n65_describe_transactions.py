"""DescribeTransactions (65): each transactional id from its coordinator
(NOT_COORDINATOR when this broker does not host it: admin clients look the
coordinator up per id first), TRANSACTIONAL_ID_NOT_FOUND for an unknown id."""
import asyncio
import datetime

from core.error_codes import ErrorCode
from core.txn_messages import DescribeTransactions

from net.apis.n22_init_producer_id import routing
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


def _at(ms: int) -> datetime.datetime:
    """Any int64 millisecond value, -1 (no transaction open) included."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


async def _describe(edge, transactional_id: str):
    from cluster.transactions.coordinator import TransactionDescription

    error, answer = await routing(edge).call(transactional_id, "describe_transactions",
                                             DescribeTransactions((transactional_id,)))
    if error is not None:
        return TransactionDescription(error, transactional_id)
    return answer[0]


def _denied(transactional_id: str):
    from cluster.transactions.coordinator import TransactionDescription

    return TransactionDescription(ErrorCode.transactional_id_authorization_failed, transactional_id)


@api(65, 0, 0, tests=("tests/integration/test_transactions_coordinator.py::test_describe_and_list_transactions",))
async def handle_describe_transactions(ctx, request):
    schema = response_schema_for(request)
    state_cls = nested(schema, "TransactionState")
    topic_cls = nested(schema, "TopicData")
    ids = list(request.transactional_ids)
    # Kafka: DESCRIBE on each transactional id; partitions of topics the principal may not DESCRIBE are left out.
    may = await authorization.checker(ctx)
    answers = await asyncio.gather(*(
        _describe(ctx.edge, t) if may(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t)
        else authorization.answer(_denied(t)) for t in ids))
    out = []
    for d in answers:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in d.partitions:
            if not may(Operation.DESCRIBE, ResourceType.TOPIC, topic):
                continue
            by_topic.setdefault(topic, []).append(partition)
        out.append(build(state_cls, error_code=ErrorCode(d.error), transactional_id=d.transactional_id,
                         transaction_state=d.state, transaction_timeout=datetime.timedelta(milliseconds=d.timeout_ms),
                         transaction_start_time=_at(d.start_timestamp_ms),
                         producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                         topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    return build(schema, throttle_time=ZERO_THROTTLE, transaction_states=tuple(out))
