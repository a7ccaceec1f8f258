"""Read-ahead of consumer fetches: the replica's read_run (real ReplicaActor
class and Log, no Ray), the edge's FetchReadAhead cache, and a real edge
server answering a consumer's consecutive fetches with fewer replica calls."""
import asyncio

from core.error_codes import ErrorCode
from core.replica_messages import AppendRequest, FileSlice, ReadRun
from net.fetch_read_ahead import FetchReadAhead
from storage.record_batch import iter_headers
from storage.records import SimpleRecord, build_batch
from tests.unit.test_replica_parked_read import BROKER, _close, _leader


def _batch(n, size=100):
    return build_batch([SimpleRecord(key=b"k%d" % i, value=b"v" * size) for i in range(n)], compression=0)


def test_read_run_answers_what_consecutive_reads_would(tmp_path):
    async def run():
        replica = _leader(tmp_path)
        assert await replica.become_leader(1, 0, [BROKER], [BROKER]) == 0
        for _ in range(10):
            await replica.append(AppendRequest.from_sets([(_batch(10), 1, 1000)], 0))  # 10 batches of 10 records, ~1.2 KB each
        batch_bytes = len(_batch(10))
        error, hw, _lso, start, runs = await replica.read_run(0, 3 * batch_bytes, 0, 0, 0, 0, 4)
        singles = []
        offset = 0
        for _ in range(4):
            single = await replica.read(offset, 3 * batch_bytes, 0, 0)
            singles.append((offset, single[4]))
            offset += 30
        tail = await replica.read_run(90, 3 * batch_bytes, 0, 0, 0, 0, 4)
        past_end = await replica.read_run(100, 3 * batch_bytes, 0, 0, 0, 0, 4)
        fenced = await replica.read_run(0, 3 * batch_bytes, 0, 1, 0, 0, 4)
        await _close(replica)
        return error, hw, start, runs, singles, tail, past_end, fenced

    error, hw, start, runs, singles, tail, past_end, fenced = asyncio.run(run())
    assert (error, hw, start) == (0, 100, 0)
    assert [r[0] for r in runs] == [0, 30, 60, 90]
    assert runs == singles, "each run is exactly the read at the offset where the previous one ended"
    assert [r[0] for r in tail[4]] == [90], "a run stops at the high watermark"
    assert past_end[0] == 0 and past_end[4] == []
    assert fenced[0] == ErrorCode.unknown_leader_epoch and fenced[4] == []


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _runs(*offsets):
    return [ReadRun(o, [FileSlice("/seg", o * 10, 10, o, 7)]) for o in offsets]


def test_cache_answers_consecutive_offsets_once_each():
    cache = FetchReadAhead(ttl_s=0.5, clock=_Clock())
    cache.put("t", 0, 1000, 5, 0, 50, 50, 0, _runs(10, 20, 30))
    assert cache.take("t", 0, 20, 1000, 5, 0) is None, "only the next offset is answered"
    assert cache.take("t", 0, 10, 1000, 5, 0) == (50, 50, 0, _runs(10)[0][1])
    assert cache.take("t", 0, 10, 1000, 5, 0) is None, "an answer is given once"
    assert cache.take("t", 0, 20, 1000, 5, 0) == (50, 50, 0, _runs(20)[0][1])
    assert cache.take("t", 0, 30, 1000, 5, 0) == (50, 50, 0, _runs(30)[0][1])
    assert len(cache) == 0 and cache.hits == 3


def test_cache_refuses_other_budgets_epochs_and_expired_answers():
    clock = _Clock()
    cache = FetchReadAhead(ttl_s=0.5, clock=clock)
    cache.put("t", 0, 1000, 5, 0, 50, 50, 0, _runs(10, 20))
    assert cache.take("t", 0, 10, 999, 5, 0) is None, "another partition_max_bytes reads afresh"
    cache.put("t", 0, 1000, 5, 0, 50, 50, 0, _runs(10, 20))
    assert cache.take("t", 0, 10, 1000, 6, 0) is None, "another leader epoch reads afresh"
    cache.put("t", 0, 1000, 5, 0, 50, 50, 0, _runs(10, 20))
    assert cache.take("t", 0, 10, 1000, 5, 1) is None, "another isolation level reads afresh"
    cache.put("t", 0, 1000, 5, 0, 50, 50, 0, _runs(10, 20))
    clock.now += 0.6
    assert cache.take("t", 0, 10, 1000, 5, 0) is None, "expired"
    assert cache.take("t", 1, 10, 1000, 5, 0) is None, "another partition"


