"""Kafka's TransactionCoordinator: the requests of transactional producers,
over a ``TransactionStateManager`` (state and its log), a
``TransactionMarkerChannelManager`` (markers) and a producer id source.

Plain asyncio, no Ray: the actor shell (actors/transaction_coordinator.py)
drives one instance per ``__transaction_state`` partition; tests drive it with
a fake append, a fake marker writer and a fake clock.

Error codes are Kafka's coordinator answers; the wire handlers turn
PRODUCER_FENCED into INVALID_PRODUCER_EPOCH for old request versions, as
KafkaApis does.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, NamedTuple, Optional

from core.error_codes import ErrorCode

from cluster.transactions.log_records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionState
from cluster.transactions.markers import TransactionMarkerChannelManager
from cluster.transactions.metadata import (IllegalStateError, TransactionMetadata, TxnTransitMetadata,
                                           is_epoch_exhausted)
from cluster.transactions.state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager

log = logging.getLogger("raykafka.transactions")
S = TransactionState

ProducerIdSource = Callable[[], Awaitable[int]]


class InitProducerIdResult(NamedTuple):
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class EndTxnResult(NamedTuple):
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionDescription(NamedTuple):
    """DescribeTransactions' answer for one transactional id (on an error the
    other fields keep the schema's defaults, zeros, as Kafka answers)."""

    error: ErrorCode
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_timestamp_ms: int = 0
    producer_id: int = 0
    producer_epoch: int = 0
    partitions: tuple[tuple[str, int], ...] = ()


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


class ProducerIdUnavailable(Exception):
    """No producer id could be allocated; ``error`` is the code for the client."""

    def __init__(self, error: ErrorCode, message: str = ""):
        super().__init__(message or error.name)
        self.error = error


