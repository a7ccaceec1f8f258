"""Kafka's TransactionStateManager: the transaction metadata of the
``__transaction_state`` partitions this coordinator owns, kept in memory and
written to the log.

* Ownership: ``begin_loading(partition, epoch)`` then ``complete_loading`` with
  the partition's records replayed (the coordinator epoch is the partition's
  leader epoch); ``unload`` on resignation. A transactional id of a partition
  being loaded gets COORDINATOR_LOAD_IN_PROGRESS; of a partition not owned,
  NOT_COORDINATOR.
* Writes: ``append_transaction`` writes one record (key = transactional id,
  value = the target state) through the injected async ``append(partition,
  records) -> ErrorCode`` (acks=-1: it returns once the partition's high
  watermark has passed the record) and completes the pending transition only
  if the coordinator epoch is unchanged; produce errors are mapped to
  coordinator errors as Kafka does.
* Housekeeping: ``timed_out_transactions`` (Ongoing past
  ``transaction.timeout.ms``), ``remove_expired_transactional_ids``
  (tombstones for ids idle past ``transactional.id.expiration.ms``).

Single-threaded: it is driven from one event loop (the actor's); pending
states, not locks, keep concurrent requests for one id apart.
"""
from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable, Iterable, NamedTuple, Optional

from cluster.groups.records import java_string_hash_code
from cluster.transactions.log_records import (RecordFormatError, TransactionState, decode_key, decode_value,
                                              encode_key, encode_value)
from cluster.transactions.metadata import EXPIRATION_ALLOWED, TransactionMetadata, TxnTransitMetadata
from core.error_codes import ErrorCode
from core.metrics import count_skipped_coordinator_record
from core.naming import TRANSACTION_STATE_TOPIC  # noqa: F401  (re-exported)

log = logging.getLogger("raykafka.transactions")
S = TransactionState


Record = tuple[bytes, Optional[bytes]]
AppendFn = Callable[[int, list[Record]], Awaitable[ErrorCode]]

# Kafka's TransactionStateManagerConfig / TransactionLogConfig defaults.
DEFAULT_MAX_TIMEOUT_MS = 900_000
DEFAULT_ID_EXPIRATION_MS = 604_800_000
DEFAULT_ABORT_INTERVAL_MS = 10_000
DEFAULT_REMOVE_EXPIRED_INTERVAL_MS = 3_600_000
# Tombstones written per append (Kafka fills one batch up to the max message size).
MAX_TOMBSTONES_PER_APPEND = 500


