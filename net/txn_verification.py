"""Transactional batches in a Produce request: who may send them, and
whether their partition is in a transaction (Kafka's KafkaApis and
ReplicaManager.handleProduceAppend, KIP-890 part 1).

* A request carrying transactional batches without a transactional id is
  refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as KafkaApis does:
  otherwise a principal with only WRITE on a topic could open, under a fresh
  producer id, a transaction no coordinator will ever end (it pins the LSO
  and stalls every read_committed consumer of the partition).
* With an authorized transactional id, the leader asks the coordinator of
  that id whether each partition is in the ongoing transaction of the
  batch's producer id and epoch (AddPartitionsToTxn verifyOnly) before it
  appends: a producer id the coordinator has not registered, or an epoch it
  has fenced, is refused. Kafka skips the question while the partition's
  producer state already holds an ongoing transaction of that producer; we
  ask on every transactional request (one coordinator call per request, for
  all its partitions), which is the same answer at the price of a hop.
  ``transaction.partition.verification.enable=false`` turns it off, as in Kafka.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

from core.error_codes import ErrorCode
from storage.record_batch import HEADER_SIZE, parse_header

_MAGIC_OFFSET = 16
_ATTRIBUTES_LOW_BYTE = 22  # attributes: int16 at 21; the transactional flag (0x10) is in its low byte
_TRANSACTIONAL_FLAG = 0x10

# Verification failures the client may retry: Kafka answers NOT_ENOUGH_REPLICAS
# for them (older clients retry it without refreshing metadata).
_RETRIABLE = frozenset((ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
                        ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, ErrorCode.request_timed_out))


class ProducerOf(NamedTuple):
    producer_id: int
    producer_epoch: int


def transactional_producer(records: bytes | None) -> ProducerOf | None:
    """The producer of the first batch of ``records`` if it is a transactional
    v2 batch (only the header is read), else None."""
    if not records or len(records) < HEADER_SIZE or records[_MAGIC_OFFSET] != 2 \
            or not records[_ATTRIBUTES_LOW_BYTE] & _TRANSACTIONAL_FLAG:
        return None
    header = parse_header(records, 0)
    return ProducerOf(header.producer_id, header.producer_epoch)


class Verdict(NamedTuple):
    """What verification answers for one partition that may not be appended."""
    error: ErrorCode
    message: str | None


async def verify(routing, transactional_id: str, producer: ProducerOf,
                 partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Verdict]:
    """Ask the coordinator; -> the partitions that must not be appended, with Kafka's answer."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    error, answer = await routing.verify_partitions(transactional_id, producer.producer_id,
                                                    producer.producer_epoch, wanted)
    codes = {tp: error for tp in wanted} if error is not None else \
        {tuple(tp): ErrorCode(code) for tp, code in answer.items()}
    refused = {}
    for tp in wanted:
        code = codes.get(tp, ErrorCode.invalid_txn_state)
        if code == ErrorCode.none:
            continue
        if code in (ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable):
            refused[tp] = Verdict(ErrorCode.invalid_txn_state, "Partition was not added to the transaction")
        elif code in _RETRIABLE:
            refused[tp] = Verdict(ErrorCode.not_enough_replicas, "Unable to verify the partition has been added to the "
                                                         f"transaction. Underlying error: {code.name.upper()}")
        else:  # INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, ...
            refused[tp] = Verdict(code, None)
    return refused
