"""RF > 1 replica sets hibernate together (issue 30): the decision rules
(cluster.replica_pool.hibernation_blocker, Partition.followers_caught_up over
real logs) and the pools of a set's three nodes talking to each other through
a fake starter (no Ray): the leader closes, then its followers; the leader's
wake wakes them; a follower is woken for a live leader only."""
from __future__ import annotations

import asyncio
from typing import NamedTuple

from cluster.controller.channel import LeaderAndIsr
from cluster.replica_pool import ReplicaPool, State, hibernation_blocker
from core.pooled_replica import HibernateAnswer
from tests.unit.test_partition_replication import LEADER, append, batch, pair
from tests.unit.test_partition_replication import replicate as replicate_without_log_start


def replicate(leader, follower, now_ms: int = 0):
    """One follower fetch round that reports the follower's log start, as actors/follower.py does."""
    result = leader.fetch_for_follower(2, follower.log.log_end_offset, follower.last_fetched_epoch(),
                                       leader.leader_epoch, 1 << 20, now_ms, follower.log.log_start_offset)
    if result.error == 0 and result.diverging is None:
        follower.append_as_follower(result.records, result.high_watermark, result.log_start_offset)
    if result.expand_isr is not None:
        leader.apply_isr(result.expand_isr, leader.state_zk_version + 1)
    return result

# ---- the decision rules ---------------------------------------------------------------------------


def blocker(**kw):
    args = dict(topic="t", is_leader=True, replicas=3, high_watermark=10, log_end_offset=10, open_transaction=False,
                replicated=True, followers_behind=False, fetching=False)
    args.update(kw)
    return hibernation_blocker(**args)


def test_a_caught_up_replicated_leader_may_hibernate_only_with_replicated_sets_on():
    assert blocker() == ""
    assert blocker(replicated=False) == "replicated (RF > 1 replicas stay live)"


def test_what_holds_a_replicated_set_live():
    assert blocker(topic="__consumer_offsets") == "internal topic"
    assert blocker(topic="__transaction_state") == "internal topic"
    assert blocker(high_watermark=9) == "unreplicated tail"
    assert blocker(followers_behind=True) == "followers not caught up"
    assert blocker(open_transaction=True) == "open transaction"


def test_a_follower_hibernates_with_its_leader_not_on_its_own_while_it_follows():
    assert blocker(is_leader=False, fetching=True) == "a follower (hibernates with its leader)"
    # No live leader to follow (it hibernated while this one was away): idle like any other.
    assert blocker(is_leader=False, fetching=False) == ""
    assert blocker(is_leader=False, replicated=False) == "not the leader"
    assert blocker(is_leader=False, replicas=1) == "not the leader"


def test_followers_caught_up_needs_every_isr_follower_at_the_log_end(tmp_path):
    leader, follower = pair(tmp_path)
    # Not heard from since it became leader: not known to be caught up.
    assert not leader.followers_caught_up(0, 30_000)
    replicate(leader, follower)
    assert leader.followers_caught_up(0, 30_000)
    append(leader, batch(3))
    assert not leader.followers_caught_up(0, 30_000), "LEO moved past the follower"
    replicate(leader, follower)  # fetched 0..2, reported LEO 0
    assert not leader.followers_caught_up(0, 30_000)
    replicate(leader, follower)  # reports LEO 3: HW = LEO = 3
    assert leader.high_watermark == leader.log.log_end_offset == 3
    assert leader.followers_caught_up(0, 30_000)


def test_a_follower_out_of_the_isr_counts_only_while_it_still_fetches(tmp_path):
    leader, follower = pair(tmp_path, isr=(LEADER,))
    append(leader, batch(2))
    replicate(leader, follower, now_ms=1_000)  # fetching, behind
    assert not leader.followers_caught_up(2_000, 30_000)
    # Gone for longer than replica.lag.time.max.ms: the set does not wait for it.
    assert leader.followers_caught_up(40_000, 30_000)


def test_a_delete_records_under_way_holds_the_set(tmp_path):
    leader, follower = pair(tmp_path)
    append(leader, batch(4))
    replicate(leader, follower)
    replicate(leader, follower)
    assert leader.followers_caught_up(0, 30_000)
    leader.log.delete_records(2, leader.high_watermark)
    assert not leader.followers_caught_up(0, 30_000), "the follower's log start is behind the leader's"
    replicate(leader, follower)  # the follower moves its log start and reports it on the next fetch
    replicate(leader, follower)
    assert leader.followers_caught_up(0, 30_000)


