"""Property tests: random append/reopen/truncate sequences and random damage."""

import os
import random
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import InvalidRecordsError, RecordsFault
from storage.log import Log, LogConfig
from storage.record_batch import HEADER, assign_offsets, iter_headers, parse_header, validate_batches
from storage.records import SimpleRecord, build_batch

settings.register_profile("storage", deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_blob(rnd: random.Random, n_batches: int, ts_base: int) -> bytes:
    parts = []
    for _ in range(n_batches):
        n = rnd.randint(1, 6)
        recs = [
            SimpleRecord(
                rnd.choice([None, b"key%d" % rnd.randint(0, 9)]),
                rnd.randbytes(rnd.choice([0, 5, 40, 300])),
                (),
                ts_base + rnd.randint(-50, 200),
            )
            for _ in range(n)
        ]
        parts.append(build_batch(recs, rnd.choice([0, 0, 1, 2, 3, 4])))
    return b"".join(parts)


class Model:
    def __init__(self):
        self.batches: list[tuple[int, int, int, bytes]] = []  # base, last, max_ts, bytes

    @property
    def end(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else 0

    def add(self, blob: bytes, first: int, epoch: int) -> None:
        buf = bytearray(blob)
        headers = validate_batches(buf, None)
        assign_offsets(buf, headers, first, epoch)
        pos = 0
        for h in validate_batches(buf, None):
            self.batches.append((h.base_offset, h.last_offset, h.max_timestamp, bytes(buf[pos : pos + h.size])))
            pos += h.size

    def truncate(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b[1] < offset]

    def expected_read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        out, total = [], 0
        for base, last, _, b in self.batches:
            if last < offset:
                continue
            if last >= max_offset:
                break
            if out and total + len(b) > max_bytes:
                break
            out.append(b)
            total += len(b)
        return b"".join(out)

    def first_at_or_after(self, ts: int):
        from storage.records import iter_batch_records

        for _, _, max_ts, b in self.batches:
            if max_ts >= ts:
                for r in iter_batch_records(b):
                    if r.timestamp >= ts:
                        return r.offset, r.timestamp
        return None


def check_indexes(log: Log) -> None:
    """Every index entry follows Kafka's layout and the time index records the
    running max timestamp."""
    for seg in log.segments:
        data = open(seg.log_path, "rb").read()
        heads = list(iter_headers(data))
        assert sum(h.size for _, h in heads) == len(data) == seg.size
        by_pos = {p: h for p, h in heads}
        prev = None
        for i in range(seg.index.entries):
            off, pos = seg.index.entry(i)
            assert by_pos[pos].last_offset == off
            assert prev is None or off > prev
            prev = off
        running, first_reach = -1, {}
        for _, h in heads:
            if h.max_timestamp > running:
                running = h.max_timestamp
                first_reach[running] = h.last_offset
        for i in range(seg.time_index.entries):
            ts, off = seg.time_index.entry(i)
            assert first_reach.get(ts) == off, (seg, i, ts, off)
        if heads:
            assert seg.max_timestamp == running
            assert seg.next_offset == heads[-1][1].last_offset + 1


def check_against_model(log: Log, model: Model, rnd: random.Random) -> None:
    assert log.log_end_offset == model.end
    everything = b"".join(b for *_, b in model.batches)
    start = model.batches[0][0] if model.batches else log.log_end_offset
    assert log.read_bytes(start, 1 << 30) == everything
    offsets = [h.base_offset for _, h in iter_headers(everything)]
    lasts = [h.last_offset for _, h in iter_headers(everything)]
    assert all(b == a + 1 for a, b in zip(lasts, offsets[1:])), "offsets must be contiguous"
    for _ in range(15):
        if not model.batches:
            break
        offset = rnd.randint(start, model.end)
        max_bytes = rnd.choice([0, 1, 100, 1000, 5000, 1 << 20])
        max_offset = rnd.randint(offset, model.end + 2)
        assert log.read_bytes(offset, max_bytes, max_offset) == model.expected_read(offset, max_bytes, max_offset)
    for _ in range(3):
        ts = rnd.randint(900, 1000 + 100 * 60)
        assert log.offset_for_timestamp(ts) == model.first_at_or_after(ts)
    check_indexes(log)


configs = st.builds(
    lambda seg, interval: LogConfig(segment_bytes=seg, index_interval_bytes=interval),
    st.sampled_from([1500, 4000, 20000, 1 << 20]),
    st.sampled_from([0, 100, 1000, 4096]),
)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("reopen"), st.sampled_from(["end", "zero", "random"])),
        st.tuples(st.just("crash"), st.sampled_from(["end", "zero", "random"])),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
    ),
    min_size=1,
    max_size=25,
)


