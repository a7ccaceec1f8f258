"""cluster.partition.Partition: leadership, HW, ISR and divergence rules,
driven without Ray over real logs (two replicas of one partition)."""
from kio.schema.errors import ErrorCode

from cluster.partition import Partition
from storage.log import Log, LogConfig
from storage.records import SimpleRecord, build_batch

LEADER, FOLLOWER = 1, 2


def batch(n: int = 1, tag: bytes = b"v") -> bytes:
    return build_batch([SimpleRecord(key=b"k", value=tag + str(i).encode()) for i in range(n)], compression=0)


def replica(tmp_path, broker_id: int, min_isr: int = 1) -> Partition:
    log = Log(str(tmp_path / f"broker-{broker_id}" / "t-0"), LogConfig(segment_bytes=1 << 20))
    return Partition("t", 0, broker_id, log, 0, min_insync_replicas=min_isr)


def append(p: Partition, records: bytes, acks: int = -1, epoch: int = -1):
    return p.append([(records, acks, 1000)], epoch, now_ms=0)[0]


def replicate(leader: Partition, follower: Partition, now_ms: int = 0):
    """One follower fetch round, as actors/follower.py does it."""
    result = leader.fetch_for_follower(FOLLOWER, follower.log.log_end_offset, follower.last_fetched_epoch(),
                                       leader.leader_epoch, 1 << 20, now_ms)
    if result.diverging is not None:
        follower.truncate_for_divergence(*result.diverging)
    elif result.error == 0:
        follower.append_as_follower(result.records, result.high_watermark, result.log_start_offset)
    if result.expand_isr is not None:
        leader.apply_isr(result.expand_isr, leader.state_zk_version + 1)
    return result


def pair(tmp_path, isr=(LEADER, FOLLOWER), min_isr=1):
    leader, follower = replica(tmp_path, LEADER, min_isr), replica(tmp_path, FOLLOWER, min_isr)
    assert leader.make_leader(1, 0, list(isr), [LEADER, FOLLOWER], zk_version=0, now_ms=0) == 0
    assert follower.make_follower(1, LEADER, 0, list(isr), [LEADER, FOLLOWER]) == 0
    return leader, follower


def test_hw_waits_for_the_isr_and_follower_hw_follows(tmp_path):
    leader, follower = pair(tmp_path)
    result = append(leader, batch(3))
    assert result[0] == 0 and result[5] == 2
    assert leader.high_watermark == 0, "HW must not pass what the follower has"
    replicate(leader, follower)              # follower gets 0..2, reports LEO 0
    assert follower.log.log_end_offset == 3 and follower.high_watermark == 0
    r = replicate(leader, follower)          # reports LEO 3: HW moves to 3
    assert r.hw_moved and leader.high_watermark == 3
    replicate(leader, follower)
    assert follower.high_watermark == 3


def test_reads_stop_at_the_high_watermark(tmp_path):
    leader, follower = pair(tmp_path)
    append(leader, batch(2))
    error, hw, _lso, _start, slices = leader.read(0, 1 << 20, 0, -1)
    assert error == 0 and hw == 0 and slices == []
    replicate(leader, follower)
    replicate(leader, follower)
    error, hw, _lso, _start, slices = leader.read(0, 1 << 20, 0, -1)
    assert hw == 2 and sum(s[2] for s in slices) > 0


def test_lagging_follower_leaves_isr_then_rejoins_when_caught_up(tmp_path):
    leader, follower = pair(tmp_path)
    append(leader, batch())
    assert leader.out_of_sync_replicas(now_ms=10_000, lag_time_ms=30_000) == []
    assert leader.out_of_sync_replicas(now_ms=31_000, lag_time_ms=30_000) == [FOLLOWER]
    leader.apply_isr((LEADER,), 1)
    assert leader.high_watermark == 1, "with the follower out, HW = leader LEO"
    replicate(leader, follower, now_ms=31_000)
    r = replicate(leader, follower, now_ms=31_001)
    assert r.expand_isr == (LEADER, FOLLOWER)
    assert leader.isr == (LEADER, FOLLOWER)


