"""One transactional id's state and its legal transitions (Kafka's
TransactionMetadata / TxnTransitMetadata, transaction versions 0 and 1).

A change is made in two steps, as in Kafka: ``prepare_*`` checks the move,
sets ``pending_state`` and returns the target as a ``TxnTransitMetadata``;
the caller writes that target to ``__transaction_state`` and, once the write
is durable, calls ``complete_transition_to`` (or, on failure, clears
``pending_state``). While a transition is pending every other request for the
transactional id gets CONCURRENT_TRANSACTIONS.

Epochs are int16: an epoch at or above 32766 is exhausted, and the next
InitProducerId rotates to a new producer id at epoch 0 (KIP-360).
"""
from __future__ import annotations

from typing import FrozenSet, NamedTuple, Optional

from cluster.transactions.log_records import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionLogValue,
                                              TransactionState, group_partitions)

S = TransactionState
SHORT_MAX = 32767

# Kafka's validPreviousStates.
VALID_PREVIOUS_STATES: dict[TransactionState, FrozenSet[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# States a transactional id may be expired from (transactional.id.expiration.ms).
EXPIRATION_ALLOWED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PENDING_TRANSACTION = frozenset({S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT})


class IllegalStateError(RuntimeError):
    """A transition Kafka treats as a bug (IllegalStateException)."""


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= SHORT_MAX - 1


class TxnTransitMetadata(NamedTuple):
    """The target of a transition: what is written to the log."""

    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: FrozenSet[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int = 0

    def to_log_value(self) -> TransactionLogValue:
        partitions = None if self.txn_state == S.EMPTY else group_partitions(self.topic_partitions)
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.txn_timeout_ms, self.txn_state,
                                   partitions, self.txn_last_update_timestamp, self.txn_start_timestamp,
                                   client_transaction_version=self.client_transaction_version)


class TransactionMetadata:
    __slots__ = ("transactional_id", "producer_id", "previous_producer_id", "next_producer_id", "producer_epoch",
                 "last_producer_epoch", "txn_timeout_ms", "state", "topic_partitions", "txn_start_timestamp",
                 "txn_last_update_timestamp", "client_transaction_version", "pending_state",
                 "has_failed_epoch_fence")

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH,
                 txn_timeout_ms: int = 60000, state: TransactionState = S.EMPTY,
                 topic_partitions: Optional[set[tuple[str, int]]] = None, txn_start_timestamp: int = -1,
                 txn_last_update_timestamp: int = -1, previous_producer_id: int = NO_PRODUCER_ID,
                 next_producer_id: int = NO_PRODUCER_ID, last_producer_epoch: int = NO_PRODUCER_EPOCH,
                 client_transaction_version: int = 0):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.previous_producer_id = previous_producer_id
        self.next_producer_id = next_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.topic_partitions: set[tuple[str, int]] = set(topic_partitions or ())
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        self.client_transaction_version = client_transaction_version
        self.pending_state: Optional[TransactionState] = None
        # A fence whose write failed: the epoch in memory is already bumped, so
        # the next fence does not bump it again (Kafka's hasFailedEpochFence).
        self.has_failed_epoch_fence = False

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TransactionLogValue) -> "TransactionMetadata":
        """As Kafka's readTxnRecordValue: the last epoch is not in the log."""
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                   value.transaction_status,
                   value.partitions() if value.transaction_status != S.EMPTY else set(),
                   value.start_timestamp_ms, value.last_update_timestamp_ms,
                   previous_producer_id=value.previous_producer_id, next_producer_id=value.next_producer_id,
                   client_transaction_version=value.client_transaction_version)

    # ---- queries -----------------------------------------------------------------------------------
    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in PENDING_TRANSACTION

    def __repr__(self) -> str:
        return (f"TransactionMetadata({self.transactional_id!r}, producer_id={self.producer_id}, "
                f"epoch={self.producer_epoch}, last_epoch={self.last_producer_epoch}, state={self.state.kafka_name}, "
                f"pending={self.pending_state.kafka_name if self.pending_state is not None else None}, "
                f"partitions={sorted(self.topic_partitions)}, timeout_ms={self.txn_timeout_ms}, "
                f"start={self.txn_start_timestamp}, updated={self.txn_last_update_timestamp})")

    # ---- prepare -------------------------------------------------------------------------------------
    def remove_partition(self, tp: tuple[str, int]) -> None:
        """A marker for ``tp`` is written (or ``tp`` is gone)."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalStateError(f"removing a partition whose marker was sent in state {self.state.kafka_name}")
        self.topic_partitions.discard(tp)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        if self.producer_epoch == SHORT_MAX:
            raise IllegalStateError("cannot fence a producer at epoch 32767: the epoch would overflow")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(self, new_timeout_ms: int, expected_epoch: Optional[int],
                                         now_ms: int):
        """-> TxnTransitMetadata, or the ErrorCode name "producer_fenced"."""
        if self.is_producer_epoch_exhausted:
            raise IllegalStateError(f"no more epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # The producer goes on after an error, and nobody else initialized since.
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded: the current epoch again.
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return "producer_fenced"
        return self._prepare(S.EMPTY, self.producer_id, next_epoch, last_epoch, new_timeout_ms, frozenset(), -1,
                             now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        if self.has_pending_transaction:
            raise IllegalStateError("cannot rotate producer ids while a transaction is pending")
        return self._prepare(S.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             new_timeout_ms, frozenset(), -1, now_ms)

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int) -> TxnTransitMetadata:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions | set(added)), start, now_ms)

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: int) -> TxnTransitMetadata:
        return self._prepare(new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions), self.txn_start_timestamp, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        new_state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False  # the state change was written
        return self._prepare(new_state, self.producer_id, self.producer_epoch, self.producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now_ms)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_no_transit(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(self.producer_id, self.previous_producer_id, self.next_producer_id,
                                  self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms, self.state,
                                  frozenset(self.topic_partitions), self.txn_start_timestamp,
                                  self.txn_last_update_timestamp, self.client_transaction_version)

    def _prepare(self, state: TransactionState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: FrozenSet[tuple[str, int]], start_ms: int, now_ms: int) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalStateError(f"{self.transactional_id}: transition to {state.kafka_name} while "
                                    f"{self.pending_state.kafka_name} is pending")
        if producer_id < 0:
            raise ValueError(f"illegal producer id {producer_id}")
        if state != S.DEAD and epoch < 0:
            raise ValueError(f"illegal producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateError(f"{self.transactional_id}: {state.kafka_name} cannot follow "
                                    f"{self.state.kafka_name}")
        self.pending_state = state
        return TxnTransitMetadata(producer_id, self.producer_id, NO_PRODUCER_ID, epoch, last_epoch, timeout_ms,
                                  state, partitions, start_ms, now_ms, self.client_transaction_version)

    # ---- complete ------------------------------------------------------------------------------------
    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """The log holds ``transit``: make it the state (Kafka's checks, loud on a mismatch)."""
        target = self.pending_state
        if target is None or target != transit.txn_state:
            self._fail(transit)
        if target == S.EMPTY:
            if ((self.producer_epoch != transit.producer_epoch and not self._valid_epoch_bump(transit))
                    or transit.topic_partitions or transit.txn_start_timestamp != -1):
                self._fail(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.previous_producer_id = transit.prev_producer_id
        elif target == S.ONGOING:
            if (not self._valid_epoch(transit) or not self.topic_partitions <= transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms):
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions |= transit.topic_partitions
        elif target in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            if (not self._valid_epoch(transit) or self.topic_partitions != transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or self.txn_start_timestamp != transit.txn_start_timestamp):
                self._fail(transit)
        elif target in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            if (not self._valid_epoch(transit) or self.txn_timeout_ms != transit.txn_timeout_ms
                    or transit.txn_start_timestamp == -1):
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
        else:
            # PrepareEpochFence is never completed (it turns into PrepareAbort), and a
            # Dead id is removed from the cache instead.
            self._fail(transit)
        self.client_transaction_version = transit.client_transaction_version
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = target

    def _valid_epoch(self, transit: TxnTransitMetadata) -> bool:
        return transit.producer_epoch == self.producer_epoch and transit.producer_id == self.producer_id

    def _valid_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return (transit.producer_epoch == self.producer_epoch + 1
                or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))

    def _fail(self, transit: TxnTransitMetadata) -> None:
        raise IllegalStateError(f"{self!r}: transition to {transit} does not match the pending state")
