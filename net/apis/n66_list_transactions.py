"""ListTransactions (66): the transactions of every coordinator on this
broker (admin clients ask every broker and merge), filtered by state,
producer id and (v1) how long they have been open. Unknown state names are
listed back, as Kafka does; COORDINATOR_LOAD_IN_PROGRESS while a coordinator
here is loading."""
import logging

from core.error_codes import ErrorCode
from core.txn_messages import ListTransactions

from net.apis.n22_init_producer_id import routing
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

log = logging.getLogger("raykafka.edge.transactions")

@api(66, 0, 1, tests=("tests/integration/test_transactions_coordinator.py::test_describe_and_list_transactions",))
async def handle_list_transactions(ctx, request):
    from cluster.transactions.log_records import TransactionState

    schema = response_schema_for(request)
    state_cls = nested(schema, "TransactionState")
    edge = ctx.edge
    states = list(request.state_filters)
    producer_ids = [int(p) for p in request.producer_id_filters]
    duration = int(getattr(request, "duration_filter", -1))
    error, listings = ErrorCode.none, []
    wanted = ListTransactions(producer_ids, states, duration)
    for failure, result in await routing(edge).each("list_transactions", wanted):
        if failure is not None:
            log.warning("ListTransactions: a coordinator failed: %s", failure.name)
            error = ErrorCode.coordinator_not_available
            continue
        code, _unknown, found = result
        if ErrorCode(code) != ErrorCode.none:
            error = ErrorCode(code)
        listings.extend(found)
    # Kafka: only the transactional ids the principal may DESCRIBE are listed.
    visible = await authorization.authorized(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                             [t.transactional_id for t in listings])
    listings = [t for t in listings if t.transactional_id in visible]
    unknown = sorted(s for s in states if TransactionState.from_kafka_name(s) is None)
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, unknown_state_filters=tuple(unknown),
                 transaction_states=() if error != ErrorCode.none else tuple(
                     build(state_cls, transactional_id=t.transactional_id, producer_id=t.producer_id,
                           transaction_state=t.state) for t in sorted(listings)))
