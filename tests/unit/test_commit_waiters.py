"""cluster.commit_waiters: acks=all waits completed at the leader when its
high watermark moves (Kafka's DelayedProduce outcome rules)."""
import asyncio

from cluster.commit_waiters import MAX_WAITERS, CommitWaiters
from core.error_codes import ErrorCode


def test_waiters_complete_in_offset_order_when_the_hw_passes_them():
    async def run():
        loop = asyncio.get_running_loop()
        waiters = CommitWaiters()
        futures = {offset: loop.create_future() for offset in (30, 10, 20)}
        for offset, future in futures.items():
            assert waiters.add(offset, future)
        assert waiters.on_high_watermark(9, isr_size=2, min_insync_replicas=2) == 0
        assert waiters.on_high_watermark(20, isr_size=2, min_insync_replicas=2) == 2
        assert futures[10].result() == 0 and futures[20].result() == 0 and not futures[30].done()
        # The HW reaches it with the ISR below min.insync.replicas: Kafka's
        # NOT_ENOUGH_REPLICAS_AFTER_APPEND (the records are written, not acknowledged).
        assert waiters.on_high_watermark(30, isr_size=1, min_insync_replicas=2) == 1
        assert futures[30].result() == ErrorCode.not_enough_replicas_after_append
        assert len(waiters) == 0

    asyncio.run(run())


def test_leadership_lost_fails_every_waiter_and_given_up_ones_are_pruned():
    async def run():
        loop = asyncio.get_running_loop()
        waiters = CommitWaiters()
        kept, gave_up = loop.create_future(), loop.create_future()
        waiters.add(5, kept)
        waiters.add(6, gave_up)
        gave_up.cancel()  # its caller timed out
        waiters.prune()
        assert len(waiters) == 1
        waiters.fail_all(ErrorCode.not_leader_or_follower)
        assert kept.result() == ErrorCode.not_leader_or_follower and len(waiters) == 0
        # Nothing left to complete when the HW moves afterwards.
        assert waiters.on_high_watermark(100, 3, 2) == 0

    asyncio.run(run())


def test_the_number_of_waiters_is_bounded():
    async def run():
        loop = asyncio.get_running_loop()
        waiters = CommitWaiters()
        future = loop.create_future()
        for i in range(MAX_WAITERS):
            assert waiters.add(i, future)
        assert not waiters.add(MAX_WAITERS, loop.create_future())

    asyncio.run(run())
