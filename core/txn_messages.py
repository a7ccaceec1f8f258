"""What crosses actor boundaries for idempotence and transactions (KIP-98).

Named types only: the edge asks the transaction coordinator of a
transactional id one request per API (InitProducerId, AddPartitionsToTxn,
its KIP-890 verification, EndTxn, DescribeTransactions, ListTransactions);
the transaction coordinator asks partition leaders to write
markers (Kafka's WriteTxnMarkers, as actor calls), and tells group
coordinators that a producer's transactional offset commits are decided
(Kafka's ``GroupCoordinator.scheduleHandleTxnCompletion``).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

from core.error_codes import ErrorCode

# Who appends: Kafka's AppendOrigin. Producers are checked for sequence and
# epoch; coordinators (group offsets, transaction markers) write batches with
# a producer id but no sequence; replication trusts the leader.
ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
ORIGIN_REPLICATION = "replication"


class TxnMarker(NamedTuple):
    """One COMMIT or ABORT control batch for one partition."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool  # True: COMMIT marker, False: ABORT marker


class TxnMarkerResult(NamedTuple):
    error: ErrorCode  # Kafka error code, none when written and replicated (acks=all)
    offset: int  # offset of the control batch, -1 on error


class TxnCompletion(NamedTuple):
    """A producer's transaction on an ``__consumer_offsets`` partition ended:
    its pending TxnOffsetCommits become committed offsets, or are dropped."""

    producer_id: int
    producer_epoch: int
    committed: bool


class ProducerStateInfo(NamedTuple):
    """One active producer of a partition (DescribeProducers, API 61)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 without an open transaction


class DescribeProducersResult(NamedTuple):
    error: ErrorCode
    producers: tuple[ProducerStateInfo, ...]


# ---- edge -> transaction coordinator ---------------------------------------------------------------
class InitProducerId(NamedTuple):
    transactional_id: Optional[str]
    transaction_timeout_ms: int
    expected: Optional[tuple[int, int]] = None  # KIP-360: the (producer id, epoch) the producer has


class AddPartitionsToTxn(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: Sequence[tuple[str, int]]


class VerifyTxnPartitions(NamedTuple):
    """KIP-890: are ``partitions`` in the producer's ongoing transaction? (asked by a leader)"""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: Sequence[tuple[str, int]]


class EndTxn(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


class DescribeTransactions(NamedTuple):
    transactional_ids: Sequence[str]


class ListTransactions(NamedTuple):
    producer_ids: Sequence[int] = ()
    states: Sequence[str] = ()
    duration_ms: int = -1  # KIP-994: only transactions running longer than this
