"""Hierarchical timing wheels (the design of Kafka's SystemTimer).

Why a timing wheel instead of one heap of tasks: a broker holds very many
delayed operations (fetches waiting for data, produces waiting for acks), most
of which complete long before they time out. With a wheel, inserting a task and
cancelling it are O(1) (link into / unlink from a bucket's doubly-linked list),
and the priority queue only ever holds *buckets*, at most one per distinct
bucket expiration, so its size is bounded by the wheel geometry, not by the
number of tasks.

Structure:

* ``TimerTask``: something to run after ``delay_ms``.
* ``TimerTaskEntry``: the node that links a task into a bucket. A task has at
  most one live entry; re-adding a task unlinks its previous entry.
* ``TimerTaskList``: a bucket, a circular doubly-linked list with a sentinel
  root, plus the bucket's expiration time.
* ``TimingWheel``: ``wheel_size`` buckets each ``tick_ms`` wide. Tasks beyond
  the wheel's interval go to a lazily created overflow wheel whose tick is this
  wheel's whole interval; when an overflow bucket expires its tasks are
  re-inserted and cascade down into finer wheels.
* ``DelayQueue``: a min-heap of buckets keyed by expiration (Kafka uses
  ``java.util.concurrent.DelayQueue``). A bucket is offered only when its
  expiration changes.
* ``SystemTimer``: ties it together. The clock of the wheels advances only
  when a bucket expires, never by ticking through empty time.
* ``AsyncTimerDriver``: runs a SystemTimer on an asyncio loop with a single
  ``loop.call_at`` armed for the earliest bucket.

Concurrency: everything here is meant to be used from one thread (an asyncio
event loop). Kafka guards buckets with locks and the expiration with an
AtomicLong because its reaper thread and request threads race; here nothing
can interleave inside a method call, so plain attributes are enough.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from typing import Callable, Iterator, Optional

from delayed.clock import monotonic_ms

log = logging.getLogger(__name__)

__all__ = [
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TaskCounter",
    "DelayQueue",
    "TimingWheel",
    "SystemTimer",
    "AsyncTimerDriver",
]


class TimerTask:
    """A unit of work to run once ``delay_ms`` has passed.

    Either override ``run()`` or pass ``callback``. ``cancel()`` unlinks the
    task from the timer in O(1); a cancelled task never runs (unless it is
    added again, which schedules it afresh).
    """

    def __init__(self, delay_ms: float, callback: Optional[Callable[[], None]] = None) -> None:
        self.delay_ms = delay_ms
        self._callback = callback
        # The entry currently representing this task in a bucket (or the last
        # one, after it was flushed for running). None once cancelled.
        self._entry: Optional[TimerTaskEntry] = None

    def run(self) -> None:
        if self._callback is None:
            raise NotImplementedError("override TimerTask.run() or pass a callback")
        self._callback()

    def cancel(self) -> None:
        entry = self._entry
        if entry is not None:
            entry.remove()
        self._entry = None

    @property
    def is_scheduled(self) -> bool:
        """True while the task sits in a bucket waiting to expire."""
        return self._entry is not None and self._entry.list is not None

    def _set_entry(self, entry: "TimerTaskEntry") -> None:
        # A task has at most one live entry: adding it again moves it, so the
        # old entry is unlinked from whatever bucket holds it. The old entry
        # is then "cancelled" (task._entry is no longer it) so a flush that
        # already detached it will not run the task a second time.
        old = self._entry
        if old is not None and old is not entry:
            old.remove()
        self._entry = entry

    def _get_entry(self) -> Optional["TimerTaskEntry"]:
        return self._entry


class TimerTaskEntry:
    """A node of a bucket's doubly-linked list, pointing at its task."""

    __slots__ = ("task", "expiration_ms", "list", "next", "prev")

    def __init__(self, task: Optional[TimerTask], expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        # The bucket this entry is linked into; None when unlinked.
        self.list: Optional[TimerTaskList] = None
        self.next: Optional[TimerTaskEntry] = None
        self.prev: Optional[TimerTaskEntry] = None
        if task is not None:
            task._set_entry(self)

    @property
    def cancelled(self) -> bool:
        # Cancelled when the task was cancelled or re-added since: either way
        # this entry no longer speaks for the task.
        return self.task is None or self.task._get_entry() is not self

    def remove(self) -> None:
        # Kafka loops here because another thread may be moving the entry
        # between lists; single-threaded, one attempt always succeeds.
        current = self.list
        if current is not None:
            current.remove(self)

    def __repr__(self) -> str:
        return f"TimerTaskEntry(expiration_ms={self.expiration_ms}, linked={self.list is not None})"


class TaskCounter:
    """Number of entries linked into any bucket of one timer (Kafka shares an
    AtomicInteger between all the wheels' buckets for the same purpose)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: circular doubly-linked list of entries with a sentinel root.

    ``add`` and ``remove`` are O(1). ``expiration_ms`` is the time at which the
    whole bucket is due; -1 means the bucket is not in use.
    """

    __slots__ = ("_task_counter", "_root", "_expiration_ms", "_size")

    def __init__(self, task_counter: TaskCounter) -> None:
        self._task_counter = task_counter
        root = TimerTaskEntry(None, -1)
        root.next = root
        root.prev = root
        self._root = root
        self._expiration_ms = -1
        self._size = 0

    @property
    def expiration_ms(self) -> int:
        return self._expiration_ms

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True iff it changed.

        A change means the bucket is being (re)used for a new time slot and
        must be offered to the delay queue; no change means it is already
        queued for this slot. (Kafka's getAndSet on an AtomicLong; atomicity
        is free on one thread.)
        """
        changed = self._expiration_ms != expiration_ms
        self._expiration_ms = expiration_ms
        return changed

    def add(self, entry: TimerTaskEntry) -> None:
        # An entry lives in at most one bucket: unlink it from its old one.
        entry.remove()
        tail = self._root.prev
        entry.next = self._root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        self._root.prev = entry
        self._size += 1
        self._task_counter.value += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.list is not self:
            return
        entry.next.prev = entry.prev
        entry.prev.next = entry.next
        entry.next = None
        entry.prev = None
        entry.list = None
        self._size -= 1
        self._task_counter.value -= 1

    def flush(self, fn: Callable[[TimerTaskEntry], None]) -> None:
        """Unlink every entry, mark the bucket unused, then apply ``fn`` to each.

        Entries are detached and the expiration reset *before* ``fn`` runs, so
        ``fn`` may re-insert entries anywhere, including back into this very
        bucket for a later slot, without the reset clobbering that new slot.
        """
        detached = []
        entry = self._root.next
        while entry is not self._root:
            following = entry.next
            self.remove(entry)
            detached.append(entry)
            entry = following
        self._expiration_ms = -1
        for entry in detached:
            fn(entry)

    def entries(self) -> Iterator[TimerTaskEntry]:
        entry = self._root.next
        while entry is not self._root:
            following = entry.next
            yield entry
            entry = following

    def tasks(self) -> Iterator[TimerTask]:
        """The live (not cancelled) tasks in this bucket, in insertion order."""
        for entry in self.entries():
            if not entry.cancelled:
                yield entry.task

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"TimerTaskList(expiration_ms={self._expiration_ms}, size={self._size})"


class DelayQueue:
    """Min-heap of buckets ordered by expiration.

    Holds buckets, never tasks. A bucket is offered only when its expiration
    changes (see ``TimerTaskList.set_expiration``); a bucket's expiration only
    moves forward, and it is popped before it is reused, so normally each
    bucket appears at most once. Entries whose bucket has since changed
    expiration are skipped lazily, as a defence, rather than searched for.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        # Tie-breaker so the heap never compares buckets.
        self._seq = itertools.count()
        # Called with the expiration of every bucket offered; lets an event
        # loop driver re-arm its single wake-up when an earlier bucket appears.
        self.on_offer: Optional[Callable[[int], None]] = None

    def offer(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration_ms
        heapq.heappush(self._heap, (expiration, next(self._seq), bucket))
        listener = self.on_offer
        if listener is not None:
            listener(expiration)

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and heap[0][2].expiration_ms != heap[0][0]:
            heapq.heappop(heap)

    def peek_expiration_ms(self) -> Optional[int]:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def poll_expired(self, now_ms: int) -> Optional[TimerTaskList]:
        """Pop the earliest bucket if it has expired by ``now_ms``."""
        self._drop_stale()
        if self._heap and self._heap[0][0] <= now_ms:
            return heapq.heappop(self._heap)[2]
        return None

    def buckets(self) -> list[TimerTaskList]:
        return [item[2] for item in self._heap]

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


class TimingWheel:
    """One level of the hierarchical wheel.

    ``wheel_size`` buckets, each ``tick_ms`` wide, covering
    ``[current_time_ms, current_time_ms + interval_ms)``. ``current_time_ms`` is
    always a multiple of ``tick_ms`` and marks the bucket that is (or just was)
    expiring; entries due before ``current_time_ms + tick_ms`` are expired.
    """

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        task_counter: TaskCounter,
        queue: DelayQueue,
    ) -> None:
        if tick_ms < 1 or wheel_size < 1:
            raise ValueError("tick_ms and wheel_size must be positive")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self._task_counter = task_counter
        self._queue = queue
        self.buckets = [TimerTaskList(task_counter) for _ in range(wheel_size)]
        # Round down so that bucket boundaries are tick multiples.
        self.current_time_ms = start_ms - (start_ms % tick_ms)
        # Created on first need: most timers never see delays beyond a level
        # or two, so they never pay for the coarser wheels.
        self.overflow_wheel: Optional[TimingWheel] = None

    def _add_overflow_wheel(self) -> TimingWheel:
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(
                tick_ms=self.interval_ms,
                wheel_size=self.wheel_size,
                start_ms=self.current_time_ms,
                task_counter=self._task_counter,
                queue=self._queue,
            )
        return self.overflow_wheel

    def add(self, entry: TimerTaskEntry) -> bool:
        """Link ``entry`` into the right bucket of this wheel or a coarser one.

        Returns False if the entry was cancelled or is already expired; the
        caller then either drops it or runs the task now.
        """
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        if expiration < self.current_time_ms + self.tick_ms:
            return False
        if expiration < self.current_time_ms + self.interval_ms:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            # Only a bucket taking on a new time slot goes onto the queue;
            # adding to a bucket already queued for this slot costs no heap work.
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self._queue.offer(bucket)
            return True
        return self._add_overflow_wheel().add(entry)

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel (and, in turn, the coarser ones) to ``time_ms``,
        rounded down to a tick multiple. Never moves backwards."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - (time_ms % self.tick_ms)
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time_ms)

    def levels(self) -> Iterator[TimingWheel]:
        """This wheel and every overflow wheel created so far, finest first."""
        wheel: Optional[TimingWheel] = self
        while wheel is not None:
            yield wheel
            wheel = wheel.overflow_wheel


