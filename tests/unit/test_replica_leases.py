"""cluster/replica_leases.py without Ray: a sibling edge's LeasedPool over the primary's
PoolLeases over a real ReplicaPool with a fake starter and a manual clock (issue 30,
raykafka.edge.processes > 1)."""
from __future__ import annotations

import asyncio

from cluster.replica_leases import LeasedPool, PoolLeases
from cluster.replica_pool import ReplicaPool
from tests.unit.test_replica_pool import Clock, FakeStarter, request


class InProcessPrimary:
    """cluster.replica_leases.PrimaryPool straight onto a PoolLeases (one holder), counting calls."""

    def __init__(self, leases: PoolLeases, holder: str = "sibling-1"):
        self.leases = leases
        self.holder = holder
        self.calls: list[str] = []

    async def lease(self, key, number):
        self.calls.append("lease")
        await asyncio.sleep(0)  # an actor call: other requests run meanwhile
        handle = await self.leases.lease(key, self.holder, number)
        return handle

    async def renew(self, leases):
        self.calls.append("renew")
        return self.leases.renew(leases, self.holder)

    async def give_back(self, leases):
        self.calls.append("give_back")
        self.leases.give_back(leases, self.holder)

    async def lost(self, key, handle, number):
        self.calls.append("lost")
        self.leases.lost(key, handle, self.holder, number)

    async def stats(self):
        return self.leases.pool.stats()._asdict()


def setup(clock: Clock, live_max: int = 4):
    starter = FakeStarter()
    pool = ReplicaPool(starter, live_max=live_max, hibernate_s=60, clock=clock)
    leases = PoolLeases(pool, ttl_s=20, clock=clock)
    primary = InProcessPrimary(leases)
    return starter, pool, leases, primary, LeasedPool(primary, linger_s=2, renew_s=5, clock=clock)


def test_a_sibling_wakes_a_hibernated_replica_once_and_reuses_its_lease_for_every_request():
    async def scenario():
        clock = Clock()
        starter, pool, leases, primary, sibling = setup(clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        # Concurrent first requests share one lease call and one wake.
        handles = await asyncio.gather(*(sibling.acquire(("t", 0)) for _ in range(5)))
        assert handles == ["t-0"] * 5 and starter.started == ["t-0"] and primary.calls == ["lease"]
        for _ in range(5):
            sibling.release(("t", 0))
        for _ in range(100):
            assert await sibling.acquire(("t", 0)) == "t-0"
            sibling.release(("t", 0))
        assert primary.calls == ["lease"]  # no call per request
    asyncio.run(scenario())


def test_a_leased_replica_never_hibernates_and_hibernates_once_given_back():
    async def scenario():
        clock = Clock()
        starter, pool, leases, primary, sibling = setup(clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        await sibling.acquire(("t", 0))
        sibling.release(("t", 0))
        # Used on the sibling every second for two minutes: the primary's pool saw no request
        # of its own, yet the lease holds the replica live.
        for second in range(1, 121):
            clock.now = second
            await sibling.acquire(("t", 0))
            sibling.release(("t", 0))
            await sibling.tick()
            assert await pool.hibernate_idle() == 0
        assert primary.calls.count("renew") >= 20 and "give_back" not in primary.calls
        # Idle on the sibling: given back after the linger, then idle time runs at the primary.
        clock.now = 123
        await sibling.tick()
        assert primary.calls[-1] == "give_back" and not sibling.knows(("t", 0))
        clock.now = 123 + 59
        assert await pool.hibernate_idle() == 0
        clock.now = 123 + 61
        assert await pool.hibernate_idle() == 1 and starter.live == {}
        # The next request on the sibling wakes it again.
        assert await sibling.acquire(("t", 0)) == "t-0" and starter.started == ["t-0", "t-0"]
    asyncio.run(scenario())


def test_a_lease_not_renewed_expires_at_the_primary():
    """A sibling that died (or stalled) holds nothing for long: its lease ends after the TTL
    and the replica hibernates as any idle one; a stalled sibling's renewal is refused and it
    leases again."""
    async def scenario():
        clock = Clock()
        starter, pool, leases, primary, sibling = setup(clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        await sibling.acquire(("t", 0))  # in flight, never released: the sibling stalls
        clock.now = 21
        assert leases.expire() == 1
        clock.now = 82
        assert await pool.hibernate_idle() == 1
        assert await sibling.primary.renew([(("t", 0), 1)]) == [False]
        await sibling.tick()
        assert not sibling.knows(("t", 0))
        assert await sibling.acquire(("t", 0)) == "t-0" and len(starter.started) == 2
    asyncio.run(scenario())


def test_a_give_back_overtaken_by_the_next_lease_ends_nothing():
    """Calls between actors are not ordered: the give-back of lease 1 arriving after lease 2 of
    the same partition must not end lease 2 (the replica would hibernate under its use)."""
    async def scenario():
        clock = Clock()
        starter, pool, leases, primary, sibling = setup(clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        await leases.lease(("t", 0), "s", 1)
        await leases.lease(("t", 0), "s", 2)  # lease 1's give-back still on its way
        leases.give_back([(("t", 0), 1)], "s")
        assert leases.held[(("t", 0), "s")][0] == 2
        clock.now = 1000
        assert await pool.hibernate_idle() == 0  # held by lease 2 (one in flight, not two)
        leases.give_back([(("t", 0), 2)], "s")
        clock.now = 1061  # idle time runs from the give-back
        assert await pool.hibernate_idle() == 1
    asyncio.run(scenario())


def test_a_lost_leased_replica_is_started_again_and_a_stopped_one_refused():
    async def scenario():
        clock = Clock()
        starter, pool, leases, primary, sibling = setup(clock)
        await pool.leader_and_isr(("t", 0), "t-0", request())
        handle = await sibling.acquire(("t", 0))
        sibling.release(("t", 0))
        sibling.lost(("t", 0), handle)  # a call found the actor gone
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert "lost" in primary.calls and starter.ended == ["t-0"] and not leases.held
        assert await sibling.acquire(("t", 0)) == "t-0" and len(starter.started) == 2
        sibling.release(("t", 0))
        # StopReplica: the renewal answers False, and a new lease is refused (KeyError:
        # the router answers NOT_LEADER_OR_FOLLOWER).
        assert await pool.stop_replica(("t", 0), 1, False) == 0
        clock.now = 6
        await sibling.tick()
        assert not sibling.knows(("t", 0))
        try:
            await sibling.acquire(("t", 0))
        except KeyError:
            pass
        else:
            raise AssertionError("a stopped replica was leased")
    asyncio.run(scenario())


def test_the_sibling_shows_the_primary_pools_counts():
    async def scenario():
        clock = Clock()
        starter, pool, leases, primary, sibling = setup(clock)
        assert sibling.stats() is None
        for p in range(3):
            await pool.leader_and_isr(("t", p), f"t-{p}", request())
        await sibling.acquire(("t", 1))
        await sibling.tick()
        stats = sibling.stats()
        assert (stats.hosted, stats.live, stats.wakeups) == (3, 1, 1)
    asyncio.run(scenario())
