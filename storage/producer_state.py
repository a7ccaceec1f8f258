"""Per-partition producer state: idempotence and transactions (KIP-98).

Kafka's ProducerStateManager, ProducerStateEntry and ProducerAppendInfo, as
plain classes the Log drives. For every producer id seen in a partition it
keeps the epoch, the sequence ranges and offsets of the last five batches
(enough to answer a retried batch with its original offsets), the last
coordinator epoch, and the first offset of its open transaction. From the
open and recently ended transactions it gives the first unstable offset,
which bounds the last stable offset (LSO) that read_committed fetches stop at.

Only record batch headers are read, never a record, except the one record of
a control batch (a transaction marker: its key says COMMIT or ABORT).

The state is snapshotted to ``<offset>.snapshot`` files in the partition's
directory, in Kafka's format (ProducerSnapshot v1): version int16, CRC-32C
uint32 of what follows, then an int32-counted array of entries (producer id
int64, epoch int16, last sequence int32, last offset int64, offset delta
int32, timestamp int64, coordinator epoch int32, current transaction first
offset int64). The snapshot at offset N holds the state of offsets below N;
loading takes the newest snapshot at or below the log end and replays the
log from there.
"""
from __future__ import annotations

import collections
import logging
import os
import re
import struct
from typing import Iterable, NamedTuple

from crc32c import crc32c

from storage.errors import InvalidRecordsError, RecordsFault

__all__ = [
    "ProducerStateManager",
    "ProducerStateEntry",
    "ProducerAppendInfo",
    "ProducerStateError",
    "BatchMetadata",
    "CompletedTxn",
    "ControlType",
    "build_end_txn_marker",
    "end_txn_marker_type",
    "snapshot_file_name",
    "read_snapshot",
    "write_snapshot",
    "SNAPSHOT_SUFFIX",
    "NUM_BATCHES_TO_RETAIN",
]

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
SNAPSHOT_VERSION = 1
INT32_MAX = 0x7FFFFFFF
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
ORIGIN_REPLICATION = "replication"

_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class ControlType:
    ABORT = 0
    COMMIT = 1


class ProducerStateError(InvalidRecordsError):
    """A producer's batch breaks its sequence, epoch or transaction state;
    nothing was appended. Carries its RecordsFault like every rejected append."""

    def __init__(self, fault: RecordsFault, message: str):
        super().__init__(fault, message)


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap at int32 max."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batches")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = -1, current_txn_first_offset: int = -1,
                 batches: Iterable[BatchMetadata] = ()):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset  # -1: no open transaction
        self.batches: collections.deque[BatchMetadata] = collections.deque(batches, NUM_BATCHES_TO_RETAIN)

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset, self.batches)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        if self.producer_epoch != epoch:
            self.batches.clear()
            self.producer_epoch = epoch
            return True
        return False

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(pid={self.producer_id}, epoch={self.producer_epoch}, "
                f"seq={self.first_seq}..{self.last_seq}, coordinator_epoch={self.coordinator_epoch}, "
                f"txn_first_offset={self.current_txn_first_offset})")


