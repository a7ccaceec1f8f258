"""cluster/replica_pool.py without Ray: a fake starter and a manual clock (issue 30)."""
from __future__ import annotations

import asyncio

import pytest

from cluster.capacity import (HOSTED_KEY, NodeCapacity, default_partitions_per_node)
from cluster.controller.channel import LeaderAndIsr
from cluster import replica_pool
from cluster.replica_pool import ReplicaPool, hibernation_blocker
from core.error_codes import ErrorCode
from core.pooled_replica import HibernateAnswer


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeStarter:
    def __init__(self):
        self.live: dict[str, LeaderAndIsr] = {}
        self.started: list[str] = []
        self.forwarded: list[tuple[str, LeaderAndIsr]] = []
        self.refuse: set[str] = set()
        self.max_live = 0
        self.gate: asyncio.Event | None = None
        self.ended: list[str] = []
        self.spares_wanted: list[int] = []  # what the pool asked for, in order
        self.ready_spares: list[str] = []
        self.adopted_by: dict[str, str] = {}
        self.calls: list[tuple] = []
        self.deleted: list[tuple] = []

    async def start(self, spec, request, spare=None):
        if spare is not None:
            self.adopted_by[spec] = spare
        if self.gate is not None:
            await self.gate.wait()
        self.live[spec] = request
        self.started.append(spec)
        self.max_live = max(self.max_live, len(self.live))
        return spec  # the handle is the name

    async def leader_and_isr(self, handle, request, spec=None):
        self.forwarded.append((handle, request))
        self.live[handle] = request
        return 0

    async def hibernate(self, handle):
        if handle in self.refuse:
            return HibernateAnswer(False, "open transaction")
        return HibernateAnswer(True)

    def end(self, handle):
        self.live.pop(handle, None)  # a lost one is gone already
        self.ended.append(handle)

    def spares(self, wanted):
        self.spares_wanted.append(wanted)

    def claim_spare(self):
        return self.ready_spares.pop(0) if self.ready_spares else None

    async def call(self, handle, method, args):
        self.calls.append((handle, method, args))
        return 0

    async def delete_log(self, spec, controller_epoch):
        self.deleted.append((spec, controller_epoch))
        return 0


def request(epoch=1, controller_epoch=1):
    return LeaderAndIsr(controller_epoch, 0, epoch, [0], [0], 3)


def run(coro):
    return asyncio.run(coro)


def test_leader_and_isr_starts_nothing_and_a_request_wakes_with_it():
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=2, hibernate_s=60, clock=clock)
        for p in range(5):
            assert await pool.leader_and_isr(("t", p), f"t-{p}", request()) == 0
        assert starter.started == [] and pool.stats().hosted == 5 and pool.stats().live == 0
        handle = await pool.acquire(("t", 3))
        assert handle == "t-3" and starter.live["t-3"] == request()
        pool.release(("t", 3))
        assert pool.stats().wakeups == 1 and pool.stats().live == 1
    run(scenario())


def test_a_new_partitions_leader_starts_at_once_into_free_slots_only(monkeypatch):
    """Kafka's IsNew LeaderAndIsr (CreateTopics, CreatePartitions): the new leaders start in
    the background while the node has free live slots, spares' slots kept, nothing evicted;
    past that they stay hibernated until a request. A follower (led by another node) waits
    for its leader's wake, and a LeaderAndIsr without IsNew (a restart's) starts nothing."""
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=4, hibernate_s=60, clock=clock, spares=1, broker_id=0)
        await pool.leader_and_isr(("old", 0), "old-0", request())  # not new: hosted, not started
        await pool.acquire(("old", 0))  # held: in flight, so never evicted
        new = request()._replace(is_new=True)
        await pool.leader_and_isr(("t", 0), "t-0", new)
        assert starter.started == ["old-0", "t-0"]  # the LeaderAndIsr answered once it was up
        for p in range(1, 4):
            await pool.leader_and_isr(("t", p), f"t-{p}", new)
        await pool.leader_and_isr(("f", 0), "f-0", LeaderAndIsr(1, 2, 1, [2, 0], [2, 0], 3, is_new=True))
        # 4 slots: "old-0" live, one kept for the spare: two new leaders started, in order.
        assert starter.started == ["old-0", "t-0", "t-1"]
        stats = pool.stats()
        assert (stats.live, stats.prestarts, stats.over_limit) == (3, 2, 0)
        assert starter.ended == []
        # The others wake on their first request, as any hibernated replica does.
        assert await pool.acquire(("t", 3)) == "t-3"
        # A start that takes long: the LeaderAndIsr answers after PRESTART_WAIT_S, the start goes on.
        slow = ReplicaPool(starter, live_max=4, hibernate_s=60, clock=clock)
        starter.gate = asyncio.Event()
        monkeypatch.setattr(replica_pool, "PRESTART_WAIT_S", 0.05)
        await asyncio.wait_for(slow.leader_and_isr(("s", 0), "s-0", new), 1)
        assert slow.stats().live == 1 and "s-0" not in starter.started
        starter.gate.set()
        assert await asyncio.wait_for(slow.acquire(("s", 0)), 1) == "s-0"
    run(scenario())