def test_a_follower_takes_the_leaders_high_watermark_up_to_its_own_log_end(tmp_path):
    leader, follower = pair(tmp_path)
    append(leader, batch(2))
    append(leader, batch(1))
    replicate(leader, follower)  # fetched 0..2 at HW 0
    replicate_without_log_start(leader, follower)  # reported LEO 3: the leader's HW is 3
    assert leader.high_watermark == 3
    follower.log.truncate_to(2)  # (as if its last fetch had brought less)
    follower.high_watermark = 0
    follower.take_leader_high_watermark(5)
    assert follower.high_watermark == 2, "never past its own log end"
    leader.take_leader_high_watermark(1)
    assert leader.high_watermark == 3, "a leader ignores it"


# ---- three nodes' pools over a fake cluster ---------------------------------------------------------

class Spec(NamedTuple):
    topic: str
    partition: int
    broker_id: int


class FakeCluster:
    """The replica actors of one partition on three brokers, and each broker's pool."""

    def __init__(self, brokers=(1, 2, 3)):
        self.pools: dict[int, ReplicaPool] = {}
        self.live: dict[int, LeaderAndIsr] = {}  # broker -> what its live actor was last told
        self.log: list[tuple] = []
        self.follower_refuses: set[int] = set()
        self.leader_blocker = ""
        for b in brokers:
            self.pools[b] = ReplicaPool(FakeStarter(self, b), live_max=10, hibernate_s=60, clock=self.clock,
                                        broker_id=b)
        self.now = 0.0

    def clock(self):
        return self.now


class FakeStarter:
    def __init__(self, cluster: FakeCluster, broker: int):
        self.cluster, self.broker = cluster, broker

    async def start(self, spec, request):
        self.cluster.log.append(("start", self.broker, request.leader))
        self.cluster.live[self.broker] = request
        return self.broker

    async def leader_and_isr(self, handle, request, spec=None):
        self.cluster.log.append(("leader_and_isr", self.broker, request.leader))
        self.cluster.live[self.broker] = request
        return 0

    async def hibernate(self, handle):
        if self.cluster.leader_blocker:
            return HibernateAnswer(False, self.cluster.leader_blocker)
        self.cluster.log.append(("closed", self.broker))
        request = self.cluster.live[self.broker]
        return HibernateAnswer(True, "", request.leader_epoch, 7, 7)

    def end(self, handle):
        self.cluster.log.append(("end", handle))
        del self.cluster.live[handle]

    async def wake_followers(self, spec, request, handle=None):
        assert handle == spec.broker_id, "the woken leader is told its followers are waking"
        for b in request.replicas:
            if b != spec.broker_id:
                await self.cluster.pools[b].wake_follower((spec.topic, spec.partition), request.leader_epoch)

    async def hibernate_followers(self, spec, request, answer):
        for b in request.replicas:
            if b != spec.broker_id:
                got = await self.cluster.pools[b].hibernate_follower(
                    (spec.topic, spec.partition), answer.leader_epoch, answer.high_watermark, answer.log_end_offset)
                self.cluster.log.append(("follower_answer", b, got.ok))

    async def hibernate_follower(self, handle, leader_epoch, high_watermark, log_end_offset):
        if handle in self.cluster.follower_refuses:
            return HibernateAnswer(False, "not at the leader's log end")
        assert (high_watermark, log_end_offset) == (7, 7)
        self.cluster.log.append(("closed", handle))
        return HibernateAnswer(True)

    async def leader_is_live(self, spec, request):
        return request.leader in self.cluster.live and self.cluster.live[request.leader].leader == request.leader

    async def wake_leader(self, spec, request):
        self.cluster.log.append(("wake_leader", self.broker, request.leader))
        return await self.cluster.pools[request.leader].wake_leader((spec.topic, spec.partition),
                                                                    request.leader_epoch)


def lai(leader=1, epoch=3, controller_epoch=1, isr=(1, 2, 3)):
    return LeaderAndIsr(controller_epoch, leader, epoch, list(isr), [1, 2, 3], 5)


