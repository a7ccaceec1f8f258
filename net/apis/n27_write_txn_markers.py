"""WriteTxnMarkers (27), the wire form of what the transaction coordinators
do by actor calls: each marker goes to the leader replica of each partition
(``write_txn_markers``, acks=all); after a marker is written to an
__consumer_offsets partition its group coordinator completes the producer's
pending offset commits. Partitions this broker does not lead answer
NOT_LEADER_OR_FOLLOWER, unknown ones UNKNOWN_TOPIC_OR_PARTITION, as Kafka."""
import asyncio
import functools
import logging

from core.error_codes import ErrorCode

from cluster.transactions.marker_writer import TxnMarkerWriter, WrittenMarkers
from core.txn_messages import TxnCompletion, TxnMarker, TxnMarkerResult
from net import authorization
from net.actor_calls import ActorCallFailed
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

log = logging.getLogger("raykafka.edge.transactions")
MARKER_TIMEOUT_MS = 30000


async def _write(edge, topic: str, partition: int, markers: list[TxnMarker]) -> list[ErrorCode]:
    info = edge.metadata.partition(topic, partition)
    if info is None:
        return [ErrorCode.unknown_topic_or_partition] * len(markers)
    if info.leader != edge.broker_id or not edge.leaders.leads(topic, partition):
        return [ErrorCode.not_leader_or_follower] * len(markers)
    # The one marker write path (cluster/transactions/marker_writer.py), over this edge's ports.
    writer = TxnMarkerWriter(functools.partial(_write_to_leader, edge),
                             functools.partial(_complete_group_transactions, edge))
    return [ErrorCode(r.error) for r in await writer.write(topic, partition, markers)]


async def _write_to_leader(edge, topic: str, partition: int, markers: list[TxnMarker]) -> WrittenMarkers:
    try:  # a hibernated replica wakes for it (issue 30)
        results = await edge.leaders.write_txn_markers(topic, partition, markers, MARKER_TIMEOUT_MS)
    except ActorCallFailed as exc:  # gone or moving (NOT_LEADER_OR_FOLLOWER), or slow (REQUEST_TIMED_OUT)
        log.info("WriteTxnMarkers to %s-%d failed: %s", topic, partition, ErrorCode(exc.error).name)
        return WrittenMarkers([TxnMarkerResult(ErrorCode(exc.error), -1)] * len(markers), edge.broker_id)
    return WrittenMarkers([TxnMarkerResult(*r) for r in results], edge.broker_id)


async def _complete_group_transactions(edge, partition: int, leader: int, done: list[TxnCompletion]) -> None:
    for completion in done:
        failure, _ = await edge.coordinators.partition_call(partition, "complete_transaction", completion)
        if failure is not None and failure != ErrorCode.not_coordinator:  # not_coordinator: not led here
            log.warning("completing producer %d's offsets on __consumer_offsets-%d failed: %s",
                        completion.producer_id, partition, failure.name)


@api(27, 1, 1, tests=("tests/integration/test_transactions_coordinator.py::test_write_txn_markers_wire",))
async def handle_write_txn_markers(ctx, request):
    schema = response_schema_for(request)
    edge = ctx.edge
    # Group the markers by destination: one leader call per partition.
    by_partition: dict[tuple[str, int], list[tuple[int, TxnMarker]]] = {}
    for index, m in enumerate(request.markers):
        marker = TxnMarker(int(m.producer_id), int(m.producer_epoch), int(m.coordinator_epoch),
                           bool(m.transaction_result))
        for t in m.topics:
            for p in t.partition_indexes:
                by_partition.setdefault((t.name, int(p)), []).append((index, marker))
    keys = list(by_partition)
    if await authorization.authorize_cluster(ctx, Operation.CLUSTER_ACTION):
        answers = await asyncio.gather(*(_write(edge, t, p, [mk for _, mk in by_partition[(t, p)]]) for t, p in keys))
    else:  # Kafka: only brokers (CLUSTER_ACTION) write markers
        answers = [[ErrorCode.cluster_authorization_failed] * len(by_partition[k]) for k in keys]
    errors: dict[tuple[int, str, int], ErrorCode] = {}
    for (topic, partition), answer in zip(keys, answers):
        for (index, _), error in zip(by_partition[(topic, partition)], answer):
            errors[(index, topic, partition)] = error
    result_cls = nested(schema, "WritableTxnMarkerResult")
    topic_cls = nested(schema, "WritableTxnMarkerTopicResult")
    part_cls = nested(schema, "WritableTxnMarkerPartitionResult")
    return build(schema, markers=tuple(
        build(result_cls, producer_id=m.producer_id, topics=tuple(
            build(topic_cls, name=t.name, partitions=tuple(
                build(part_cls, partition_index=p, error_code=errors[(index, t.name, int(p))])
                for p in t.partition_indexes))
            for t in m.topics))
        for index, m in enumerate(request.markers)))