def test_min_insync_replicas(tmp_path):
    leader, _follower = pair(tmp_path, isr=(LEADER,), min_isr=2)
    error, *_ = append(leader, batch(), acks=-1)
    assert error == ErrorCode.not_enough_replicas
    error, *_ = append(leader, batch(), acks=1)
    assert error == 0, "min.insync.replicas applies to acks=all only"


def test_epoch_fencing(tmp_path):
    leader, _ = pair(tmp_path)
    assert leader.make_leader(2, 2, [LEADER], [LEADER, FOLLOWER]) == 0
    assert append(leader, batch(), epoch=2)[0] == 0
    assert append(leader, batch(), epoch=5)[0] == ErrorCode.not_leader_or_follower
    assert leader.read(0, 100, 0, current_leader_epoch=1)[0] == ErrorCode.fenced_leader_epoch
    assert leader.read(0, 100, 0, current_leader_epoch=3)[0] == ErrorCode.unknown_leader_epoch
    assert leader.read(0, 100, 0, current_leader_epoch=-1)[0] == 0, "-1: the client does not know the epoch"
    assert leader.make_leader(2, 1, [LEADER], [LEADER, FOLLOWER]) == ErrorCode.fenced_leader_epoch
    assert leader.make_leader(2, 2, [LEADER], [LEADER, FOLLOWER]) == 0, "the same epoch again is accepted"
    assert leader.fence_controller(1) == ErrorCode.stale_controller_epoch