def test_a_bulk_creation_prestarts_at_most_prestart_max_at_once(monkeypatch):
    monkeypatch.setattr(replica_pool, "PRESTART_MAX", 3)

    async def scenario():
        starter, clock = FakeStarter(), Clock()
        starter.gate = asyncio.Event()
        pool = ReplicaPool(starter, live_max=100, hibernate_s=60, clock=clock)
        new = request()._replace(is_new=True)
        creations = [asyncio.ensure_future(pool.leader_and_isr(("t", p), f"t-{p}", new)) for p in range(10)]
        await asyncio.sleep(0.01)
        starter.gate.set()
        await asyncio.wait_for(asyncio.gather(*creations), 1)
        assert sorted(starter.started) == ["t-0", "t-1", "t-2"] and pool.stats().prestarts == 3
        # Once those are up, the next creation prestarts again.
        await pool.leader_and_isr(("u", 0), "u-0", new)
        assert starter.started[-1] == "u-0"
    run(scenario())


def test_a_requested_wake_starts_before_queued_prestarts(monkeypatch):
    """One start at a time: a bulk creation's prestarts queue, and the wakes requests wait
    for (another partition's, or one of the prestarted ones a client asks for) go first."""
    monkeypatch.setattr(replica_pool, "MAX_CONCURRENT_STARTS", 1)

    async def scenario():
        starter, clock = FakeStarter(), Clock()
        starter.gate = asyncio.Event()
        pool = ReplicaPool(starter, live_max=20, hibernate_s=60, clock=clock)
        await pool.leader_and_isr(("old", 0), "old-0", request())
        new = request()._replace(is_new=True)
        creations = [asyncio.ensure_future(pool.leader_and_isr(("t", p), f"t-{p}", new)) for p in range(4)]
        await asyncio.sleep(0.01)  # t-0 starting, t-1..t-3 queued for the start
        requests = [asyncio.ensure_future(pool.acquire(("old", 0)))]
        await asyncio.sleep(0.01)
        requests.append(asyncio.ensure_future(pool.acquire(("t", 3))))  # a client asks for t-3 already
        await asyncio.sleep(0.01)
        starter.gate.set()
        await asyncio.wait_for(asyncio.gather(*requests, *creations), 1)
        # t-3 was queued (as a prestart) before old-0's wake: among wakes requests wait for,
        # arrival order; the prestarts nobody asked for come last.
        assert starter.started == ["t-0", "t-3", "old-0", "t-1", "t-2"]
        assert pool.stats().prestarts == 4 and pool.stats().live == 5
    run(scenario())


def test_a_new_replicated_partition_is_answered_once_its_followers_are_woken_too():
    """RF=3: the new leader's LeaderAndIsr waits for the wake of its followers as well (an
    acks=all produce needs them), up to the prestart wait."""
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        followers_up = asyncio.Event()
        woken = []

        async def wake_followers(spec, request, handle):
            await followers_up.wait()
            woken.append(spec)

        starter.wake_followers = wake_followers
        pool = ReplicaPool(starter, live_max=10, hibernate_s=60, clock=clock, broker_id=0)
        answer = asyncio.ensure_future(pool.leader_and_isr(
            ("r", 0), "r-0", LeaderAndIsr(1, 0, 1, [0, 1, 2], [0, 1, 2], 3, is_new=True)))
        await asyncio.sleep(0.05)
        assert starter.started == ["r-0"] and not answer.done()  # the leader is up, its followers not yet
        followers_up.set()
        assert await asyncio.wait_for(answer, 1) == 0 and woken == ["r-0"]
    run(scenario())


