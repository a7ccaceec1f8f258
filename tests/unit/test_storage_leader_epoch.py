import pytest

from storage.leader_epoch import LeaderEpochCache


def cache(tmp_path, entries=()):
    c = LeaderEpochCache(str(tmp_path))
    for e, o in entries:
        c.assign(e, o)
    return c


def test_assign_is_monotonic_and_ignores_duplicates(tmp_path):
    c = cache(tmp_path)
    assert c.latest_epoch is None
    assert c.assign(1, 0)
    assert not c.assign(1, 5)  # same epoch, later offset: nothing to record
    assert c.assign(2, 10)
    assert c.assign(4, 20)
    assert c.entries() == [(1, 0), (2, 10), (4, 20)]
    assert c.latest_epoch == 4 and c.latest_entry == (4, 20) and c.earliest_entry == (1, 0)
    # same epoch with an earlier start offset replaces it
    assert c.assign(4, 15)
    assert c.entries() == [(1, 0), (2, 10), (4, 15)]
    # a lower epoch / offset removes the entries that would break monotonicity
    assert c.assign(3, 12)
    assert c.entries() == [(1, 0), (2, 10), (3, 12)]
    assert c.assign(5, 5)
    assert c.entries() == [(1, 0), (5, 5)]
    with pytest.raises(ValueError):
        c.assign(-1, 0)


def test_persisted_and_reloaded(tmp_path):
    c = cache(tmp_path, [(0, 0), (2, 50)])
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 50\n"
    assert LeaderEpochCache(str(tmp_path)).entries() == [(0, 0), (2, 50)]
    c.clear()
    assert LeaderEpochCache(str(tmp_path)).entries() == []


def test_end_offset_for(tmp_path):
    c = cache(tmp_path)
    assert c.end_offset_for(0, 100) == (-1, -1)
    for e, o in [(1, 10), (3, 20), (5, 40)]:
        c.assign(e, o)
    leo = 55
    assert c.end_offset_for(-1, leo) == (-1, -1)  # undefined epoch
    assert c.end_offset_for(5, leo) == (5, leo)  # latest epoch: the log end
    assert c.end_offset_for(6, leo) == (-1, -1)  # newer than anything known
    assert c.end_offset_for(3, leo) == (3, 40)  # ends where epoch 5 starts
    assert c.end_offset_for(4, leo) == (3, 40)  # unknown epoch: largest smaller one
    assert c.end_offset_for(2, leo) == (1, 20)
    assert c.end_offset_for(1, leo) == (1, 20)
    assert c.end_offset_for(0, leo) == (0, 10)  # below the first: its start offset
    assert c.epoch_for_offset(5) is None
    assert c.epoch_for_offset(10) == 1
    assert c.epoch_for_offset(39) == 3
    assert c.epoch_for_offset(1000) == 5
    assert c.previous_epoch() == 3


def test_truncate_from_end(tmp_path):
    c = cache(tmp_path, [(1, 10), (3, 20), (5, 40)])
    c.truncate_from_end(100)
    assert c.entries() == [(1, 10), (3, 20), (5, 40)]
    c.truncate_from_end(40)
    assert c.entries() == [(1, 10), (3, 20)]
    c.truncate_from_end(15)
    assert c.entries() == [(1, 10)]
    assert LeaderEpochCache(str(tmp_path)).entries() == [(1, 10)]
    c.truncate_from_end(0)
    assert c.entries() == []


def test_truncate_from_start(tmp_path):
    c = cache(tmp_path, [(1, 10), (3, 20), (5, 40)])
    c.truncate_from_start(5)
    assert c.entries() == [(1, 10), (3, 20), (5, 40)]
    c.truncate_from_start(10)
    assert c.entries() == [(1, 10), (3, 20), (5, 40)]
    c.truncate_from_start(25)
    assert c.entries() == [(3, 25), (5, 40)]
    c.truncate_from_start(40)
    assert c.entries() == [(5, 40)]
    c.truncate_from_start(90)
    assert c.entries() == [(5, 90)]
    assert LeaderEpochCache(str(tmp_path)).entries() == [(5, 90)]
