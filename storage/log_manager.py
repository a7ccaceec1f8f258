"""One replica's share of Kafka's LogManager, without Ray or asyncio: which
log directory holds the replica, opening its log from the checkpointed
recovery point and log start, the offset checkpoint files of that directory
(recovery point, log start, replication offset = high watermark), the I/O
thread that flushes, checkpoints and unlinks off the event loop, and what the
periodic log duties decide (checkpoint, retention, compaction).

The replica actor (actors/partition_leader.py) runs the timer and awaits the
jobs this class hands out on its I/O thread; the decisions are made here.
Below the cluster layer, importing nothing above storage: the replica's
partition is handed in (only its high watermark is read), the schedule is
anything with set/enable/disable (cluster/replica_schedule.py's
ReplicaSchedule), and the duty names are this module's (the schedule imports
them, not the other way round).
"""
from __future__ import annotations

import functools
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Protocol

from storage.checkpoint import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                                REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile)
from storage.clock import SYSTEM_CLOCK, Clock
from storage.log import Log, LogConfig, partition_dir_name

log = logging.getLogger("raykafka.replica")

# The periodic log duties (cluster/replica_schedule.py schedules them by these names).
CHECKPOINT = "checkpoint"
RETENTION = "retention"
CLEAN = "clean"

CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)
# Kafka's replica.high.watermark.checkpoint.interval.ms default.
CHECKPOINT_INTERVAL_S = 5.0
# Kafka's LogManager starts its retention check this long after startup.
RETENTION_FIRST_CHECK_S = 30.0
# The cleaner's first pass on a compacted log comes at most this soon.
CLEAN_FIRST_S = 1.0


class HighWatermarkSource(Protocol):
    """The replica's partition state, as far as checkpoints and retention read it."""

    high_watermark: int


class DutySchedule(Protocol):
    """Where :meth:`LogManager.plan` puts the log duties (cluster/replica_schedule.py)."""

    def set(self, name: str, enabled: bool, every_s: float, now: float) -> None: ...

    def enable(self, name: str, every_s: float, now: float, first_in: float | None = None) -> None: ...

    def disable(self, name: str) -> None: ...


def choose_log_dir(log_dirs: list[str], topic: str, partition: int) -> Path:
    """The dir already holding this partition, else the one with fewest partitions (as Kafka)."""
    name = partition_dir_name(topic, partition)
    for d in log_dirs:
        if (Path(d) / name).is_dir():
            return Path(d)

    def count(d: str) -> int:
        try:
            return sum(1 for e in os.scandir(d) if e.is_dir())
        except FileNotFoundError:
            return 0

    return Path(min(log_dirs, key=count))


