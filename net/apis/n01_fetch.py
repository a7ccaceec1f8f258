"""Fetch (1): reads from local leader replicas, which answer with file slices
of their segments; when fewer than min_bytes are ready it long-polls the
replicas until data arrives or max_wait passes (DelayedFetch).

Large slices are answered as file regions (net/file_region.py), read only
when the response is written: on a plain TCP connection they go from the
segment files to the socket with sendfile; over TLS they are read and
encrypted a chunk at a time (net/server.py), so queued responses hold file
descriptors, not their bytes. Small slices (and every slice with
RAYKAFKA_VERIFY_FETCH) are read by the edge when the fetch is answered.

The response is filled up to the request's max_bytes (cut to the broker's
fetch.max.bytes) across partitions and partition_max_bytes per partition,
with KIP-74's exception for the first batch (_fit_to_budget)."""
import asyncio
import logging
import os
import time

from core.error_codes import ErrorCode
from core.replica_messages import PartitionOffset

from net.actor_calls import ActorCallFailed
from net.client_quotas import fetch_window_bytes
from net.file_region import FileRecords, SplicedResponse, release
from net.fetch_session import FINAL_EPOCH, FetchSessionCache, FetchSessionError, SessionPartition
from net import authorization
from net.authorization import Operation, ResourceType
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, has_field, nested, response_schema_for, timedelta_ms
from net.server import CloseConnection

_NO_DATA = (None, -1, -1, -1)
# The longest a consumer's fetch waits for data (actors/partition_leader.py's
# MAX_CONSUMER_WAIT_MS); a client asking more gets its empty answer then.
MAX_FETCH_WAIT_MS = 60_000
# Debugging aid: verify every served batch's CRC (costs a CRC pass over fetched bytes).
_VERIFY = os.environ.get("RAYKAFKA_VERIFY_FETCH") == "1"
# Measurement aid: RAYKAFKA_FETCH_SENDFILE=0 serves every fetch as bytes (the
# path before sendfile), for A/B runs of the same build.
_SENDFILE = os.environ.get("RAYKAFKA_FETCH_SENDFILE", "1") != "0"
log = logging.getLogger("raykafka.fetch")


def _batches_valid(records: bytes) -> bool:
    from storage.record_batch import validate_batches

    try:
        validate_batches(records, None, from_client=False, allow_partial_tail=True)
        return True
    except Exception:
        return False


class _Wanted:
    __slots__ = ("topic", "topic_id", "partition", "offset", "max_bytes", "leader_epoch", "error",
                 "records", "hw", "lso", "log_start", "end", "session_partition", "aborted")

    def __init__(self, topic, topic_id, partition, offset, max_bytes, leader_epoch, error=None):
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.error = error
        self.records = b""
        self.hw = self.lso = self.log_start = -1
        self.end = -1
        # read_committed: (producer id, first offset) of the aborted transactions the records overlap
        self.aborted = ()


def _set_records(want: _Wanted, records) -> None:
    release(want.records)  # a long-poll reads again: drop the regions of the previous read
    want.records = records