class TransactionConfig(NamedTuple):
    num_partitions: int = 50
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS
    id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS
    abort_interval_ms: int = DEFAULT_ABORT_INTERVAL_MS
    remove_expired_interval_ms: int = DEFAULT_REMOVE_EXPIRED_INTERVAL_MS

    @classmethod
    def from_broker_config(cls, config, num_partitions: Optional[int] = None) -> "TransactionConfig":
        return cls(num_partitions=num_partitions or config["transaction.state.log.num.partitions"],
                   max_timeout_ms=config["transaction.max.timeout.ms"],
                   id_expiration_ms=config["transactional.id.expiration.ms"],
                   abort_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                   remove_expired_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"])


class CoordinatorEpochAndMetadata(NamedTuple):
    coordinator_epoch: int
    metadata: TransactionMetadata


class TransactionalIdAndProducerIdEpoch(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int


class PendingCompletion(NamedTuple):
    """A transaction found in PrepareCommit/PrepareAbort by a load: its markers
    must be (re)sent and its Complete state written."""

    transactional_id: str
    coordinator_epoch: int
    committed: bool
    metadata: TransactionMetadata
    transit: TxnTransitMetadata


class _PartitionCache:
    __slots__ = ("coordinator_epoch", "metadata")

    def __init__(self, coordinator_epoch: int, metadata: dict[str, TransactionMetadata]):
        self.coordinator_epoch = coordinator_epoch
        self.metadata = metadata


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % partitions``."""
    return (java_string_hash_code(transactional_id) & 0x7FFFFFFF) % num_partitions


def _append_error_to_coordinator_error(error: ErrorCode) -> ErrorCode:
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                 ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available  # the client retries
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return error


def replay(records: Iterable[Record], partition: int = -1) -> dict[str, TransactionMetadata]:
    """The state a partition's records leave (last value per id wins; a tombstone removes).
    A record that cannot be parsed is skipped, logged and counted: Kafka's
    coordinator fails the load instead, and with it every transactional id of
    the partition, retried forever (only coordinators write here: clients'
    appends are refused)."""
    loaded: dict[str, TransactionMetadata] = {}
    for key, value in records:
        try:
            if key is None:
                raise RecordFormatError("a transaction log record without a key")
            transactional_id = decode_key(key)
            if transactional_id is None:
                log.warning("skipping a transaction log key of an unknown version")
                continue
            decoded = decode_value(value)
            metadata = None if decoded is None else TransactionMetadata.from_log_value(transactional_id, decoded)
        except Exception as exc:  # noqa: BLE001 - any record we cannot parse
            log.warning("%s-%d: skipping a record that cannot be parsed (%s: %s)", TRANSACTION_STATE_TOPIC,
                        partition, type(exc).__name__, str(exc)[:300])
            count_skipped_coordinator_record(TRANSACTION_STATE_TOPIC, partition)
            continue
        if metadata is None:
            loaded.pop(transactional_id, None)
        else:
            loaded[transactional_id] = metadata
    return loaded


class TransactionStateManager:
    def __init__(self, config: TransactionConfig, append: AppendFn,
                 clock: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.config = config
        self._append = append
        self.clock = clock
        self._caches: dict[int, _PartitionCache] = {}
        self._loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded

    # ---- lookups -------------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self.config.num_partitions)

    def validate_transaction_timeout_ms(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.max_timeout_ms

    def owned_partitions(self) -> list[int]:
        return sorted(self._caches)

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def get(self, transactional_id: str,
            created: Optional[TransactionMetadata] = None) -> tuple[ErrorCode, Optional[CoordinatorEpochAndMetadata]]:
        """(NONE, entry or None) for an owned partition; (COORDINATOR_LOAD_IN_PROGRESS
        / NOT_COORDINATOR, None) otherwise. ``created`` is put in when the id is unknown."""
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress, None
        cache = self._caches.get(partition)
        if cache is None:
            return ErrorCode.not_coordinator, None
        metadata = cache.metadata.get(transactional_id)
        if metadata is None and created is not None:
            metadata = cache.metadata[transactional_id] = created
        return ErrorCode.none, None if metadata is None else CoordinatorEpochAndMetadata(cache.coordinator_epoch, metadata)

    def all_metadata(self) -> list[TransactionMetadata]:
        return [m for cache in self._caches.values() for m in cache.metadata.values()]

    # ---- ownership -----------------------------------------------------------------------------------
    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        self._caches.pop(partition, None)
        self._loading[partition] = coordinator_epoch

    def complete_loading(self, partition: int, coordinator_epoch: int,
                         records: Iterable[Record]) -> list[PendingCompletion]:
        """Install the replayed state; -> the transactions whose markers must be
        sent (found in PrepareCommit/PrepareAbort). Nothing if the load was
        superseded (another epoch, or unloaded meanwhile)."""
        if self._loading.get(partition) != coordinator_epoch:
            return []
        loaded = replay(records, partition)
        self._caches[partition] = _PartitionCache(coordinator_epoch, loaded)
        del self._loading[partition]
        now = self.clock()
        pending = []
        for transactional_id, metadata in loaded.items():
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                pending.append(PendingCompletion(transactional_id, coordinator_epoch,
                                                 metadata.state == S.PREPARE_COMMIT, metadata,
                                                 metadata.prepare_complete(now)))
        return pending

    def unload(self, partition: int, coordinator_epoch: Optional[int] = None) -> None:
        if coordinator_epoch is None or self._loading.get(partition) == coordinator_epoch:
            self._loading.pop(partition, None)
        elif partition in self._loading and self._loading[partition] < coordinator_epoch:
            self._loading.pop(partition, None)
        self._caches.pop(partition, None)

    def coordinator_epoch(self, partition: int) -> Optional[int]:
        cache = self._caches.get(partition)
        return None if cache is None else cache.coordinator_epoch

    # ---- writes ----------------------------------------------------------------------------------------
    async def append_transaction(self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata,
                                 retry_on_error: Callable[[ErrorCode], bool] = lambda _e: False) -> ErrorCode:
        """Write ``transit`` and complete the pending transition; -> the error for the client.

        On an error the pending state is cleared (the client retries from the
        old state) unless ``retry_on_error`` says the caller will retry the write."""
        error, entry = self.get(transactional_id)
        if error != ErrorCode.none:
            return error
        if entry is None or entry.coordinator_epoch != coordinator_epoch:
            return ErrorCode.not_coordinator
        record = (encode_key(transactional_id), encode_value(transit.to_log_value()))
        try:
            produced = ErrorCode(await self._append(self.partition_for(transactional_id), [record]))
        except Exception as exc:  # noqa: BLE001 - the append path failed as a whole
            log.warning("appending %s's state to %s failed: %s", transactional_id, TRANSACTION_STATE_TOPIC, exc)
            produced = ErrorCode.request_timed_out
        error = _append_error_to_coordinator_error(produced)
        current_error, current = self.get(transactional_id)
        if error == ErrorCode.none:
            if current_error != ErrorCode.none:
                return current_error
            if current is None or current.coordinator_epoch != coordinator_epoch:
                return ErrorCode.not_coordinator  # emigrated (and maybe immigrated) meanwhile: rediscover
            current.metadata.complete_transition_to(transit)
            return ErrorCode.none
        if current_error == ErrorCode.none and current is not None and current.coordinator_epoch == coordinator_epoch:
            if not retry_on_error(error):
                current.metadata.pending_state = None
        log.info("transactional id %s: writing %s failed with %s", transactional_id,
                 transit.txn_state.kafka_name, error.name)
        return error

    # ---- housekeeping ----------------------------------------------------------------------------------
    def timed_out_transactions(self) -> list[TransactionalIdAndProducerIdEpoch]:
        now = self.clock()
        return [TransactionalIdAndProducerIdEpoch(m.transactional_id, m.producer_id, m.producer_epoch)
                for cache in self._caches.values() for m in cache.metadata.values()
                if m.pending_state is None and m.state == S.ONGOING
                and m.txn_start_timestamp + m.txn_timeout_ms < now]

    def _should_expire(self, metadata: TransactionMetadata, now: int) -> bool:
        return (metadata.state in EXPIRATION_ALLOWED
                and metadata.txn_last_update_timestamp <= now - self.config.id_expiration_ms)

    async def remove_expired_transactional_ids(self) -> int:
        """Write tombstones for ids idle past transactional.id.expiration.ms and drop
        them from the cache once written; -> how many were removed."""
        removed = 0
        for partition, cache in list(self._caches.items()):
            now = self.clock()
            expired = []
            for metadata in cache.metadata.values():
                if metadata.pending_state is None and self._should_expire(metadata, now):
                    expired.append((metadata, metadata.prepare_dead()))
                if len(expired) >= MAX_TOMBSTONES_PER_APPEND:
                    break
            if not expired:
                continue
            epoch = cache.coordinator_epoch
            records = [(encode_key(m.transactional_id), None) for m, _ in expired]
            try:
                error = ErrorCode(await self._append(partition, records))
            except Exception as exc:  # noqa: BLE001
                log.warning("writing tombstones to %s-%d failed: %s", TRANSACTION_STATE_TOPIC, partition, exc)
                error = ErrorCode.request_timed_out
            current = self._caches.get(partition)
            for metadata, transit in expired:
                if (error == ErrorCode.none and current is not None and current.coordinator_epoch == epoch
                        and metadata.pending_state == S.DEAD and metadata.producer_epoch == transit.producer_epoch
                        and current.metadata.get(metadata.transactional_id) is metadata):
                    del current.metadata[metadata.transactional_id]
                    removed += 1
                else:
                    metadata.pending_state = None
            if error != ErrorCode.none:
                log.warning("expiring %d transactional ids of %s-%d failed: %s", len(expired),
                            TRANSACTION_STATE_TOPIC, partition, error.name)
            else:
                log.info("expired %d transactional ids of %s-%d", len(expired), TRANSACTION_STATE_TOPIC, partition)
        return removed