def test_divergent_follower_truncates_to_the_new_leaders_epoch_end(tmp_path):
    """Old leader A wrote 0..4 in epoch 0, only 0..2 reached B. B becomes leader
    (epoch 1) and writes 3..4 anew; A follows and must drop its own 3..4."""
    a, b = replica(tmp_path, LEADER), replica(tmp_path, FOLLOWER)
    a.make_leader(1, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    b.make_follower(1, LEADER, 0, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    append(a, batch(3, b"old"))
    r = a.fetch_for_follower(FOLLOWER, 0, -1, 0, 1 << 20, 0)
    b.append_as_follower(r.records, r.high_watermark, 0)
    append(a, batch(2, b"lost"))  # never replicated
    assert (a.log.log_end_offset, b.log.log_end_offset) == (5, 3)
    # Controller: A is gone, B leads epoch 1.
    assert b.make_leader(2, 1, [FOLLOWER], [LEADER, FOLLOWER]) == 0
    append(b, batch(2, b"new"))
    assert a.make_follower(2, FOLLOWER, 1, [FOLLOWER], [LEADER, FOLLOWER]) == 0
    r = b.fetch_for_follower(LEADER, a.log.log_end_offset, a.last_fetched_epoch(), 1, 1 << 20, 0)
    assert r.diverging == (0, 3)
    a.truncate_for_divergence(*r.diverging)
    assert a.log.log_end_offset == 3
    r = b.fetch_for_follower(LEADER, 3, a.last_fetched_epoch(), 1, 1 << 20, 0)
    assert r.diverging is None
    a.append_as_follower(r.records, r.high_watermark, 0)
    assert a.log.read_bytes(0, 1 << 20, None) == b.log.read_bytes(0, 1 << 20, None)


def test_offset_for_leader_epoch(tmp_path):
    leader, _ = pair(tmp_path, isr=(LEADER,))
    append(leader, batch(4))
    leader.make_leader(2, 3, [LEADER], [LEADER, FOLLOWER])
    append(leader, batch(2))
    assert leader.offset_for_leader_epoch(-1, 0) == (0, 0, 4)
    assert leader.offset_for_leader_epoch(-1, 3) == (0, 3, 6)
    assert leader.offset_for_leader_epoch(-1, 1) == (0, 0, 4)
    assert leader.offset_for_leader_epoch(1, 3)[0] == ErrorCode.fenced_leader_epoch


def test_follower_out_of_range_and_not_a_replica(tmp_path):
    leader, _ = pair(tmp_path)
    append(leader, batch(2))
    assert leader.fetch_for_follower(FOLLOWER, 9, -1, 0, 100, 0).error == ErrorCode.offset_out_of_range
    assert leader.fetch_for_follower(7, 0, -1, 0, 100, 0).error == ErrorCode.not_leader_or_follower


def test_follower_applies_answers_and_reconciles_as_the_fetcher_does(tmp_path):
    """What actors/follower.py does with each FollowerFetchResult, without
    the task: data is appended (caught up once the leader's HW is reached),
    an out-of-range answer truncates by Kafka's rules, other errors are left
    to the fetcher's backoff."""
    leader, follower = pair(tmp_path)
    for _ in range(3):
        append(leader, batch(1))  # one batch per offset: truncation can stop at each
    assert not follower.follower_caught_up  # unknown until the first answer
    answer = leader.fetch_for_follower(FOLLOWER, 0, -1, 0, 1 << 20, 0)
    assert answer.error == 0 and answer.diverging is None and answer.log_end_offset == 3
    assert follower.apply_fetched(answer) == 3
    assert follower.follower_caught_up  # 3 >= the leader's HW then (0)
    # Ahead of the leader: truncate to its log end.
    ahead = leader.fetch_for_follower(FOLLOWER, 9, -1, 0, 1 << 20, 0)
    assert ahead.error == ErrorCode.offset_out_of_range
    ahead = ahead._replace(log_end_offset=1)
    assert follower.reconcile_with_leader(ahead)
    assert follower.log.log_end_offset == 1 and follower.high_watermark <= 1
    # Behind the leader's log start: start over there.
    behind = ahead._replace(log_end_offset=10, log_start_offset=5)
    assert follower.reconcile_with_leader(behind)
    assert follower.log.log_start_offset == 5 and follower.log.log_end_offset == 5
    # Any other error: nothing to reconcile, the fetcher backs off.
    assert not follower.reconcile_with_leader(leader.fetch_for_follower(7, 0, -1, 0, 1 << 20, 0))
    # A new leadership starts with the lag unknown again.
    assert follower.make_follower(2, LEADER, 1, [LEADER, FOLLOWER], [LEADER, FOLLOWER]) == 0
    assert not follower.follower_caught_up


def test_a_follower_on_the_same_machine_gets_file_slices_with_the_same_bytes(tmp_path):
    """as_slices (the direct channel's answer): where the batches lie instead of
    their bytes; the follower's checked pread gives what read_bytes would."""
    from storage.slice_reader import SliceReader

    leader, follower = pair(tmp_path)
    for i in range(5):
        append(leader, batch(3, tag=b"s%d-" % i), epoch=0)
    as_bytes = leader.fetch_for_follower(FOLLOWER, 0, -1, 0, 1 << 20, 0)
    as_slices = leader.fetch_for_follower(FOLLOWER, 0, -1, 0, 1 << 20, 0, as_slices=True)
    assert as_slices.records == b"" and as_slices.slices
    assert as_slices.data_size == len(as_bytes.records) == as_bytes.data_size
    with SliceReader() as reader:
        data = reader.read_all(as_slices.slices)
    assert data == as_bytes.records
    follower.apply_fetched(as_slices, data)
    assert follower.log.log_end_offset == leader.log.log_end_offset == 15
    # Caught up: nothing to send, in either form.
    empty = leader.fetch_for_follower(FOLLOWER, 15, follower.last_fetched_epoch(), 0, 1 << 20, 0, as_slices=True)
    assert empty.slices == () and empty.records == b"" and empty.data_size == 0
    assert leader.high_watermark == 15
