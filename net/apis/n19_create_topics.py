"""CreateTopics (19): validated and applied by the active controller, which
answers once leaders are elected and every edge has the new metadata."""
from core.error_codes import ErrorCode

from core.controller_messages import CreateTopicResult, CreateTopicSpec
from core.naming import INTERNAL_TOPICS
from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for, timedelta_ms


@api(19, 2, 7, tests=("tests/integration/test_clients.py::test_create_and_delete_topics",))
async def handle_create_topics(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    result_cls = nested(schema, "CreatableTopicResult")
    config_cls = nested(schema, "CreatableTopicConfigs") if ctx.api_version >= 5 else None
    specs = []
    seen: dict[str, int] = {}
    for t in request.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
        specs.append(CreateTopicSpec(t.name, t.num_partitions, t.replication_factor,
                                     {a.partition_index: list(a.broker_ids) for a in t.assignments},
                                     {c.name: c.value for c in t.configs}))
    duplicates = {name for name, count in seen.items() if count > 1}
    specs = [s for s in specs if s.name not in duplicates]
    denied = set()
    if not await authorization.authorize_cluster(ctx, Operation.CREATE):
        # Kafka: CREATE on the cluster, or else on each topic
        creatable = await authorization.authorized(ctx, Operation.CREATE, ResourceType.TOPIC,
                                                   [s.name for s in specs])
        denied = {s.name for s in specs if s.name not in creatable}
        specs = [s for s in specs if s.name in creatable]
    # Internal topics come only from their own spec (the controller's
    # ensure_offsets_topic / ensure_transaction_state_topic, on first use): a
    # client must not pre-create one with another partition count or cleanup policy.
    internal = {s.name for s in specs if s.name in INTERNAL_TOPICS and s.name not in edge.metadata.topics}
    specs = [s for s in specs if s.name not in internal]
    timeout_ms = timedelta_ms(request.timeout)
    try:
        results = await edge.controller_call("create_topics", specs, bool(request.validate_only), timeout_ms,
                                             timeout_s=max(timeout_ms / 1000, 0) + edge.call_timeout_s)
    except ActorCallFailed as exc:
        results = [CreateTopicResult(s.name, exc.error, str(exc)) for s in specs]
    results.extend(CreateTopicResult(name, ErrorCode.topic_authorization_failed, "Authorization failed.")
                   for name in sorted(denied))
    results.extend(CreateTopicResult(name, ErrorCode.invalid_request,
                                     f"{name} is an internal topic: it is created by its coordinator on first use")
                   for name in sorted(internal))
    for name in sorted(duplicates):
        # Kafka: a topic named twice in one request is INVALID_REQUEST for that topic.
        results.append(CreateTopicResult(name, ErrorCode.invalid_request,
                                         f"Create topics request from client contains multiple "
                                         f"entries for the following topics: {name}"))
    topics = []
    may = await authorization.checker(ctx)
    for r in results:
        ok = r.error == ErrorCode.none
        # Kafka: a created topic's configs, partitions and replication factor
        # are answered only with DESCRIBE_CONFIGS on it (topic_config_error_code).
        hidden = not may(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, r.name)
        configs = None
        if config_cls is not None and ok:
            configs = () if hidden else tuple(build(config_cls, name=k, value=v["value"], read_only=False,
                                                    config_source=v["source"], is_sensitive=False)
                                              for k, v in sorted(r.configs.items()))
        attempted = r.name not in denied and r.name not in duplicates
        topics.append(build(
            result_cls, name=r.name, topic_id=r.topic_id if ok else None,
            error_code=r.error, error_message=r.message,
            topic_config_error_code=ErrorCode.topic_authorization_failed if hidden and (ok or not attempted)
            else ErrorCode.none,
            num_partitions=r.num_partitions if ok and not hidden else -1,
            replication_factor=r.replication_factor if ok and not hidden else -1,
            configs=configs))
    return build(schema, throttle_time=ZERO_THROTTLE, topics=tuple(topics))
