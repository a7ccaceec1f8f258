"""The leader replica fsyncs rolled segments on its flush thread, not in the
event loop: the append that rolls answers without waiting for the fsync,
and the recovery point follows once the thread has run. Driven without Ray
(the actor class is a plain class)."""
import asyncio
import os
import threading
import time

from actors.partition_leader import ReplicaActor
from core.clock import ManualClock
from core.replica_messages import AppendRequest
from storage.records import SimpleRecord, build_batch
from tests.unit.test_replica_parked_read import BROKER


def _batch(n=20):
    return build_batch([SimpleRecord(key=b"k%d" % i, value=b"v" * 100) for i in range(n)], compression=0)


def test_rolled_segments_are_flushed_off_the_event_loop(tmp_path, monkeypatch):
    replica = ReplicaActor("t", 0, BROKER, [str(tmp_path)], {"segment_bytes": 8192})
    replica._report_progress = lambda force=False: None
    flushed_on = []
    real = replica.log.local._flush_in_background

    def recording(*args):
        flushed_on.append(threading.current_thread().name)
        real(*args)

    monkeypatch.setattr(replica.log.local, "_flush_in_background", recording)

    async def run():
        assert await replica.become_leader(1, 0, [BROKER], [BROKER]) == 0
        for _ in range(12):
            results = (await replica.append(AppendRequest.from_sets([(_batch(), 1, 1000)], 0))).results
            assert results[0][0] == 0
        deadline = time.monotonic() + 5
        while replica.log.recovery_point < replica.log.segments[-1].base_offset and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        state = (len(replica.log.segments), replica.log.recovery_point, replica.log.segments[-1].base_offset)
        for task in replica._background:
            task.cancel()
        await replica.close()
        return state

    segments, recovery_point, active_base = asyncio.run(run())
    assert segments >= 3
    assert recovery_point == active_base  # every rolled segment is durable
    assert flushed_on and all(name.startswith("log-io") for name in flushed_on)
    assert replica.log.closed and replica._io_thread is None


def test_retention_unlinks_expired_segments_on_the_io_thread(tmp_path, monkeypatch):
    clock = ManualClock()
    replica = ReplicaActor("t", 0, BROKER, [str(tmp_path)],
                           {"segment_bytes": 8192, "retention_bytes": 8192, "file_delete_delay_ms": 1}, clock=clock)
    replica._report_progress = lambda force=False: None
    deleted_on = []
    real = replica.log.delete_pending

    def recording(now_ms=None):
        deleted_on.append(threading.current_thread().name)
        return real(now_ms)

    monkeypatch.setattr(replica.log, "delete_pending", recording)

    async def run():
        assert await replica.become_leader(1, 0, [BROKER], [BROKER]) == 0
        for _ in range(12):
            assert (await replica.append(AppendRequest.from_sets([(_batch(), 1, 1000)], 0))).results[0][0] == 0
        result = await replica.run_retention()  # renames to .deleted, unlink due in 1 ms
        renamed = [n for n in os.listdir(replica.log.dir) if n.endswith(".deleted")]
        clock.advance(0.01)
        await replica.run_retention()  # the unlinks
        for task in replica._background:
            task.cancel()
        leftovers = [n for n in os.listdir(replica.log.dir) if n.endswith(".deleted")]
        start = replica.log.log_start_offset
        await replica.close()
        return result, renamed, leftovers, start

    result, renamed, leftovers, start = asyncio.run(run())
    assert result["deleted_segments"] >= 1 and result["log_start_offset"] == start > 0
    assert renamed and leftovers == []
    assert deleted_on and all(name.startswith("log-io") for name in deleted_on)