async def _read(edge, want: _Wanted, isolation: int, zero_copy: bool, min_bytes: int = 0,
                wait_ms: int = 0) -> None:
    """Read one partition from its leader replica; with wait_ms > 0 the read
    is parked in the replica until min_bytes are there (see ReplicaActor.read).
    It asks for a run of consecutive reads and keeps the rest for the
    client's next fetches (net/fetch_read_ahead.py)."""
    if not edge.leaders.leads(want.topic, want.partition):
        want.error = ErrorCode.not_leader_or_follower
        return
    runs = edge.read_ahead_runs
    if isolation == 1:
        # read_committed answers carry their aborted transactions, which the
        # edge's caches of reads and of its own appends do not hold.
        runs = 0
    elif runs:
        hit = edge.read_ahead.take(want.topic, want.partition, want.offset, want.max_bytes, want.leader_epoch,
                                   isolation)
        if hit is not None and _serve(edge, want, isolation, zero_copy, 0, *hit):
            return
    tail = edge.local_tail if isolation != 1 else None
    if tail is not None:
        key = (want.topic, want.partition, want.offset, want.max_bytes, want.leader_epoch, isolation, min_bytes)
        hit = tail.take(*key)
        if hit is None and wait_ms > 0 and tail.expects(want.topic, want.partition, want.offset, want.leader_epoch):
            # The consumer waits for the next append, which is likely to come
            # through this edge: wait for it here rather than in the replica.
            started = time.monotonic()
            await tail.wait(want.topic, want.partition, min(wait_ms / 1000, tail.wait_s))
            hit = tail.take(*key)
            wait_ms = max(0, wait_ms - int((time.monotonic() - started) * 1000))
        if hit is not None and _serve(edge, want, isolation, zero_copy, 0, *hit):
            return
    for _attempt in range(3):
        try:
            answer = await edge.leaders.read_run(
                want.topic, want.partition, want.offset, want.max_bytes, isolation, want.leader_epoch, min_bytes,
                wait_ms, 1 + runs, timeout_s=wait_ms / 1000 + edge.call_timeout_s)
        except ActorCallFailed as exc:
            want.error = exc.error
            return
        read = answer.slices  # the runs: ReadRun, or CommittedReadRun with read_committed
        hw, lso, log_start = answer.high_watermark, answer.last_stable_offset, answer.log_start_offset
        if isolation == 1:
            want.aborted = read[0].aborted if read else ()
        elif len(read) > 1:
            edge.read_ahead.put(want.topic, want.partition, want.max_bytes, want.leader_epoch, isolation,
                                hw, lso, log_start, read[1:])
        if _serve(edge, want, isolation, zero_copy, answer.error, hw, lso, log_start, read[0].slices if read else []):
            return
    want.error = ErrorCode.unknown_server_error


def _serve(edge, want: _Wanted, isolation: int, zero_copy: bool, error: int, hw: int, lso: int,
           log_start: int, slices) -> bool:
    """Fill ``want`` from a replica's answer; False when a slice's file is
    gone (deleted or truncated since the answer): then ask again."""
    want.error = ErrorCode(error)
    want.hw, want.lso, want.log_start = hw, lso, log_start
    want.end = lso if isolation == 1 else hw
    if error != ErrorCode.none or not slices:
        _set_records(want, b"")
        return True
    try:
        _set_records(want, edge.read_records(slices, zero_copy))
    except FileNotFoundError:
        edge.forget_cached_reads(want.topic, want.partition)
        return False
    if _VERIFY and not _batches_valid(want.records):
        log.error("fetch %s-%d@%d served a corrupt batch from slices %s", want.topic, want.partition,
                  want.offset, slices)
    return True


async def _fit_to_budget(edge, wanted: list, max_bytes: int, isolation: int, zero_copy: bool) -> None:
    """Cut the partitions' records to the response's budget, in request
    order, as Kafka's ReplicaManager.readFromLog does: each partition gets
    at most min(its partition_max_bytes, what the budget has left), and the
    first batch of the first non-empty partition is kept whole even when it
    alone is larger (KIP-74), so a consumer always progresses. A partition
    read beyond its share (reads run concurrently, each within its own
    limit) is read again within the share; a later partition whose first
    batch alone exceeds its share answers no records."""
    budget = max_bytes
    first = True
    for w in wanted:
        if not w.records:
            continue
        if first:
            # Read within min(partition_max_bytes, max_bytes): more than that
            # only when it is one batch, which KIP-74 returns whole.
            first = False
        else:
            share = min(w.max_bytes, budget)
            if len(w.records) > share:
                if share > 0 and w.error is None:
                    w.max_bytes = share
                    await _read(edge, w, isolation, zero_copy)
                if len(w.records) > share:
                    _set_records(w, b"")
        budget = max(0, budget - len(w.records))


