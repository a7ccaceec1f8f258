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
from net.txn_verification import Verdict, transactional_producer, verify
from net.apis.n22_init_producer_id import routing
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
    future.set_result(failed_append(code, message=message))
    return future


def _record_errors(error_cls, result) -> tuple:
    """KIP-467's per-record errors (v8+): the batch index and message of
    each record that failed the set, so the client fails exactly those."""
    if error_cls is None or not result.error or not result.record_errors:
        return ()
    return tuple(build(error_cls, batch_index=index, batch_index_error_message=message)
                 for index, message in result.record_errors)


def _precheck(edge, may, acks, name, unknown, part):
    """-> (error, message) answered without the leader, or None."""
    if name is not None and not may(Operation.WRITE, ResourceType.TOPIC, name):
        return ErrorCode.topic_authorization_failed, None
    if name in INTERNAL_TOPICS:  # ReplicaManager: even a super user's append is refused
        return ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}"
    if acks not in (0, 1, -1):
        return ErrorCode.invalid_required_acks, None
    info = edge.metadata.partition(name, part.index) if name is not None else None
    if info is None:
        return unknown, None
    if info.leader != edge.broker_id or not edge.leaders.leads(name, part.index):
        return ErrorCode.not_leader_or_follower, None
    problem = _single_batch_error(part.records or b"")
    if problem is not None:
        return ErrorCode.invalid_record, problem
    return None


def _issue(edge, entries, acks: int, timeout_ms: int, txn_denied: bool, refused: dict, epochs: dict) -> list:
    """Hand every partition's records to its appender, in request order, with
    no await in between (that keeps pipelined requests in order); ``epochs``
    gets the leader epoch each append was made under."""
    pending = []
    for topic, name, parts in entries:
        futures = []
        for part, problem in parts:
            verdict = refused.get((name, part.index))
            if txn_denied:
                fut = _immediate(ErrorCode.transactional_id_authorization_failed)
            elif problem is not None:
                fut = _immediate(*problem)
            elif verdict is not None:
                fut = _immediate(verdict.error, verdict.message)
            else:
                info = edge.metadata.partition(name, part.index)
                epochs[(name, part.index)] = info.leader_epoch
                fut = edge.leaders.append(name, part.index, bytes(part.records or b""), acks, timeout_ms,
                                          info.leader_epoch)
            futures.append((part.index, fut))
        pending.append((topic, name, futures))
    return pending


@api(0, 3, 13, advertised_min_version=0,
     tests=("tests/integration/test_clients.py::test_produce_consume_roundtrip",
            "tests/integration/test_protocol_edge.py::test_produce_errors"))
async def handle_produce(ctx, request):
    edge = ctx.edge
    acks = request.acks
    timeout_ms = timedelta_ms(request.timeout)
    by_id = edge.metadata.topics_by_id
    # Kafka's checks: WRITE on the transactional id (every partition fails
    # without it, and so does a request with transactional batches but no
    # transactional id), then WRITE on each topic, before anything else.
    may = await authorization.checker(ctx)
    txn_id = getattr(request, "transactional_id", None)
    txn_denied = txn_id is not None and not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    entries = []  # (topic, name, [(part, error answered without the leader, or None)])
    epochs = {}  # (topic, partition) -> the leader epoch its append was made under
    producers = set()  # transactional batches' (producer id, epoch)
    transactional = []  # the partitions they go to: the ones verified (KIP-890)
    for topic in request.topic_data:
        if has_field(type(topic), "topic_id") and not has_field(type(topic), "name"):
            info = by_id.get(topic.topic_id)
            name = info.name if info else None
            unknown = ErrorCode.unknown_topic_id
        else:
            name = topic.name
            unknown = ErrorCode.unknown_topic_or_partition
        parts = []
        for part in topic.partition_data:
            problem = _precheck(edge, may, acks, name, unknown, part)
            if problem is None and (producer := transactional_producer(part.records)) is not None:
                producers.add(producer)
                transactional.append((name, part.index))
            parts.append((part, problem))
        entries.append((topic, name, parts))
    appendable = [(name, part.index) for _, name, parts in entries for part, problem in parts if problem is None]
    refused = {}
    if producers and txn_id is None:
        txn_denied = True
    elif len(producers) > 1:  # Kafka: "Transactional records contained more than one producer ID"
        refused = {tp: Verdict(ErrorCode.invalid_producer_id_mapping, None) for tp in appendable}
    verifying = bool(producers) and not txn_denied and not refused and \
        edge.config.get("transaction.partition.verification.enable", True)
    conn = ctx.conn
    before = getattr(conn, "produce_gate", None)
    if not verifying and (before is None or before.done()):
        pending = _issue(edge, entries, acks, timeout_ms, txn_denied, refused, epochs)
    else:
        # Verification awaits the coordinator; the appends of this connection's
        # later requests wait until this one's are issued, so they stay in order.
        mine = asyncio.get_running_loop().create_future()
        if conn is not None:
            conn.produce_gate = mine
        try:
            if verifying:
                refused = await verify(routing(edge), txn_id, next(iter(producers)), transactional)
            if before is not None:
                await before
            pending = _issue(edge, entries, acks, timeout_ms, txn_denied, refused, epochs)
        finally:
            mine.set_result(None)
            if conn is not None and conn.produce_gate is mine:
                conn.produce_gate = None

    results = []
    for topic, name, futures in pending:
        parts = []
        for index, fut in futures:
            parts.append((index, await fut))
        results.append((topic, name, parts))

    if acks == -1:
        # DelayedProduce: wait at each leader replica until its HW has passed
        # what we appended (unless it already has, e.g. a sole replica); the
        # leader answers in the step that moves the HW (cluster/commit_waiters.py),
        # mostly through the append call's commit notice (net/replica_router.py).
        waiting = {(name, index): result for _, name, parts in results for index, result in parts
                   if result.error == ErrorCode.none and result.high_watermark < result.last_offset + 1}
        if waiting:
            statuses = await edge.wait_committed(
                [(t, p, r.last_offset + 1, epochs[(t, p)]) for (t, p), r in waiting.items()], timeout_ms)
            for _, name, parts in results:
                for i, (index, result) in enumerate(parts):
                    if (name, index) in waiting:
                        parts[i] = (index, result._replace(
                            error=statuses.get((name, index), ErrorCode.request_timed_out)))

    if acks == 0:
        # No response; Kafka signals a failed acks=0 produce by closing the connection.
        for _, _, parts in results:
            for _index, result in parts:
                if result.error != ErrorCode.none:
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
