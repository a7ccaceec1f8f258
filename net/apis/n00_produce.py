"""Produce (0): record batches stay opaque bytes; each partition's sets go to
the leader replica through its coalescing appender, in arrival order."""
import asyncio

from core.error_codes import ErrorCode

from core.naming import INTERNAL_TOPICS
from core.replica_messages import failed_append
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, millis_to_datetime, nested, \
    response_schema_for, timedelta_ms
from net.server import CloseConnection
from storage.record_batch import HEADER_SIZE, parse_header


def _single_batch_error(records: bytes) -> str | None:
    """Produce v3+ carries exactly one record batch per partition (Kafka's
    ProduceRequest.validateRecords); only the first header is read."""
    if len(records) >= HEADER_SIZE:
        size = parse_header(records, 0).batch_length + 12
        if 0 < size < len(records):
            return "Produce requests with version 3 and above are only allowed to contain exactly one record batch"
    return None


def _immediate(code: ErrorCode, message: str | None = None):
    future = asyncio.get_running_loop().create_future()
    future.set_result(failed_append(int(code), message=message))
    return future


def _record_errors(error_cls, result) -> tuple:
    """KIP-467's per-record errors (v8+): the batch index and message of
    each record that failed the set, so the client fails exactly those."""
    if error_cls is None or not result.error or not result.record_errors:
        return ()
    return tuple(build(error_cls, batch_index=index, batch_index_error_message=message)
                 for index, message in result.record_errors)


@api(0, 3, 13, advertised_min_version=0,
     tests=("tests/integration/test_clients.py::test_produce_consume_roundtrip",
            "tests/integration/test_protocol_edge.py::test_produce_errors"))
async def handle_produce(ctx, request):
    edge = ctx.edge
    acks = request.acks
    timeout_ms = timedelta_ms(request.timeout)
    by_id = edge.metadata.topics_by_id
    # Kafka's checks: WRITE on the transactional id (every partition fails
    # without it), then WRITE on each topic, before anything else.
    may = await authorization.checker(ctx)
    txn_id = getattr(request, "transactional_id", None)
    txn_denied = txn_id is not None and not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    # Issue every append before the first await: that is what keeps appends of
    # pipelined requests on one connection in order.
    pending = []
    epochs = {}  # (topic, partition) -> the leader epoch its append was made under
    for topic in request.topic_data:
        if has_field(type(topic), "topic_id") and not has_field(type(topic), "name"):
            info = by_id.get(topic.topic_id)
            name = info.name if info else None
            unknown = ErrorCode.unknown_topic_id
        else:
            name = topic.name
            unknown = ErrorCode.unknown_topic_or_partition
        futures = []
        for part in topic.partition_data:
            if txn_denied:
                fut = _immediate(ErrorCode.transactional_id_authorization_failed)
            elif name is not None and not may(Operation.WRITE, ResourceType.TOPIC, name):
                fut = _immediate(ErrorCode.topic_authorization_failed)
            elif name in INTERNAL_TOPICS:  # ReplicaManager: even a super user's append is refused
                fut = _immediate(ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}")
            elif acks not in (0, 1, -1):
                fut = _immediate(ErrorCode.invalid_required_acks)
            else:
                info = edge.metadata.partition(name, part.index) if name is not None else None
                if info is None:
                    fut = _immediate(unknown)
                elif info.leader != edge.broker_id or edge.leader_handle(name, part.index) is None:
                    fut = _immediate(ErrorCode.not_leader_or_follower)
                elif (problem := _single_batch_error(part.records or b"")) is not None:
                    fut = _immediate(ErrorCode.invalid_record, problem)
                else:
                    epochs[(name, part.index)] = info.leader_epoch
                    fut = edge.appender(name, part.index).append(
                        bytes(part.records or b""), acks, timeout_ms, info.leader_epoch)
            futures.append((part.index, fut))
        pending.append((topic, name, futures))

    results = []
    for topic, name, futures in pending:
        parts = []
        for index, fut in futures:
            parts.append((index, await fut))
        results.append((topic, name, parts))

    if acks == -1:
        # DelayedProduce: wait at each leader replica until its HW has passed
        # what we appended (unless it already has, e.g. a sole replica); the
        # leader answers in the step that moves the HW (cluster/commit_waiters.py).
        waiting = {(name, index): result for _, name, parts in results for index, result in parts
                   if result.error == 0 and result.high_watermark < result.last_offset + 1}
        if waiting:
            statuses = await edge.wait_committed(
                [(t, p, r.last_offset + 1, epochs[(t, p)]) for (t, p), r in waiting.items()], timeout_ms)
            for _, name, parts in results:
                for i, (index, result) in enumerate(parts):
                    if (name, index) in waiting:
                        parts[i] = (index, result._replace(
                            error=statuses.get((name, index), int(ErrorCode.request_timed_out))))

    if acks == 0:
        # No response; Kafka signals a failed acks=0 produce by closing the connection.
        for _, _, parts in results:
            for _index, result in parts:
                if result.error != 0:
                    raise CloseConnection(f"acks=0 produce failed with error {result.error}")
        return None

    schema = response_schema_for(request)
    topic_cls = nested(schema, "TopicProduceResponse")
    part_cls = nested(schema, "PartitionProduceResponse")
    error_cls = nested(schema, "BatchIndexAndErrorMessage") if has_field(part_cls, "record_errors") else None
    responses = []
    for topic, _, parts in results:
        partition_responses = tuple(
            build(part_cls, index=index, error_code=ErrorCode(r.error), base_offset=r.base_offset,
                  log_append_time=millis_to_datetime(r.log_append_time), log_start_offset=r.log_start_offset,
                  record_errors=_record_errors(error_cls, r), error_message=r.error_message if r.error else None)
            for index, r in parts
        )
        responses.append(build(topic_cls, name=getattr(topic, "name", None),
                               topic_id=getattr(topic, "topic_id", None),
                               partition_responses=partition_responses))
    return build(schema, responses=tuple(responses), throttle_time=ZERO_THROTTLE)