def test_a_follower_of_a_live_leader_keeps_trying_to_wake_until_it_is_up(monkeypatch):
    """A node came back: its follower's first wakes fail (the name still leads to the dead
    node's actor until Ray declares that node dead). It tries again with backoff, so it
    catches up and rejoins the ISR; a StopReplica ends the retries."""
    monkeypatch.setattr(replica_pool, "FOLLOWER_WAKE_BACKOFF_S", 0.01)

    async def scenario():
        starter, clock = FakeStarter(), Clock()
        failures = {"f-0": 2, "g-0": 10**6}
        attempts: list[str] = []
        started = starter.start

        async def start(spec, request, spare=None):
            attempts.append(spec)
            if failures[spec] > 0:
                failures[spec] -= 1
                raise RuntimeError("ActorUnavailableError: connection refused")
            return await started(spec, request, spare)

        async def leader_is_live(spec, request):
            return True

        starter.start, starter.leader_is_live = start, leader_is_live
        pool = ReplicaPool(starter, live_max=10, hibernate_s=60, clock=clock, broker_id=1)
        out_of_isr = LeaderAndIsr(1, 0, 1, [0, 2], [0, 1, 2], 3)
        assert await pool.leader_and_isr(("f", 0), "f-0", out_of_isr) == 0
        for _ in range(200):
            if pool.stats().live == 1:
                break
            await asyncio.sleep(0.01)
        assert starter.started == ["f-0"] and attempts.count("f-0") == 3 and pool.stats().live == 1
        # One that never starts keeps trying until StopReplica.
        assert await pool.leader_and_isr(("g", 0), "g-0", out_of_isr) == 0
        await asyncio.sleep(0.1)
        assert attempts.count("g-0") >= 2
        assert await pool.stop_replica(("g", 0), 1, False) == 0
        await asyncio.sleep(0.1)
        tried = attempts.count("g-0")
        await asyncio.sleep(0.2)
        assert attempts.count("g-0") == tried and "g-0" not in starter.started
    run(scenario())


def test_idle_replicas_hibernate_and_wake_with_the_newest_leader_and_isr():
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=5, hibernate_s=60, clock=clock)
        await pool.leader_and_isr(("t", 0), "t-0", request(1))
        await pool.acquire(("t", 0))
        pool.release(("t", 0))
        clock.now = 59
        assert await pool.hibernate_idle() == 0
        clock.now = 61
        assert await pool.hibernate_idle() == 1
        assert starter.live == {} and pool.stats().hibernated == 1
        # A newer epoch while hibernated is kept, not forwarded (no wake)
        assert await pool.leader_and_isr(("t", 0), "t-0", request(2)) == 0
        assert starter.forwarded == []
        await pool.acquire(("t", 0))
        assert starter.live["t-0"].leader_epoch == 2
        # stale requests are fenced
        assert await pool.leader_and_isr(("t", 0), "t-0", request(1)) == 74
        assert await pool.leader_and_isr(("t", 0), "t-0", request(2, controller_epoch=0)) == 11
    run(scenario())


def test_a_replica_in_use_never_hibernates():
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=5, hibernate_s=1, clock=clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        await pool.acquire(("t", 0))  # a parked fetch: in flight for long
        clock.now = 100
        assert await pool.hibernate_idle() == 0
        pool.release(("t", 0))
        clock.now = 102
        assert await pool.hibernate_idle() == 1
    run(scenario())


def test_a_wake_past_the_live_limit_evicts_the_least_recently_used_idle_replica():
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=2, hibernate_s=600, clock=clock)
        for p in range(4):
            await pool.leader_and_isr(("t", p), f"t-{p}", request())
        for p in (0, 1):
            clock.now += 1
            await pool.acquire(("t", p))
            pool.release(("t", p))
        clock.now += 1
        await pool.acquire(("t", 0))  # 0 used last: 1 is the LRU
        pool.release(("t", 0))
        await pool.acquire(("t", 2))
        assert set(starter.live) == {"t-0", "t-2"}
        starter.refuse.add("t-0")  # 0 refuses (open transaction): the next LRU goes
        pool.release(("t", 2))
        clock.now += 1
        await pool.acquire(("t", 3))
        assert set(starter.live) == {"t-0", "t-3"} and starter.max_live == 2
        assert pool.stats().refusals == 1
    run(scenario())


