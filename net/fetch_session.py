"""Incremental fetch sessions (KIP-227), per edge.

A consumer opens a session with a full fetch (epoch 0); later fetches
(epoch 1, 2, ...) list only partitions whose fetch offset or size changed,
plus partitions to forget, and responses carry only partitions with news
(records, a moved HW / LSO / log start, or an error). The cache is bounded by
`max.incremental.fetch.session.cache.slots`; when full, an idle session
(older than `min.incremental.fetch.session.eviction.ms`) is evicted, else the
client gets no session (session id 0) and keeps sending full fetches.
"""
from __future__ import annotations

import collections
import dataclasses
import random
import time

from core.error_codes import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

PartitionKey = tuple[str, int]


@dataclasses.dataclass
class SessionPartition:
    topic: str
    topic_id: object
    partition: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    # What the client last heard, to decide whether the next response must mention it.
    sent_high_watermark: int = -1
    sent_last_stable_offset: int = -1
    sent_log_start_offset: int = -1


@dataclasses.dataclass
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: collections.OrderedDict  # PartitionKey -> SessionPartition, in fetch order
    last_used: float


class FetchSessionError(Exception):
    def __init__(self, error: ErrorCode):
        super().__init__(error.name)
        self.error = error


# Partitions held by all of an edge's sessions together: the slots bound the
# sessions, this bounds what they hold (a request may name thousands of
# partitions, and any client may open sessions). A full fetch that would
# pass it gets no session, as when every slot is taken.
MAX_CACHED_PARTITIONS = 100_000


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000, clock=time.monotonic,
                 max_partitions: int = MAX_CACHED_PARTITIONS):
        self.max_slots = max_slots
        self.eviction_s = eviction_ms / 1000
        self.clock = clock
        self.max_partitions = max_partitions
        self.sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()  # LRU order
        self.stats = collections.Counter()

    @property
    def cached_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def _new_id(self) -> int:
        while True:
            candidate = random.randint(1, 2**31 - 1)
            if candidate not in self.sessions:
                return candidate

    def _make_room(self) -> bool:
        if len(self.sessions) < self.max_slots:
            return True
        oldest_id, oldest = next(iter(self.sessions.items()))
        if self.clock() - oldest.last_used >= self.eviction_s:
            del self.sessions[oldest_id]
            self.stats["evicted"] += 1
            return True
        return False

    def begin(self, session_id: int, epoch: int, wanted: list[SessionPartition],
              forgotten: list[PartitionKey]) -> tuple[FetchSession | None, list[SessionPartition], bool]:
        """Resolve a request -> (session or None, partitions to fetch in order, incremental?)."""
        now = self.clock()
        if epoch == FINAL_EPOCH:
            # Sessionless full fetch; a named session is closed.
            self.sessions.pop(session_id, None)
            return None, wanted, False
        if epoch == INITIAL_EPOCH:
            self.sessions.pop(session_id, None)
            # No session for a fetch of nothing (of use to no consumer, only to a
            # client filling the slots), nor past the partition bound.
            if (not wanted or len(wanted) + self.cached_partitions > self.max_partitions
                    or not self._make_room()):
                self.stats["refused"] += 1
                return None, wanted, False
            session = FetchSession(self._new_id(), 1,
                                   collections.OrderedDict(((p.topic, p.partition), p) for p in wanted), now)
            self.sessions[session.session_id] = session
            self.stats["created"] += 1
            return session, list(session.partitions.values()), False
        session = self.sessions.get(session_id)
        if session is None:
            raise FetchSessionError(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            raise FetchSessionError(ErrorCode.invalid_fetch_session_epoch)
        for key in forgotten:
            session.partitions.pop(key, None)
        room = self.max_partitions - self.cached_partitions
        for p in wanted:
            key = (p.topic, p.partition)
            existing = session.partitions.get(key)
            if existing is None:
                if room <= 0:
                    # Past the bound: the session ends; the client starts over with a full fetch.
                    del self.sessions[session.session_id]
                    raise FetchSessionError(ErrorCode.fetch_session_id_not_found)
                room -= 1
                session.partitions[key] = p
            else:
                existing.fetch_offset, existing.max_bytes = p.fetch_offset, p.max_bytes
                existing.leader_epoch, existing.topic_id = p.leader_epoch, p.topic_id
        session.epoch += 1
        session.last_used = now
        self.sessions.move_to_end(session.session_id)
        return session, list(session.partitions.values()), True

    @staticmethod
    def must_send(p: SessionPartition, error: int, has_records: bool, hw: int, lso: int, log_start: int) -> bool:
        """Whether an incremental response must include this partition."""
        return bool(error or has_records or hw != p.sent_high_watermark or lso != p.sent_last_stable_offset
                    or log_start != p.sent_log_start_offset)

    @staticmethod
    def remember(session: FetchSession, p: SessionPartition, hw: int, lso: int, log_start: int,
                 has_records: bool) -> None:
        p.sent_high_watermark, p.sent_last_stable_offset, p.sent_log_start_offset = hw, lso, log_start
        if has_records:
            # Fairness: partitions that just returned data go to the back of the line.
            session.partitions.move_to_end((p.topic, p.partition))
