"""Unit tests for delayed.timing_wheel, driven by a manual clock."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayed.clock import ManualClock
from delayed.timing_wheel import (
    DelayQueue,
    SystemTimer,
    TaskCounter,
    TimerTask,
    TimerTaskEntry,
    TimerTaskList,
    TimingWheel,
)


class Recorder:
    """Collects (name, clock time) for every task that fires."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.fired: list[tuple[object, int]] = []

    def task(self, delay_ms: int, name: object) -> TimerTask:
        return TimerTask(delay_ms, lambda: self.fired.append((name, self.clock())))

    def names(self) -> list[object]:
        return [name for name, _ in self.fired]

    def times(self) -> dict[object, int]:
        return dict(self.fired)


def step_until(timer: SystemTimer, clock: ManualClock, until_ms: int) -> int:
    """Advance like an event loop would: jump straight to each bucket
    expiration (never tick by tick), flush, repeat. Returns wake-ups used."""
    wakeups = 0
    while True:
        next_expiration = timer.next_expiration_ms()
        if next_expiration is None or next_expiration > until_ms:
            break
        clock.set(max(clock(), next_expiration))
        timer.advance_to(clock())
        wakeups += 1
    clock.set(max(clock(), until_ms))
    return wakeups


def wheel_level_of(timer: SystemTimer, task: TimerTask) -> int:
    """Which wheel level (0 = finest) holds the task's entry."""
    bucket = task._get_entry().list
    for level, wheel in enumerate(timer.wheel.levels()):
        if any(b is bucket for b in wheel.buckets):
            return level
    raise AssertionError("task is not in any bucket")


# -- TimerTaskList / TimerTaskEntry ---------------------------------------


def test_bucket_add_remove_is_pointer_surgery():
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    tasks = [TimerTask(0, lambda: None) for _ in range(3)]
    entries = [TimerTaskEntry(t, 10) for t in tasks]
    for entry in entries:
        bucket.add(entry)
    assert len(bucket) == 3 and counter.value == 3
    assert all(e.list is bucket for e in entries)
    assert list(bucket.tasks()) == tasks

    # Removing the middle entry relinks its two neighbours directly; nothing
    # else is touched (O(1), no scan).
    first, middle, last = entries
    bucket.remove(middle)
    assert middle.list is None and middle.next is None and middle.prev is None
    assert first.next is last and last.prev is first
    assert len(bucket) == 2 and counter.value == 2

    # Removing an entry that is not in this bucket is a no-op.
    other = TimerTaskList(counter)
    other.remove(first)
    assert first.list is bucket and counter.value == 2


def test_entry_moves_between_buckets_and_readded_task_moves():
    counter = TaskCounter()
    a, b = TimerTaskList(counter), TimerTaskList(counter)
    task = TimerTask(0, lambda: None)
    entry = TimerTaskEntry(task, 5)
    a.add(entry)
    b.add(entry)  # the same entry moves
    assert entry.list is b and len(a) == 0 and len(b) == 1 and counter.value == 1

    # A new entry for the same task replaces the old one: the old entry is
    # unlinked and counts as cancelled.
    newer = TimerTaskEntry(task, 7)
    assert entry.list is None and entry.cancelled
    assert not newer.cancelled and len(b) == 0 and counter.value == 0
    a.add(newer)
    assert list(a.tasks()) == [task]


def test_set_expiration_reports_change():
    bucket = TimerTaskList(TaskCounter())
    assert bucket.expiration_ms == -1
    assert bucket.set_expiration(20) is True
    assert bucket.set_expiration(20) is False
    assert bucket.set_expiration(40) is True


def test_flush_detaches_everything_before_calling_back():
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    tasks = [TimerTask(0, lambda: None) for _ in range(4)]
    for t in tasks:
        bucket.add(TimerTaskEntry(t, 3))
    bucket.set_expiration(3)
    seen = []

    def callback(entry):
        # Everything is already off the bucket and the slot is released.
        assert len(bucket) == 0 and bucket.expiration_ms == -1
        seen.append(entry.task)

    bucket.flush(callback)
    assert seen == tasks and counter.value == 0


# -- TimingWheel ------------------------------------------------------------


def test_wheel_add_rejects_expired_and_cancelled():
    queue = DelayQueue()
    wheel = TimingWheel(1, 20, 100, TaskCounter(), queue)
    expired = TimerTaskEntry(TimerTask(0, lambda: None), 100)
    assert wheel.add(expired) is False
    task = TimerTask(0, lambda: None)
    entry = TimerTaskEntry(task, 105)
    task.cancel()
    assert wheel.add(entry) is False
    assert len(queue) == 0


