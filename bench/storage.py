"""Storage engine alone: storage.log.Log versus raw file I/O, one command.

    .venv/bin/python -m bench.storage [--mib 512] [--repeat 3] [--dir DIR]
        [--records-per-batch 100] [--record-size 1024] [--blob-kib 1024]
        [--compact-mib 64] [--keys 5000] [--no-compaction]

No broker, no Ray, no sockets: this process drives the storage package
directly and compares it with plain system calls on the same bytes, in the
same directory (so the same disk), in the same run.

* append: ``Log.append_as_leader(blob, ...)`` for ~1 MiB produce blobs (v2
  batches made by ``storage.records.build_batch``, lz4, 1 KiB keyed
  records), passed as ``bytes`` as the broker does (cluster/partition.py), so
  the one copy into a bytearray is included. Raw: ``os.write`` of the same
  blobs to a file opened O_APPEND like a segment. Both without fsync (page
  cache) and with one fsync at the end (``Log.flush()`` / ``os.fsync``).
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
def measure_raw_write(path: str, blobs: list[bytes], n: int, fsync: bool) -> dict:
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        cpu = CpuWindow(None).start()
        t0 = time.perf_counter()
        k = len(blobs)
        for i in range(n):
            _write_all(fd, blobs[i % k])
        if fsync:
            os.fsync(fd)
        t1 = time.perf_counter()
        cpu = cpu.stop()
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    return {"elapsed_s": t1 - t0, "bytes": size, "cpu": cpu}


def measure_log_append(log_dir: str, blobs: list[bytes], records_per_blob: list[int], n: int,
                       fsync: bool, config: LogConfig | None = None) -> tuple[dict, Log]:
    lg = Log(log_dir, config or LogConfig())
    k = len(blobs)
    append = lg.append_as_leader
    cpu = CpuWindow(None).start()
    t0 = time.perf_counter()
    for i in range(n):
        append(blobs[i % k], 0)
    if fsync:
        lg.flush()
    t1 = time.perf_counter()
    cpu = cpu.stop()
    expect_records = sum(records_per_blob[i % k] for i in range(n))
    expect_bytes = sum(len(blobs[i % k]) for i in range(n))
    if lg.log_end_offset != expect_records:
        raise CheckFailed(f"log end offset {lg.log_end_offset}, expected {expect_records}")
    if lg.size_in_bytes != expect_bytes:
        raise CheckFailed(f"log holds {lg.size_in_bytes} bytes, expected {expect_bytes}")
    if fsync and lg.recovery_point != lg.log_end_offset:
        raise CheckFailed(f"recovery point {lg.recovery_point} after flush, log end "
                          f"{lg.log_end_offset}")
    return {"elapsed_s": t1 - t0, "bytes": expect_bytes, "records": expect_records,
            "segments": len(lg.segments), "cpu": cpu}, lg


def measure_log_read(lg: Log, fetch_bytes: int, passes: int) -> dict:
    fds: dict[str, int] = {}
    total = 0
    end = lg.log_end_offset
    read, pread = lg.read, os.pread
    try:
        cpu = CpuWindow(None).start()
        t0 = time.perf_counter()
        for _ in range(passes):
            off = lg.log_start_offset
            while off < end:
                slices = read(off, fetch_bytes)
                if not slices:
                    raise CheckFailed(f"Log.read({off}) returned nothing below log end {end}")
                for s in slices:
                    fd = fds.get(s.path)
                    if fd is None:
                        fd = fds[s.path] = os.open(s.path, os.O_RDONLY)
                    data = pread(fd, s.length, s.position)
                    if len(data) != s.length:
                        raise CheckFailed(f"short pread of {s.path}@{s.position}")
                    total += len(data)
                off = slices[-1].next_offset
        t1 = time.perf_counter()
        cpu = cpu.stop()
    finally:
        for fd in fds.values():
            os.close(fd)
    if total != lg.size_in_bytes * passes:
        raise CheckFailed(f"read {total} bytes in {passes} passes, the log holds "
                          f"{lg.size_in_bytes}")
    return {"elapsed_s": t1 - t0, "bytes": total, "cpu": cpu}


def measure_raw_read(path: str, chunk: int, passes: int) -> dict:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        total = 0
        pread = os.pread
        cpu = CpuWindow(None).start()
        t0 = time.perf_counter()
        for _ in range(passes):
            pos = 0
            while pos < size:
                data = pread(fd, chunk, pos)
                if not data:
                    break
                pos += len(data)
                total += len(data)
        t1 = time.perf_counter()
        cpu = cpu.stop()
    finally:
        os.close(fd)
    if total != size * passes:
        raise CheckFailed(f"raw read {total} of {size} x {passes} bytes")
    return {"elapsed_s": t1 - t0, "bytes": total, "cpu": cpu}


def _rate(res: dict) -> dict:
    res["mb_s"] = res["bytes"] / res["elapsed_s"] / 1e6 if res["elapsed_s"] > 0 else None
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
        t0 = time.perf_counter()
        infos = [lg.append_as_leader(blobs[i % 16], 0) for i in range(n)]
        t1 = time.perf_counter()
        cpu_append = cpu.stop()
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
        t0c = time.perf_counter()
        res = cl.clean(lg, high_watermark=lg.log_end_offset)
        t1c = time.perf_counter()
        cpu_clean = cpu.stop()
        out = {
            "available": True,
            "records_appended": records, "distinct_keys": len(latest),
            "versions_per_key": records / max(len(latest), 1),
            "segment_bytes": cfg.segment_bytes,
            "segments_before": segments_before, "segments_after": len(lg.segments),
            "append": _rate({"elapsed_s": t1 - t0, "bytes": appended_bytes,
                             "records": records, "cpu": cpu_append}),
            "clean": _rate({"elapsed_s": t1c - t0c, "bytes": res.bytes_read,
                            "records": res.records_read, "cpu": cpu_clean}),
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
         "elapsed_s": statistics.median(r["elapsed_s"] for r in runs)}
    if all("records_s" in r for r in runs):
        s["records_s"] = statistics.median(r["records_s"] for r in runs)
    for k in ("client_cpu_pct", "other_cpu_pct"):
        s[k] = statistics.median(r["cpu"][k] for r in runs)
    s["max_other_cpu_pct"] = max(r["cpu"]["other_cpu_pct"] for r in runs)
    return s


ROWS = [  # (key, label, raw counterpart)
    ("log_append", "Log.append_as_leader (page cache)", "raw_write"),
    ("raw_write", "raw os.write (page cache)", None),
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
           a.compact_mib, a.compact_segment_mib, a.keys, a.read_passes) <= 0:
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
    errors: list[str] = []
    try:
        for r in range(a.repeat):
            rdir = work / f"r{r}"
            rdir.mkdir()
            for fsync in (False, True):
                sfx = "_fsync" if fsync else ""
                raw_path = str(rdir / f"raw{sfx}.bin")
                log_dir = str(rdir / f"bench{sfx}-0")
                # alternate who goes first, so page-cache/writeback state does
                # not favour one side
                order = ("raw", "log") if (r + fsync) % 2 == 0 else ("log", "raw")
                lg = None
                for who in order:
                    if who == "raw":
                        res = _rate(measure_raw_write(raw_path, blobs, n_blobs, fsync))
                        runs["raw_write" + sfx].append(res)
                    else:
                        res, lg = measure_log_append(log_dir, blobs, recs_per_blob, n_blobs, fsync)
                        runs["log_append" + sfx].append(_rate(res))
                    print(f"  #{r} {who:3s} write{' + fsync' if fsync else '         '} "
                          f"{res['mb_s']:8.1f} MB/s ({res['elapsed_s']:.3f}s; CPU% self "
                          f"{res['cpu']['client_cpu_pct']} other {res['cpu']['other_cpu_pct']})",
                          flush=True)
                paired["log_append" + sfx].append(
                    runs["log_append" + sfx][-1]["mb_s"] / runs["raw_write" + sfx][-1]["mb_s"])
                if fsync:
                    # Reads, page-cache hot, on what the fsync'd writes left.
                    fetch = a.fetch_kib * 1024
                    for who in order:
                        if who == "raw":
                            res = _rate(measure_raw_read(raw_path, fetch, a.read_passes))
                            runs["raw_read"].append(res)
                        else:
                            res = _rate(measure_log_read(lg, fetch, a.read_passes))
                            runs["log_read"].append(res)
                        print(f"  #{r} {who:3s} read           {res['mb_s']:8.1f} MB/s "
                              f"({res['elapsed_s']:.3f}s; CPU% self {res['cpu']['client_cpu_pct']}"
                              f" other {res['cpu']['other_cpu_pct']})", flush=True)
                    paired["log_read"].append(runs["log_read"][-1]["mb_s"] /
                                              runs["raw_read"][-1]["mb_s"])
                lg.close()
                # Deleting drops any still-dirty pages: the next measurement
                # starts without writeback left over from this one.
                os.unlink(raw_path)
                shutil.rmtree(log_dir)
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
    ratios = {k: {"median_paired": statistics.median(v), "all": [round(x, 3) for x in v],
                  "best_over_best": summary[k]["best_mb_s"] / summary[raw]["best_mb_s"]}
              for k, _, raw in ROWS if raw and k in summary and raw in summary
              for v in [paired[k]]}
    print()
    print(f"Storage engine alone, {workload['bytes_per_measurement'] / 1e6:.0f} MB per write "
          f"measurement in ~1 MiB produce blobs; median of {a.repeat}; MB = 10^6 bytes of "
          f"lz4 batch bytes on disk (x{1 / workload['lz4_ratio']:.2f} in record values)")
    print(f"Disk: {machine['disk']}; {machine['cpus_usable']} cores shared with other work")
    print()
    hdr = (f"{'measurement':34s} {'MB/s':>8s} {'records/s':>10s} {'vs raw':>7s} "
           f"{'time s':>7s} {'CPU%self':>8s} {'other':>5s}  runs MB/s")
    print(hdr)
    print("-" * len(hdr))
    for key, label, raw in ROWS:
        s = summary.get(key)
        if s is None:
            print(f"{label:34s} {'FAIL':>8s}")
            continue
        rs = s.get("records_s")
        ratio = f"{ratios[key]['median_paired']:7.2f}" if raw and key in ratios else f"{'':7s}"
        print(f"{label:34s} {s['mb_s']:8.1f} {'-' if rs is None else round(rs):>10} {ratio} "
              f"{s['elapsed_s']:7.3f} {s['client_cpu_pct']:8.0f} {s['other_cpu_pct']:5.0f}  "
              f"{s['all_mb_s']}")
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
                  f"{x['elapsed_s']:7.3f} {x['cpu']['client_cpu_pct']:8.0f} "
                  f"{x['cpu']['other_cpu_pct']:5.0f}" + (
                      f"  FAIL: {comp['error']}" if key == "clean" and comp.get("error") else ""))
        print(f"  compaction: {comp['records_appended']} records, {comp['distinct_keys']} keys "
              f"({comp['versions_per_key']:.1f} versions/key), {comp['segments_before']} -> "
              f"{comp['segments_after']} segments, {comp['clean']['bytes'] / 1e6:.1f} MB read -> "
              f"{comp['clean'].get('bytes_written', 0) / 1e6:.2f} MB written, "
              f"{comp.get('retained_records', '?')} records kept"
              + ("" if comp.get("error") else " (verified: the latest offset of every key)"))
    print("vs raw = median over repeats of (storage MB/s / raw MB/s in the same repeat); "
          "CPU% = % of ONE core: self = this process, other = everything else on the machine")
    for key, tgt in (("log_append", True), ("log_append_fsync", True)):
        if key in ratios:
            v = ratios[key]["median_paired"]
            print(f"{key}: {v:.2f} of raw ({'meets' if v >= TARGET_RATIO else 'BELOW'} the "
                  f"{TARGET_RATIO:.0%} target; best-run ratio {ratios[key]['best_over_best']:.2f})")
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