KEY = ("t", 0)


async def settle(cluster: FakeCluster) -> None:
    """Let the pools' background tasks (wakes, follower wakes) finish."""
    for _ in range(50):
        tasks = [t for p in cluster.pools.values() for t in p._tasks]
        if not tasks:
            return
        await asyncio.gather(*tasks, return_exceptions=True)


async def hosted_set(cluster: FakeCluster, request: LeaderAndIsr) -> None:
    for b, pool in cluster.pools.items():
        assert await pool.leader_and_isr(KEY, Spec("t", 0, b), request) == 0


async def request_on(cluster: FakeCluster, broker: int = 1) -> None:
    """One request through `broker`'s pool (waking the set if it sleeps), then let the cluster settle."""
    await cluster.pools[broker].acquire(KEY)
    cluster.pools[broker].release(KEY)
    await settle(cluster)


def run(coro):
    return asyncio.run(coro)


def test_leaderandisr_for_a_hibernated_set_starts_nothing_and_the_leaders_wake_wakes_its_followers():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        await settle(cluster)
        assert cluster.live == {} and cluster.log == [], "followers of a hibernated leader stay hibernated"
        handle = await cluster.pools[1].acquire(KEY)
        cluster.pools[1].release(KEY)
        assert handle == 1
        await settle(cluster)
        assert sorted(cluster.live) == [1, 2, 3]
        assert cluster.log[0] == ("start", 1, 1), "the leader first, its followers then"
        assert {e for e in cluster.log[1:]} == {("start", 2, 1), ("start", 3, 1)}
        assert all(cluster.pools[b].entries[KEY].state is State.LIVE for b in (1, 2, 3))
    run(scenario())


def test_the_set_hibernates_leader_first_then_followers_at_the_leaders_end_then_the_leader_ends():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        await request_on(cluster)
        cluster.log.clear()
        cluster.now = 61
        # A follower's own pool never puts it to sleep while it follows (the actor refuses: fetching);
        # here the fake would close it, so only the leader's pool sweeps.
        assert await cluster.pools[1].hibernate_idle() == 1
        assert cluster.log[0] == ("closed", 1)
        assert cluster.log[-1] == ("end", 1), "the leader ends after its followers stopped"
        assert ("follower_answer", 2, True) in cluster.log and ("follower_answer", 3, True) in cluster.log
        assert cluster.live == {}
        assert all(cluster.pools[b].entries[KEY].state is State.HIBERNATED for b in (1, 2, 3))
        assert cluster.pools[2].entries[KEY].request == lai(), "same leader, epoch and ISR kept"
        # The next produce wakes the whole set again.
        await request_on(cluster)
        assert sorted(cluster.live) == [1, 2, 3]
    run(scenario())


def test_a_leader_that_refuses_keeps_its_followers_live():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        await request_on(cluster)
        cluster.leader_blocker = "followers not caught up"
        cluster.now = 61
        assert await cluster.pools[1].hibernate_idle() == 0
        assert sorted(cluster.live) == [1, 2, 3]
        assert cluster.pools[1].stats().refusals == 1
    run(scenario())


def test_a_follower_that_refuses_stays_live_and_the_others_hibernate():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        await request_on(cluster)
        cluster.follower_refuses.add(3)
        cluster.now = 61
        assert await cluster.pools[1].hibernate_idle() == 1
        assert sorted(cluster.live) == [3], "it finds its leader gone and wakes it (the actor's side)"
        assert cluster.pools[3].entries[KEY].state is State.LIVE
        # That wake: the leader's pool wakes the leader, which re-points the live follower.
        assert await cluster.pools[1].wake_leader(KEY, 3) == 0
        await settle(cluster)
        assert sorted(cluster.live) == [1, 2, 3]
        assert ("leader_and_isr", 3, 1) in cluster.log, "the live follower is given the woken leader"
    run(scenario())


def test_a_follower_hibernates_only_at_the_leader_epoch_it_follows():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        await request_on(cluster)
        answer = await cluster.pools[2].hibernate_follower(KEY, 2, 7, 7)
        assert not answer.ok and cluster.pools[2].entries[KEY].state is State.LIVE
        assert await cluster.pools[2].wake_follower(KEY, 2) != 0, "a stale leader epoch wakes nothing"
        assert await cluster.pools[1].wake_leader(KEY, 2) != 0
        assert not (await cluster.pools[1].hibernate_follower(KEY, 3, 7, 7)).ok, "the leader is no follower"
    run(scenario())


