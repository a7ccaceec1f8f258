"""Segment lifecycle: rolling (size, time + jitter, index), retention,
log start offset moves, asynchronous deletion, flush policy."""

import os
import random

import pytest

from storage.errors import OffsetOutOfRangeError
from storage.log import Log, LogConfig, RetentionResult
from storage.records import SimpleRecord, build_batch


def batch(n=2, size=60, ts=1_000, key=b"k", codec=0):
    return build_batch([SimpleRecord(key + b"%d" % i, b"x" * size, (), ts + i) for i in range(n)], codec)


def open_log(path, recovery_point=0, log_start_offset=0, now_ms=10_000, rng=None, **cfg):
    return Log(str(path), LogConfig(**cfg), recovery_point, log_start_offset, now_ms=now_ms, rng=rng)


def names(log, suffix):
    return sorted(n for n in os.listdir(log.dir) if n.endswith(suffix))


# ------------------------------------------------------------------ rolling


def test_roll_by_size(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    for _ in range(20):
        log.append_as_leader(batch(), 0, now_ms=1)
    assert len(log.segments) > 3
    assert all(s.size <= 600 for s in log.segments)


def test_segment_jitter_is_drawn_per_segment_and_bounded():
    cfg = LogConfig(segment_ms=1000, segment_jitter_ms=5000)
    rng = random.Random(7)
    draws = {cfg.random_segment_jitter(rng) for _ in range(200)}
    assert all(0 <= d < 1000 for d in draws) and len(draws) > 50
    assert LogConfig().random_segment_jitter(rng) == 0


def test_roll_by_time_honours_jitter(tmp_path):
    class Fixed(random.Random):
        def randrange(self, n):
            return 300

    log = open_log(tmp_path / "t-0", segment_ms=1000, segment_jitter_ms=500, rng=Fixed())
    assert log.active_segment.roll_jitter_ms == 300
    log.append_as_leader(batch(1, ts=5_000), 0, now_ms=1)
    log.append_as_leader(batch(1, ts=5_700), 0, now_ms=2)
    assert len(log.segments) == 1  # 700 <= 1000 - 300
    log.append_as_leader(batch(1, ts=5_701), 0, now_ms=3)
    assert [s.base_offset for s in log.segments] == [0, 2]
    # every segment gets its own draw
    assert all(s.roll_jitter_ms == 300 for s in log.segments)


def test_compacted_topic_rolls_by_max_compaction_lag(tmp_path):
    cfg = LogConfig(segment_ms=10_000, cleanup_policy="compact", max_compaction_lag_ms=1_000)
    assert cfg.max_segment_ms == 1_000
    assert LogConfig(segment_ms=10_000, max_compaction_lag_ms=1_000).max_segment_ms == 10_000
    log = Log(str(tmp_path / "t-0"), cfg, now_ms=0)
    log.append_as_leader(batch(1, ts=5_000), 0, now_ms=1)
    log.append_as_leader(batch(1, ts=6_001), 0, now_ms=2)
    assert len(log.segments) == 2


def test_roll_when_index_is_full(tmp_path):
    log = open_log(tmp_path / "t-0", segment_index_bytes=48, index_interval_bytes=0)
    for _ in range(20):
        log.append_as_leader(batch(1, 10), 0, now_ms=1)
    assert len(log.segments) >= 3
    assert all(s.index.entries <= 6 for s in log.segments)


# ---------------------------------------------------------------- retention


def filled(tmp_path, n=30, **cfg):
    cfg.setdefault("segment_bytes", 400)
    log = open_log(tmp_path / "t-0", **cfg)
    for i in range(n):
        log.append_as_leader(batch(2, 60, ts=1_000 * i), 0, now_ms=1)
    return log


def test_retention_bytes_from_config(tmp_path):
    log = filled(tmp_path, retention_bytes=1000, file_delete_delay_ms=0)
    before = len(log.segments)
    res = log.apply_retention(high_watermark=log.log_end_offset, now_ms=0)
    assert isinstance(res, RetentionResult)
    assert res.deleted_segments == before - len(log.segments) > 0
    assert res.log_start_changed and res.log_start_offset == log.log_start_offset == log.segments[0].base_offset
    # as Kafka: the remaining size is the smallest that is not below the limit
    assert log.size_in_bytes >= 1000 and log.size_in_bytes - log.segments[0].size < 1000
    assert log.apply_retention(now_ms=0) == RetentionResult(0, 0, log.log_start_offset, False)


def test_retention_ms_uses_largest_timestamp(tmp_path):
    log = filled(tmp_path, retention_ms=5_000, file_delete_delay_ms=0)
    now = 20_000
    res = log.apply_retention(now_ms=now)
    assert res.deleted_segments > 0
    # every remaining closed segment is young enough, the first deleted was not
    for seg in log.segments[:-1]:
        assert now - seg.max_timestamp <= 5_000
    assert log.read_bytes(log.log_start_offset, 1)


def test_retention_unlimited_and_policy_gate(tmp_path):
    log = filled(tmp_path, retention_ms=-1, retention_bytes=-1)
    assert log.apply_retention(now_ms=10**12).deleted_segments == 0
    compact = filled(tmp_path / "c", retention_ms=1, retention_bytes=1, cleanup_policy="compact")
    assert compact.apply_retention(now_ms=10**12).deleted_segments == 0
    both = filled(tmp_path / "b", retention_ms=1, cleanup_policy="compact,delete", file_delete_delay_ms=0)
    n = len(both.segments)
    assert both.apply_retention(now_ms=10**12).deleted_segments == n - 1


def test_retention_never_deletes_active_segment(tmp_path):
    log = filled(tmp_path, retention_ms=0, retention_bytes=0, file_delete_delay_ms=0)
    log.apply_retention(now_ms=10**12)
    assert len(log.segments) == 1
    assert log.log_start_offset == log.active_segment.base_offset
    assert log.log_end_offset == 60


def test_retention_stops_at_high_watermark(tmp_path):
    log = filled(tmp_path, retention_ms=0, file_delete_delay_ms=0)
    hw = log.segments[3].base_offset + 1
    log.apply_retention(high_watermark=hw, now_ms=10**12)
    # segments ending at or below the HW go; the one holding it stays
    assert log.segments[0].base_offset <= hw - 1 < log.segments[1].base_offset
    assert log.log_start_offset <= hw
    assert log.apply_retention(high_watermark=0, now_ms=10**12).deleted_segments == 0


def test_log_start_offset_cannot_pass_high_watermark(tmp_path):
    log = filled(tmp_path)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(11, high_watermark=10)
    assert log.maybe_increment_log_start_offset(10, high_watermark=10)
    assert not log.maybe_increment_log_start_offset(5)
    assert log.delete_records(-1, high_watermark=20) == 20
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(25, high_watermark=20)
    assert log.delete_records(15, high_watermark=20) == 20  # never moves back
    # segments below the new start go on the next retention pass
    res = log.apply_retention(now_ms=0)
    assert res.deleted_segments > 0 and not res.log_start_changed
    assert log.segments[0].base_offset <= 20 < log.segments[0].next_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(19, 100)


def test_deletion_is_renamed_then_delayed(tmp_path):
    log = filled(tmp_path, retention_bytes=1000, file_delete_delay_ms=5_000)
    res = log.apply_retention(now_ms=100)
    assert res.deleted_segments > 0
    deleted = names(log, ".deleted")
    assert len([n for n in deleted if n.endswith(".log.deleted")]) == res.deleted_segments
    assert log.pending_deletes == res.deleted_segments
    assert log.delete_pending(now_ms=5_099) == 0
    assert log.delete_pending(now_ms=5_100) == res.deleted_segments
    assert names(log, ".deleted") == [] and log.pending_deletes == 0


def test_leftover_deleted_files_removed_at_startup(tmp_path):
    log = filled(tmp_path, retention_bytes=1000, file_delete_delay_ms=60_000)
    log.apply_retention(now_ms=0)
    assert names(log, ".deleted")
    start, end = log.log_start_offset, log.log_end_offset
    log.close()
    again = open_log(log.dir, recovery_point=end, log_start_offset=start, segment_bytes=400)
    assert names(again, ".deleted") == []
    assert (again.log_start_offset, again.log_end_offset) == (start, end)


def test_reads_of_a_deleted_segment_object_still_work_until_removed(tmp_path):
    log = filled(tmp_path, retention_bytes=1000, file_delete_delay_ms=5_000)
    first = log.segments[0]
    data = first.read_bytes(0, first.size)
    log.apply_retention(now_ms=0)
    assert first.log_path.endswith(".deleted")
    assert first.read_bytes(0, first.size) == data


# ------------------------------------------------------------------- flush


def test_flush_messages_and_flush_ms(tmp_path):
    log = open_log(tmp_path / "t-0", flush_messages=4)
    for _ in range(3):
        log.append_as_leader(batch(1), 0, now_ms=1)
    assert log.recovery_point == 0 and log.unflushed_messages == 3
    log.append_as_leader(batch(1), 0, now_ms=1)
    assert log.recovery_point == 4
    timed = open_log(tmp_path / "t-1", flush_ms=1_000, now_ms=0)
    timed.append_as_leader(batch(1), 0, now_ms=10)
    assert not timed.maybe_flush(999) and timed.recovery_point == 0
    assert timed.maybe_flush(1_000) and timed.recovery_point == 1


# ---------------------------------------------------- flush after a roll


def _roll_once(log):
    while len(log.segments) < 2:
        log.append_as_leader(batch(), 0, now_ms=1)
    return log.segments[0], log.segments[1].base_offset


def test_roll_flushes_through_the_scheduler_not_in_the_append(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    log.append_as_leader(batch(), 0, now_ms=1)  # its leader-epoch checkpoint is fsynced: not the roll
    jobs = []
    log.flush_scheduler = jobs.append
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    rolled, boundary = _roll_once(log)
    # The append that rolled returned without an fsync; the job is queued.
    assert len(jobs) == 1 and synced == [] and log.recovery_point == 0
    jobs[0]()
    assert log.recovery_point == boundary
    wanted = {os.path.realpath(p) for p in (rolled.log_path, rolled.index.path, rolled.time_index.path, log.dir)}
    assert wanted <= set(synced)
    # The active segment is not the job's business.
    assert os.path.realpath(log.segments[1].log_path) not in synced


def test_roll_without_a_scheduler_flushes_before_returning(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    _rolled, boundary = _roll_once(log)
    assert log.recovery_point == boundary


def test_a_truncation_after_the_roll_keeps_the_recovery_point_down(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    jobs = []
    log.flush_scheduler = jobs.append
    _rolled, boundary = _roll_once(log)
    log.truncate_to(boundary - 2)  # a follower truncating into the rolled segment
    jobs[0]()
    assert log.recovery_point <= log.log_end_offset < boundary


def test_a_flush_job_tolerates_deleted_segments_and_a_closed_log(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600, retention_bytes=1)
    jobs = []
    log.flush_scheduler = jobs.append
    rolled, boundary = _roll_once(log)
    for path in (rolled.log_path, rolled.index.path, rolled.time_index.path):
        if os.path.exists(path):
            os.rename(path, path + ".deleted")
    jobs[0]()  # nothing left to fsync under those names: no error
    assert log.recovery_point == boundary
    log.append_as_leader(batch(), 0, now_ms=1)
    _roll_later = log.roll()
    log.close()
    for job in jobs[1:]:
        job()  # after close: a no-op
    assert log.closed
