"""Delayed operations: hierarchical timing wheels and the purgatory (Kafka's design)."""

from delayed.clock import ManualClock, monotonic_ms
from delayed.operation import DelayedOperation, DelayedOperationPurgatory
from delayed.timing_wheel import (
    AsyncTimerDriver,
    DelayQueue,
    SystemTimer,
    TaskCounter,
    TimerTask,
    TimerTaskEntry,
    TimerTaskList,
    TimingWheel,
)

__all__ = [
    "AsyncTimerDriver",
    "DelayQueue",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "ManualClock",
    "SystemTimer",
    "TaskCounter",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "monotonic_ms",
]