def test_a_new_leader_elected_while_the_set_hibernates_wakes_on_demand_and_wakes_the_survivor():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        # Broker 1's node is lost while the set hibernates; the controller elects 2 (epoch 4).
        del cluster.pools[1]
        elected = LeaderAndIsr(1, 2, 4, [2, 3], [1, 2, 3], 6)
        for b in (2, 3):
            assert await cluster.pools[b].leader_and_isr(KEY, Spec("t", 0, b), elected) == 0
        await settle(cluster)
        assert cluster.live == {}, "nothing starts for the election itself"
        # The first produce to the new leader wakes it with the new epoch, and it wakes broker 3.
        cluster.pools[2].starter.cluster = cluster

        async def wake_followers(spec, request, handle=None):
            await cluster.pools[3].wake_follower((spec.topic, spec.partition), request.leader_epoch)

        cluster.pools[2].starter.wake_followers = wake_followers
        await request_on(cluster, 2)
        assert cluster.live == {2: elected, 3: elected}
    run(scenario())


def test_a_hibernated_follower_told_of_a_live_leader_wakes_to_follow_it():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        await request_on(cluster)
        # Broker 3's node restarts: a fresh pool, the controller's LeaderAndIsr for its follower.
        cluster.pools[3] = ReplicaPool(FakeStarter(cluster, 3), 10, 60, clock=cluster.clock, broker_id=3)
        del cluster.live[3]
        assert await cluster.pools[3].leader_and_isr(KEY, Spec("t", 0, 3), lai(isr=(1, 2))) == 0
        await settle(cluster)
        assert 3 in cluster.live, "it must fetch to rejoin the ISR of a live leader"
    run(scenario())


def test_a_returning_follower_out_of_the_isr_of_a_hibernated_leader_has_the_set_woken_to_catch_up():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai())
        await settle(cluster)
        assert cluster.live == {}
        # Broker 3's node was lost and came back while the set hibernated: the controller took it
        # out of the ISR, and its fresh pool gets its LeaderAndIsr as a follower outside the ISR.
        shrunk = lai(epoch=3, isr=(1, 2))
        for b in (1, 2):
            assert await cluster.pools[b].leader_and_isr(KEY, Spec("t", 0, b), shrunk) == 0
        cluster.pools[3] = ReplicaPool(FakeStarter(cluster, 3), 10, 60, clock=cluster.clock, broker_id=3)
        assert await cluster.pools[3].leader_and_isr(KEY, Spec("t", 0, 3), shrunk) == 0
        await settle(cluster)
        assert ("wake_leader", 3, 1) in cluster.log
        assert sorted(cluster.live) == [1, 2, 3], "the leader woke, and woke its followers: 3 fetches to catch up"
        assert cluster.log.index(("start", 1, 1)) < cluster.log.index(("start", 3, 1))
        # A follower in the ISR of a hibernated leader wakes nothing (the first request does).
        quiet = FakeCluster()
        await hosted_set(quiet, lai())
        quiet.pools[3] = ReplicaPool(FakeStarter(quiet, 3), 10, 60, clock=quiet.clock, broker_id=3)
        assert await quiet.pools[3].leader_and_isr(KEY, Spec("t", 0, 3), lai()) == 0
        await settle(quiet)
        assert quiet.live == {} and quiet.log == []
    run(scenario())


def test_a_stale_leaderandisr_is_fenced_for_a_pooled_follower():
    async def scenario():
        cluster = FakeCluster()
        await hosted_set(cluster, lai(epoch=3))
        assert await cluster.pools[2].leader_and_isr(KEY, Spec("t", 0, 2), lai(epoch=2)) != 0
        assert cluster.pools[2].entries[KEY].request.leader_epoch == 3
    run(scenario())


# ---- a woken follower is a fresh replica over its log on disk: KIP-101/320 still apply --------------

