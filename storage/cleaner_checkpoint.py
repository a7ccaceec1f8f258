"""One partition's entry in its log dir's ``cleaner-offset-checkpoint``
(Kafka's clean point: offsets below it are compacted). The file is shared by
every partition of the dir, so each change is a locked read-modify-write."""

from __future__ import annotations

import os

from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage.log_files import parse_partition_dir_name


class CleanerCheckpoint:
    def __init__(self, partition_dir: str):
        self.file = OffsetCheckpointFile(os.path.join(os.path.dirname(partition_dir), CLEANER_OFFSET_CHECKPOINT))
        try:
            self.key: tuple[str, int] | None = parse_partition_dir_name(os.path.basename(partition_dir))
        except ValueError:  # not a <topic>-<partition> directory: never compacted
            self.key = None

    @property
    def path(self) -> str:
        return self.file.path

    def read(self) -> int | None:
        return None if self.key is None else self.file.read().get(self.key)

    def store(self, offset: int) -> None:
        self.file.update({self.key: offset})

    def lower(self, offset: int) -> None:
        """Kafka's ``LogCleaner.maybeTruncateCheckpoint``: a clean point above
        a truncation would mark new, never cleaned data as clean."""
        if self.key is not None and os.path.exists(self.file.path):
            self.file.lower(self.key, offset)

    def remove(self) -> None:
        if self.key is not None and os.path.exists(self.file.path):
            self.file.update(remove=[self.key])