def test_wheel_queues_a_bucket_only_when_its_expiration_changes():
    queue = DelayQueue()
    wheel = TimingWheel(10, 20, 0, TaskCounter(), queue)
    # Same bucket (ticks of 10 ms: 50..59 share one bucket).
    for exp in (50, 51, 59):
        assert wheel.add(TimerTaskEntry(TimerTask(0, lambda: None), exp))
    assert len(queue) == 1 and queue.peek_expiration_ms() == 50
    assert wheel.add(TimerTaskEntry(TimerTask(0, lambda: None), 60))
    assert len(queue) == 2


def test_wheel_overflow_is_lazy_with_parent_interval_as_tick():
    queue = DelayQueue()
    wheel = TimingWheel(1, 20, 0, TaskCounter(), queue)
    assert wheel.interval_ms == 20
    wheel.add(TimerTaskEntry(TimerTask(0, lambda: None), 19))
    assert wheel.overflow_wheel is None
    wheel.add(TimerTaskEntry(TimerTask(0, lambda: None), 20))
    overflow = wheel.overflow_wheel
    assert overflow is not None and overflow.tick_ms == 20 and overflow.interval_ms == 400
    assert overflow.overflow_wheel is None


def test_wheel_advance_clock_rounds_down_and_cascades():
    queue = DelayQueue()
    wheel = TimingWheel(1, 20, 0, TaskCounter(), queue)
    wheel.add(TimerTaskEntry(TimerTask(0, lambda: None), 8001))  # creates 3 overflow levels
    levels = list(wheel.levels())
    assert [w.tick_ms for w in levels] == [1, 20, 400, 8000]
    wheel.advance_clock(437)
    assert [w.current_time_ms for w in levels] == [437, 420, 400, 0]
    wheel.advance_clock(100)  # never backwards
    assert levels[0].current_time_ms == 437


def test_wheel_start_time_is_rounded_down_to_tick():
    wheel = TimingWheel(10, 20, 1234, TaskCounter(), DelayQueue())
    assert wheel.current_time_ms == 1230


# -- SystemTimer ------------------------------------------------------------


def test_insert_and_cancel_are_structural_o1():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    tasks = [rec.task(50, i) for i in range(1000)]
    for t in tasks:
        timer.add(t)
    # All 1000 tasks share one bucket; the delay queue holds that bucket once.
    bucket = tasks[0]._get_entry().list
    assert all(t._get_entry().list is bucket for t in tasks)
    assert len(bucket) == 1000 and timer.size == 1000
    assert len(timer.delay_queue) == 1

    victim = tasks[500]
    entry = victim._get_entry()
    before, after = entry.prev, entry.next
    victim.cancel()
    # Unlinked in place: neighbours now point at each other, the task no
    # longer has an entry, and only the counters changed.
    assert before.next is after and after.prev is before
    assert entry.list is None and victim._get_entry() is None
    assert len(bucket) == 999 and timer.size == 999

    step_until(timer, clock, 100)
    assert 500 not in rec.names() and len(rec.fired) == 999
    assert timer.size == 0


def test_cancellation_prevents_firing_at_every_level():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    delays = [1, 19, 20, 21, 400, 8001, 160001]
    tasks = {d: rec.task(d, d) for d in delays}
    for t in tasks.values():
        timer.add(t)
    for d in (19, 400, 160001):
        tasks[d].cancel()
    assert timer.size == 4
    step_until(timer, clock, 200_000)
    assert sorted(rec.names()) == [1, 20, 21, 8001]


def test_cancel_after_cascade_prevents_firing():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    task = rec.task(8001, "late")
    timer.add(task)
    step_until(timer, clock, 8000)  # cascaded down to the finest wheel by now
    assert wheel_level_of(timer, task) == 0
    task.cancel()
    step_until(timer, clock, 9000)
    assert rec.fired == [] and timer.size == 0


def test_fires_exactly_at_deadline_with_1ms_tick():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    timer.add(rec.task(37, "x"))
    step_until(timer, clock, 36)
    assert rec.fired == []
    step_until(timer, clock, 37)
    assert rec.fired == [("x", 37)]


