"""ListPartitionReassignments (46): the controller lists the moves in
progress (current replicas, adding, removing) for the partitions asked about,
or for every partition when the topic list is null; partitions not being
moved, and unknown topics, are left out of the answer."""
from core.controller_messages import ListReassignmentsResult, OngoingReassignment
from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for, timedelta_ms


@api(46, 0, 0, tests=(
    "tests/unit/test_admin_partition_apis.py::test_list_reassignments_groups_ongoing_moves_per_topic",
    "tests/unit/test_admin_partition_apis.py::test_list_reassignments_controller_unreachable",
    "tests/integration/test_controller.py::test_reassignment_moves_replicas_while_a_consumer_reads",
))
async def handle_list_partition_reassignments(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    topic_cls = nested(schema, "OngoingTopicReassignment")
    partition_cls = nested(schema, "OngoingPartitionReassignment")
    partitions = None if request.topics is None else [
        (t.name, p) for t in request.topics for p in t.partition_indexes]
    timeout_ms = timedelta_ms(request.timeout)

    def failed(code: ErrorCode, message: str) -> ListReassignmentsResult:
        # Kafka's error answer echoes every partition asked about, with no replicas, beside the top-level code.
        return ListReassignmentsResult(code, message, [OngoingReassignment(t, p, [], [], [])
                                                       for t, p in partitions or ()])

    if not await authorization.authorize_cluster(ctx, Operation.DESCRIBE):
        answer = failed(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    else:
        try:
            answer = await edge.controller_call("list_partition_reassignments", partitions, timeout_ms,
                                                timeout_s=max(timeout_ms / 1000, 0) + edge.call_timeout_s)
        except ActorCallFailed as exc:
            answer = failed(exc.error, str(exc))
    by_topic: dict[str, list] = {}
    for r in answer.results:
        by_topic.setdefault(r.topic, []).append(build(
            partition_cls, partition_index=r.partition, replicas=tuple(r.replicas),
            adding_replicas=tuple(r.adding_replicas), removing_replicas=tuple(r.removing_replicas)))
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=answer.error,
                 error_message=answer.message,
                 topics=tuple(build(topic_cls, name=name, partitions=tuple(ps)) for name, ps in by_topic.items()))
