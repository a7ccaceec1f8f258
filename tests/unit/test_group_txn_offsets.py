"""TxnOffsetCommit in the group coordinator (KIP-98, KIP-447), without Ray.

Transactional offsets are appended as a transactional batch of the producer
and stay pending until the producer's COMMIT/ABORT marker reaches the
offsets partition (``complete_transaction``); a load replays the same
through ``replay_batches``. The harness keeps the log as batches, markers
included, so every scenario can be reloaded and compared.
"""

from __future__ import annotations

import struct
from typing import Optional

from kio.schema.errors import ErrorCode

from cluster.groups import AppendCompletion, GroupConfig, PartitionCommit, TopicPartition, TxnProducer
from cluster.groups import CoordinatorStatus
from cluster.groups.log_batches import CONTROL_ABORT, CONTROL_COMMIT, LogBatch, read_log_batches
from cluster.groups.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    offset_commit_record,
)
from core.group_messages import OffsetFetch, OffsetToCommit, TxnOffsetCommit
from storage.records import SimpleRecord, build_batch
from tests.unit.test_group_support import Harness, Reply

E = ErrorCode
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
P1 = TxnProducer(1000, 3)
P2 = TxnProducer(2000, 0)
DAY = 24 * 60 * 60 * 1000


class TxnHarness(Harness):
    """Harness whose log is a list of LogBatch: one per append (with the
    producer for transactional ones) plus the markers the test writes."""

    def __init__(self, *args, **kwargs) -> None:
        self.batches: list[LogBatch] = []
        self.producers: list[Optional[TxnProducer]] = []
        super().__init__(*args, **kwargs)

    def append(self, records: list, producer: Optional[TxnProducer] = None) -> AppendCompletion:
        self.producers.append(producer)
        completion = super().append(records)
        batch = LogBatch.data(records, producer_id=producer.producer_id if producer else -1,
                              transactional=producer is not None)
        if completion.done:
            self.batches.append(batch)
        else:
            completion.add_callback(lambda error: error == E.none and self.batches.append(batch))
        return completion

    def txn_commit(self, group: str, offsets: dict, producer: TxnProducer = P1, *, member_id: str = "",
                   generation: int = -1, instance_id: Optional[str] = None) -> Reply:
        reply = Reply()
        commits = {TopicPartition(*tp): (v if isinstance(v, PartitionCommit) else PartitionCommit(v))
                   for tp, v in offsets.items()}
        self.coordinator.txn_commit_offsets(group, producer, member_id, instance_id, generation, commits, reply)
        return reply

    def end_txn(self, producer: TxnProducer, committed: bool) -> int:
        """The transaction coordinator: marker first, then the completion."""
        self.batches.append(LogBatch.marker(producer.producer_id, committed))
        return self.coordinator.complete_transaction(producer.producer_id, committed)

    def reloaded(self, batches: Optional[list] = None) -> "TxnHarness":
        fresh = TxnHarness(self.config, load=False, start_ms=self.clock())
        fresh.coordinator.begin_loading()
        fresh.coordinator.replay_batches(self.batches if batches is None else batches)
        fresh.coordinator.complete_loading()
        return fresh


def offsets_of(h: Harness, group: str, partitions=(TP0, TP1), require_stable: bool = False) -> dict:
    result = h.fetch(group, list(partitions), require_stable=require_stable)
    assert result.error == E.none
    return {tp: (p.offset if p.error == E.none else p.error) for tp, p in result.partitions.items()}


def pending_of(h: Harness, group: str) -> dict:
    g = h.coordinator.group(group)
    return {} if g is None else {pid: {tp: c.offset_and_metadata.offset for tp, c in offsets.items()}
                                 for pid, offsets in g.pending_txn_offset_commits.items()}


# -- pending -> commit / abort -----------------------------------------------------------------


