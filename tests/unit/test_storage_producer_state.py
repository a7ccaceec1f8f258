"""Idempotence and transactions in the log: producer state, snapshots, the
aborted-transaction index and the last stable offset (no Ray)."""
import os
import struct

import pytest

from cluster.partition import READ_COMMITTED, READ_UNCOMMITTED, Partition
from core.txn_messages import ORIGIN_COORDINATOR, TxnMarker
from storage.log import Log, LogConfig
from storage.producer_state import (
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateError,
    BatchMetadata,
    build_end_txn_marker,
    end_txn_marker_type,
    read_snapshot,
    write_snapshot,
)
from storage.errors import RecordsFault
from storage.records import SimpleRecord, build_batch, iter_records
from storage.txn_index import ENTRY_SIZE, AbortedTxn

PID = 4000


def batch(n=3, pid=PID, epoch=0, seq=0, txn=False, key=b"k"):
    return build_batch([(key, b"v%d" % i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=txn)


def marker(committed, pid=PID, epoch=0, coordinator_epoch=0):
    return build_end_txn_marker(pid, epoch, coordinator_epoch, committed, 1_700_000_000_000)


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "topic-0")


def open_log(path, **kw):
    return Log(path, LogConfig(segment_bytes=kw.pop("segment_bytes", 1 << 20)), **kw)


def test_idempotent_sequence_and_duplicates(log_dir):
    log = open_log(log_dir)
    first = log.append_as_leader(batch(3, seq=0), 0)
    second = log.append_as_leader(batch(2, seq=3), 0)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    # The producer retries its first batch: answered with the original offsets, nothing written.
    retry = log.append_as_leader(batch(3, seq=0), 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 2)
    assert log.log_end_offset == 5
    # A gap in the sequence.
    with pytest.raises(ProducerStateError) as exc:
        log.append_as_leader(batch(1, seq=7), 0)
    assert exc.value.fault == RecordsFault.out_of_order_sequence_number
    assert log.log_end_offset == 5
    entry = log.producer_state.last_entry(PID)
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 0, 4, 4)


def test_only_last_five_batches_are_remembered(log_dir):
    log = open_log(log_dir)
    for i in range(7):
        log.append_as_leader(batch(1, seq=i), 0)
    assert log.append_as_leader(batch(1, seq=2), 0).duplicate
    # Seq 0 is older than the five remembered batches: it is out of order, not a duplicate.
    with pytest.raises(ProducerStateError) as exc:
        log.append_as_leader(batch(1, seq=0), 0)
    assert exc.value.fault == RecordsFault.out_of_order_sequence_number


def test_epochs(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(2, epoch=3, seq=0), 0)
    with pytest.raises(ProducerStateError) as exc:
        log.append_as_leader(batch(1, epoch=2, seq=2), 0)
    assert exc.value.fault == RecordsFault.invalid_producer_epoch
    # A new epoch must start its sequence at 0.
    with pytest.raises(ProducerStateError) as exc:
        log.append_as_leader(batch(1, epoch=4, seq=5), 0)
    assert exc.value.fault == RecordsFault.out_of_order_sequence_number
    assert not log.append_as_leader(batch(1, epoch=4, seq=0), 0).duplicate
    assert log.producer_state.last_entry(PID).producer_epoch == 4


def test_unknown_producer_may_start_at_any_sequence(log_dir):
    # KIP-360: the state of a producer whose data is gone may be lost; it continues.
    log = open_log(log_dir)
    info = log.append_as_leader(batch(2, seq=1234), 0)
    assert info.first_offset == 0 and log.producer_state.last_entry(PID).last_seq == 1235


def test_sequence_wraps_at_int32_max(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(1, seq=0x7FFFFFFF), 0)
    log.append_as_leader(batch(2, seq=0), 0)
    assert log.producer_state.last_entry(PID).last_seq == 1


def test_coordinator_writes_skip_sequence_checks(log_dir):
    log = open_log(log_dir)
    offsets = build_batch([(b"g", b"o")], producer_id=PID, producer_epoch=0, base_sequence=-1, is_transactional=True)
    info = log.append_as_leader(offsets, 0, origin=ORIGIN_COORDINATOR)
    assert info.first_offset == 0
    assert log.first_unstable_offset() == 0


