"""Metadata (3): brokers, controller and topics from the cache; unknown topics
are auto-created through the controller when the client and the broker allow it."""
from core.controller_messages import CreateTopicSpec
from core.error_codes import ErrorCode

from core.naming import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, topic_name_error
from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import CLUSTER_NAME, Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for

OPERATIONS_OMITTED = -(2**31)
# Internal topics are created by the controller from their own spec only.
INTERNAL_TOPIC_CREATORS = {OFFSETS_TOPIC: "ensure_offsets_topic",
                           TRANSACTION_STATE_TOPIC: "ensure_transaction_state_topic"}


async def _auto_create(edge, names: list[str]) -> dict[str, tuple[int, str | None]]:
    config = edge.config
    answers = {}
    for name, method in INTERNAL_TOPIC_CREATORS.items():
        if name in names:  # from its own spec, as Kafka's AutoTopicCreationManager does
            names = [n for n in names if n != name]
            failure = await edge.coordinators.ensure_topic(name, method)
            answers[name] = (ErrorCode.leader_not_available, None) if failure is not None else (ErrorCode.none, None)
    if not names:
        return answers
    specs = [CreateTopicSpec(n, config["num.partitions"], config["default.replication.factor"]) for n in names]
    try:
        results = await edge.controller_call("create_topics", specs, False)
    except ActorCallFailed:
        return {**answers, **{n: (ErrorCode.leader_not_available, None) for n in names}}
    return {**answers, **{r.name: (r.error, r.message) for r in results}}


@api(3, 0, 13, tests=("tests/integration/test_clients.py::test_metadata_and_auto_create",))
async def handle_metadata(ctx, request):
    edge = ctx.edge
    cache = edge.metadata
    schema = response_schema_for(request)
    broker_cls = nested(schema, "MetadataResponseBroker")
    topic_cls = nested(schema, "MetadataResponseTopic")
    part_cls = nested(schema, "MetadataResponsePartition")

    requested = request.topics
    if requested is None or (ctx.api_version == 0 and len(requested) == 0):
        names = sorted(cache.topics)
        by_id_errors, by_id = [], {}
    else:
        names, by_id_errors = [], []
        by_id: dict[str, object] = {}  # names asked for by topic id -> the id
        for t in requested:
            name = getattr(t, "name", None)
            if name is None and getattr(t, "topic_id", None) is not None:
                info = cache.topics_by_id.get(t.topic_id)
                if info is None:
                    by_id_errors.append(t.topic_id)
                    continue
                name = info.name
                by_id[name] = t.topic_id
            names.append(name)

    errors: dict[str, tuple[int, str | None]] = {}
    # Kafka: topics the principal may not DESCRIBE are left out of an
    # all-topics answer and TOPIC_AUTHORIZATION_FAILED when named.
    may = await authorization.checker(ctx)
    if requested is None or (ctx.api_version == 0 and len(requested) == 0):
        names = [n for n in names if may(Operation.DESCRIBE, ResourceType.TOPIC, n)]
    else:
        errors.update((n, (ErrorCode.topic_authorization_failed, None)) for n in names
                      if not may(Operation.DESCRIBE, ResourceType.TOPIC, n))
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    to_create = []
    for name in names:
        if name in cache.topics or name in errors:
            continue
        problem = topic_name_error(name)
        if problem:
            errors[name] = (ErrorCode.invalid_topic_exception, problem)
        elif allow_auto and edge.config["auto.create.topics.enable"]:
            if may(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or \
                    may(Operation.CREATE, ResourceType.TOPIC, name):
                to_create.append(name)
            else:
                errors[name] = (ErrorCode.topic_authorization_failed, None)
        else:
            errors[name] = (ErrorCode.unknown_topic_or_partition, None)
    if to_create:
        created = await _auto_create(edge, to_create)
        for name, (code, message) in created.items():
            if code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                errors[name] = (code, message)
            elif name not in cache.topics:
                errors[name] = (ErrorCode.leader_not_available, None)

    topics = []
    for name in names:
        info = cache.topics.get(name)
        if info is None or name in errors:
            code = errors.get(name, (ErrorCode.unknown_topic_or_partition, None))[0]
            if name in by_id and code == ErrorCode.topic_authorization_failed:
                # Kafka: a topic asked for by id that the principal may not describe
                # keeps its name to itself (null name, the id echoed).
                topics.append(build(topic_cls, error_code=ErrorCode(code), name=None, topic_id=by_id[name],
                                    is_internal=False, partitions=(), topic_authorized_operations=OPERATIONS_OMITTED))
                continue
            topics.append(build(topic_cls, error_code=ErrorCode(code), name=name, topic_id=None,
                                is_internal=False, partitions=(),
                                topic_authorized_operations=OPERATIONS_OMITTED))
            continue
        partitions = tuple(
            build(part_cls,
                  error_code=ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
                  partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
                  replica_nodes=p.replicas, isr_nodes=p.isr, offline_replicas=p.offline)
            for index, p in sorted(info.partitions.items())
        )
        topics.append(build(topic_cls, error_code=ErrorCode.none, name=name, topic_id=info.topic_id,
                            is_internal=info.internal, partitions=partitions,
                            topic_authorized_operations=authorization.operations_field(may, ResourceType.TOPIC, name)
                            if getattr(request, "include_topic_authorized_operations", False)
                            else OPERATIONS_OMITTED))
    for topic_id in by_id_errors:
        topics.append(build(topic_cls, error_code=ErrorCode.unknown_topic_id, name=None, topic_id=topic_id,
                            is_internal=False, partitions=(), topic_authorized_operations=OPERATIONS_OMITTED))

    from net.listeners import broker_address  # the endpoints of the listener the client came in on

    brokers = tuple(build(broker_cls, node_id=b.broker_id, host=address[0], port=address[1], rack=b.rack)
                    for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
                    for address in (broker_address(ctx, b),))
    return build(schema, throttle_time=ZERO_THROTTLE, brokers=brokers, cluster_id=cache.cluster_id,
                 controller_id=cache.controller_id, topics=tuple(topics), error_code=ErrorCode.none,
                 cluster_authorized_operations=authorization.operations_field(
                     may, ResourceType.CLUSTER, CLUSTER_NAME)
                 if getattr(request, "include_cluster_authorized_operations", False) else OPERATIONS_OMITTED)
