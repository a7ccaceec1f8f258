"""Storage engine alone: storage.log.Log versus raw file I/O, one command.

    .venv/bin/python -m bench.storage [--mib 512] [--repeat 3] [--dir DIR]
        [--records-per-batch 100] [--record-size 1024] [--blob-kib 1024]
        [--compact-mib 64] [--keys 5000] [--no-compaction]

No broker, no Ray, no sockets: this process drives the storage package
directly and compares it with plain system calls on the same bytes, in the
same directory (so the same disk), in the same run.

* append: ``Log.append_as_leader(blob, ...)`` for ~1 MiB produce blobs (v2
  batches made by ``storage.records.build_batch``, lz4, 1 KiB keyed
  records), each in a writable buffer as the broker hands it over (a slice
  of the edge's shared-memory region, actors/partition_leader.py
  ``append_shared``), so the log validates (CRC-32C of every batch), stamps
  offsets and epochs in place and writes; the edge's one copy from the
  socket into the region happens in every broker and is outside both sides.
  Raw: ``os.write`` of the same buffers to a file opened O_APPEND like a
  segment. Both without fsync (page
  cache) and with one fsync at the end (``Log.flush()`` / ``os.fsync``).
  Where the blob sits when the timed call starts matters, because the log
  reads it twice (CRC, then the copy into the page cache) and the raw write
  once, and a pass over DRAM costs about twice a pass over cache here:
  - *just received* (the target rows): before each timed call, untimed
    and for both sides, the blob is copied into one receive buffer, as the
    edge's ``recv_into`` fills the shared-memory slice moments before the
    replica appends it; the blob is then cache-warm, as in the broker.
  - *cold* (page cache only, reported beside them): the 8 pre-built blobs
    are handed over in turn, each last touched 8 MiB of writes earlier, so
    it mostly comes from DRAM.
* read: ``Log.read(offset, 1 MiB)`` from the log start to the end, plus one
  ``os.pread`` per returned slice (what the edge does); raw: sequential 1 MiB
  ``os.pread`` over the raw file; each file end to end --read-passes times.
  Page-cache hot (just written).
* compaction (if ``storage/cleaner.py`` has ``LogCleaner``): a compacted log
  with many versions per key is built with ``append_as_leader``, rolled, and
  compacted with ``LogCleaner().clean(log)``; MB/s = bytes the cleaner read
  / elapsed. The result is verified: exactly the latest offset of every key.

MB = 10^6 bytes of batch bytes on disk (lz4-compressed), not record values.
A failed check is FAIL, never a number. Writes a table to stdout and JSON to
bench/results/storage-<run id>.json.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.client import make_payloads
from bench.procstat import CpuWindow
from storage.log import Log, LogConfig
from storage.record_batch import COMPRESSION_LZ4
from storage.records import SimpleRecord, build_batch, iter_records

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
OTHER_CPU_WARN = 15.0
TARGET_RATIO = 0.80
N_DISTINCT_BLOBS = 8  # distinct pre-built blobs, cycled


class CheckFailed(RuntimeError):
    pass


# ------------------------------------------------------------------ workload
def build_blobs(n_blobs: int, blob_bytes: int, records_per_batch: int, record_size: int,
                key_fn) -> tuple[list[bytes], list[list[bytes]]]:
    """``n_blobs`` produce payloads, each a concatenation of v2 lz4 batches of
    ``records_per_batch`` records, as many as fit in ``blob_bytes``. Returns
    the blobs and, per blob, the keys of its records in order."""
    pool = make_payloads(record_size)
    blobs, keys_per_blob = [], []
    seq = 0
    for _ in range(n_blobs):
        parts, size, keys = [], 0, []
        while True:
            recs = []
            for _ in range(records_per_batch):
                k = key_fn(seq)
                recs.append(SimpleRecord(k, pool[seq % len(pool)]))
                keys.append(k)
                seq += 1
            batch = build_batch(recs, COMPRESSION_LZ4)
            if parts and size + len(batch) > blob_bytes:
                del keys[-records_per_batch:]
                seq -= records_per_batch
                break
            parts.append(batch)
            size += len(batch)
            if size >= blob_bytes:
                break
        blobs.append(b"".join(parts))
        keys_per_blob.append(keys)
    return blobs, keys_per_blob


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    n = os.write(fd, view)
    while n < len(view):
        n += os.write(fd, view[n:])


# ------------------------------------------------------------------ measurements
# Raw and Log run interleaved in chunks (--chunk-mib), alternating who goes
# first, and each side's time is summed over its chunks: on a shared machine
# background load drifts over seconds, and interleaving exposes both sides
# to the same load. Each side also gets its own CPU time (process_time), a
# figure that other people's load hardly moves.
def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class _Side:
    __slots__ = ("wall", "cpu", "bytes")

    def __init__(self):
        self.wall = self.cpu = 0.0
        self.bytes = 0

    def add(self, t0: tuple[float, float], nbytes: int = 0) -> None:
        w, c = _clocks()
        self.wall += w - t0[0]
        self.cpu += c - t0[1]
        self.bytes += nbytes

    def result(self, window: dict, **extra) -> dict:
        return {"elapsed_s": self.wall, "cpu_s": self.cpu, "bytes": self.bytes,
                "cpu": window, **extra}


def write_measurement(fsync: bool, received: bool) -> str:
    """The suffix naming a write measurement's files and its result rows."""
    return ("_fsync" if fsync else "") + ("" if received else "_cold")


