"""Kafka's TransactionMarkerChannelManager: getting a decided transaction's
COMMIT/ABORT markers written to every partition it touched, then its
CompleteCommit/CompleteAbort state written to ``__transaction_state``.

Markers go out per partition through the injected async
``write(topic, partition, markers: list[TxnMarker]) -> list[TxnMarkerResult]``
(the actor shell sends them to the partition's leader replica). Markers of
several transactions waiting for one partition travel in one call. A
partition's markers are retried until written:

* NONE: the partition is done for that transaction.
* NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  KAFKA_STORAGE_ERROR, a failed call, anything unexpected: back off, let the
  shell find the leader again (``write`` looks it up per call), retry.
* UNKNOWN_TOPIC_OR_PARTITION: dropped when the partition no longer exists
  (``partition_exists``: the topic was deleted), else retried.
* INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: a newer coordinator
  or producer epoch owns the transaction; this coordinator stops (Kafka's
  abortSending), nothing more is written for it.
* CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
  INVALID_REQUIRED_ACKS, UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION:
  can never succeed; logged and dropped, as Kafka treats them.

Once every partition is done the Complete state is appended, retried on
COORDINATOR_NOT_AVAILABLE; on NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
the partition moved and the new coordinator finishes the job after its load.
Everything stops for a ``__transaction_state`` partition when the coordinator
resigns it (``remove_markers_for_partition``).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional


from cluster.transactions.log_records import TransactionState
from cluster.transactions.metadata import TransactionMetadata, TxnTransitMetadata
from core.error_codes import ErrorCode
from core.txn_messages import TxnMarker, TxnMarkerResult

log = logging.getLogger("raykafka.transactions.markers")

WriteFn = Callable[[str, int, list[TxnMarker]], Awaitable[list[TxnMarkerResult]]]

RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 2.0
# Markers carried by one write call at most.
MAX_MARKERS_PER_CALL = 100

_RETRIABLE = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out, ErrorCode.not_enough_replicas,
                        ErrorCode.not_enough_replicas_after_append, ErrorCode.kafka_storage_error, ErrorCode.unknown_server_error,
                        ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.coordinator_load_in_progress})
_FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced, ErrorCode.producer_fenced})
_NEVER = frozenset({ErrorCode.corrupt_message, ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_required_acks,
                    ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})


class _Pending:
    """One transaction whose markers are under way."""

    __slots__ = ("transactional_id", "txn_partition", "coordinator_epoch", "committed", "metadata", "transit",
                 "remaining", "aborted", "done")

    def __init__(self, transactional_id: str, txn_partition: int, coordinator_epoch: int, committed: bool,
                 metadata: TransactionMetadata, transit: TxnTransitMetadata):
        self.transactional_id = transactional_id
        self.txn_partition = txn_partition
        self.coordinator_epoch = coordinator_epoch
        self.committed = committed
        self.metadata = metadata
        self.transit = transit
        self.remaining = set(metadata.topic_partitions)
        self.aborted = False
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()


class TransactionMarkerChannelManager:
    def __init__(self, state_manager, write: WriteFn,
                 partition_exists: Callable[[str, int], bool] = lambda _t, _p: False,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 backoff_s: float = RETRY_BACKOFF_S, backoff_max_s: float = RETRY_BACKOFF_MAX_S):
        self.state_manager = state_manager
        self._write = write
        self._partition_exists = partition_exists
        self._sleep = sleep
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        # destination (topic, partition) -> [(marker, pending transaction)] waiting to be written
        self._queues: dict[tuple[str, int], list[tuple[TxnMarker, _Pending]]] = {}
        self._senders: dict[tuple[str, int], asyncio.Task] = {}
        self._pending: dict[str, _Pending] = {}  # transactional id -> its markers under way
        self.counters: dict[str, int] = {"markers_written": 0, "marker_retries": 0, "markers_dropped": 0}

    # ---- what the coordinator calls ------------------------------------------------------------------
    def pending_transactional_ids(self) -> list[str]:
        return sorted(self._pending)

    def add_txn_markers_to_send(self, coordinator_epoch: int, committed: bool, metadata: TransactionMetadata,
                                transit: TxnTransitMetadata) -> asyncio.Future:
        """Send the markers of ``metadata`` (in PrepareCommit/PrepareAbort, its
        pending state the Complete one of ``transit``); -> a future set to the
        error of the Complete write (NONE when the transaction is complete)."""
        transactional_id = metadata.transactional_id
        pending = _Pending(transactional_id, self.state_manager.partition_for(transactional_id),
                           coordinator_epoch, committed, metadata, transit)
        self._pending[transactional_id] = pending
        marker = TxnMarker(metadata.producer_id, metadata.producer_epoch, coordinator_epoch, committed)
        if not pending.remaining:
            asyncio.get_running_loop().create_task(self._complete(pending))
        for destination in sorted(pending.remaining):
            self._queues.setdefault(destination, []).append((marker, pending))
            self._ensure_sender(destination)
        return pending.done

    def remove_markers_for_partition(self, txn_partition: int) -> None:
        """This coordinator no longer owns ``__transaction_state``-``txn_partition``."""
        for transactional_id, pending in list(self._pending.items()):
            if pending.txn_partition == txn_partition:
                self._abort(pending, ErrorCode.not_coordinator)

    # ---- sending ---------------------------------------------------------------------------------------
    def _ensure_sender(self, destination: tuple[str, int]) -> None:
        task = self._senders.get(destination)
        if task is None or task.done():
            self._senders[destination] = asyncio.get_running_loop().create_task(self._send(destination))

    async def _send(self, destination: tuple[str, int]) -> None:
        topic, partition = destination
        backoff = self.backoff_s
        try:
            while True:
                queue = [(m, p) for m, p in self._queues.get(destination, ()) if not p.aborted]
                if not queue:
                    self._queues.pop(destination, None)
                    return
                batch = queue[:MAX_MARKERS_PER_CALL]
                self._queues[destination] = queue[MAX_MARKERS_PER_CALL:]
                try:
                    results = await self._write(topic, partition, [m for m, _ in batch])
                    if len(results) != len(batch):
                        raise RuntimeError(f"{len(results)} results for {len(batch)} markers")
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the leader is gone or moving: retry
                    log.info("writing %d markers to %s-%d failed (%s); retrying", len(batch), topic, partition,
                             str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                    results = [TxnMarkerResult(ErrorCode.request_timed_out, -1)] * len(batch)
                retry = []
                for (marker, pending), result in zip(batch, results):
                    if pending.aborted:
                        continue
                    outcome = self._outcome(destination, pending, ErrorCode(result.error))
                    if outcome == "retry":
                        retry.append((marker, pending))
                    elif outcome == "done":
                        self._partition_done(pending, destination)
                if retry:
                    self.counters["marker_retries"] += len(retry)
                    self._queues[destination] = retry + self._queues.get(destination, [])
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, self.backoff_max_s)
                else:
                    backoff = self.backoff_s
        finally:
            if self._senders.get(destination) is asyncio.current_task():
                del self._senders[destination]
            if self._queues.get(destination):
                self._ensure_sender(destination)  # markers queued while this task was ending

    def _outcome(self, destination: tuple[str, int], pending: _Pending, error: ErrorCode) -> str:
        topic, partition = destination
        if error == ErrorCode.none:
            self.counters["markers_written"] += 1
            return "done"
        if error == ErrorCode.unknown_topic_or_partition:
            if self._partition_exists(topic, partition):
                return "retry"
            log.info("%s-%d no longer exists: dropping the marker of %s", topic, partition, pending.transactional_id)
            self.counters["markers_dropped"] += 1
            return "done"
        if error in _FENCED:
            log.warning("marker of %s on %s-%d answered %s: a newer coordinator or producer owns it; stopping",
                        pending.transactional_id, topic, partition, error.name)
            self._abort(pending, error)
            return "aborted"
        if error in _NEVER:
            log.error("marker of %s on %s-%d answered %s, which retrying cannot fix: dropped",
                      pending.transactional_id, topic, partition, error.name)
            self.counters["markers_dropped"] += 1
            return "done"
        if error not in _RETRIABLE:
            log.warning("marker of %s on %s-%d answered %s; retrying", pending.transactional_id, topic, partition,
                        error.name)
        return "retry"

    def _partition_done(self, pending: _Pending, destination: tuple[str, int]) -> None:
        pending.remaining.discard(destination)
        if pending.metadata.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            pending.metadata.remove_partition(destination)
        if not pending.remaining:
            asyncio.get_running_loop().create_task(self._complete(pending))

    def _abort(self, pending: _Pending, error: ErrorCode) -> None:
        pending.aborted = True
        if self._pending.get(pending.transactional_id) is pending:
            del self._pending[pending.transactional_id]
        if not pending.done.done():
            pending.done.set_result(error)

    # ---- the Complete state ------------------------------------------------------------------------------
    async def _complete(self, pending: _Pending) -> None:
        backoff = self.backoff_s
        error = ErrorCode.unknown_server_error
        try:
            while not pending.aborted:
                error, entry = self.state_manager.get(pending.transactional_id)
                if error != ErrorCode.none or entry is None or entry.coordinator_epoch != pending.coordinator_epoch \
                        or entry.metadata is not pending.metadata:
                    error = error if error != ErrorCode.none else ErrorCode.not_coordinator
                    log.info("%s: not writing %s (%s): the partition moved", pending.transactional_id,
                             pending.transit.txn_state.kafka_name, error.name)
                    break
                error = await self.state_manager.append_transaction(
                    pending.transactional_id, pending.coordinator_epoch, pending.transit,
                    retry_on_error=lambda e: e == ErrorCode.coordinator_not_available)
                if error != ErrorCode.coordinator_not_available:
                    if error == ErrorCode.none:
                        log.debug("%s: %s", pending.transactional_id, pending.transit.txn_state.kafka_name)
                    elif error not in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
                        log.error("%s: writing %s failed: %s", pending.transactional_id,
                                  pending.transit.txn_state.kafka_name, error.name)
                    break
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max_s)
        finally:
            if self._pending.get(pending.transactional_id) is pending:
                del self._pending[pending.transactional_id]
            if not pending.done.done():
                pending.done.set_result(error if not pending.aborted else ErrorCode.not_coordinator)

    async def close(self) -> None:
        for pending in list(self._pending.values()):
            self._abort(pending, ErrorCode.not_coordinator)
        tasks = list(self._senders.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
