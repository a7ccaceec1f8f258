"""The names of the files in a partition's directory, as Kafka spells them:
``<topic>-<partition>`` directories and the suffixes of in-flight segment
files (pending deletes, cleaner output, swaps)."""

from __future__ import annotations

import re

# Suffixes of Kafka's in-flight files: pending asynchronous deletes, cleaner
# output not yet swapped in, cleaner output being swapped in.  ".tmp" is our
# (and Kafka's) checkpoint write in progress.
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
SEGMENT_FILE_NAME = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
ANY_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)(\..+)?$")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)

