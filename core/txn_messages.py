"""What crosses actor boundaries for idempotence and transactions (KIP-98).

Named types only: the transaction coordinator asks partition leaders to write
markers (Kafka's WriteTxnMarkers, as actor calls), and tells group
coordinators that a producer's transactional offset commits are decided
(Kafka's ``GroupCoordinator.scheduleHandleTxnCompletion``).
"""
from __future__ import annotations

from typing import NamedTuple

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