@settings(settings.get_profile("storage"), max_examples=int(os.environ.get("STORAGE_EXAMPLES", 60)))
@given(configs, ops, st.integers(0, 2**32))
def test_random_operations_then_reopen(config, operations, seed):
    rnd = random.Random(seed)
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "t-0")
        log = Log(path, config, now_ms=0)
        model = Model()
        epoch = 0
        for i, (op, arg) in enumerate(operations):
            if op == "append":
                blob = make_blob(rnd, arg, 1000 + 100 * i)
                if len(blob) > config.segment_bytes:
                    with pytest.raises(InvalidRecordsError) as ei:
                        log.append_as_leader(blob, epoch, now_ms=i)
                    assert ei.value.fault == RecordsFault.record_list_too_large
                    continue
                info = log.append_as_leader(blob, epoch, now_ms=i)
                assert info.first_offset == model.end
                model.add(blob, info.first_offset, epoch)
            elif op in ("reopen", "crash"):
                end = log.log_end_offset
                if op == "reopen":
                    log.close()
                    rp = log.recovery_point
                    assert rp == end
                else:
                    for seg in log.segments:  # no flush, no final index entries
                        seg.close_handles()
                    rp = end
                rp = {"end": rp, "zero": 0, "random": rnd.randint(0, max(rp, 0))}[arg]
                log = Log(path, config, recovery_point=rp, now_ms=i)
                epoch += 1
            else:
                target = int(arg * model.end)
                log.truncate_to(target)
                # batch-granular: the batch holding `target` goes entirely
                model.truncate(target)
                assert log.log_end_offset == model.end
            check_against_model(log, model, rnd)
        log.close()
        again = Log(path, config, recovery_point=0, now_ms=0)
        check_against_model(again, model, rnd)
        assert [s.base_offset for s in again.segments] == [s.base_offset for s in log.segments]
        again.close()
    finally:
        shutil.rmtree(tmp)


def mask_epochs(blob: bytes) -> bytes:
    """Zero the partition leader epoch of each batch: it lies outside the CRC,
    so (as in Kafka) damage there cannot be detected."""
    buf = bytearray(blob)
    for pos, _ in iter_headers(blob):
        buf[pos + 12 : pos + 16] = b"\x00\x00\x00\x00"
    return bytes(buf)


damage = st.sampled_from(
    ["truncate", "flip", "garbage", "zero_tail", "index_garbage", "index_delete", "index_truncate"]
)


@settings(settings.get_profile("storage"), max_examples=int(os.environ.get("STORAGE_EXAMPLES", 80)))
@given(configs, st.integers(1, 12), damage, st.integers(0, 2**32), st.sampled_from(["zero", "end"]))
def test_random_damage_recovers_a_valid_prefix(config, n_appends, kind, seed, recovery):
    rnd = random.Random(seed)
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "t-0")
        log = Log(path, config, now_ms=0)
        model = Model()
        for i in range(n_appends):
            blob = make_blob(rnd, rnd.randint(1, 4), 1000 + 100 * i)
            if len(blob) > config.segment_bytes:
                continue
            info = log.append_as_leader(blob, 0, now_ms=i)
            model.add(blob, info.first_offset, 0)
        log.close()
        segs = log.segments
        rp = 0
        if kind in ("truncate", "flip", "zero_tail"):
            # flushed data is trusted; damage below the recovery point is only
            # detected when the whole log is re-validated
            victim = rnd.choice(segs) if recovery == "zero" else segs[-1]
            rp = 0 if recovery == "zero" else log.recovery_point
            size = os.path.getsize(victim.log_path)
            if size:
                if kind == "truncate":
                    os.truncate(victim.log_path, rnd.randrange(size))
                elif kind == "flip":
                    rp = 0
                    with open(victim.log_path, "r+b") as f:
                        pos = rnd.randrange(size)
                        f.seek(pos)
                        byte = f.read(1)[0]
                        f.seek(pos)
                        f.write(bytes([byte ^ (1 << rnd.randrange(8))]))
                else:
                    cut = rnd.randrange(size)
                    with open(victim.log_path, "r+b") as f:
                        f.seek(cut)
                        f.write(b"\x00" * (size - cut))
        elif kind == "garbage":
            rp = 0 if recovery == "zero" else log.recovery_point
            with open(segs[-1].log_path, "ab") as f:
                f.write(rnd.randbytes(rnd.randint(1, 300)))
        else:
            # Index files are trusted like the data below the recovery point
            # (Kafka does the same): only losses a crash or an operator can
            # cause are expected to be caught there; anything else is rebuilt
            # by a full recovery.
            victim = rnd.choice(segs)
            rp = 0 if recovery == "zero" else log.recovery_point
            target = rnd.choice([victim.index.path, victim.time_index.path])
            if kind == "index_delete":
                os.unlink(target)
            elif kind == "index_truncate":
                target = victim.index.path
                os.truncate(target, rnd.randint(0, os.path.getsize(target)))
            else:
                rp = 0
                with open(target, "wb") as f:
                    f.write(rnd.randbytes(rnd.randint(1, 100)))

        again = Log(path, config, recovery_point=rp, now_ms=0)
        got = again.read_bytes(0, 1 << 30) if again.log_start_offset == 0 else b""
        expected = b"".join(b for *_, b in model.batches)
        assert mask_epochs(expected).startswith(mask_epochs(got))
        n_kept = len(list(iter_headers(got)))
        assert again.log_end_offset == (model.batches[n_kept - 1][1] + 1 if n_kept else 0)
        if kind in ("garbage", "index_garbage", "index_delete", "index_truncate"):
            assert got == expected  # nothing valid may be lost
        check_indexes(again)
        # the recovered log accepts appends right after its valid prefix
        end = again.log_end_offset
        info = again.append_as_leader(build_batch([(b"k", b"v")]), 1, now_ms=0)
        assert info.first_offset == end
        assert parse_header(again.read_bytes(end, 1)).base_offset == end
        again.close()
    finally:
        shutil.rmtree(tmp)


def test_header_struct_matches_brief():
    assert HEADER.format == ">qiibIhiqqqhii"