def test_pending_until_commit_marker():
    h = TxnHarness()
    reply = h.txn_commit("g", {("t", 0): 5, ("t", 1): PartitionCommit(7, leader_epoch=2, metadata="m")})
    assert reply.value == {TP0: E.none, TP1: E.none}
    # One transactional batch of the producer, Kafka's records.
    assert h.producers == [P1]
    [batch] = h.batches
    assert batch.transactional and batch.producer_id == P1.producer_id
    assert [decode_key(k) for k, _ in batch.records] == [OffsetCommitKey("g", "t", 0), OffsetCommitKey("g", "t", 1)]
    assert decode_offset_commit_value(batch.records[1][1]).leader_epoch == 2
    # Pending: not visible, unstable for require_stable fetches (KIP-447).
    assert offsets_of(h, "g") == {TP0: -1, TP1: -1}
    assert offsets_of(h, "g", require_stable=True) == {TP0: E.unstable_offset_commit, TP1: E.unstable_offset_commit}
    assert h.fetch("g").partitions == {}
    assert h.end_txn(P1, committed=True) == 1
    assert offsets_of(h, "g") == {TP0: 5, TP1: 7}
    assert offsets_of(h, "g", require_stable=True) == {TP0: 5, TP1: 7}
    fetched = h.fetch("g", [TP1]).partitions[TP1]
    assert (fetched.leader_epoch, fetched.metadata) == (2, "m")
    assert pending_of(h, "g") == {}
    assert h.reloaded().coordinator.snapshot() == h.coordinator.snapshot()


def test_pending_until_abort_marker():
    h = TxnHarness()
    assert h.commit("g", {("t", 0): 3}).value == {TP0: E.none}
    assert h.txn_commit("g", {("t", 0): 5, ("t", 1): 6}).value == {TP0: E.none, TP1: E.none}
    assert offsets_of(h, "g") == {TP0: 3, TP1: -1}
    assert h.end_txn(P1, committed=False) == 1
    assert offsets_of(h, "g", require_stable=True) == {TP0: 3, TP1: -1}
    assert pending_of(h, "g") == {}
    assert h.reloaded().coordinator.snapshot() == h.coordinator.snapshot()


def test_producers_are_completed_separately_and_across_groups():
    h = TxnHarness()
    h.txn_commit("a", {("t", 0): 1}, P1)
    h.txn_commit("b", {("t", 0): 2}, P1)
    h.txn_commit("a", {("t", 1): 3}, P2)
    assert h.end_txn(P2, committed=True) == 1
    assert offsets_of(h, "a") == {TP0: -1, TP1: 3}
    assert pending_of(h, "a") == {P1.producer_id: {TP0: 1}}
    assert h.end_txn(P1, committed=True) == 2
    assert offsets_of(h, "a") == {TP0: 1, TP1: 3} and offsets_of(h, "b") == {TP0: 2, TP1: -1}
    # A marker of a producer with nothing pending here touches nothing.
    assert h.end_txn(TxnProducer(77, 0), committed=True) == 0


def test_a_later_commit_of_the_same_producer_replaces_its_pending_offset():
    h = TxnHarness()
    h.txn_commit("g", {("t", 0): 5})
    h.txn_commit("g", {("t", 0): 9})
    assert pending_of(h, "g") == {P1.producer_id: {TP0: 9}}
    h.end_txn(P1, committed=True)
    assert offsets_of(h, "g") == {TP0: 9, TP1: -1}
    assert h.reloaded().coordinator.snapshot() == h.coordinator.snapshot()


# -- non-transactional commits override as in Kafka ------------------------------------------


def test_a_plain_commit_appended_after_the_transactional_one_wins():
    h = TxnHarness()
    h.txn_commit("g", {("t", 0): 5})
    h.commit("g", {("t", 0): 7})
    assert offsets_of(h, "g") == {TP0: 7, TP1: -1}
    # Still unstable: the transaction is open.
    assert offsets_of(h, "g", require_stable=True)[TP0] == E.unstable_offset_commit
    h.end_txn(P1, committed=True)
    assert offsets_of(h, "g", require_stable=True) == {TP0: 7, TP1: -1}
    assert h.reloaded().coordinator.snapshot() == h.coordinator.snapshot()


def test_a_transactional_commit_appended_after_a_plain_one_wins_on_commit():
    h = TxnHarness()
    h.commit("g", {("t", 0): 3})
    h.txn_commit("g", {("t", 0): 5})
    h.end_txn(P1, committed=True)
    assert offsets_of(h, "g") == {TP0: 5, TP1: -1}
    assert h.reloaded().coordinator.snapshot() == h.coordinator.snapshot()


