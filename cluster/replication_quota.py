"""Replication quotas (Kafka's KIP-73): cap the bytes/s that throttled replicas
move while they catch up, so a reassignment cannot starve clients.

Kafka's model, kept here:
- Two rates per broker, set dynamically on /config/brokers/<id>:
  `leader.replication.throttled.rate` (bytes a leader serves) and
  `follower.replication.throttled.rate` (bytes a follower fetches).
- Two lists per topic naming the replicas they apply to:
  `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`,
  each "partitionId:brokerId,..." or "*". A broker looks for its own id: the
  leader list names leader replicas, the follower list follower replicas.
- The rate is Kafka's SimpleRate over `replication.quota.window.num` samples of
  `replication.quota.window.size.seconds` each; the quota is exceeded while the
  measured rate is above the bound.
- Only replicas that lag are held back (a leader never throttles a follower in
  the ISR; a follower never throttles itself once it has reached the leader's
  high watermark), so throttling cannot shrink the ISR. Every byte a throttled
  replica moves is recorded, lagging or not.

One difference: Kafka keeps one quota per broker shared by all its partitions.
Here each replica is its own actor (its own process), so each replica keeps
its own `ReplicaThrottle`; the rate therefore bounds one partition's
replication, and a broker moving N throttled partitions at once may move up
to N times the rate.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable

from core.throttled_replicas import INT64_MAX, validate_throttled_replicas

# Kafka's ReplicationQuotaManagerConfig defaults.
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_S = 1
UNLIMITED_RATE = INT64_MAX


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _AllReplicas:
    """The "*" value: every replica of the topic is throttled."""

    def __contains__(self, replica: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL"


ALL = _AllReplicas()


def parse_throttled_replicas(value: str | Iterable[str] | None) -> frozenset[tuple[int, int]] | _AllReplicas:
    """The replicas a `*.replication.throttled.replicas` value names: ALL for "*",
    else the set of (partition, broker id). Raises ValueError on a malformed value."""
    if value is None:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [item.strip() for item in items if item.strip()]
    validate_throttled_replicas(items)
    if items == ["*"]:
        return ALL
    replicas = set()
    for item in items:
        partition, broker = item.split(":")
        replicas.add((int(partition), int(broker)))
    return frozenset(replicas)


def is_throttled(throttled: frozenset[tuple[int, int]] | _AllReplicas, partition: int, broker: int) -> bool:
    return (partition, broker) in throttled


class _Sample:
    __slots__ = ("start_ms", "last_event_ms", "value")

    def __init__(self, now_ms: int):
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0


class ReplicationQuota:
    """One byte-rate quota with Kafka's sampled-rate semantics (a Sensor holding
    a SimpleRate over a windowed sum, checked against an upper bound).

    Samples are a ring of window_num + 1 entries (one extra for the window that
    overlaps the measured span). A sample closes window_size_s after it started;
    samples without events for window_num windows are reset. The rate is the
    sum of the samples divided by the time since the oldest sample started,
    never less than one window (so the first bytes do not read as a huge rate)."""

    def __init__(self, rate_bytes_per_s: int = UNLIMITED_RATE, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_s: int = DEFAULT_WINDOW_SIZE_S, clock: Callable[[], int] = _monotonic_ms):
        """clock: milliseconds, monotonic."""
        if window_num < 1 or window_size_s < 1:
            raise ValueError(f"window_num and window_size_s must be >= 1, got {window_num}, {window_size_s}")
        self.window_num = window_num
        self.window_ms = window_size_s * 1000
        self.clock = clock
        self.rate_bytes_per_s = UNLIMITED_RATE
        self.update_rate(rate_bytes_per_s)
        self._samples: list[_Sample] = []
        self._current = 0

    def update_rate(self, rate_bytes_per_s: int) -> None:
        """New bound; the recorded samples stay (Kafka's updateQuota)."""
        if rate_bytes_per_s < 0:
            raise ValueError(f"a replication quota must be >= 0 bytes/s, got {rate_bytes_per_s}")
        self.rate_bytes_per_s = int(rate_bytes_per_s)

    @property
    def unlimited(self) -> bool:
        return self.rate_bytes_per_s >= UNLIMITED_RATE

    def record(self, nbytes: int) -> None:
        """Count bytes moved, whether or not the quota is exceeded."""
        now = self.clock()
        sample = self._current_sample(now)
        if now - sample.start_ms >= self.window_ms:
            sample = self._advance(now)
        sample.value += nbytes
        sample.last_event_ms = now

    def rate(self) -> float:
        """Measured bytes/s now."""
        now = self.clock()
        total = self._purged_total(now)
        return total / (self._window_span_ms(now) / 1000.0)

    def is_exceeded(self) -> bool:
        if self.unlimited:
            return False
        return self.rate() > self.rate_bytes_per_s

    def throttle_time_ms(self) -> int:
        """How long to hold off for the rate to fall back to the bound (Kafka's
        QuotaUtils.throttleTime: overshoot / bound x the measured span); 0 when
        not exceeded."""
        if self.unlimited:
            return 0
        now = self.clock()
        total = self._purged_total(now)
        span_ms = self._window_span_ms(now)
        measured = total / (span_ms / 1000.0)
        if measured <= self.rate_bytes_per_s:
            return 0
        if self.rate_bytes_per_s == 0:
            # Nothing is allowed: wait for every recorded sample to expire.
            return self.window_num * self.window_ms
        return round((measured - self.rate_bytes_per_s) / self.rate_bytes_per_s * span_ms)

    def bytes_allowed_now(self) -> int:
        """Bytes that could be recorded now without exceeding the bound (a
        sizing hint; Kafka itself only asks is_exceeded)."""
        if self.unlimited:
            return UNLIMITED_RATE
        now = self.clock()
        total = self._purged_total(now)
        allowed = self.rate_bytes_per_s * self._window_span_ms(now) / 1000.0 - total
        return max(0, int(allowed))

    # ---- Kafka's SampledStat ring --------------------------------------------------------------------
    def _current_sample(self, now: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now))
        return self._samples[self._current]

    def _advance(self, now: int) -> _Sample:
        self._current = (self._current + 1) % (self.window_num + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now)
        return sample

    def _purged_total(self, now: int) -> float:
        expire_age = self.window_num * self.window_ms
        for sample in self._samples:
            if now - sample.last_event_ms >= expire_age:
                sample.reset(now)
        return sum(sample.value for sample in self._samples)

    def _window_span_ms(self, now: int) -> int:
        # SimpleRate.windowSize, called after the purge.
        if not self._samples:
            self._samples.append(_Sample(now))
        oldest = min(sample.start_ms for sample in self._samples)
        return max(now - oldest, self.window_ms)


