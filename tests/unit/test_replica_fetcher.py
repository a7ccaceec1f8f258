"""cluster/replica_fetcher.ReplicaFetcher (no Ray): a follower's fetch loop
over a transport that calls the leader's Partition directly. The HW reaches
the follower, a diverging follower truncates to the new leader's epoch end
(KIP-320), a failed fetch asks the host about the leader and backs off, and
stop() ends the loop."""
import asyncio
import time

from cluster.partition import Partition
from cluster.replica_fetcher import FollowerFetch, ReplicaFetcher, throttle_from_config
from storage.log import Log, LogConfig
from storage.records import SimpleRecord, build_batch
from storage.slice_reader import SliceReader

A, B = 1, 2
CONFIG = {"replica.fetch.backoff.ms": 5, "replica.fetch.max.bytes": 1 << 20, "replica.fetch.wait.max.ms": 10}


def batch(n: int, tag: bytes) -> bytes:
    return build_batch([SimpleRecord(key=b"k", value=tag + str(i).encode()) for i in range(n)], compression=0)


def replica(tmp_path, broker_id: int) -> Partition:
    log = Log(str(tmp_path / f"broker-{broker_id}" / "t-0"), LogConfig(segment_bytes=1 << 20))
    return Partition("t", 0, broker_id, log, 0, min_insync_replicas=1)


class DirectTransport:
    """The leader's Partition called in-process, as the leader replica actor would answer."""

    def __init__(self, leader: Partition, slices: bool = False):
        self.leader = leader
        self.slices = slices
        self.requests: list[FollowerFetch] = []

    async def fetch(self, request: FollowerFetch, timeout_s: float, slices_ok: bool):
        self.requests.append(request)
        result = self.leader.fetch_for_follower(*request.args()[:5], int(time.time() * 1000),
                                                request.follower_log_start, self.slices and slices_ok)
        if result.expand_isr is not None:
            self.leader.apply_isr(result.expand_isr, self.leader.state_zk_version + 1)
        if not result.data_size:
            await asyncio.sleep(0.001)  # the leader's long poll, shortened
        return result


class FailingTransport:
    def __init__(self):
        self.calls = 0

    async def fetch(self, request, timeout_s, slices_ok):
        self.calls += 1
        raise asyncio.TimeoutError()


def counters():
    return {"fetches_sent": 0, "fetched_bytes": 0, "fetched_as_slices": 0, "apply_total_ms": 0.0, "apply_count": 0}


def fetcher(follower: Partition, leader_id: int, leader_epoch: int, transport, unreachable=None, reader=None):
    async def leader_unreachable(leader, epoch):
        if unreachable is not None:
            unreachable.append((leader, epoch))

    return ReplicaFetcher("t-0", follower, follower.broker_id, leader_id, leader_epoch, CONFIG, 1.0,
                          throttle_from_config(0, follower.broker_id, {}), transport, reader or SliceReader(),
                          counters(), lambda: None, leader_unreachable)


async def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_the_follower_replicates_and_takes_the_leaders_high_watermark(tmp_path):
    async def scenario():
        leader, follower = replica(tmp_path, A), replica(tmp_path, B)
        assert leader.make_leader(1, 0, [A, B], [A, B], zk_version=0, now_ms=0) == 0
        assert follower.make_follower(1, A, 0, [A, B], [A, B]) == 0
        leader.append([(batch(3, b"x"), -1, 1000)], 0, now_ms=0)
        assert leader.high_watermark == 0, "the HW waits for the follower"
        transport = DirectTransport(leader, slices=True)
        f = fetcher(follower, A, 0, transport)
        task = asyncio.ensure_future(f.run())
        await wait_until(lambda: follower.high_watermark == 3)
        assert leader.high_watermark == 3 and follower.log.log_end_offset == 3
        assert follower.log.read_bytes(0, 1 << 20, None) == leader.log.read_bytes(0, 1 << 20, None)
        assert f.counters["fetched_as_slices"] >= 1 and f.counters["fetched_bytes"] > 0
        assert all(r.current_leader_epoch == 0 and r.follower_id == B for r in transport.requests)
        f.stop()
        await asyncio.wait_for(task, 5)

    asyncio.run(scenario())


def test_a_diverging_follower_truncates_to_the_new_leaders_epoch_end(tmp_path):
    """A led epoch 0 and wrote 0..4, only 0..2 reached B. B leads epoch 1 and
    writes 3..4 anew; A's fetcher must drop its own 3..4 and take B's."""
    async def scenario():
        a, b = replica(tmp_path, A), replica(tmp_path, B)
        a.make_leader(1, 0, [A, B], [A, B])
        b.make_follower(1, A, 0, [A, B], [A, B])
        a.append([(batch(3, b"old"), -1, 1000)], 0, now_ms=0)
        r = a.fetch_for_follower(B, 0, -1, 0, 1 << 20, 0)
        b.append_as_follower(r.records, r.high_watermark, 0)
        a.append([(batch(2, b"lost"), -1, 1000)], 0, now_ms=0)  # never replicated
        assert b.make_leader(2, 1, [B], [A, B]) == 0
        b.append([(batch(2, b"new"), -1, 1000)], 1, now_ms=0)
        assert a.make_follower(2, B, 1, [B], [A, B]) == 0
        f = fetcher(a, B, 1, DirectTransport(b))
        task = asyncio.ensure_future(f.run())
        await wait_until(lambda: a.log.log_end_offset == 5 and a.last_fetched_epoch() == 1)
        assert a.log.read_bytes(0, 1 << 20, None) == b.log.read_bytes(0, 1 << 20, None)
        await wait_until(lambda: a.high_watermark == 5)
        f.stop()
        await asyncio.wait_for(task, 5)

    asyncio.run(scenario())


def test_a_failed_fetch_asks_the_host_about_the_leader_backs_off_and_stop_ends_the_loop(tmp_path):
    async def scenario():
        follower = replica(tmp_path, B)
        assert follower.make_follower(1, A, 3, [A, B], [A, B]) == 0
        unreachable = []
        transport = FailingTransport()
        f = fetcher(follower, A, 3, transport, unreachable)
        task = asyncio.ensure_future(f.run())
        await wait_until(lambda: transport.calls >= 2)
        assert unreachable[0] == (A, 3)
        f.stop()
        await asyncio.wait_for(task, 5)
        assert follower.log.log_end_offset == 0

    asyncio.run(scenario())
