"""AlterPartitionReassignments (45): the controller starts (replicas given)
or cancels (replicas null) a move per partition and answers per partition;
the copying itself goes on after the answer. A partition named twice in one
request is refused here with INVALID_REQUEST and never reaches the controller."""
from core.controller_messages import PartitionReassignment
from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for, timedelta_ms


@api(45, 0, 0, tests=(
    "tests/unit/test_admin_partition_apis.py::test_alter_reassignments_forwards_moves_and_cancels",
    "tests/unit/test_admin_partition_apis.py::test_alter_reassignments_duplicate_partition_is_invalid_request",
    "tests/unit/test_admin_partition_apis.py::test_alter_reassignments_controller_unreachable",
    "tests/integration/test_controller.py::test_reassignment_moves_replicas_while_a_consumer_reads",
))
async def handle_alter_partition_reassignments(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    topic_cls = nested(schema, "ReassignableTopicResponse")
    partition_cls = nested(schema, "ReassignablePartitionResponse")
    counts: dict[tuple[str, int], int] = {}
    for t in request.topics:
        for p in t.partitions:
            counts[(t.name, p.partition_index)] = counts.get((t.name, p.partition_index), 0) + 1
    duplicates = {key for key, count in counts.items() if count > 1}
    reassignments = [PartitionReassignment(t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
                     for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in duplicates]
    top_code, top_message = ErrorCode.none, None
    outcome: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    if not await authorization.authorize_cluster(ctx, Operation.ALTER):
        top_code, top_message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    elif reassignments:
        timeout_ms = timedelta_ms(request.timeout)
        try:
            answer = await edge.controller_call("alter_partition_reassignments", reassignments, timeout_ms,
                                                timeout_s=max(timeout_ms / 1000, 0) + edge.call_timeout_s)
            top_code, top_message = answer.error, answer.message
            outcome = {(r.topic, r.partition): (r.error, r.message) for r in answer.results}
        except ActorCallFailed as exc:
            # Kafka's error answer: the top-level code, repeated on every partition asked about.
            top_code, top_message = exc.error, str(exc)
    for key in duplicates:
        outcome[key] = (ErrorCode.invalid_request, f"Duplicate partition {key[0]}-{key[1]} in request.")
    by_topic: dict[str, list] = {}
    answered: set[tuple[str, int]] = set()
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if key in answered:
                continue
            answered.add(key)
            code, message = outcome.get(key) or (
                (top_code, top_message) if top_code else
                (ErrorCode.unknown_server_error, "the controller gave no answer for this partition"))
            by_topic.setdefault(t.name, []).append(build(
                partition_cls, partition_index=p.partition_index, error_code=ErrorCode(code), error_message=message))
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode(top_code), error_message=top_message,
                 responses=tuple(build(topic_cls, name=name, partitions=tuple(ps)) for name, ps in by_topic.items()))
