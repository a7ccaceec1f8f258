"""cluster/internal_topic_log.py with a scripted NodeCalls: completions in
append order whatever order the high watermark waits end in, queued appends
failed after the coordinator unloads, the restart recovery, and a load that
starts over when the leader's slice was replaced."""
from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from cluster.internal_topic_log import InternalTopicLog
from core.replica_messages import AppendResult, FileSlice, ReadResult
from storage.records import SimpleRecord, build_batch

E = ErrorCode
TOPIC = "__transaction_state"


class ScriptedCalls:
    """NodeCalls: appends land at consecutive offsets with the HW behind;
    each delay_produce waits for the test to release its offset."""

    def __init__(self):
        self.end = 0
        self.appended: list[list[bytes]] = []
        self.waits: dict[int, asyncio.Future] = {}
        self.state = {"is_leader": True, "leader_epoch": 4, "log_end_offset": 0, "high_watermark": 0,
                      "log_start_offset": 0}
        self.reads: list[ReadResult] = []

    async def find_replica(self):
        return "replica"

    async def replica_state(self, replica):
        return dict(self.state)

    async def read(self, replica, offset, max_bytes, leader_epoch):
        return self.reads.pop(0)

    async def append(self, replica, batches, leader_epoch, timeout_ms):
        self.appended.append(list(batches))
        results = []
        for _ in batches:
            results.append(AppendResult(0, self.end, -1, 0, None, self.end, 0))
            self.end += 1
        return results

    async def delay_produce(self, topic, partition, offset, timeout_ms):
        self.waits[offset] = asyncio.get_running_loop().create_future()
        return await self.waits[offset]


def make_log(calls, restarted=False) -> InternalTopicLog:
    return InternalTopicLog(TOPIC, 0, calls, load_buffer_bytes=1 << 20, append_timeout_ms=5000,
                            owner="test coordinator", restarted=restarted)


def test_completions_come_in_append_order():
    async def scenario():
        calls = ScriptedCalls()
        log = make_log(calls)
        log.lead(4, "replica")
        done = []
        log.append(b"first", lambda error: done.append(("first", error)))
        await asyncio.sleep(0.01)  # the first call is out alone
        log.append(b"second", lambda error: done.append(("second", error)))
        log.append(b"third", lambda error: done.append(("third", error)))
        while len(calls.waits) < 2:
            await asyncio.sleep(0.001)
        assert calls.appended == [[b"first"], [b"second", b"third"]]
        calls.waits[3].set_result(E.none)  # the later call's HW wait ends first
        await asyncio.sleep(0.01)
        assert done == []
        calls.waits[1].set_result(E.request_timed_out)
        await asyncio.sleep(0.01)
        assert done == [("first", E.request_timed_out), ("second", E.none), ("third", E.none)]
        assert log.known_end == 3 and log.counters["append_calls"] == 2 and log.counters["appends"] == 3

    asyncio.run(scenario())


def test_resign_unloads_then_fails_what_is_queued():
    async def scenario():
        calls = ScriptedCalls()
        log = make_log(calls)
        log.lead(4, "replica")
        seen = []
        log.append(b"sent", lambda error: seen.append(("sent", error)))
        await asyncio.sleep(0.01)  # appended, waiting for the HW
        log.append(b"queued", lambda error: seen.append(("queued", error)))
        log.resign(5, unload=lambda: seen.append("unloaded"))
        assert seen == ["unloaded", ("queued", E.not_leader_or_follower)]
        calls.waits[1].set_result(E.none)  # what was sent completes as the log says
        await asyncio.sleep(0.01)
        assert seen[-1] == ("sent", E.none)
        assert not log.leading and log.leader_epoch == 5
        log.append(b"late", lambda error: seen.append(("late", error)))
        assert seen[-1] == ("late", E.not_leader_or_follower)

    asyncio.run(scenario())


def test_a_restarted_coordinator_elects_itself_once_at_the_replica_epoch():
    async def scenario():
        calls = ScriptedCalls()
        log = make_log(calls, restarted=True)
        elected = []

        async def elect(epoch, replica):
            elected.append((epoch, replica))
            return 0

        log.recover_if_restarted(elect)
        log.recover_if_restarted(elect)  # one recovery at a time
        await asyncio.sleep(0.01)
        log.recover_if_restarted(elect)  # done: never again
        await asyncio.sleep(0.01)
        assert elected == [(4, "replica")]

        spoken = make_log(calls, restarted=True)
        spoken.lead(6, "replica")  # the controller elected it before the recovery asked
        spoken.recover_if_restarted(elect)
        await asyncio.sleep(0.01)
        assert elected == [(4, "replica")]

    asyncio.run(scenario())


def test_a_replaced_slice_makes_the_load_start_over(tmp_path, monkeypatch):
    import cluster.internal_topic_log as module

    monkeypatch.setattr(module, "LOAD_RETRY_S", 0.01)
    batch = build_batch([SimpleRecord(b"k", b"v")])
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch)
    inode = path.stat().st_ino

    async def scenario():
        calls = ScriptedCalls()
        calls.state.update(log_end_offset=1, high_watermark=1)
        good = ReadResult(0, 1, 1, 0, [FileSlice(str(path), 0, len(batch), 0, inode)])
        calls.reads = [good._replace(slices=[FileSlice(str(path), 0, len(batch), 0, inode + 1)]), good]
        log = make_log(calls)
        log.lead(4, "replica")
        loaded, restarts = asyncio.get_running_loop().create_future(), []
        log.start_load(lambda batches, end: loaded.set_result((batches, end)) or "ok", lambda: restarts.append(1))
        batches, end = await asyncio.wait_for(loaded, 2)
        assert restarts == [1] and end == 1 and log.known_end == 1
        assert [b.records for b in batches] == [((b"k", b"v"),)]

    asyncio.run(scenario())
