"""net/txn_verification.py without Ray: which batches are transactional, and
what a KIP-890 verification answer means to the producer (issue 28 item 4)."""
from __future__ import annotations

import asyncio

from core.error_codes import ErrorCode as E
from net.txn_verification import ProducerOf, transactional_producer, verify
from storage.records import build_batch


def test_only_transactional_v2_batches_are_named():
    txn = build_batch([(b"k", b"v", [])], producer_id=7, producer_epoch=2, base_sequence=0, is_transactional=True)
    idempotent = build_batch([(b"k", b"v", [])], producer_id=7, producer_epoch=2, base_sequence=0)
    assert transactional_producer(txn) == ProducerOf(7, 2)
    assert transactional_producer(idempotent) is None
    assert transactional_producer(build_batch([(b"k", b"v", [])])) is None
    assert transactional_producer(b"") is None and transactional_producer(None) is None
    assert transactional_producer(txn[:30]) is None  # too short to be a batch: the leader's checks answer


class Routing:
    def __init__(self, error=None, answer=None):
        self.error, self.answer, self.asked = error, answer, []

    async def verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions)))
        return self.error, self.answer


def test_verification_answers_as_kafka_does():
    routing = Routing(answer={("t", 0): 0, ("t", 1): int(E.transaction_abortable),
                              ("t", 2): int(E.producer_fenced)})
    refused = asyncio.run(verify(routing, "tx", ProducerOf(7, 2), [("t", 0), ("t", 1), ("t", 2)]))
    assert routing.asked == [("tx", 7, 2, [("t", 0), ("t", 1), ("t", 2)])]
    assert set(refused) == {("t", 1), ("t", 2)}
    assert refused[("t", 1)].error == E.invalid_txn_state
    assert refused[("t", 1)].message == "Partition was not added to the transaction"
    assert refused[("t", 2)].error == E.producer_fenced
    # A coordinator that cannot answer: retriable for every client, as Kafka's NOT_ENOUGH_REPLICAS.
    unreachable = asyncio.run(verify(Routing(error=E.not_coordinator), "tx", ProducerOf(7, 2), [("t", 0)]))
    assert unreachable[("t", 0)].error == E.not_enough_replicas
    assert asyncio.run(verify(Routing(), "tx", ProducerOf(7, 2), [])) == {}
