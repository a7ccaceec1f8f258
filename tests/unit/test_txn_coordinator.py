"""TransactionCoordinator + TransactionStateManager + markers, without Ray:
a fake __transaction_state (a list of records), a fake marker writer and a
manual clock."""
import asyncio

import pytest
from kio.schema.errors import ErrorCode as E

from cluster.transactions.coordinator import TransactionCoordinator
from cluster.transactions.log_records import TransactionState as S
from cluster.transactions.log_records import decode_key, decode_value
from cluster.transactions.markers import TransactionMarkerChannelManager
from cluster.transactions.metadata import IllegalStateError, TransactionMetadata
from cluster.transactions.state_manager import (TransactionConfig, TransactionStateManager,
                                                partition_for_transactional_id, replay)
from core.txn_messages import TxnMarkerResult

NUM_PARTITIONS = 3


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


class FakeLog:
    """__transaction_state: records per partition; errors to inject."""

    def __init__(self):
        self.records: dict[int, list] = {}
        self.fail_next: list[E] = []
        self.calls = 0

    async def append(self, partition, records):
        self.calls += 1
        await asyncio.sleep(0)
        if self.fail_next:
            return self.fail_next.pop(0)
        self.records.setdefault(partition, []).extend(records)
        return E.none

    def decoded(self, partition):
        return [(decode_key(k), decode_value(v)) for k, v in self.records.get(partition, [])]


class FakeWriter:
    def __init__(self):
        self.written: list = []  # (topic, partition, marker)
        self.errors: dict = {}  # (topic, partition) -> [error codes to answer first]
        self.calls = 0

    async def write(self, topic, partition, markers):
        self.calls += 1
        await asyncio.sleep(0)
        queue = self.errors.get((topic, partition))
        if queue:
            error = queue.pop(0)
            if isinstance(error, Exception):
                raise error
            return [TxnMarkerResult(int(error), -1) for _ in markers]
        out = []
        for marker in markers:
            self.written.append((topic, partition, marker))
            out.append(TxnMarkerResult(0, len(self.written)))
        return out


async def _no_sleep(_s):
    await asyncio.sleep(0)


class Harness:
    def __init__(self, config=None, owned=range(NUM_PARTITIONS), epoch=5):
        self.clock = Clock()
        self.log = FakeLog()
        self.writer = FakeWriter()
        self.config = config or TransactionConfig(num_partitions=NUM_PARTITIONS, max_timeout_ms=900_000,
                                                  id_expiration_ms=10_000, abort_interval_ms=1000)
        self.state = TransactionStateManager(self.config, self.log.append, self.clock)
        self.markers = TransactionMarkerChannelManager(self.state, self.writer.write,
                                                       partition_exists=lambda t, p: t != "deleted",
                                                       sleep=_no_sleep)
        self.next_pid = 1000
        self.coordinator = TransactionCoordinator(self.state, self.markers, self._pid)
        for p in owned:
            self.state.begin_loading(p, epoch)
            self.coordinator.on_election(p, epoch, [])

    async def _pid(self):
        self.next_pid += 1
        return self.next_pid - 1

    def meta(self, txn_id) -> TransactionMetadata:
        return self.state.get(txn_id)[1].metadata

    async def settle(self):
        for _ in range(50):
            await asyncio.sleep(0)


def run(coro):
    return asyncio.run(coro)


async def _begin(h, txn="tx", partitions=(("t", 0), ("t", 1))):
    init = await h.coordinator.handle_init_producer_id(txn, 60000)
    assert init.error == E.none
    error = await h.coordinator.handle_add_partitions(txn, init.producer_id, init.producer_epoch, set(partitions))
    assert error == E.none
    return init


def test_partition_for_is_kafkas_java_hash():
    # "tx".hashCode() = 't'*31 + 'x' = 116*31 + 120 = 3716
    assert partition_for_transactional_id("tx", 50) == 3716 % 50
    assert partition_for_transactional_id("polygenelubricants", 7) == (-2147483648 & 0x7FFFFFFF) % 7


def test_init_producer_id_new_then_bump():
    async def main():
        h = Harness()
        first = await h.coordinator.handle_init_producer_id("tx", 60000)
        assert first == (E.none, 1000, 0)
        second = await h.coordinator.handle_init_producer_id("tx", 30000)
        assert second == (E.none, 1000, 1)
        m = h.meta("tx")
        assert (m.state, m.producer_epoch, m.last_producer_epoch, m.txn_timeout_ms) == (S.EMPTY, 1, -1, 30000)
        p = h.state.partition_for("tx")
        assert [(k, v.producer_epoch, v.transaction_status) for k, v in h.log.decoded(p)] == \
            [("tx", 0, S.EMPTY), ("tx", 1, S.EMPTY)]
    run(main())


