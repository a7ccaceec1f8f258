"""ElectLeaders (43): the controller runs a preferred (0) or unclean (1)
election per partition and answers per partition, ELECTION_NOT_NEEDED where
the wanted leader already leads. v0 has no election type: it means preferred."""
from core.controller_messages import ElectLeadersResult, PartitionOutcome
from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for, timedelta_ms

PREFERRED, UNCLEAN = 0, 1


def requested_partitions(request) -> list[tuple[str, int]] | None:
    """(topic, partition) in request order without repeats; None = every partition.
    The Java client sends a set; a repeat would name one election twice."""
    if request.topic_partitions is None:
        return None
    seen: dict[tuple[str, int], None] = {}
    for t in request.topic_partitions:
        for p in t.partitions:
            seen.setdefault((t.topic, p), None)
    return list(seen)


def failed(partitions: list[tuple[str, int]] | None, code: ErrorCode, message: str) -> ElectLeadersResult:
    """Kafka's error answer: the top-level code, repeated on every requested partition."""
    return ElectLeadersResult(code, [PartitionOutcome(t, p, code, message) for t, p in partitions or ()])


@api(43, 0, 2, tests=(
    "tests/unit/test_admin_partition_apis.py::test_elect_leaders_groups_results_per_topic_every_version",
    "tests/unit/test_admin_partition_apis.py::test_elect_leaders_all_partitions_hides_election_not_needed",
    "tests/unit/test_admin_partition_apis.py::test_elect_leaders_unknown_election_type_is_invalid_request",
    "tests/unit/test_admin_partition_apis.py::test_elect_leaders_controller_unreachable",
    "tests/integration/test_controller.py::test_elect_leaders_api_restores_preferred_leaders_after_a_node_returns",
))
async def handle_elect_leaders(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    topic_cls = nested(schema, "ReplicaElectionResult")
    partition_cls = nested(schema, "PartitionResult")
    election_type = request.election_type if has_field(type(request), "election_type") else PREFERRED
    partitions = requested_partitions(request)
    if not await authorization.authorize_cluster(ctx, Operation.ALTER):
        outcome = failed(partitions, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    elif election_type not in (PREFERRED, UNCLEAN):
        outcome = failed(partitions, ErrorCode.invalid_request, f"Unknown election type {election_type}")
    elif partitions == []:
        outcome = ElectLeadersResult()
    else:
        timeout_ms = timedelta_ms(request.timeout)
        try:
            outcome = await edge.controller_call("elect_leaders", election_type, partitions, timeout_ms,
                                                 timeout_s=max(timeout_ms / 1000, 0) + edge.call_timeout_s)
        except ActorCallFailed as exc:
            outcome = failed(partitions, exc.error, str(exc))
    results = outcome.results
    if partitions is None:
        # An election over every partition lists only the partitions that moved or failed.
        results = [r for r in results if r.error != ErrorCode.election_not_needed]
    by_topic: dict[str, list] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(build(
            partition_cls, partition_id=r.partition, error_code=r.error, error_message=r.message))
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=outcome.error,
                 replica_election_results=tuple(
                     build(topic_cls, topic=topic, partition_result=tuple(ps)) for topic, ps in by_topic.items()))