def test_transaction_commit_and_lso(log_dir):
    log = open_log(log_dir)
    p = Partition("topic", 0, 1, log)
    p.make_leader(0, 0, [1], [1])
    p.append([(batch(2, seq=0, txn=True), 1, 1000)], 0, 0)
    p.append([(build_batch([(b"x", b"y")]), 1, 1000)], 0, 0)  # a plain producer's record after it
    assert p.high_watermark == 3
    assert p.last_stable_offset == 0  # the open transaction holds read_committed consumers at its start
    error, hw, lso, _start, runs = p.read_run(0, 1 << 20, READ_COMMITTED, -1, 1)
    assert (error, hw, lso, runs) == (0, 3, 0, [])
    assert p.read_run(0, 1 << 20, READ_UNCOMMITTED, -1, 1)[4]
    [result] = p.write_txn_markers([TxnMarker(PID, 0, 5, True)], 0)
    assert result == (0, 3)
    assert p.last_stable_offset == 4 == p.high_watermark
    error, _hw, _lso, _start, runs = p.read_run(0, 1 << 20, READ_COMMITTED, -1, 1)
    assert error == 0 and runs[0][2] == []  # committed: nothing to skip
    assert log.producer_state.last_entry(PID).coordinator_epoch == 5
    assert not os.path.exists(os.path.join(log_dir, "00000000000000000000.txnindex"))


def test_abort_is_indexed_in_kafkas_format(log_dir):
    log = open_log(log_dir)
    p = Partition("topic", 0, 1, log)
    p.make_leader(0, 0, [1], [1])
    p.append([(batch(2, seq=0, txn=True), 1, 1000)], 0, 0)
    other = 77
    p.append([(batch(1, pid=other, seq=0, txn=True), 1, 1000)], 0, 0)
    [result] = p.write_txn_markers([TxnMarker(PID, 0, 0, False)], 0)
    assert result.offset == 3
    # The other producer's transaction (at 2) is still open: the LSO stays there.
    assert p.last_stable_offset == 2
    with open(os.path.join(log_dir, "00000000000000000000.txnindex"), "rb") as f:
        data = f.read()
    assert len(data) == ENTRY_SIZE
    assert struct.unpack(">hqqqq", data) == (0, PID, 0, 3, 2)
    p.write_txn_markers([TxnMarker(other, 0, 0, True)], 0)
    assert p.last_stable_offset == p.high_watermark == 5
    error, _hw, lso, _start, runs = p.read_run(0, 1 << 20, READ_COMMITTED, -1, 1)
    assert runs[0][2] == [(PID, 0)]
    assert log.collect_aborted_txns(4, 5) == []
    assert log.collect_aborted_txns(3, 5) == [AbortedTxn(PID, 0, 3, 2)]


def test_lso_waits_for_the_marker_to_replicate(log_dir):
    log = open_log(log_dir)
    p = Partition("topic", 0, 1, log, min_insync_replicas=1)
    p.make_leader(0, 0, [1, 2], [1, 2])
    p.append([(batch(1, seq=0, txn=True), 1, 1000)], 0, 0)
    p.fetch_for_follower(2, 1, -1, 0, 1 << 20, 0)
    assert p.high_watermark == 1 and p.last_stable_offset == 0
    p.write_txn_markers([TxnMarker(PID, 0, 0, True)], 0)
    assert p.high_watermark == 1 and p.last_stable_offset == 0  # the marker is not replicated yet
    p.fetch_for_follower(2, 2, -1, 0, 1 << 20, 0)
    assert p.high_watermark == 2 == p.last_stable_offset


def test_transaction_state_errors(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(1, seq=0, txn=True), 0)
    with pytest.raises(ProducerStateError) as exc:
        log.append_as_leader(batch(1, seq=1, txn=False), 0)
    assert exc.value.fault == RecordsFault.invalid_txn_state
    log.append_as_leader(marker(True, coordinator_epoch=3), 0, from_client=False)
    log.append_as_leader(batch(1, seq=1, txn=True), 0)
    with pytest.raises(ProducerStateError) as exc:
        log.append_as_leader(marker(False, coordinator_epoch=2), 0, from_client=False)
    assert exc.value.fault == RecordsFault.transaction_coordinator_fenced


def test_state_survives_a_clean_restart_through_a_snapshot(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(2, seq=0), 0)
    log.append_as_leader(batch(1, pid=9, seq=0, txn=True), 0)
    log.close()
    names = sorted(os.listdir(log_dir))
    assert "00000000000000000003.snapshot" in names
    entries = {e.producer_id: e for e in read_snapshot(os.path.join(log_dir, "00000000000000000003.snapshot"))}
    assert entries[PID].last_seq == 1 and entries[9].current_txn_first_offset == 2
    log = open_log(log_dir, recovery_point=3)
    assert log.append_as_leader(batch(2, seq=0), 0).duplicate
    assert log.first_unstable_offset() == 2