class LogManager:
    """The log of one replica (topic, partition) and its checkpoints.

    ``replica_config`` keys read: producer.id.expiration.ms,
    log.retention.check.interval.ms, log.cleaner.backoff.ms,
    log.cleaner.enable, log.cleaner.dedupe.buffer.size."""

    def __init__(self, log_dirs: list[str], topic: str, partition: int, replica_config: dict,
                 clock: Clock = SYSTEM_CLOCK):
        self.topic = topic
        self.partition_index = partition
        self.key = (topic, partition)
        self.config = replica_config
        self.clock = clock
        self.log_dir = choose_log_dir(log_dirs, topic, partition)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._checkpoints = {name: OffsetCheckpointFile(str(self.log_dir / name)) for name in CHECKPOINT_FILES}
        # What each file last got from here: unchanged values are not rewritten.
        self._checkpointed: dict[str, int] = {}
        # Rolled segments are fsynced, checkpoints written and deleted segments
        # unlinked on this thread (Kafka's scheduler), not in the event loop:
        # an inline fsync of a full 1 GiB segment held up every request behind
        # it for ~0.6 s, and a checkpoint's fsync waits ~0.25 s for the journal while one runs.
        self.io_thread: ThreadPoolExecutor | None = None
        self._cleaner = None
        self.log: Log | None = None
        # The replica's Partition, set by its owner once built: its high watermark is checkpointed.
        self.partition: HighWatermarkSource | None = None

    # ---- opening ---------------------------------------------------------------------------
    def open_log(self, log_config: dict) -> tuple[Log, int]:
        """Load the log from the checkpointed recovery point and log start
        -> (the log, the checkpointed high watermark the replica starts from)."""
        read = {name: self._checkpoints[name].read().get(self.key, 0) for name in CHECKPOINT_FILES}
        started = self.clock.monotonic()
        self.log = Log(str(self.log_dir / partition_dir_name(self.topic, self.partition_index)),
                       LogConfig(**log_config), recovery_point=read[RECOVERY_POINT_CHECKPOINT],
                       log_start_offset=read[LOG_START_OFFSET_CHECKPOINT],
                       producer_id_expiration_ms=int(self.config.get("producer.id.expiration.ms", 86400000)))
        self.log.flush_scheduler = self.schedule_io
        log.info("loaded %s-%d: log end %d, start %d, recovery point %d, in %.0f ms", self.topic,
                 self.partition_index, self.log.log_end_offset, self.log.log_start_offset,
                 read[RECOVERY_POINT_CHECKPOINT], (self.clock.monotonic() - started) * 1000)
        return self.log, read[REPLICATION_OFFSET_CHECKPOINT]

    # ---- the I/O thread --------------------------------------------------------------------
    def io_executor(self) -> ThreadPoolExecutor:
        if self.io_thread is None:
            self.io_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-io")
        return self.io_thread

    def schedule_io(self, job: Callable[[], object]) -> Future:
        future = self.io_executor().submit(job)
        future.add_done_callback(self._log_io_failure)
        return future

    def _log_io_failure(self, future: Future) -> None:
        # A job's own errors (a failed fsync) are logged by the job; this catches the rest.
        if not future.cancelled() and future.exception() is not None:
            log.error("background log I/O for %s-%d failed", self.topic, self.partition_index,
                      exc_info=future.exception())

    def stop_io(self) -> None:
        """Waits for the job in progress; the caller then flushes and checkpoints itself."""
        if self.io_thread is not None:
            self.io_thread.shutdown(wait=True)
            self.io_thread = None

    # ---- checkpoints -----------------------------------------------------------------------
    def checkpoint_values(self, recovery_point: int) -> dict[str, int]:
        return {
            RECOVERY_POINT_CHECKPOINT: recovery_point,
            LOG_START_OFFSET_CHECKPOINT: self.log.log_start_offset,
            REPLICATION_OFFSET_CHECKPOINT: self.partition.high_watermark,
        }

    def store_checkpoints(self, values: dict[str, int]) -> None:
        for name, value in values.items():
            if self._checkpointed.get(name) != value:
                self._checkpoints[name].update({self.key: value})
                self._checkpointed[name] = value

    def checkpoint_job(self) -> Callable[[], None]:
        """The values as of now, to store on the I/O thread (after any flush queued there)."""
        return functools.partial(self.store_checkpoints, self.checkpoint_values(self.log.recovery_point))

    def write_checkpoints(self, flush: bool) -> None:
        """Now, in the caller's thread (shutdown: after the I/O thread stopped)."""
        self.store_checkpoints(self.checkpoint_values(self.log.flush() if flush else self.log.recovery_point))

    def checkpoint_pending(self) -> bool:
        if self.checkpoint_values(self.log.recovery_point) != {n: self._checkpointed.get(n)
                                                               for n in self._checkpoints}:
            return True
        # A time-based flush (flush.ms) still owed to data appended before the replica went idle.
        return self.log.config.flush_ms is not None and self.log.recovery_point < self.log.log_end_offset

    # ---- periodic duties -------------------------------------------------------------------
    def plan(self, schedule: DutySchedule, now: float, idle: bool) -> None:
        """Schedule the log duties this replica has right now (cheap: before every timer sleep)."""
        # Kafka's high-watermark checkpoint: every 5 s while there is traffic;
        # an idle replica's files are current after its last one.
        schedule.set(CHECKPOINT, not idle or self.checkpoint_pending(), CHECKPOINT_INTERVAL_S, now)
        retention_every = self.config["log.retention.check.interval.ms"] / 1000
        schedule.enable(RETENTION, retention_every, now, first_in=min(retention_every, RETENTION_FIRST_CHECK_S))
        cleaner_every = self.config["log.cleaner.backoff.ms"] / 1000
        if self.config["log.cleaner.enable"] and self.log.config.compacted:
            schedule.enable(CLEAN, cleaner_every, now, first_in=min(cleaner_every, CLEAN_FIRST_S))
        else:
            schedule.disable(CLEAN)

    def flush_if_due(self) -> None:
        """flush.ms / flush.messages, with the checkpoint duty."""
        self.log.maybe_flush(self.clock.now_ms())

    def apply_retention(self, now_ms: int):
        """Expire producers (producer.id.expiration.ms) and schedule the segments
        past retention.ms / retention.bytes for deletion (never the active
        one, never beyond the HW) -> storage.log's RetentionResult."""
        self.log.remove_expired_producers(now_ms)
        return self.log.apply_retention(self.partition.high_watermark, now_ms)

    def unlink_job(self, now_ms: int) -> Callable[[], object] | None:
        """Unlinking the files whose file.delete.delay.ms has passed, for the
        I/O thread (a 1 GiB segment takes a while), or None: nothing pending."""
        return functools.partial(self.log.delete_pending, now_ms) if self.log.pending_deletes else None

    def clean_once(self):
        """One cleaner pass (in a worker thread: the log takes its lock only to
        swap cleaned segments in) -> storage.cleaner's result, or None."""
        from storage.cleaner import LogCleaner

        if self._cleaner is None:
            self._cleaner = LogCleaner(self.config["log.cleaner.dedupe.buffer.size"])
        return self._cleaner.clean_once([(self.log, self.partition.high_watermark)], self.clock.now_ms())

    # ---- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        """Clean shutdown: wait for the I/O thread, flush, checkpoint, close files."""
        self.stop_io()
        self.write_checkpoints(flush=True)
        self.log.close()

    def delete(self) -> None:
        """The replica is removed from this broker: its files and checkpoint entries go."""
        self.stop_io()
        self.log.delete()
        for checkpoint in self._checkpoints.values():
            checkpoint.update(remove=[self.key])
