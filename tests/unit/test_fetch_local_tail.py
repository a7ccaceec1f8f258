"""Tail fetches answered from the edge's own appends (net/fetch_local_tail.py):
the plain LocalTail class, the replica's answer that feeds it
(ReplicaActor.append(..., tail=True), no Ray), and a real edge server whose
consumer, waiting at the tail, is answered by the next append through the
edge without a read call to the replica."""
import asyncio

from core.replica_messages import AppendAnswer, AppendRequest, AppendResult, CommittedTail, FileSlice
from net.fetch_local_tail import LocalTail
from storage.record_batch import iter_headers
from storage.records import SimpleRecord, build_batch
from tests.unit.test_fetch_read_ahead import _Clock
from tests.unit.test_replica_parked_read import BROKER, _leader

SLICES = [("/log/00.log", 0, 100, 10, 7)]


def _batch(n=3, size=50):
    return build_batch([SimpleRecord(key=b"k%d" % i, value=b"v" * size) for i in range(n)], compression=0)


def _tail(clock=None, **kw):
    return LocalTail(clock=clock or _Clock(), **kw)


def test_take_answers_the_offset_an_append_started_at_for_every_reader():
    tail = _tail()
    tail.publish("t", 0, CommittedTail(5, 13, 13, 0, 10, 13, SLICES, 100))
    assert tail.take("t", 0, 10, 1 << 20, 5, 0) == (13, 13, 0, SLICES)
    assert tail.take("t", 0, 10, 1 << 20, -1, 0) == (13, 13, 0, SLICES)  # another consumer, no epoch given
    assert tail.take("t", 0, 11, 1 << 20, 5, 0) is None  # mid-append offsets go to the replica
    assert tail.take("t", 1, 10, 1 << 20, 5, 0) is None
    assert tail.hits == 2


def test_take_refuses_other_epochs_small_budgets_min_bytes_and_uncommitted_reads():
    tail = _tail()
    tail.publish("t", 0, CommittedTail(5, 13, 12, 0, 10, 13, SLICES, 100))
    assert tail.take("t", 0, 10, 1 << 20, 4, 0) is None  # fenced epoch: the replica answers that
    assert tail.take("t", 0, 10, 99, 5, 0) is None  # the replica would cut at a batch boundary
    assert tail.take("t", 0, 10, 1 << 20, 5, 0, min_bytes=101) is None
    assert tail.take("t", 0, 10, 1 << 20, 5, 1) is None  # read_committed: LSO 12 < 13
    assert tail.take("t", 0, 10, 1 << 20, 5, 0) is not None


def test_entries_expire_are_bounded_and_a_new_epoch_drops_the_old_ones():
    clock = _Clock()
    tail = _tail(clock, ttl_s=0.5, entries_per_partition=2, max_partitions=2)
    for first in (0, 3, 6):
        tail.publish("t", 0, CommittedTail(1, first + 3, first + 3, 0, first, first + 3, SLICES, 100))
    assert tail.take("t", 0, 0, 1 << 20, 1, 0) is None  # pushed out by newer ones
    assert tail.take("t", 0, 3, 1 << 20, 1, 0) is not None
    tail.publish("t", 0, CommittedTail(2, 10, 10, 0, 9, 10, SLICES, 100))
    assert tail.take("t", 0, 6, 1 << 20, -1, 0) is None  # epoch 1's entries are gone
    clock.now += 0.6
    assert tail.take("t", 0, 9, 1 << 20, 2, 0) is None  # expired
    tail.publish("t", 1, CommittedTail(1, 3, 3, 0, 0, 3, SLICES, 100))
    tail.publish("t", 2, CommittedTail(1, 3, 3, 0, 0, 3, SLICES, 100))
    assert len(tail._tails) == 2 and ("t", 0) not in tail._tails  # least recently published goes


def test_expects_only_the_offset_the_last_local_append_ended_at_recently():
    clock = _Clock()
    tail = _tail(clock, wait_s=0.05, ttl_s=0.5)
    assert not tail.expects("t", 0, 13, 5)
    tail.publish("t", 0, CommittedTail(5, 13, 13, 0, 10, 13, SLICES, 100))
    assert tail.expects("t", 0, 13, 5) and tail.expects("t", 0, 13, -1)
    assert not tail.expects("t", 0, 10, 5) and not tail.expects("t", 0, 13, 6)
    clock.now += 0.6
    assert not tail.expects("t", 0, 13, 5)
    off = _tail(wait_s=0.0)
    off.publish("t", 0, CommittedTail(5, 13, 13, 0, 10, 13, SLICES, 100))
    assert not off.expects("t", 0, 13, 5)  # several edges per node: no local wait


def test_wait_wakes_on_publish_and_times_out_without_one():
    async def run():
        tail = LocalTail(wait_s=0.05)
        tail.publish("t", 0, CommittedTail(5, 13, 13, 0, 10, 13, SLICES, 100))
        waiter = asyncio.ensure_future(tail.wait("t", 0, 5.0))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        tail.publish("t", 0, CommittedTail(5, 16, 16, 0, 13, 16, SLICES, 100))
        await asyncio.wait_for(waiter, 1.0)
        await tail.wait("t", 0, 0.01)  # nobody publishes
        forgotten = asyncio.ensure_future(tail.wait("t", 0, 5.0))
        await asyncio.sleep(0.01)
        tail.forget("t")
        await asyncio.wait_for(forgotten, 1.0)
        return tail.waits, tail.wait_misses, tail.take("t", 0, 13, 1 << 20, 5, 0)

    waits, misses, after_forget = asyncio.run(run())
    assert waits == 3 and misses == 1 and after_forget is None


