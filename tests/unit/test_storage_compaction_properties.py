"""Property tests: random appends, cleanings, retention, DeleteRecords,
truncation and reopening, checked against a model of what must be readable;
and random damage after compaction."""

import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from storage.cleaner import LogCleaner, read_cleaner_checkpoint
from storage.log import Log, LogConfig
from storage.record_batch import iter_headers, validate_batches
from storage.records import SimpleRecord, build_batch, iter_records

settings.register_profile("storage-compaction", deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXAMPLES = int(os.environ.get("STORAGE_EXAMPLES", 60))
NEVER = 10**12


def make_blob(rnd, n_batches, ts, compacted, keys):
    parts = []
    for _ in range(n_batches):
        recs = []
        for j in range(rnd.randint(1, 5)):
            value = None if compacted and rnd.random() < 0.15 else rnd.randbytes(rnd.choice([0, 3, 20, 150]))
            recs.append(SimpleRecord(b"key%d" % rnd.randrange(keys), value, (), ts + j))
        parts.append(build_batch(recs, rnd.choice([0, 0, 1, 2, 3, 4])))
    return parts


def read_records(log):
    start = log.log_start_offset
    blob = log.read_bytes(start, 1 << 30)
    if blob:
        validate_batches(blob, None, from_client=False)  # only valid batches are served
    lasts = [h.last_offset for _, h in iter_headers(blob)]
    assert lasts == sorted(set(lasts))
    return [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(blob) if r.offset >= start]


def expected_records(written, start, point, compacted, tombstones_may_go):
    """What reading from the log start must give.  ``point`` is the clean
    point: below it exactly the latest record per key (among records below
    it), at or above it everything."""
    if not compacted:
        return [r for r in written if r[0] >= start], set()
    latest = {}
    for r in written:
        if r[0] < point:
            latest[r[1]] = r
    below = sorted(r for r in latest.values() if r[0] >= start)
    optional = {r for r in below if r[2] is None} if tombstones_may_go else set()
    return below + [r for r in written if r[0] >= max(point, start)], optional


def check(log, written, compacted, tombstones_may_go):
    got = read_records(log)
    point = read_cleaner_checkpoint(log) if compacted else None
    if point is None or point < log.log_start_offset:
        point = log.log_start_offset
    want, optional = expected_records(written, log.log_start_offset, point, compacted, tombstones_may_go)
    assert [r for r in got if r not in optional] == [r for r in want if r not in optional]
    assert set(got) <= set(want)
    return got


configs = st.builds(
    lambda seg, policy, tomb: LogConfig(
        segment_bytes=seg,
        index_interval_bytes=256,
        cleanup_policy=policy,
        file_delete_delay_ms=0,
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=tomb,
        retention_ms=-1,
    ),
    st.sampled_from([1200, 2500, 6000]),
    st.sampled_from(["compact", "compact,delete", "delete"]),
    st.sampled_from([0, NEVER]),
)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 8)),
        st.tuples(st.just("append"), st.integers(1, 8)),
        st.tuples(st.just("clean"), st.integers(0, 3)),
        st.tuples(st.just("clean"), st.integers(0, 3)),
        st.tuples(st.just("retention"), st.integers(0, 30_000)),
        st.tuples(st.just("delete_records"), st.floats(0, 1)),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("roll"), st.just(0)),
        st.tuples(st.just("append_roll_clean"), st.integers(1, 8)),
        st.tuples(st.just("reopen"), st.sampled_from(["end", "zero"])),
    ),
    min_size=1,
    max_size=40,
)


@settings(settings.get_profile("storage-compaction"), max_examples=EXAMPLES)
@given(configs, ops, st.integers(0, 2**32), st.sampled_from([1, 4, 40]), st.sampled_from([1 << 20, 24 * 12]))
def test_appends_cleanings_retention_keep_what_they_must(config, operations, seed, keys, dedupe):
    rnd = random.Random(seed)
    tmp = tempfile.mkdtemp()
    compacted = config.compacted
    tombstones_may_go = config.delete_retention_ms < NEVER
    cleaner = LogCleaner(dedupe, load_factor=1.0)
    try:
        path = os.path.join(tmp, "t-0")
        log = Log(path, config, now_ms=0)
        written = []
        ends = [0]  # batch boundaries: where a high watermark can be
        hw = 0
        now = 1_000_000
        for i, (op, arg) in enumerate(operations):
            now += 1_000
            if op == "append":
                for blob in make_blob(rnd, arg, 10_000 + 100 * i, compacted, keys):
                    info = log.append_as_leader(blob, 0, now_ms=now)
                    written += [
                        (info.first_offset + j, r.key, r.value, r.timestamp)
                        for j, r in enumerate(iter_records(blob))
                    ]
                    ends.append(info.last_offset + 1)
                # usually fully replicated, sometimes lagging
                hw = ends[-1] if rnd.random() < 0.7 else rnd.choice([e for e in ends if e >= hw])
            elif op in ("clean", "append_roll_clean"):
                if op == "append_roll_clean":
                    for blob in make_blob(rnd, arg, 10_000 + 100 * i, compacted, keys):
                        info = log.append_as_leader(blob, 0, now_ms=now)
                        written += [
                            (info.first_offset + j, r.key, r.value, r.timestamp)
                            for j, r in enumerate(iter_records(blob))
                        ]
                        ends.append(info.last_offset + 1)
                    log.roll(now_ms=now)
                    hw = ends[-1]
                    arg = 0
                res = cleaner.clean_once([(log, hw)], now_ms=now + arg * 10)
                if res is not None:
                    event("cleaned" if res.records_retained < res.records_read else "cleaned, nothing removed")
                    event("offset map full" if res.map_full else "offset map not full")
                    assert res.error is None, res
                    assert res.end_offset <= hw
                    assert read_cleaner_checkpoint(log) == res.end_offset
            elif op == "retention":
                before = log.log_start_offset
                res = log.apply_retention(high_watermark=hw, now_ms=now, retention_bytes=arg)
                assert res.log_start_offset == log.log_start_offset >= before
                assert log.log_start_offset <= max(hw, before)
                assert log.segments[-1].next_offset == log.log_end_offset
            elif op == "delete_records":
                target = log.log_start_offset + int(arg * (hw - log.log_start_offset))
                if target >= log.log_start_offset:
                    assert log.delete_records(target, hw) == max(target, log.log_start_offset)
            elif op == "truncate":
                # replicas never truncate below their high watermark
                above = [e for e in ends if e >= hw]
                target = above[int(arg * (len(above) - 1))]
                log.truncate_to(target)
                assert log.log_end_offset == target
                written = [r for r in written if r[0] < target]
                ends = [e for e in ends if e <= target]
            elif op == "roll":
                log.roll(now_ms=now)
            else:
                start, end = log.log_start_offset, log.log_end_offset
                log.close()
                log = Log(path, config, recovery_point=end if arg == "end" else 0, log_start_offset=start, now_ms=now)
                assert (log.log_start_offset, log.log_end_offset) == (start, end)
            assert 0 <= log.log_start_offset <= max(hw, log.log_start_offset) <= log.log_end_offset
            check(log, written, compacted, tombstones_may_go)
            if not compacted:
                assert [r[0] for r in read_records(log)] == list(range(log.log_start_offset, log.log_end_offset))
        got = check(log, written, compacted, tombstones_may_go)
        end = log.log_end_offset
        log.close()
        again = Log(path, config, recovery_point=0, log_start_offset=log.log_start_offset)
        assert again.log_end_offset == end
        assert read_records(again) == got
        again.close()
    finally:
        shutil.rmtree(tmp)


