"""The edge's side of UpdateMetadata deltas (cluster/controller/metadata_rounds.py):
the whole image an update leaves the edge holding, or the answer that
refuses it.

- A whole snapshot replaces the image, unless it is an older round of the
  controller epoch the edge already holds a newer round of (overtaken on the
  way: applying it would step the edge back).
- A delta applies only onto the round it was built on, in the same epoch:
  its topics replace theirs (leader handles included), its removed topics go.
  Anything else is refused with ``needs_full``, and the controller sends the
  whole image; a delta of an older epoch is STALE_CONTROLLER_EPOCH.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Union

from core.controller_messages import MetadataApplied, MetadataDelta, MetadataSnapshot
from core.error_codes import ErrorCode


class HeldMetadata(NamedTuple):
    """The image an edge serves: the whole snapshot and the handles of the
    leader replicas it was handed, by (topic, partition)."""

    snapshot: MetadataSnapshot
    leader_handles: Mapping[tuple[str, int], Any]


def resolve_update(held: HeldMetadata | None, update: Union[MetadataSnapshot, MetadataDelta],
                   leader_handles: Mapping[tuple[str, int], Any]) -> Union[HeldMetadata, MetadataApplied]:
    """-> the image to apply, or the answer to give without applying anything."""
    if isinstance(update, MetadataSnapshot):
        if (held is not None and update.version and held.snapshot.controller_epoch == update.controller_epoch
                and held.snapshot.version > update.version):
            return MetadataApplied()  # overtaken by a newer round already applied
        return HeldMetadata(update, dict(leader_handles))
    if held is not None and update.controller_epoch < held.snapshot.controller_epoch:
        return MetadataApplied(ErrorCode.stale_controller_epoch)
    if (held is None or held.snapshot.controller_epoch != update.controller_epoch
            or held.snapshot.version != update.base_version):
        return MetadataApplied(needs_full=True)
    touched = set(update.topics) | set(update.removed_topics)
    topics = {name: topic for name, topic in held.snapshot.topics.items() if name not in update.removed_topics}
    topics.update(update.topics)
    handles = {key: handle for key, handle in held.leader_handles.items() if key[0] not in touched}
    handles.update(leader_handles)
    snapshot = held.snapshot._replace(controller_id=update.controller_id, topics=topics, version=update.version)
    return HeldMetadata(snapshot, handles)


__all__ = ["HeldMetadata", "resolve_update"]
