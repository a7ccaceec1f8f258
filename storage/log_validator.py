"""The leader's only look inside batches on append (the part of Kafka's
``LogValidator`` that decodes records): re-encoding batches to the topic's
compression.type, and refusing records without a key on a compacted topic."""

from __future__ import annotations

import storage.records as records
from storage.errors import InvalidRecordsError, RecordsFault
from storage.record_batch import COMPRESSION_MASK, CONTROL_MASK, LOG_OVERHEAD


def convert_and_validate_keys(view, headers, target: int | None, check_keys: bool,
                              topic_partition: str) -> bytearray | None:
    """Re-encode batches whose codec differs from ``target`` (Kafka's
    broker-side compression conversion) and, for compacted topics, reject
    records without a key.  Returns the new buffer, or None when nothing
    was converted."""
    parts = []
    changed = False
    pos = 0
    for h in headers:
        size = h.batch_length + LOG_OVERHEAD
        keyless: list[int] = []
        if h.attributes & CONTROL_MASK:
            new = None
        elif target is not None and h.attributes & COMPRESSION_MASK != target:
            new, keyless = records.recompress_batch(view, pos, h, target, check_keys=check_keys)
        else:
            new = None
            if check_keys:
                keyless = records.keyless_records(view, pos, h)
        if keyless:
            tp = topic_partition
            errors = [
                (i, f"Compacted topic cannot accept message without key in topic partition {tp}.")
                for i in keyless
            ]
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            raise InvalidRecordsError(
                RecordsFault.invalid_record,
                f"One or more records have been rejected due to {len(errors)} record errors in total, "
                f"and only showing the first three errors at most: [{shown}]",
                errors,
            )
        if new is None:
            parts.append(view[pos : pos + size])
        else:
            parts.append(new)
            changed = True
        pos += size
    if not changed:
        return None
    return bytearray(b"".join(parts))