def mask(blob):
    """Zero each batch's partition leader epoch (outside the CRC: damage there
    is undetectable, in Kafka too)."""
    buf = bytearray(blob)
    for pos, _ in iter_headers(blob):
        buf[pos + 12 : pos + 16] = b"\0\0\0\0"
    return bytes(buf)


def batches_of(blob):
    return [blob[p : p + h.size] for p, h in iter_headers(blob)]


@settings(settings.get_profile("storage-compaction"), max_examples=EXAMPLES)
@given(
    configs,
    st.integers(2, 14),
    st.lists(st.sampled_from(["flip", "truncate", "zero_tail", "index_garbage"]), min_size=1, max_size=3),
    st.integers(0, 2**32),
    st.booleans(),
)
def test_damage_after_compaction_recovers_a_valid_prefix(config, n_appends, damages, seed, clean_first):
    rnd = random.Random(seed)
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "t-0")
        log = Log(path, config, now_ms=0)
        for i in range(n_appends):
            for blob in make_blob(rnd, rnd.randint(1, 3), 10_000 + i, config.compacted, 5):
                log.append_as_leader(blob, 0, now_ms=i)
            if clean_first and i % 3 == 2:
                LogCleaner(1 << 20).clean_once([log], now_ms=1_000_000 + i)
        before = log.read_bytes(log.log_start_offset, 1 << 30)
        log.close()
        for kind in damages:
            victim = rnd.choice([s for s in log.segments if os.path.getsize(s.log_path)] or log.segments)
            size = os.path.getsize(victim.log_path)
            if not size:
                continue
            if kind == "flip":
                pos = rnd.randrange(size)
                with open(victim.log_path, "r+b") as f:
                    f.seek(pos)
                    b = f.read(1)[0]
                    f.seek(pos)
                    f.write(bytes([b ^ (1 << rnd.randrange(8))]))
            elif kind == "truncate":
                os.truncate(victim.log_path, rnd.randrange(size))
            elif kind == "zero_tail":
                cut = rnd.randrange(size)
                with open(victim.log_path, "r+b") as f:
                    f.seek(cut)
                    f.write(b"\0" * (size - cut))
            else:
                with open(rnd.choice([victim.index.path, victim.time_index.path]), "wb") as f:
                    f.write(rnd.randbytes(rnd.randint(1, 64)))
        again = Log(path, config, recovery_point=0, now_ms=0)
        got = again.read_bytes(again.log_start_offset, 1 << 30) if again.log_end_offset > again.log_start_offset else b""
        if got:
            validate_batches(got, None, from_client=False)
        want, have = batches_of(mask(before)), batches_of(mask(got))
        assert len(have) <= len(want)
        # What is served is what was written, in order.  A segment cut
        # exactly at a batch boundary cannot be told from a legal offset gap
        # (followers accept gaps, compaction makes them; Kafka cannot tell
        # either), so later segments may survive such a cut: an ordered
        # subset rather than a strict prefix.  Only a compacted log can keep
        # a batch whose base offset (outside the CRC) was damaged.
        it = iter(want)
        for b in have:
            assert any(a == b or (config.compacted and a[8:] == b[8:]) for a in it)
        if not config.compacted and "truncate" not in damages:
            assert have == want[: len(have)]  # without boundary cuts: a strict prefix
        lasts = [h.last_offset for _, h in iter_headers(got)]
        assert lasts == sorted(set(lasts))
        end = again.log_end_offset
        assert again.append_as_leader(build_batch([(b"k", b"v")]), 1, now_ms=0).first_offset == end
        again.close()
    finally:
        shutil.rmtree(tmp)