def test_init_producer_id_without_transactional_id_and_bad_requests():
    async def main():
        h = Harness()
        assert await h.coordinator.handle_init_producer_id(None, 0) == (E.none, 1000, 0)
        assert await h.coordinator.handle_init_producer_id(None, 0, (1000, 0)) == (E.none, 1001, 0)
        assert (await h.coordinator.handle_init_producer_id("", 60000)).error == E.invalid_request
        assert (await h.coordinator.handle_init_producer_id("tx", 900_001)).error == E.invalid_transaction_timeout
        assert (await h.coordinator.handle_init_producer_id("tx", 0)).error == E.invalid_transaction_timeout
        assert h.log.calls == 0
    run(main())


def test_not_coordinator_and_loading():
    async def main():
        h = Harness(owned=[])
        assert (await h.coordinator.handle_init_producer_id("tx", 60000)).error == E.not_coordinator
        p = h.state.partition_for("tx")
        h.state.begin_loading(p, 1)
        assert (await h.coordinator.handle_init_producer_id("tx", 60000)).error == E.coordinator_load_in_progress
        assert await h.coordinator.handle_add_partitions("tx", 1, 0, {("t", 0)}) == E.coordinator_load_in_progress
        h.coordinator.on_election(p, 1, [])
        assert (await h.coordinator.handle_init_producer_id("tx", 60000)).error == E.none
        h.coordinator.on_resignation(p, 1)
        assert (await h.coordinator.handle_end_transaction("tx", 1000, 0, True)).error == E.not_coordinator
    run(main())


def test_commit_writes_markers_then_complete():
    async def main():
        h = Harness()
        init = await _begin(h)
        m = h.meta("tx")
        assert m.state == S.ONGOING and m.topic_partitions == {("t", 0), ("t", 1)}
        assert m.txn_start_timestamp == h.clock.now
        result = await h.coordinator.handle_end_transaction("tx", init.producer_id, init.producer_epoch, True)
        assert result == (E.none, 1000, 0)
        await h.settle()
        assert sorted((t, p, mk.committed, mk.producer_id, mk.coordinator_epoch) for t, p, mk in h.writer.written) \
            == [("t", 0, True, 1000, 5), ("t", 1, True, 1000, 5)]
        assert m.state == S.COMPLETE_COMMIT and m.pending_state is None and not m.topic_partitions
        states = [v.transaction_status for _, v in h.log.decoded(h.state.partition_for("tx"))]
        assert states == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        # a retried EndTxn(commit) is answered OK, an abort now is INVALID_TXN_STATE
        assert (await h.coordinator.handle_end_transaction("tx", 1000, 0, True)).error == E.none
        assert (await h.coordinator.handle_end_transaction("tx", 1000, 0, False)).error == E.invalid_txn_state
        # the next transaction starts from CompleteCommit
        assert await h.coordinator.handle_add_partitions("tx", 1000, 0, {("u", 0)}) == E.none
        assert h.meta("tx").topic_partitions == {("u", 0)}
    run(main())


