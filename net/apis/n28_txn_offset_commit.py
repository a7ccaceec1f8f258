"""TxnOffsetCommit (28, KIP-98): a transactional producer's
``sendOffsetsToTransaction``. The group's coordinator appends the offsets to
__consumer_offsets as a transactional batch of the producer (its id and
epoch) and keeps them pending until the producer's COMMIT or ABORT marker
reaches that partition (see cluster/groups/offset_requests.py
``txn_commit_offsets`` / ``complete_transaction``). v2 adds the leader
epoch; v3+ the member id, generation and group instance id, validated as
OffsetCommit validates them (KIP-447). v5 (KIP-890 part 2) has v4's fields;
its implicit AddOffsetsToTxn belongs to transaction protocol version 2, which
this broker does not advertise, so clients send v5 only after
AddOffsetsToTxn, as with v4. Partitions of topics this broker does not know
get UNKNOWN_TOPIC_OR_PARTITION, as Kafka checks in KafkaApis."""
from core.group_messages import OffsetToCommit, TxnOffsetCommit
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for


@api(28, 0, 5, tests=("tests/integration/test_txn_offset_commit.py::test_offsets_sent_to_a_committed_transaction",
                      "tests/integration/test_txn_offset_commit.py::test_offsets_sent_to_an_aborted_transaction",
                      "tests/unit/test_group_txn_offsets.py::test_pending_until_commit_marker"))
async def handle_txn_offset_commit(ctx, request):
    edge = ctx.edge
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets = {}
    # Kafka: WRITE on the transactional id, then READ on the group, then READ on each topic.
    may = await authorization.checker(ctx)
    denial = ErrorCode.transactional_id_authorization_failed \
        if not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id) \
        else ErrorCode.group_authorization_failed if not may(Operation.READ, ResourceType.GROUP, request.group_id) \
        else None
    for topic in request.topics:
        for part in topic.partitions:
            if denial is not None or not may(Operation.READ, ResourceType.TOPIC, topic.name):
                errors[(topic.name, part.partition_index)] = denial or ErrorCode.topic_authorization_failed
                continue
            if edge.metadata.partition(topic.name, part.partition_index) is None:
                errors[(topic.name, part.partition_index)] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[(topic.name, part.partition_index)] = OffsetToCommit(
                part.committed_offset, getattr(part, "committed_leader_epoch", -1), part.committed_metadata)
    if offsets:
        error, answer = await edge.group_call(
            request.group_id, "txn_commit_offsets",
            TxnOffsetCommit(request.group_id, request.producer_id, request.producer_epoch,
                            getattr(request, "member_id", ""), getattr(request, "group_instance_id", None),
                            getattr(request, "generation_id", -1), offsets),
            timeout_s=edge.config["offsets.commit.timeout.ms"] / 1000 + edge.call_timeout_s)
        if error is not None:
            errors.update({tp: error for tp in offsets})
        else:
            errors.update({tuple(tp): ErrorCode(e) for tp, e in answer.items()})
    if ctx.api_version < 2:
        # Producers before 2.0 fail on COORDINATOR_LOAD_IN_PROGRESS here
        # (KAFKA-7296); Kafka answers them COORDINATOR_NOT_AVAILABLE.
        errors = {tp: (ErrorCode.coordinator_not_available if e == ErrorCode.coordinator_load_in_progress else e)
                  for tp, e in errors.items()}
    schema = response_schema_for(request)
    topic_cls = nested(schema, "TxnOffsetCommitResponseTopic")
    part_cls = nested(schema, "TxnOffsetCommitResponsePartition")
    topics, index = [], {}
    for topic in request.topics:
        if topic.name not in index:
            index[topic.name] = len(topics)
            topics.append((topic.name, []))
        topics[index[topic.name]][1].extend(
            build(part_cls, partition_index=part.partition_index,
                  error_code=errors.get((topic.name, part.partition_index), ErrorCode.unknown_server_error))
            for part in topic.partitions)
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(
        build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in topics))