def test_concurrent_requests_share_one_wake_and_wait_for_it():
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        starter.gate = asyncio.Event()
        pool = ReplicaPool(starter, live_max=2, hibernate_s=60, clock=clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        waiters = [asyncio.ensure_future(pool.acquire(("t", 0))) for _ in range(5)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        starter.gate.set()
        assert await asyncio.gather(*waiters) == ["t-0"] * 5
        assert starter.started == ["t-0"]
    run(scenario())


def test_a_wake_with_no_idle_replica_to_evict_waits_then_goes_over_the_limit():
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=1, hibernate_s=60, clock=clock, slot_wait_s=0)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        await pool.leader_and_isr(("t", 1), "t-1", request())
        await pool.acquire(("t", 0))  # busy
        assert await pool.acquire(("t", 1)) == "t-1"
        assert pool.stats().over_limit == 1
    run(scenario())


def test_more_concurrent_wakes_than_the_live_limit_take_turns_instead_of_blocking_each_other():
    """One Fetch reading more hibernated partitions than the live limit: every read wakes its
    replica at once. A wake waiting for a slot is not a process yet, so it must not count against
    the limit: the first wakes that fit start, their reads finish and release them, and the rest
    evict them and start in turn, all within the limit (before, every waiting wake counted, none
    found an idle replica, and all of them waited the full slot_wait_s, then went over it)."""
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=3, hibernate_s=60, clock=clock, slot_wait_s=30)
        for p in range(6):
            await pool.leader_and_isr(("t", p), f"t-{p}", request())

        async def read(p):
            handle = await pool.acquire(("t", p))
            await asyncio.sleep(0.01)  # the read itself
            pool.release(("t", p))
            return handle

        # The manual clock stands still, so a wake that waited for the deadline would never
        # end: wait_for bounds the test instead.
        handles = await asyncio.wait_for(asyncio.gather(*(read(p) for p in range(6))), 5)
        assert handles == [f"t-{p}" for p in range(6)]
        assert starter.max_live <= 3 and pool.stats().over_limit == 0
    run(scenario())


def test_hibernation_blockers():
    assert hibernation_blocker("__consumer_offsets", True, 1, 5, 5, False) == "internal topic"
    assert hibernation_blocker("t", True, 3, 5, 5, False).startswith("replicated")
    assert hibernation_blocker("t", True, 1, 4, 5, False) == "unreplicated tail"
    assert hibernation_blocker("t", True, 1, 5, 5, True) == "open transaction"
    assert hibernation_blocker("t", False, 1, 5, 5, False) == "not the leader"
    assert hibernation_blocker("t", True, 1, 5, 5, False) == ""


def test_hosted_limit_refuses_past_it_and_the_live_limit_only_for_replicas_that_never_hibernate():
    assert default_partitions_per_node(20_000, 69 * 10**9) == 5_000
    assert default_partitions_per_node(20_000, 1 * 2**30) == 512
    live = NodeCapacity({0: 3}, {0: 0})
    capacity = NodeCapacity({0: 10}, {0: 0}, key=HOSTED_KEY, live=live)
    assert capacity.check({p: [0] for p in range(10)}) is None  # RF=1: hosted limit only
    violation = capacity.check({p: [0] for p in range(11)})
    assert violation.key == HOSTED_KEY and f"{HOSTED_KEY}=10" in violation.message()
    assert capacity.check({p: [0] for p in range(3)}, internal=True) is None
    assert capacity.check({p: [0] for p in range(4)}, internal=True).key != HOSTED_KEY
    capacity.add({0: [0], 1: [0]}, internal=True)  # 2 of 3 live slots now held for good
    assert capacity.check({0: [0]}, internal=True) is None
    assert capacity.check({0: [0], 1: [0]}, internal=True) is not None
    assert capacity.check({p: [0] for p in range(8)}) is None  # RF=1 still fits the hosted limit