def test_append_order_decides_whatever_the_completion_order():
    h = TxnHarness(auto_complete=False)
    txn = h.txn_commit("g", {("t", 0): 5})
    plain = h.commit("g", {("t", 0): 7})
    # The plain commit's append completes first; the transactional record
    # is still older.
    h.pending[1][1].complete()
    h.log.extend(h.pending[1][0])
    h.pending = h.pending[:1]
    h.complete_appends()
    assert txn.value == {TP0: E.none} and plain.value == {TP0: E.none}
    h.coordinator.complete_transaction(P1.producer_id, True)
    assert offsets_of(h, "g") == {TP0: 7, TP1: -1}


# -- appends ---------------------------------------------------------------------------------


def test_failed_append_is_reported_and_leaves_nothing_pending():
    h = TxnHarness(auto_complete=False)
    reply = h.txn_commit("g", {("t", 0): 5})
    assert not reply.done
    assert offsets_of(h, "g", require_stable=True) == {TP0: E.unstable_offset_commit, TP1: -1}
    h.complete_appends(E.not_leader_or_follower)
    assert reply.value == {TP0: E.not_coordinator}
    assert pending_of(h, "g") == {}
    assert offsets_of(h, "g", require_stable=True) == {TP0: -1, TP1: -1}


def test_fenced_producer_error_from_the_log_reaches_the_client():
    h = TxnHarness(auto_complete=False)
    reply = h.txn_commit("g", {("t", 0): 5})
    h.complete_appends(E.invalid_producer_epoch)
    assert reply.value == {TP0: E.invalid_producer_epoch}


def test_metadata_too_large():
    h = TxnHarness(GroupConfig(offset_metadata_max_bytes=3))
    reply = h.txn_commit("g", {("t", 0): PartitionCommit(1, metadata="toolong"), ("t", 1): PartitionCommit(2)})
    assert reply.value == {TP0: E.offset_metadata_too_large, TP1: E.none}
    assert pending_of(h, "g") == {P1.producer_id: {TP1: 2}}


def test_completion_before_the_record_is_appended_drops_it():
    h = TxnHarness(auto_complete=False)
    h.txn_commit("g", {("t", 0): 5})
    assert h.coordinator.complete_transaction(P1.producer_id, True) == 1
    h.complete_appends()
    assert offsets_of(h, "g") == {TP0: -1, TP1: -1} and pending_of(h, "g") == {}


# -- validation (KIP-447: v3+ carries member, generation, instance id) -----------------------------


def test_generation_and_member_validation():
    h = TxnHarness()
    leader, follower = h.form_group("g", 2, instance_ids=["i1", None])
    gen, member = leader.generation_id, leader.member_id
    ok = h.txn_commit("g", {("t", 0): 1}, member_id=member, generation=gen, instance_id="i1")
    assert ok.value == {TP0: E.none}
    assert h.txn_commit("g", {("t", 0): 1}, member_id=member, generation=gen + 1,
                        instance_id="i1").value == {TP0: E.illegal_generation}
    assert h.txn_commit("g", {("t", 0): 1}, member_id="nobody", generation=gen).value == {TP0: E.unknown_member_id}
    assert h.txn_commit("g", {("t", 0): 1}, member_id="other-incarnation", generation=gen,
                        instance_id="i1").value == {TP0: E.fenced_instance_id}
    assert h.txn_commit("g", {("t", 0): 1}, member_id=follower.member_id, generation=gen,
                        instance_id="i9").value == {TP0: E.unknown_member_id}
    # v0-v2 requests carry no member: accepted even while the group has members
    # (unlike OffsetCommit, where only members may commit).
    assert h.txn_commit("g", {("t", 1): 2}, P2).value == {TP1: E.none}
    assert h.commit("g", {("t", 1): 2}).value == {TP1: E.unknown_member_id}
    # The group id must not be empty (unlike OffsetCommit).
    assert h.txn_commit("", {("t", 0): 1}).value == {TP0: E.invalid_group_id}


def test_unknown_group_with_a_generation_is_an_unknown_member():
    h = TxnHarness()
    assert h.txn_commit("new", {("t", 0): 1}, member_id="m", generation=1).value == {TP0: E.unknown_member_id}
    assert h.txn_commit("new2", {("t", 0): 1}).value == {TP0: E.none}
    assert h.state("new2") == "Empty"


