"""Unit tests for delayed.operation (DelayedOperation and the purgatory)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayed.clock import ManualClock
from delayed.operation import DelayedOperation, DelayedOperationPurgatory
from delayed.timing_wheel import SystemTimer


class Op(DelayedOperation):
    """A delayed operation whose condition is a flag the test flips."""

    def __init__(self, delay_ms: int, clock: ManualClock, name: object = None, ready: bool = False):
        super().__init__(delay_ms)
        self.clock = clock
        self.name = name
        self.ready = ready
        self.events: list[tuple[str, int]] = []
        self.try_calls = 0
        self.on_expiration_hook = None
        self.on_complete_hook = None

    def try_complete(self) -> bool:
        self.try_calls += 1
        if self.ready:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        self.events.append(("expired", self.clock()))
        if self.on_expiration_hook:
            self.on_expiration_hook()

    def on_complete(self) -> None:
        self.events.append(("complete", self.clock()))
        if self.on_complete_hook:
            self.on_complete_hook()

    @property
    def completions(self) -> int:
        return sum(1 for kind, _ in self.events if kind == "complete")

    @property
    def expired(self) -> bool:
        return any(kind == "expired" for kind, _ in self.events)


def step_until(timer: SystemTimer, clock: ManualClock, until_ms: int) -> None:
    """Advance like the asyncio driver: straight to each bucket expiration."""
    while True:
        next_expiration = timer.next_expiration_ms()
        if next_expiration is None or next_expiration > until_ms:
            break
        clock.set(max(clock(), next_expiration))
        timer.advance_to(clock())
    clock.set(max(clock(), until_ms))


@pytest.fixture
def clock():
    return ManualClock(1_000)


@pytest.fixture
def timer(clock):
    return SystemTimer(clock=clock)


@pytest.fixture
def purgatory(timer):
    return DelayedOperationPurgatory("test", timer, purge_interval=10)


def test_completes_when_key_checked_after_condition_becomes_true(clock, timer, purgatory):
    op = Op(100, clock)
    assert purgatory.try_complete_else_watch(op, ["p0"]) is False
    assert op.try_calls == 2  # check, watch, check again
    assert purgatory.watched == 1 and purgatory.delayed == 1 and timer.size == 1

    assert purgatory.check_and_complete("p0") == 0  # not ready yet
    clock.advance(30)
    op.ready = True
    assert purgatory.check_and_complete("p0") == 1
    assert op.is_completed and op.events == [("complete", 1030)]
    assert purgatory.watched == 0 and purgatory.watch_keys() == []  # empty list removed
    assert purgatory.delayed == 0 and timer.size == 0

    step_until(timer, clock, 5_000)  # the timeout no longer fires
    assert op.events == [("complete", 1030)]


def test_completes_immediately_without_watching(clock, timer, purgatory):
    op = Op(100, clock, ready=True)
    assert purgatory.try_complete_else_watch(op, ["p0", "p1"]) is True
    assert op.events == [("complete", 1000)]
    assert purgatory.watched == 0 and purgatory.delayed == 0 and timer.size == 0


def test_second_check_after_watching_completes_without_timer(clock, timer, purgatory):
    class ReadyOnSecondLook(Op):
        def try_complete(self):
            self.ready = self.try_calls >= 1
            return super().try_complete()

    op = ReadyOnSecondLook(100, clock)
    assert purgatory.try_complete_else_watch(op, ["p0"]) is True
    assert op.completions == 1
    assert purgatory.delayed == 0 and timer.size == 0
    # It was watched before the second check; the list is cleaned up lazily.
    assert purgatory.watched == 1
    assert purgatory.check_and_complete("p0") == 0
    assert purgatory.watched == 0


def test_expires_at_deadline_not_before(clock, timer, purgatory):
    op = Op(250, clock)
    purgatory.try_complete_else_watch(op, ["p0"])
    step_until(timer, clock, 1_249)
    assert not op.is_completed
    step_until(timer, clock, 1_250)
    # on_expiration first, then on_complete, each exactly once.
    assert op.events == [("expired", 1_250), ("complete", 1_250)]
    assert purgatory.delayed == 0 and timer.size == 0
    # Still listed under its key until something looks there.
    assert purgatory.watched == 1
    op.ready = True
    assert purgatory.check_and_complete("p0") == 0
    assert purgatory.watched == 0 and op.completions == 1


def test_multiple_keys_completed_via_one_lingers_under_other(clock, timer, purgatory):
    op = Op(100, clock)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.watched == 2 and purgatory.delayed == 1
    op.ready = True
    assert purgatory.check_and_complete("a") == 1
    assert purgatory.watched_operations("b") == [op]
    assert purgatory.check_and_complete("b") == 0  # already done: just dropped
    assert purgatory.watched == 0 and op.completions == 1


def test_check_unknown_key_is_zero(purgatory):
    assert purgatory.check_and_complete("nobody") == 0


def test_watch_keys_required(clock, purgatory):
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(Op(10, clock), [])


def test_fifo_order_within_a_key(clock, purgatory):
    order = []
    ops = [Op(100, clock, name=i) for i in range(5)]
    for op in ops:
        op.on_complete_hook = (lambda o=op: order.append(o.name))
        purgatory.try_complete_else_watch(op, ["k"])
    for op in ops:
        op.ready = True
    assert purgatory.check_and_complete("k") == 5
    assert order == [0, 1, 2, 3, 4]


def test_zero_delay_op_expires_inline(clock, timer, purgatory):
    op = Op(0, clock)
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert op.events == [("expired", 1000), ("complete", 1000)]
    assert purgatory.delayed == 0 and timer.size == 0


# -- exactly-once under racing paths ---------------------------------------


def test_check_first_then_deadline(clock, timer, purgatory):
    op = Op(100, clock)
    purgatory.try_complete_else_watch(op, ["k"])
    clock.set(1_100)  # deadline reached but the timer has not been advanced
    op.ready = True
    assert purgatory.check_and_complete("k") == 1
    timer.advance_to(clock())
    assert op.events == [("complete", 1_100)]


def test_deadline_first_then_check(clock, timer, purgatory):
    op = Op(100, clock)
    purgatory.try_complete_else_watch(op, ["k"])
    step_until(timer, clock, 1_100)
    op.ready = True
    assert purgatory.check_and_complete("k") == 0
    assert op.events == [("expired", 1_100), ("complete", 1_100)]


def test_check_from_inside_on_expiration_cannot_complete_again(clock, timer, purgatory):
    op = Op(100, clock)

    def racing_check():
        op.ready = True
        assert purgatory.check_and_complete("k") == 0
        assert op.force_complete() is False

    op.on_expiration_hook = racing_check
    purgatory.try_complete_else_watch(op, ["k"])
    step_until(timer, clock, 2_000)
    assert op.events == [("expired", 1_100), ("complete", 1_100)]


def test_reentrant_completion_from_on_complete(clock, timer, purgatory):
    op = Op(100, clock)
    other = Op(100, clock)
    results = []

    def reenter():
        results.append(op.force_complete())
        results.append(purgatory.check_and_complete("k"))  # completes `other`

    op.on_complete_hook = reenter
    purgatory.try_complete_else_watch(op, ["k"])
    purgatory.try_complete_else_watch(other, ["k"])
    op.ready = other.ready = True
    # The outer check only counts what it completed itself; the nested one
    # completed `other` and the outer loop then skips it.
    assert purgatory.check_and_complete("k") == 1
    assert results == [False, 1]
    assert op.completions == 1 and other.completions == 1
    step_until(timer, clock, 2_000)
    assert not op.expired and not other.expired
    assert purgatory.watched == 0 and purgatory.delayed == 0


def test_force_complete_is_exactly_once(clock):
    op = Op(100, clock)
    assert op.force_complete() is True
    assert op.force_complete() is False
    op.run()  # a stray expiry after completion does nothing
    assert op.events == [("complete", 1000)]
    assert op.safe_try_complete() is False


def test_new_watcher_added_during_check_keeps_key(clock, timer, purgatory):
    late = Op(100, clock)
    first = Op(100, clock)
    first.on_complete_hook = lambda: purgatory.try_complete_else_watch(late, ["k"])
    purgatory.try_complete_else_watch(first, ["k"])
    first.ready = True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched_operations("k") == [late]
    assert purgatory.delayed == 1


# -- purge, cancel, shutdown -------------------------------------------------


def test_purge_removes_completed_watchers_only_past_interval(clock, timer, purgatory):
    # Each op watches a shared key and its own key; completing it through its
    # own key leaves it behind in the shared key's list.
    pending = Op(10_000, clock, name="pending")
    purgatory.try_complete_else_watch(pending, ["shared", "pending-own"])
    ops = [Op(10_000, clock, name=i) for i in range(15)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, ["shared", f"own{i}"])
    assert purgatory.estimated_total == 16 and purgatory.delayed == 16

    for i, op in enumerate(ops[:10]):
        op.ready = True
        assert purgatory.check_and_complete(f"own{i}") == 1
    # 10 completed-but-watched is not more than purge_interval (10).
    assert purgatory.delayed == 6
    assert purgatory.purge_completed() == 0
    assert len(purgatory.watched_operations("shared")) == 16

    ops[10].ready = True
    purgatory.check_and_complete("own10")
    assert purgatory.purge_completed() == 11
    assert purgatory.watched_operations("shared") == [pending] + ops[11:]
    assert purgatory.estimated_total == purgatory.delayed == 5
    # Pending ones are untouched and still expire.
    step_until(timer, clock, 20_000)
    assert pending.expired and all(op.expired for op in ops[11:])


def test_purge_drops_keys_that_become_empty(clock, purgatory):
    op = Op(100, clock)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    op.force_complete()
    assert purgatory.watch_keys() == ["a", "b"]
    assert purgatory.purge_completed(force=True) == 2
    assert purgatory.watch_keys() == [] and purgatory.watched == 0


def test_cancel_for_key_removes_from_timer_without_completing(clock, timer, purgatory):
    ops = [Op(100, clock) for _ in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["gone"])
    kept = Op(100, clock)
    purgatory.try_complete_else_watch(kept, ["stays"])
    assert purgatory.cancel_for_key("gone") == ops
    assert purgatory.delayed == 1 and timer.size == 1
    assert purgatory.watch_keys() == ["stays"]
    step_until(timer, clock, 5_000)
    assert all(op.events == [] for op in ops)
    assert kept.expired
    assert purgatory.cancel_for_key("gone") == []


def test_shutdown_returns_pending_and_stops_their_timeouts(clock, timer, purgatory):
    done = Op(100, clock, ready=True)
    purgatory.try_complete_else_watch(done, ["a"])
    pending = [Op(100, clock), Op(200, clock)]
    purgatory.try_complete_else_watch(pending[0], ["a", "b"])
    purgatory.try_complete_else_watch(pending[1], ["b"])
    assert purgatory.shutdown() == pending
    assert purgatory.delayed == 0 and purgatory.watched == 0 and timer.size == 0
    step_until(timer, clock, 5_000)
    assert all(op.events == [] for op in pending)
    with pytest.raises(RuntimeError):
        purgatory.try_complete_else_watch(Op(1, clock), ["a"])


def test_purgatories_sharing_a_timer_count_their_own(clock, timer):
    fetches = DelayedOperationPurgatory("fetch", timer)
    produces = DelayedOperationPurgatory("produce", timer)
    for _ in range(3):
        fetches.try_complete_else_watch(Op(100, clock), ["p"])
    produce = Op(50, clock)
    produces.try_complete_else_watch(produce, ["p"])
    assert fetches.delayed == 3 and produces.delayed == 1 and timer.size == 4
    step_until(timer, clock, 1_050)
    assert produce.expired
    assert fetches.delayed == 3 and produces.delayed == 0
    step_until(timer, clock, 1_100)
    assert fetches.delayed == 0


def test_timer_shutdown_keeps_delayed_count_right(clock, timer, purgatory):
    purgatory.try_complete_else_watch(Op(100, clock), ["k"])
    timer.shutdown()
    assert purgatory.delayed == 0


# -- property test: random interleavings -----------------------------------


@settings(max_examples=200, deadline=None)
@given(
    ops_spec=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=600),  # delay
            st.sets(st.sampled_from("abcd"), min_size=1, max_size=3),  # keys
            st.booleans(),  # ready from the start
        ),
        min_size=1,
        max_size=25,
    ),
    events=st.lists(
        st.one_of(
            st.tuples(st.just("ready"), st.integers(min_value=0, max_value=100)),
            st.tuples(st.just("check"), st.sampled_from("abcd")),
            st.tuples(st.just("advance"), st.integers(min_value=0, max_value=200)),
            st.tuples(st.just("purge"), st.just(0)),
        ),
        max_size=60,
    ),
)
def test_random_interleavings_complete_each_op_exactly_once(ops_spec, events):
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    purgatory = DelayedOperationPurgatory("prop", timer, purge_interval=3)
    ops = []
    expect_completed_by_check_at: dict[int, int] = {}
    for i, (delay, keys, ready) in enumerate(ops_spec):
        op = Op(delay, clock, name=i, ready=ready)
        op.keys = keys
        ops.append(op)
        completed_now = purgatory.try_complete_else_watch(op, sorted(keys))
        assert completed_now is ready
        if ready:
            expect_completed_by_check_at[i] = 0

    for kind, value in events:
        if kind == "ready":
            ops[value % len(ops)].ready = True
        elif kind == "check":
            for i, op in enumerate(ops):
                # Model: a ready op watching this key, not yet done, completes
                # now; the timer only ever fires at the exact deadline.
                if op.ready and value in op.keys and i not in expect_completed_by_check_at:
                    if clock() < op.delay_ms:
                        expect_completed_by_check_at[i] = clock()
            purgatory.check_and_complete(value)
        elif kind == "advance":
            step_until(timer, clock, clock() + value)
        else:
            purgatory.purge_completed()
        assert purgatory.delayed == timer.size == sum(not op.is_completed for op in ops)

    step_until(timer, clock, 10_000)
    for i, op in enumerate(ops):
        assert op.completions == 1
        if i in expect_completed_by_check_at:
            assert op.events == [("complete", expect_completed_by_check_at[i])]
        else:
            assert op.events == [("expired", op.delay_ms), ("complete", op.delay_ms)]
    assert purgatory.delayed == 0 and timer.size == 0