def test_describe_shows_live_and_hibernated_counts_where_replicas_hibernate():
    from cli.admin_client import PartitionInfo, TopicInfo
    from cli.topics import broker_usage_lines

    topics = [TopicInfo("a", {0: PartitionInfo(0, 1, (1,), (1,)), 1: PartitionInfo(1, 1, (1,), (1,))})]
    pools = {1: "hosted=2,live=1,hibernated=1,live_max=90,wakeups=5,hibernations=4,wake_p50_ms=700,wake_p99_ms=950,"
                "adopted=4,cold_starts=1,over_limit=2,prestarts=3"}
    assert broker_usage_lines(topics, [1, 2], {1: 90, 2: 90}, pools) == [
        "Broker: 1\tReplicas: 2\tCapacity: 90\tLive: 1/90\tHibernated: 1\tWakeups: 5\tWakeMs p50/p99: 700/950\tAdopted/Cold: 4/1"
        "\tOverLimit: 2\tPrestarts: 3",
        "Broker: 2\tReplicas: 0\tCapacity: 90"]


def test_a_lost_live_replica_is_started_again_by_the_next_request():
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=2, hibernate_s=60, clock=clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        handle = await pool.acquire(("t", 0))
        del starter.live["t-0"]  # the process died
        pool.lost(("t", 0), handle)
        pool.release(("t", 0))
        assert pool.stats().live == 0
        assert starter.ended == ["t-0"]  # ended for sure: it may only have looked gone
        assert await pool.acquire(("t", 0)) == "t-0" and starter.started == ["t-0", "t-0"]
    run(scenario())


def test_spare_slots_are_reserved_under_the_live_limit():
    """Live replicas plus the spares a wake adopts never pass the live limit: with 4 slots
    and 1 spare, at most 3 replicas are live, and the pool asks for the spare only while
    a slot is free for it."""
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=4, hibernate_s=60, clock=clock, spares=1)
        for p in range(6):
            await pool.leader_and_isr(("t", p), f"t-{p}", request())
        assert starter.spares_wanted[-1] == 1  # a node that hosts pooled partitions keeps one
        for p in range(6):
            clock.now += 1
            await pool.acquire(("t", p))
            pool.release(("t", p))
            assert pool.stats().live + starter.spares_wanted[-1] <= 4
        assert pool.stats().live == 3 and starter.max_live == 3
        assert starter.ended == ["t-0", "t-1", "t-2"]  # least recently used first
        # A limit of one leaves no slot for a spare: every wake starts its own.
        alone = ReplicaPool(FakeStarter(), live_max=1, hibernate_s=60, clock=clock, spares=4)
        assert alone.spare_slots == 0
    run(scenario())


def test_a_wake_with_every_live_replica_busy_adopts_a_ready_spare_at_once():
    """No idle replica to evict: a ready spare is a process already, so the wake takes it
    instead of waiting for a slot (and passing the limit with a new process after)."""
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=3, hibernate_s=60, clock=clock, spares=1, slot_wait_s=30)
        for p in range(3):
            await pool.leader_and_isr(("t", p), f"t-{p}", request())
        for p in range(2):
            await pool.acquire(("t", p))  # held: in flight
        starter.ready_spares.append("spare-1")
        await asyncio.wait_for(pool.acquire(("t", 2)), 1)
        assert starter.adopted_by == {"t-2": "spare-1"} and pool.stats().over_limit == 0
    run(scenario())


def test_a_node_hosting_only_replicated_replicas_keeps_spares_for_their_wakes():
    """RF > 1 sets adopt spares too (actors/replica_keeper.py): a node whose pooled replicas are
    all followers of replicated sets keeps its spare slots, and a follower's wake with no slot
    free takes a ready spare instead of starting a process over the limit."""
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=2, hibernate_s=60, clock=clock, spares=1, broker_id=1,
                           slot_wait_s=30)
        follower = LeaderAndIsr(1, 0, 1, [0, 1, 2], [0, 1, 2], 3)  # led by broker 0
        for p in range(2):
            await pool.leader_and_isr(("t", p), f"t-{p}", follower)
        assert starter.spares_wanted[-1] == 1
        await pool.acquire(("t", 0))  # held: in flight
        starter.ready_spares.append("spare-1")
        await asyncio.wait_for(pool.acquire(("t", 1)), 1)
        assert starter.adopted_by == {"t-1": "spare-1"} and pool.stats().over_limit == 0
    run(scenario())


