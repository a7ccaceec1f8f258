"""One partition replica's state and rules (Kafka's kafka.cluster.Partition),
without Ray: leadership and its epochs, the high watermark, appends, reads and
offset lookups over a storage.log.Log. The replica actor is a thin shell over it.
"""
from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage.log import Log, OffsetOutOfRangeError
from storage.record_batch import InvalidRecordsError

log = logging.getLogger("raykafka.partition")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# (error, base_offset, log_append_time_ms, log_start_offset, error_message)
AppendResult = tuple[int, int, int, int, str | None]


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log_: Log, high_watermark: int = 0,
                 min_insync_replicas: int = 1):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log_
        self.controller_epoch = -1
        self.leader_epoch = -1
        self.leader_id = -1
        self.is_leader = False
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.follower_end_offsets: dict[int, int] = {}
        self.min_insync_replicas = min_insync_replicas
        # A restarted replica must never expose more than it had committed.
        self.high_watermark = min(max(high_watermark, log_.log_start_offset), log_.log_end_offset)

    # ---- leadership -----------------------------------------------------------------------
    def fence_controller(self, controller_epoch: int) -> int:
        if controller_epoch < self.controller_epoch:
            return int(ErrorCode.stale_controller_epoch)
        self.controller_epoch = controller_epoch
        return 0

    def make_leader(self, controller_epoch: int, leader_epoch: int, isr: list[int], replicas: list[int]) -> int:
        error = self.fence_controller(controller_epoch)
        if error:
            return error
        if leader_epoch < self.leader_epoch:
            return int(ErrorCode.fenced_leader_epoch)
        self.leader_epoch = leader_epoch
        self.leader_id = self.broker_id
        self.is_leader = True
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.follower_end_offsets = {r: -1 for r in replicas if r != self.broker_id}
        # New epoch starts at our log end: followers truncate to it (KIP-101).
        self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        return 0

    def check_leader(self, leader_epoch: int) -> int:
        if not self.is_leader:
            return int(ErrorCode.not_leader_or_follower)
        if leader_epoch >= 0:
            if leader_epoch < self.leader_epoch:
                return int(ErrorCode.fenced_leader_epoch)
            if leader_epoch > self.leader_epoch:
                return int(ErrorCode.unknown_leader_epoch)
        return 0

    # ---- high watermark ---------------------------------------------------------------------
    def maybe_increment_high_watermark(self) -> bool:
        """HW = min log end offset over the ISR (the leader's own included)."""
        new_hw = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.broker_id:
                new_hw = min(new_hw, self.follower_end_offsets.get(replica, -1))
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    @property
    def last_stable_offset(self) -> int:
        # No transactions yet: every record below the HW is stable.
        return self.high_watermark

    def fetchable_end(self, isolation_level: int) -> int:
        return self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark

    # ---- produce --------------------------------------------------------------------------
    def append(self, record_sets: list[tuple[bytes, int, int]], leader_epoch: int, now_ms: int) -> list[AppendResult]:
        """Append each (records, acks, timeout_ms) set independently, in order."""
        results: list[AppendResult] = []
        for records, acks, _timeout_ms in record_sets:
            error = self.check_leader(leader_epoch)
            if error:
                # A stale edge view of leadership: the client must refresh metadata.
                results.append((int(ErrorCode.not_leader_or_follower), -1, -1, -1, None))
                continue
            if acks == -1 and len(self.isr) < self.min_insync_replicas:
                results.append((int(ErrorCode.not_enough_replicas), -1, -1, self.log.log_start_offset,
                                f"ISR size {len(self.isr)} < min.insync.replicas {self.min_insync_replicas}"))
                continue
            try:
                info = self.log.append_as_leader(records, self.leader_epoch, now_ms)
            except InvalidRecordsError as exc:
                results.append((exc.error_code, -1, -1, self.log.log_start_offset, str(exc)))
                continue
            results.append((0, info.first_offset, getattr(info, "log_append_time", -1),
                            self.log.log_start_offset, None))
        self.maybe_increment_high_watermark()
        return results

    # ---- fetch ------------------------------------------------------------------------------
    def read(self, fetch_offset: int, max_bytes: int, isolation_level: int, current_leader_epoch: int):
        """-> (error, high_watermark, last_stable_offset, log_start_offset, slices)"""
        error = self.check_leader(current_leader_epoch)
        hw, lso, start = self.high_watermark, self.last_stable_offset, self.log.log_start_offset
        if error:
            return error, hw, lso, start, []
        end = self.fetchable_end(isolation_level)
        if fetch_offset < start or fetch_offset > self.log.log_end_offset:
            return int(ErrorCode.offset_out_of_range), hw, lso, start, []
        if fetch_offset >= end:
            return 0, hw, lso, start, []
        try:
            slices = self.log.read(fetch_offset, max_bytes, end, min_one_batch=True)
        except OffsetOutOfRangeError:
            return int(ErrorCode.offset_out_of_range), hw, lso, start, []
        return 0, hw, lso, start, [(s.path, s.position, s.length) for s in slices]

    # ---- offsets ------------------------------------------------------------------------------
    def list_offsets(self, timestamp: int, isolation_level: int, current_leader_epoch: int):
        """-> (error, offset, timestamp, leader_epoch)"""
        error = self.check_leader(current_leader_epoch)
        if error:
            return error, -1, -1, -1
        end = self.fetchable_end(isolation_level)
        epochs = self.log.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = self.log.log_start_offset
            return 0, start, -1, self._epoch_for(start)
        if timestamp == LATEST_TIMESTAMP:
            return 0, end, -1, epochs.latest_epoch if epochs.latest_epoch is not None else -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return 0, -1, -1, -1  # no tiered storage: nothing is tiered
        if timestamp == MAX_TIMESTAMP:
            found = self.log.offset_of_max_timestamp()
        elif timestamp >= 0:
            found = self.log.offset_for_timestamp(timestamp)
        else:
            return int(ErrorCode.invalid_request), -1, -1, -1
        if found is None or found[0] >= end:
            return 0, -1, -1, -1
        offset, ts = found[0], found[1]
        return 0, offset, ts, self._epoch_for(offset)

    def _epoch_for(self, offset: int) -> int:
        epoch_of = getattr(self.log.leader_epoch_cache, "epoch_for_offset", None)
        if epoch_of is None:
            return self.leader_epoch
        epoch = epoch_of(offset)
        return -1 if epoch is None else epoch

    def state(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "is_leader": self.is_leader,
            "leader_epoch": self.leader_epoch, "isr": list(self.isr), "replicas": list(self.replicas),
            "high_watermark": self.high_watermark, "log_end_offset": self.log.log_end_offset,
            "log_start_offset": self.log.log_start_offset,
        }