class ProducerAppendInfo:
    """One producer's changes within one append, validated before anything
    is written and applied (``ProducerStateManager.update``) after."""

    __slots__ = ("producer_id", "current", "updated", "origin", "started_txns", "topic_partition")

    def __init__(self, producer_id: int, current: ProducerStateEntry | None, origin: str, topic_partition: str = ""):
        self.producer_id = producer_id
        self.current = current if current is not None else ProducerStateEntry(producer_id)
        self.updated = self.current.copy()
        self.updated.batches.clear()
        self.origin = origin
        self.started_txns: list[int] = []  # first offsets of transactions this append opens
        self.topic_partition = topic_partition

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch:
            message = (f"Epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition} is "
                       f"{epoch}, which is smaller than the last seen epoch {self.updated.producer_epoch}")
            if self.origin == ORIGIN_REPLICATION:
                log.warning(message)
            else:
                # Since Kafka 2.7 a produce with an old epoch is INVALID_PRODUCER_EPOCH
                # (abortable), not the fatal PRODUCER_FENCED.
                raise ProducerStateError(RecordsFault.invalid_producer_epoch, message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise ProducerStateError(
                    RecordsFault.out_of_order_sequence_number,
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} in "
                    f"partition {self.topic_partition}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{self.updated.producer_epoch} (current producer epoch)")
            return
        if not self.updated.is_empty:
            current_last = self.updated.last_seq
        elif epoch == self.current.producer_epoch:
            current_last = self.current.last_seq
        else:
            current_last = NO_SEQUENCE
        # A producer whose state is gone (expired, or removed with its data by
        # retention or DeleteRecords) may continue at any sequence (KIP-360).
        if not (self.current.producer_epoch == NO_PRODUCER_EPOCH or _in_sequence(current_last, first_seq)):
            raise ProducerStateError(
                RecordsFault.out_of_order_sequence_number,
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {first_seq} (incoming seq. number), {current_last} "
                f"(current end sequence number)")

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, last_timestamp: int,
                          first_offset: int, last_offset: int, is_transactional: bool) -> None:
        self._check_epoch(epoch, first_offset)
        if self.origin == ORIGIN_CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self.updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if self.updated.current_txn_first_offset >= 0:
            if not is_transactional and self.origin == ORIGIN_REPLICATION:
                log.warning("non-transactional write from producer %d at offset %d in %s during its transaction",
                            self.producer_id, first_offset, self.topic_partition)
            elif not is_transactional:
                raise ProducerStateError(
                    RecordsFault.invalid_txn_state,
                    f"Expected transactional write from producer {self.producer_id} at offset {first_offset} "
                    f"in partition {self.topic_partition}")
        elif is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_txns.append(first_offset)

    def append_end_txn_marker(self, control_type: int, coordinator_epoch: int, epoch: int, offset: int,
                              timestamp: int) -> CompletedTxn | None:
        self._check_epoch(epoch, offset)
        if self.updated.coordinator_epoch > coordinator_epoch:
            message = (f"Invalid coordinator epoch for producerId {self.producer_id} at offset {offset} in "
                       f"partition {self.topic_partition}: {coordinator_epoch} (zombie), "
                       f"{self.updated.coordinator_epoch} (current)")
            if self.origin == ORIGIN_REPLICATION:
                log.info(message)
            else:
                raise ProducerStateError(RecordsFault.transaction_coordinator_fenced, message)
        first = self.updated.current_txn_first_offset
        completed = (CompletedTxn(self.producer_id, first, offset, control_type == ControlType.ABORT)
                     if first >= 0 else None)
        self.updated.maybe_update_producer_epoch(epoch)
        self.updated.coordinator_epoch = coordinator_epoch
        self.updated.current_txn_first_offset = -1
        self.updated.last_timestamp = timestamp
        return completed