class TransactionCoordinator:
    def __init__(self, state_manager: TransactionStateManager, markers: TransactionMarkerChannelManager,
                 generate_producer_id: ProducerIdSource):
        self.state = state_manager
        self.markers = markers
        self._generate_producer_id = generate_producer_id

    @property
    def clock(self):
        return self.state.clock

    async def _new_producer_id(self) -> tuple[ErrorCode, int]:
        try:
            return ErrorCode.none, int(await self._generate_producer_id())
        except ProducerIdUnavailable as exc:
            return exc.error, NO_PRODUCER_ID
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable and the like: the client retries
            log.warning("allocating a producer id failed: %s", exc)
            return ErrorCode.coordinator_load_in_progress, NO_PRODUCER_ID

    # ---- InitProducerId (22) ---------------------------------------------------------------------------
    async def handle_init_producer_id(self, transactional_id: Optional[str], transaction_timeout_ms: int,
                                      expected: Optional[tuple[int, int]] = None) -> InitProducerIdResult:
        """``expected``: the (producer id, epoch) the producer holds (KIP-360), or None."""
        if transactional_id is None:
            # An idempotent producer: a fresh id every time, whatever it held.
            error, producer_id = await self._new_producer_id()
            return InitProducerIdResult(error) if error != ErrorCode.none else InitProducerIdResult(ErrorCode.none, producer_id, 0)
        if transactional_id == "":
            return InitProducerIdResult(ErrorCode.invalid_request)
        if not self.state.validate_transaction_timeout_ms(transaction_timeout_ms):
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        error, entry = self.state.get(transactional_id)
        if error != ErrorCode.none:
            return InitProducerIdResult(error)
        if entry is None:
            error, producer_id = await self._new_producer_id()
            if error != ErrorCode.none:
                return InitProducerIdResult(error)
            created = TransactionMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH, transaction_timeout_ms,
                                          S.EMPTY, txn_last_update_timestamp=self.clock())
            error, entry = self.state.get(transactional_id, created=created)  # ownership may have moved meanwhile
            if error != ErrorCode.none:
                return InitProducerIdResult(error)
        coordinator_epoch, metadata = entry
        error, transit = await self._prepare_init_producer_id(transaction_timeout_ms, metadata, expected)
        if error != ErrorCode.none:
            return InitProducerIdResult(error)
        if transit.txn_state == S.PREPARE_EPOCH_FENCE:
            # An open transaction of the previous epoch: abort it, and let the
            # client retry (which bumps the epoch again, or rotates the id).
            result = await self._end_transaction(transactional_id, transit.producer_id, transit.producer_epoch,
                                                 committed=False, from_client=False)
            if metadata.pending_state == S.PREPARE_EPOCH_FENCE:
                metadata.pending_state = None  # the abort did not start: no fence left pending
            return InitProducerIdResult(result.error if result.error != ErrorCode.none else ErrorCode.concurrent_transactions)
        error = await self.state.append_transaction(transactional_id, coordinator_epoch, transit)
        if error != ErrorCode.none:
            log.info("InitProducerId of %s: %s", transactional_id, error.name)
            return InitProducerIdResult(error)
        log.info("initialized transactional id %s with producer id %d and epoch %d on %s-%d", transactional_id,
                 transit.producer_id, transit.producer_epoch, TRANSACTION_STATE_TOPIC,
                 self.state.partition_for(transactional_id))
        return InitProducerIdResult(ErrorCode.none, transit.producer_id, transit.producer_epoch)

    async def _prepare_init_producer_id(self, timeout_ms: int, metadata: TransactionMetadata,
                                        expected: Optional[tuple[int, int]]):
        if metadata.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions, None
        if expected is not None:
            expected_id, expected_epoch = expected
            # Fence the caller unless: the metadata was just created (recovering from
            # UNKNOWN_PRODUCER_ID), it holds the current id (its epoch is checked by the
            # bump), or it holds the previous id at an exhausted epoch (a retry of a
            # rotation it never heard back from).
            valid = (metadata.producer_epoch == NO_PRODUCER_EPOCH or expected_id == metadata.producer_id
                     or (expected_id == metadata.previous_producer_id and is_epoch_exhausted(expected_epoch)))
            if not valid:
                return ErrorCode.producer_fenced, None
        state = metadata.state
        if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.concurrent_transactions, None
        if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if metadata.is_producer_epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
                error, producer_id = await self._new_producer_id()
                if error != ErrorCode.none:
                    return error, None
                if metadata.pending_transition_in_progress:  # another request got in while we waited
                    return ErrorCode.concurrent_transactions, None
                return ErrorCode.none, metadata.prepare_producer_id_rotation(producer_id, timeout_ms, self.clock(),
                                                                     expected is not None)
            transit = metadata.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1],
                                                                self.clock())
            if isinstance(transit, str):
                return ErrorCode.producer_fenced, None
            return ErrorCode.none, transit
        if state == S.ONGOING:
            return ErrorCode.none, metadata.prepare_fence_producer_epoch()
        raise IllegalStateError(f"transactional id {metadata.transactional_id} found in state {state.kafka_name}")

    # ---- AddPartitionsToTxn (24) / AddOffsetsToTxn (25) ------------------------------------------------
    async def handle_add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                    partitions: set[tuple[str, int]]) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        error, entry = self.state.get(transactional_id)
        if error != ErrorCode.none:
            return error
        if entry is None:
            return ErrorCode.invalid_producer_id_mapping
        coordinator_epoch, metadata = entry
        if metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if metadata.pending_transition_in_progress or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        if metadata.state == S.ONGOING and set(partitions) <= metadata.topic_partitions:
            return ErrorCode.none  # already in the transaction
        transit = metadata.prepare_add_partitions(set(partitions), self.clock())
        return await self.state.append_transaction(transactional_id, coordinator_epoch, transit)

    def handle_verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: set[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890): are these partitions in
        the transaction? TRANSACTION_ABORTABLE for those that are not."""
        def every(error: ErrorCode) -> dict:
            return {tp: error for tp in partitions}

        if not transactional_id:
            return every(ErrorCode.invalid_request)
        error, entry = self.state.get(transactional_id)
        if error != ErrorCode.none:
            return every(error)
        if entry is None or entry.metadata.producer_id != producer_id:
            return every(ErrorCode.invalid_producer_id_mapping)
        metadata = entry.metadata
        if metadata.producer_epoch != producer_epoch:
            return every(ErrorCode.producer_fenced)
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return every(ErrorCode.concurrent_transactions)
        return {tp: ErrorCode.none if tp in metadata.topic_partitions else ErrorCode.transaction_abortable for tp in partitions}

    # ---- EndTxn (26) -------------------------------------------------------------------------------------
    async def handle_end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                     committed: bool) -> EndTxnResult:
        return await self._end_transaction(transactional_id, producer_id, producer_epoch, committed,
                                           from_client=True)

    async def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                               from_client: bool) -> EndTxnResult:
        if not transactional_id:
            return EndTxnResult(ErrorCode.invalid_request)
        error, entry = self.state.get(transactional_id)
        if error != ErrorCode.none:
            return EndTxnResult(error)
        if entry is None:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        coordinator_epoch, metadata = entry
        is_epoch_fence = False
        if metadata.producer_id != producer_id:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        # Clients must hold the current epoch; the coordinator itself (a fence) may hold a newer one.
        if not ((not from_client or producer_epoch == metadata.producer_epoch)
                and producer_epoch >= metadata.producer_epoch):
            return EndTxnResult(ErrorCode.producer_fenced)
        if metadata.pending_transition_in_progress and metadata.pending_state != S.PREPARE_EPOCH_FENCE:
            return EndTxnResult(ErrorCode.concurrent_transactions)
        state = metadata.state
        if state == S.ONGOING:
            new_state = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
            if new_state == S.PREPARE_ABORT and metadata.pending_state == S.PREPARE_EPOCH_FENCE:
                # The fence becomes the abort: the bumped epoch is the epoch from now on.
                is_epoch_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = metadata.prepare_abort_or_commit(new_state, self.clock())
        elif state == S.COMPLETE_COMMIT:
            return self._already(metadata, committed, True)
        elif state == S.COMPLETE_ABORT:
            return self._already(metadata, committed, False)
        elif state == S.PREPARE_COMMIT:
            return EndTxnResult(ErrorCode.concurrent_transactions if committed else ErrorCode.invalid_txn_state)
        elif state == S.PREPARE_ABORT:
            return EndTxnResult(ErrorCode.concurrent_transactions if not committed else ErrorCode.invalid_txn_state)
        elif state == S.EMPTY:
            log.info("EndTxn(%s) of %s in state Empty: INVALID_TXN_STATE", "commit" if committed else "abort",
                     transactional_id)
            return EndTxnResult(ErrorCode.invalid_txn_state)
        else:
            raise IllegalStateError(f"transactional id {transactional_id} found in state {state.kafka_name}")

        error = await self.state.append_transaction(transactional_id, coordinator_epoch, transit)
        if error != ErrorCode.none:
            if is_epoch_fence:
                error2, current = self.state.get(transactional_id)
                if error2 == ErrorCode.none and current is not None and current.coordinator_epoch == coordinator_epoch:
                    # The epoch in memory is bumped but never reached the log (nor a client).
                    current.metadata.has_failed_epoch_fence = True
            return EndTxnResult(error)
        # Written: now the markers, then the Complete state.
        error, current = self.state.get(transactional_id)
        if error != ErrorCode.none:
            return EndTxnResult(error)
        if current is None or current.coordinator_epoch != coordinator_epoch:
            return EndTxnResult(ErrorCode.not_coordinator)
        metadata = current.metadata
        if metadata.producer_id != producer_id:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        if metadata.producer_epoch != producer_epoch:
            return EndTxnResult(ErrorCode.producer_fenced)
        if metadata.pending_transition_in_progress:
            return EndTxnResult(ErrorCode.concurrent_transactions)
        if metadata.state != (S.PREPARE_COMMIT if committed else S.PREPARE_ABORT):
            return EndTxnResult(ErrorCode.invalid_txn_state)
        complete = metadata.prepare_complete(self.clock())
        self.markers.add_txn_markers_to_send(coordinator_epoch, committed, metadata, complete)
        return EndTxnResult(ErrorCode.none, metadata.producer_id, metadata.producer_epoch)

    @staticmethod
    def _already(metadata: TransactionMetadata, committed: bool, was_committed: bool) -> EndTxnResult:
        if committed == was_committed:
            return EndTxnResult(ErrorCode.none, metadata.producer_id, metadata.producer_epoch)  # a retry
        return EndTxnResult(ErrorCode.invalid_txn_state)

    # ---- DescribeTransactions (65) / ListTransactions (66) -------------------------------------------------
    def handle_describe_transaction(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            return TransactionDescription(ErrorCode.invalid_request, transactional_id or "")
        error, entry = self.state.get(transactional_id)
        if error != ErrorCode.none:
            return TransactionDescription(error, transactional_id)
        if entry is None or entry.metadata.state == S.DEAD:
            return TransactionDescription(ErrorCode.transactional_id_not_found, transactional_id)
        m = entry.metadata
        return TransactionDescription(ErrorCode.none, transactional_id, m.state.kafka_name, m.txn_timeout_ms,
                                      m.txn_start_timestamp, m.producer_id, m.producer_epoch,
                                      tuple(sorted(m.topic_partitions)))

    def handle_list_transactions(self, producer_ids: set[int], state_names: set[str], duration_ms: int = -1
                                 ) -> tuple[ErrorCode, list[str], list[TransactionListing]]:
        """-> (error, unknown state filters, listings), as Kafka's listTransactionStates."""
        if any(self.state.is_loading(p) for p in range(self.state.config.num_partitions)):
            return ErrorCode.coordinator_load_in_progress, [], []
        unknown = sorted(name for name in state_names if S.from_kafka_name(name) is None)
        states = {S.from_kafka_name(name) for name in state_names} - {None}
        now = self.clock()
        out = []
        for m in self.state.all_metadata():
            if m.state == S.DEAD:
                continue
            if producer_ids and m.producer_id not in producer_ids:
                continue
            if state_names and m.state not in states:
                continue
            if duration_ms >= 0 and now - m.txn_start_timestamp <= duration_ms:
                continue
            out.append(TransactionListing(m.transactional_id, m.producer_id, m.state.kafka_name))
        return ErrorCode.none, unknown, sorted(out)

    # ---- timed-out transactions --------------------------------------------------------------------------
    async def abort_timed_out_transactions(self) -> int:
        """Abort every Ongoing transaction past its transaction.timeout.ms (fencing
        its producer: the epoch is bumped); -> how many aborts were started."""
        started = 0
        for transactional_id, producer_id, _epoch in self.state.timed_out_transactions():
            error, entry = self.state.get(transactional_id)
            if error != ErrorCode.none or entry is None:
                continue
            metadata = entry.metadata
            if metadata.producer_id != producer_id or metadata.pending_transition_in_progress:
                continue
            if metadata.producer_epoch >= 32767:
                log.error("cannot abort the timed-out transaction of %s: its epoch cannot be bumped", transactional_id)
                continue
            transit = metadata.prepare_fence_producer_epoch()
            log.info("aborting the transaction of %s (producer id %d, epoch %d): it timed out after %d ms",
                     transactional_id, producer_id, metadata.producer_epoch, metadata.txn_timeout_ms)
            result = await self._end_transaction(transactional_id, transit.producer_id, transit.producer_epoch,
                                                 committed=False, from_client=False)
            if result.error == ErrorCode.none:
                started += 1
            elif result.error not in (ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced, ErrorCode.concurrent_transactions):
                log.warning("aborting the timed-out transaction of %s failed: %s", transactional_id,
                            result.error.name)
            if metadata.pending_state == S.PREPARE_EPOCH_FENCE:
                metadata.pending_state = None  # the abort did not start: no fence left pending
        return started

    # ---- ownership ------------------------------------------------------------------------------------------
    def on_election(self, partition: int, coordinator_epoch: int, records) -> int:
        """Load ``partition`` from its records (after ``begin_loading``); markers of
        transactions left in PrepareCommit/PrepareAbort are sent again. -> how many."""
        self.markers.remove_markers_for_partition(partition)
        pending = self.state.complete_loading(partition, coordinator_epoch, records)
        for item in pending:
            log.info("resending the %s markers of %s after loading %s-%d", "COMMIT" if item.committed else "ABORT",
                     item.transactional_id, TRANSACTION_STATE_TOPIC, partition)
            self.markers.add_txn_markers_to_send(item.coordinator_epoch, item.committed, item.metadata, item.transit)
        return len(pending)

    def on_resignation(self, partition: int, coordinator_epoch: Optional[int] = None) -> None:
        self.state.unload(partition, coordinator_epoch)
        self.markers.remove_markers_for_partition(partition)