def test_abort_and_end_txn_errors():
    async def main():
        h = Harness()
        init = await h.coordinator.handle_init_producer_id("tx", 60000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert (await h.coordinator.handle_end_transaction("tx", pid, epoch, True)).error == E.invalid_txn_state
        assert (await h.coordinator.handle_end_transaction("nope", pid, epoch, True)).error == \
            E.invalid_producer_id_mapping
        await h.coordinator.handle_add_partitions("tx", pid, epoch, {("t", 0)})
        assert (await h.coordinator.handle_end_transaction("tx", pid + 1, epoch, True)).error == \
            E.invalid_producer_id_mapping
        assert (await h.coordinator.handle_end_transaction("tx", pid, epoch + 1, True)).error == E.producer_fenced
        assert (await h.coordinator.handle_end_transaction("", pid, epoch, True)).error == E.invalid_request
        h.writer.errors[("t", 0)] = [E.not_leader_or_follower, E.request_timed_out]
        assert (await h.coordinator.handle_end_transaction("tx", pid, epoch, False)).error == E.none
        # while the markers are under way: CONCURRENT_TRANSACTIONS for the same result, INVALID_TXN_STATE otherwise
        assert (await h.coordinator.handle_end_transaction("tx", pid, epoch, False)).error == E.concurrent_transactions
        assert (await h.coordinator.handle_add_partitions("tx", pid, epoch, {("t", 1)})) == E.concurrent_transactions
        assert (await h.coordinator.handle_init_producer_id("tx", 60000)).error == E.concurrent_transactions
        await h.settle()
        assert [(t, p, mk.committed) for t, p, mk in h.writer.written] == [("t", 0, False)]
        assert h.writer.calls == 3 and h.markers.counters["marker_retries"] == 2
        assert h.meta("tx").state == S.COMPLETE_ABORT
    run(main())


def test_add_partitions_errors():
    async def main():
        h = Harness()
        assert await h.coordinator.handle_add_partitions("tx", 1, 0, {("t", 0)}) == E.invalid_producer_id_mapping
        init = await h.coordinator.handle_init_producer_id("tx", 60000)
        pid = init.producer_id
        assert await h.coordinator.handle_add_partitions("tx", pid + 5, 0, {("t", 0)}) == E.invalid_producer_id_mapping
        assert await h.coordinator.handle_add_partitions("tx", pid, 3, {("t", 0)}) == E.producer_fenced
        assert await h.coordinator.handle_add_partitions("", pid, 0, {("t", 0)}) == E.invalid_request
        assert await h.coordinator.handle_add_partitions("tx", pid, 0, {("t", 0)}) == E.none
        calls = h.log.calls
        assert await h.coordinator.handle_add_partitions("tx", pid, 0, {("t", 0)}) == E.none  # already in: no write
        assert h.log.calls == calls
        # a failed append: the error mapped as Kafka does, the pending state cleared
        h.log.fail_next = [E.not_leader_or_follower]
        assert await h.coordinator.handle_add_partitions("tx", pid, 0, {("t", 9)}) == E.not_coordinator
        h.log.fail_next = [E.request_timed_out]
        assert await h.coordinator.handle_add_partitions("tx", pid, 0, {("t", 9)}) == E.coordinator_not_available
        h.log.fail_next = [E.message_too_large]
        assert await h.coordinator.handle_add_partitions("tx", pid, 0, {("t", 9)}) == E.unknown_server_error
        assert h.meta("tx").pending_state is None and h.meta("tx").topic_partitions == {("t", 0)}
        assert await h.coordinator.handle_add_partitions("tx", pid, 0, {("t", 9)}) == E.none
        assert h.meta("tx").topic_partitions == {("t", 0), ("t", 9)}
    run(main())


def test_concurrent_add_partitions_while_append_pending():
    async def main():
        h = Harness()
        init = await h.coordinator.handle_init_producer_id("tx", 60000)
        first = asyncio.ensure_future(h.coordinator.handle_add_partitions("tx", init.producer_id, 0, {("t", 0)}))
        await asyncio.sleep(0)
        second = await h.coordinator.handle_add_partitions("tx", init.producer_id, 0, {("t", 1)})
        assert second == E.concurrent_transactions
        assert await first == E.none
    run(main())


def test_verify_only():
    async def main():
        h = Harness()
        init = await _begin(h, partitions=[("t", 0)])
        verify = h.coordinator.handle_verify_partitions
        assert verify("tx", init.producer_id, 0, {("t", 0), ("t", 1)}) == \
            {("t", 0): E.none, ("t", 1): E.transaction_abortable}
        assert verify("tx", init.producer_id, 1, {("t", 0)}) == {("t", 0): E.producer_fenced}
        assert verify("tx", 77, 0, {("t", 0)}) == {("t", 0): E.invalid_producer_id_mapping}
        assert verify("zz", 77, 0, {("t", 0)}) == {("t", 0): E.invalid_producer_id_mapping}
        assert verify("", 77, 0, {("t", 0)}) == {("t", 0): E.invalid_request}
        assert h.meta("tx").topic_partitions == {("t", 0)}  # nothing added
    run(main())


def test_second_producer_fences_open_transaction():
    async def main():
        h = Harness()
        first = await _begin(h)
        # a new producer with the same id: the open transaction is aborted at a bumped epoch
        again = await h.coordinator.handle_init_producer_id("tx", 60000)
        assert again.error == E.concurrent_transactions
        m = h.meta("tx")
        assert m.producer_epoch == 1  # fenced at once, before the markers
        # the old producer is fenced
        assert (await h.coordinator.handle_end_transaction("tx", first.producer_id, 0, True)).error == \
            E.producer_fenced
        assert await h.coordinator.handle_add_partitions("tx", first.producer_id, 0, {("x", 0)}) == E.producer_fenced
        await h.settle()
        assert m.state == S.COMPLETE_ABORT
        assert sorted((t, p, mk.committed, mk.producer_epoch) for t, p, mk in h.writer.written) == \
            [("t", 0, False, 1), ("t", 1, False, 1)]
        # the retry gets the epoch bumped once more
        assert await h.coordinator.handle_init_producer_id("tx", 60000) == (E.none, first.producer_id, 2)
        statuses = [(v.transaction_status, v.producer_epoch) for _, v in h.log.decoded(h.state.partition_for("tx"))]
        assert statuses == [(S.EMPTY, 0), (S.ONGOING, 0), (S.PREPARE_ABORT, 1), (S.COMPLETE_ABORT, 1), (S.EMPTY, 2)]
    run(main())


def test_failed_epoch_fence_does_not_bump_twice():
    async def main():
        h = Harness()
        await _begin(h)
        h.log.fail_next = [E.request_timed_out]
        assert (await h.coordinator.handle_init_producer_id("tx", 60000)).error == E.coordinator_not_available
        m = h.meta("tx")
        assert m.has_failed_epoch_fence and m.producer_epoch == 1 and m.pending_state is None
        assert (await h.coordinator.handle_init_producer_id("tx", 60000)).error == E.concurrent_transactions
        await h.settle()
        assert m.producer_epoch == 1 and m.state == S.COMPLETE_ABORT and not m.has_failed_epoch_fence
    run(main())


def test_kip360_bump_with_expected_epoch():
    async def main():
        h = Harness()
        init = await h.coordinator.handle_init_producer_id("tx", 60000)
        pid = init.producer_id
        bumped = await h.coordinator.handle_init_producer_id("tx", 60000, (pid, 0))
        assert bumped == (E.none, pid, 1)
        assert h.meta("tx").last_producer_epoch == 0
        # a retry of that bump (the producer still holds epoch 0): the same epoch again
        assert await h.coordinator.handle_init_producer_id("tx", 60000, (pid, 0)) == (E.none, pid, 1)
        # another producer initialises without an expected epoch: the last epoch is forgotten
        assert await h.coordinator.handle_init_producer_id("tx", 60000) == (E.none, pid, 2)
        # the old one now is fenced
        assert (await h.coordinator.handle_init_producer_id("tx", 60000, (pid, 0))).error == E.producer_fenced
        assert (await h.coordinator.handle_init_producer_id("tx", 60000, (pid + 7, 2))).error == E.producer_fenced
    run(main())


def test_epoch_exhaustion_rotates_producer_id():
    async def main():
        h = Harness()
        init = await h.coordinator.handle_init_producer_id("tx", 60000)
        m = h.meta("tx")
        m.producer_epoch = 32766  # as if after many bumps
        rotated = await h.coordinator.handle_init_producer_id("tx", 60000, (init.producer_id, 32766))
        assert rotated == (E.none, 1001, 0)
        assert (m.producer_id, m.previous_producer_id, m.last_producer_epoch) == (1001, 1000, 32766)
        # a retry of the rotation (the producer never heard back): the old id at the
        # exhausted epoch is accepted and answered with the new id, unchanged
        assert await h.coordinator.handle_init_producer_id("tx", 60000, (1000, 32766)) == (E.none, 1001, 0)
        # the old id at another epoch is fenced
        assert (await h.coordinator.handle_init_producer_id("tx", 60000, (1000, 5))).error == E.producer_fenced
    run(main())


def test_fence_at_max_epoch_is_refused():
    m = TransactionMetadata("tx", 1, 32767, 1000, S.ONGOING, {("t", 0)}, 0, 0)
    with pytest.raises(IllegalStateError):
        m.prepare_fence_producer_epoch()


def test_illegal_transitions_raise():
    m = TransactionMetadata("tx", 1, 0, 1000, S.EMPTY)
    with pytest.raises(IllegalStateError):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, 5)
    t = m.prepare_add_partitions({("t", 0)}, 5)
    with pytest.raises(IllegalStateError):  # one pending transition at a time
        m.prepare_add_partitions({("t", 1)}, 5)
    m.complete_transition_to(t)
    assert m.state == S.ONGOING
    stale = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 6)
    m.pending_state = S.PREPARE_ABORT  # a different pending target
    with pytest.raises(IllegalStateError):
        m.complete_transition_to(stale)


