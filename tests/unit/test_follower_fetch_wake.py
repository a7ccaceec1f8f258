"""The append -> high watermark path at low rates (issue 27, paced tail):
a follower fetch parked at the leader is answered by the append itself
(Kafka's replica.fetch.min.bytes=1: one byte is enough), not by its wait
expiring, and the follower's fetcher sends its next fetch, carrying its new
log end, right after appending, so the HW moves without a timer in between.
Driven without Ray: the actor class is a plain class."""
import asyncio

from actors.partition_leader import ReplicaActor
from core.replica_messages import AppendRequest
from storage.records import SimpleRecord, build_batch

LEADER, FOLLOWER = 1, 2
# Long enough that a test passing within its deadline cannot have waited for them.
LONG_WAIT_MS = 60_000


def _batch(n=1):
    return build_batch([SimpleRecord(key=b"k", value=b"v%d" % i) for i in range(n)], compression=0)


def _replica(path, broker_id) -> ReplicaActor:
    replica = ReplicaActor("t", 0, broker_id, [str(path)], {"segment_bytes": 1 << 20}, min_insync_replicas=2,
                           replica_config={"replica.fetch.wait.max.ms": LONG_WAIT_MS,
                                           "replica.fetch.backoff.ms": LONG_WAIT_MS})
    replica._report_progress = lambda force=False: None  # no purgatory here (no Ray)
    return replica


async def _close(*replicas):
    for replica in replicas:
        replica._closed = True
        replica.follower.stop()
        for task in replica._background:
            task.cancel()


class _RemoteMethod:
    def __init__(self, method):
        self.method = method
        self.calls = []

    def remote(self, *args):
        self.calls.append(args)
        return self.method(*args)


class _LeaderHandle:
    """What the fetcher calls when no direct channel is up (outside Ray): ``handle.fetch_for_follower.remote``."""

    def __init__(self, leader: ReplicaActor):
        self.fetch_for_follower = _RemoteMethod(leader.fetch_for_follower)


def test_a_parked_follower_fetch_is_answered_by_the_append(tmp_path):
    async def run():
        leader = _replica(tmp_path, LEADER)
        assert await leader.become_leader(1, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER]) == 0
        parked = asyncio.ensure_future(leader.fetch_for_follower(FOLLOWER, 0, -1, 0, 1 << 20, 2000, -1, True))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not parked.done(), "nothing to send yet: the fetch waits"
        [appended] = (await leader.append(AppendRequest.from_sets([(_batch(3), -1, 5000)], 0))).results
        assert appended.error == 0
        # No time passes: the append's wake-up alone must get the answer out.
        for _ in range(50):
            if parked.done():
                break
            await asyncio.sleep(0)
        assert parked.done(), "the append did not answer the parked follower fetch"
        answer = parked.result()
        assert answer.error == 0 and answer.slices and answer.log_end_offset == 3
        await _close(leader)

    asyncio.run(run())


def test_the_follower_reports_its_new_log_end_right_after_appending(tmp_path):
    async def run():
        leader = _replica(tmp_path / "leader", LEADER)
        follower = _replica(tmp_path / "follower", FOLLOWER)
        assert await leader.become_leader(1, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER]) == 0
        handle = _LeaderHandle(leader)
        assert await follower.become_follower(1, LEADER, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER], handle) == 0
        [appended] = (await leader.append(AppendRequest.from_sets([(_batch(3), -1, 5000)], 0))).results
        end = appended.last_offset + 1
        # acks=all's wait: answered once the follower's next fetch reports log end 3.
        assert await asyncio.wait_for(leader.wait_committed(end, 0, LONG_WAIT_MS), 10) == 0
        assert leader.partition.high_watermark == end
        assert follower.log.log_end_offset == end
        fetch_offsets = [args[1] for args in handle.fetch_for_follower.calls]
        assert fetch_offsets[-1] == end and fetch_offsets.count(0) == 1, fetch_offsets
        await _close(follower, leader)

    asyncio.run(run())