_TESTS = ("tests/integration/test_clients.py::test_produce_consume_roundtrip",
          "tests/integration/test_protocol_edge.py::test_fetch_waits_for_min_bytes",
          "tests/integration/test_fetch_limits.py::test_consumer_with_1_mb_fetch_max_bytes_reads_three_partitions")


@api(1, 4, 18, tests=_TESTS)
async def handle_fetch(ctx, request):
    edge = ctx.edge
    replica_id = request.replica_state.replica_id if has_field(type(request), "replica_state") \
        else getattr(request, "replica_id", -1)
    if replica_id >= 0:
        raise CloseConnection("follower fetch over the wire is not served: replicas pull by actor calls")
    isolation = getattr(request, "isolation_level", 0)
    # Records as file regions, read when the response is written: with
    # sendfile on plain TCP, in bounded chunks otherwise (TLS), so a
    # connection's queued responses hold fds, not their bytes. The CRC check
    # of RAYKAFKA_VERIFY_FETCH needs the bytes in hand.
    zero_copy = _SENDFILE and ctx.conn is not None and not _VERIFY
    # A parked fetch outlives a closed connection (it waits in the replica or
    # the purgatory until data or expiry): its wait is bounded as the
    # replica bounds it, so hostile waits cannot pile up.
    max_wait_ms = min(max(0, timedelta_ms(request.max_wait)), MAX_FETCH_WAIT_MS)
    deadline = time.monotonic() + max_wait_ms / 1000
    # The response's byte budget: the request's max_bytes within the broker's
    # fetch.max.bytes (Kafka's KafkaApis: min(request, config)); every
    # partition reads at most min(partition_max_bytes, budget).
    max_bytes = response_max_bytes(request.max_bytes, edge.config["fetch.max.bytes"])
    quota_bytes = fetch_window_bytes(ctx)
    if quota_bytes is not None:
        max_bytes = min(max_bytes, quota_bytes)
    by_id = edge.metadata.topics_by_id

    # Resolve the request against its fetch session (KIP-227, v7+).
    requested = []
    for topic in request.topics:
        if has_field(type(topic), "topic_id") and not has_field(type(topic), "topic"):
            info = by_id.get(topic.topic_id)
            name = info.name if info else None
            topic_id = topic.topic_id
        else:
            name, topic_id = topic.topic, None
        for part in topic.partitions:
            requested.append(SessionPartition(name, topic_id, part.partition, part.fetch_offset,
                                              part.partition_max_bytes, getattr(part, "current_leader_epoch", -1)))
    forgotten = []
    for topic in getattr(request, "forgotten_topics_data", ()):
        name = getattr(topic, "topic", None)
        if name is None and getattr(topic, "topic_id", None) is not None:
            info = by_id.get(topic.topic_id)
            name = info.name if info else None
        forgotten.extend((name, p) for p in topic.partitions)
    schema = response_schema_for(request)
    try:
        session, fetch_list, incremental = edge.fetch_sessions.begin(
            getattr(request, "session_id", 0), getattr(request, "session_epoch", FINAL_EPOCH), requested, forgotten)
    except FetchSessionError as exc:
        return build(schema, throttle_time=ZERO_THROTTLE, error_code=exc.error, session_id=0, responses=())

    wanted: list[_Wanted] = []
    may = await authorization.checker(ctx)  # a consumer needs READ on each topic (Kafka's handleFetchRequest)
    for sp in fetch_list:
        want = _Wanted(sp.topic, sp.topic_id, sp.partition, sp.fetch_offset, max(0, min(sp.max_bytes, max_bytes)),
                       sp.leader_epoch)
        want.session_partition = sp
        info = edge.metadata.partition(sp.topic, sp.partition) if sp.topic is not None else None
        if sp.topic is not None and not may(Operation.READ, ResourceType.TOPIC, sp.topic):
            want.error = ErrorCode.topic_authorization_failed
        elif info is None:
            want.error = ErrorCode.unknown_topic_id if sp.topic_id is not None and sp.topic is None \
                else ErrorCode.unknown_topic_or_partition
        elif info.leader != edge.broker_id:
            want.error = ErrorCode.not_leader_or_follower
        wanted.append(want)

    local = [w for w in wanted if w.error is None]
    try:
        return await _respond(edge, request, schema, session, incremental, wanted, local, isolation, deadline,
                              zero_copy, max_bytes)
    except BaseException:
        for w in wanted:
            release(w.records)
        raise


