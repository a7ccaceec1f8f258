"""Leader epoch cache: which leader epoch started at which offset.

Persisted to ``<partition dir>/leader-epoch-checkpoint`` (entries ``epoch
start_offset``).  Followers use it through OffsetsForLeaderEpoch to find
where their log diverges from the leader's, which is why its semantics
mirror Kafka's ``LeaderEpochFileCache`` closely.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_left, bisect_right

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile

__all__ = ["LeaderEpochCache", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET"]

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Sorted ``(epoch, start_offset)`` entries, both strictly increasing."""

    def __init__(self, path: str):
        if os.path.isdir(path):
            path = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
        self.path = path
        self._file = LeaderEpochCheckpointFile(path)
        self._lock = threading.RLock()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        entries = self._file.read()
        for epoch, start in entries:
            # Only keep monotonic entries: a hand-edited or foreign file must
            # not break the bisect-based lookups.
            if self._epochs and (epoch <= self._epochs[-1] or start < self._offsets[-1]):
                log.warning("ignoring non-monotonic leader epoch entry %s %s in %s", epoch, start, path)
                continue
            self._epochs.append(epoch)
            self._offsets.append(start)

    # ----------------------------------------------------------------- reads

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._offsets))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def latest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[-1], self._offsets[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the leader that wrote ``offset`` (None if before all entries)."""
        with self._lock:
            i = bisect_right(self._offsets, offset) - 1
            return self._epochs[i] if i >= 0 else None

    def previous_epoch(self) -> int | None:
        with self._lock:
            return self._epochs[-2] if len(self._epochs) >= 2 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for OffsetsForLeaderEpoch.

        * unknown/undefined epoch, or one above every known epoch:
          ``(-1, -1)``
        * the latest epoch: ``(epoch, log_end_offset)``
        * below the first known epoch: ``(requested, first start offset)``
        * otherwise: the largest known epoch <= requested, ended by the start
          offset of the next larger epoch.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._epochs[-1]:
                return requested_epoch, log_end_offset
            higher = bisect_right(self._epochs, requested_epoch)
            if higher >= len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._offsets[0]
            return self._epochs[higher - 1], self._offsets[higher]

    # ---------------------------------------------------------------- writes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``.

        No-op when ``epoch`` is already the latest with a start offset <= the
        given one.  Entries with an epoch >= ``epoch`` or a start offset >=
        ``start_offset`` are removed first so the cache stays monotonic.
        Returns whether the cache changed (and was persisted).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        with self._lock:
            if self._epochs and self._epochs[-1] == epoch and self._offsets[-1] <= start_offset:
                return False
            removed = []
            while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
                removed.append((self._epochs.pop(), self._offsets.pop()))
            if len(removed) > 1 or (removed and removed[0][1] != start_offset):
                log.warning(
                    "leader epoch %d at %d truncated non-monotonic entries %s in %s",
                    epoch, start_offset, removed, self.path,
                )
            self._epochs.append(epoch)
            self._offsets.append(start_offset)
            self._persist()
            return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to it)."""
        with self._lock:
            if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
                return
            keep = bisect_left(self._offsets, end_offset)
            del self._epochs[keep:]
            del self._offsets[keep:]
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop entries wholly before it
        and move the epoch covering it to start there."""
        with self._lock:
            drop = bisect_right(self._offsets, start_offset)
            if drop == 0:
                return
            epoch = self._epochs[drop - 1]
            if drop == 1 and self._offsets[0] == start_offset:
                return
            del self._epochs[:drop]
            del self._offsets[:drop]
            self._epochs.insert(0, epoch)
            self._offsets.insert(0, start_offset)
            self._persist()

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._offsets.clear()
            self._persist()

    def _persist(self) -> None:
        self._file.write(zip(self._epochs, self._offsets))
