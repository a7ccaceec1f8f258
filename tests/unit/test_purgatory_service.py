"""cluster/purgatory_service.PurgatoryService (no Ray): DelayedProduce and DelayedFetch
completed by progress reports, expiry, stale reports, the interest handshake."""
import asyncio

from kio.schema.errors import ErrorCode

from cluster.purgatory_service import PurgatoryService

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
        svc = PurgatoryService(asyncio.get_running_loop(), keep_reporting_s=0)
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


def test_a_partition_parked_on_recently_keeps_reporting():
    """A consumer's next fetch parks again moments after the last one
    completed: its leader is not quieted in between (asking it to report
    again is where a record appended meanwhile would wait), until nothing
    parked on it for keep_reporting_s."""
    async def go():
        svc = PurgatoryService(asyncio.get_running_loop(), keep_reporting_s=0.2)
        asked = []
        svc.ask_to_report = asked.extend
        assert report(svc, 1) == [KEY]  # never parked on: quiet
        future = svc.delay_fetch({KEY: 1}, 0, 5000)
        assert asked == [KEY]
        assert report(svc, 2) == [], "parked on a moment ago: keep reporting"
        assert await asyncio.wait_for(future, 1) is True
        again = svc.delay_fetch({KEY: 2}, 0, 5000)
        assert asked == [KEY], "not quiet, so not asked again"
        assert report(svc, 3) == []
        assert await asyncio.wait_for(again, 1) is True
        await asyncio.sleep(0.3)
        assert report(svc, 3) == [KEY], "nothing parked for keep_reporting_s: quiet"
        assert KEY in svc.quiet

    run(go())


def test_the_purgatory_actor_serves_its_node_over_the_direct_channel():
    """PurgatoryActor's local_call_endpoint (no Ray): a parked fetch and an
    acks=all produce over one socket, completed by a progress report sent
    over another, as the edge and a leader replica do."""
    from actors.purgatory import LOCAL_CALL_METHODS, PurgatoryActor
    from core.local_calls import LocalCallClient

    async def go():
        actor = PurgatoryActor(broker_id=7)
        actor._service = PurgatoryService(asyncio.get_running_loop(), keep_reporting_s=0)
        asked = []
        actor._svc().ask_to_report = asked.extend  # the shell would ask the quiet leader through Ray
        node, address, token, name, methods = await actor.local_call_endpoint()
        assert node is None and name == "purgatory@7" and methods == LOCAL_CALL_METHODS
        edge = await LocalCallClient.connect(name, address, token)
        replica = await LocalCallClient.connect(name, address, token)
        update = (KEY, 5, 5, 1, 1, True, 1)
        assert await replica.call("progress", ([update],), 5) == [KEY]  # nothing waits yet
        fetch = edge.call("delay_fetch", ([("t", 0, 5)], 0, 5000), 10)
        produce = edge.call("delay_produce", ([("t", 0, 8)], 5000), 10)
        await asyncio.sleep(0.05)
        assert not fetch.done() and not produce.done()
        assert asked == [KEY]  # the quiet leader is asked to report again
        assert await replica.call("progress", ([(KEY, 8, 8, 1, 1, True, 1)],), 5) == [KEY]
        assert await fetch is True
        assert await produce == {KEY: 0}
        assert await edge.call("delay_fetch", ([("t", 0, 8)], 0, 50), 10) is False  # expiry
        edge.close()
        replica.close()
        actor._local_calls.close()

    run(go())
