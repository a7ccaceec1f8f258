"""The Spark source's read_committed decoding: what a Kafka consumer skips
(aborted transactions' batches, markers) given a fetch's aborted list."""
from spark.decode import AbortedTransactions, ArrowBuilder
from storage.log import Log, LogConfig
from storage.producer_state import build_end_txn_marker
from storage.records import build_batch


def _txn(pid, seq, value):
    return build_batch([(b"k", value, [])], producer_id=pid, producer_epoch=0, base_sequence=seq,
                       is_transactional=True)


def test_aborted_batches_and_markers_are_skipped(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append_as_leader(_txn(5, 0, b"aborted"), 0)  # 0
    log.append_as_leader(_txn(6, 0, b"committed-6"), 0)  # 1
    log.append_as_leader(build_end_txn_marker(5, 0, 0, False, 1), 0, from_client=False)  # 2
    log.append_as_leader(build_end_txn_marker(6, 0, 0, True, 1), 0, from_client=False)  # 3
    log.append_as_leader(_txn(5, 1, b"committed-5"), 0)  # 4: producer 5's next transaction
    log.append_as_leader(build_end_txn_marker(5, 0, 0, True, 1), 0, from_client=False)  # 5
    log.append_as_leader(build_batch([(b"k", b"plain", [])]), 0)  # 6
    records = log.read_bytes(0, 1 << 20)
    aborted = [(t.producer_id, t.first_offset) for t in log.collect_aborted_txns(0, 7)]
    assert aborted == [(5, 0)]

    committed = ArrowBuilder("t", 0, False)
    committed.aborted = AbortedTransactions()
    committed.aborted.add(aborted)
    assert committed.add(records, 0, 7) == (7, True)
    assert committed.take().column("value").to_pylist() == [b"committed-6", b"committed-5", b"plain"]

    everything = ArrowBuilder("t", 0, False)
    everything.add(records, 0, 7)
    assert everything.take().column("value").to_pylist() == [b"aborted", b"committed-6", b"committed-5", b"plain"]