def test_overflow_placement_cascade_and_firing_times():
    clock = ManualClock(0)
    timer = SystemTimer(tick_ms=1, wheel_size=20, clock=clock)
    rec = Recorder(clock)
    delays = [1, 19, 20, 21, 400, 8001, 160001]
    tasks = {d: rec.task(d, d) for d in delays}
    for t in tasks.values():
        timer.add(t)

    # Wheel intervals are 20, 400, 8000, 160000, 3200000 ms.
    expected_levels = {1: 0, 19: 0, 20: 1, 21: 1, 400: 2, 8001: 3, 160001: 4}
    assert {d: wheel_level_of(timer, t) for d, t in tasks.items()} == expected_levels
    assert [w.tick_ms for w in timer.wheel.levels()] == [1, 20, 400, 8000, 160000]

    # The coarse bucket holding 160001 expires at 160000; its task then
    # cascades to the finest wheel and fires 1 ms later.
    step_until(timer, clock, 159_999)
    assert wheel_level_of(timer, tasks[160001]) == 4
    step_until(timer, clock, 160_000)
    assert wheel_level_of(timer, tasks[160001]) == 0
    assert 160001 not in rec.names()

    step_until(timer, clock, 200_000)
    assert rec.names() == delays  # in deadline order
    assert rec.times() == {d: d for d in delays}  # each exactly on time
    assert timer.size == 0 and timer.next_expiration_ms() is None


def test_clock_only_advances_at_bucket_expirations():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    timer.add(rec.task(160001, "far"))
    wakeups = step_until(timer, clock, 200_000)
    assert rec.fired == [("far", 160001)]
    # One wake-up per wheel level on the way down, not one per millisecond.
    assert wakeups <= 5


def test_tick_larger_than_one_fires_within_one_tick_never_early():
    clock = ManualClock(3)
    timer = SystemTimer(tick_ms=10, wheel_size=8, clock=clock)
    rec = Recorder(clock)
    rng = random.Random(7)
    deadlines = {}
    for i in range(300):
        delay = rng.randint(0, 5000)
        deadlines[i] = clock() + delay
        timer.add(rec.task(delay, i))
    step_until(timer, clock, 10_000)
    fired = rec.times()
    assert set(fired) == set(deadlines)
    for i, at in fired.items():
        assert deadlines[i] <= at < deadlines[i] + 10


def test_due_task_runs_inline_on_add_when_wheel_is_current():
    clock = ManualClock(1000)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    timer.add(rec.task(0, "now"))
    assert rec.fired == [("now", 1000)] and timer.size == 0


def test_due_task_runs_on_next_advance_when_wheel_lags():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    clock.set(500)  # the wheel still reads 0: nothing expired since
    timer.add(rec.task(0, "due"))
    # It landed in an overflow bucket (the wheel's clock is at 0) that is
    # already expired; one advance flushes it and the cascaded finer bucket.
    assert timer.next_expiration_ms() <= 500
    assert timer.advance_to(clock()) >= 2
    assert rec.fired == [("due", 500)]


def test_readding_a_task_reschedules_it_once():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    task = rec.task(100, "t")
    timer.add(task)
    clock.set(10)
    task.delay_ms = 50
    timer.add(task)
    assert timer.size == 1
    step_until(timer, clock, 200)
    assert rec.fired == [("t", 60)]


def test_task_can_add_tasks_and_a_failing_task_does_not_stop_others():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)

    def boom():
        raise RuntimeError("task failure")

    timer.add(TimerTask(5, boom))
    timer.add(TimerTask(5, lambda: timer.add(rec.task(30, "child"))))
    timer.add(rec.task(5, "sibling"))
    step_until(timer, clock, 100)
    assert rec.fired == [("sibling", 5), ("child", 35)]


def test_timer_task_without_callback_must_override_run():
    clock = ManualClock(0)

    class Custom(TimerTask):
        def __init__(self):
            super().__init__(3)
            self.ran_at = None

        def run(self):
            self.ran_at = clock()

    timer = SystemTimer(clock=clock)
    task = Custom()
    timer.add(task)
    step_until(timer, clock, 10)
    assert task.ran_at == 3
    with pytest.raises(NotImplementedError):
        TimerTask(1).run()


def test_delay_queue_holds_only_buckets_bounded_by_distinct_expirations():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rng = random.Random(42)
    for _ in range(20_000):
        timer.add(TimerTask(rng.randint(1, 1_000_000), lambda: None))
    queue = timer.delay_queue
    buckets = queue.buckets()
    assert all(isinstance(b, TimerTaskList) for b in buckets)
    assert len({id(b) for b in buckets}) == len(buckets)  # each bucket once
    assert len(buckets) == len({b.expiration_ms for b in buckets})
    total_buckets = sum(w.wheel_size for w in timer.wheel.levels())
    assert len(queue) <= total_buckets < 20_000 // 10
    assert sum(len(b) for b in buckets) == timer.size == 20_000


