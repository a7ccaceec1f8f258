"""ReplicaActor.wait_committed: an acks=all produce's wait held by the
leader replica and answered in the step that moves its high watermark (the
follower fetch carrying the follower's log end). Driven without Ray: the
actor class is a plain class (ray.remote wraps it separately)."""
import asyncio
import os

from actors.partition_leader import ReplicaActor
from core import shared_region
from core.error_codes import ErrorCode
from core.local_calls import FollowUp
from core.replica_messages import AppendRequest, CommitNotice, SharedAppendRequest
from core.shared_region import SharedRegion
from storage.records import SimpleRecord, build_batch

LEADER, FOLLOWER = 1, 2


def _batch(n=1):
    return build_batch([SimpleRecord(key=b"k", value=b"v%d" % i) for i in range(n)], compression=0)


def _leader(tmp_path, min_isr=2) -> ReplicaActor:
    replica = ReplicaActor("t", 0, LEADER, [str(tmp_path)], {"segment_bytes": 1 << 20}, min_insync_replicas=min_isr)
    replica._report_progress = lambda force=False: None  # no purgatory here (no Ray)
    return replica


async def _leader_with_two_sets_in_a_region(tmp_path, region_id: int):
    """A leader of a two-replica ISR, and two batches (2 and 3 records) in a shared region
    as the edge would have placed them for append_shared."""
    leader = _leader(tmp_path)
    await leader.become_leader(1, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    region = SharedRegion.create(f"raykafka-{os.getpid()}-{region_id}-t-0", 1 << 16)
    one, two = _batch(2), _batch(3)
    region.write(0, one)
    region.write(len(one), two)
    return leader, region, one, two


async def _close(replica):
    replica._closed = True
    for task in replica._background:
        task.cancel()


def test_the_follower_fetch_that_moves_the_hw_answers_the_wait(tmp_path):
    async def run():
        leader = _leader(tmp_path)
        assert await leader.become_leader(1, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER]) == 0
        [result] = (await leader.append(AppendRequest.from_sets([(_batch(3), -1, 5000)], 0))).results
        assert result.error == 0 and result.high_watermark == 0
        waiting = asyncio.ensure_future(leader.wait_committed(result.last_offset + 1, 0, 5000))
        first = await leader.fetch_for_follower(FOLLOWER, 0, -1, 0, 1 << 20, 0, -1, True)
        assert first.slices and first.high_watermark == 0
        await asyncio.sleep(0)
        assert not waiting.done(), "the follower has not got the records yet"
        # The follower's next fetch reports log end 3: the HW moves, the wait is answered
        # before that fetch itself returns (it parks: nothing new to send).
        second = asyncio.ensure_future(leader.fetch_for_follower(FOLLOWER, 3, 0, 0, 1 << 20, 50, -1, True))
        assert await asyncio.wait_for(waiting, 2) == 0
        assert not second.done()
        assert (await second).high_watermark == 3
        # Already committed: answered at once.
        assert await leader.wait_committed(3, 0, 0) == 0
        await _close(leader)

    asyncio.run(run())


