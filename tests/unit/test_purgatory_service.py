"""actors/purgatory.PurgatoryService (no Ray): DelayedProduce and DelayedFetch
completed by progress reports, expiry, stale reports, the interest handshake."""
import asyncio

from kio.schema.errors import ErrorCode

from actors.purgatory import PurgatoryService

KEY = ("t", 0)


def report(svc, hw, isr=2, min_isr=2, leader=True, epoch=1, key=KEY):
    return svc.report([(key, hw, hw, isr, min_isr, leader, epoch)])


def run(coro):
    return asyncio.run(coro)


def test_delayed_produce_completes_when_hw_passes():
    async def go():
        svc = PurgatoryService(asyncio.get_running_loop())
        report(svc, 5)
        future = svc.delay_produce({KEY: 10}, 5000)
        await asyncio.sleep(0.01)
        assert not future.done()
        report(svc, 9)
        await asyncio.sleep(0)
        assert not future.done()
        report(svc, 10)
        return await asyncio.wait_for(future, 1)

    assert run(go()) == {KEY: 0}


def test_delayed_produce_times_out_and_reports_isr_shortfall():
    async def go():
        svc = PurgatoryService(asyncio.get_running_loop())
        report(svc, 0)
        timed_out = await asyncio.wait_for(svc.delay_produce({KEY: 3}, 50), 2)
        short = svc.delay_produce({KEY: 3}, 5000)
        report(svc, 3, isr=1, min_isr=2)
        return timed_out, await asyncio.wait_for(short, 1)

    timed_out, short = run(go())
    assert timed_out == {KEY: ErrorCode.request_timed_out}
    assert short == {KEY: ErrorCode.not_enough_replicas_after_append}


def test_leadership_loss_completes_waiters_and_stale_reports_are_ignored():
    async def go():
        svc = PurgatoryService(asyncio.get_running_loop())
        report(svc, 0, epoch=3)
        future = svc.delay_produce({KEY: 1}, 5000)
        report(svc, 100, epoch=2)  # from a deposed leader: ignored
        await asyncio.sleep(0)
        assert not future.done()
        report(svc, 0, leader=False, epoch=4)
        return await asyncio.wait_for(future, 1)

    assert run(go()) == {KEY: ErrorCode.not_leader_or_follower}


def test_delayed_fetch_completes_on_any_partition_moving():
    async def go():
        svc = PurgatoryService(asyncio.get_running_loop())
        other = ("t", 1)
        report(svc, 4)
        report(svc, 7, key=other)
        future = svc.delay_fetch({KEY: 4, other: 7}, 0, 5000)
        await asyncio.sleep(0.01)
        assert not future.done()
        report(svc, 8, key=other)
        moved = await asyncio.wait_for(future, 1)
        expired = await asyncio.wait_for(svc.delay_fetch({KEY: 4}, 0, 30), 2)
        return moved, expired

    assert run(go()) == (True, False)


def test_interest_handshake_quiets_unwatched_leaders_and_wakes_them():
    async def go():
        svc = PurgatoryService(asyncio.get_running_loop())
        asked = []
        svc.ask_to_report = asked.extend
        unwatched = report(svc, 1)
        assert unwatched == [KEY] and KEY in svc.quiet
        future = svc.delay_fetch({KEY: 1}, 0, 5000)
        assert asked == [KEY], "parking on a quiet partition asks its leader to report again"
        assert report(svc, 1) == [], "still watched: the leader keeps reporting"
        assert report(svc, 2) == [KEY], "the fetch completed: nothing waits any more"
        return await asyncio.wait_for(future, 1)

    assert run(go()) is True
