"""The coordinator's delayed operations (Kafka's DelayedJoin,
InitialDelayedJoin, DelayedSync, DelayedHeartbeat), on ``delayed``'s purgatory.

Each one only decides *when*; what happens is the coordinator's, through
the ``GroupDelays`` interface (``group_coordinator.GroupCoordinator`` implements
it), so the rules stay in one place.

Watch keys (tuples, prefixed by the coordinator's key space so several
coordinators can share a purgatory):

* ``(space, "join", group_id)``: the group's rebalance (one DelayedJoin or
  InitialDelayedJoin at a time), re-checked whenever a member joins or leaves.
* ``(space, "sync", group_id)``: the deadline for members to send SyncGroup
  after the join phase.
* ``(space, "member", group_id, member_id)``: one member's session (or, for
  a pending KIP-394 member id, its deadline to rejoin with that id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from delayed.operation import DelayedOperation

if TYPE_CHECKING:  # pragma: no cover
    from cluster.groups.group import GroupMetadata

__all__ = ["DelayedHeartbeat", "DelayedJoin", "DelayedSync", "GroupDelays", "InitialDelayedJoin"]


class GroupDelays(Protocol):
    """What the delayed operations ask of the coordinator."""

    def watch_join(self, operation: DelayedOperation, group: "GroupMetadata") -> None:
        """Wait for the group's join phase with ``operation``."""

    def try_complete_join(self, group: "GroupMetadata", force_complete: Callable[[], bool]) -> bool:
        """DelayedJoin.try_complete: ``force_complete()`` once the join phase may end."""

    def on_complete_join(self, group: "GroupMetadata") -> None:
        """The join phase is over (all rejoined, or the rebalance timeout)."""

    def try_complete_pending_sync(self, group: "GroupMetadata", generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool:
        """DelayedSync.try_complete: ``force_complete()`` once nothing is awaited."""

    def on_expire_pending_sync(self, group: "GroupMetadata", generation_id: int) -> None:
        """SyncGroups are missing at the deadline."""

    def try_complete_heartbeat(self, group: "GroupMetadata", member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool:
        """DelayedHeartbeat.try_complete: ``force_complete()`` once the session is kept."""

    def on_expire_heartbeat(self, group: "GroupMetadata", member_id: str, is_pending: bool) -> None:
        """A session (or a pending member id's deadline) ran out."""


class DelayedJoin(DelayedOperation):
    """The join phase of a rebalance: completes as soon as every known member
    has rejoined (and no KIP-394 pending member is outstanding), or when the
    group's rebalance timeout runs out, whereupon members that did not rejoin
    are dropped."""

    def __init__(self, coordinator: GroupDelays, group: "GroupMetadata", rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group (group.initial.rebalance.delay.ms).

    It never completes early: the point is to wait for the rest of a fleet
    that is starting up. Each time it expires, if new members arrived during
    the wait it waits another ``configured_delay_ms``, until the group's
    rebalance timeout is used up (``remaining_ms``)."""

    def __init__(
        self,
        coordinator: GroupDelays,
        group: "GroupMetadata",
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
    ) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.coordinator.watch_join(
                InitialDelayedJoin(self.coordinator, group, self.configured_delay_ms, delay, remaining), group
            )
        else:
            super().on_complete()


class DelayedSync(DelayedOperation):
    """After the join phase, every member must send SyncGroup within the
    rebalance timeout; those that do not are removed and the group
    rebalances again (otherwise a member that vanished between JoinGroup and
    SyncGroup would hold the group in CompletingRebalance, or hold partitions
    in Stable, until its session expired)."""

    def __init__(self, coordinator: GroupDelays, group: "GroupMetadata", generation_id: int,
                 rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_pending_sync(self.group, self.generation_id, self.force_complete)

    def on_expiration(self) -> None:
        self.coordinator.on_expire_pending_sync(self.group, self.generation_id)

    def on_complete(self) -> None:
        pass


class DelayedHeartbeat(DelayedOperation):
    """One member's session: completed (harmlessly) by each heartbeat, which
    schedules the next one; if it expires instead, the member is gone."""

    def __init__(self, coordinator: GroupDelays, group: "GroupMetadata", member_id: str, is_pending: bool,
                 timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_heartbeat(self.group, self.member_id, self.is_pending,
                                                        self.force_complete)

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.is_pending)

    def on_complete(self) -> None:
        pass
