"""Kafka checkpoint files.

Format (Kafka's ``CheckpointFile``), text, one item per line::

    0                 <- version
    2                 <- number of entries
    topic-a 0 1234    <- entries, fields separated by a space
    topic-a 1 99

Per log directory Kafka keeps ``recovery-point-offset-checkpoint``,
``replication-offset-checkpoint`` and ``log-start-offset-checkpoint``
(``topic partition offset`` entries), and per partition a
``leader-epoch-checkpoint`` (``epoch start_offset`` entries).

Writes go to ``<file>.tmp``, are fsynced, renamed over the file and the
directory is fsynced, so a reader sees either the old or the new contents.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

from storage.errors import CorruptCheckpointError

__all__ = [
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "LEADER_EPOCH_CHECKPOINT",
    "OffsetCheckpointFile",
    "LeaderEpochCheckpointFile",
    "CorruptCheckpointError",
    "atomic_write",
    "fsync_dir",
    "fsync_path",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

CHECKPOINT_VERSION = 0

T = TypeVar("T")


def fsync_path(path: str, flags: int = 0) -> None:
    """fsync the file (or, with ``os.O_DIRECTORY``, the directory) at ``path``
    through a descriptor of its own."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync a directory so a rename or file creation inside it is durable."""
    fsync_path(path, os.O_DIRECTORY)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves old or new content."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def _parse(path: str, text: str, parse_entry: Callable[[list[str]], T]) -> list[T]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if not lines:
        # Kafka creates checkpoint files empty before their first write.
        return []
    try:
        version = int(lines[0].strip())
    except ValueError:
        raise CorruptCheckpointError(f"malformed version line in checkpoint file {path}: {lines[0]!r}") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"unrecognized version {version} of checkpoint file {path}")
    if len(lines) < 2:
        raise CorruptCheckpointError(f"checkpoint file {path} has no entry count line")
    try:
        expected = int(lines[1].strip())
    except ValueError:
        raise CorruptCheckpointError(f"malformed entry count in checkpoint file {path}: {lines[1]!r}") from None
    entries = []
    for line in lines[2:]:
        fields = line.split()
        try:
            entries.append(parse_entry(fields))
        except (ValueError, IndexError):
            raise CorruptCheckpointError(f"malformed line in checkpoint file {path}: {line!r}") from None
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"expected {expected} entries in checkpoint file {path}, found {len(entries)}"
        )
    return entries


def _format(lines: list[str]) -> bytes:
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n").encode()


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"checkpoint file {path} is not valid UTF-8") from None


def _offset_entry(fields: list[str]) -> tuple[tuple[str, int], int]:
    if len(fields) != 3:
        raise ValueError
    return (fields[0], int(fields[1])), int(fields[2])


class OffsetCheckpointFile:
    """``topic partition offset`` checkpoint shared by all partitions of a log dir.

    Each partition replica runs in its own process, so concurrent writers are
    expected: :meth:`update` does read-modify-write under an exclusive
    ``flock`` on ``<file>.lock`` (a sidecar, because the checkpoint itself is
    replaced by rename and a lock on it would be lost).
    """

    def __init__(self, path: str):
        self.path = path
        self.lock_path = path + ".lock"

    @contextmanager
    def locked(self) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            # closing the descriptor releases the flock
            os.close(fd)

    def read(self) -> dict[tuple[str, int], int]:
        text = _read_text(self.path)
        if text is None:
            return {}
        return dict(_parse(self.path, text, _offset_entry))

    def _write_unlocked(self, entries: dict[tuple[str, int], int]) -> None:
        lines = []
        for (topic, partition), offset in sorted(entries.items()):
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be stored in a checkpoint")
            lines.append(f"{topic} {int(partition)} {int(offset)}")
        atomic_write(self.path, _format(lines))

    def write(self, entries: dict[tuple[str, int], int]) -> None:
        """Replace the whole file with ``entries``."""
        with self.locked():
            self._write_unlocked(entries)

    def update(
        self,
        entries: dict[tuple[str, int], int] | None = None,
        remove: Iterable[tuple[str, int]] = (),
    ) -> dict[tuple[str, int], int]:
        """Merge ``entries`` into the file and drop ``remove``; returns the result."""
        with self.locked():
            current = self.read()
            if entries:
                current.update(entries)
            for key in remove:
                current.pop(key, None)
            self._write_unlocked(current)
            return current

    def lower(self, key: tuple[str, int], offset: int) -> None:
        """Lower ``key``'s entry to ``offset`` if it is above (a truncation
        cut the log below a checkpointed point); absent entries stay absent."""
        with self.locked():
            current = self.read()
            if current.get(key, -1) > offset:
                current[key] = offset
                self._write_unlocked(current)


def _epoch_entry(fields: list[str]) -> tuple[int, int]:
    if len(fields) != 2:
        raise ValueError
    return int(fields[0]), int(fields[1])


class LeaderEpochCheckpointFile:
    """``epoch start_offset`` checkpoint of one partition (single writer)."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        text = _read_text(self.path)
        if text is None:
            return []
        return _parse(self.path, text, _epoch_entry)

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        atomic_write(self.path, _format([f"{int(e)} {int(o)}" for e, o in entries]))