def test_timed_out_transaction_is_aborted_and_producer_fenced():
    async def main():
        h = Harness()
        init = await h.coordinator.handle_init_producer_id("tx", 5000)
        await h.coordinator.handle_add_partitions("tx", init.producer_id, 0, {("t", 0)})
        h.clock.now += 5000
        assert await h.coordinator.abort_timed_out_transactions() == 0  # not past it yet
        h.clock.now += 1
        assert await h.coordinator.abort_timed_out_transactions() == 1
        await h.settle()
        m = h.meta("tx")
        assert m.state == S.COMPLETE_ABORT and m.producer_epoch == 1
        assert [(mk.committed, mk.producer_epoch) for _, _, mk in h.writer.written] == [(False, 1)]
        assert (await h.coordinator.handle_end_transaction("tx", init.producer_id, 0, True)).error == \
            E.producer_fenced
        assert await h.coordinator.abort_timed_out_transactions() == 0
    run(main())


def test_expired_transactional_ids_get_tombstones():
    async def main():
        h = Harness()
        await h.coordinator.handle_init_producer_id("idle", 60000)
        await _begin(h, "busy")
        p_idle = h.state.partition_for("idle")
        h.clock.now += 10_000
        assert await h.state.remove_expired_transactional_ids() == 1  # an Ongoing one is never expired
        assert h.state.get("idle") == (E.none, None)
        assert h.log.decoded(p_idle)[-1] == ("idle", None)
        assert h.state.get("busy")[1] is not None
        # a failed tombstone write keeps the id
        await h.coordinator.handle_init_producer_id("idle2", 60000)
        h.clock.now += 20_000
        h.log.fail_next = [E.not_leader_or_follower]
        assert await h.state.remove_expired_transactional_ids() == 0
        assert h.state.get("idle2")[1].metadata.pending_state is None
    run(main())


