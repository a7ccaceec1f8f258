"""The partition replica actor: one Ray actor per replica, named
`<topic>-<partition>@<broker id>`, owning that replica's log directory.

A thin shell: cluster.partition.Partition holds the rules, storage.log.Log the
bytes. This module adds what needs an event loop: waking long-polled fetches
when the fetchable end moves, periodic checkpoints, and the Ray method surface.
The leader role lives here, the follower role in actors/follower.py.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import ray

from actors.follower import FollowerRole
from cluster.partition import Partition
from core.naming import partition_dir_name
from storage.checkpoint import OffsetCheckpointFile
from storage.log import Log, LogConfig

log = logging.getLogger("raykafka.replica")

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_FILE = "replication-offset-checkpoint"
# Kafka's replica.high.watermark.checkpoint.interval.ms default.
CHECKPOINT_INTERVAL_S = 5.0


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


class ReplicaActor(FollowerRole):
    def __init__(self, topic: str, partition: int, broker_id: int, log_dirs: list[str],
                 log_config: dict, min_insync_replicas: int = 1):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.topic = topic
        self.partition_index = partition
        self.log_dir = choose_log_dir(log_dirs, topic, partition)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        key = (topic, partition)
        self._checkpoints = {
            name: OffsetCheckpointFile(str(self.log_dir / name))
            for name in (RECOVERY_POINT_FILE, LOG_START_FILE, REPLICATION_OFFSET_FILE)
        }
        recovery_point = self._checkpoints[RECOVERY_POINT_FILE].read().get(key, 0)
        log_start = self._checkpoints[LOG_START_FILE].read().get(key, 0)
        high_watermark = self._checkpoints[REPLICATION_OFFSET_FILE].read().get(key, 0)
        started = time.monotonic()
        self.log = Log(str(self.log_dir / partition_dir_name(topic, partition)), LogConfig(**log_config),
                       recovery_point=recovery_point, log_start_offset=log_start)
        log.info("loaded %s-%d: log end %d, start %d, recovery point %d, in %.0f ms", topic, partition,
                 self.log.log_end_offset, self.log.log_start_offset, recovery_point,
                 (time.monotonic() - started) * 1000)
        self.partition = Partition(topic, partition, broker_id, self.log, high_watermark, min_insync_replicas)
        self._data_event: asyncio.Event | None = None
        self._checkpoint_task: asyncio.Task | None = None
        self._checkpointed: dict[str, int] = {}
        self._closed = False

    # ---- event-loop helpers -------------------------------------------------------------------
    def _event(self) -> asyncio.Event:
        if self._data_event is None:
            self._data_event = asyncio.Event()
        return self._data_event

    def _wake_waiters(self) -> None:
        # One event per "generation": waiters re-check their condition on wake.
        if self._data_event is not None:
            self._data_event.set()
            self._data_event = None

    def _ensure_background(self) -> None:
        if self._checkpoint_task is None:
            self._checkpoint_task = asyncio.get_running_loop().create_task(self._checkpoint_loop())

    async def _checkpoint_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            try:
                self._write_checkpoints(flush=False)
            except Exception:
                log.exception("checkpointing %s-%d failed", self.topic, self.partition_index)

    def _write_checkpoints(self, flush: bool) -> None:
        key = (self.topic, self.partition_index)
        recovery_point = self.log.flush() if flush else self.log.recovery_point
        values = {
            RECOVERY_POINT_FILE: recovery_point,
            LOG_START_FILE: self.log.log_start_offset,
            REPLICATION_OFFSET_FILE: self.partition.high_watermark,
        }
        for name, value in values.items():
            if self._checkpointed.get(name) != value:
                self._checkpoints[name].update({key: value})
                self._checkpointed[name] = value

    # ---- controller -> replica ---------------------------------------------------------------
    async def become_leader(self, controller_epoch: int, leader_epoch: int, isr: list[int],
                            replicas: list[int]) -> int:
        self._ensure_background()
        error = self.partition.make_leader(controller_epoch, leader_epoch, isr, replicas)
        self._wake_waiters()
        return error

    async def stop_replica(self, controller_epoch: int, delete: bool) -> int:
        error = self.partition.fence_controller(controller_epoch)
        if error:
            return error
        self._closed = True
        self.partition.is_leader = False
        self._wake_waiters()
        if delete:
            self.log.delete()
            key = (self.topic, self.partition_index)
            for checkpoint in self._checkpoints.values():
                checkpoint.update(remove=[key])
        else:
            self._write_checkpoints(flush=True)
            self.log.close()
        return 0

    async def close(self) -> None:
        """Clean shutdown: flush, checkpoint, close files."""
        if not self._closed:
            self._closed = True
            self._write_checkpoints(flush=True)
            self.log.close()

    async def state(self) -> dict:
        return self.partition.state()

    # ---- edge -> leader ---------------------------------------------------------------------------
    async def append(self, record_sets: list[tuple[bytes, int, int]], leader_epoch: int) -> list:
        if self._closed:
            return [(6, -1, -1, -1, None)] * len(record_sets)  # NOT_LEADER_OR_FOLLOWER
        self._ensure_background()
        before = self.partition.high_watermark
        results = self.partition.append(record_sets, leader_epoch, int(time.time() * 1000))
        if self.partition.high_watermark != before:
            self._wake_waiters()
        return results

    async def read(self, fetch_offset: int, max_bytes: int, isolation_level: int, current_leader_epoch: int):
        return self.partition.read(fetch_offset, max_bytes, isolation_level, current_leader_epoch)

    async def wait_for_data(self, known_end: int, isolation_level: int, timeout_s: float) -> bool:
        """Long-poll: return True once the fetchable end passes known_end, False on timeout."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while self.partition.fetchable_end(isolation_level) <= known_end and self.partition.is_leader:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._event().wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    async def list_offsets(self, timestamp: int, isolation_level: int, current_leader_epoch: int):
        return self.partition.list_offsets(timestamp, isolation_level, current_leader_epoch)


ReplicaActorRemote = ray.remote(ReplicaActor)