# ------------------------------------------------------------------ the replica's answer
async def _stop(replica):
    for task in replica._background:
        task.cancel()
    await replica.close()


def test_replica_append_tells_where_the_committed_data_is(tmp_path):
    async def run():
        replica = _leader(tmp_path)
        assert await replica.become_leader(1, 4, [BROKER], [BROKER]) == 0
        plain = await replica.append(AppendRequest.from_sets([(_batch(), 1, 1000)], 4))  # not asked: no tail
        assert plain.results[0][0] == 0 and plain.committed_tail is None
        first = replica.log.log_end_offset
        results, committed = await replica.append(
            AppendRequest.from_sets([(_batch(2), 1, 1000), (_batch(3), 1, 1000)], 4, True))
        read = await replica.read(first, 1 << 20, 0, 4)
        await _stop(replica)
        return first, results, committed, read

    first, results, committed, read = asyncio.run(run())
    assert [r[0] for r in results] == [0, 0]
    epoch, hw, lso, start, c_first, c_next, slices, length = committed
    assert (epoch, c_first, c_next, hw, lso, start) == (4, first, first + 5, first + 5, first + 5, 0)
    assert slices == read[4] and length == sum(s[2] for s in slices)  # what a read would answer


def test_replica_append_tells_nothing_while_followers_have_not_fetched_it(tmp_path):
    async def run():
        replica = _leader(tmp_path)
        assert await replica.become_leader(1, 0, [BROKER, 2], [BROKER, 2]) == 0
        results, committed = await replica.append(AppendRequest.from_sets([(_batch(), 1, 1000)], 0, True))
        await _stop(replica)
        return results, committed

    results, committed = asyncio.run(run())
    assert results[0][0] == 0 and committed is None  # HW waits for broker 2


# ------------------------------------------------------------------ a real edge
class _TailLeader:
    """A leader's read_run (counted) and append (as the replica answers with
    tail=True), on a real Log."""

    def __init__(self, log):
        from tests.unit.test_sendfile_fetch import FakeLeader

        self.log = log
        self._reads = FakeLeader(log)
        self.read_run = self._reads
        self.append = self
        self.append_shared = _NoRegion()

    @property
    def read_calls(self):
        return self._reads.calls

    def remote(self, request):
        async def answer():
            first = self.log.log_end_offset
            results = []
            for records, _acks, _timeout in request.record_sets():
                info = self.log.append_as_leader(records, request.leader_epoch)
                results.append(AppendResult(0, info.first_offset, -1, 0, None, -1, -1))
            end = self.log.log_end_offset
            found = self.log.read_with_inodes(first, 1 << 31, end, min_one_batch=True)
            slices = [FileSlice(s.path, s.position, s.length, s.base_offset, ino) for s, ino in found]
            committed = CommittedTail(0, end, end, 0, first, end, slices, sum(s.length for s in slices))
            return AppendAnswer(results, committed if request.tail else None)
        return answer()


class _NoRegion:
    def remote(self, *args):
        async def answer():
            return None  # "cannot map the region": the edge sends bytes
        return answer()


def test_edge_answers_a_waiting_tail_fetch_from_its_next_append(tmp_path):
    from tests.unit.test_sendfile_fetch import TOPIC, decode_response, exchange, fetch_request, make_edge

    async def go():
        service, server, logs = make_edge(tmp_path, partitions=1, batches_per_partition=2, value_size=100)
        log = logs[0]
        leader = service.replicas.leader_handles[(TOPIC, 0)] = _TailLeader(log)
        # The mechanism, not its production timing (a 50 ms wait, a 0.5 s tail): a loaded
        # machine may take longer than that between the steps below.
        service.local_tail.wait_s, service.local_tail.ttl_s = 5.0, 30.0
        port = await server.start("127.0.0.1", 0)
        appender = service.leaders.appender(TOPIC, 0)
        assert (await appender.append(_batch(), 1, 1000, 0))[0] == 0  # the edge's first local append
        tail_offset = log.log_end_offset
        fetch = asyncio.ensure_future(
            exchange(port, fetch_request(16, 1, 1, fetch_offset=tail_offset, max_wait_ms=5000), 1))
        parked_by = asyncio.get_running_loop().time() + 10
        while service.local_tail.waits < 1:  # until the fetch waits on the edge
            assert not fetch.done() and asyncio.get_running_loop().time() < parked_by, "the fetch did not wait"
            await asyncio.sleep(0.005)
        assert not fetch.done()
        assert (await appender.append(_batch(4), 1, 1000, 0))[0] == 0
        (frame,) = await asyncio.wait_for(fetch, 10)
        _, body = decode_response(1, 16, frame)
        records = body.responses[0].partitions[0].records
        expected = log.read_bytes(tail_offset, 1 << 30, None, True)
        stats = (leader.read_calls, service.local_tail.hits, service.local_tail.waits)
        await server.stop()
        service.close()
        log.close()
        return records, expected, stats, [h.base_offset for _p, h in iter_headers(records)], tail_offset

    records, expected, (read_calls, hits, waits), bases, tail_offset = asyncio.run(go())
    assert records == expected and bases == [tail_offset]
    assert read_calls == 0 and hits == 1 and waits == 1, "answered by the append, no read call to the replica"