def test_reload_from_records_resends_markers_of_prepared_transactions():
    async def main():
        h = Harness()
        init = await _begin(h, partitions=[("t", 0), ("deleted", 0)])
        h.writer.errors[("t", 0)] = [E.not_leader_or_follower] * 1000  # markers stuck
        await h.coordinator.handle_end_transaction("tx", init.producer_id, 0, True)
        await h.settle()
        p = h.state.partition_for("tx")
        records = list(h.log.records[p])
        # the partition moves to another coordinator (a new leader epoch): it replays and finishes
        h.coordinator.on_resignation(p, 5)
        h2 = Harness(owned=[], epoch=6)
        h2.log.records[p] = records
        h2.writer.errors[("deleted", 0)] = [E.unknown_topic_or_partition]
        h2.state.begin_loading(p, 6)
        assert h2.coordinator.on_election(p, 6, records) == 1
        await h2.settle()
        m = h2.meta("tx")
        assert m.state == S.COMPLETE_COMMIT and m.producer_id == init.producer_id
        assert [(t, p_, mk.coordinator_epoch) for t, p_, mk in h2.writer.written] == [("t", 0, 6)]
        assert h2.markers.counters["markers_dropped"] == 1
        # and replaying everything gives the same state
        final = replay(h2.log.records[p])
        assert final["tx"].state == S.COMPLETE_COMMIT
    run(main())


def test_markers_stop_when_fenced_or_resigned():
    async def main():
        h = Harness()
        init = await _begin(h, partitions=[("t", 0)])
        h.writer.errors[("t", 0)] = [E.transaction_coordinator_fenced]
        await h.coordinator.handle_end_transaction("tx", init.producer_id, 0, True)
        await h.settle()
        assert h.writer.written == [] and h.markers.pending_transactional_ids() == []
        assert h.meta("tx").state == S.PREPARE_COMMIT  # nothing more written by this coordinator

        h = Harness()
        init = await _begin(h, partitions=[("t", 0)])
        h.writer.errors[("t", 0)] = [E.not_leader_or_follower] * 1000
        await h.coordinator.handle_end_transaction("tx", init.producer_id, 0, False)
        await h.settle()
        assert h.markers.pending_transactional_ids() == ["tx"]
        h.coordinator.on_resignation(h.state.partition_for("tx"), 5)
        await h.settle()
        assert h.markers.pending_transactional_ids() == []
        await h.markers.close()
    run(main())


