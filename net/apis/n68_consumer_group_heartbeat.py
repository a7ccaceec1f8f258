"""ConsumerGroupHeartbeat (68, KIP-848): a member of a consumer group joins
(epoch 0), heartbeats, acknowledges revocations by reporting what it owns,
and leaves (-1, or -2 for a static member coming back). The group's
coordinator (cluster/groups/consumer) answers with the member epoch and, when
it changed, the assignment. The edge hands it the topics it knows, so that
subscriptions and regexes resolve to topic ids (Kafka evaluates regexes on
the broker)."""
from core.error_codes import ErrorCode

from cluster.groups.consumer import ConsumerHeartbeat
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for, timedelta_ms

TESTS = ("tests/integration/test_consumer_protocol.py::test_consumer_protocol_members_join_and_leave_under_load",
         "tests/integration/test_consumer_protocol.py::test_classic_and_consumer_members_share_a_group_during_upgrade",
         "tests/integration/test_consumer_protocol.py::test_group_downgrades_to_classic_when_the_last_consumer_member_leaves",
         "tests/unit/test_group_migration.py::test_last_consumer_member_leaving_downgrades_to_a_classic_group",
         "tests/unit/test_group_consumer_protocol.py::test_join_reconcile_no_double_ownership")


def _answer(request, error, message=None, member_id=None, epoch=-1, interval_ms=0, assignment=None):
    schema = response_schema_for(request)
    built = None
    if assignment is not None:
        tp_cls, assignment_cls = nested(schema, "TopicPartitions"), nested(schema, "Assignment")
        built = build(assignment_cls, topic_partitions=tuple(
            build(tp_cls, topic_id=topic_id, partitions=tuple(partitions)) for topic_id, partitions in assignment))
    import datetime
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, error_message=message, member_id=member_id,
                 member_epoch=epoch, heartbeat_interval=datetime.timedelta(milliseconds=interval_ms),
                 assignment=built)


@api(68, 0, 1, tests=TESTS)
async def handle_consumer_group_heartbeat(ctx, request):
    edge = ctx.edge
    if not await authorization.authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _answer(request, ErrorCode.group_authorization_failed)
    names = request.subscribed_topic_names
    if names:
        allowed = await authorization.authorized(ctx, Operation.DESCRIBE, ResourceType.TOPIC, names)
        if set(names) - allowed:
            return _answer(request, ErrorCode.topic_authorization_failed)
    if not request.group_id:
        return _answer(request, ErrorCode.invalid_request, "GroupId can't be empty.")
    if await edge.ensure_offsets_topic() is not None:
        return _answer(request, ErrorCode.coordinator_not_available)
    from net.apis.n11_join_group import client_host

    owned = request.topic_partitions
    heartbeat = ConsumerHeartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=timedelta_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=None if owned is None else tuple((tp.topic_id, tuple(tp.partitions)) for tp in owned),
        client_id=ctx.header.client_id or "", client_host=client_host(ctx), api_version=ctx.api_version)
    error, result = await edge.coordinators.group_call_with_topics(request.group_id, "consumer_group_heartbeat",
                                                                   heartbeat)
    if error is not None:
        return _answer(request, error)
    return _answer(request, ErrorCode(result.error), result.error_message, result.member_id, result.member_epoch,
                   result.heartbeat_interval_ms, result.assignment)