def fetch_round(leader, follower, follower_id: int):
    result = leader.fetch_for_follower(follower_id, follower.log.log_end_offset, follower.last_fetched_epoch(),
                                       leader.leader_epoch, 1 << 20, 0, follower.log.log_start_offset)
    if result.diverging is not None:
        follower.truncate_for_divergence(*result.diverging)
    elif result.error == 0:
        follower.append_as_follower(result.records, result.high_watermark, result.log_start_offset)
    return result


def test_a_follower_woken_from_disk_truncates_its_diverged_tail_by_leader_epoch(tmp_path):
    from cluster.partition import Partition
    from storage.log import Log, LogConfig
    from tests.unit.test_partition_replication import replica

    old_leader, survivor = replica(tmp_path, 2), replica(tmp_path, 1)
    assert old_leader.make_leader(1, 0, [2, 1], [2, 1], 0, 0) == 0
    assert survivor.make_follower(1, 2, 0, [2, 1], [2, 1]) == 0
    append(old_leader, batch(2))
    fetch_round(old_leader, survivor, 1)
    append(old_leader, batch(1, b"lost"))  # offset 2: never replicated, never acknowledged at acks=all
    assert old_leader.log.log_end_offset == 3 and survivor.log.log_end_offset == 2
    # The old leader's replica goes down (hibernated or its node lost) with the unreplicated tail on disk.
    old_leader.log.close()
    assert survivor.make_leader(2, 1, [1], [2, 1], 1, 0) == 0
    append(survivor, batch(1, b"new"))  # offset 2, epoch 1
    # Woken as a follower: a fresh Partition over the same log directory.
    log = Log(str(tmp_path / "broker-2" / "t-0"), LogConfig(segment_bytes=1 << 20))
    woken = Partition("t", 0, 2, log, 0)
    assert log.log_end_offset == 3 and woken.last_fetched_epoch() == 0
    assert woken.make_follower(2, 1, 1, [1], [2, 1]) == 0
    result = fetch_round(survivor, woken, 2)
    assert result.diverging is not None and tuple(result.diverging) == (0, 2)
    assert log.log_end_offset == 2, "truncated to the end of the last epoch both agree on"
    fetch_round(survivor, woken, 2)
    assert log.log_end_offset == 3
    assert log.read_bytes(2, 1 << 20, None, min_one_batch=True) == \
        survivor.log.read_bytes(2, 1 << 20, None, min_one_batch=True)


def test_a_woken_leader_drops_no_follower_from_the_isr_while_its_followers_are_being_woken(tmp_path):
    leader, follower = pair(tmp_path)
    assert leader.out_of_sync_replicas(20_000, 10_000) == [2], "a follower silent past the lag time"
    leader.followers_waking(True, 20_000)
    assert leader.out_of_sync_replicas(40_000, 10_000) == [], "starting, not lagging"
    leader.followers_waking(False, 45_000)
    assert leader.out_of_sync_replicas(50_000, 10_000) == []
    assert leader.out_of_sync_replicas(56_000, 10_000) == [2], "the lag time counts from when it was told to fetch"
    replicate(leader, follower, now_ms=56_000)
    assert leader.out_of_sync_replicas(60_000, 10_000) == []


def test_replicated_sets_count_against_the_live_limit_only_where_they_never_hibernate():
    from cluster.capacity import HOSTED_KEY, NodeCapacity, always_live

    assert always_live([1, 2, 3], internal=False) and not always_live([1, 2, 3], False, replicated_hibernate=True)
    assert always_live([1, 2, 3], internal=True, replicated_hibernate=True), "internal topics never hibernate"
    rf3 = {p: [0, 1, 2] for p in range(4)}
    capacity = {0: 3, 1: 3, 2: 3}
    kept_live = NodeCapacity({b: 10 for b in capacity}, {}, key=HOSTED_KEY, live=NodeCapacity(capacity, {}))
    assert kept_live.check(rf3) is not None, "4 always-live replicas per node pass a live limit of 3"
    hibernating = NodeCapacity({b: 10 for b in capacity}, {}, key=HOSTED_KEY, live=NodeCapacity(capacity, {}),
                               replicated_hibernate=True)
    assert hibernating.check(rf3) is None, "they hibernate: only the hosted limit applies"
    assert hibernating.check({p: [0, 1, 2] for p in range(11)}).key == HOSTED_KEY
