"""storage/log_manager.LogManager without Ray or an event loop: where a
replica's log lives, its offset checkpoints, and what the periodic log
duties decide, on a ManualClock."""
import os

from cluster import replica_schedule as duties
from cluster.partition import Partition
from cluster.replica_schedule import ReplicaSchedule
from core.clock import ManualClock
from core.naming import partition_dir_name
from storage.checkpoint import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                                REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile)
from storage.log_manager import CHECKPOINT_INTERVAL_S, RETENTION_FIRST_CHECK_S, LogManager, choose_log_dir
from storage.records import SimpleRecord, build_batch

BROKER = 1
CONFIG = {"log.retention.check.interval.ms": 300_000, "log.cleaner.backoff.ms": 15_000, "log.cleaner.enable": True,
          "log.cleaner.dedupe.buffer.size": 1 << 20}


def batch(n: int = 10) -> bytes:
    return build_batch([SimpleRecord(key=b"k%d" % i, value=b"v" * 100) for i in range(n)], compression=0)


def manager(dirs, clock=None, **log_config):
    logs = LogManager([str(d) for d in dirs], "t", 0, CONFIG, clock or ManualClock())
    log, hw = logs.open_log({"segment_bytes": 1 << 20, **log_config})
    p = logs.partition = Partition("t", 0, BROKER, log, hw)
    assert p.make_leader(1, 0, [BROKER], [BROKER], now_ms=0) == 0
    return logs, p


def append(p, n=10):
    [result] = p.append([(batch(n), 1, 1000)], 0, now_ms=0)
    assert result.error == 0


def test_the_dir_holding_the_partition_wins_else_the_one_with_fewest_partitions(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, count in ((a, 2), (b, 1)):
        for i in range(count):
            (d / f"other-{i}").mkdir(parents=True)
    # c does not exist yet: it holds no partition.
    assert choose_log_dir([str(a), str(b), str(c)], "t", 0) == c
    (a / partition_dir_name("t", 0)).mkdir()
    assert choose_log_dir([str(a), str(b), str(c)], "t", 0) == a


def test_a_reopened_replica_starts_from_its_checkpoints(tmp_path):
    logs, p = manager([tmp_path])
    append(p)
    append(p)
    assert p.high_watermark == 20
    logs.close()  # flush, then every checkpoint file
    key = ("t", 0)
    assert OffsetCheckpointFile(str(tmp_path / RECOVERY_POINT_CHECKPOINT)).read() == {key: 20}
    assert OffsetCheckpointFile(str(tmp_path / REPLICATION_OFFSET_CHECKPOINT)).read() == {key: 20}
    assert OffsetCheckpointFile(str(tmp_path / LOG_START_OFFSET_CHECKPOINT)).read() == {key: 0}
    again = LogManager([str(tmp_path)], "t", 0, CONFIG, ManualClock())
    log, hw = again.open_log({"segment_bytes": 1 << 20})
    again.partition = Partition("t", 0, BROKER, log, hw)
    assert (hw, log.recovery_point, log.log_end_offset) == (20, 20, 20)
    again.close()


def test_checkpoints_are_pending_only_while_a_value_changed(tmp_path):
    logs, p = manager([tmp_path])
    assert logs.checkpoint_pending()  # nothing written yet
    logs.checkpoint_job()()
    assert not logs.checkpoint_pending()
    append(p)  # the HW moves
    assert logs.checkpoint_pending()
    job = logs.checkpoint_job()  # the values as of now, stored later on the I/O thread
    job()
    assert not logs.checkpoint_pending()
    written = os.stat(tmp_path / REPLICATION_OFFSET_CHECKPOINT).st_mtime_ns
    logs.store_checkpoints(logs.checkpoint_values(logs.log.recovery_point))  # unchanged: not rewritten
    assert os.stat(tmp_path / REPLICATION_OFFSET_CHECKPOINT).st_mtime_ns == written
    logs.close()


def test_plan_schedules_checkpoints_while_busy_retention_always_and_the_cleaner_for_compacted_logs(tmp_path):
    clock = ManualClock()
    logs, p = manager([tmp_path], clock)
    schedule, now = ReplicaSchedule(), clock.monotonic()
    logs.plan(schedule, now, idle=False)
    assert schedule.scheduled() == {duties.CHECKPOINT, duties.RETENTION}
    assert schedule.next_delay(now) == CHECKPOINT_INTERVAL_S
    clock.advance(CHECKPOINT_INTERVAL_S)
    assert schedule.take_due(clock.monotonic()) == [duties.CHECKPOINT]
    # Retention's first check comes at most RETENTION_FIRST_CHECK_S after startup.
    clock.advance(RETENTION_FIRST_CHECK_S - CHECKPOINT_INTERVAL_S)
    assert duties.RETENTION in schedule.take_due(clock.monotonic())
    logs.checkpoint_job()()
    logs.plan(schedule, clock.monotonic(), idle=True)  # idle, files current: retention only
    assert schedule.scheduled() == {duties.RETENTION}
    append(p)
    logs.plan(schedule, clock.monotonic(), idle=True)  # idle but owing a checkpoint
    assert duties.CHECKPOINT in schedule.scheduled()
    logs.close()

    compacted, _ = manager([tmp_path / "compacted"], clock, cleanup_policy="compact")
    schedule = ReplicaSchedule()
    compacted.plan(schedule, clock.monotonic(), idle=False)
    assert duties.CLEAN in schedule.scheduled()
    compacted.config = {**CONFIG, "log.cleaner.enable": False}
    compacted.plan(schedule, clock.monotonic(), idle=False)
    assert duties.CLEAN not in schedule.scheduled()
    compacted.close()


def test_retention_deletes_past_retention_bytes_and_hands_the_unlinks_out(tmp_path):
    clock = ManualClock()
    logs, p = manager([tmp_path], clock, segment_bytes=4096, retention_bytes=4096, file_delete_delay_ms=1000)
    for _ in range(8):
        append(p)
    assert logs.unlink_job(clock.now_ms()) is None  # nothing scheduled for deletion yet
    result = logs.apply_retention(clock.now_ms())
    assert result.deleted_segments >= 1 and result.log_start_changed
    assert [n for n in os.listdir(logs.log.dir) if n.endswith(".deleted")]
    clock.advance(1.0)  # file.delete.delay.ms passes
    logs.unlink_job(clock.now_ms())()
    assert not [n for n in os.listdir(logs.log.dir) if n.endswith(".deleted")]
    logs.close()


def test_a_deleted_replica_leaves_no_files_and_no_checkpoint_entries(tmp_path):
    logs, p = manager([tmp_path])
    append(p)
    logs.write_checkpoints(flush=True)
    logs.delete()
    assert not (tmp_path / partition_dir_name("t", 0)).exists()
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
        assert OffsetCheckpointFile(str(tmp_path / name)).read() == {}
