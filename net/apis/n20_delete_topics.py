"""DeleteTopics (20): the controller stops and deletes every replica, removes
the topic's znodes and pushes the new metadata before answering."""
from core.controller_messages import TopicOutcome
from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for, timedelta_ms


@api(20, 1, 6, tests=("tests/integration/test_clients.py::test_create_and_delete_topics",))
async def handle_delete_topics(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    result_cls = nested(schema, "DeletableTopicResult")
    cache = edge.metadata
    # v0-5 carry names; v6 carries (name | topic id) entries.
    entries = []
    by_id: set[str] = set()  # names the client gave only as a topic id
    if has_field(type(request), "topic_names"):
        entries = [(name, None) for name in request.topic_names]
    else:
        for t in request.topics:
            if t.name is not None:
                entries.append((t.name, t.topic_id))
            else:
                info = cache.topics_by_id.get(t.topic_id)
                entries.append((info.name if info else None, t.topic_id))
                if info is not None:
                    by_id.add(info.name)
    names = [name for name, _ in entries if name is not None]
    deletable = await authorization.authorized(ctx, Operation.DELETE, ResourceType.TOPIC, names)
    denied = {n for n in names if n not in deletable}  # Kafka: DELETE on each topic
    names = [n for n in names if n in deletable]
    timeout_ms = timedelta_ms(request.timeout)
    outcome: dict[str, TopicOutcome] = {}
    if names:
        try:
            answered = await edge.controller_call("delete_topics", names,
                                                  timeout_s=max(timeout_ms / 1000, 0) + edge.call_timeout_s)
            outcome = {o.name: o for o in answered}
        except ActorCallFailed as exc:
            outcome = {n: TopicOutcome(n, exc.error, str(exc)) for n in names}  # Kafka's message (net/actor_calls.py)
    results = []
    for name, topic_id in entries:
        if name is None:
            code, message = ErrorCode.unknown_topic_id, None
        elif name in denied:
            code, message = ErrorCode.topic_authorization_failed, None
        else:
            _, code, message = outcome.get(name, TopicOutcome(name, ErrorCode.unknown_topic_or_partition))
        if name in denied and name in by_id:
            name = None  # Kafka: an unauthorized principal does not learn the name behind an id
        results.append(build(result_cls, name=name, topic_id=topic_id, error_code=ErrorCode(code),
                             error_message=message))
    return build(schema, throttle_time=ZERO_THROTTLE, responses=tuple(results))