def test_a_throttle_change_while_hibernated_is_kept_for_the_wake():
    from cluster.controller.channel import ReplicaSpec

    class SpecStarter(FakeStarter):
        async def start(self, spec, request, spare=None):
            self.started.append(spec)
            self.live[spec.topic] = request
            return f"{spec.topic}-{spec.partition}"

    async def scenario():
        starter, clock = SpecStarter(), Clock()
        pool = ReplicaPool(starter, live_max=2, hibernate_s=60, clock=clock)
        created = {"leader.replication.throttled.rate": 1000, "follower.replication.throttled.rate": 2000,
                   "leader.replication.throttled.replicas": "", "follower.replication.throttled.replicas": "",
                   "replica.lag.time.max.ms": 30000}
        spec = ReplicaSpec("t", 0, 0, None, ["/tmp/x"], None, 1, created)
        await pool.leader_and_isr(("t", 0), spec, request())
        # A reassignment throttles partition 0's replicas on brokers 0 and 1; the rates stay.
        assert pool.keep_replication_throttle(("t", 0), None, None, "0:0,0:1", "0:1")
        assert not pool.keep_replication_throttle(("t", 0), None, None, "zero:one")  # malformed: nothing kept
        assert not pool.keep_replication_throttle(("t", 9), 5, 5)  # not pooled here
        assert pool.keep_replication_throttle(("t", 0), 3000, None)
        await pool.acquire(("t", 0))
        [woken] = starter.started
        assert woken.replica_config == dict(created, **{
            "leader.replication.throttled.rate": 3000, "leader.replication.throttled.replicas": "0:0,0:1",
            "follower.replication.throttled.replicas": "0:1"})
        assert spec.replica_config == created  # the controller's spec object is not changed under it
    run(scenario())


def test_a_stopped_replica_is_never_woken_until_a_new_leader_and_isr():
    """StopReplica (a reassignment moved it away): a wake would replay the LeaderAndIsr kept from
    before, a leader of an old epoch, over a log StopReplica(delete) removed."""
    async def scenario():
        starter, clock = FakeStarter(), Clock()
        pool = ReplicaPool(starter, live_max=4, hibernate_s=60, clock=clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        handle = await pool.acquire(("t", 0))
        pool.release(("t", 0))
        assert await pool.stop_replica(("t", 0), 1, False) == 0
        assert starter.calls == [(handle, "stop_replica", (1, False))]
        assert pool.live_handle(("t", 0)) is None, "its actor closed its log: not served from"
        # Its channel closes under the edge's calls: the actor is not lost, nor started again.
        pool.lost(("t", 0), handle)
        assert starter.ended == [] and pool.stats().live == 1
        with pytest.raises(KeyError):
            await pool.acquire(("t", 0))
        # Idle, it ends without being asked to hibernate (its log is closed already).
        clock.now = 61
        assert await pool.hibernate_idle() == 1
        assert starter.ended == [handle] and pool.stats().live == 0
        # StopReplica(delete) of the hibernated replica: deleted by an actor that takes no
        # LeaderAndIsr, and still nothing wakes it.
        assert await pool.stop_replica(("t", 0), 1, True) == 0
        assert starter.deleted == [("t-0", 1)] and starter.started == ["t-0"]
        with pytest.raises(KeyError):
            await pool.acquire(("t", 0))
        assert await pool.stop_replica(("t", 0), 0, True) == ErrorCode.stale_controller_epoch
        # A new LeaderAndIsr (moved back) makes it a replica again.
        assert await pool.leader_and_isr(("t", 0), "t-0", request(epoch=3)) == 0
        assert await pool.acquire(("t", 0)) == "t-0" and starter.live["t-0"].leader_epoch == 3
    run(scenario())


def test_stop_replica_of_a_replica_not_pooled_here_is_a_no_op():
    async def scenario():
        pool = ReplicaPool(FakeStarter(), live_max=4, hibernate_s=60, clock=Clock())
        assert await pool.stop_replica(("t", 9), 1, True) == 0
    run(scenario())