def test_not_coordinator_and_loading():
    h = TxnHarness(load=False)
    assert h.txn_commit("g", {("t", 0): 1}).value == {TP0: E.not_coordinator}
    h.coordinator.begin_loading()
    assert h.txn_commit("g", {("t", 0): 1}).value == {TP0: E.coordinator_load_in_progress}
    h2 = TxnHarness(partition=0, config=GroupConfig(offsets_topic_num_partitions=50))
    foreign = next(f"g{i}" for i in range(100) if __import__("cluster.groups").groups.partition_for_group(
        f"g{i}", 50) != 0)
    assert h2.txn_commit(foreign, {("t", 0): 1}).value == {TP0: E.not_coordinator}


# -- groups with pending transactional offsets ------------------------------------------------


def test_pending_offsets_keep_an_empty_group_from_expiring():
    h = TxnHarness(GroupConfig(offsets_retention_ms=DAY))
    h.txn_commit("g", {("t", 0): 5})
    h.advance(2 * DAY)
    assert h.coordinator.expire_offsets() == 0
    assert h.state("g") == "Empty"
    h.end_txn(P1, committed=False)
    h.coordinator.expire_offsets()
    assert h.coordinator.group("g") is None


def test_committed_offset_with_a_pending_commit_does_not_expire():
    h = TxnHarness(GroupConfig(offsets_retention_ms=DAY))
    h.commit("g", {("t", 0): 3})
    h.advance(2 * DAY)
    h.txn_commit("g", {("t", 0): 5})
    assert h.coordinator.expire_offsets() == 0
    h.end_txn(P1, committed=True)
    assert offsets_of(h, "g") == {TP0: 5, TP1: -1}


def test_group_deletion_with_pending_offsets():
    h = TxnHarness()
    h.commit("g", {("t", 0): 3})
    h.txn_commit("g", {("t", 0): 5, ("t", 1): 6})
    # An Empty group is deleted (as Kafka), pending offsets and all: a
    # tombstone for every partition, the transactional ones included.
    assert h.coordinator.delete_groups(["g"]) == {"g": E.none}
    tombstones = [decode_key(k) for k, v in h.batches[-1].records if v is None]
    assert set(tombstones) == {OffsetCommitKey("g", "t", 0), OffsetCommitKey("g", "t", 1)}
    assert h.coordinator.group("g") is None
    # The commit marker afterwards brings nothing back, live or replayed.
    assert h.end_txn(P1, committed=True) == 0
    assert h.coordinator.group("g") is None
    assert h.reloaded().coordinator.snapshot() == {}


def test_group_with_members_and_pending_offsets_is_not_deleted():
    h = TxnHarness()
    leader = h.form_group("g", 1)[0]
    h.txn_commit("g", {("t", 0): 5}, member_id=leader.member_id, generation=leader.generation_id)
    assert h.coordinator.delete_groups(["g"]) == {"g": E.non_empty_group}
    assert pending_of(h, "g") == {P1.producer_id: {TP0: 5}}


def test_offset_delete_drops_pending_transactional_offsets():
    h = TxnHarness()
    h.txn_commit("g", {("t", 0): 5, ("t", 1): 6})
    assert h.coordinator.delete_offsets("g", [TP0]) == (E.none, {TP0: E.none})
    assert pending_of(h, "g") == {P1.producer_id: {TP1: 6}}
    h.end_txn(P1, committed=True)
    assert offsets_of(h, "g") == {TP0: -1, TP1: 6}
    assert h.reloaded().coordinator.snapshot() == h.coordinator.snapshot()


# -- loading ----------------------------------------------------------------------------------


def offset_batch(group: str, offsets: dict, producer: Optional[TxnProducer] = None) -> LogBatch:
    records = [offset_commit_record(group, t, p, OffsetCommitValue(o, -1, "", 100)) for (t, p), o in offsets.items()]
    return LogBatch.data(records, producer_id=producer.producer_id if producer else -1,
                         transactional=producer is not None)


