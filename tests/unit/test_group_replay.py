"""Recovery: the records a coordinator appends are enough to rebuild it.

A seeded random simulation of consumer clients (joins, static restarts,
leaves, session expiries, commits, offset and group deletions, expiry sweeps)
runs against one coordinator; at quiescent points (no rebalance in flight)
the appended log is loaded into a fresh coordinator and the persisted state
of both must be identical.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

import pytest
from kio.schema.errors import ErrorCode

from cluster.groups import GroupConfig, GroupCoordinator, LeavingMember, PartitionCommit, TopicPartition
from cluster.groups.consumer_protocol import encode_assignment, encode_subscription
from cluster.groups import CoordinatorStatus
from cluster.groups.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    group_metadata_record,
    offset_commit_record,
)
from delayed.clock import ManualClock
from delayed.timing_wheel import SystemTimer
from tests.unit.test_group_support import Harness, Reply

E = ErrorCode
DAY = 24 * 60 * 60 * 1000
SESSION_MS = 10_000
TOPICS = ["t1", "t2", "t3"]


def comparable(snapshot: dict) -> dict:
    """What must survive a reload. The state timestamp only matters (and
    only round-trips exactly) for Empty groups with a protocol type: for
    them it starts the retention clock. A non-empty group's record is written
    in CompletingRebalance, so it carries that state's timestamp."""
    out = {}
    for group_id, g in snapshot.items():
        g = dict(g)
        if g["members"] or g["protocol_type"] is None:
            g.pop("current_state_timestamp")
        out[group_id] = g
    return out


def reload_from(log: list, clock: ManualClock, config: GroupConfig) -> GroupCoordinator:
    fresh = GroupCoordinator(SystemTimer(clock=clock), lambda records: None, config, clock,
                             expire_offsets_periodically=False)
    fresh.load(list(log))
    return fresh


@dataclass
class SimMember:
    member_id: str
    instance_id: Optional[str]
    topics: list[str]
    generation: int = -1

    def protocols(self) -> list[tuple[str, bytes]]:
        return [("range", encode_subscription(self.topics))]


