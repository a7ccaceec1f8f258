"""cluster/transactions/marker_writer.TxnMarkerWriter (no Ray): the one path
markers are written by. Markers go to the partition's leader; on an
__consumer_offsets partition the transactions whose markers were written, and
only those, are completed at that partition's group coordinator."""
import asyncio

from cluster.transactions.marker_writer import TxnMarkerWriter, WrittenMarkers
from core.error_codes import ErrorCode
from core.txn_messages import TxnCompletion, TxnMarker, TxnMarkerResult

COMMIT_1 = TxnMarker(1000, 2, 7, True)
ABORT_2 = TxnMarker(2000, 0, 7, False)


def writer(answers, completed, leader=3):
    sent = []

    async def to_leader(topic, partition, markers):
        sent.append((topic, partition, list(markers)))
        return WrittenMarkers(answers, leader)

    async def complete(partition, leader_id, done):
        completed.append((partition, leader_id, done))

    return TxnMarkerWriter(to_leader, complete), sent


def test_markers_on_the_offsets_topic_complete_the_written_transactions():
    completed = []
    w, sent = writer([TxnMarkerResult(ErrorCode.none, 41), TxnMarkerResult(ErrorCode.not_enough_replicas, -1)],
                     completed)
    results = asyncio.run(w.write("__consumer_offsets", 5, [COMMIT_1, ABORT_2]))
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.not_enough_replicas]
    assert sent == [("__consumer_offsets", 5, [COMMIT_1, ABORT_2])]
    assert completed == [(5, 3, [TxnCompletion(1000, 2, True)])]


def test_markers_elsewhere_complete_nothing_and_failures_complete_nothing():
    completed = []
    w, _ = writer([TxnMarkerResult(ErrorCode.none, 9)], completed)
    assert [r.offset for r in asyncio.run(w.write("orders", 0, [COMMIT_1]))] == [9]
    w, _ = writer([TxnMarkerResult(ErrorCode.not_leader_or_follower, -1)], completed)
    asyncio.run(w.write("__consumer_offsets", 1, [COMMIT_1]))
    assert completed == []