def test_replay_with_commit_abort_and_open_markers():
    p3 = TxnProducer(3000, 1)
    batches = [
        offset_batch("g", {("t", 0): 1}),
        offset_batch("g", {("t", 0): 10, ("t", 1): 11}, P1),  # committed below
        offset_batch("g", {("t", 1): 20}, P2),  # aborted below
        offset_batch("h", {("t", 0): 30}, p3),  # never ended: stays pending
        LogBatch.marker(P2.producer_id, committed=False),
        offset_batch("g", {("t", 1): 12}),  # plain, after P1's record: wins over it
        LogBatch.marker(P1.producer_id, committed=True),
        LogBatch.marker(4444, committed=True),  # nothing pending: nothing happens
    ]
    h = TxnHarness(load=False)
    h.coordinator.begin_loading()
    h.coordinator.replay_batches(batches[:3])
    h.coordinator.replay_batches(batches[3:])
    h.coordinator.complete_loading()
    assert offsets_of(h, "g") == {TP0: 10, TP1: 12}
    assert offsets_of(h, "h", require_stable=True) == {TP0: E.unstable_offset_commit, TP1: -1}
    assert offsets_of(h, "h") == {TP0: -1, TP1: -1}
    assert pending_of(h, "h") == {p3.producer_id: {TP0: 30}}
    assert h.state("h") == "Empty"
    # The open transaction ends after the load: the marker's completion applies.
    assert h.coordinator.complete_transaction(p3.producer_id, True) == 1
    assert offsets_of(h, "h") == {TP0: 30, TP1: -1}


def test_replay_orders_open_transactions_against_later_plain_commits():
    # Transactional record, then a plain commit, then (after the load) the marker:
    # the plain commit stays, as in Kafka (it was appended later).
    h = TxnHarness(load=False)
    h.coordinator.load([])  # a plain load works as before
    h = h.reloaded([offset_batch("g", {("t", 0): 10}, P1), offset_batch("g", {("t", 0): 7})])
    assert offsets_of(h, "g") == {TP0: 7, TP1: -1}
    h.coordinator.complete_transaction(P1.producer_id, True)
    assert offsets_of(h, "g") == {TP0: 7, TP1: -1}
    # Live appends after a load are later than everything replayed.
    h.txn_commit("g", {("t", 0): 8}, P2)
    h.coordinator.complete_transaction(P2.producer_id, True)
    assert offsets_of(h, "g") == {TP0: 8, TP1: -1}


def test_replay_plain_tombstone_drops_pending_offsets_of_the_partition():
    h = TxnHarness().reloaded([
        offset_batch("g", {("t", 0): 10, ("t", 1): 11}, P1),
        LogBatch.data([(offset_commit_record("g", "t", 0, OffsetCommitValue(0))[0], None)]),
        LogBatch.marker(P1.producer_id, committed=True),
    ])
    assert offsets_of(h, "g") == {TP0: -1, TP1: 11}


def test_completion_while_loading_applies_after_the_load():
    h = TxnHarness(load=False)
    h.coordinator.begin_loading()
    h.coordinator.replay_batches([offset_batch("g", {("t", 0): 10}, P1)])
    assert h.coordinator.complete_transaction(P1.producer_id, True) == 0
    h.coordinator.complete_loading()
    assert h.coordinator.status is CoordinatorStatus.ACTIVE
    assert offsets_of(h, "g") == {TP0: 10, TP1: -1}


def test_completion_when_not_coordinator_is_ignored():
    h = TxnHarness()
    h.txn_commit("g", {("t", 0): 5})
    h.coordinator.unload()
    assert h.coordinator.complete_transaction(P1.producer_id, True) == 0


def control_batch(base_offset: int, producer: TxnProducer, kind: int) -> bytes:
    # Kafka's EndTransactionMarker: key (version, type), value (version, coordinator epoch).
    return build_batch([SimpleRecord(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 5))], base_offset=base_offset,
                       producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                       is_transactional=True, is_control=True)


