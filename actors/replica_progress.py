"""A leader replica's progress reports to its node's purgatory (what
delayed produces, fetches and DeleteRecords wait on), coalesced: one call in
flight, the next one carries the latest state. Leadership changes are always
reported; high-watermark moves only while the purgatory has operations
waiting on the partition (it says so in its answers, and asks again through
the replica's report_progress).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

import ray

from core.local_channels import LocalChannels
from core.naming import purgatory_actor_name
from core.replica_messages import PartitionProgress

log = logging.getLogger("raykafka.replica")


class ProgressReporter:
    def __init__(self, name: str, broker_id: int, namespace: str, local_calls: bool, call_timeout_s: float,
                 snapshot: Callable[[], PartitionProgress], purgatory=None):
        self.name = name
        self.broker_id = broker_id
        self.namespace = namespace
        self.local_calls = local_calls
        self.call_timeout_s = call_timeout_s
        self.snapshot = snapshot
        # Leadership changes are always reported; HW moves only while someone waits.
        self.interested = True
        self._dirty = False
        self._inflight = False
        self.reports = 0  # calls made (profile counter)
        # The node's purgatory's handle; looked up on the first report unless given (a spare
        # looks it up before it adopts a partition: the lookup blocks this loop).
        self._purgatory = purgatory
        self._channels: LocalChannels | None = None

    def report(self, force: bool = False) -> None:
        if not (self.interested or force):
            return
        self._dirty = True
        if not self._inflight:
            self._inflight = True
            asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        try:
            while self._dirty:
                self._dirty = False
                if self._purgatory is None:
                    try:
                        self._purgatory = ray.get_actor(purgatory_actor_name(self.broker_id),
                                                        namespace=self.namespace)
                    except ValueError:
                        return  # no purgatory on this node (yet): nothing can be waiting on it
                self.reports += 1
                try:
                    unwatched = await self.channels().call(self._purgatory, "progress", ([self.snapshot()],),
                                                           self.call_timeout_s)
                    # Nothing waits on us: stay quiet until the purgatory asks (report_progress).
                    # The last report of the loop reflects the purgatory's latest view.
                    self.interested = not unwatched
                except Exception as exc:
                    log.warning("progress report for %s failed: %s", self.name, str(exc).splitlines()[0][:200])
                    self._purgatory = None
                    self.channels().close()
                    return
        finally:
            self._inflight = False

    def channels(self) -> LocalChannels:
        # Reports go to the node's purgatory over a direct channel
        # (core/local_channels.py) once it is up: one per HW move while
        # someone waits, so as Ray calls they cost ~1.5 ms of CPU each.
        if self._channels is None:
            self._channels = LocalChannels.here(self.local_calls, self.call_timeout_s)
        return self._channels

    def close(self) -> None:
        if self._channels is not None:
            self._channels.close()