def _run_inline(task: TimerTask) -> None:
    # A failing task must not stop the flush of the rest of its bucket, nor
    # break the event loop driving the timer.
    try:
        task.run()
    except Exception:
        log.exception("timer task %r failed", task)


class SystemTimer:
    """A timer built on hierarchical timing wheels.

    ``tick_ms`` is the resolution: a task runs no earlier than its deadline
    and less than one tick after it (given the timer is advanced on time).
    Deadlines are rounded *up* to a tick multiple before insertion; Kafka
    rounds down, which can run a task up to ``tick_ms - 1`` early. With the
    default 1 ms tick the two agree.

    Driving it: call ``advance_to(now_ms)`` whenever the clock may have passed
    ``next_expiration_ms()`` (the asyncio way, see ``AsyncTimerDriver``), or
    call ``advance_clock(timeout_ms)`` which sleeps until the next bucket
    expires or the timeout passes (Kafka's reaper-thread way).

    ``executor`` receives each task that is due; the default runs it inline
    and logs exceptions. It is also used by ``add`` for tasks that are already
    due when added, so by default such a task runs before ``add`` returns.
    """

    def __init__(
        self,
        tick_ms: int = 1,
        wheel_size: int = 20,
        clock: Callable[[], int] = monotonic_ms,
        executor: Callable[[TimerTask], None] = _run_inline,
        sleep: Optional[Callable[[int], None]] = None,
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self._clock = clock
        self._executor = executor
        self._sleep = sleep if sleep is not None else (lambda ms: time.sleep(ms / 1000.0))
        self._task_counter = TaskCounter()
        self._queue = DelayQueue()
        self._wheel = TimingWheel(tick_ms, wheel_size, clock(), self._task_counter, self._queue)
        self._shut_down = False

    # -- inspection -------------------------------------------------------

    def now_ms(self) -> int:
        return self._clock()

    @property
    def size(self) -> int:
        """Number of tasks waiting in the timer."""
        return self._task_counter.value

    @property
    def wheel(self) -> TimingWheel:
        """The finest wheel (overflow wheels hang off it)."""
        return self._wheel

    @property
    def delay_queue(self) -> DelayQueue:
        return self._queue

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    def next_expiration_ms(self) -> Optional[int]:
        """When the earliest bucket expires (absolute, timer clock), or None
        if nothing is scheduled. An event loop sleeps exactly until then.

        Note a bucket emptied by cancellations still reports its expiration;
        waking for it is harmless (Kafka behaves the same) and avoids O(n)
        bookkeeping on cancel.
        """
        return self._queue.peek_expiration_ms()

    def set_bucket_listener(self, listener: Optional[Callable[[int], None]]) -> None:
        """Call ``listener(expiration_ms)`` whenever a bucket is queued, so an
        event loop can wake earlier when an earlier bucket appears."""
        self._queue.on_offer = listener

    # -- scheduling -------------------------------------------------------

    def add(self, task: TimerTask) -> None:
        if self._shut_down:
            raise RuntimeError("timer is shut down")
        deadline = self._clock() + task.delay_ms
        # Round the deadline up to a tick boundary (and to whole ms, should a
        # delay be fractional): the wheels then expire the entry exactly at a
        # boundary that is not before the deadline.
        expiration = math.ceil(deadline / self.tick_ms) * self.tick_ms
        self._add_entry(TimerTaskEntry(task, int(expiration)))

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self._wheel.add(entry):
            # Expired or cancelled. Cancelled ones are dropped; expired ones
            # run now.
            if not entry.cancelled:
                self._executor(entry.task)

    def advance_to(self, now_ms: int) -> int:
        """Flush every bucket that has expired by ``now_ms``; never blocks.

        Each flushed bucket first moves the wheel clock to the bucket's
        expiration, then re-inserts its entries: the due ones run, the rest
        cascade into finer buckets (which may themselves be due by ``now_ms``
        and are flushed in this same call, in expiration order). Returns the
        number of buckets flushed.
        """
        if self._shut_down:
            return 0
        flushed = 0
        while True:
            bucket = self._queue.poll_expired(now_ms)
            if bucket is None:
                return flushed
            self._wheel.advance_clock(bucket.expiration_ms)
            bucket.flush(self._add_entry)
            flushed += 1

    def advance_clock(self, timeout_ms: int) -> bool:
        """Wait up to ``timeout_ms`` for a bucket to expire, then flush every
        expired bucket. True if any bucket was flushed (Kafka's
        ``SystemTimer.advanceClock``). Blocks the calling thread via ``sleep``;
        an event loop should use ``advance_to`` instead.
        """
        start = self._clock()
        deadline = start + max(0, timeout_ms)
        while True:
            now = self._clock()
            next_expiration = self.next_expiration_ms()
            if next_expiration is not None and next_expiration <= now:
                return self.advance_to(now) > 0
            if now >= deadline:
                return False
            wake_at = deadline if next_expiration is None else min(deadline, next_expiration)
            self._sleep(wake_at - now)

    def shutdown(self) -> None:
        """Drop every pending task without running it and refuse new ones.

        Dropped tasks are cancelled (``task.cancel()``), so whatever tracks
        them, e.g. a purgatory's delayed count, sees them leave the timer.
        """
        if self._shut_down:
            return
        self._shut_down = True
        dropped: list[TimerTaskEntry] = []
        for wheel in self._wheel.levels():
            for bucket in wheel.buckets:
                bucket.flush(dropped.append)
        self._queue.clear()
        for entry in dropped:
            if not entry.cancelled:
                entry.task.cancel()


class AsyncTimerDriver:
    """Runs a ``SystemTimer`` on an asyncio event loop.

    Keeps exactly one ``loop.call_at`` armed, for the earliest bucket's
    expiration. When a bucket is queued that expires earlier than the armed
    one (the timer tells us through its bucket listener, whoever called
    ``timer.add``), the wake-up is moved earlier. There is no polling: the
    loop wakes only when a bucket is due, and expired tasks run on the loop.

    The timer must only be touched from the loop's thread; use the timer's
    default executor (or another that does not hop threads).
    """

    def __init__(self, timer: SystemTimer, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self._timer = timer
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._handle: Optional[asyncio.TimerHandle] = None
        self._armed_expiration_ms: Optional[int] = None
        # While flushing, cascading re-inserts queue many buckets; re-arm once
        # afterwards instead of once per bucket.
        self._flushing = False
        self._closed = False
        self.wakeups = 0  # number of times the loop woke us; for observability
        timer.set_bucket_listener(self._on_bucket_queued)
        self._rearm()

    @property
    def timer(self) -> SystemTimer:
        return self._timer

    @property
    def armed_expiration_ms(self) -> Optional[int]:
        """The bucket expiration the armed wake-up is for, or None."""
        return self._armed_expiration_ms

    def add(self, task: TimerTask) -> None:
        # Convenience; timer.add works just as well since the listener re-arms.
        self._timer.add(task)

    def close(self) -> None:
        """Disarm and detach from the timer (the timer itself is left alone)."""
        self._closed = True
        self._disarm()
        self._timer.set_bucket_listener(None)

    def _on_bucket_queued(self, expiration_ms: int) -> None:
        if self._flushing or self._closed:
            return
        if self._armed_expiration_ms is None or expiration_ms < self._armed_expiration_ms:
            self._arm(expiration_ms)

    def _arm(self, expiration_ms: int) -> None:
        self._disarm()
        delay_ms = max(0, expiration_ms - self._timer.now_ms())
        self._handle = self._loop.call_at(self._loop.time() + delay_ms / 1000.0, self._wake)
        self._armed_expiration_ms = expiration_ms

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_expiration_ms = None

    def _rearm(self) -> None:
        if self._closed:
            return
        next_expiration = self._timer.next_expiration_ms()
        if next_expiration is None:
            self._disarm()
        elif next_expiration != self._armed_expiration_ms:
            self._arm(next_expiration)

    def _wake(self) -> None:
        self._handle = None
        self._armed_expiration_ms = None
        self.wakeups += 1
        self._flushing = True
        try:
            # If the loop woke us a hair early (the ms clock truncates),
            # nothing is flushed and _rearm schedules the remaining gap.
            self._timer.advance_to(self._timer.now_ms())
        finally:
            self._flushing = False
            self._rearm()