def test_read_log_batches_from_log_bytes():
    def data(base, records, producer=None):
        if producer is None:
            return build_batch([SimpleRecord(k, v) for k, v in records], base_offset=base)
        return build_batch([SimpleRecord(k, v) for k, v in records], base_offset=base,
                           producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                           base_sequence=-1, is_transactional=True)

    r = [offset_commit_record("g", "t", p, OffsetCommitValue(o)) for p, o in ((0, 1), (1, 2), (0, 3), (1, 4))]
    log = (data(0, r[:2])                      # offsets 0-1
           + data(2, [r[2]], P1)                # 2
           + data(3, [r[3]], P2)                # 3
           + control_batch(4, P1, CONTROL_COMMIT)  # 4
           + control_batch(5, P2, CONTROL_ABORT))  # 5
    batches, following = read_log_batches(log, 0, 6)
    assert following == 6
    assert [(b.base_offset, b.producer_id, b.transactional, b.control, len(b.records)) for b in batches] == [
        (0, -1, False, None, 2), (2, P1.producer_id, True, None, 1), (3, P2.producer_id, True, None, 1),
        (4, P1.producer_id, True, CONTROL_COMMIT, 0), (5, P2.producer_id, True, CONTROL_ABORT, 0)]
    h = TxnHarness().reloaded(batches)
    assert offsets_of(h, "g") == {TP0: 3, TP1: 2}
    # A read starting inside the first batch keeps its records from there;
    # nothing at or past the end offset is returned; a torn tail is left for the next read.
    batches, following = read_log_batches(log[:-10], 1, 4)
    assert [(b.base_offset, len(b.records)) for b in batches] == [(0, 1), (2, 1), (3, 1)]
    assert following == 5
    assert read_log_batches(log[:20], 0, 6) == ([], 0)


# -- the actor over a real partition -----------------------------------------------------------


def test_actor_writes_transactional_batches_and_reloads_them(tmp_path):
    """actors/group_coordinator.py without Ray, on a real offsets partition:
    the TxnOffsetCommit batch is transactional (producer id and epoch, no
    sequence), the leader's COMMIT marker plus ``complete_transaction``
    materialize it, and a coordinator loading the same log agrees; an
    aborted and an open transaction reload as dropped and pending."""
    import asyncio

    from core.txn_messages import TxnCompletion, TxnMarker
    from storage.record_batch import iter_headers
    from tests.unit.test_group_coordinator_actor import group_on, make_actor, make_replica, wait_active

    p = 1
    group = group_on(p)

    async def scenario():
        replica = make_replica(tmp_path, p)
        first = make_actor(p)
        await first.elect(0, replica)
        await wait_active(first)
        answer = await first.txn_commit_offsets(TxnOffsetCommit(group, 1000, 2, "", None, -1,
                                                                {("t", 0): OffsetToCommit(5, 1, "m")}))
        assert {tuple(k): v for k, v in answer.items()} == {("t", 0): E.none}
        fetched = await first.fetch_offsets(OffsetFetch(group, [("t", 0)], True))
        assert fetched.partitions[TP0].error == E.unstable_offset_commit
        log = replica.partition.log
        [(_, header)] = list(iter_headers(log.read_bytes(0, 1 << 20, None, min_one_batch=True)))
        assert (header.producer_id, header.producer_epoch, header.base_sequence, header.is_transactional) == (
            1000, 2, -1, True)
        # The transaction coordinator: the marker, then the completion.
        [written] = replica.partition.write_txn_markers([TxnMarker(1000, 2, 0, True)], 0)
        assert written.error == 0
        assert await first.complete_transaction(TxnCompletion(1000, 2, True)) == 1
        fetched = await first.fetch_offsets(OffsetFetch(group, [("t", 0)], True))
        assert (fetched.partitions[TP0].offset, fetched.partitions[TP0].metadata) == (5, "m")
        # An aborted transaction and an open one.
        await first.txn_commit_offsets(TxnOffsetCommit(group, 2000, 0, "", None, -1,
                                                       {("t", 0): OffsetToCommit(6, -1, "")}))
        replica.partition.write_txn_markers([TxnMarker(2000, 0, 0, False)], 0)
        await first.complete_transaction(TxnCompletion(2000, 0, False))
        await first.txn_commit_offsets(TxnOffsetCommit(group, 3000, 0, "", None, -1,
                                                       {("t", 1): OffsetToCommit(7, -1, "")}))
        before = await first.snapshot()

        await first.resign(1)
        replica.partition.make_leader(1, 1, [1], [1])
        second = make_actor(p)
        await second.elect(1, replica)
        await wait_active(second)
        after = await second.snapshot()
        # (An offsets-only group's state timestamp is not persisted.)
        assert before[group].pop("current_state_timestamp") and after[group].pop("current_state_timestamp")
        assert after == before and list(after[group]["pending_txn_offsets"]) == [3000]
        fetched = await second.fetch_offsets(OffsetFetch(group, [("t", 0), ("t", 1)], True))
        assert {tp.partition: (v.offset, v.error) for tp, v in fetched.partitions.items()} == {
            0: (5, E.none), 1: (-1, E.unstable_offset_commit)}
        replica.partition.write_txn_markers([TxnMarker(3000, 0, 0, True)], 0)
        assert await second.complete_transaction(TxnCompletion(3000, 0, True)) == 1
        fetched = await second.fetch_offsets(OffsetFetch(group, [("t", 1)], True))
        assert fetched.partitions[TP1].offset == 7

    asyncio.run(scenario())


