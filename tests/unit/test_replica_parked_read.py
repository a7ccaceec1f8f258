"""ReplicaActor.read with max_wait_ms: a consumer's single-partition
DelayedFetch held in the replica. Driven without Ray: the actor class is a
plain class (ray.remote wraps it separately)."""
import asyncio
import time

from actors.partition_leader import ReplicaActor
from core.error_codes import ErrorCode
from core.replica_messages import AppendRequest
from storage.records import SimpleRecord, build_batch

BROKER = 1


def _batch(n=1):
    return build_batch([SimpleRecord(key=b"k", value=b"v%d" % i) for i in range(n)], compression=0)


def _leader(tmp_path) -> ReplicaActor:
    replica = ReplicaActor("t", 0, BROKER, [str(tmp_path)], {"segment_bytes": 1 << 20})
    # No purgatory here (no Ray): progress reports would look one up.
    replica._report_progress = lambda force=False: None
    return replica


async def _close(replica):
    replica._closed = True
    for task in replica._background:
        task.cancel()


def test_parked_read_answers_when_an_append_arrives(tmp_path):
    async def run():
        replica = _leader(tmp_path)
        assert await replica.become_leader(1, 0, [BROKER], [BROKER]) == 0
        started = time.monotonic()
        parked = asyncio.ensure_future(replica.read(0, 1 << 20, 0, 0, 1, 5000))
        await asyncio.sleep(0.1)
        assert not parked.done()
        await replica.append(AppendRequest.from_sets([(_batch(3), 1, 1000)], 0))
        error, hw, _lso, _start, slices = await asyncio.wait_for(parked, 2)
        waited = time.monotonic() - started
        await _close(replica)
        return error, hw, slices, waited

    error, hw, slices, waited = asyncio.run(run())
    assert error == 0 and hw == 3
    assert len(slices) == 1 and slices[0][2] > 0
    assert waited < 2  # answered by the append, not by the 5 s expiry


def test_parked_read_expires_empty_after_max_wait(tmp_path):
    async def run():
        replica = _leader(tmp_path)
        await replica.become_leader(1, 0, [BROKER], [BROKER])
        started = time.monotonic()
        result = await replica.read(0, 1 << 20, 0, 0, 1, 200)
        await _close(replica)
        return result, time.monotonic() - started

    (error, _hw, _lso, _start, slices), waited = asyncio.run(run())
    assert error == 0 and slices == []
    assert 0.18 <= waited < 2


def test_parked_read_waits_for_min_bytes(tmp_path):
    async def run():
        replica = _leader(tmp_path)
        await replica.become_leader(1, 0, [BROKER], [BROKER])
        small = len(_batch(1))
        parked = asyncio.ensure_future(replica.read(0, 1 << 20, 0, 0, small * 3, 5000))
        await replica.append(AppendRequest.from_sets([(_batch(1), 1, 1000)], 0))
        await asyncio.sleep(0.1)
        still_waiting = not parked.done()
        await replica.append(AppendRequest.from_sets([(_batch(1), 1, 1000)], 0))
        await replica.append(AppendRequest.from_sets([(_batch(1), 1, 1000)], 0))
        error, hw, _lso, _start, slices = await asyncio.wait_for(parked, 2)
        await _close(replica)
        return still_waiting, error, hw, sum(s[2] for s in slices), small

    still_waiting, error, hw, size, small = asyncio.run(run())
    assert still_waiting
    assert error == 0 and hw == 3 and size >= 3 * small


def test_parked_read_gives_up_when_leadership_moves(tmp_path):
    async def run():
        replica = _leader(tmp_path)
        await replica.become_leader(1, 0, [BROKER], [BROKER])
        parked = asyncio.ensure_future(replica.read(0, 1 << 20, 0, 0, 1, 5000))
        await asyncio.sleep(0.05)
        # A newer epoch fences the old one the read was made under.
        await replica.become_leader(1, 1, [BROKER], [BROKER])
        result = await asyncio.wait_for(parked, 2)
        await _close(replica)
        return result

    error, *_ = asyncio.run(run())
    assert error == ErrorCode.fenced_leader_epoch