def measure_writes(rdir: Path, blobs: list[bytearray], recs_per_blob: list[int], n: int,
                   fsync: bool, chunk: int, flip: int, received: bool = True
                   ) -> tuple[dict, dict, Log, str]:
    """n blobs to a raw O_APPEND file and to a Log, interleaved; with fsync,
    one os.fsync / Log.flush() at the end of each side (timed). ``received``:
    each blob is first copied (untimed) into a receive buffer, which both
    sides then take, as the broker takes a just-received request; else the
    blobs are handed over as they are (cold)."""
    sfx = write_measurement(fsync, received)
    raw_path = str(rdir / f"raw{sfx}.bin")
    fd = os.open(raw_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    lg = Log(str(rdir / f"bench{sfx}-0"), LogConfig())
    append, k = lg.append_as_leader, len(blobs)
    raw, log_ = _Side(), _Side()
    receive = bytearray(max(len(b) for b in blobs))
    received_views = [memoryview(receive)[: len(b)] for b in blobs]
    write_raw = functools.partial(_write_all, fd)
    append_log = functools.partial(append, leader_epoch=0)
    win = CpuWindow(None).start()
    try:
        for c, start in enumerate(range(0, n, chunk)):
            end = min(n, start + chunk)
            for who in (("raw", "log") if (c + flip) % 2 == 0 else ("log", "raw")):
                side, op = (raw, write_raw) if who == "raw" else (log_, append_log)
                if received:
                    for i in range(start, end):
                        blob = blobs[i % k]
                        receive[: len(blob)] = blob
                        t0 = _clocks()
                        op(received_views[i % k])
                        side.add(t0)
                else:
                    t0 = _clocks()
                    for i in range(start, end):
                        op(blobs[i % k])
                    side.add(t0)
        if fsync:
            for who in (("raw", "log") if flip % 2 == 0 else ("log", "raw")):
                t0 = _clocks()
                if who == "raw":
                    os.fsync(fd)
                    raw.add(t0)
                else:
                    lg.flush()
                    log_.add(t0)
        window = win.stop()
        raw.bytes = os.fstat(fd).st_size
    finally:
        os.close(fd)
    expect_records = sum(recs_per_blob[i % k] for i in range(n))
    expect_bytes = sum(len(blobs[i % k]) for i in range(n))
    log_.bytes = lg.size_in_bytes
    if lg.log_end_offset != expect_records:
        raise CheckFailed(f"log end offset {lg.log_end_offset}, expected {expect_records}")
    if log_.bytes != expect_bytes or raw.bytes != expect_bytes:
        raise CheckFailed(f"log holds {log_.bytes} bytes, raw file {raw.bytes}, expected "
                          f"{expect_bytes}")
    if fsync and lg.recovery_point != lg.log_end_offset:
        raise CheckFailed(f"recovery point {lg.recovery_point} after flush, log end "
                          f"{lg.log_end_offset}")
    return (raw.result(window), log_.result(window, records=expect_records,
                                            segments=len(lg.segments)), lg, raw_path)


def _log_read_pass(lg: Log, fetch_bytes: int, fds: dict) -> int:
    """Consumer-style: Log.read from the log start to the end, one pread per slice."""
    total = 0
    off, end = lg.log_start_offset, lg.log_end_offset
    read, pread = lg.read, os.pread
    while off < end:
        slices = read(off, fetch_bytes)
        if not slices:
            raise CheckFailed(f"Log.read({off}) returned nothing below log end {end}")
        for sl in slices:
            fd = fds.get(sl.path)
            if fd is None:
                fd = fds[sl.path] = os.open(sl.path, os.O_RDONLY)
            data = pread(fd, sl.length, sl.position)
            n = len(data)
            # Free the buffer before the next pread: with the previous one
            # still alive, glibc trims and re-faults the heap top for these
            # ~1 MiB reads of varying size, which costs ~4x the CPU of the
            # read itself (measured here; the same holds for raw preads).
            del data
            if n != sl.length:
                raise CheckFailed(f"short pread of {sl.path}@{sl.position}")
            total += n
        off = slices[-1].next_offset
    return total


def _raw_read_pass(fd: int, size: int, chunk: int) -> int:
    total = pos = 0
    pread = os.pread
    while pos < size:
        data = pread(fd, chunk, pos)
        n = len(data)
        del data  # as in _log_read_pass
        if not n:
            break
        pos += n
        total += n
    return total


def measure_reads(lg: Log, raw_path: str, fetch_bytes: int, passes: int,
                  flip: int) -> tuple[dict, dict]:
    """Each file end to end ``passes`` times, the two sides alternating pass by pass."""
    fds: dict[str, int] = {}
    rfd = os.open(raw_path, os.O_RDONLY)
    size = os.fstat(rfd).st_size
    raw, log_ = _Side(), _Side()
    win = CpuWindow(None).start()
    try:
        for p in range(passes):
            for who in (("raw", "log") if (p + flip) % 2 == 0 else ("log", "raw")):
                t0 = _clocks()
                if who == "raw":
                    raw.add(t0, _raw_read_pass(rfd, size, fetch_bytes))
                else:
                    log_.add(t0, _log_read_pass(lg, fetch_bytes, fds))
        window = win.stop()
    finally:
        os.close(rfd)
        for fd in fds.values():
            os.close(fd)
    if log_.bytes != lg.size_in_bytes * passes or raw.bytes != size * passes:
        raise CheckFailed(f"read {log_.bytes} (log) / {raw.bytes} (raw) bytes in {passes} "
                          f"passes, the files hold {lg.size_in_bytes} / {size}")
    return raw.result(window), log_.result(window)


def _rate(res: dict) -> dict:
    res["mb_s"] = res["bytes"] / res["elapsed_s"] / 1e6 if res["elapsed_s"] > 0 else None
    if res.get("cpu_s"):
        res["mb_per_cpu_s"] = res["bytes"] / res["cpu_s"] / 1e6
    if "records" in res and res["elapsed_s"] > 0:
        res["records_s"] = res["records"] / res["elapsed_s"]
    return res


# ------------------------------------------------------------------ compaction
def compaction(a, work: Path) -> dict:
    try:
        from storage import cleaner as cleaner_mod
    except ImportError as e:
        return {"available": False, "why": f"storage.cleaner not importable: {e}"}
    LogCleaner = getattr(cleaner_mod, "LogCleaner", None)
    if LogCleaner is None or not hasattr(LogCleaner, "clean"):
        return {"available": False, "why": "storage.cleaner has no LogCleaner.clean"}

    rnd = random.Random(7)
    n_keys = a.keys
    blobs, keys_per_blob = build_blobs(
        16, a.blob_kib * 1024, a.records_per_batch, a.record_size,
        lambda seq: b"key-%08d" % rnd.randrange(n_keys))
    blob_size = statistics.mean(len(b) for b in blobs)
    n = max(1, round(a.compact_mib * 1024 * 1024 / blob_size))
    cfg = LogConfig(cleanup_policy="compact", segment_bytes=a.compact_segment_mib * 1024 * 1024)
    log_dir = work / "compact-0"  # the cleaner wants a <topic>-<partition> dir
    lg = Log(str(log_dir), cfg)
    latest: dict[bytes, int] = {}
    try:
        # Setup (timed separately, reported as "append, compacted topic":
        # append_as_leader decodes every batch of a compacted topic to reject
        # records without a key).
        cpu = CpuWindow(None).start()
        p0 = time.process_time()
        t0 = time.perf_counter()
        infos = [lg.append_as_leader(blobs[i % 16], 0) for i in range(n)]
        t1 = time.perf_counter()
        cpu_append = cpu.stop()
        cpu_s_append = time.process_time() - p0
        for i, info in enumerate(infos):
            for j, k in enumerate(keys_per_blob[i % 16]):
                latest[k] = info.first_offset + j
        appended_bytes = lg.size_in_bytes
        records = lg.log_end_offset
        lg.roll()  # everything written becomes cleanable (the active segment never is)
        lg.flush()
        segments_before = len(lg.segments)

        cl = LogCleaner()
        cpu = CpuWindow(None).start()
        p0 = time.process_time()
        t0c = time.perf_counter()
        res = cl.clean(lg, high_watermark=lg.log_end_offset)
        t1c = time.perf_counter()
        cpu_clean = cpu.stop()
        cpu_s_clean = time.process_time() - p0
        out = {
            "available": True,
            "records_appended": records, "distinct_keys": len(latest),
            "versions_per_key": records / max(len(latest), 1),
            "segment_bytes": cfg.segment_bytes,
            "segments_before": segments_before, "segments_after": len(lg.segments),
            "append": _rate({"elapsed_s": t1 - t0, "bytes": appended_bytes,
                             "records": records, "cpu": cpu_append, "cpu_s": cpu_s_append}),
            "clean": _rate({"elapsed_s": t1c - t0c, "bytes": res.bytes_read,
                            "records": res.records_read, "cpu": cpu_clean,
                            "cpu_s": cpu_s_clean}),
            "result": res._asdict() if hasattr(res, "_asdict") else str(res),
        }
        if getattr(res, "error", None):
            out["error"] = f"cleaner reported: {res.error}"
            return out
        # Verify: exactly the latest version of every key survives.
        kept: dict[bytes, int] = {}
        dupes = 0
        off = lg.log_start_offset
        while off < lg.log_end_offset:
            blob = lg.read_bytes(off, 8 * 1024 * 1024)
            last = None
            for r in iter_records(blob, verify_crc=True):
                if r.key in kept:
                    dupes += 1
                kept[r.key] = r.offset
                last = r.offset
            if last is None:
                break
            off = last + 1
        wrong = sum(1 for k, o in latest.items() if kept.get(k) != o)
        extra = len(set(kept) - set(latest))
        out["retained_records"] = len(kept) + dupes
        out["clean"]["bytes_written"] = res.bytes_written
        if dupes or wrong or extra:
            out["error"] = (f"after compaction: {dupes} duplicate keys, {wrong} keys not at "
                            f"their latest offset, {extra} unknown keys")
        return out
    except Exception as e:  # never crash the whole benchmark on the cleaner
        return {"available": True, "error": f"{type(e).__name__}: {e}"}
    finally:
        if not lg.closed:
            lg.close()
        shutil.rmtree(log_dir, ignore_errors=True)


# ------------------------------------------------------------------ driver
def disk_of(path: Path) -> str:
    """The mount (device and mount point) holding path, from /proc/mounts."""
    best = ("?", "")
    p = str(path.resolve())
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[1]):
                    best = (f"{dev} ({fstype})", mnt)
    except OSError:
        pass
    return f"{best[0]} mounted on {best[1]}"