# -- the wire handler (net/apis/n28_txn_offset_commit.py) ----------------------------------------


def txn_offset_commit_exchange(version: int, answer, *, group_error=None):
    """A TxnOffsetCommit of ``version`` through a real EdgeService, with the
    group coordinator faked: -> (decoded response, the coordinator call)."""
    import asyncio

    from core.config import BrokerConfig
    from net.codec import decode_response, encode_request, request_schema
    from actors.edge_ports import RayActorCalls
    from net.edge_service import EdgeService
    from net.schema_build import nested

    edge = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    calls = []
    try:
        edge.metadata.partition = lambda name, p: object() if name == "t" and p < 2 else None

        async def group_call(group_id, method, *args, timeout_s=None):
            calls.append((group_id, method, args))
            return group_error, (None if group_error is not None else answer(args[-1].offsets))

        edge.group_call = group_call
        schema = request_schema(28, version)
        part_cls, topic_cls = nested(schema, "TxnOffsetCommitRequestPartition"), nested(
            schema, "TxnOffsetCommitRequestTopic")
        extra = {"committed_leader_epoch": 4} if version >= 2 else {}
        member = {"generation_id": 3, "member_id": "m-1", "group_instance_id": "i-1"} if version >= 3 else {}
        request = schema(transactional_id="tx", group_id="g", producer_id=1000, producer_epoch=2, **member, topics=(
            topic_cls(name="t", partitions=(part_cls(partition_index=0, committed_offset=5, committed_metadata="m",
                                                     **extra),
                                            part_cls(partition_index=7, committed_offset=1, committed_metadata=None,
                                                     **extra))),
            topic_cls(name="gone", partitions=(part_cls(partition_index=0, committed_offset=1, committed_metadata="",
                                                        **extra),))))
        frame = encode_request(request, correlation_id=9)[4:]
        encoded = asyncio.run(edge.dispatch(None, 28, version, 9, frame))
        correlation_id, response = decode_response(28, version, encoded[4:])
        assert correlation_id == 9
        return response, calls
    finally:
        edge.close()


def test_wire_handler_every_version():
    for version in range(6):
        response, calls = txn_offset_commit_exchange(version, lambda offsets: {tp: E.none for tp in offsets})
        assert {t.name: {p.partition_index: p.error_code for p in t.partitions} for t in response.topics} == {
            "t": {0: E.none, 7: E.unknown_topic_or_partition}, "gone": {0: E.unknown_topic_or_partition}}, version
        [(group, method, args)] = calls
        assert (group, method) == ("g", "txn_commit_offsets")
        expected_member = ("m-1", "i-1", 3) if version >= 3 else ("", None, -1)
        [commit] = args
        assert commit[:6] == ("g", 1000, 2) + expected_member, version
        assert commit.offsets == {("t", 0): OffsetToCommit(5, 4 if version >= 2 else -1, "m")}, version


def test_wire_handler_errors_and_old_versions_loading():
    response, _ = txn_offset_commit_exchange(1, None, group_error=E.coordinator_load_in_progress)
    assert response.topics[0].partitions[0].error_code == E.coordinator_not_available
    response, _ = txn_offset_commit_exchange(2, None, group_error=E.coordinator_load_in_progress)
    assert response.topics[0].partitions[0].error_code == E.coordinator_load_in_progress
    response, _ = txn_offset_commit_exchange(3, lambda offsets: {tp: E.illegal_generation for tp in offsets})
    assert response.topics[0].partitions[0].error_code == E.illegal_generation
