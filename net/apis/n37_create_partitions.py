"""CreatePartitions (37): the controller checks each topic's new count (it
must grow: INVALID_PARTITIONS otherwise) and any manual assignment, writes
the new partitions and answers once they have leaders. The edge only refuses
what Kafka refuses before the controller sees it: a topic named twice."""
from core.controller_messages import CreatePartitionsSpec, TopicOutcome
from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for, timedelta_ms


@api(37, 0, 3, tests=(
    "tests/unit/test_admin_partition_apis.py::test_create_partitions_forwards_specs_every_version",
    "tests/unit/test_admin_partition_apis.py::test_create_partitions_duplicate_topic_is_invalid_request",
    "tests/unit/test_admin_partition_apis.py::test_create_partitions_controller_unreachable",
    "tests/integration/test_controller.py::test_create_partitions_grows_a_topic_and_new_partitions_serve",
))
async def handle_create_partitions(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    result_cls = nested(schema, "CreatePartitionsTopicResult")
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    duplicates = {name for name, count in counts.items() if count > 1}
    alterable = await authorization.authorized(ctx, Operation.ALTER, ResourceType.TOPIC, counts)
    denied = {name for name in counts if name not in alterable and name not in duplicates}  # Kafka: ALTER topic
    specs = [CreatePartitionsSpec(
        t.name, t.count,
        # One broker list per new partition, in partition order; null = the controller places them.
        None if t.assignments is None else [list(a.broker_ids) for a in t.assignments],
    ) for t in request.topics if t.name not in duplicates and t.name not in denied]
    results: list[TopicOutcome] = []
    if specs:
        timeout_ms = timedelta_ms(request.timeout)
        try:
            results = await edge.controller_call("create_partitions", specs, bool(request.validate_only),
                                                 timeout_s=max(timeout_ms / 1000, 0) + edge.call_timeout_s)
        except ActorCallFailed as exc:
            results = [TopicOutcome(s.name, exc.error, str(exc)) for s in specs]
    results.extend(TopicOutcome(name, ErrorCode.topic_authorization_failed, "Authorization failed.")
                   for name in sorted(denied))
    for name in sorted(duplicates):
        # Kafka answers a duplicated topic once, with INVALID_REQUEST, and applies none of its entries.
        results.append(TopicOutcome(name, ErrorCode.invalid_request, "Duplicate topic in request."))
    return build(schema, throttle_time=ZERO_THROTTLE, results=tuple(
        build(result_cls, name=r.name, error_code=r.error, error_message=r.message) for r in results))
