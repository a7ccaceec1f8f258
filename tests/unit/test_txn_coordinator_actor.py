"""actors/transaction_coordinator.py without Ray: the actor class on an
asyncio loop, its __transaction_state partition and a data partition real
(cluster.partition.Partition over storage.log.Log) posing as replica actors.
Load by replay, appends, markers as control batches, reload after a move,
an ISR-only epoch change that keeps the state."""
from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from actors.transaction_coordinator import (TransactionCoordinatorActor, coordinator_actor_name,
                                            transaction_state_topic_spec)
from cluster.transactions.state_manager import TRANSACTION_STATE_TOPIC
from core.config import BrokerConfig
from core.txn_messages import AddPartitionsToTxn, EndTxn, InitProducerId, VerifyTxnPartitions
from storage.record_batch import HEADER, LOG_OVERHEAD, parse_header
from tests.unit.coordinator_fakes import BROKER, FakeReplica, make_replica

E = ErrorCode


def make_actor(data_replicas: dict) -> TransactionCoordinatorActor:
    config = BrokerConfig.from_sources(overrides=[("transaction.state.log.num.partitions", "1")]).as_dict()
    actor = TransactionCoordinatorActor(0, BROKER, 1, config)
    ids = iter(range(5000, 6000))

    async def generate():
        return next(ids)

    async def leader_of(topic, partition, refresh):
        if (topic, partition) in data_replicas:
            return BROKER
        actor._missing.add((topic, partition))  # as the partition state znode being gone does
        return None

    async def replica_handle(topic, partition, broker_id):
        return data_replicas[(topic, partition)]

    actor._generate_producer_id = generate
    actor._leader_of = leader_of
    actor._replica_handle = replica_handle
    return actor


async def wait_loaded(actor, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while True:
        state = await actor.state()
        if state["leading"] and not state["loading"]:
            return
        assert time.monotonic() < deadline, state
        await asyncio.sleep(0.01)


async def wait_state(actor, transactional_id, wanted, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while True:
        found = {t["transactional_id"]: t for t in await actor.transactions()}
        if transactional_id in found and found[transactional_id]["state"] == wanted \
                and found[transactional_id]["pending_state"] is None:
            return found[transactional_id]
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.01)


def control_batches(replica: FakeReplica) -> list:
    partition = replica.partition
    result = partition.read(0, 1 << 20, 0, partition.leader_epoch)
    assert result.error == 0
    out = []
    for piece in result.slices:
        with open(piece.path, "rb") as f:
            f.seek(piece.position)
            data = f.read(piece.length)
        pos = 0
        while pos + 61 <= len(data):
            size = HEADER.unpack_from(data, pos)[1] + LOG_OVERHEAD
            header = parse_header(data, pos)
            if header.is_control:
                out.append((header.producer_id, header.producer_epoch))
            pos += size
    return out


def test_names_and_topic_spec():
    assert coordinator_actor_name(3, 1001) == "txn-coordinator-3@1001"
    config = BrokerConfig.from_sources(overrides=[("transaction.state.log.num.partitions", "4")])
    spec = transaction_state_topic_spec(config, live_brokers=1)
    assert spec.name == TRANSACTION_STATE_TOPIC and spec.num_partitions == 4
    assert spec.replication_factor == 1
    assert spec.configs["cleanup.policy"] == "compact"
    assert spec.configs["min.insync.replicas"] == "1"  # capped at the replication factor
    assert spec.configs["compression.type"] == "uncompressed"


def test_commit_writes_markers_and_survives_a_move(tmp_path):
    async def main():
        txn_log = make_replica(tmp_path, TRANSACTION_STATE_TOPIC, 0)
        data = make_replica(tmp_path, "t", 0)
        actor = make_actor({("t", 0): data})
        not_elected = await actor.init_producer_id(InitProducerId("tx", 60000))
        assert not_elected.error == E.not_coordinator
        assert await actor.elect(0, txn_log) == 0
        await wait_loaded(actor)
        init = await actor.init_producer_id(InitProducerId("tx", 60000))
        assert init == (E.none, 5000, 0)
        assert await actor.add_partitions(AddPartitionsToTxn("tx", 5000, 0, [("t", 0)])) == 0
        assert await actor.verify_partitions(VerifyTxnPartitions("tx", 5000, 0, [("t", 0), ("t", 1)])) == \
            {("t", 0): 0, ("t", 1): int(E.transaction_abortable)}
        assert (await actor.end_txn(EndTxn("tx", 5000, 0, True))).error == E.none
        await wait_state(actor, "tx", "CompleteCommit")
        assert control_batches(data) == [(5000, 0)]
        assert txn_log.partition.state()["log_end_offset"] == 4  # Empty, Ongoing, PrepareCommit, CompleteCommit

        # An ISR-only change (same leader, next epoch): no reload, the state stays.
        appends = (await actor.state())["appends"]
        assert txn_log.partition.make_leader(1, 1, [BROKER], [BROKER]) == 0
        assert await actor.elect(1, txn_log) == 0
        assert not (await actor.state())["loading"]
        assert await actor.add_partitions(AddPartitionsToTxn("tx", 5000, 0, [("t", 0)])) == 0
        assert (await actor.state())["appends"] == appends + 1

        # The partition moves: this one resigns, a fresh coordinator replays the log.
        assert await actor.resign(2) == 0
        assert (await actor.end_txn(EndTxn("tx", 5000, 0, False))).error == E.not_coordinator
        assert txn_log.partition.make_leader(1, 2, [BROKER], [BROKER]) == 0
        fresh = make_actor({("t", 0): data})
        assert await fresh.elect(2, txn_log) == 0
        await wait_loaded(fresh)
        found = await wait_state(fresh, "tx", "Ongoing")
        assert found["partitions"] == [("t", 0)] and found["producer_id"] == 5000
        assert (await fresh.end_txn(EndTxn("tx", 5000, 0, False))).error == E.none
        await wait_state(fresh, "tx", "CompleteAbort")
        assert control_batches(data) == [(5000, 0), (5000, 0)]
        # a stale elect is refused
        assert await fresh.elect(1, txn_log) == int(E.fenced_leader_epoch)
        for a in (actor, fresh):
            for task in a._timers:
                task.cancel()
    asyncio.run(main())


def test_markers_to_a_deleted_topic_are_dropped(tmp_path):
    async def main():
        txn_log = make_replica(tmp_path, TRANSACTION_STATE_TOPIC, 0)
        data = make_replica(tmp_path, "t", 0)
        actor = make_actor({("t", 0): data})
        await actor.elect(0, txn_log)
        await wait_loaded(actor)
        init = await actor.init_producer_id(InitProducerId("tx", 60000))
        assert await actor.add_partitions(AddPartitionsToTxn("tx", init.producer_id, 0,
                                                             [("t", 0), ("gone", 0)])) == 0
        assert (await actor.end_txn(EndTxn("tx", init.producer_id, 0, True))).error == E.none
        await wait_state(actor, "tx", "CompleteCommit")
        state = await actor.state()
        assert state["markers_dropped"] == 1 and state["markers_written"] == 1
        for task in actor._timers:
            task.cancel()
    asyncio.run(main())