def test_wait_outcomes_timeout_stale_epoch_and_leadership_lost(tmp_path):
    async def run():
        leader = _leader(tmp_path)
        await leader.become_leader(1, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
        [result] = (await leader.append(AppendRequest.from_sets([(_batch(2), -1, 5000)], 0))).results
        end = result.last_offset + 1
        assert await leader.wait_committed(end, 0, 50) == ErrorCode.request_timed_out
        # An append made under another epoch is not this leader's to acknowledge.
        assert await leader.wait_committed(end, 1, 5000) == ErrorCode.not_leader_or_follower
        waiting = asyncio.ensure_future(leader.wait_committed(end, 0, 5000))
        await asyncio.sleep(0)
        assert await leader.become_follower(1, FOLLOWER, 1, [FOLLOWER], [LEADER, FOLLOWER]) == 0
        assert await asyncio.wait_for(waiting, 2) == ErrorCode.not_leader_or_follower
        await _close(leader)

    asyncio.run(run())


def test_isr_below_min_insync_when_the_hw_passes_is_not_enough_replicas_after_append(tmp_path):
    async def run():
        # The ISR is the leader alone with min.insync.replicas=2 (the ISR shrank after
        # the append); the HW moves with the leader's own append.
        leader = _leader(tmp_path, min_isr=2)
        await leader.become_leader(1, 0, [LEADER], [LEADER, FOLLOWER])
        leader.partition.high_watermark = 0
        [result] = (await leader.append(AppendRequest.from_sets([(_batch(1), 1, 5000)], 0))).results
        outcome = await leader.wait_committed(result.last_offset + 1, 0, 5000)
        await _close(leader)
        return outcome

    assert asyncio.run(run()) == ErrorCode.not_enough_replicas_after_append


def test_an_acks_all_append_over_the_channel_brings_its_commit_notice_as_a_second_part(tmp_path, monkeypatch):
    """append_shared with commit_notice: the answer at once (the HW short of the set), and the
    CommitNotice (core.local_calls.FollowUp) once the follower's fetch moved the HW past it;
    acks=1 sets and sets already committed bring none."""
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))

    async def run():
        leader, region, one, two = await _leader_with_two_sets_in_a_region(tmp_path, 1)

        def request(acks, notice=True):
            return SharedAppendRequest(region.path, [0, len(one)], [len(one), len(two)], acks, [5000, 5000], 0,
                                       commit_notice=notice)

        answer = await leader.append_shared(request([1, 1]))
        assert type(answer) is not FollowUp, "no acks=all set: nothing to follow"
        answer = await leader.append_shared(request([-1, -1], notice=False))
        assert type(answer) is not FollowUp, "not asked for (a Ray call could not carry it)"
        answer = await leader.append_shared(request([1, -1]))
        assert type(answer) is FollowUp
        first, second = answer.answer.results
        assert second.high_watermark < second.last_offset + 1
        later = asyncio.ensure_future(answer.later)
        await leader.fetch_for_follower(FOLLOWER, 0, -1, 0, 1 << 20, 0, -1, True)
        await asyncio.sleep(0)
        assert not later.done()
        end = leader.log.log_end_offset
        fetch = asyncio.ensure_future(leader.fetch_for_follower(FOLLOWER, end, 0, 0, 1 << 20, 50, -1, True))
        assert await asyncio.wait_for(later, 2) == CommitNotice(ErrorCode.none, end)
        await fetch
        assert leader.counters["commit_notices"] == 1 and leader.counters["commit_waits"] == 0
        # Committed by the time it answers (the ISR is the leader alone): no second part.
        await leader.become_leader(1, 1, [LEADER], [LEADER, FOLLOWER])
        leader.partition.min_insync_replicas = 1
        region.write(0, _batch(1))
        answer = await leader.append_shared(SharedAppendRequest(region.path, [0], [len(_batch(1))], [-1], [5000], 1,
                                                                commit_notice=True))
        assert type(answer) is not FollowUp and answer.results[0].high_watermark == answer.results[0].last_offset + 1
        region.close()
        await _close(leader)

    asyncio.run(run())


def test_one_commit_notice_answers_every_acks_all_set_of_the_call(tmp_path, monkeypatch):
    """A call that carries two acks=all sets (the edge coalesced two produce requests)
    gets one CommitNotice, sent once the HW has passed both: a follower fetch that
    carried only the first set (replica.fetch.max.bytes) moves the HW past it but
    sends nothing yet, so the edge never has to ask the leader about the second."""
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))

    async def run():
        leader, region, one, two = await _leader_with_two_sets_in_a_region(tmp_path, 2)
        answer = await leader.append_shared(SharedAppendRequest(
            region.path, [0, len(one)], [len(one), len(two)], [-1, -1], [5000, 5000], 0, commit_notice=True))
        assert type(answer) is FollowUp
        later = asyncio.ensure_future(answer.later)
        # The follower gets the first set only, then reports it: the HW passes the first set.
        first = await leader.fetch_for_follower(FOLLOWER, 0, -1, 0, len(one), 0, -1, False)
        assert len(first.records) == len(one)  # the first batch (offsets and epoch stamped in)
        await leader.fetch_for_follower(FOLLOWER, 2, 0, 0, len(two), 0, -1, False)
        assert leader.partition.high_watermark == 2
        await asyncio.sleep(0)
        assert not later.done(), "the call's second set is not committed yet"
        # Its next fetch reports the second set too: one notice for the whole call.
        fetch = asyncio.ensure_future(leader.fetch_for_follower(FOLLOWER, 5, 0, 0, 1 << 20, 50, -1, False))
        assert await asyncio.wait_for(later, 2) == CommitNotice(ErrorCode.none, 5)
        await fetch
        assert leader.counters["commit_notices"] == 1 and leader.counters["commit_waits"] == 0
        region.close()
        await _close(leader)

    asyncio.run(run())
