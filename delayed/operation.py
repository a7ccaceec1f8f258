"""Delayed operations and the purgatory that holds them (Kafka's design).

A delayed operation is a request that cannot be answered yet: a fetch waiting
for ``min_bytes`` of data, a produce with ``acks=all`` waiting for followers.
It completes exactly once, either because its condition became true (someone
checked it under one of its watch keys) or because its timeout expired.

The purgatory indexes waiting operations by *watch key* (e.g. a partition) so
that an event on that key re-checks only the operations that care, and puts
each one on a timer for its timeout.

Threading: this is written for a single thread, the event loop of the asyncio
actor that owns the purgatory. Kafka needs per-operation locks, atomics and a
reaper thread because request handler threads and the timer thread race; on
one event loop no method call can be interleaved with another, so there are no
locks. "Racing" completion paths here means the two orders in which the
checker and the timer can reach an operation, and re-entrant calls made from
inside callbacks; the ``_completed`` flag makes completion exactly-once for
all of them.
"""

from __future__ import annotations

from typing import Hashable, Iterable, Optional

from delayed.timing_wheel import SystemTimer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]


class DelayedOperation(TimerTask):
    """An operation that completes when ``try_complete`` succeeds or when
    ``delay_ms`` expires, whichever is first, exactly once.

    Subclasses implement:

    * ``try_complete()``: check the completion condition; if it holds, call
      ``force_complete()`` and return its result, else return False.
    * ``on_complete()``: the completion action (e.g. send the response).
      Called exactly once, on either path.
    * ``on_expiration()``: called when the timeout fires, just before
      ``on_complete``; a good place to mark the result as timed out so that
      ``on_complete`` answers accordingly.
    """

    def __init__(self, delay_ms: float) -> None:
        super().__init__(delay_ms)
        self._completed = False
        # The purgatory that counts this operation as delayed (in its timer),
        # so leaving the timer by any path keeps that count right.
        self._delayed_in: Optional[DelayedOperationPurgatory] = None

    # -- to implement ------------------------------------------------------

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        pass

    # -- completion --------------------------------------------------------

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now, unless already completed. True iff this call did it.

        The flag is set before any callback runs, so a callback that re-enters
        (checks the same key, calls force_complete again) cannot complete the
        operation a second time.
        """
        return self._complete(expired=False)

    def safe_try_complete(self) -> bool:
        """``try_complete`` guarded for use by the purgatory.

        Kafka takes the operation's lock here so that two threads cannot run
        ``try_complete`` at once; on one event loop that cannot happen. What
        remains useful is skipping an operation that is already done.
        """
        if self._completed:
            return False
        return bool(self.try_complete())

    def run(self) -> None:
        # Called by the timer when the timeout expires.
        self._complete(expired=True)

    def cancel(self) -> None:
        """Remove from the timer without completing."""
        super().cancel()
        purgatory = self._delayed_in
        if purgatory is not None:
            self._delayed_in = None
            purgatory._num_delayed -= 1

    def _complete(self, expired: bool) -> bool:
        if self._completed:
            return False
        self._completed = True
        # Off the timer first, so a completed operation never expires later.
        self.cancel()
        # on_expiration runs before on_complete (Kafka calls them the other
        # way round) so a subclass can record "timed out" in on_expiration and
        # have the single response built in on_complete reflect it.
        if expired:
            self.on_expiration()
        self.on_complete()
        return True


class _Watchers:
    """The operations watching one key, in arrival order.

    A dict keyed by ``id(op)`` gives O(1) removal while keeping FIFO order
    (older operations are checked first). The dict holds the operation, so
    its id stays unique while it is here.
    """

    __slots__ = ("key", "_ops")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self._ops: dict[int, DelayedOperation] = {}

    def __len__(self) -> int:
        return len(self._ops)

    def watch(self, op: DelayedOperation) -> None:
        self._ops[id(op)] = op

    def operations(self) -> list[DelayedOperation]:
        return list(self._ops.values())

    def try_complete_watched(self) -> int:
        """Try to complete each watched operation; drop the completed ones.
        Returns how many this call completed."""
        completed = 0
        # Iterate over a snapshot: callbacks may add or remove watchers.
        for op in list(self._ops.values()):
            if op.is_completed:
                # Completed through another key or by the timer.
                self._ops.pop(id(op), None)
            elif op.safe_try_complete():
                self._ops.pop(id(op), None)
                completed += 1
        return completed

    def purge_completed(self) -> int:
        done = [key for key, op in self._ops.items() if op.is_completed]
        for key in done:
            del self._ops[key]
        return len(done)

    def cancel(self) -> list[DelayedOperation]:
        ops = list(self._ops.values())
        self._ops.clear()
        for op in ops:
            op.cancel()
        return ops


class DelayedOperationPurgatory:
    """Holds delayed operations, watched by key and timed out by a timer.

    ``timer`` may be shared by several purgatories (one timer and one driver
    per actor); counts reported here are this purgatory's own.

    ``purge_interval``: completed operations linger in the watcher lists of
    keys nobody has checked since (an operation watching keys A and B and
    completed via A stays listed under B). ``purge_completed()`` sweeps them
    out once roughly more than ``purge_interval`` of them may have built up.
    """

    def __init__(self, name: str, timer: SystemTimer, purge_interval: int = 1000) -> None:
        self.name = name
        self._timer = timer
        self.purge_interval = purge_interval
        self._watchers_by_key: dict[Hashable, _Watchers] = {}
        # Operations that were put under watch since the last purge (plus
        # those still delayed at the last purge); Kafka's
        # estimatedTotalOperations. Minus ``delayed`` it estimates how many
        # completed operations may still sit in watcher lists.
        self._estimated_total = 0
        # Operations of this purgatory currently in the timer. Maintained by
        # DelayedOperation.cancel(), which every exit from the timer goes
        # through (completion, expiry, cancellation, timer shutdown).
        self._num_delayed = 0
        self._shut_down = False

    # -- counts ----------------------------------------------------------

    @property
    def watched(self) -> int:
        """Watch entries over all keys (an op watching two keys counts twice),
        including completed operations not yet purged. O(number of keys)."""
        return sum(len(w) for w in self._watchers_by_key.values())

    @property
    def delayed(self) -> int:
        """Operations of this purgatory waiting in the timer."""
        return self._num_delayed

    @property
    def estimated_total(self) -> int:
        return self._estimated_total

    def watch_keys(self) -> list[Hashable]:
        return list(self._watchers_by_key)

    def watched_operations(self, key: Hashable) -> list[DelayedOperation]:
        watchers = self._watchers_by_key.get(key)
        return watchers.operations() if watchers is not None else []

    # -- operations -------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, watch_keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if it can; otherwise watch it under every key
        and start its timeout. True iff it was completed by this call.

        The order is Kafka's: check, watch, check again, then time. In Kafka
        the second check closes a race where another thread satisfies the
        condition after the first check but before the watch exists, so that
        no check would ever see the operation. On one event loop nothing runs
        between the two checks; the second one is kept so the contract (and
        the behaviour for a try_complete with side effects) matches Kafka's.
        """
        if self._shut_down:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        keys = list(watch_keys)
        if not keys:
            # Without a key nothing could ever complete it early; a plain
            # timer task is the right tool for that.
            raise ValueError("a delayed operation needs at least one watch key")
        if op.is_completed:
            return False

        if op.safe_try_complete():
            return True

        for key in keys:
            watchers = self._watchers_by_key.get(key)
            if watchers is None:
                watchers = self._watchers_by_key[key] = _Watchers(key)
            watchers.watch(op)
        self._estimated_total += 1

        if op.safe_try_complete():
            return True

        if not op.is_completed:
            self._timer.add(op)
            if op.is_completed:
                # The timer found it already due and ran it inline; make sure
                # nothing of it is left in the timer (Kafka does the same).
                op.cancel()
            elif op._delayed_in is None:
                op._delayed_in = self
                self._num_delayed += 1
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Re-check the operations watching ``key``; returns how many were
        completed by this call. Call it after whatever event may satisfy them
        (new data appended, high watermark moved, ...)."""
        watchers = self._watchers_by_key.get(key)
        if watchers is None:
            return 0
        completed = watchers.try_complete_watched()
        self._remove_key_if_empty(key, watchers)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching ``key``: its operations are removed from the timer and
        returned, *not* completed (Kafka's cancelForKey, used when a key such
        as a partition goes away; the caller decides how to answer them). They
        stay listed under their other keys, if any."""
        watchers = self._watchers_by_key.pop(key, None)
        if watchers is None:
            return []
        return [op for op in watchers.cancel() if not op.is_completed]

    def purge_completed(self, force: bool = False) -> int:
        """Reaper step: drop completed operations from all watcher lists, but
        only when more than ``purge_interval`` may have accumulated (Kafka's
        ``estimatedTotalOperations - numDelayed > purgeInterval``), since a
        sweep costs a pass over every list. Returns how many entries were
        dropped.

        Call it periodically (e.g. after each timer wake-up, or on a slow
        asyncio interval); ``force=True`` sweeps regardless.
        """
        if not force and self._estimated_total - self._num_delayed <= self.purge_interval:
            return 0
        self._estimated_total = self._num_delayed
        purged = 0
        for key, watchers in list(self._watchers_by_key.items()):
            purged += watchers.purge_completed()
            self._remove_key_if_empty(key, watchers)
        return purged

    def shutdown(self) -> list[DelayedOperation]:
        """Stop: take every pending operation off the timer and out of the
        watcher lists, without completing it. Returns those operations so the
        owner can fail them. The timer is left running, as it may be shared;
        its owner shuts it down."""
        if self._shut_down:
            return []
        self._shut_down = True
        pending: dict[int, DelayedOperation] = {}
        for watchers in self._watchers_by_key.values():
            for op in watchers.cancel():
                if not op.is_completed:
                    pending[id(op)] = op
        self._watchers_by_key.clear()
        self._estimated_total = 0
        return list(pending.values())

    # -- internals ----------------------------------------------------------

    def _remove_key_if_empty(self, key: Hashable, watchers: _Watchers) -> None:
        # Only drop the list we looked at: a callback during the check may
        # have replaced it with a fresh one for the same key.
        if len(watchers) == 0 and self._watchers_by_key.get(key) is watchers:
            del self._watchers_by_key[key]

    def __repr__(self) -> str:
        return (
            f"DelayedOperationPurgatory({self.name!r}, keys={len(self._watchers_by_key)}, "
            f"delayed={self._num_delayed})"
        )
