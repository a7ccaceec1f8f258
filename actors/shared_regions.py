"""The edge shared-memory regions (core/shared_region.py) a replica has
mapped to read produce payloads in place (append_shared): attached on first
use, a bounded set kept mapped, as edges come and go.
"""
from __future__ import annotations

from core.shared_region import SharedRegion

MAX_MAPPED = 64


class MappedRegions:
    def __init__(self) -> None:
        self._regions: dict[str, SharedRegion] = {}

    def buffer(self, path: str) -> memoryview | None:
        """The region's bytes, or None if it cannot be mapped here (the edge then sends the bytes)."""
        region = self._regions.get(path)
        if region is None:
            try:
                region = SharedRegion.attach(path)
            except OSError:
                return None
            if len(self._regions) >= MAX_MAPPED:
                self._regions.pop(next(iter(self._regions))).close()
            self._regions[path] = region
        return region.buf
