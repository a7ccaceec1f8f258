"""The partition replica actor: one Ray actor per replica, named
`<topic>-<partition>@<broker id>`, owning that replica's log directory.

A thin shell: cluster.partition.Partition holds the rules, storage.log.Log the bytes,
storage.log_manager.LogManager the log dir, checkpoints and log duties' decisions. This module
adds what needs an event loop or I/O for the leader role: long-polled follower fetches, ISR
changes committed to ZooKeeper (actors/isr_writer.py), progress reports to the node's purgatory
(actors/replica_progress.py), the duty timer. The follower role is a composed
actors.follower.Follower (become_follower delegates to it).
Time comes from an injected core.clock.Clock.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time

import ray

from actors.follower import Follower, ReplicaHooks
from actors.isr_writer import IsrZkWriter
from actors.replica_progress import ProgressReporter
from actors.replica_timer import IDLE_AFTER_S, ChangeSignal, DutyTimer
from actors.shared_regions import MappedRegions
from cluster import replica_schedule as duties
from cluster.commit_timer import CommitTimer
from cluster.commit_waiters import CommitWaiters
from cluster.partition import Partition
from cluster.replica_fetcher import throttle_from_config
from cluster.replica_pool import hibernation_blocker
from core.error_codes import ErrorCode
from core.clock import SYSTEM_CLOCK, Clock
from core.gc_tuning import freeze_startup_heap
from core.local_calls import FollowUp, LocalCallServer
from core.naming import purgatory_actor_name
from core.pooled_replica import HibernateAnswer
from core.replica_messages import (AppendAnswer, AppendRequest, CommitNotice, DeleteRecordsResult,
                                   FollowerFetchResult, SharedAppendRequest, failed_append, last_uncommitted)
from core.txn_messages import DescribeProducersResult, TxnMarker, TxnMarkerResult
from storage.errors import OffsetOutOfRangeError
from storage.log import LogConfig
from storage.log_manager import LogManager

log = logging.getLogger("raykafka.replica")

# Bound on one follower fetch's wait and size (replica.fetch.wait.max.ms, replica.fetch.max.bytes).
MAX_FOLLOWER_WAIT_MS = 500
# Bound on a consumer fetch parked in a replica (clients ask for fetch.max.wait.ms,
# 500 by default); the edge's call timeout is this wait plus actor.call.timeout.ms.
MAX_CONSUMER_WAIT_MS = 60_000
# Bound on the consecutive reads of one read_run answer (its slices are a few
# tuples each; the bytes stay in the segment files).
MAX_READ_RUN = 16
# What the edge (and the node's group coordinators) may call over the direct
# channel: the per-request calls. Leadership, configuration and shutdown stay Ray calls.
LOCAL_CALL_METHODS = ("append", "write_txn_markers", "describe_producers", "append_shared", "read", "read_run",
                      "list_offsets", "offset_for_leader_epoch", "delete_records", "wait_committed",
                      # followers on this machine, whatever their Ray node (actors/follower.py)
                      "fetch_for_follower")


class ReplicaActor:
    def __init__(self, topic: str | None, partition: int, broker_id: int, log_dirs: list[str],
                 log_config: dict, min_insync_replicas: int = 1, zk_connect: str | None = None,
                 namespace: str = "raykafka", replica_config: dict | None = None, clock: Clock = SYSTEM_CLOCK):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.clock = clock
        # A spare (topic None): a started process with nothing open, kept by the node's replica
        # pool so that a wake adopts it (adopt()) instead of waiting for a process to start (issue 30).
        self._spare = topic is None
        self._closed = True
        self._spare_purgatory = None  # looked up while a spare (is_spare), handed to the reporter
        self._spare_names = (broker_id, namespace)
        if not self._spare:
            self._open(topic, partition, broker_id, log_dirs, log_config, min_insync_replicas, zk_connect,
                       namespace, replica_config)
        # The process's start-up heap out of every later full collection (core/gc_tuning.py);
        # an adopting spare freezes again what its log added.
        freeze_startup_heap()

    async def adopt(self, spec, request, zk_connect: str | None, namespace: str, leader_handle=None) -> int:
        """A spare becomes the replica of `spec` (cluster/controller/channel.ReplicaSpec) and takes
        `request` (its LeaderAndIsr): it leads, or follows `leader_handle` (its leader's live
        actor; None while that hibernates); -> the LeaderAndIsr's error code. The log opens on
        this loop: a spare serves nothing else before this call answers, and the constructor of
        a replica started cold does the same work."""
        if not self._spare:
            raise RuntimeError(f"{self.topic}-{self.partition_index} is no spare")
        self._spare = False
        self._open(spec.topic, spec.partition, spec.broker_id, spec.log_dirs, spec.log_config,
                   spec.min_insync_replicas, zk_connect, namespace, spec.replica_config)
        freeze_startup_heap()
        if request.leader != spec.broker_id:
            return await self.become_follower(request.controller_epoch, request.leader, request.leader_epoch,
                                              request.isr, request.replicas, leader_handle)
        return await self.become_leader(request.controller_epoch, request.leader_epoch, request.isr,
                                        request.replicas, request.zk_version)

    async def is_spare(self) -> bool:
        """Answers once the process and constructor are up (the pool's readiness check); a
        spare looks up its node's purgatory meanwhile, so that its first report after
        adopting does not block its loop on Ray's GCS."""
        if self._spare and self._spare_purgatory is None:
            broker_id, namespace = self._spare_names

            def lookup():
                try:
                    return ray.get_actor(purgatory_actor_name(broker_id), namespace=namespace)
                except ValueError:
                    return None

            self._spare_purgatory = await asyncio.get_running_loop().run_in_executor(None, lookup)
        return self._spare

    def _open(self, topic: str, partition: int, broker_id: int, log_dirs: list[str], log_config: dict,
              min_insync_replicas: int, zk_connect: str | None, namespace: str, replica_config: dict | None) -> None:
        """What a replica opens: its log, partition state and helpers (the constructor's work)."""
        clock = self.clock
        self.topic = topic
        self.partition_index = partition
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.namespace = namespace
        self.replica_config = config = {
            "replica.lag.time.max.ms": 30000, "replica.fetch.max.bytes": 1048576,
            "replica.fetch.wait.max.ms": MAX_FOLLOWER_WAIT_MS, "replica.fetch.backoff.ms": 1000,
            "actor.call.timeout.ms": 30000, "local.calls": True, "log.retention.check.interval.ms": 300000,
            "log.cleaner.backoff.ms": 15000, "log.cleaner.dedupe.buffer.size": 128 * 1024 * 1024,
            "log.cleaner.enable": True, **(replica_config or {})}
        self.logs = LogManager(log_dirs, topic, partition, config, clock)
        self.log_dir = self.logs.log_dir
        self.log, checkpointed_hw = self.logs.open_log(log_config)
        self.partition = self.logs.partition = Partition(topic, partition, broker_id, self.log, checkpointed_hw,
                                                         min_insync_replicas)
        # Long-polled calls wait for the next change (actors/replica_timer.py).
        self._changes = ChangeSignal()
        self._wake_waiters, self._wait_for_change = self._changes.wake, self._changes.wait
        self._background: list[asyncio.Task] = []
        self._closed = False
        self._isr_writer = None if zk_connect is None else IsrZkWriter(
            zk_connect, topic, partition, broker_id, config.get("zookeeper.session.timeout.ms", 18000))
        self._isr_lock = asyncio.Lock()
        self._progress = ProgressReporter(f"{topic}-{partition}", broker_id, namespace, config["local.calls"],
                                          self.call_timeout_s, self.partition.progress, self._spare_purgatory)
        self._regions = MappedRegions()
        self._local_calls: LocalCallServer | None = None  # for the edge, opened on first ask
        # Profile counters (bench.replication --profile): the leader's side of
        # replication (fetches served, bytes, empty answers) and the follower's.
        self.counters = {"append_calls": 0, "append_sets": 0, "append_bytes": 0, "follower_fetches": 0,
                         "follower_fetch_bytes": 0, "follower_fetch_empty": 0, "fetches_sent": 0,
                         "fetched_bytes": 0, "fetched_as_slices": 0, "commit_waits": 0, "commit_notices": 0,
                         "apply_total_ms": 0.0, "apply_count": 0}
        self._commit_timer = CommitTimer()
        # acks=all produces waiting here for the HW (cluster/commit_waiters.py).
        self._commit_waiters = CommitWaiters()
        # One timer for every periodic duty, and idleness (actors/replica_timer.py).
        self._timer = DutyTimer(f"{topic}-{partition}", clock,
                                config.get("replica.idle.after.ms", IDLE_AFTER_S * 1000) / 1000, self._plan,
                                self._run_duty, self._became_idle, lambda: self._closed)
        self._schedule, self._idle = self._timer.schedule, self._timer.idle
        # Re-plan now: leadership or config changed, traffic after an idle period.
        self._poke_timer = self._timer.poke
        # Traffic (hot path): a flag, plus a switch back to normal priority once per idle period.
        self._traffic = self._idle.touch
        # Replication quotas for both roles (the leader's in fetch_for_follower, the
        # follower's fetcher); changes arrive via update_replication_throttle.
        self.replication_throttle = throttle_from_config(partition, broker_id, config, f"{topic}-{partition}")
        self.follower = Follower(topic, partition, broker_id, namespace, self.partition, config, self.call_timeout_s,
                                 self.counters, ReplicaHooks(traffic=self._traffic, poke_timer=self._poke_timer,
                                                             after_change=self._after_change,
                                                             closed=lambda: self._closed))

    @property
    def _io_thread(self):
        return self.logs.io_thread

    async def _on_io_thread(self, job):
        return await asyncio.get_running_loop().run_in_executor(self.logs.io_executor(), job)

    # ---- event-loop helpers -------------------------------------------------------------------
    def _ensure_background(self) -> None:
        if not self._background:
            self._background = [asyncio.get_running_loop().create_task(self._timer.run())]

    @property
    def call_timeout_s(self) -> float:
        return self.replica_config["actor.call.timeout.ms"] / 1000

    def _plan(self, schedule, now: float) -> None:
        """Which duties this replica has right now; cheap, run before every sleep."""
        p = self.partition
        self.logs.plan(schedule, now, self._idle.idle)
        # Kafka's isr-expiration task; a leader with no other replica has nobody to drop.
        schedule.set(duties.ISR, p.is_leader and len(p.replicas) > 1,
                     max(0.05, self.replica_config["replica.lag.time.max.ms"] / 2000), now)

    async def _became_idle(self) -> None:
        # An idle replica keeps no ZooKeeper session (kazoo's threads and
        # pings): the next ISR change opens one again.
        if self._isr_writer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._isr_writer.close_session)

    async def _run_duty(self, duty: str) -> None:
        if duty == duties.CHECKPOINT:
            if self.logs.checkpoint_pending():  # unchanged values: no hop to the I/O thread
                await self._write_checkpoints_off_loop()
            self.logs.flush_if_due()
        elif duty == duties.ISR:
            await self._check_isr()
        elif duty == duties.RETENTION:
            await self.run_retention()
        elif duty == duties.CLEAN:
            await asyncio.get_running_loop().run_in_executor(None, self.logs.clean_once)

    async def run_retention(self) -> dict:
        """LogManager's retention pass; unlinks run on the I/O thread, as Kafka's scheduler does."""
        now = self.clock.now_ms()
        result = self.logs.apply_retention(now)
        unlink = self.logs.unlink_job(now)
        if unlink is not None:
            await self._on_io_thread(unlink)
        if result.log_start_changed:
            await self._write_checkpoints_off_loop()
            self._after_change(True)
        return {"deleted_segments": result.deleted_segments, "log_start_offset": result.log_start_offset}

    async def clean_now(self) -> dict | None:
        """Compact now if the log is cleanable (tests, operators)."""
        result = await asyncio.get_running_loop().run_in_executor(None, self.logs.clean_once)
        return None if result is None else {"end_offset": result.end_offset, "records_read": result.records_read,
                                             "records_kept": result.records_kept}

    async def update_log_config(self, log_config: dict, min_insync_replicas: int) -> None:
        """A topic config changed (AlterConfigs): applies at once, no restart."""
        self.log.config = LogConfig(**log_config)
        self.partition.min_insync_replicas = min_insync_replicas
        self._poke_timer()  # cleanup.policy decides whether the cleaner is scheduled

    async def delete_records(self, offset: int, current_leader_epoch: int,
                             timeout_ms: int = 30000) -> DeleteRecordsResult:
        """DeleteRecords on the leader. Waits (bounded) until every in-sync follower
        moved its log start too, as learnt from its next fetch (Kafka's DelayedDeleteRecords)."""
        self._traffic()
        p = self.partition
        error = p.check_leader(current_leader_epoch)
        if error:
            return DeleteRecordsResult(error, -1)
        try:
            target = self.log.delete_records(offset, p.high_watermark)
        except OffsetOutOfRangeError:
            return DeleteRecordsResult(ErrorCode.offset_out_of_range, -1)
        await self._write_checkpoints_off_loop()
        self._after_change(True)
        deadline = self.clock.monotonic() + timeout_ms / 1000
        while p.low_watermark() < target:
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0 or not p.is_leader:
                return DeleteRecordsResult(ErrorCode.request_timed_out, p.low_watermark())
            await self._wait_for_change(remaining)
        return DeleteRecordsResult(ErrorCode.none, p.low_watermark())

    async def _write_checkpoints_off_loop(self) -> None:
        """The values as of now, written on the I/O thread (after any flush queued there)."""
        if not self._closed:  # stopping: close/stop_replica write the final values themselves
            await self._on_io_thread(self.logs.checkpoint_job())

    # ---- progress reports to the node's purgatory ------------------------------------------------
    def _report_progress(self, force: bool = False) -> None:
        self._progress.report(force)

    def _after_change(self, hw_moved: bool = True, leadership: bool = False) -> None:
        if leadership:
            self._commit_timer.reset_pending()
            if not self.partition.is_leader or self._closed:
                self._commit_waiters.fail_all(ErrorCode.not_leader_or_follower)
        if hw_moved:
            self._complete_commits()
        self._wake_waiters()
        if hw_moved or leadership:
            self._report_progress(force=leadership)

    def _complete_commits(self) -> None:
        """The HW may have moved: answer the acks=all waits it passed, in this same step."""
        p = self.partition
        if p.is_leader:
            self._commit_timer.committed(p.high_watermark, self.clock.monotonic())
            self._commit_waiters.on_high_watermark(p.high_watermark, len(p.isr), p.min_insync_replicas)

    async def wait_committed(self, offset: int, leader_epoch: int, timeout_ms: int) -> ErrorCode:
        """An acks=all produce's wait (Kafka's DelayedProduce, for this partition): 0 once the HW reaches
        ``offset`` with at least min.insync.replicas in the ISR, NOT_ENOUGH_REPLICAS_AFTER_APPEND if fewer,
        NOT_LEADER_OR_FOLLOWER if this replica does not lead ``leader_epoch`` (any more), REQUEST_TIMED_OUT
        after ``timeout_ms``. The edge asks after an append whose answer's HW was short of its records
        (unless the append call brought a CommitNotice: append_shared)."""
        self.counters["commit_waits"] += 1
        return await self._await_commit(offset, leader_epoch, timeout_ms)

    async def _await_commit(self, offset: int, leader_epoch: int, timeout_ms: int) -> ErrorCode:
        p = self.partition
        if self._closed or p.check_leader(leader_epoch):
            return ErrorCode.not_leader_or_follower
        if p.high_watermark >= offset:
            return ErrorCode.none if len(p.isr) >= p.min_insync_replicas else ErrorCode.not_enough_replicas_after_append
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._commit_waiters.add(offset, future):
            return ErrorCode.request_timed_out
        expiry = loop.call_later(max(0, timeout_ms) / 1000, _expire, future)
        try:
            return await future
        finally:
            expiry.cancel()
            if future.cancelled() and len(self._commit_waiters) > 1024:
                self._commit_waiters.prune()

    async def report_progress(self) -> None:
        """The purgatory has operations waiting on this partition again."""
        self._progress.interested = True
        self._report_progress(force=True)

    # ---- ISR changes: committed to ZooKeeper before they take effect ------------------------------
    async def _alter_isr(self, new_isr: tuple[int, ...]) -> bool:
        if self._isr_writer is None:
            return False
        async with self._isr_lock:
            p = self.partition
            if not p.is_leader or tuple(new_isr) == tuple(p.isr):
                return False
            epoch = p.leader_epoch
            try:
                version = await asyncio.get_running_loop().run_in_executor(
                    None, self._isr_writer.write, list(new_isr), epoch, p.state_zk_version, p.controller_epoch)
            except Exception as exc:
                log.warning("ISR update of %s-%d failed: %s", self.topic, self.partition_index, exc)
                return False
            if version is None or p.leader_epoch != epoch:
                return False
            log.info("%s-%d ISR %s -> %s", self.topic, self.partition_index, list(p.isr), list(new_isr))
            hw_moved = p.apply_isr(tuple(new_isr), version)
            self._after_change(True)
            return hw_moved

    async def _check_isr(self) -> None:
        """Shrink the ISR of followers lagging more than replica.lag.time.max.ms."""
        p = self.partition
        lagging = p.out_of_sync_replicas(self.clock.now_ms(), self.replica_config["replica.lag.time.max.ms"])
        if lagging:
            await self._alter_isr(tuple(r for r in p.isr if r not in lagging))

    # ---- controller -> replica ---------------------------------------------------------------
    async def become_leader(self, controller_epoch: int, leader_epoch: int, isr: list[int],
                            replicas: list[int], zk_version: int = -1) -> int:
        self._ensure_background()
        self._traffic()  # clients follow a new leader at once: back to normal priority
        self._poke_timer()  # the ISR check depends on the replica set
        p, now = self.partition, self.clock.now_ms()
        if controller_epoch < p.controller_epoch or leader_epoch < p.leader_epoch:
            # A stale request (a deposed controller, or a reordered one) changes nothing,
            # not even this replica's fetching as a follower.
            return p.make_leader(controller_epoch, leader_epoch, isr, replicas, zk_version, now)
        self.follower.stop()
        error = p.make_leader(controller_epoch, leader_epoch, isr, replicas, zk_version, now)
        if error == ErrorCode.none:
            log.info("%s-%d is leader, epoch %d, ISR %s, HW %d, LEO %d", self.topic, self.partition_index,
                     leader_epoch, isr, p.high_watermark, self.log.log_end_offset)
        self._after_change(True, leadership=True)
        return error

    async def become_follower(self, controller_epoch: int, leader_id: int, leader_epoch: int,
                              isr: list[int], replicas: list[int], leader_handle=None) -> int:
        """The follower role (actors/follower.py), fetching from ``leader_handle``."""
        self._ensure_background()
        return self.follower.become_follower(controller_epoch, leader_id, leader_epoch, isr, replicas, leader_handle,
                                             self.replication_throttle)

    async def update_replication_throttle(self, leader_rate: int | None, follower_rate: int | None,
                                          leader_throttled_replicas: str | None = None,
                                          follower_throttled_replicas: str | None = None) -> ErrorCode:
        """Replication quotas changed: the broker's leader/follower.replication.throttled.rate
        (None keeps one) and, when given, the topic's two throttled-replica lists
        (the keyword arguments cluster.log_config.throttled_replicas_for returns).
        Returns 0, or INVALID_CONFIG for a malformed list (nothing is changed then)."""
        try:
            self.replication_throttle.update(leader_rate, follower_rate, leader_throttled_replicas,
                                             follower_throttled_replicas)
        except ValueError as exc:
            log.warning("%s-%d: replication throttle not changed: %s", self.topic, self.partition_index, exc)
            return ErrorCode.invalid_config
        return ErrorCode.none

    async def stop_replica(self, controller_epoch: int, delete: bool) -> ErrorCode:
        error = self.partition.fence_controller(controller_epoch)
        if error:
            return error
        self._closed = True
        self._poke_timer()
        self._close_local_calls()
        self.follower.stop()
        self.partition.is_leader = False
        self._after_change(True, leadership=True)
        if delete:
            self.logs.delete()
        else:
            self.logs.close()
        return ErrorCode.none

    async def close(self) -> None:
        """Clean shutdown: flush, checkpoint, close files."""
        if self._spare:
            return
        self._commit_waiters.fail_all(ErrorCode.not_leader_or_follower)
        self._close_local_calls()
        if not self._closed:
            self._closed = True
            self._poke_timer()
            self.follower.stop()
            self.logs.close()
        if self._isr_writer is not None:
            self._isr_writer.close_session()

    async def hibernate(self, replicated: bool = False) -> HibernateAnswer:
        """The node's replica pool found this replica idle (issue 30): flush,
        checkpoint and close unless something holds it live; the pool then
        ends the process and keeps its LeaderAndIsr for the next wake.
        ``replicated``: an RF > 1 leader closes only with HW = LEO and every
        follower there (its pool then hibernates them at that HW and LEO).
        Nothing awaits between the checks and the close: no append slips in."""
        p = self.partition
        is_leader = p.is_leader and not self._closed
        behind = is_leader and not p.followers_caught_up(self.clock.now_ms(),
                                                         self.replica_config["replica.lag.time.max.ms"])
        fetching = self.follower.fetching
        blocker = hibernation_blocker(self.topic, is_leader, len(p.replicas),
                                      p.high_watermark, self.log.log_end_offset,
                                      self.log.producer_state.first_unstable_offset() is not None,
                                      replicated, behind, fetching)
        if blocker:
            return HibernateAnswer(False, blocker)
        answer = HibernateAnswer(True, "", p.leader_epoch, p.high_watermark, self.log.log_end_offset)
        await self.close()
        return answer

    async def followers_waking(self, waking: bool) -> None:
        """The pool that woke this leader is waking its followers (True), or has (False)."""
        self.partition.followers_waking(waking, self.clock.now_ms())

    async def hibernate_follower(self, leader_epoch: int, high_watermark: int, log_end_offset: int) -> HibernateAnswer:
        """The leader of this replica's set closed for hibernation at ``log_end_offset`` (= its
        HW): close too if this follower holds exactly that log at that epoch, taking the HW."""
        if self._closed:
            return HibernateAnswer(True)
        answer = self.follower.hibernate_answer(leader_epoch, high_watermark, log_end_offset)
        if answer.ok:
            await self.close()
        return answer

    async def state(self) -> dict:
        return {**self.partition.state(), **self.counters, **self._commit_timer.stats(),
                "progress_reports": self._progress.reports, "pid": os.getpid(), "cpu_s": time.process_time()}

    # ---- edge -> leader ---------------------------------------------------------------------------
    def _close_local_calls(self) -> None:
        # The edge's pending calls fail as if the actor had gone (NOT_LEADER_OR_FOLLOWER).
        self._progress.close()
        if self._local_calls is not None:
            self._local_calls.close()
            self._local_calls = None

    async def local_call_endpoint(self, scope: str = "node"):
        """(node id, socket address, token, name, methods) of the direct-call socket for the edge on
        this node (core/local_channels.py; served as Ray calls would be, on this event loop), or None once closed.
        Scope "host": (host id, ...) for followers on this machine (core.local_calls.current_host_id)."""
        if self._closed:
            return None
        if self._local_calls is None:
            self._local_calls = LocalCallServer.serving(f"{self.topic}-{self.partition_index}@{self.broker_id}",
                                                        self, LOCAL_CALL_METHODS)
        return await self._local_calls.endpoint(scope)

    async def append(self, request: AppendRequest) -> AppendAnswer:
        """Append the request's record sets -> an AppendResult per set (AppendAnswer.results). ``origin``:
        Kafka's AppendOrigin (coordinators pass ORIGIN_COORDINATOR: no producer sequence checks). With
        ``tail``, also the committed tail for the edge to answer tail fetches from (net/fetch_local_tail.py;
        None: not all committed yet)."""
        if self._closed:
            return AppendAnswer([failed_append(ErrorCode.not_leader_or_follower)] * len(request.records))
        self._ensure_background()
        self._traffic()
        counters = self.counters
        counters["append_calls"] += 1
        counters["append_sets"] += len(request.records)
        counters["append_bytes"] += sum(map(len, request.records))
        before = self.partition.high_watermark
        leo_before = self.log.log_end_offset
        results = self.partition.append(request.record_sets(), request.leader_epoch, self.clock.now_ms(),
                                        request.origin)
        hw = self.partition.high_watermark
        if self.log.log_end_offset != leo_before:
            if hw < self.log.log_end_offset:
                self._commit_timer.appended(self.log.log_end_offset, self.clock.monotonic())
            self._wake_waiters()  # followers long-polling for data
        if hw != before:
            self._complete_commits()
            self._report_progress()
        return AppendAnswer(results, self.partition.committed_tail(leo_before) if request.tail else None)

    async def write_txn_markers(self, markers: list[TxnMarker], timeout_ms: int = 30000) -> list[TxnMarkerResult]:
        """WriteTxnMarkers (the transaction coordinator's call, or the wire API's): a COMMIT/ABORT control
        batch per marker, answered once the HW passed it (acks=all), or REQUEST_TIMED_OUT / NOT_LEADER_OR_FOLLOWER."""
        if self._closed:
            return [TxnMarkerResult(ErrorCode.not_leader_or_follower, -1)] * len(markers)
        self._ensure_background()
        self._traffic()
        p = self.partition
        before = p.high_watermark
        results = p.write_txn_markers(list(markers), self.clock.now_ms())
        if any(r.error == ErrorCode.none for r in results):
            self._wake_waiters()  # followers fetch the markers; read_committed fetches may move on
        if p.high_watermark != before:
            self._complete_commits()
            self._report_progress()
        need = max((r.offset + 1 for r in results if r.error == ErrorCode.none), default=-1)
        deadline = self.clock.monotonic() + max(0, timeout_ms) / 1000
        while p.high_watermark < need:
            remaining = deadline - self.clock.monotonic()
            error = ErrorCode.not_leader_or_follower if self._closed or not p.is_leader else \
                ErrorCode.request_timed_out if remaining <= 0 else ErrorCode.none
            if error:
                return [TxnMarkerResult(error, -1) if r.error == ErrorCode.none else r for r in results]
            await self._wait_for_change(remaining)
        return results

    async def describe_producers(self) -> DescribeProducersResult:
        return self.partition.describe_producers()

    async def append_shared(self, request: SharedAppendRequest) -> AppendAnswer | None:
        """append() with the record sets in the edge's shared-memory region
        (same node): the call carries offsets, not bytes. None if the region
        cannot be mapped here, so the edge falls back to append()."""
        buf = self._regions.buffer(request.region_path)
        if buf is None:
            return None
        # No copy out of the region: the log stamps offsets and leader epochs
        # into these bytes in place and writes them straight from the mapping.
        # The edge keeps the space reserved until this call answers, and
        # append() has no await, so no other call can unmap the region meanwhile.
        records = [buf[offset:offset + length] for offset, length in zip(request.offsets, request.lengths)]
        answer = await self.append(AppendRequest(records, request.acks, request.timeouts_ms, request.leader_epoch,
                                                 request.tail))
        if request.commit_notice:
            offset = last_uncommitted(answer.results, request.acks)
            if offset is not None:
                timeout_ms = max(t for t, a in zip(request.timeouts_ms, request.acks) if a == -1)
                self.counters["commit_notices"] += 1
                return FollowUp(answer, self._commit_notice(offset, request.leader_epoch, timeout_ms))
        return answer

    async def _commit_notice(self, offset: int, leader_epoch: int, timeout_ms: int) -> CommitNotice:
        """The second part of an acks=all append over the edge's channel: what wait_committed would answer."""
        error = await self._await_commit(offset, leader_epoch, timeout_ms)
        return CommitNotice(error, self.partition.high_watermark)

    async def read(self, fetch_offset: int, max_bytes: int, isolation_level: int, current_leader_epoch: int,
                   min_bytes: int = 0, max_wait_ms: int = 0):
        """A consumer's read: file slices up to the fetchable end. With max_wait_ms > 0 it is a DelayedFetch
        of one partition held here, at the data, until min_bytes are readable (or an error, a leadership
        change, expiry): the edge parks single-partition fetches here, saving the purgatory's two hops."""
        result = await self.read_run(fetch_offset, max_bytes, isolation_level, current_leader_epoch, min_bytes,
                                     max_wait_ms, 1)
        return result._replace(slices=result.slices[0].slices if result.slices else [])

    async def read_run(self, fetch_offset: int, max_bytes: int, isolation_level: int, current_leader_epoch: int,
                       min_bytes: int = 0, max_wait_ms: int = 0, count: int = 1):
        """:meth:`read` with up to ``count`` consecutive reads (Partition.read_run), waiting on the first: the
        edge serves a catching-up consumer's next fetches from them without a call each (net/fetch_read_ahead.py)."""
        p = self.partition
        count = max(1, min(count, MAX_READ_RUN))
        result = p.read_run(fetch_offset, max_bytes, isolation_level, current_leader_epoch, count)
        if result.slices:
            # Data served is traffic; a consumer long-polling an idle
            # partition is not (its answer comes on the append, which is).
            self._traffic()
        if max_wait_ms <= 0:
            return result
        deadline = self.clock.monotonic() + min(max_wait_ms, MAX_CONSUMER_WAIT_MS) / 1000
        while True:
            runs = result.slices
            if result.error or self._closed or (runs and sum(s.length for s in runs[0].slices) >= max(min_bytes, 1)):
                return result
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return result
            await self._wait_for_change(remaining)
            result = p.read_run(fetch_offset, max_bytes, isolation_level, current_leader_epoch, count)

    async def list_offsets(self, timestamp: int, isolation_level: int, current_leader_epoch: int):
        self._traffic()
        return self.partition.list_offsets(timestamp, isolation_level, current_leader_epoch)

    async def offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int):
        return self.partition.offset_for_leader_epoch(current_leader_epoch, leader_epoch)

    # ---- follower -> leader ---------------------------------------------------------------------------
    async def fetch_for_follower(self, follower_id: int, fetch_offset: int, last_fetched_epoch: int,
                                 current_leader_epoch: int, max_bytes: int, max_wait_ms: int,
                                 follower_log_start: int = -1, as_slices: bool = False) -> FollowerFetchResult:
        """A follower's long-polled fetch: waits (bounded) for data beyond its log end.
        ``as_slices``: the follower shares this machine and reads the data from the answer's file slices.

        Replication quota (KIP-73): while this leader replica is throttled and the
        leader quota is exceeded, a follower outside the ISR gets no records and
        its fetch waits as if there were none; bytes served count toward the quota."""
        self._ensure_background()
        deadline = self.clock.monotonic() + min(max_wait_ms, MAX_FOLLOWER_WAIT_MS * 4) / 1000
        p = self.partition
        throttle = self.replication_throttle
        while True:
            # Kafka decides on the ISR as it was before this fetch may expand it.
            follower_in_isr = follower_id in p.isr
            before_low = p.low_watermark()
            result = p.fetch_for_follower(follower_id, fetch_offset, last_fetched_epoch, current_leader_epoch,
                                          max_bytes, self.clock.now_ms(), follower_log_start, as_slices)
            size = result.data_size
            if result.hw_moved:
                self._after_change(True)
            elif p.low_watermark() != before_low:
                self._wake_waiters()  # a DeleteRecords may be waiting on followers
            if result.expand_isr is not None:
                await self._alter_isr(result.expand_isr)
                result = result._replace(high_watermark=p.high_watermark)
            if size or result.expand_isr is not None:
                # Replicated data is traffic; an idle follower's empty polls are not.
                self._traffic()
            held_back = size > 0 and throttle.leader_should_hold_back(follower_in_isr)
            if held_back:
                result, size = result._replace(records=b"", slices=()), 0
            remaining = deadline - self.clock.monotonic()
            if result.error or size or result.diverging is not None or remaining <= 0 or self._closed:
                throttle.record_leader(size)
                counters = self.counters
                counters["follower_fetches"] += 1
                counters["follower_fetch_bytes"] += size
                if not size:
                    counters["follower_fetch_empty"] += 1
                elif p.is_leader:
                    # Profile: when the appended data left for a follower (an answer
                    # cut at max_bytes is counted only as far as its first offset).
                    self._commit_timer.served(result.log_end_offset if size < max_bytes else fetch_offset + 1,
                                              self.clock.monotonic())
                return result
            if held_back:
                # Appends cannot lift the quota, only time can: wait for it rather than for data.
                await asyncio.sleep(min(remaining, max(0.01, throttle.leader_quota.throttle_time_ms() / 1000)))
                continue
            await self._wait_for_change(remaining)


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(ErrorCode.request_timed_out)


ReplicaActorRemote = ray.remote(ReplicaActor)
