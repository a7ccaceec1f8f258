"""The one path by which a transaction marker is written (the broker side of
Kafka's WriteTxnMarkers, KafkaApis.handleWriteTxnMarkersRequest): the COMMIT
or ABORT control batches go to the partition's leader replica, which appends
them with acks=all (cluster.partition.Partition.write_txn_markers: control
batches, the LSO and the aborted-transaction index); once a marker is written
to an ``__consumer_offsets`` partition, the group coordinator of that
partition completes the producer's pending transactional offset commits
(Kafka's GroupCoordinator.scheduleHandleTxnCompletion).

Both senders use it: the transaction coordinators (actors/transaction_coordinator.py,
through cluster/transactions/markers.py's retries) and the WriteTxnMarkers API
(net/apis/n27_write_txn_markers.py). Each passes its own way of reaching the
leader and the group coordinator; no Ray here.
"""
from __future__ import annotations

from typing import Awaitable, Callable, NamedTuple

from core.error_codes import ErrorCode
from core.naming import OFFSETS_TOPIC
from core.txn_messages import TxnCompletion, TxnMarker, TxnMarkerResult


class WrittenMarkers(NamedTuple):
    """A leader's answer to one partition's markers, and which broker's replica wrote them."""
    results: list[TxnMarkerResult]
    leader: int


# (topic, partition, markers) -> what the leader answered; failures become results, never raise.
WriteToLeader = Callable[[str, int, list[TxnMarker]], Awaitable[WrittenMarkers]]
# (__consumer_offsets partition, leader broker id, completions) -> None; failures are the callee's to log.
CompleteGroupTransactions = Callable[[int, int, list[TxnCompletion]], Awaitable[None]]


def completions(markers: list[TxnMarker], results: list[TxnMarkerResult]) -> list[TxnCompletion]:
    """The transactions whose markers were written: what the group coordinator completes."""
    return [TxnCompletion(m.producer_id, m.producer_epoch, m.committed)
            for m, r in zip(markers, results) if r.error == ErrorCode.none]


class TxnMarkerWriter:
    def __init__(self, write_to_leader: WriteToLeader, complete_group_transactions: CompleteGroupTransactions):
        self._write_to_leader = write_to_leader
        self._complete_group_transactions = complete_group_transactions

    async def write(self, topic: str, partition: int, markers: list[TxnMarker]) -> list[TxnMarkerResult]:
        """One partition's markers -> a TxnMarkerResult per marker (error, offset of its control batch)."""
        written = await self._write_to_leader(topic, partition, list(markers))
        if topic == OFFSETS_TOPIC:
            done = completions(markers, written.results)
            if done:
                await self._complete_group_transactions(partition, written.leader, done)
        return written.results