def summarize(runs: list[dict]) -> dict:
    rates = [r["mb_s"] for r in runs]
    s = {"mb_s": statistics.median(rates), "best_mb_s": max(rates),
         "all_mb_s": [round(x, 1) for x in rates],
         "mb_per_cpu_s": statistics.median(r["mb_per_cpu_s"] for r in runs),
         "elapsed_s": statistics.median(r["elapsed_s"] for r in runs)}
    if all("records_s" in r for r in runs):
        s["records_s"] = statistics.median(r["records_s"] for r in runs)
    # the window covers both interleaved sides
    s["self_cpu_pct"] = statistics.median(100 * r["cpu_s"] / r["elapsed_s"] for r in runs)
    s["other_cpu_pct"] = statistics.median(r["cpu"]["other_cpu_pct"] for r in runs)
    s["max_other_cpu_pct"] = max(r["cpu"]["other_cpu_pct"] for r in runs)
    return s


ROWS = [  # (key, label, raw counterpart)
    ("log_append", "Log.append_as_leader (page cache)", "raw_write"),
    ("raw_write", "raw os.write (page cache)", None),
    ("log_append_cold", "  same, cold blobs: Log", "raw_write_cold"),
    ("raw_write_cold", "  same, cold blobs: raw", None),
    ("log_append_fsync", "Log.append_as_leader + flush()", "raw_write_fsync"),
    ("raw_write_fsync", "raw os.write + fsync", None),
    ("log_read", "Log.read + pread (page cache)", "raw_read"),
    ("raw_read", "raw 1 MiB pread (page cache)", None),
]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="MiB appended per write measurement")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None,
                    help="where the files go (default: a fresh dir under $TMPDIR or /tmp)")
    ap.add_argument("--records-per-batch", type=int, default=100)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--blob-kib", type=int, default=1024, help="produce blob size")
    ap.add_argument("--chunk-mib", type=int, default=32,
                    help="raw and Log writes alternate in chunks of this size")
    ap.add_argument("--fetch-kib", type=int, default=1024, help="max_bytes per Log.read / raw pread")
    ap.add_argument("--read-passes", type=int, default=4,
                    help="times each file is read end to end per read measurement")
    ap.add_argument("--compact-mib", type=int, default=64, help="MiB in the log to compact")
    ap.add_argument("--compact-segment-mib", type=int, default=16)
    ap.add_argument("--keys", type=int, default=5000, help="distinct keys in the compacted log")
    ap.add_argument("--no-compaction", action="store_true")
    ap.add_argument("--output", type=Path)
    a = ap.parse_args(argv)
    if min(a.mib, a.repeat, a.records_per_batch, a.record_size, a.blob_kib, a.fetch_kib,
           a.compact_mib, a.compact_segment_mib, a.keys, a.read_passes, a.chunk_mib) <= 0:
        ap.error("sizes and counts must be positive")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    base = a.dir or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"raykafka-storage-bench-{run_id}-", dir=base))
    machine = {"cpus": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
               "platform": platform.platform(), "python": platform.python_version(),
               "disk": disk_of(work), "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    print(f"raykafka storage bench {run_id}: files in {work} ({machine['disk']}); "
          f"load average {machine['loadavg_at_start'][0]:.2f}", flush=True)

    t = time.perf_counter()
    blobs, keys = build_blobs(N_DISTINCT_BLOBS, a.blob_kib * 1024, a.records_per_batch,
                              a.record_size, lambda seq: b"%010d" % seq)
    # Writable, like the shared-memory slices the replica appends from.
    blobs = [bytearray(b) for b in blobs]
    recs_per_blob = [len(k) for k in keys]
    blob_size = statistics.mean(len(b) for b in blobs)
    n_blobs = max(1, round(a.mib * 1024 * 1024 / blob_size))
    raw_values = sum(recs_per_blob) * a.record_size
    workload = {"blob_bytes_mean": round(blob_size), "records_per_blob": recs_per_blob,
                "batches_per_blob": recs_per_blob[0] // a.records_per_batch,
                "lz4_ratio": round(sum(len(b) for b in blobs) / raw_values, 3),
                "blobs_per_measurement": n_blobs,
                "bytes_per_measurement": sum(len(blobs[i % N_DISTINCT_BLOBS]) for i in range(n_blobs))}
    print(f"workload: {n_blobs} blobs of ~{blob_size / 2**20:.2f} MiB "
          f"({workload['batches_per_blob']} lz4 batches x {a.records_per_batch} records x "
          f"{a.record_size} B, ratio {workload['lz4_ratio']}) = "
          f"{workload['bytes_per_measurement'] / 1e6:.0f} MB per write measurement, "
          f"{a.repeat} repeat(s) (built in {time.perf_counter() - t:.1f}s)", flush=True)

    runs: dict[str, list[dict]] = {k: [] for k, _, _ in ROWS}
    paired: dict[str, list[float]] = {k: [] for k, _, raw in ROWS if raw}
    paired_cpu: dict[str, list[float]] = {k: [] for k, _, raw in ROWS if raw}
    chunk = max(1, round(a.chunk_mib * 1024 * 1024 / blob_size))
    errors: list[str] = []

    def show(r, what, raw, log_):
        o = log_["cpu"]["other_cpu_pct"]
        print(f"  #{r} {what:14s} raw {raw['mb_s']:7.1f} MB/s  log {log_['mb_s']:7.1f} MB/s  "
              f"log/raw {log_['mb_s'] / raw['mb_s']:.2f} (per CPU-s "
              f"{log_['mb_per_cpu_s'] / raw['mb_per_cpu_s']:.2f}); other CPU {o}%", flush=True)

    def pair(key, raw, log_):
        runs[key.replace("log_append", "raw_write").replace("log_read", "raw_read")].append(raw)
        runs[key].append(log_)
        paired[key].append(log_["mb_s"] / raw["mb_s"])
        paired_cpu[key].append(log_["mb_per_cpu_s"] / raw["mb_per_cpu_s"])

    try:
        for r in range(a.repeat):
            rdir = work / f"r{r}"
            rdir.mkdir()
            for fsync, received in ((False, True), (True, True), (False, False)):
                sfx = write_measurement(fsync, received)
                raw, log_, lg, raw_path = measure_writes(rdir, blobs, recs_per_blob, n_blobs,
                                                         fsync, chunk, r, received)
                raw, log_ = _rate(raw), _rate(log_)
                pair("log_append" + sfx, raw, log_)
                show(r, ("write + fsync" if fsync else "write") + ("" if received else " cold"),
                     raw, log_)
                if fsync:
                    # Reads, page-cache hot, of what the fsync'd writes left.
                    raw, log_ = measure_reads(lg, raw_path, a.fetch_kib * 1024,
                                              a.read_passes, r)
                    raw, log_ = _rate(raw), _rate(log_)
                    pair("log_read", raw, log_)
                    show(r, "read", raw, log_)
                lg.close()
                # Deleting drops any still-dirty pages: the next measurement
                # starts without writeback left over from this one.
                os.unlink(raw_path)
                shutil.rmtree(lg.dir)
            shutil.rmtree(rdir)
    except CheckFailed as e:
        errors.append(f"check failed: {e}")
        print(f"FAIL: {e}", flush=True)

    comp = None
    if not a.no_compaction and not errors:
        print("  compaction ...", flush=True)
        comp = compaction(a, work)
    shutil.rmtree(work, ignore_errors=True)

    # ------------------------------------------------------------ report
    summary = {k: summarize(v) for k, v in runs.items() if v and len(v) == a.repeat}
    ratios = {k: {"median_paired": statistics.median(paired[k]),
                  "all": [round(x, 3) for x in paired[k]],
                  "best_over_best": summary[k]["best_mb_s"] / summary[raw]["best_mb_s"],
                  "per_cpu_s_median_paired": statistics.median(paired_cpu[k]),
                  "per_cpu_s_all": [round(x, 3) for x in paired_cpu[k]]}
              for k, _, raw in ROWS if raw and k in summary and raw in summary}
    print()
    print(f"Storage engine alone, {workload['bytes_per_measurement'] / 1e6:.0f} MB per write "
          f"measurement in ~1 MiB produce blobs, raw and Log interleaved in "
          f"{a.chunk_mib} MiB chunks; median of {a.repeat}; MB = 10^6 bytes of lz4 batch bytes "
          f"on disk (x{1 / workload['lz4_ratio']:.2f} in record values)")
    print(f"Disk: {machine['disk']}; {machine['cpus_usable']} cores shared with other work")
    print()
    hdr = (f"{'measurement':34s} {'MB/s':>8s} {'records/s':>10s} {'vs raw':>7s} "
           f"{'MB/CPU-s':>8s} {'vs raw':>7s} {'time s':>7s} {'CPU%self':>8s} {'other':>5s}"
           f"  runs MB/s")
    print(hdr)
    print("-" * len(hdr))
    for key, label, raw in ROWS:
        s = summary.get(key)
        if s is None:
            print(f"{label:34s} {'FAIL':>8s}")
            continue
        rs = s.get("records_s")
        rr = ratios.get(key) if raw else None
        ratio = f"{rr['median_paired']:7.2f}" if rr else f"{'':7s}"
        ratio_cpu = f"{rr['per_cpu_s_median_paired']:7.2f}" if rr else f"{'':7s}"
        print(f"{label:34s} {s['mb_s']:8.1f} {'-' if rs is None else round(rs):>10} {ratio} "
              f"{s['mb_per_cpu_s']:8.0f} {ratio_cpu} {s['elapsed_s']:7.3f} "
              f"{s['self_cpu_pct']:8.0f} {s['other_cpu_pct']:5.0f}  {s['all_mb_s']}")
    if comp is None:
        print(f"{'compaction':34s} {'skipped':>8s}")
    elif not comp.get("available"):
        print(f"compaction: not available ({comp.get('why')})")
    elif "clean" not in comp:
        print(f"{'compaction':34s} {'FAIL':>8s}  {comp.get('error')}")
    else:
        for label, key in (("append, compacted topic (setup)", "append"),
                           ("LogCleaner.clean (compaction)", "clean")):
            x = comp[key]
            print(f"{label:34s} {x['mb_s']:8.1f} {round(x['records_s']):>10} {'':7s} "
                  f"{x['mb_per_cpu_s']:8.0f} {'':7s} {x['elapsed_s']:7.3f} "
                  f"{x['cpu']['client_cpu_pct']:8.0f} {x['cpu']['other_cpu_pct']:5.0f}" + (
                      f"  FAIL: {comp['error']}" if key == "clean" and comp.get("error") else ""))
        print(f"  compaction: {comp['records_appended']} records, {comp['distinct_keys']} keys "
              f"({comp['versions_per_key']:.1f} versions/key), {comp['segments_before']} -> "
              f"{comp['segments_after']} segments, {comp['clean']['bytes'] / 1e6:.1f} MB read -> "
              f"{comp['clean'].get('bytes_written', 0) / 1e6:.2f} MB written, "
              f"{comp.get('retained_records', '?')} records kept"
              + ("" if comp.get("error") else " (verified: the latest offset of every key)"))
    print("vs raw = median over repeats of (Log figure / raw figure in the same repeat); "
          "MB/CPU-s = MB per second of this process's CPU time (hardly moved by other "
          "people's load); CPU% = % of ONE core: self = this process, other = everything "
          "else on the machine")
    for key in ("log_append", "log_append_fsync", "log_append_cold"):
        if key in ratios:
            v = ratios[key]["median_paired"]
            print(f"{key}: {v:.2f} of raw MB/s ({'meets' if v >= TARGET_RATIO else 'BELOW'} "
                  f"the {TARGET_RATIO:.0%} target; best-run ratio "
                  f"{ratios[key]['best_over_best']:.2f}; per CPU-second "
                  f"{ratios[key]['per_cpu_s_median_paired']:.2f})")
    busy = max((s["max_other_cpu_pct"] for s in summary.values()), default=0)
    if busy > OTHER_CPU_WARN:
        print(f"warning: other processes used up to {busy:.0f}% of a core during timed windows; "
              f"figures are disturbed, prefer the best runs or rerun when the machine is quiet")

    doc = {"run_id": run_id, "machine": machine, "config": {k: str(v) if isinstance(v, Path)
                                                             else v for k, v in vars(a).items()},
           "workload": workload, "summary": summary, "ratios": ratios, "runs": runs,
           "compaction": comp, "errors": errors}
    path = a.output or RESULTS / f"storage-{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"\nresults: {path}")
    failed = bool(errors) or (comp is not None and comp.get("available") and "error" in comp)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