class ReplicaThrottle:
    """Both replication quotas as one replica sees them: its partition, its
    broker id, the two rates and the topic's two throttled-replica lists."""

    def __init__(self, partition: int, broker_id: int, leader_rate: int = UNLIMITED_RATE,
                 follower_rate: int = UNLIMITED_RATE, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_s: int = DEFAULT_WINDOW_SIZE_S, clock: Callable[[], int] = _monotonic_ms):
        self.partition = partition
        self.broker_id = broker_id
        self.leader_quota = ReplicationQuota(leader_rate, window_num, window_size_s, clock)
        self.follower_quota = ReplicationQuota(follower_rate, window_num, window_size_s, clock)
        self.leader_throttled: frozenset[tuple[int, int]] | _AllReplicas = frozenset()
        self.follower_throttled: frozenset[tuple[int, int]] | _AllReplicas = frozenset()

    def update(self, leader_rate: int | None = None, follower_rate: int | None = None,
               leader_throttled_replicas: str | Iterable[str] | None = None,
               follower_throttled_replicas: str | Iterable[str] | None = None) -> None:
        """New rates (bytes/s) and/or the topic's two lists (raw config values);
        None keeps a setting as it is. Everything is checked before anything is
        applied, so a bad value (ValueError) changes nothing."""
        for rate in (leader_rate, follower_rate):
            if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate < 0):
                raise ValueError(f"a replication throttled rate must be an int >= 0, got {rate!r}")
        leader = None if leader_throttled_replicas is None else parse_throttled_replicas(leader_throttled_replicas)
        follower = (None if follower_throttled_replicas is None
                    else parse_throttled_replicas(follower_throttled_replicas))
        if leader_rate is not None:
            self.leader_quota.update_rate(leader_rate)
        if follower_rate is not None:
            self.follower_quota.update_rate(follower_rate)
        if leader is not None:
            self.leader_throttled = leader
        if follower is not None:
            self.follower_throttled = follower

    # ---- leader side: a follower fetches from this replica ---------------------------------------
    @property
    def leader_side_throttled(self) -> bool:
        """This leader replica is listed in leader.replication.throttled.replicas."""
        return is_throttled(self.leader_throttled, self.partition, self.broker_id)

    def leader_should_hold_back(self, follower_in_isr: bool) -> bool:
        """Kafka's ReplicaManager.shouldLeaderThrottle: answer a follower's fetch
        with no records while the leader quota is exceeded, unless it is in the ISR."""
        return not follower_in_isr and self.leader_side_throttled and self.leader_quota.is_exceeded()

    def record_leader(self, nbytes: int) -> None:
        """Bytes served to any follower of a throttled leader replica count
        (Kafka's sizeOfThrottledPartitions)."""
        if nbytes and self.leader_side_throttled:
            self.leader_quota.record(nbytes)

    # ---- follower side: this replica fetches from its leader -----------------------------------
    @property
    def follower_side_throttled(self) -> bool:
        """This follower replica is listed in follower.replication.throttled.replicas."""
        return is_throttled(self.follower_throttled, self.partition, self.broker_id)

    def follower_should_hold_back(self, caught_up: bool) -> bool:
        """Kafka's ReplicaFetcherThread.shouldFollowerThrottle: skip the fetch while
        the follower quota is exceeded, unless the follower has caught up."""
        return not caught_up and self.follower_side_throttled and self.follower_quota.is_exceeded()

    def follower_backoff_ms(self, max_backoff_ms: int) -> int:
        """How long a held-back follower waits before trying again: until the rate
        is back under the bound, at most the fetcher's backoff (Kafka waits
        replica.fetch.backoff.ms when it has nothing to fetch)."""
        return max(1, min(max_backoff_ms, self.follower_quota.throttle_time_ms()))

    def record_follower(self, nbytes: int) -> None:
        if nbytes and self.follower_side_throttled:
            self.follower_quota.record(nbytes)