def test_complete_write_retried_on_coordinator_not_available():
    async def main():
        h = Harness()
        init = await _begin(h, partitions=[("t", 0)])
        await h.coordinator.handle_end_transaction("tx", init.producer_id, 0, True)
        h.log.fail_next = [E.request_timed_out, E.not_enough_replicas]
        await h.settle()
        assert h.meta("tx").state == S.COMPLETE_COMMIT
    run(main())


def test_markers_of_many_transactions_share_calls():
    async def main():
        h = Harness()
        inits = [await _begin(h, f"tx{i}", partitions=[("t", 0)]) for i in range(5)]
        h.writer.errors[("t", 0)] = [E.request_timed_out]  # the first call fails: the rest queue up
        results = await asyncio.gather(*(h.coordinator.handle_end_transaction(f"tx{i}", init.producer_id, 0, True)
                                         for i, init in enumerate(inits)))
        assert all(r.error == E.none for r in results)
        await h.settle()
        assert len(h.writer.written) == 5
        assert h.writer.calls <= 3
        assert all(h.meta(f"tx{i}").state == S.COMPLETE_COMMIT for i in range(5))
    run(main())


def test_describe_and_list():
    async def main():
        h = Harness()
        init = await _begin(h, "open", partitions=[("t", 0), ("u", 1)])
        await h.coordinator.handle_init_producer_id("idle", 60000)
        d = h.coordinator.handle_describe_transaction("open")
        assert (d.error, d.state, d.producer_id, d.partitions, d.start_timestamp_ms) == \
            (E.none, "Ongoing", init.producer_id, (("t", 0), ("u", 1)), h.clock.now)
        assert h.coordinator.handle_describe_transaction("nope").error == E.transactional_id_not_found
        assert h.coordinator.handle_describe_transaction("").error == E.invalid_request
        error, unknown, found = h.coordinator.handle_list_transactions(set(), set())
        assert error == E.none and unknown == [] and [(t.transactional_id, t.state) for t in found] == \
            [("idle", "Empty"), ("open", "Ongoing")]
        error, unknown, found = h.coordinator.handle_list_transactions(set(), {"Ongoing", "Bogus"})
        assert unknown == ["Bogus"] and [t.transactional_id for t in found] == ["open"]
        assert h.coordinator.handle_list_transactions({init.producer_id}, set())[2][0].transactional_id == "open"
        h.clock.now += 5000
        assert [t.transactional_id for t in h.coordinator.handle_list_transactions(set(), {"Ongoing"}, 4000)[2]] \
            == ["open"]
        assert h.coordinator.handle_list_transactions(set(), {"Ongoing"}, 6000)[2] == []
        h.state.begin_loading(0, 9)
        assert h.coordinator.handle_list_transactions(set(), set())[0] == E.coordinator_load_in_progress
    run(main())


def test_end_txn_answers_once_prepare_is_durable_and_markers_follow():
    """Kafka's order (issue 29 item 3): EndTxn is answered once PrepareCommit
    is in the log, before any marker is written; the next transaction's
    AddPartitionsToTxn gets CONCURRENT_TRANSACTIONS until the markers and
    CompleteCommit are written, then succeeds."""
    async def go():
        h = Harness()
        init = await _begin(h)
        release = asyncio.Event()
        write = h.writer.write

        async def held(topic, partition, markers):
            await release.wait()
            return await write(topic, partition, markers)

        h.markers._write = held
        ended = await h.coordinator.handle_end_transaction("tx", init.producer_id, init.producer_epoch, True)
        assert ended.error == E.none
        assert h.meta("tx").state == S.PREPARE_COMMIT and h.writer.written == []
        states = [v.transaction_status for _k, v in h.log.decoded(partition_for_transactional_id("tx", NUM_PARTITIONS))]
        assert states[-1] == S.PREPARE_COMMIT
        busy = await h.coordinator.handle_add_partitions("tx", init.producer_id, init.producer_epoch, {("t", 0)})
        assert busy == E.concurrent_transactions
        release.set()
        await h.settle()
        assert len(h.writer.written) == 2 and h.meta("tx").state == S.COMPLETE_COMMIT
        again = await h.coordinator.handle_add_partitions("tx", init.producer_id, init.producer_epoch, {("t", 0)})
        assert again == E.none

    run(go())