def test_cache_is_bounded_and_forgets_by_partition_and_topic():
    cache = FetchReadAhead(max_entries=3, clock=_Clock())
    for p in range(5):
        cache.put("t", p, 1000, 0, 0, 9, 9, 0, _runs(1))
    assert len(cache) == 3
    assert cache.take("t", 0, 1, 1000, 0, 0) is None and cache.take("t", 4, 1, 1000, 0, 0) is not None
    cache.put("u", 0, 1000, 0, 0, 9, 9, 0, _runs(1))
    cache.forget("t", 3)
    assert cache.take("t", 3, 1, 1000, 0, 0) is None and cache.take("t", 2, 1, 1000, 0, 0) is not None
    cache.forget("u")
    assert len(cache) == 0
    cache.put("t", 0, 1000, 0, 0, 9, 9, 0, _runs(1))
    cache.clear()
    assert len(cache) == 0


def test_edge_serves_a_catching_up_consumer_with_one_call_per_run(tmp_path):
    """A real edge server and real Logs: consecutive fetches from offset 0
    return exactly the log's batches, and the replica is asked once per
    run of 1 + raykafka.fetch.read.ahead reads."""
    from tests.unit.test_sendfile_fetch import TOPIC, decode_response, exchange, fetch_request, make_edge

    async def go():
        service, server, logs = make_edge(tmp_path, partitions=1, batches_per_partition=16, value_size=4096)
        leader = service.replicas.leader_handles[(TOPIC, 0)]
        port = await server.start("127.0.0.1", 0)
        per_fetch = 2 * len(logs[0].read_bytes(0, 1, None, True))  # two batches per fetch
        offset, got, correlation_id = 0, [], 0
        while offset < logs[0].log_end_offset:
            correlation_id += 1
            (frame,) = await exchange(port, fetch_request(16, 1, correlation_id, partition_max_bytes=per_fetch, fetch_offset=offset), 1)
            _, body = decode_response(1, 16, frame)
            records = body.responses[0].partitions[0].records
            *_, (_pos, last) = iter_headers(records)
            got.append(records)
            offset = last.base_offset + last.last_offset_delta + 1
        expected = logs[0].read_bytes(0, 1 << 30, None, True)
        calls, fetches = leader.calls, correlation_id
        hits = service.read_ahead.hits
        await server.stop()
        service.close()
        logs[0].close()
        return b"".join(got), expected, calls, fetches, hits, service.read_ahead_runs

    got, expected, calls, fetches, hits, runs = asyncio.run(go())
    assert got == expected
    assert fetches == 8 and runs == 3
    assert calls == 2 and hits == 6, "one replica call answers a fetch and keeps the next three"


def test_a_kept_answer_whose_file_changed_is_read_again(tmp_path):
    """A kept slice names a file by inode: once the file at that path is
    another (a cleaner swap, a deleted segment), the edge asks the replica."""
    from tests.unit.test_sendfile_fetch import TOPIC, decode_response, exchange, fetch_request, make_edge

    async def go():
        service, server, logs = make_edge(tmp_path, partitions=1, batches_per_partition=8, value_size=4096)
        leader = service.replicas.leader_handles[(TOPIC, 0)]
        port = await server.start("127.0.0.1", 0)
        one_batch = len(logs[0].read_bytes(0, 1, None, True))
        (frame,) = await exchange(port, fetch_request(16, 1, 1, partition_max_bytes=one_batch), 1)
        first = decode_response(1, 16, frame)[1].responses[0].partitions[0].records
        *_, (_pos, last) = iter_headers(first)
        next_offset = last.base_offset + last.last_offset_delta + 1
        # Make every kept slice name another inode, as if the segment had been replaced.
        entries = service.read_ahead._entries
        for key, entry in list(entries.items()):
            runs = [ReadRun(o, [s._replace(inode=s.inode + 1) for s in slices]) for o, slices in entry[5]]
            entries[key] = entry[:5] + (runs,)
        (frame,) = await exchange(port, fetch_request(16, 1, 2, partition_max_bytes=one_batch,
                                                      fetch_offset=next_offset), 1)
        second = decode_response(1, 16, frame)[1].responses[0].partitions[0].records
        expected = logs[0].read_bytes(next_offset, one_batch, None, True)
        calls = leader.calls
        await server.stop()
        service.close()
        logs[0].close()
        return second, expected, calls

    second, expected, calls = asyncio.run(go())
    assert second == expected and len(second) > 0
    assert calls == 2, "the stale kept answer was dropped and the replica asked again"