class Simulation:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.config = GroupConfig(offsets_retention_ms=DAY)
        self.h = Harness(self.config)
        self.members: dict[str, list[SimMember]] = {}
        self.pending_joins: dict[tuple[str, int], tuple[SimMember, Reply]] = {}
        self.instance_seq = 0
        self.checks = 0

    # -- keeping everyone alive ------------------------------------------------

    def tick(self, ms: int, skip: Optional[SimMember] = None) -> None:
        """Let time pass in steps, with every live member heartbeating."""
        while ms > 0:
            step = min(ms, 2000)
            self.h.advance(step)
            ms -= step
            for group_id, members in self.members.items():
                for m in members:
                    if m is not skip and m.generation >= 0:
                        self.h.heartbeat(group_id, m.member_id, m.generation, m.instance_id)

    # -- reaching a quiescent state ----------------------------------------------

    def settle(self, group_id: str) -> None:
        """Drive a rebalance in flight to its end, as clients would."""
        h = self.h
        for _ in range(10):
            group = h.coordinator.group(group_id)
            if group is None or group.state.value in ("Stable", "Empty"):
                assert all(m.generation == (group.generation_id if group else m.generation)
                           for m in self.members.get(group_id, []))
                return
            if group.state.value == "PreparingRebalance":
                replies = {}
                for m in self.members[group_id]:
                    waiting = self.pending_joins.pop((group_id, id(m)), None)
                    replies[id(m)] = (m, waiting[1] if waiting else h.join(
                        group_id, m.member_id, instance_id=m.instance_id, protocols=m.protocols()))
                for _ in range(30):
                    if all(r.done for _, r in replies.values()):
                        break
                    h.advance(1000)
                for m, r in replies.values():
                    result = r.value
                    assert result.error == E.none, result
                    m.member_id, m.generation = result.member_id, result.generation_id
            group = h.coordinator.group(group_id)
            if group.state.value == "CompletingRebalance":
                members = self.members[group_id]
                leader = next(m for m in members if m.member_id == group.leader_id)
                assignments = {m.member_id: encode_assignment({m.topics[0]: [i]}) for i, m in enumerate(members)}
                for m in [leader] + [m for m in members if m is not leader]:
                    reply = h.sync(group_id, m.generation, m.member_id,
                                   assignments if m is leader else None, instance_id=m.instance_id)
                    assert reply.value.error == E.none, reply.value
                    assert reply.value.assignment == assignments[m.member_id]
        raise AssertionError(f"group {group_id} did not settle")

    # -- operations ---------------------------------------------------------------

    def add_member(self, group_id: str) -> None:
        static = self.rng.random() < 0.4
        topics = self.rng.sample(TOPICS, self.rng.randint(1, 2))
        instance_id = None
        if static:
            self.instance_seq += 1
            instance_id = f"inst-{self.instance_seq}"
        m = SimMember("", instance_id, topics)
        if static:
            reply = self.h.join(group_id, instance_id=instance_id, protocols=m.protocols())
        else:
            reply = self.h.join_new(group_id, protocols=m.protocols())
        self.members.setdefault(group_id, []).append(m)
        self.pending_joins[(group_id, id(m))] = (m, reply)
        # The existing members learn of the rebalance and rejoin in settle().
        self.settle(group_id)

    def leave(self, group_id: str) -> None:
        m = self.rng.choice(self.members[group_id])
        result = self.h.leave(group_id, LeavingMember(m.member_id, m.instance_id))
        assert [r.error for r in result.members] == [E.none]
        self.members[group_id].remove(m)
        self.settle(group_id)

    def static_restart(self, group_id: str) -> None:
        statics = [m for m in self.members.get(group_id, []) if m.instance_id]
        if not statics:
            return
        m = self.rng.choice(statics)
        result = self.h.join(group_id, instance_id=m.instance_id, protocols=m.protocols()).value
        assert result.error == E.none and result.generation_id == m.generation
        m.member_id = result.member_id
        assert self.h.sync(group_id, m.generation, m.member_id, instance_id=m.instance_id).value.error == E.none
        assert self.h.state(group_id) == "Stable"

    def expire_member(self, group_id: str) -> None:
        m = self.rng.choice(self.members[group_id])
        self.tick(SESSION_MS + 2000, skip=m)
        assert not self.h.coordinator.group(group_id).has(m.member_id)
        self.members[group_id].remove(m)
        m.generation = -1
        self.settle(group_id)

    def commit(self, group_id: str) -> None:
        members = self.members.get(group_id)
        offsets = {
            TopicPartition(self.rng.choice(TOPICS), self.rng.randint(0, 3)): PartitionCommit(
                self.rng.randint(0, 10_000), self.rng.randint(-1, 5), self.rng.choice(["", "m", "meta-data"]))
            for _ in range(self.rng.randint(1, 4))
        }
        if members:
            m = self.rng.choice(members)
            reply = self.h.commit(group_id, offsets, member_id=m.member_id, generation=m.generation,
                                  instance_id=m.instance_id)
        else:
            reply = self.h.commit(group_id, offsets)
        assert set(reply.value.values()) == {E.none}, reply.value

    def leave_all(self, group_id: str) -> None:
        members = self.members.get(group_id, [])
        result = self.h.leave(group_id, *[LeavingMember(m.member_id, m.instance_id) for m in members])
        assert [r.error for r in result.members] == [E.none] * len(members)
        self.members[group_id] = []
        self.settle(group_id)
        assert self.h.state(group_id) in ("Empty", None)

    def delete_offsets(self, group_id: str) -> None:
        group = self.h.coordinator.group(group_id)
        if group is None or not group.offsets:
            return
        tps = self.rng.sample(sorted(group.offsets), self.rng.randint(1, len(group.offsets)))
        error, _ = self.h.coordinator.delete_offsets(group_id, tps)
        assert error in (E.none, E.group_id_not_found)

    def delete_group(self, group_id: str) -> None:
        if self.members.get(group_id):
            assert self.h.coordinator.delete_groups([group_id])[group_id] == E.non_empty_group
        elif self.h.coordinator.group(group_id) is not None:
            assert self.h.coordinator.delete_groups([group_id])[group_id] == E.none

    def expiry_sweep(self) -> None:
        self.h.coordinator.expire_offsets(self.h.clock() + self.rng.choice([DAY // 2, DAY, 2 * DAY]))

    # -- the check ----------------------------------------------------------------

    def check_reload(self) -> None:
        for group_id in list(self.members):
            self.settle(group_id)
        original = comparable(self.h.coordinator.snapshot())
        fresh = reload_from(self.h.log, self.h.clock, self.config)
        assert comparable(fresh.snapshot()) == original
        self.checks += 1

    def run(self, steps: int) -> None:
        groups = ["g-a", "g-b", "g-c"]
        for step in range(steps):
            group_id = self.rng.choice(groups + ["simple"])
            live = bool(self.members.get(group_id))
            roll = self.rng.random()
            if group_id == "simple":
                self.commit(group_id) if roll < 0.7 else self.delete_offsets(group_id)
            elif roll < 0.22 or (not live and roll < 0.6):
                if len(self.members.get(group_id, [])) < 5:
                    self.add_member(group_id)
            elif roll < 0.32 and live:
                self.leave(group_id)
            elif roll < 0.40:
                self.static_restart(group_id)
            elif roll < 0.47 and live:
                self.expire_member(group_id)
            elif roll < 0.72:
                self.commit(group_id)
            elif roll < 0.80:
                self.delete_offsets(group_id)
            elif roll < 0.85:
                self.leave_all(group_id)
            elif roll < 0.92:
                self.delete_group(group_id)
            else:
                self.expiry_sweep()
            self.tick(self.rng.choice([0, 500, 3000]))
            if step % 5 == 4:
                self.check_reload()
        self.check_reload()


@pytest.mark.parametrize("seed", range(8))
def test_replayed_log_rebuilds_the_same_state(seed):
    sim = Simulation(seed)
    sim.run(60)
    assert sim.checks >= 12
    # The run did exercise what it claims to.
    assert len(sim.h.log) > 20


def test_replay_sees_everything_after_reload_and_keeps_serving():
    h = Harness()
    leader, a = h.form_group("g", 2, instance_ids=["inst-a", None])
    h.commit("g", {("t1", 0): 42}, member_id=a.member_id, generation=1)
    fresh_h = Harness(load=False)
    fresh_h.clock.set(h.clock())
    fresh = fresh_h.coordinator
    fresh.load(h.log)
    assert fresh.status is CoordinatorStatus.ACTIVE
    assert comparable(fresh.snapshot()) == comparable(h.coordinator.snapshot())
    # The members carry on against the new coordinator: same generation...
    assert fresh_h.heartbeat("g", a.member_id, 1) == E.none
    assert fresh_h.fetch("g", [("t1", 0)]).partitions[TopicPartition("t1", 0)].offset == 42
    # ...and a member that never finds the new coordinator is expired from there.
    fresh_h.advance(SESSION_MS - 1)
    assert fresh_h.heartbeat("g", a.member_id, 1) == E.none
    fresh_h.advance(1)
    assert not fresh.group("g").has(leader.member_id)
    assert fresh_h.heartbeat("g", a.member_id, 1) == E.rebalance_in_progress


def test_load_in_chunks_with_old_versions_tombstones_and_foreign_records():
    sub = encode_subscription(["t1"])
    old_group = GroupMetadataValue("consumer", 4, "range", "m1", -1, (
        MemberMetadataValue("m1", None, "c", "h", 10_000, 10_000, sub, b"A"),))
    log = [
        # Kafka 0.10-era records: group metadata v0, offset commit v1 with expiry.
        (encode_group_metadata_key("old"), encode_group_metadata_value(old_group, version=0)),
        (encode_offset_commit_key("old", "t1", 0), encode_offset_commit_value(OffsetCommitValue(5, -1, "x", 100, 200))),
        offset_commit_record("gone", "t1", 0, OffsetCommitValue(1, -1, "", 100)),
        group_metadata_record("gone", GroupMetadataValue("consumer", 1, None, None, 100, ())),
        (encode_offset_commit_key("gone", "t1", 0), None),
        (encode_group_metadata_key("gone"), None),
        (b"\x00\x05\x00\x01g", b"\x00\x00"),  # a KIP-848 record type: skipped
        offset_commit_record("offsets-only", "t2", 3, OffsetCommitValue(9, 2, "m", 100)),
        offset_commit_record("offsets-only", "t2", 3, OffsetCommitValue(10, 2, "m", 150)),  # last one wins
    ]
    h = Harness(load=False)
    c = h.coordinator
    c.begin_loading()
    c.replay(log[:3])
    c.replay(log[3:])
    c.complete_loading()
    snap = c.snapshot()
    assert set(snap) == {"old", "offsets-only"}
    old = snap["old"]
    assert (old["state"], old["generation"], old["protocol"], old["leader"]) == ("Stable", 4, "range", "m1")
    assert old["members"]["m1"]["rebalance_timeout_ms"] == 10_000  # v0: the session timeout
    assert old["members"]["m1"]["assignment"] == b"A"
    assert old["current_state_timestamp"] is None
    [(tp, offset)] = old["offsets"].items()
    assert offset.expire_timestamp == 200
    only = snap["offsets-only"]
    assert only["state"] == "Empty" and only["protocol_type"] is None
    assert only["offsets"][TopicPartition("t2", 3)].offset == 10


def test_a_record_that_cannot_be_parsed_is_skipped_and_counted_not_fatal():
    """Issue 28 item 3: Kafka fails the load (every group of the partition down,
    retried forever); ours skips the record, logs it and counts it."""
    from core import metrics

    counter = metrics.registry().counter("kafka_coordinator_skippedrecords")
    before = sum(counter.values.values())
    h = Harness(load=False)
    good = h.coordinator.manager if hasattr(h.coordinator, "manager") else None
    h.coordinator.load([
        (encode_group_metadata_key("broken"), b"\x00\x03\x00"),  # a value cut short
        (None, b"keyless"),
        (b"\xff", b""),  # a key cut short
    ])
    assert h.coordinator.status is CoordinatorStatus.ACTIVE
    assert sum(counter.values.values()) == before + 3
    assert good is None or "broken" not in good._groups