def test_advance_clock_waits_for_the_next_bucket_or_times_out():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock, sleep=clock.sleep)
    rec = Recorder(clock)
    assert timer.advance_clock(200) is False  # nothing scheduled: full timeout
    assert clock() == 200

    timer.add(rec.task(30, "a"))  # expires at 230; 230 is in the overflow wheel
    assert timer.advance_clock(5) is False
    assert clock() == 205 and rec.fired == []
    # Wakes at the next bucket expiration, not at the end of the timeout.
    assert timer.advance_clock(1000) is True
    assert clock() < 1205
    while not rec.fired:
        assert timer.advance_clock(1000) is True
    assert rec.fired == [("a", 230)]


def test_shutdown_drops_pending_tasks():
    clock = ManualClock(0)
    timer = SystemTimer(clock=clock)
    rec = Recorder(clock)
    tasks = [rec.task(d, d) for d in (5, 50, 5000)]
    for t in tasks:
        timer.add(t)
    timer.shutdown()
    assert timer.size == 0 and timer.next_expiration_ms() is None
    assert all(not t.is_scheduled for t in tasks)
    clock.set(10_000)
    assert timer.advance_to(clock()) == 0 and rec.fired == []
    with pytest.raises(RuntimeError):
        timer.add(rec.task(1, "late"))


# -- property tests ---------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=10**9),
    delays=st.lists(st.integers(min_value=0, max_value=400_000), min_size=1, max_size=200),
    wheel_size=st.integers(min_value=2, max_value=64),
)
def test_random_delays_fire_in_order_exactly_on_time(start, delays, wheel_size):
    clock = ManualClock(start)
    timer = SystemTimer(tick_ms=1, wheel_size=wheel_size, clock=clock)
    rec = Recorder(clock)
    for i, delay in enumerate(delays):
        timer.add(rec.task(delay, i))
    step_until(timer, clock, start + 400_001)
    fired = rec.times()
    assert len(rec.fired) == len(delays) == len(fired)  # each exactly once
    for i, delay in enumerate(delays):
        assert fired[i] == start + delay
    times = [at for _, at in rec.fired]
    assert times == sorted(times)
    assert timer.size == 0 and len(timer.delay_queue) == 0


actions = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(min_value=0, max_value=50_000)),
        # Small steps land between a tick boundary and a deadline (where an
        # early firing would show); large ones jump across wheel levels.
        st.tuples(
            st.just("advance"),
            st.one_of(st.integers(min_value=0, max_value=12), st.integers(min_value=0, max_value=3_000)),
        ),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=10**6)),
    ),
    max_size=150,
)


@settings(max_examples=200, deadline=None)
@given(
    tick=st.sampled_from([1, 2, 5, 10]),
    wheel_size=st.integers(min_value=2, max_value=32),
    script=actions,
)
def test_random_schedule_never_early_never_lost_cancel_wins(tick, wheel_size, script):
    """Interleaved adds, cancels and arbitrary clock jumps (not aligned to
    bucket expirations): a task never fires before its deadline, fires at the
    first advance at or past its tick-rounded deadline, and a cancelled task
    never fires."""
    clock = ManualClock(0)
    timer = SystemTimer(tick_ms=tick, wheel_size=wheel_size, clock=clock)
    rec = Recorder(clock)
    tasks: list[TimerTask] = []
    deadline: dict[int, int] = {}
    cancelled: set[int] = set()

    def check_fired_state():
        fired = rec.times()
        for i, due in deadline.items():
            rounded = math.ceil(due / tick) * tick
            if i in cancelled:
                continue
            if rounded <= clock():
                assert i in fired, f"task {i} due {due} not fired at {clock()}"
            if i in fired:
                # Never before its deadline (nor the tick boundary it was
                # rounded up to); "not late" is the check just above.
                assert fired[i] >= rounded >= due

    for kind, value in script:
        if kind == "add":
            i = len(tasks)
            task = rec.task(value, i)
            tasks.append(task)
            deadline[i] = clock() + value
            timer.add(task)
        elif kind == "advance":
            clock.advance(value)
            timer.advance_to(clock())
            check_fired_state()
        elif tasks:
            i = value % len(tasks)
            if i not in rec.times():
                tasks[i].cancel()
                cancelled.add(i)

    clock.advance(60_000)
    timer.advance_to(clock())
    check_fired_state()
    fired_names = rec.names()
    assert len(fired_names) == len(set(fired_names))
    assert set(fired_names) == set(deadline) - cancelled
    assert timer.size == 0
