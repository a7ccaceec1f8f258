"""One partition replica's state and rules (Kafka's kafka.cluster.Partition),
without Ray: leadership and its epochs, the high watermark, appends, reads and
offset lookups over a storage.log.Log. The replica actor is a thin shell over it.
"""
from __future__ import annotations

import logging
from typing import Any

from core.error_codes import ErrorCode
from core.replica_messages import (AppendResult, CommittedReadRun, CommittedTail, DivergingEpoch, EpochEndOffset,
                                   FileSlice, FollowerFetchResult, ListOffsetsResult, PartitionProgress, ReadResult,
                                   ReadRun, failed_append)
from core.txn_messages import (ORIGIN_CLIENT, DescribeProducersResult, ProducerStateInfo, TxnMarker,
                               TxnMarkerResult)
from cluster.storage_faults import append_error_code
from storage.errors import InvalidRecordsError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from storage.log import Log
from storage.producer_state import build_end_txn_marker

log = logging.getLogger("raykafka.partition")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# (error, base_offset, log_append_time_ms, log_start_offset, error_message, last_offset, high_watermark)


class FollowerState:
    """What the leader knows of one follower (Kafka's Replica state)."""

    __slots__ = ("log_end_offset", "last_caught_up_ms", "last_fetch_ms", "last_fetch_leader_end_offset",
                 "log_start_offset")

    def __init__(self, now_ms: int, in_isr: bool):
        self.log_end_offset = -1
        # ISR members start caught up: they are given replica.lag.time.max.ms to fetch.
        self.last_caught_up_ms = now_ms if in_isr else 0
        self.last_fetch_ms = 0
        self.last_fetch_leader_end_offset = -1
        self.log_start_offset = -1


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
        self.followers: dict[int, FollowerState] = {}
        self.min_insync_replicas = min_insync_replicas
        # Version of the partition state znode, for conditional ISR writes.
        self.state_zk_version = -1
        # Start offset of the current leader epoch: a follower joins the ISR
        # only once it has reached it (Kafka's rule, so HW never goes back).
        self.leader_epoch_start_offset = 0
        # As a follower: whether its log end reached the leader's high
        # watermark at the last fetch (Kafka's PartitionFetchState lag; unknown,
        # so False, until the first answer). Throttling spares caught-up ones.
        self.follower_caught_up = False
        # As a leader woken from hibernation (issue 30): its followers are being woken by their
        # nodes' pools; one not heard from yet is not lagging, it is starting.
        self.waking_followers = False
        # A restarted replica must never expose more than it had committed.
        self.high_watermark = min(max(high_watermark, log_.log_start_offset), log_.log_end_offset)
        log_.producer_state.on_high_watermark_updated(self.high_watermark)

    # ---- leadership -----------------------------------------------------------------------
    def fence_controller(self, controller_epoch: int) -> ErrorCode:
        if controller_epoch < self.controller_epoch:
            return ErrorCode.stale_controller_epoch
        self.controller_epoch = controller_epoch
        return ErrorCode.none

    def make_leader(self, controller_epoch: int, leader_epoch: int, isr: list[int], replicas: list[int],
                    zk_version: int = -1, now_ms: int = 0) -> ErrorCode:
        error = self.fence_controller(controller_epoch)
        if error:
            return error
        if leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        self.leader_epoch = leader_epoch
        self.leader_id = self.broker_id
        self.is_leader = True
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.state_zk_version = zk_version
        if new_epoch:
            self.followers = {r: FollowerState(now_ms, r in isr) for r in replicas if r != self.broker_id}
            # New epoch starts at our log end: followers truncate to it (KIP-101).
            self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
            self.leader_epoch_start_offset = self.log.log_end_offset
        else:
            for r in replicas:
                if r != self.broker_id and r not in self.followers:
                    self.followers[r] = FollowerState(now_ms, r in isr)
        self.maybe_increment_high_watermark()
        return ErrorCode.none

    def make_follower(self, controller_epoch: int, leader_id: int, leader_epoch: int, isr: list[int],
                      replicas: list[int]) -> ErrorCode:
        error = self.fence_controller(controller_epoch)
        if error:
            return error
        if leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        self.is_leader = False
        self.leader_epoch = leader_epoch
        self.leader_id = leader_id
        self.isr = tuple(isr)
        self.replicas = tuple(replicas)
        self.followers = {}
        self.follower_caught_up = False
        return ErrorCode.none

    def check_leader(self, leader_epoch: int) -> ErrorCode:
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if leader_epoch >= 0:
            if leader_epoch < self.leader_epoch:
                return ErrorCode.fenced_leader_epoch
            if leader_epoch > self.leader_epoch:
                return ErrorCode.unknown_leader_epoch
        return ErrorCode.none

    # ---- high watermark ---------------------------------------------------------------------
    def maybe_increment_high_watermark(self) -> bool:
        """HW = min log end offset over the ISR (the leader's own included)."""
        new_hw = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.broker_id:
                follower = self.followers.get(replica)
                new_hw = min(new_hw, follower.log_end_offset if follower else -1)
        if new_hw > self.high_watermark:
            self._set_high_watermark(new_hw)
            return True
        return False

    def _set_high_watermark(self, hw: int) -> None:
        self.high_watermark = hw
        # Ended transactions whose markers are now replicated no longer hold the LSO.
        self.log.producer_state.on_high_watermark_updated(hw)

    # ---- replication: leader side -------------------------------------------------------------
    def fetch_for_follower(self, follower_id: int, fetch_offset: int, last_fetched_epoch: int,
                           current_leader_epoch: int, max_bytes: int, now_ms: int,
                           follower_log_start: int = -1, as_slices: bool = False) -> FollowerFetchResult:
        """A follower's fetch (the FETCH a Kafka follower sends, as an actor call).

        The fetch offset is the follower's log end offset; it moves the HW and
        may bring the follower back into the ISR (returned as `expand_isr`).
        ``as_slices``: answer with where the data lies instead of its bytes
        (a follower on this machine reads them itself)."""
        leo = self.log.log_end_offset
        error = self.check_leader(current_leader_epoch)
        if error == ErrorCode.none and follower_id not in self.followers:
            error = ErrorCode.not_leader_or_follower
        if error:
            return FollowerFetchResult(error, b"", self.high_watermark, self.log.log_start_offset, leo)
        # KIP-320: the follower's last epoch must agree with ours up to its fetch offset.
        if last_fetched_epoch >= 0:
            epoch, end = self.log.leader_epoch_cache.end_offset_for(last_fetched_epoch, leo)
            if epoch != last_fetched_epoch or end < fetch_offset:
                return FollowerFetchResult(ErrorCode.none, b"", self.high_watermark, self.log.log_start_offset, leo,
                                           DivergingEpoch(epoch, end))
        if fetch_offset > leo or fetch_offset < self.log.log_start_offset:
            return FollowerFetchResult(ErrorCode.offset_out_of_range, b"", self.high_watermark,
                                       self.log.log_start_offset, leo)
        follower = self.followers[follower_id]
        # Kafka's Replica.updateFetchState: caught up if it reached our LEO,
        # or the LEO we had at its previous fetch.
        if fetch_offset >= leo:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.last_fetch_leader_end_offset:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_end_offset = leo
        follower.last_fetch_ms = now_ms
        follower.log_end_offset = fetch_offset
        follower.log_start_offset = follower_log_start
        expand_isr = None
        if (follower_id not in self.isr and fetch_offset >= self.high_watermark
                and fetch_offset >= self.leader_epoch_start_offset):
            expand_isr = tuple(sorted(set(self.isr) | {follower_id}))
        hw_moved = self.maybe_increment_high_watermark()
        if fetch_offset >= leo:
            records, slices = b"", ()
        elif as_slices:
            records, slices = b"", tuple(self.file_slices(fetch_offset, max_bytes, leo)[0])
        else:
            records, slices = self.log.read_bytes(fetch_offset, max_bytes, None, min_one_batch=True), ()
        return FollowerFetchResult(ErrorCode.none, records, self.high_watermark, self.log.log_start_offset, leo, None,
                                   expand_isr, hw_moved, slices)

    def low_watermark(self) -> int:
        """Smallest log start offset over the replicas (DeleteRecords' answer)."""
        starts = [self.log.log_start_offset]
        starts += [f.log_start_offset for r, f in self.followers.items() if r in self.isr and f.log_start_offset >= 0]
        return min(starts)

    def out_of_sync_replicas(self, now_ms: int, lag_time_ms: int) -> list[int]:
        """ISR followers that have not caught up within replica.lag.time.max.ms."""
        return [r for r in self.isr if r != self.broker_id
                and now_ms - self.followers[r].last_caught_up_ms > lag_time_ms
                and not (self.waking_followers and self.followers[r].last_fetch_ms == 0)] if self.is_leader else []

    def followers_waking(self, waking: bool, now_ms: int) -> None:
        """A woken leader's followers are being woken (True) or have been told to fetch
        (False): from then on, those not heard from yet get replica.lag.time.max.ms to
        fetch, as at a leader change. Waking a set takes process starts, which on a
        loaded node can take longer than the lag time: no follower falls out of the ISR
        for having hibernated. The controller still drops a dead broker's replicas."""
        self.waking_followers = waking
        if not waking:
            for follower in self.followers.values():
                if follower.last_fetch_ms == 0:
                    follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)

    def followers_caught_up(self, now_ms: int, lag_time_ms: int) -> bool:
        """Whether the set may hibernate (issue 30, RF > 1): every ISR follower, and every
        follower still fetching (within replica.lag.time.max.ms), has fetched up to the log
        end, and no ISR follower's log start is short of ours (a DeleteRecords under way).
        A follower this leader has not heard from since it became leader is not caught up."""
        end, start = self.log.log_end_offset, self.log.log_start_offset
        for replica, follower in self.followers.items():
            in_isr = replica in self.isr
            if in_isr or now_ms - follower.last_fetch_ms <= lag_time_ms:
                if follower.log_end_offset != end:
                    return False
                if in_isr and 0 <= follower.log_start_offset < start:
                    return False
        return True

    def take_leader_high_watermark(self, high_watermark: int) -> None:
        """A follower told the leader's HW without a fetch (the set hibernates at HW = LEO)."""
        hw = min(high_watermark, self.log.log_end_offset)
        if not self.is_leader and hw > self.high_watermark:
            self._set_high_watermark(hw)

    def apply_isr(self, isr: tuple[int, ...], zk_version: int) -> bool:
        """The new ISR is committed (znode written): use it. Returns whether the HW moved."""
        self.isr = tuple(isr)
        self.state_zk_version = zk_version
        return self.maybe_increment_high_watermark()

    # ---- replication: follower side -------------------------------------------------------------
    def apply_fetched(self, result: FollowerFetchResult, records: bytes | None = None) -> int:
        """Append a leader's data answer and take its HW and log start.
        ``records``: the answer's data when it came as slices (read by the caller)."""
        end = self.append_as_follower(result.records if records is None else records, result.high_watermark,
                                      result.log_start_offset)
        self.follower_caught_up = end >= result.high_watermark
        return end

    def reconcile_with_leader(self, result: FollowerFetchResult) -> bool:
        """A leader's answer without data: truncate on a diverging epoch
        (KIP-320) or an offset out of the leader's range. Returns whether it
        was one of those (fetch again at once); False: an error to back off on."""
        if result.diverging is not None:
            before = self.log.log_end_offset
            after = self.truncate_for_divergence(*result.diverging)
            log.info("%s-%d truncated %d -> %d (diverging epoch %s)", self.topic, self.partition, before, after,
                     tuple(result.diverging))
            return True
        if result.error == ErrorCode.offset_out_of_range:
            self.truncate_for_out_of_range(result.log_end_offset, result.log_start_offset)
            return True
        return False

    def truncate_for_out_of_range(self, leader_end: int, leader_start: int) -> None:
        """Kafka's rules: ahead of the leader -> truncate to its end; behind its
        log start -> start over at its log start."""
        if self.log.log_end_offset > leader_end:
            self.log.truncate_to(leader_end)
        elif self.log.log_end_offset < leader_start:
            self.log.truncate_fully_and_start_at(leader_start)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    def append_as_follower(self, records: bytes, leader_high_watermark: int, leader_log_start: int) -> int:
        """Append what the leader sent; follower HW = min(own LEO, leader HW)."""
        if leader_log_start > self.log.log_end_offset:
            # The leader deleted everything we have (DeleteRecords/retention): start over there.
            self.log.truncate_fully_and_start_at(leader_log_start)
        if records:
            self.log.append_as_follower(records)
        if leader_log_start > self.log.log_start_offset:
            # Follow the leader's log start (DeleteRecords, retention).
            self.log.maybe_increment_log_start_offset(min(leader_log_start, self.log.log_end_offset),
                                                      self.log.log_end_offset)
        new_hw = min(self.log.log_end_offset, leader_high_watermark)
        if new_hw > self.high_watermark:
            self._set_high_watermark(new_hw)
        return self.log.log_end_offset

    def last_fetched_epoch(self) -> int:
        epoch = self.log.leader_epoch_cache.latest_epoch
        return -1 if epoch is None else epoch

    def truncate_for_divergence(self, epoch: int, end_offset: int) -> int:
        """KIP-320: truncate to the end of the last epoch both logs agree on."""
        target = self.log.log_end_offset if end_offset < 0 else min(end_offset, self.log.log_end_offset)
        if epoch < 0:
            # The leader knows nothing of our epochs: fall back to the HW.
            target = min(target, self.high_watermark)
        self.log.truncate_to(target)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        return self.log.log_end_offset

    def offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int):
        """OffsetForLeaderEpoch (API 23)."""
        error = self.check_leader(current_leader_epoch)
        if error:
            return EpochEndOffset(error, -1, -1)
        epoch, end = self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)
        return EpochEndOffset(ErrorCode.none, epoch, end)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the HW, or the first offset of the oldest transaction
        that is open or whose marker is not replicated yet, if lower."""
        first_unstable = self.log.producer_state.first_unstable_offset()
        hw = self.high_watermark
        return first_unstable if first_unstable is not None and first_unstable < hw else hw

    def fetchable_end(self, isolation_level: int) -> int:
        return self.last_stable_offset if isolation_level == READ_COMMITTED else self.high_watermark

    # ---- produce --------------------------------------------------------------------------
    def append(self, record_sets: list[tuple[bytes, int, int]], leader_epoch: int, now_ms: int,
               origin: str = ORIGIN_CLIENT) -> list[AppendResult]:
        """Append each (records, acks, timeout_ms) set independently, in order.
        ``origin``: Kafka's AppendOrigin (core.txn_messages.ORIGIN_*)."""
        results: list[AppendResult] = []
        for records, acks, _timeout_ms in record_sets:
            error = self.check_leader(leader_epoch)
            if error:
                # A stale edge view of leadership: the client must refresh metadata.
                results.append(failed_append(ErrorCode.not_leader_or_follower))
                continue
            if acks == -1 and len(self.isr) < self.min_insync_replicas:
                results.append(failed_append(
                    ErrorCode.not_enough_replicas, self.log.log_start_offset,
                    f"ISR size {len(self.isr)} < min.insync.replicas {self.min_insync_replicas}"))
                continue
            try:
                info = self.log.append_as_leader(records, self.leader_epoch, now_ms, origin=origin)
            except InvalidRecordsError as exc:
                results.append(failed_append(append_error_code(exc), self.log.log_start_offset, str(exc),
                                              record_errors=exc.record_errors))
                continue
            results.append(AppendResult(ErrorCode.none, info.first_offset, info.log_append_time, self.log.log_start_offset, None,
                                        info.last_offset, -1))
        self.maybe_increment_high_watermark()
        # The HW after this call rides along: acks=-1 needs no purgatory when it already passed.
        hw = self.high_watermark
        return [r._replace(high_watermark=hw) for r in results]

    def write_txn_markers(self, markers: list[TxnMarker], now_ms: int) -> list[TxnMarkerResult]:
        """Append a COMMIT/ABORT control batch per marker (the leader side of
        Kafka's WriteTxnMarkers, origin coordinator). The caller waits for
        the HW to pass each marker's offset (acks=all) before answering."""
        results = []
        for marker in markers:
            error = self.check_leader(-1)
            if not error and len(self.isr) < self.min_insync_replicas:
                error = ErrorCode.not_enough_replicas  # markers are written with acks=all
            if error:
                results.append(TxnMarkerResult(error, -1))
                continue
            batch = build_end_txn_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                         marker.committed, now_ms)
            try:
                info = self.log.append_as_leader(batch, self.leader_epoch, now_ms, from_client=False)
            except InvalidRecordsError as exc:
                log.warning("%s-%d: transaction marker for producer %d refused: %s", self.topic, self.partition,
                            marker.producer_id, exc)
                results.append(TxnMarkerResult(append_error_code(exc), -1))
                continue
            results.append(TxnMarkerResult(ErrorCode.none, info.last_offset))
        self.maybe_increment_high_watermark()
        return results

    def describe_producers(self) -> DescribeProducersResult:
        """The producers this leader tracks (Kafka's DescribeProducers)."""
        error = self.check_leader(-1)
        if error:
            return DescribeProducersResult(error, ())
        return DescribeProducersResult(ErrorCode.none, tuple(
            ProducerStateInfo(e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                              e.current_txn_first_offset)
            for e in self.log.producer_state.producers.values()))

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int):
        """(producer id, first offset) of the aborted transactions a
        read_committed fetch of ``[fetch_offset, upper_bound_offset)`` must skip."""
        return [(t.producer_id, t.first_offset)
                for t in self.log.collect_aborted_txns(fetch_offset, upper_bound_offset)]

    # ---- fetch ------------------------------------------------------------------------------
    def read(self, fetch_offset: int, max_bytes: int, isolation_level: int, current_leader_epoch: int):
        error, hw, lso, start, runs = self.read_run(fetch_offset, max_bytes, isolation_level,
                                                    current_leader_epoch, 1)
        return ReadResult(error, hw, lso, start, runs[0].slices if runs else [])

    def read_run(self, fetch_offset: int, max_bytes: int, isolation_level: int, current_leader_epoch: int,
                 count: int):
        """Up to ``count`` consecutive reads from ``fetch_offset``, each what
        :meth:`read` answers for the offset where the previous one ended.
        ReadResult's ``slices`` holds the runs (ReadRun, or CommittedReadRun
        for read_committed); the list is empty when nothing is readable at
        ``fetch_offset`` and stops at the fetchable end."""
        error = self.check_leader(current_leader_epoch)
        hw, lso, start = self.high_watermark, self.last_stable_offset, self.log.log_start_offset
        if error:
            return ReadResult(error, hw, lso, start, [])
        end = self.fetchable_end(isolation_level)
        if fetch_offset < start or fetch_offset > self.log.log_end_offset:
            return ReadResult(ErrorCode.offset_out_of_range, hw, lso, start, [])
        runs = []
        offset = fetch_offset
        while len(runs) < count and offset < end:
            try:
                slices, next_offset = self.file_slices(offset, max_bytes, end)
            except OffsetOutOfRangeError:
                if not runs:
                    return ReadResult(ErrorCode.offset_out_of_range, hw, lso, start, [])
                break
            if not slices:
                break
            if isolation_level == READ_COMMITTED:
                runs.append(CommittedReadRun(offset, slices, self.aborted_transactions(offset, next_offset)))
            else:
                runs.append(ReadRun(offset, slices))
            if next_offset <= offset:
                break
            offset = next_offset
        return ReadResult(ErrorCode.none, hw, lso, start, runs)

    def committed_tail(self, first: int) -> CommittedTail | None:
        """Where the data from ``first`` on lies, for the edge to answer tail
        fetches from, or None. Only when all of it is committed: data still
        waiting for followers reaches consumers through the replica, so the
        edge must not expect the next offset to come from its own appends."""
        hw = self.high_watermark
        if hw <= first or hw < self.log.log_end_offset or not self.is_leader:
            return None
        slices, next_offset = self.file_slices(first, 1 << 31, hw)
        if not slices:
            return None
        return CommittedTail(self.leader_epoch, hw, self.last_stable_offset, self.log.log_start_offset, first,
                             next_offset, slices, sum(s.length for s in slices))

    def file_slices(self, fetch_offset: int, max_bytes: int, end: int):
        """-> (FileSlices, next offset)"""
        found = self.log.read_with_inodes(fetch_offset, max_bytes, end, min_one_batch=True)
        # The inode (and first batch's base offset) let the reader detect a file
        # replaced at the same path (a cleaner swap) between this answer and its read.
        slices = [FileSlice(s.path, s.position, s.length, s.base_offset, ino) for s, ino in found]
        return slices, (found[-1][0].next_offset if found else fetch_offset)

    # ---- offsets ------------------------------------------------------------------------------
    def list_offsets(self, timestamp: int, isolation_level: int, current_leader_epoch: int):
        error = self.check_leader(current_leader_epoch)
        if error:
            return ListOffsetsResult(error, -1, -1, -1)
        end = self.fetchable_end(isolation_level)
        epochs = self.log.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = self.log.log_start_offset
            return ListOffsetsResult(ErrorCode.none, start, -1, self._epoch_for(start))
        if timestamp == LATEST_TIMESTAMP:
            return ListOffsetsResult(ErrorCode.none, end, -1, epochs.latest_epoch if epochs.latest_epoch is not None else -1)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return ListOffsetsResult(ErrorCode.none, -1, -1, -1)  # no tiered storage: nothing is tiered
        if timestamp == MAX_TIMESTAMP:
            found = self.log.offset_of_max_timestamp()
        elif timestamp >= 0:
            found = self.log.offset_for_timestamp(timestamp)
        else:
            return ListOffsetsResult(ErrorCode.invalid_request, -1, -1, -1)
        if found is None or found[0] >= end:
            return ListOffsetsResult(ErrorCode.none, -1, -1, -1)
        offset, ts = found[0], found[1]
        return ListOffsetsResult(ErrorCode.none, offset, ts, self._epoch_for(offset))

    def _epoch_for(self, offset: int) -> int:
        epoch_of = getattr(self.log.leader_epoch_cache, "epoch_for_offset", None)
        if epoch_of is None:
            return self.leader_epoch
        epoch = epoch_of(offset)
        return -1 if epoch is None else epoch

    def progress(self) -> PartitionProgress:
        """What this replica reports to its node's purgatory."""
        return PartitionProgress((self.topic, self.partition), self.high_watermark, self.last_stable_offset,
                                 len(self.isr), self.min_insync_replicas, self.is_leader, self.leader_epoch)

    def state(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "is_leader": self.is_leader,
            "leader_epoch": self.leader_epoch, "isr": list(self.isr), "replicas": list(self.replicas),
            "high_watermark": self.high_watermark, "log_end_offset": self.log.log_end_offset,
            "log_start_offset": self.log.log_start_offset,
            "size_bytes": self.log.size_in_bytes,  # the balancer's bytes left to move
            "min_insync_replicas": self.min_insync_replicas,  # UnderMinIsrPartitionCount (net/edge_metrics.py)
        }
