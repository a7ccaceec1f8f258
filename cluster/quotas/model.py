"""Quota entities, their precedence, and the rate a quota bounds.

An entity is a user, a client id, or both; either part may be the default
("<default>", None on the wire). A request from (user, client id) is bound by
the first of Kafka's eight levels that has a value for that quota
(ClientQuotaManager.DefaultQuotaCallback):

    1 /config/users/<user>/clients/<client-id>
    2 /config/users/<user>/clients/<default>
    3 /config/users/<user>
    4 /config/users/<default>/clients/<client-id>
    5 /config/users/<default>/clients/<default>
    6 /config/users/<default>
    7 /config/clients/<client-id>
    8 /config/clients/<default>

The level also decides whose rate is measured: a user-level quota is shared
by all that user's client ids, a client-id-level one by all users of it.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

DEFAULT = "<default>"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Key -> whether Kafka stores it as an integer (LONG) rather than a double.
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

# Wire entity types (ClientQuotaEntity.USER / CLIENT_ID / IP).
ENTITY_USER = "user"
ENTITY_CLIENT_ID = "client-id"
ENTITY_IP = "ip"


@dataclasses.dataclass(frozen=True)
class QuotaEntity:
    """user / client_id: a name, DEFAULT, or None when the entity has no such part."""
    user: str | None = None
    client_id: str | None = None

    def __post_init__(self):
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id, or both")


class QuotaConfigs:
    """Every entity's quota values; immutable once built (replaced whole on a change)."""

    def __init__(self, entries: Mapping[QuotaEntity, Mapping[str, float]] | None = None):
        self.entries: dict[QuotaEntity, dict[str, float]] = {
            entity: dict(values) for entity, values in (entries or {}).items() if values}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def value(self, entity: QuotaEntity, key: str) -> float | None:
        values = self.entries.get(entity)
        return None if values is None else values.get(key)

    def resolve(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """-> ((user tag, client-id tag) whose rate is measured, bound or None)."""
        for entity, tags in _levels(user, client_id):
            bound = self.value(entity, key)
            if bound is not None:
                return tags, bound
        return ("", client_id), None


def _levels(user: str, client_id: str) -> Iterable[tuple[QuotaEntity, tuple[str, str]]]:
    both, user_only, client_only = (user, client_id), (user, ""), ("", client_id)
    yield QuotaEntity(user, client_id), both
    yield QuotaEntity(user, DEFAULT), both
    yield QuotaEntity(user, None), user_only
    yield QuotaEntity(DEFAULT, client_id), both
    yield QuotaEntity(DEFAULT, DEFAULT), both
    yield QuotaEntity(DEFAULT, None), user_only
    yield QuotaEntity(None, client_id), client_only
    yield QuotaEntity(None, DEFAULT), client_only


class SampledRate:
    """A rate over a SampledStat of `samples` windows of `window_ms`: the sum
    of the live samples over the time they span, counted as at least one
    whole window (so a burst right after a quiet spell is not measured over a
    few milliseconds). This is Kafka's SimpleRate, which its replication
    quotas use; its client quotas use Rate, which counts the span as at
    least samples - 1 windows. That padding lets a new or quiet client send
    ten windows' worth at once before any throttle, and again eleven windows
    later when that sample expires: about 1.7x the quota over the first 12 s.
    Counted from the first sample, a client gets at most one window's worth
    ahead of its quota, then the quota (issue 28: within 1.2x over 12 s)."""

    __slots__ = ("samples", "window_ms", "_starts", "_totals")

    def __init__(self, samples: int, window_ms: int):
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[int] = []
        self._totals: list[float] = []

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts or now_ms >= self._starts[-1] + self.window_ms:
            self._starts.append(now_ms)
            self._totals.append(0.0)
            if len(self._starts) > self.samples:
                del self._starts[0], self._totals[0]
        self._totals[-1] += value

    def _purge(self, now_ms: int) -> None:
        expire_age = self.samples * self.window_ms
        while self._starts and now_ms - self._starts[0] >= expire_age:
            del self._starts[0], self._totals[0]

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        elapsed = now_ms - (self._starts[0] if self._starts else now_ms)
        return max(elapsed, self.window_ms, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        window = self.window_size_ms(now_ms)
        return sum(self._totals) / (window / 1000.0)

    def idle(self, now_ms: int) -> bool:
        """No sample left in the span (the sensor may be dropped)."""
        self._purge(now_ms)
        return not self._starts


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """QuotaUtils.throttleTime: the delay X that brings O back to T over the
    window W, O * W / (W + X) = T, so X = (O - T) / T * W."""
    if bound <= 0:
        return int(window_ms)
    return round((observed - bound) / bound * window_ms)


class ClientQuotaManager:
    """One quota type (produce bytes, fetch bytes, request time): a rate per
    measured (user, client-id) pair, checked against the bound its entity has."""

    def __init__(self, key: str, samples: int = 11, window_s: int = 1, max_throttle_ms: int | None = None,
                 max_sensors: int = 10000, share: float = 1.0):
        self.key = key
        # The part of each bound this process enforces: with N edge processes
        # on a node each measures its own connections, so each holds 1/N of
        # the broker's quota (net/client_quotas.py).
        self.share = share
        self.samples = samples
        self.window_ms = window_s * 1000
        # ClientRequestQuotaManager caps its throttle time at one window.
        self.max_throttle_ms = max_throttle_ms
        self.max_sensors = max_sensors
        self._rates: dict[tuple[str, str], SampledRate] = {}

    def rate(self, tags: tuple[str, str]) -> SampledRate:
        found = self._rates.get(tags)
        if found is None:
            if len(self._rates) >= self.max_sensors:
                # Kafka expires sensors idle for an hour; here the oldest made
                # goes (a client id is client input: the count is bounded).
                self._rates.pop(next(iter(self._rates)))
            found = self._rates[tags] = SampledRate(self.samples, self.window_ms)
        return found

    def record_and_throttle_ms(self, configs: QuotaConfigs, user: str, client_id: str, value: float,
                               now_ms: int) -> int:
        """Record `value` for the client; the throttle time if its rate is over its bound, else 0."""
        tags, bound = configs.resolve(self.key, user, client_id)
        if bound is None and tags not in self._rates:
            return 0  # nothing bounds this client: no sensor made for it
        rate = self.rate(tags)
        rate.record(value, now_ms)
        if bound is None:
            return 0
        bound *= self.share
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        throttle = throttle_time_ms(observed, bound, rate.window_size_ms(now_ms))
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return max(throttle, 0)

    def unrecord(self, configs: QuotaConfigs, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers without its data)."""
        tags, _ = configs.resolve(self.key, user, client_id)
        self.rate(tags).record(-value, now_ms)


def quota_value_text(key: str, value: float) -> str:
    """How Kafka stores a value: LONG keys as an integer, others as a double
    (AlterClientQuotas refuses a fractional value for a LONG key)."""
    if QUOTA_KEYS[key]:
        as_int = int(value + 1e-6)
        if abs(as_int - value) > 1e-6:
            raise ValueError(f"Configuration {key} must be a LONG value")
        return str(as_int)
    return repr(float(value))


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of a znode's config (a users znode also holds SCRAM credentials)."""
    values = {}
    for key, text in config.items():
        if key in QUOTA_KEYS:
            try:
                values[key] = float(text)
            except (TypeError, ValueError):
                continue
    return values