class _Txn:
    __slots__ = ("producer_id", "first_offset", "last_offset")

    def __init__(self, producer_id: int, first_offset: int, last_offset: int = -1):
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset = last_offset


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def write_snapshot(path: str, entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Kafka's ProducerStateManager.writeSnapshot, written to ``path`` via a
    temporary file so a crash never leaves a torn snapshot under its name."""
    body = bytearray()
    rows = list(entries)
    body += _COUNT.pack(len(rows))
    for e in rows:
        body += _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_seq, e.last_data_offset, e.last_offset_delta,
                            e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)
    data = _HEAD.pack(SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


class CorruptSnapshotError(Exception):
    pass


def read_snapshot(path: str) -> list[ProducerStateEntry]:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"{path}: {len(data)} bytes is too short for a snapshot")
    version, crc = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{path}: unknown snapshot version {version}")
    if crc32c(data[_HEAD.size:]) != crc:
        raise CorruptSnapshotError(f"{path}: snapshot is corrupt (CRC is no longer valid)")
    (count,) = _COUNT.unpack_from(data, _HEAD.size)
    pos = _HEAD.size + _COUNT.size
    if count < 0 or len(data) != pos + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{path}: {count} entries do not fit {len(data)} bytes")
    entries = []
    for _ in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        batches = [BatchMetadata(last_seq, last_offset, delta, ts)] if last_offset >= 0 else []
        entries.append(ProducerStateEntry(pid, epoch, coord_epoch, ts, txn_first, batches))
    return entries


def build_end_txn_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                         timestamp_ms: int, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """A COMMIT/ABORT control batch (Kafka's EndTransactionMarker v0): one
    record, key = version int16 + type int16, value = version int16 +
    coordinator epoch int32."""
    from storage.records import SimpleRecord, build_batch

    control = ControlType.COMMIT if committed else ControlType.ABORT
    record = SimpleRecord(_CONTROL_KEY.pack(0, control), _CONTROL_VALUE.pack(0, coordinator_epoch),
                          timestamp=timestamp_ms)
    return build_batch([record], base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                       is_transactional=True, is_control=True)


def end_txn_marker_type(batch, pos: int = 0) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of the control batch at ``pos``, or
    None when it holds no record (compaction may empty it)."""
    from storage.records import iter_batch_records

    for record in iter_batch_records(batch, pos):
        key = record.key or b""
        if len(key) < _CONTROL_KEY.size:
            raise ValueError(f"control record key of {len(key)} bytes")
        _version, control = _CONTROL_KEY.unpack_from(key, 0)
        value = record.value or b""
        coordinator_epoch = _CONTROL_VALUE.unpack_from(value, 0)[1] if len(value) >= _CONTROL_VALUE.size else -1
        return control, coordinator_epoch
    return None


class ProducerStateManager:
    """The producers of one partition, its open transactions, and its snapshots."""

    def __init__(self, dir: str, topic_partition: str = "", producer_id_expiration_ms: int = 86400000):
        self.dir = dir
        self.topic_partition = topic_partition or os.path.basename(dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> open transaction; insertion order is offset order.
        self._ongoing: dict[int, _Txn] = {}
        # first offset -> ended transaction whose marker the HW has not passed yet.
        self._unreplicated: dict[int, _Txn] = {}
        self.map_end_offset = 0  # the state covers offsets below this
        self.last_snapshot_offset = -1

    # ---- reading ---------------------------------------------------------------------------
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        # Copies first: the cleaner's thread asks while the replica's event
        # loop changes these dicts (list() of a dict runs no Python code).
        firsts = [t.first_offset for t in list(self._unreplicated.values())]
        ongoing = list(self._ongoing)  # by first offset: the smallest comes first
        if ongoing:
            firsts.append(ongoing[0])
        return min(firsts) if firsts else None

    @property
    def has_ongoing_transactions(self) -> bool:
        return bool(self._ongoing)

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of each open transaction, by first offset."""
        return [(t.producer_id, t.first_offset) for t in self._ongoing.values()]

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` ends: the first offset of another open
        transaction, else the offset after its marker (goes in the txn index)."""
        for txn in self._ongoing.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    # ---- appending ---------------------------------------------------------------------------
    def prepare_update(self, producer_id: int, origin: str) -> ProducerAppendInfo:
        return ProducerAppendInfo(producer_id, self.producers.get(producer_id), origin, self.topic_partition)

    def update(self, info: ProducerAppendInfo) -> None:
        entry = self.producers.get(info.producer_id)
        new = info.updated
        if entry is None:
            self.producers[info.producer_id] = new
        else:
            entry.maybe_update_producer_epoch(new.producer_epoch)
            entry.batches.extend(new.batches)
            entry.coordinator_epoch = new.coordinator_epoch
            entry.current_txn_first_offset = new.current_txn_first_offset
            entry.last_timestamp = new.last_timestamp
        for first in info.started_txns:
            self._ongoing[first] = _Txn(info.producer_id, first)

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            log.warning("%s: ended transaction of producer %d at %d was not open", self.topic_partition,
                        completed.producer_id, completed.first_offset)
            txn = _Txn(completed.producer_id, completed.first_offset)
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        if self._unreplicated:
            for first in [f for f, t in self._unreplicated.items() if t.last_offset < high_watermark]:
                del self._unreplicated[first]

    def remove_expired_producers(self, now_ms: int) -> int:
        """Producers idle past producer.id.expiration.ms, with no open
        transaction, are forgotten."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= self.producer_id_expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # ---- snapshots ---------------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        offsets = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return offsets
        for name in names:
            m = _SNAPSHOT_NAME.match(name)
            if m:
                offsets.append(int(m.group(1)))
        offsets.sort()
        return offsets

    def take_snapshot(self, sync: bool = True) -> str | None:
        """Snapshot the state at the map end offset, unless one is there."""
        path = os.path.join(self.dir, snapshot_file_name(self.map_end_offset))
        if os.path.exists(path):
            return None
        write_snapshot(path, self.producers.values(), sync)
        self.last_snapshot_offset = self.map_end_offset
        return path

    def delete_snapshots_below(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap < offset:
                self._unlink(snap)

    def delete_snapshots_above(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap > offset:
                self._unlink(snap)

    def _unlink(self, offset: int) -> None:
        try:
            os.unlink(os.path.join(self.dir, snapshot_file_name(offset)))
        except FileNotFoundError:
            pass

    def reset(self, map_end_offset: int = 0) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self.map_end_offset = map_end_offset

    def load_latest_snapshot(self, max_offset: int, log_start_offset: int, now_ms: int) -> int:
        """Reset to the newest readable snapshot at or below ``max_offset``;
        returns its offset (``log_start_offset`` when there is none: the log
        is replayed from its start). Corrupt snapshots are deleted."""
        self.reset(log_start_offset)
        for snap in reversed(self.snapshot_offsets()):
            if snap > max_offset:
                continue
            path = os.path.join(self.dir, snapshot_file_name(snap))
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: deleting unreadable producer snapshot %s: %s", self.topic_partition, path, exc)
                self._unlink(snap)
                continue
            for e in entries:
                if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= self.producer_id_expiration_ms:
                    continue
                self.producers[e.producer_id] = e
                if e.current_txn_first_offset >= 0:
                    self._ongoing[e.current_txn_first_offset] = _Txn(e.producer_id, e.current_txn_first_offset)
            self._ongoing = dict(sorted(self._ongoing.items()))
            self.map_end_offset = max(snap, log_start_offset)
            self.last_snapshot_offset = snap
            return self.map_end_offset
        return log_start_offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """The log start moved (retention, DeleteRecords). Producers stay, as
        in Kafka since 2.4 (KIP-360): a producer whose data was deleted may
        still continue its sequence; only ended transactions wholly below
        the start are forgotten."""
        for first in [f for f, t in self._unreplicated.items() if t.last_offset < log_start_offset]:
            del self._unreplicated[first]
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
