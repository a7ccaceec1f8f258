"""Test harness for the group coordinator (imported by the other
test_group_* modules; it lives in a test_group_* file because that is where
group tests may go). Also a few tests of the harness itself.

``Harness`` wires a ``GroupCoordinator`` to a ManualClock-driven SystemTimer
and an in-memory "log": every append lands in ``harness.log`` in call order,
completing at once (``auto_complete=True``) or when the test says so.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence

from kio.schema.errors import ErrorCode

from cluster.groups import (
    AppendCompletion,
    GroupConfig,
    GroupCoordinator,
    LeavingMember,
    PartitionCommit,
    TopicPartition,
)
from cluster.groups.consumer_protocol import encode_assignment, encode_subscription
from delayed.clock import ManualClock
from delayed.timing_wheel import SystemTimer

E = ErrorCode
START_MS = 1_700_000_000_000
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(*topics: str) -> bytes:
    return encode_subscription(list(topics))


def range_protocols(*topics: str) -> list[tuple[str, bytes]]:
    return [("range", subscription(*(topics or ("t1",))))]


class Reply:
    """Collects callback results; a callback must be called at most once."""

    def __init__(self) -> None:
        self.results: list[Any] = []

    def __call__(self, result: Any) -> None:
        self.results.append(result)

    @property
    def done(self) -> bool:
        return bool(self.results)

    @property
    def value(self) -> Any:
        assert len(self.results) == 1, f"expected one answer, got {self.results}"
        return self.results[0]


class Harness:
    def __init__(
        self,
        config: Optional[GroupConfig] = None,
        *,
        auto_complete: bool = True,
        start_ms: int = START_MS,
        partition: Optional[int] = None,
        load: bool = True,
        expire_offsets_periodically: bool = False,
    ) -> None:
        self.clock = ManualClock(start_ms)
        self.timer = SystemTimer(clock=self.clock)
        self.config = config or GroupConfig()
        self.auto_complete = auto_complete
        self.log: list[tuple[bytes, Optional[bytes]]] = []
        self.pending: list[tuple[list, AppendCompletion]] = []
        self.append_calls = 0
        self._ids = itertools.count(1)
        self.coordinator = GroupCoordinator(
            self.timer, self.append, self.config, self.clock, partition=partition,
            member_id_suffix=lambda: f"id{next(self._ids)}",
            expire_offsets_periodically=expire_offsets_periodically,
        )
        if load:
            self.coordinator.load([])

    # -- persistence ---------------------------------------------------------

    def append(self, records: list) -> AppendCompletion:
        self.append_calls += 1
        completion = AppendCompletion()
        if self.auto_complete:
            self.log.extend(records)
            completion.complete()
        else:
            self.pending.append((records, completion))
        return completion

    def complete_appends(self, error: ErrorCode = E.none, count: Optional[int] = None) -> None:
        """Complete the oldest ``count`` pending appends (all by default)."""
        batch = self.pending if count is None else self.pending[:count]
        self.pending = self.pending[len(batch):]
        for records, completion in batch:
            if error == E.none:
                self.log.extend(records)
            completion.complete(error)

    # -- time ------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        """Move the clock, firing every timer bucket on the way at its time."""
        target = self.clock() + ms
        while True:
            next_expiration = self.timer.next_expiration_ms()
            if next_expiration is None or next_expiration > target:
                break
            self.clock.set(max(self.clock(), next_expiration))
            self.timer.advance_to(self.clock())
        self.clock.set(target)

    # -- requests ----------------------------------------------------------------

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        instance_id: Optional[str] = None,
        protocols: Optional[Sequence[tuple[str, bytes]]] = None,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        api_version: int = 9,
        client_id: str = "client",
    ) -> Reply:
        reply = Reply()
        self.coordinator.join_group(
            group, member_id, instance_id, client_id, "/10.0.0.1", rebalance_ms, session_ms, protocol_type,
            list(protocols if protocols is not None else range_protocols()), reply, api_version=api_version)
        return reply

    def join_new(self, group: str, **kwargs: Any) -> Reply:
        """A v4+ client's first join: MEMBER_ID_REQUIRED, then again with the id."""
        first = self.join(group, **kwargs)
        assert first.value.error == E.member_id_required, first.value
        assert first.value.member_id
        return self.join(group, first.value.member_id, **kwargs)

    def sync(self, group: str, generation: int, member_id: str, assignments: Optional[dict] = None, *,
             instance_id: Optional[str] = None, protocol_type: Optional[str] = None,
             protocol_name: Optional[str] = None) -> Reply:
        reply = Reply()
        self.coordinator.sync_group(group, generation, member_id, instance_id, protocol_type, protocol_name,
                                    assignments or {}, reply)
        return reply

    def heartbeat(self, group: str, member_id: str, generation: int, instance_id: Optional[str] = None) -> ErrorCode:
        return self.coordinator.heartbeat(group, member_id, instance_id, generation)

    def leave(self, group: str, *members: LeavingMember):
        return self.coordinator.leave_group(group, list(members))

    def commit(self, group: str, offsets: dict, *, member_id: str = "", generation: int = -1,
               instance_id: Optional[str] = None) -> Reply:
        reply = Reply()
        commits = {
            TopicPartition(*tp): (value if isinstance(value, PartitionCommit) else PartitionCommit(value))
            for tp, value in offsets.items()
        }
        self.coordinator.commit_offsets(group, member_id, instance_id, generation, commits, reply)
        return reply

    def fetch(self, group: str, partitions=None, require_stable: bool = False):
        return self.coordinator.fetch_offsets(group, partitions, require_stable)

    def state(self, group: str) -> Optional[str]:
        g = self.coordinator.group(group)
        return None if g is None else g.state.value

    # -- whole flows -----------------------------------------------------------

    def form_group(self, group: str, count: int, *, instance_ids: Optional[Sequence[Optional[str]]] = None,
                   topics: Sequence[str] = ("t1",), wait_ms: Optional[int] = None) -> list:
        """``count`` members join (as v9 clients), the rebalance completes, the
        leader assigns and everyone syncs. Returns the JoinGroupResults,
        leader first."""
        instance_ids = list(instance_ids or [None] * count)
        replies = []
        for instance_id in instance_ids:
            protocols = range_protocols(*topics)
            if instance_id is None:
                replies.append(self.join_new(group, protocols=protocols))
            else:
                replies.append(self.join(group, instance_id=instance_id, protocols=protocols))
        self.advance(wait_ms if wait_ms is not None else 2 * self.config.group_initial_rebalance_delay_ms + 1)
        results = [r.value for r in replies]
        assert all(r.error == E.none for r in results), results
        leader = next(r for r in results if r.member_id == r.leader_id)
        assignments = {r.member_id: encode_assignment({"t1": [i]}) for i, r in enumerate(results)}
        syncs = [self.sync(group, r.generation_id, r.member_id,
                           assignments if r is leader else None,
                           instance_id=instance_ids[results.index(r)])
                 for r in results]
        assert all(s.value.error == E.none for s in syncs), [s.results for s in syncs]
        return [leader] + [r for r in results if r is not leader]


# -- tests of the harness ---------------------------------------------------------


def test_harness_advance_fires_timer_tasks_at_their_time():
    h = Harness()
    reply = h.join_new("g", session_ms=SESSION_MS)
    assert not reply.done
    h.advance(h.config.group_initial_rebalance_delay_ms - 1)
    assert not reply.done
    h.advance(1)
    assert reply.value.error == E.none


def test_harness_manual_appends_reach_the_log_only_when_completed():
    h = Harness(auto_complete=False)
    reply = h.commit("g", {("t", 0): 5})
    assert not reply.done and h.log == []
    h.complete_appends()
    assert reply.value == {TopicPartition("t", 0): E.none}
    assert len(h.log) == 1