def test_state_is_rebuilt_from_the_log_after_a_crash(log_dir):
    log = open_log(log_dir, segment_bytes=300)
    for i in range(6):  # several segments, a snapshot at each roll
        log.append_as_leader(batch(2, seq=2 * i, txn=True), 0)
        log.append_as_leader(marker(i % 2 == 0), 0, from_client=False)
    assert len(log.segments) > 2
    aborted = log.collect_aborted_txns(0, log.log_end_offset)
    assert [t.first_offset for t in aborted] == [3, 9, 15]  # the odd rounds abort
    log.flush()
    # A crash: no clean-shutdown snapshot, the newest snapshots and the transaction indexes are lost.
    for name in os.listdir(log_dir):
        if name.endswith(".txnindex"):
            os.unlink(os.path.join(log_dir, name))
    snaps = sorted(n for n in os.listdir(log_dir) if n.endswith(".snapshot"))
    for name in snaps[1:]:
        os.unlink(os.path.join(log_dir, name))
    log2 = open_log(log_dir, segment_bytes=300, recovery_point=0)
    assert log2.collect_aborted_txns(0, log2.log_end_offset) == aborted
    assert log2.append_as_leader(batch(2, seq=10, txn=True), 0).duplicate
    assert log2.producer_state.last_entry(PID).last_seq == 11


def test_truncation_reopens_a_transaction(log_dir):
    log = open_log(log_dir)
    log.append_as_leader(batch(2, seq=0, txn=True), 0)
    log.append_as_leader(marker(False), 0, from_client=False)
    assert log.first_unstable_offset() == 0  # ended, not yet replicated (no HW update)
    log.producer_state.on_high_watermark_updated(3)
    assert log.first_unstable_offset() is None
    log.truncate_to(2)  # the marker goes
    assert log.collect_aborted_txns(0, 10) == []
    assert log.first_unstable_offset() == 0
    assert log.producer_state.last_entry(PID).current_txn_first_offset == 0


def test_follower_builds_the_same_state(tmp_path):
    leader = open_log(str(tmp_path / "l" / "t-0"))
    follower = open_log(str(tmp_path / "f" / "t-0"))
    leader.append_as_leader(batch(2, seq=0, txn=True), 0)
    leader.append_as_leader(marker(False), 0, from_client=False)
    leader.append_as_leader(batch(1, seq=2), 0)
    follower.append_as_follower(leader.read_bytes(0, 1 << 20))
    assert follower.collect_aborted_txns(0, 10) == leader.collect_aborted_txns(0, 10) != []
    assert follower.producer_state.last_entry(PID).last_seq == 2
    # A leader failover: the follower now leads and still knows the producer's sequence.
    assert follower.append_as_leader(batch(1, seq=2), 0).duplicate


def test_expired_producers_are_forgotten(log_dir):
    log = open_log(log_dir, producer_id_expiration_ms=1000)
    b = build_batch([SimpleRecord(b"k", b"v", timestamp=5000)], producer_id=PID, producer_epoch=0, base_sequence=0)
    log.append_as_leader(b, 0)
    assert log.remove_expired_producers(5500) == 0
    assert log.remove_expired_producers(6000) == 1
    assert log.producer_state.last_entry(PID) is None


def test_snapshot_format_round_trip_and_crc(tmp_path):
    path = str(tmp_path / "00000000000000000042.snapshot")
    entry = ProducerStateEntry(7, 2, 9, 1234, 40, [BatchMetadata(19, 41, 9, 1234)])
    write_snapshot(path, [entry])
    data = open(path, "rb").read()
    assert struct.unpack_from(">h", data)[0] == 1 and len(data) == 2 + 4 + 4 + 46
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 2, 19, 41, 9, 1234, 9, 40)
    [back] = read_snapshot(path)
    assert (back.producer_id, back.producer_epoch, back.last_seq, back.first_seq, back.last_data_offset,
            back.coordinator_epoch, back.current_txn_first_offset) == (7, 2, 19, 10, 41, 9, 40)
    corrupt = bytearray(data)
    corrupt[-1] ^= 1
    open(path, "wb").write(bytes(corrupt))
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


def test_marker_batch_format():
    m = marker(True, pid=5, epoch=1, coordinator_epoch=12)
    assert end_txn_marker_type(m) == (1, 12)
    [record] = list(iter_records(m))
    assert record.key == struct.pack(">hh", 0, 1) and record.value == struct.pack(">hi", 0, 12)
    assert end_txn_marker_type(marker(False)) == (0, 0)