def response_max_bytes(requested: int, broker_limit: int) -> int:
    """The byte budget of one Fetch response (never negative)."""
    return max(0, min(requested, broker_limit))


async def _respond(edge, request, schema, session, incremental, wanted, local, isolation, deadline, zero_copy,
                   max_bytes):
    if len(local) == 1:
        # One partition: the DelayedFetch waits in its leader replica, where
        # appends happen, so new data costs no hop beyond this call's answer.
        wait_ms = max(0, int((deadline - time.monotonic()) * 1000))
        await _read(edge, local[0], isolation, zero_copy, request.min_bytes, wait_ms)
        local = []
    while local:
        await asyncio.gather(*(_read(edge, w, isolation, zero_copy) for w in local))
        ready = sum(len(w.records) for w in local)
        remaining = deadline - time.monotonic()
        if (ready >= request.min_bytes or remaining <= 0 or not local
                or any(w.error for w in local)):
            break
        # DelayedFetch in the node's purgatory: until some partition's
        # fetchable end moves past what we just read, or max_wait expires.
        moved = await edge.delay_fetch([PartitionOffset(w.topic, w.partition, w.end) for w in local], isolation,
                                       int(remaining * 1000))
        if not moved:
            await asyncio.gather(*(_read(edge, w, isolation, zero_copy) for w in local))
            break

    await _fit_to_budget(edge, wanted, max_bytes, isolation, zero_copy)

    if session is not None:
        # Incremental responses carry only partitions with news; every response
        # records what the client now knows.
        included = []
        for w in wanted:
            sp = w.session_partition
            error = int(w.error or 0)
            if not incremental or FetchSessionCache.must_send(sp, error, bool(w.records), w.hw, w.lso, w.log_start):
                included.append(w)
            else:
                _set_records(w, b"")
            FetchSessionCache.remember(session, sp, w.hw, w.lso, w.log_start, bool(w.records))
        wanted = included
    topic_cls = nested(schema, "FetchableTopicResponse")
    part_cls = nested(schema, "PartitionData")
    aborted_cls = nested(schema, "AbortedTransaction") if isolation == 1 else None
    # File-backed records are encoded as markers and spliced back in as file
    # regions when the frame is cut (SplicedResponse.to_frame).
    splice = SplicedResponse()
    responses = []
    current = None
    for w in wanted:
        key = (w.topic, w.topic_id)
        if current is None or current[0] != key:
            current = (key, [])
            responses.append(current)
        current[1].append(build(
            part_cls, partition_index=w.partition, error_code=w.error or ErrorCode.none,
            high_watermark=w.hw, last_stable_offset=w.lso, log_start_offset=w.log_start,
            aborted_transactions=tuple(build(aborted_cls, producer_id=pid, first_offset=first)
                                       for pid, first in w.aborted) if isolation == 1 else None,
            preferred_read_replica=-1,
            records=splice.placeholder(w.records) if type(w.records) is FileRecords else w.records))
    topics = tuple(build(topic_cls, topic=key[0], topic_id=key[1], partitions=tuple(parts))
                   for key, parts in responses)
    response = build(schema, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none,
                     session_id=session.session_id if session is not None else 0, responses=topics)
    if not splice.blobs:
        return response
    splice.response = response
    return splice
