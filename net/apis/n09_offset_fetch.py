"""OffsetFetch (9): committed offsets from the group's coordinator; one group
(v1-7) or several (v8+, each routed to its own coordinator: a group not
coordinated here gets NOT_COORDINATOR). Null topics = every committed
partition (v2+). require_stable (v7+, KIP-447) answers UNSTABLE_OFFSET_COMMIT
for partitions with a commit still being written. v10 names topics by id."""
import asyncio

from core.group_messages import OffsetFetch
from core.error_codes import ErrorCode

from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for

NO_OFFSET = -1


async def _fetch_group(edge, group_id: str, topics, by_id: bool, require_stable: bool, may,
                       member_id: str | None = None, member_epoch: int = -1):
    """-> (group error, [(topic key, [(partition, offset, epoch, metadata, error)])]).
    Kafka: DESCRIBE on the group, and on each topic (others are
    TOPIC_AUTHORIZATION_FAILED when named, left out of an all-partitions answer)."""
    if not may(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, []
    wanted = None
    order: list[tuple] = []  # (key, name, [partitions])
    unknown: set = set()
    denied: set = set()
    if topics is not None:
        wanted = []
        for t in topics:
            if by_id:
                info = edge.metadata.topics_by_id.get(t.topic_id)
                key, name = t.topic_id, (info.name if info else None)
                if name is None:
                    unknown.add(key)
            else:
                key = name = t.name
            order.append((key, name, list(t.partition_indexes)))
            if name is not None and not may(Operation.DESCRIBE, ResourceType.TOPIC, name):
                denied.add(key)
            elif name is not None:
                wanted.extend((name, p) for p in t.partition_indexes)
    # v9+ (KIP-848): a consumer group's member fetches at its member epoch.
    result_error, answer = await edge.group_call(group_id, "fetch_offsets",
                                                 OffsetFetch(group_id, wanted, require_stable, member_id, member_epoch))
    if result_error is not None:
        return result_error, []
    if answer.error != ErrorCode.none:
        return answer.error, []
    partitions = {tuple(tp): p for tp, p in answer.partitions.items()}
    if wanted is None:  # every committed partition, grouped by topic
        names: dict[str, list[int]] = {}
        for name, p in sorted(partitions):
            if not may(Operation.DESCRIBE, ResourceType.TOPIC, name):
                continue
            names.setdefault(name, []).append(p)
        for name, parts in names.items():
            if by_id:
                info = edge.metadata.topics.get(name)
                if info is None:
                    continue  # deleted topic: no id to name it by
                order.append((info.topic_id, name, parts))
            else:
                order.append((name, name, parts))
    out = []
    for key, name, parts in order:
        rows = []
        for p in parts:
            if key in unknown:
                rows.append((p, NO_OFFSET, -1, "", ErrorCode.unknown_topic_id))
                continue
            if key in denied:
                rows.append((p, NO_OFFSET, -1, "", ErrorCode.topic_authorization_failed))
                continue
            found = partitions.get((name, p))
            if found is None:
                rows.append((p, NO_OFFSET, -1, "", ErrorCode.none))
            else:
                rows.append((p, found.offset, found.leader_epoch, found.metadata, found.error))
        out.append((key, rows))
    return ErrorCode.none, out


@api(9, 1, 10, tests=("tests/integration/test_groups.py::test_killed_member_partitions_reassigned_offsets_resume",
                      "tests/integration/test_groups.py::test_offsets_wire_versions"))
async def handle_offset_fetch(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    require_stable = bool(getattr(request, "require_stable", False))
    by_id = ctx.api_version >= 10
    may = await authorization.checker(ctx)
    if has_field(type(request), "groups"):
        answers = await asyncio.gather(*(_fetch_group(edge, g.group_id, g.topics, by_id, require_stable, may,
                                                getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
                                         for g in request.groups))
        group_cls = nested(schema, "OffsetFetchResponseGroup")
        topic_cls = nested(schema, "OffsetFetchResponseTopics")
        part_cls = nested(schema, "OffsetFetchResponsePartitions")
        groups = []
        for g, (error, topics) in zip(request.groups, answers):
            groups.append(build(group_cls, group_id=g.group_id, error_code=error, topics=tuple(
                build(topic_cls, name=key, topic_id=key, partitions=tuple(
                    build(part_cls, partition_index=p, committed_offset=o, committed_leader_epoch=epoch,
                          metadata=meta, error_code=e) for p, o, epoch, meta, e in rows))
                for key, rows in topics)))
        return build(schema, throttle_time=ZERO_THROTTLE, groups=tuple(groups))
    error, topics = await _fetch_group(edge, request.group_id, request.topics, False, require_stable, may)
    topic_cls = nested(schema, "OffsetFetchResponseTopic")
    part_cls = nested(schema, "OffsetFetchResponsePartition")
    if error != ErrorCode.none and ctx.api_version < 2 and request.topics:
        # v0-1 have no top-level error: it goes on every partition.
        topics = [(t.name, [(p, NO_OFFSET, -1, "", error) for p in t.partition_indexes]) for t in request.topics]
    return build(schema, throttle_time=ZERO_THROTTLE, error_code=error, topics=tuple(
        build(topic_cls, name=key, partitions=tuple(
            build(part_cls, partition_index=p, committed_offset=o, committed_leader_epoch=epoch, metadata=meta,
                  error_code=e) for p, o, epoch, meta, e in rows))
        for key, rows in topics))
