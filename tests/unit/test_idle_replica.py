"""Idle replicas (issue 18): one timer for every periodic duty, nothing
scheduled that has nothing to do, and an idle process that yields the CPU
(SCHED_IDLE) until traffic arrives. The schedule and the priority switch are
plain classes; the replica is driven without Ray."""
import asyncio
import os
import threading

import pytest

from actors.partition_leader import ReplicaActor
from cluster import replica_schedule as duties
from cluster.replica_schedule import ReplicaSchedule
from core import idle_priority
from core.clock import ManualClock
from core.idle_priority import IdlePriority
from core.replica_messages import AppendRequest
from storage.records import SimpleRecord, build_batch

BROKER = 1


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_schedule_runs_each_duty_at_its_period_and_sleeps_until_the_earliest():
    s = ReplicaSchedule()
    s.enable("a", 5.0, now=0.0)
    s.enable("b", 2.0, now=0.0)
    assert s.next_delay(0.0) == 2.0
    assert s.take_due(1.9) == []
    assert s.take_due(2.0) == ["b"]
    assert s.next_delay(2.0) == 2.0  # b again at 4, a at 5
    assert s.take_due(5.0) == ["a", "b"]
    s.disable("a")
    s.disable("b")
    assert s.next_delay(5.0) == float("inf")


def test_schedule_keeps_a_due_time_when_re_enabled_but_follows_a_shorter_period():
    s = ReplicaSchedule()
    s.enable("r", 300.0, now=0.0)
    s.enable("r", 300.0, now=10.0)  # re-planning every wake-up must not postpone it
    assert s.next_delay(10.0) == 290.0
    s.enable("r", 1.0, now=10.0)  # the period shrank (a config change)
    assert s.next_delay(10.0) == 1.0


def test_idle_after_quiet_period_and_busy_again_on_first_touch():
    clock, applied, woken = Clock(), [], []
    p = IdlePriority(10.0, apply=lambda policy: applied.append(policy) or 1, on_busy=lambda: woken.append(1),
                     clock=clock)
    assert not p.tick()
    clock.now += 9.9
    assert not p.tick() and p.next_tick_in() == pytest.approx(0.1)
    clock.now += 0.1
    assert p.tick()
    assert applied == [os.SCHED_IDLE] and p.next_tick_in() == float("inf")
    assert p.tick() and applied == [os.SCHED_IDLE]  # no second switch
    p.touch()
    assert not p.idle and applied == [os.SCHED_IDLE, os.SCHED_OTHER] and woken == [1]
    p.touch()  # busy: a flag only
    assert applied == [os.SCHED_IDLE, os.SCHED_OTHER]
    clock.now += 10
    assert not p.tick()  # touched since the last tick
    clock.now += 10
    assert p.tick()


def test_disabled_priority_still_tracks_idleness_without_switching():
    clock, applied = Clock(), []
    p = IdlePriority(1.0, enabled=False, apply=applied.append, clock=clock)
    assert not p.tick()  # a new replica counts as active
    clock.now += 1
    assert p.tick() and applied == []
    p.touch()
    assert not p.idle and applied == []


@pytest.mark.skipif(not idle_priority.supported(), reason="needs CAP_SYS_NICE or RLIMIT_NICE")
def test_set_policy_moves_every_thread_and_back():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert idle_priority.set_policy(os.SCHED_IDLE) >= 2
        tids = idle_priority.thread_ids()
        assert {os.sched_getscheduler(tid) for tid in tids} == {os.SCHED_IDLE}
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        idle_priority.set_policy(os.SCHED_OTHER)
        assert {os.sched_getscheduler(tid) for tid in tids} == {os.SCHED_OTHER}
        assert os.getpriority(os.PRIO_PROCESS, 0) == nice  # the nice value is kept
    finally:
        stop.set()
        t.join()
        idle_priority.set_policy(os.SCHED_OTHER)


def _batch():
    return build_batch([SimpleRecord(key=b"k", value=b"v" * 100)], compression=0)


async def settle(condition, required: bool = True) -> None:
    """Let the replica's timer task run until ``condition`` holds (no real
    time passes: the replica reads a ManualClock)."""
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    assert condition() or not required


def test_idle_leader_schedules_only_retention_and_wakes_on_an_append(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYKAFKA_IDLE_PRIORITY", "0")  # the switch itself is tested above
    clock = ManualClock()
    replica = ReplicaActor("t", 0, BROKER, [str(tmp_path)], {"segment_bytes": 1 << 20},
                           replica_config={"replica.idle.after.ms": 200}, clock=clock)
    replica._report_progress = lambda force=False: None

    async def run():
        assert await replica.become_leader(1, 0, [BROKER], [BROKER]) == 0
        await settle(lambda: replica._schedule.scheduled())
        busy_plan = replica._schedule.scheduled()
        # No other replica: no ISR check; not compacted: no cleaner.
        assert busy_plan == {duties.CHECKPOINT, duties.RETENTION}
        results = (await replica.append(AppendRequest.from_sets([(_batch(), 1, 1000)], 0))).results
        assert results[0][0] == 0
        await replica._run_duty(duties.CHECKPOINT)  # as the timer would after 5 s
        # The first tick notes the append, the next one the quiet period after it.
        for _ in range(2):
            clock.advance(0.3)
            replica._poke_timer()  # the timer's sleep would have ended by now
            await settle(lambda: replica._idle.idle and replica._schedule.scheduled() == {duties.RETENTION},
                         required=False)
        assert replica._idle.idle
        # Checkpoints current: the idle replica's timer holds retention only.
        assert replica._schedule.scheduled() == {duties.RETENTION}
        await replica.append(AppendRequest.from_sets([(_batch(), 1, 1000)], 0))
        assert not replica._idle.idle
        await settle(lambda: duties.CHECKPOINT in replica._schedule.scheduled())
        assert duties.CHECKPOINT in replica._schedule.scheduled()
        await replica.close()
        await settle(lambda: all(t.done() for t in replica._background))
        assert all(t.done() for t in replica._background)  # the timer ends with the replica

    asyncio.run(run())


def test_leader_with_followers_checks_its_isr(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYKAFKA_IDLE_PRIORITY", "0")
    replica = ReplicaActor("t", 0, BROKER, [str(tmp_path)], {"segment_bytes": 1 << 20}, clock=ManualClock())
    replica._report_progress = lambda force=False: None

    async def run():
        assert await replica.become_leader(1, 0, [BROKER, 2], [BROKER, 2]) == 0
        await settle(lambda: duties.ISR in replica._schedule.scheduled())
        plan = replica._schedule.scheduled()
        await replica.close()
        return plan

    assert duties.ISR in asyncio.run(run())
