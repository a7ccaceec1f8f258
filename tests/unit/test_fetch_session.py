"""KIP-227 fetch session cache: full/incremental resolution, errors, bounds, fairness."""
import pytest
from kio.schema.errors import ErrorCode

from net.fetch_session import FetchSessionCache, FetchSessionError, SessionPartition


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def part(p: int, offset: int = 0) -> SessionPartition:
    return SessionPartition("t", None, p, offset, 1024, -1)


def test_sessionless_full_fetch():
    cache = FetchSessionCache()
    session, parts, incremental = cache.begin(0, -1, [part(0), part(1)], [])
    assert session is None and not incremental and [p.partition for p in parts] == [0, 1]


def test_full_then_incremental_keeps_unlisted_partitions_and_applies_changes():
    cache = FetchSessionCache()
    session, parts, incremental = cache.begin(0, 0, [part(0), part(1), part(2)], [])
    assert session.session_id > 0 and session.epoch == 1 and not incremental
    same, parts, incremental = cache.begin(session.session_id, 1, [part(1, offset=50)], [("t", 2)])
    assert same is session and incremental and session.epoch == 2
    assert {p.partition: p.fetch_offset for p in parts} == {0: 0, 1: 50}


def test_session_errors():
    cache = FetchSessionCache()
    with pytest.raises(FetchSessionError) as info:
        cache.begin(12345, 1, [], [])
    assert info.value.error == ErrorCode.fetch_session_id_not_found
    session, _, _ = cache.begin(0, 0, [part(0)], [])
    with pytest.raises(FetchSessionError) as info:
        cache.begin(session.session_id, 5, [], [])
    assert info.value.error == ErrorCode.invalid_fetch_session_epoch


def test_final_epoch_closes_the_session():
    cache = FetchSessionCache()
    session, _, _ = cache.begin(0, 0, [part(0)], [])
    cache.begin(session.session_id, -1, [part(0)], [])
    with pytest.raises(FetchSessionError):
        cache.begin(session.session_id, 1, [], [])


def test_cache_bound_and_eviction_of_idle_sessions():
    clock = Clock()
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000, clock=clock)
    a, _, _ = cache.begin(0, 0, [part(0)], [])
    b, _, _ = cache.begin(0, 0, [part(0)], [])
    c, _, _ = cache.begin(0, 0, [part(0)], [])
    assert c is None, "full and nothing idle long enough: no session"
    clock.now = 5.0
    cache.begin(b.session_id, 1, [], [])  # b is active again
    d, _, _ = cache.begin(0, 0, [part(0)], [])
    assert d is not None and a.session_id not in cache.sessions and b.session_id in cache.sessions
    assert len(cache.sessions) == 2


def test_incremental_responses_carry_only_news_and_rotate_partitions():
    cache = FetchSessionCache()
    session, parts, _ = cache.begin(0, 0, [part(0), part(1)], [])
    for p in parts:
        cache.remember(session, p, 10, 10, 0, has_records=False)
    p0, p1 = parts
    assert not cache.must_send(p0, 0, False, 10, 10, 0)
    assert cache.must_send(p0, 0, True, 10, 10, 0)
    assert cache.must_send(p1, 0, False, 11, 11, 0)
    assert cache.must_send(p1, 6, False, 10, 10, 0)
    cache.remember(session, p0, 12, 12, 0, has_records=True)
    assert list(session.partitions) == [("t", 1), ("t", 0)]


def test_sessions_hold_a_bounded_number_of_partitions():
    cache = FetchSessionCache(max_slots=100, eviction_ms=120_000, max_partitions=5)
    many = [part(i) for i in range(4)]
    session, _, _ = cache.begin(0, 0, many, [])
    assert session is not None and cache.cached_partitions == 4
    # A full fetch that would pass the bound gets no session (it is still served, sessionless).
    refused, parts, incremental = cache.begin(0, 0, [part(10), part(11)], [])
    assert refused is None and len(parts) == 2 and not incremental
    # An empty full fetch gets none either.
    assert cache.begin(0, 0, [], [])[0] is None
    # An incremental fetch that would add past the bound ends its session.
    cache.begin(session.session_id, 1, [part(4)], [])
    assert cache.cached_partitions == 5
    with pytest.raises(FetchSessionError):
        cache.begin(session.session_id, 2, [part(5)], [])
    assert cache.cached_partitions == 0 and not cache.sessions
