"""What an append changes in a log's producer state (the producer half of
Kafka's ``UnifiedLog.analyzeAndValidateProducerState``): found from the batch
headers before the write, checked (epochs, sequences, transactions), applied
after it. Only headers are read, and the one record of a transaction marker."""

from __future__ import annotations

from typing import NamedTuple

from storage.producer_state import (
    ORIGIN_CLIENT,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
    end_txn_marker_type,
    increment_sequence,
)
from storage.record_batch import CONTROL_MASK, LOG_OVERHEAD, BatchHeader, unpack_header
from storage.txn_index import AbortedTxn, TransactionIndex


class ProducerUpdates(NamedTuple):
    """What an append changes in the producer state, checked before the write."""

    infos: dict[int, ProducerAppendInfo]
    completed: list[CompletedTxn]


def producer_batch_positions(headers: list[BatchHeader], stamped=None) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of the batches in ``headers`` that name a
    producer id. ``stamped``: the bytes as written since ``headers`` were
    parsed (offsets, epochs, LogAppendTime); those batches' headers are
    read again from it, so producer state sees what the log holds."""
    found: list[tuple[int, BatchHeader]] = []
    pos = 0
    for h in headers:
        if h.producer_id >= 0:
            found.append((pos, h if stamped is None else unpack_header(stamped, pos)))
        pos += h.batch_length + LOG_OVERHEAD
    return found


def analyze_producers(ps: ProducerStateManager, view, batches: list[tuple[int, BatchHeader]],
                      origin: str) -> ProducerUpdates | BatchMetadata:
    """Kafka's ``analyzeAndValidateProducerState`` over stamped batches
    (``batches``: position and header of each batch of ``view`` that names
    a producer id): the updates to apply after the write, or the original of
    a retried batch (then nothing is written). Raises ProducerStateError."""
    infos: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for pos, h in batches:
        pid = h.producer_id
        if h.attributes & CONTROL_MASK:
            marker = end_txn_marker_type(view, pos)
            if marker is None:
                continue
            info = infos.get(pid) or infos.setdefault(pid, ps.prepare_update(pid, origin))
            done = info.append_end_txn_marker(marker[0], marker[1], h.producer_epoch, h.base_offset,
                                              h.max_timestamp)
            if done is not None:
                completed.append(done)
            continue
        last_seq = increment_sequence(h.base_sequence, h.last_offset_delta)
        if origin == ORIGIN_CLIENT:
            entry = ps.last_entry(pid)
            if entry is not None:
                duplicate = entry.find_duplicate(h.producer_epoch, h.base_sequence, last_seq)
                if duplicate is not None:
                    return duplicate
        info = infos.get(pid) or infos.setdefault(pid, ps.prepare_update(pid, origin))
        info.append_data_batch(h.producer_epoch, h.base_sequence, last_seq, h.max_timestamp, h.base_offset,
                               h.last_offset, h.is_transactional)
    return ProducerUpdates(infos, completed)


def complete_txn(ps: ProducerStateManager, completed: CompletedTxn, txn_index: TransactionIndex) -> None:
    """A transaction ended: an abort goes into the transaction index of the
    segment holding its marker, with the LSO after it."""
    if completed.is_aborted:
        txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                    ps.last_stable_offset_after(completed)))
    ps.complete_txn(completed)


def apply_producer_updates(ps: ProducerStateManager, updates: ProducerUpdates | None,
                           txn_index: TransactionIndex, log_end_offset: int) -> None:
    """After the write: the producers' new state and ended transactions
    (``txn_index``: the active segment's)."""
    if updates is not None:
        for info in updates.infos.values():
            ps.update(info)
        for completed in updates.completed:
            complete_txn(ps, completed, txn_index)
    ps.map_end_offset = log_end_offset
