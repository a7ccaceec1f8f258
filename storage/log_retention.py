"""Retention and deletion of a log's segments: which leading segments
Kafka's ``UnifiedLog.deleteOldSegments`` would delete (below the log start,
over retention.bytes, older than retention.ms; never the active segment,
never past the high watermark), and Kafka's asynchronous deletion (files
renamed to ``.deleted`` now, unlinked after file.delete.delay.ms)."""

from __future__ import annotations

from typing import Callable, NamedTuple

from storage.log_config import LogConfig
from storage.log_files import DELETED_FILE_SUFFIX
from storage.segment import LogSegment


class RetentionResult(NamedTuple):
    """What :meth:`Log.apply_retention` did.  When ``log_start_changed`` the
    owner should checkpoint ``log_start_offset``."""

    deleted_segments: int
    deleted_bytes: int
    log_start_offset: int
    log_start_changed: bool


# apply_retention's default: the limit the log's config sets.
FROM_CONFIG = object()


def retention_limits(config: LogConfig, retention_ms, retention_bytes) -> tuple[int, int]:
    """(retention.ms, retention.bytes) in force; -1 = unlimited. Only the
    "delete" cleanup policy has them."""
    if retention_ms is FROM_CONFIG:
        retention_ms = config.retention_ms if config.has_delete_policy else -1
    if retention_bytes is FROM_CONFIG:
        retention_bytes = config.retention_bytes if config.has_delete_policy else -1
    return retention_ms, retention_bytes


def segment_timestamp(seg: LogSegment) -> int:
    """Kafka's LogSegment.largestTimestamp: the max record timestamp, or the
    file's modification time when no batch carries one."""
    ts = seg.max_timestamp
    return ts if ts >= 0 else seg.last_modified_ms


def _deletable_prefix(segments: list[LogSegment], start: int, limit: int,
                      predicate: Callable[[LogSegment, LogSegment], bool]) -> int:
    """Kafka's ``deletableSegments`` from index ``start``: the index of the
    first segment that fails ``predicate(segment, next_segment)`` or does not
    lie wholly below ``limit``. The active (last) segment never qualifies."""
    n = start
    while n < len(segments) - 1:
        seg, nxt = segments[n], segments[n + 1]
        if nxt.base_offset > limit or not predicate(seg, nxt):
            break
        n += 1
    return n


def deletable_segment_count(segments: list[LogSegment], log_start_offset: int, limit: int,
                            retention_ms: int, retention_bytes: int, now_ms: int) -> int:
    """How many leading segments retention deletes, in Kafka's order: those
    wholly below the log start; then, while the rest exceeds
    ``retention_bytes``; then those whose largest timestamp is more than
    ``retention_ms`` old. Only segments ending at or below ``limit`` (the high
    watermark) qualify."""
    n = _deletable_prefix(segments, 0, limit, lambda seg, nxt: nxt.base_offset <= log_start_offset)
    if retention_bytes is not None and retention_bytes >= 0:
        excess = sum(s.size for s in segments[n:]) - retention_bytes
        if excess > 0:
            def over_size(seg: LogSegment, nxt: LogSegment) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            n = _deletable_prefix(segments, n, limit, over_size)
    if retention_ms is not None and retention_ms >= 0:
        n = _deletable_prefix(segments, n, limit, lambda seg, nxt: now_ms - segment_timestamp(seg) > retention_ms)
    return n


class SegmentDeleter:
    """Kafka's asynchronous segment deletion: every file is renamed to
    ``.deleted`` now and unlinked after ``file.delete.delay.ms`` (a zero delay
    unlinks at once). The segment objects keep their descriptors until then,
    so readers holding them finish their reads. Not thread-safe: the log
    calls it under its lock."""

    def __init__(self) -> None:
        # (due_ms, segment), in scheduling order
        self._pending: list[tuple[int, LogSegment]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def schedule(self, segments: list[LogSegment], now_ms: int, delay_ms: int) -> None:
        for seg in segments:
            try:
                seg.change_file_suffixes("", DELETED_FILE_SUFFIX)
            except FileNotFoundError:
                pass
            if delay_ms <= 0:
                seg.delete()
            else:
                self._pending.append((now_ms + delay_ms, seg))

    def take_due(self, now_ms: int) -> list[LogSegment]:
        """The segments whose delay has passed, no longer pending; the caller
        unlinks them (``seg.delete()``), outside the log's lock."""
        due = [seg for t, seg in self._pending if t <= now_ms]
        if due:
            self._pending = [(t, seg) for t, seg in self._pending if t > now_ms]
        return due

    def close(self) -> None:
        """The log closes: pending ``.deleted`` files are removed by the next open."""
        for _, seg in self._pending:
            seg.close_handles()
        self._pending = []
