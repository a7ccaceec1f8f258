"""Side-by-side benchmark: raykafka vs Tansu vs librdkafka's mock cluster.

    .venv/bin/python -m bench.run [--records N] [--record-size B]
        [--partitions P] [--targets raykafka,tansu,mock] [--acks 1|all]
        [--repeat R] [--raykafka-bootstrap HOST:PORT]
    .venv/bin/python -m bench.run --matrix [--quick] [--repeat R]
        [--latency-rate R] [--targets ...]

Single workload (default): for every target the harness starts the broker
itself (own process group, killed at the end, also on Ctrl-C / errors), then
per repeat: creates a fresh topic (AdminClient; falls back to auto-create and
says so), runs the produce phase and then the consume phase, each in a fresh
client process (bench.client). It prints MB/s, records/s and raykafka/peer
ratios (medians over repeats) and writes everything as JSON under
bench/results/.

--matrix (issue 8): produce rows {1 KiB, 16 KiB} x {1, 6 partitions} x
{acks=1, acks=all} and consume rows (16 KiB), every target once per round
with the broker reused across that round's rows, a fresh topic per row;
then end-to-end latency at a fixed rate, broker memory, and raykafka's PSS
per idle replica actor. See bench/README.md.

A phase that does not account for every record is FAIL, never a number.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.procstat import (
    RssSampler,
    actor_processes,
    cpu_snapshot,
    cpu_split,
    process_memory,
    tree_memory,
)

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
TANSU_SH = Path(os.environ.get("RAYKAFKA_TANSU_SH", "/work/shared/peers/tansu.sh"))
MOCK_PY = Path(os.environ.get("RAYKAFKA_MOCK_PY", "/work/shared/peers/rdkafka_mock.py"))
ALL_TARGETS = ("raykafka", "tansu", "mock")
PEERS = ("tansu", "mock")
OTHER_CPU_WARN = 15.0  # % of one core used by foreign processes => disturbed


class TargetError(RuntimeError):
    pass


# ------------------------------------------------------------------ helpers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _proc_table() -> dict[int, int]:
    """pid -> ppid for every process we can see (Linux /proc)."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            # field 4 (ppid) follows the ")" that closes the command name
            table[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return table


def descendants(pid: int) -> set[int]:
    table = _proc_table()
    kids: dict[int, list[int]] = {}
    for p, pp in table.items():
        kids.setdefault(pp, []).append(p)
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def _alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited: /proc has it (for any
    user), and not as a zombie (as good as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_tree(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a process we started with start_new_session=True: SIGTERM its
    process group, wait, then SIGKILL the group and every descendant we saw
    (Ray may place helpers outside the group). Touches nothing else."""
    if proc.poll() is not None and not descendants(proc.pid):
        return
    pgid = proc.pid  # start_new_session => leader pid == pgid
    seen = descendants(proc.pid)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        seen |= descendants(proc.pid) if proc.poll() is None else set()
        if proc.poll() is not None and not any(_alive(p) for p in seen):
            break
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for p in seen:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class LogPump(threading.Thread):
    """Drain a child's merged stdout/stderr into a log file (so it never
    blocks on a full pipe) and signal when a readiness regex matches."""

    def __init__(self, proc: subprocess.Popen, log_path: Path, pattern: str | None):
        super().__init__(daemon=True)
        self.proc, self.log_path = proc, log_path
        self.pattern = re.compile(pattern) if pattern else None
        self.match: re.Match | None = None
        self.ready = threading.Event()

    def run(self):
        with open(self.log_path, "w", errors="replace") as log:
            for raw in iter(self.proc.stdout.readline, b""):
                line = raw.decode(errors="replace")
                log.write(line)
                log.flush()
                if self.pattern and self.match is None:
                    m = self.pattern.search(line)
                    if m:
                        self.match = m
                        self.ready.set()
        self.ready.set()  # EOF: the process is gone; waiter checks .match

    def tail(self, n: int = 25) -> str:
        try:
            return "".join(self.log_path.read_text(errors="replace").splitlines(True)[-n:])
        except OSError:
            return ""


# ------------------------------------------------------------------ targets
@dataclass
class Target:
    """A broker the harness starts (once per round) and stops itself."""
    # What the matrix must work around (only the mock sets these): topics
    # get this many partitions whatever was asked (no CreateTopics), the
    # broker deletes the oldest records beyond this many MiB per partition,
    # and it has no DeleteTopics.
    fixed_partitions = None
    keeps_mib_per_partition = None
    deletes_topics = True

    name: str
    workdir: Path
    start_timeout: float
    proc: subprocess.Popen | None = None
    pump: LogPump | None = None
    bootstrap: str | None = None
    notes: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    starts: int = 0
    _note_keys: set = field(default_factory=set)

    def note(self, text: str, key: str | None = None) -> None:
        """Record a note once (per key, default the text itself)."""
        key = key or text
        if key not in self._note_keys:
            self._note_keys.add(key)
            self.notes.append(text)

    def _spawn(self, cmd: list[str], pattern: str | None, env=None, cwd=None):
        log = self.workdir / f"{self.name}-{self.starts}.log"
        self.logs.append(str(log))
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env=env,
            cwd=cwd or self.workdir)
        self.pump = LogPump(self.proc, log, pattern)
        self.pump.start()

    def _wait_pattern(self) -> re.Match:
        if not self.pump.ready.wait(self.start_timeout) or self.pump.match is None:
            why = ("exited with code %s" % self.proc.poll()) if self.proc.poll() is not None \
                else f"not ready after {self.start_timeout:.0f}s"
            raise TargetError(f"{self.name} {why}; last output:\n{self.pump.tail()}")
        return self.pump.match

    def start(self) -> str:
        self.starts += 1
        self.bootstrap = self._start()
        return self.bootstrap

    def _start(self) -> str:
        raise NotImplementedError

    def stop(self):
        if self.proc is not None:
            kill_tree(self.proc)
            self.pump.join(timeout=5)
            self.proc = None


class RaykafkaTarget(Target):
    def __init__(self, workdir, start_timeout, bootstrap=None, cmd=None):
        super().__init__("raykafka", workdir, start_timeout)
        self.external = bootstrap
        self.cmd = cmd

    def _command(self) -> list[str]:
        if self.cmd:
            return self.cmd.split()
        exe = VENV_BIN / "raykafka"
        if exe.exists():
            return [str(exe)]
        if (REPO / "cli" / "main.py").exists():
            # Not installed as a console script yet; call the same entry point.
            self.note(f"{exe} missing; ran cli.main:main from {REPO} instead")
            return [PYTHON, "-c", "import sys; from cli.main import main; "
                    "sys.argv[0] = 'raykafka'; sys.exit(main())"]
        raise TargetError(
            f"raykafka CLI not found: neither {exe} nor {REPO}/cli/main.py exists "
            f"(install the project with `.venv/bin/pip install -e .` once the CLI "
            f"lands, or pass --raykafka-bootstrap HOST:PORT for a running broker)")

    def _start(self) -> str:
        if self.external:
            self.note(f"used the already running broker at {self.external}; its CPU "
                      f"is not attributed (brk '?'), it counts under 'other'")
            return self.external
        port = free_port()
        data = self.workdir / f"raykafka-data-{self.starts}"
        data.mkdir()
        env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
                   RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")
        cmd = self._command() + ["start", "--data-dir", str(data), "--override",
                                 f"listeners=PLAINTEXT://127.0.0.1:{port}"]
        self._spawn(cmd, r"raykafka ready on (\S+):(\d+)", env=env, cwd=REPO)
        m = self._wait_pattern()
        return f"{m.group(1)}:{m.group(2)}"


class TansuTarget(Target):
    def __init__(self, workdir, start_timeout):
        super().__init__("tansu", workdir, start_timeout)

    def _start(self) -> str:
        if not TANSU_SH.exists():
            raise TargetError(f"{TANSU_SH} not found")
        port = free_port()
        self._spawn(["bash", str(TANSU_SH), str(port)], None)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:  # first run pip-installs tansu
            if self.proc.poll() is not None:
                time.sleep(0.2)
                raise TargetError(f"tansu exited with code {self.proc.returncode}; "
                                  f"last output:\n{self.pump.tail()}")
            if port_open("127.0.0.1", port):
                return f"127.0.0.1:{port}"
            time.sleep(0.2)
        raise TargetError(f"tansu not listening on {port} after "
                          f"{self.start_timeout:.0f}s; last output:\n{self.pump.tail()}")


class MockTarget(Target):
    # rd_kafka_mock: auto-created topics get 4 partitions (CreateTopics is
    # not implemented), each keeps at most 5 MiB (hard-coded), and there is
    # no DeleteTopics.
    fixed_partitions = 4
    keeps_mib_per_partition = 5
    deletes_topics = False

    def __init__(self, workdir, start_timeout):
        super().__init__("mock", workdir, start_timeout)

    def _start(self) -> str:
        if not MOCK_PY.exists():
            raise TargetError(f"{MOCK_PY} not found")
        self._spawn([PYTHON, "-u", str(MOCK_PY), "--brokers", "1"],
                    r"bootstrap\.servers=(\S+)")
        return self._wait_pattern().group(1)


# ------------------------------------------------------------------ clients
_children: set[subprocess.Popen] = set()


@dataclass(frozen=True)
class Workload:
    """What one topic gets: records x record_size values, keyed, lz4."""
    records: int
    record_size: int
    partitions: int
    acks: str

    @property
    def case_id(self) -> str:
        return f"{size_label(self.record_size)} p{self.partitions} acks={self.acks}"


def size_label(nbytes: int) -> str:
    return f"{nbytes // 1024}KiB" if nbytes % 1024 == 0 else f"{nbytes}B"


def start_client(cmd: list[str], err_log: Path) -> subprocess.Popen:
    with open(err_log, "w") as err:
        p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=err,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    _children.add(p)
    return p


def finish_client(p: subprocess.Popen, err_log: Path, limit: float, phase: str) -> dict:
    """Wait for a client process started by start_client and parse the JSON
    object on its last stdout line; a missing result is an error result."""
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        kill_tree(p, grace=2)
        return {"ok": False, "phase": phase,
                "error": f"client process still running after {limit:.0f}s; killed"}
    except BaseException:  # Ctrl-C / SIGTERM: never leave a client behind
        kill_tree(p, grace=2)
        raise
    finally:
        if p.poll() is not None:
            _children.discard(p)
    lines = out.decode(errors="replace").strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = err_log.read_text(errors="replace")[-2000:]
        return {"ok": False, "phase": phase,
                "error": f"client exited {p.returncode} without a result; stderr:\n{tail}"}


def run_phase(phase: str, bootstrap: str, topic: str, wl: Workload, a, log_dir: Path,
              broker_pid: int | None = None, extra: tuple[str, ...] = ()) -> dict:
    cmd = [PYTHON, "-m", "bench.client", phase, "--bootstrap", bootstrap,
           "--broker-pid", str(broker_pid or 0),
           "--topic", topic, "--partitions", str(wl.partitions),
           "--records", str(wl.records), "--record-size", str(wl.record_size),
           "--acks", str(wl.acks), "--timeout", str(a.phase_timeout),
           "--idle-timeout", str(a.idle_timeout), *extra]
    err_log = log_dir / f"{topic}-{phase}.stderr"
    return with_throughput(finish_client(start_client(cmd, err_log), err_log,
                                         a.phase_timeout + 60, phase))


def with_throughput(res: dict) -> dict:
    """A client result with mb_s and records_s added if it is good."""
    if res.get("ok") and res.get("elapsed_s", 0) > 0:
        res["mb_s"] = res["bytes"] / res["elapsed_s"] / 1e6
        res["records_s"] = res["records"] / res["elapsed_s"]
    return res


def warm_up_groups(t: Target, topic: str, a) -> dict:
    """The first group.id a broker sees may make it set up its group
    coordinator (raykafka: __consumer_offsets and its coordinator actors):
    an OffsetFetch does that here, untimed, so it lands in no timed window."""
    w = run_phase("warmup", t.bootstrap, topic, Workload(1, 1024, 1, "1"), a, t.workdir)
    if not w.get("ok"):
        t.note(f"group coordinator warm-up failed: {w.get('error')}", key="warmup")
    return w


def create_topic(t: Target, topic: str, wl: Workload, a, case: dict) -> bool:
    """The create phase, into case["create"]: True if the topic has the
    partitions asked for (where the target can make them)."""
    c = case["create"] = run_phase("create", t.bootstrap, topic, wl, a, t.workdir)
    if c.get("ok") and t.fixed_partitions is None and not c.get("created"):
        # An auto-created topic would have the broker's default partition
        # count, not the one asked for.
        c.update(ok=False, error=f"CreateTopics failed: {c.get('note')}")
    return bool(c.get("ok"))


def one_partition_args(t: Target, partitions: int) -> tuple[str, ...]:
    """A produce's arguments that keep a one-partition case on one partition
    of a target whose topics have more (the mock's have 4)."""
    return ("--partition", "0") if t.fixed_partitions is not None and partitions == 1 else ()


def delete_topic(t: Target, topic: str, wl: Workload, a, case: dict) -> None:
    """The delete phase, into case["delete"], where the target can delete."""
    if t.deletes_topics:
        d = case["delete"] = run_phase("delete", t.bootstrap, topic, wl, a, t.workdir)
        if not d.get("ok"):
            t.note(f"topics could not be deleted, they pile up in the broker "
                   f"({d.get('error')})", key="delete")


def run_round(t: Target, r: int, a, run_id: str) -> dict:
    """Start the target, run one repeat (create, produce, consume), and stop
    it again. Every round gets a fresh broker and a fresh topic."""
    run = {"repeat": r}
    t0 = time.monotonic()
    try:
        bootstrap = t.start()
        run["bootstrap"] = bootstrap
        run["startup_s"] = round(time.monotonic() - t0, 2)
        print(f"  {t.name} #{r}: up on {bootstrap} in {run['startup_s']}s", flush=True)
        topic = run["topic"] = f"bench-{run_id}-{t.name}-{r}"
        wl = Workload(a.records, a.record_size, a.partitions, a.acks)
        # The consume phase uses a group, as in the matrix's sessions.
        run["warmup"] = warm_up_groups(t, f"{topic}-warmup", a)
        c = run["create"] = run_phase("create", bootstrap, topic, wl, a, t.workdir)
        if c.get("note"):
            t.note(c["note"])
            print(f"  {t.name} #{r}: {c['note']}", flush=True)
        elif not c.get("ok"):
            # Not even metadata: the broker is not answering. Do not wait out
            # the produce timeout for nothing.
            run["produce"] = {"ok": False, "phase": "produce", "error":
                              f"broker not usable, produce not run: {c.get('error')}"}
            print(f"  {t.name} #{r} FAIL: {run['produce']['error']}", flush=True)
            return run
        for phase in ("produce", "consume"):
            load = os.getloadavg()[0]
            res = run_phase(phase, bootstrap, topic, wl, a, t.workdir,
                            t.proc.pid if t.proc else None)
            res["loadavg_1m_before"] = round(load, 2)
            run[phase] = res
            cpu = res.get("cpu") or {}
            print(f"  {t.name} #{r} {phase:8s}" + (
                f"{res['mb_s']:8.1f} MB/s {res['records_s']:10.0f} rec/s "
                f"({res['elapsed_s']:.2f}s; CPU% client {cpu.get('client_cpu_pct')}"
                f"{_client_kernel_note(cpu)} broker {cpu.get('broker_cpu_pct')} "
                f"other {cpu.get('other_cpu_pct')})"
                if res.get("ok") else f"FAIL: {res.get('error')}"), flush=True)
            for w in res.get("warnings", []):
                t.note(f"{phase}: {w} (first seen in round {r + 1})", key=w[:24])
                print(f"  {t.name} #{r}: warning: {w}", flush=True)
            if not res.get("ok"):
                break  # nothing meaningful to consume after a failed produce
    finally:
        t.stop()
    return run


# ------------------------------------------------------------------ report
def summarize(target_result: dict) -> dict:
    s = {}
    for phase in ("produce", "consume"):
        rs = [r.get(phase) for r in target_result.get("runs", [])]
        if not rs or any(r is None or not r.get("ok") for r in rs):
            # One bad round fails the target: a lost record is never averaged away.
            errs = [r.get("error") for r in rs if r and not r.get("ok")]
            bad = sum(1 for r in rs if r is None or not r.get("ok"))
            err = target_result.get("error") or (errs[0] if errs else "not run")
            if rs and bad < len(rs):
                err = f"{bad}/{len(rs)} rounds failed: {err}"
            s[phase] = {"ok": False, "error": err}
            continue
        s[phase] = {
            "ok": True,
            "mb_s": statistics.median(r["mb_s"] for r in rs),
            "records_s": statistics.median(r["records_s"] for r in rs),
            "elapsed_s": statistics.median(r["elapsed_s"] for r in rs),
            "all_mb_s": [round(r["mb_s"], 1) for r in rs],
            # Interference only ever slows a run down, so on a shared machine
            # the best round is the least disturbed one.
            "best_mb_s": max(r["mb_s"] for r in rs),
        }
        for k in ("client_cpu_pct", "broker_cpu_pct", "other_cpu_pct"):
            vals = [r.get("cpu", {}).get(k) for r in rs]
            s[phase][k] = statistics.median(vals) if None not in vals else None
    parts = set()
    for r in target_result.get("runs", []):
        n = (r.get("consume") or {}).get("partitions") or \
            (r.get("produce") or {}).get("partitions_seen")
        if n:
            parts.add(n)
    s["partitions"] = parts.pop() if len(parts) == 1 else (sorted(parts) or None)
    return s


def print_report(summary: dict, ratios: dict, a, machine: dict) -> None:
    print()
    print(f"Workload: {a.records} records x {a.record_size} B, keyed, "
          f"{a.partitions} partitions, acks={a.acks}, lz4, linger.ms=5, "
          f"batch.size=1000000; median of {a.repeat} repeat(s); MB = 10^6 bytes "
          f"of record values")
    print(f"Machine: {machine['cpus']} CPU cores ({machine['cpus_usable']} usable), "
          f"{machine['platform']}; client and broker run on the SAME "
          f"{machine['cpus_usable']} cores, so the client's CPU use is part of "
          f"every figure (Ray workers run at nice 15).")
    print()
    hdr = (f"{'target':10s} {'phase':8s} {'parts':>5s} {'MB/s':>9s} {'records/s':>11s} "
           f"{'time s':>7s} {'CPU%cli':>7s} {'brk':>5s} {'other':>5s}  runs MB/s")
    print_table_head(hdr)
    for name, s in summary.items():
        for phase in ("produce", "consume"):
            r = s[phase]
            parts = str(s.get("partitions") or "-")
            if r["ok"]:
                f = lambda v: f"{v:.0f}" if isinstance(v, (int, float)) else "?"
                print(f"{name:10s} {phase:8s} {parts:>5s} {r['mb_s']:9.1f} {r['records_s']:11.0f} "
                      f"{r['elapsed_s']:7.2f} {f(r['client_cpu_pct']):>7s} "
                      f"{f(r['broker_cpu_pct']):>5s} {f(r['other_cpu_pct']):>5s}  {r['all_mb_s']}")
            else:
                err = (r.get("error") or "").splitlines()[0][:100]
                print(f"{name:10s} {phase:8s} {parts:>5s} {'FAIL':>9s}  {err}")
    print("CPU% = median CPU use during the timed window in % of ONE core (the machine has "
          f"{machine['cpus_usable'] * 100}%): cli = client process, brk = broker process tree, "
          "other = everything else on the machine (high = disturbed run).")
    if ratios:
        print()
        print(f"{'ratio (MB/s)':18s} {'produce':>9s} {'consume':>9s}   "
              f"{'best-round produce':>18s} {'consume':>8s}")
        for peer, rr in ratios.items():
            fmt = lambda v, w=9: f"{v:{w}.2f}" if isinstance(v, float) else f"{'n/a':>{w}s}"
            print(f"{'raykafka/' + peer:18s} {fmt(rr['produce'])} {fmt(rr['consume'])}   "
                  f"{fmt(rr['produce_best'], 18)} {fmt(rr['consume_best'], 8)}")
        print("(median ratio = ratio of the medians; best-round = ratio of each side's "
              "fastest round, the least disturbed one)")


def machine_info() -> dict:
    try:
        import confluent_kafka
        ck = {"confluent_kafka": confluent_kafka.version()[0],
              "librdkafka": confluent_kafka.libversion()[0]}
    except ImportError:
        ck = {}
    return {"cpus": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
            "platform": platform.platform(), "python": platform.python_version(),
            "hostname": platform.node(), **ck}


# ------------------------------------------------------------------ matrix
MATRIX_RECORD_SIZES = (1024, 16384)
MATRIX_PARTITIONS = (1, 6)
MATRIX_ACKS = ("1", "all")
# Consume rows read back the topic its acks=1 produce row wrote (the other
# topics are read too, to verify them; those figures stay in the JSON).
CONSUME_RECORD_SIZE = 16384
CONSUME_ACKS = "1"
BASELINE = "tansu"
# The row whose raykafka records/s sets the latency phase's rate (half of it).
PEAK_ROW = "produce 1KiB p1 acks=1"
REPLICA_ACTOR_CLASS = "ReplicaActor"
# Issue 8's targets: reported against each run's figures, never asserted.
GOAL_PRODUCE_RATIO = 1.2
GOAL_CONSUME_RATIO = 1.5
GOAL_P99_MS = 20.0
GOAL_IDLE_PSS_MIB = 60.0
MIB = 1024 * 1024


def matrix_workloads(row_mib: float) -> list[Workload]:
    """Every (record size, partitions, acks) case, each writing row_mib MiB
    of record values (so 16 KiB rows have 1/16 of the records)."""
    row_bytes = int(row_mib * MIB)
    return [Workload(max(1, row_bytes // size), size, parts, acks)
            for size in MATRIX_RECORD_SIZES for parts in MATRIX_PARTITIONS
            for acks in MATRIX_ACKS]


def matrix_rows(workloads: list[Workload]) -> list[dict]:
    """The table's rows in order: a produce row per case, then the consume
    rows. `case` names the topic a row's figure comes from."""
    rows = [{"row": f"produce {wl.case_id}", "phase": "produce", "case": wl.case_id,
             "records": wl.records, "record_size": wl.record_size,
             "partitions": wl.partitions, "acks": wl.acks} for wl in workloads]
    rows += [{"row": f"consume {size_label(wl.record_size)} p{wl.partitions}",
              "phase": "consume", "case": wl.case_id, "records": wl.records,
              "record_size": wl.record_size, "partitions": wl.partitions, "acks": wl.acks}
             for wl in workloads
             if wl.record_size == CONSUME_RECORD_SIZE and wl.acks == CONSUME_ACKS]
    return rows


def _first_error(case: dict) -> str:
    for phase in ("create", "produce", "consume"):
        r = case.get(phase)
        if r is not None and not r.get("ok"):
            return f"{phase}: {r.get('error') or 'failed'}"
    return case.get("error") or "not run"


def cell_from_case(phase: str, case: dict | None) -> dict:
    """One round's figure for one row from the case (topic) it reads.
    A produce figure counts only if the read-back of the same topic found
    every record exactly once: a fast but lossy broker is FAIL. A consume
    figure of a topic the broker had already truncated (the mock's 5 MiB per
    partition) is n/a: fewer bytes were read than the row says."""
    if case is None:
        return {"status": "fail", "error": "not run"}
    prod, cons = case.get("produce"), case.get("consume")
    if case.get("error") or not (prod and prod.get("ok")) or not (cons and cons.get("ok")):
        return {"status": "fail", "error": _first_error(case)}
    src = prod if phase == "produce" else cons
    if phase == "consume" and cons.get("retention_deleted_records"):
        return {"status": "na", "reason":
                f"broker deleted {cons['retention_deleted_records']} of {prod['records']} "
                f"records before the read (retention), kept {cons.get('kept_records')}"}
    cpu = src.get("cpu") or {}
    return {"status": "ok", "mb_s": src["mb_s"], "records_s": src["records_s"],
            "elapsed_s": src["elapsed_s"],
            "partitions": cons.get("partitions") or prod.get("partitions_seen"),
            "client_cpu_pct": cpu.get("client_cpu_pct"),
            "broker_cpu_pct": cpu.get("broker_cpu_pct"),
            "other_cpu_pct": cpu.get("other_cpu_pct")}


def _median_or_none(values: list):
    return statistics.median(values) if values and None not in values else None


def summarize_cell(cells: list[dict]) -> dict:
    """Rounds of one (row, target) -> one table cell. One failed round fails
    the cell (a lost record is never averaged away); n/a if any round was
    n/a; otherwise medians over rounds."""
    if not cells:
        return {"status": "fail", "error": "not run"}
    fails = [c for c in cells if c["status"] == "fail"]
    if fails:
        prefix = f"{len(fails)}/{len(cells)} rounds failed: " if len(fails) < len(cells) else ""
        return {"status": "fail", "error": prefix + fails[0]["error"]}
    nas = [c for c in cells if c["status"] == "na"]
    if nas:
        return {"status": "na", "reason": nas[0]["reason"]}
    parts = {c["partitions"] for c in cells}
    return {
        "status": "ok",
        "mb_s": statistics.median(c["mb_s"] for c in cells),
        "records_s": statistics.median(c["records_s"] for c in cells),
        "elapsed_s": statistics.median(c["elapsed_s"] for c in cells),
        # Interference only ever slows a run down: the best round is the
        # least disturbed one.
        "best_mb_s": max(c["mb_s"] for c in cells),
        "all_mb_s": [round(c["mb_s"], 1) for c in cells],
        "partitions": parts.pop() if len(parts) == 1 else sorted(parts, key=str),
        **{k: _median_or_none([c[k] for c in cells])
           for k in ("client_cpu_pct", "broker_cpu_pct", "other_cpu_pct")},
    }


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def summarize_matrix(rows: list[dict], sessions: dict[str, list[dict]]) -> dict:
    """{row: {target: cell}} with each cell's ratio to the baseline (Tansu)
    as ratio of medians (`ratio`) and of best rounds (`best_ratio`)."""
    out = {}
    for row in rows:
        cells = {}
        for target, target_sessions in sessions.items():
            per_round = []
            for s in target_sessions:
                case = s.get("cases", {}).get(row["case"])
                if case is None and s.get("error"):  # the broker did not start
                    per_round.append({"status": "fail", "error": s["error"]})
                else:
                    per_round.append(cell_from_case(row["phase"], case))
            cells[target] = summarize_cell(per_round)
        base = cells.get(BASELINE, {})
        for cell in cells.values():
            ok = cell["status"] == "ok" and base.get("status") == "ok"
            cell["ratio"] = ratio(cell["mb_s"], base["mb_s"]) if ok else None
            cell["best_ratio"] = ratio(cell["best_mb_s"], base["best_mb_s"]) if ok else None
        out[row["row"]] = cells
    return out


def latency_rate(summary: dict, fixed: float | None) -> tuple[float | None, str]:
    """Records/s for the latency phase and where it came from."""
    if fixed:
        return fixed, "--latency-rate"
    cell = summary.get(PEAK_ROW, {}).get("raykafka", {})
    if cell.get("status") != "ok":
        return None, f"no raykafka figure for '{PEAK_ROW}' (and no --latency-rate)"
    return round(cell["records_s"] / 2), f"half of raykafka's median '{PEAK_ROW}' records/s"


def summarize_latency(runs: list[dict]) -> dict:
    """Latency rounds of one target -> medians of p50/p99/p99.9, max of max."""
    if not runs:
        return {"ok": False, "error": "not run"}
    na = [r for r in runs if r.get("na")]
    if na:
        return {"ok": None, "na": na[0]["na"]}
    bad = [r for r in runs if not r.get("ok")]
    if bad:
        return {"ok": False, "error": bad[0].get("error") or "failed"}
    lat = [r["consume"]["latency"] for r in runs]
    out = {"ok": True, "rounds": len(runs),
           **{k: statistics.median(x[k] for x in lat) for k in ("p50_ms", "p99_ms", "p999_ms")},
           "max_ms": max(x["max_ms"] for x in lat),
           "window_records": statistics.median(x["count"] for x in lat),
           "achieved_rate": statistics.median(r["produce"]["achieved_rate"] for r in runs),
           "schedule_lag_max_ms": max(r["produce"]["schedule_lag_max_ms"] or 0 for r in runs),
           "join_s": statistics.median(r["consume"].get("join_s") or 0 for r in runs)}
    for k in ("clients_cpu_pct", "broker_cpu_pct", "other_cpu_pct"):
        out[k] = _median_or_none([(r.get("cpu") or {}).get(k) for r in runs])
    return out


def summarize_memory(target_sessions: list[dict]) -> dict:
    """Broker memory over a target's throughput sessions: medians of what
    the tree held after its rows, the highest sampled RSS."""
    after = [s["memory"]["after_rows"] for s in target_sessions
             if s.get("memory", {}).get("after_rows")]
    started = [s["memory"]["after_start"] for s in target_sessions
               if s.get("memory", {}).get("after_start")]
    if not after:
        return {}
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    return {"rss_after_rows": med(after, "rss_bytes"), "pss_after_rows": med(after, "pss_bytes"),
            "processes": med(after, "processes"),
            "rss_after_start": med(started, "rss_bytes") if started else None,
            "pss_after_start": med(started, "pss_bytes") if started else None,
            "peak_rss": max(max(s["memory"].get("peak_rss_bytes") or 0,
                                s["memory"].get("after_rows", {}).get("rss_bytes", 0))
                            for s in target_sessions)}


def summarize_idle_replicas(procs: list[dict], partitions: int,
                            tree_before: dict | None, tree_after: dict | None) -> dict:
    """Per idle replica actor process: median/min/max PSS, median RSS/USS;
    and how much the whole tree's PSS grew per partition created."""
    out = {"partitions": partitions, "replica_processes": len(procs)}
    if procs:
        pss = sorted(p["pss"] for p in procs)
        out.update(pss_median=statistics.median(pss), pss_min=pss[0], pss_max=pss[-1],
                   rss_median=statistics.median(p["rss"] for p in procs),
                   uss_median=statistics.median(p["uss"] for p in procs))
    if tree_before and tree_after and partitions:
        out["tree_pss_growth_per_partition"] = \
            (tree_after["pss_bytes"] - tree_before["pss_bytes"]) / partitions
    if len(procs) != partitions:
        out["error"] = (f"expected {partitions} ray::{REPLICA_ACTOR_CLASS} processes, "
                        f"found {len(procs)}")
    return out


def goal_report(summary: dict, latency: dict, idle: dict | None) -> list[dict]:
    """Issue 8's four targets against this run's figures."""
    def cell(row):
        return summary.get(row, {}).get("raykafka", {})

    goals = []
    c = cell(PEAK_ROW)
    goals.append({"goal": "produce 1 KiB lz4 acks=1 p1, raykafka/tansu", "value": c.get("ratio"),
                  "unit": "x", "target": f">= {GOAL_PRODUCE_RATIO}x",
                  "met": None if c.get("ratio") is None else c["ratio"] >= GOAL_PRODUCE_RATIO})
    for parts in MATRIX_PARTITIONS:
        c = cell(f"consume {size_label(CONSUME_RECORD_SIZE)} p{parts}")
        goals.append({"goal": f"consume 16 KiB p{parts}, raykafka/tansu", "value": c.get("ratio"),
                      "unit": "x", "target": f">= {GOAL_CONSUME_RATIO}x",
                      "met": None if c.get("ratio") is None else c["ratio"] >= GOAL_CONSUME_RATIO})
    lat = latency.get("raykafka", {})
    p99 = lat.get("p99_ms") if lat.get("ok") else None
    goals.append({"goal": "p99 end-to-end at half of peak, raykafka", "value": p99, "unit": "ms",
                  "target": f"<= {GOAL_P99_MS:g} ms",
                  "met": None if p99 is None else p99 <= GOAL_P99_MS})
    pss = (idle or {}).get("pss_median")
    pss_mib = pss / MIB if pss is not None else None
    goals.append({"goal": "PSS per idle replica actor (median)", "value": pss_mib, "unit": "MiB",
                  "target": f"<= {GOAL_IDLE_PSS_MIB:g} MiB",
                  "met": None if pss_mib is None else pss_mib <= GOAL_IDLE_PSS_MIB})
    return goals


# ---- running the matrix
def run_case(t: Target, wl: Workload, a, topic: str) -> dict:
    """One topic: create, produce (timed), consume (timed; also the
    exactly-once check of the produce), delete."""
    case: dict = {"topic": topic, "records": wl.records}
    pid = t.proc.pid if t.proc else None
    if not create_topic(t, topic, wl, a, case):
        return case
    case["produce"] = run_phase("produce", t.bootstrap, topic, wl, a, t.workdir, pid,
                                one_partition_args(t, wl.partitions))
    if case["produce"].get("ok"):
        consume_extra = ("--tolerate-retention",) if t.keeps_mib_per_partition else ()
        case["consume"] = run_phase("consume", t.bootstrap, topic, wl, a, t.workdir, pid,
                                    consume_extra)
    delete_topic(t, topic, wl, a, case)
    return case


def _client_kernel_note(cpu: dict) -> str:
    """' (kernel K%, F k faults)' of a client phase, when recorded: a client
    that faults on memory the host took back spends its time in the kernel."""
    if cpu.get("client_kernel_cpu_pct") is None:
        return ""
    faults_k = cpu.get("client_page_faults", 0) / 1000
    return f" (kernel {cpu['client_kernel_cpu_pct']:.0f}%, {faults_k:.0f}k faults)"


def case_line(case: dict, phases: tuple[str, ...], mb_s_format: str, details,
              first_error) -> str:
    """The progress line of one topic: per phase that ran its MB/s and
    details(phase, result), or FAIL and why; FAIL and first_error(case) if
    none ran."""
    parts = []
    for phase in phases:
        r = case.get(phase)
        if r is None:
            continue
        if r.get("ok"):
            parts.append(f"{phase} {r['mb_s']:{mb_s_format}} MB/s{details(phase, r)}")
        else:
            parts.append(f"{phase} FAIL: {(r.get('error') or '').splitlines()[0][:120]}")
    if not parts:
        parts.append(f"FAIL: {first_error(case)[:140]}")
    return "; ".join(parts)


def _consume_details(phase: str, r: dict) -> str:
    if phase != "consume":
        return ""
    cpu = r.get("cpu") or {}
    disk = cpu.get("disk_read_mb") or 0
    # page-cache reads that went to the disk (see procstat)
    out = f" ({disk:.0f} MB from disk)" if disk >= 1 else ""
    out += _client_kernel_note(cpu)
    f = r.get("fetches")
    if f and f.get("fetch_requests"):
        # how the bytes came: a slow round with more, smaller
        # fetches differs from one with the same fetches, slower
        out += (f" [{f['fetch_requests']} fetches, "
                f"{f['rx_bytes'] / f['fetch_requests'] / 1e3:.0f} kB each]")
    return out


def _fmt_case(case: dict) -> str:
    return case_line(case, ("produce", "consume"), "7.1f", _consume_details, _first_error)


def run_session(t: Target, r: int, workloads: list[Workload], a, run_id: str) -> dict:
    """Start the target once, run every case of the round on it (a fresh
    topic each), record its memory, stop it."""
    session: dict = {"round": r, "cases": {}}
    t0 = time.monotonic()
    sampler = None
    try:
        bootstrap = t.start()
        session["bootstrap"] = bootstrap
        session["startup_s"] = round(time.monotonic() - t0, 2)
        print(f"  {t.name}: up on {bootstrap} in {session['startup_s']}s", flush=True)
        root = t.proc.pid if t.proc else None
        session["warmup"] = warm_up_groups(t, f"bench-{run_id}-warmup", a)
        if root:
            session["memory"] = {"after_start": tree_memory(root)}
            sampler = RssSampler(root).start()
        for i, wl in enumerate(workloads):
            topic = f"bench-{run_id}-{t.name}-r{r}-{i}"
            case = run_case(t, wl, a, topic)
            session["cases"][wl.case_id] = case
            for phase in ("create", "produce", "consume"):
                for w in (case.get(phase) or {}).get("warnings", []):
                    t.note(f"{phase}: {w} (first seen: {wl.case_id}, round {r + 1})", key=w[:24])
            print(f"  {t.name:8s} {wl.case_id:20s} {_fmt_case(case)}", flush=True)
        if root:
            session["memory"]["after_rows"] = tree_memory(root)
    except TargetError as e:
        print(f"  {t.name}: FAIL: {e}", flush=True)
        session["error"] = str(e)
    finally:
        if sampler is not None:
            session.setdefault("memory", {})["peak_rss_bytes"] = sampler.stop()
        t.stop()
    return session


def run_latency(t: Target, topic: str, rate: float, a) -> dict:
    """A subscribed consumer process, then (once it has its partition) a
    producer process at `rate` records/s; both must account for every record."""
    res: dict = {"topic": topic, "rate": rate}
    common = ["--bootstrap", t.bootstrap, "--topic", topic, "--rate", str(rate),
              "--warmup-s", str(a.latency_warmup_s), "--window-s", str(a.latency_window_s),
              "--record-size", "1024", "--acks", "1"]
    ready = t.workdir / f"{topic}.ready"
    err_c = t.workdir / f"{topic}-latency-consume.stderr"
    consumer = start_client([PYTHON, "-m", "bench.latency", "consume", *common,
                             "--ready-file", str(ready), "--join-timeout", str(a.start_timeout),
                             "--idle-timeout", str(a.idle_timeout)], err_c)
    while not ready.exists() and consumer.poll() is None:
        time.sleep(0.1)  # the consumer enforces its own join timeout
    if not ready.exists():
        res["consume"] = finish_client(consumer, err_c, 10, "latency-consume")
        res.update(ok=False, error=f"consumer: {res['consume'].get('error')}")
        return res
    produce_extra = ["--partition", "0"] if t.fixed_partitions is not None else []
    err_p = t.workdir / f"{topic}-latency-produce.stderr"
    send_s = a.latency_warmup_s + a.latency_window_s
    # While the producer runs (its start-up and final flush included): who
    # had the CPU. A producer or consumer starved by other work shows up as
    # latency, so the figure needs this next to it.
    cpu0 = cpu_snapshot(t.proc.pid if t.proc else None)
    res["produce"] = finish_client(
        start_client([PYTHON, "-m", "bench.latency", "produce", *common, *produce_extra,
                      "--timeout", str(a.phase_timeout)], err_p),
        err_p, send_s + a.phase_timeout + 60, "latency-produce")
    res["cpu"] = cpu_split(cpu0, cpu_snapshot(t.proc.pid if t.proc else None))
    if not res["produce"].get("ok"):
        kill_tree(consumer, grace=2)  # it would only wait out its idle timeout
        _children.discard(consumer)
        res.update(ok=False, error=f"producer: {res['produce'].get('error')}")
        return res
    res["consume"] = finish_client(consumer, err_c, a.idle_timeout + 60, "latency-consume")
    if not res["consume"].get("ok"):
        res.update(ok=False, error=f"consumer: {res['consume'].get('error')}")
        deleted = res["consume"].get("log_start_offsets")
        if t.keeps_mib_per_partition and deleted:
            # 5 MiB of batches is a fraction of a second of this stream:
            # the consumer must never lag more than that.
            stream_ms = t.keeps_mib_per_partition * MIB / (rate * 1024) * 1000
            res["na"] = (f"broker deleted {deleted} records before the consumer read them "
                         f"(keeps {t.keeps_mib_per_partition} MiB per partition: "
                         f"{stream_ms:.0f} ms of this stream before lz4)")
        return res
    res["ok"] = True
    return res


def stable_actor_pids(root: int, timeout: float, quiet: float = 3.0) -> set[int]:
    """The broker's ReplicaActor worker pids once that set has not changed
    for `quiet` seconds (a deleted topic's actors take a moment to exit)."""
    deadline = time.monotonic() + timeout
    pids = set(actor_processes(root, REPLICA_ACTOR_CLASS))
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = set(actor_processes(root, REPLICA_ACTOR_CLASS))
        if now != pids:
            pids, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return pids


def measure_idle_replicas(t: Target, a, topic: str) -> dict:
    """Create a topic of a.idle_partitions partitions, leave it idle for
    a.idle_settle_s, then read smaps_rollup of each `ray::ReplicaActor`
    process that appeared in the broker's process tree for it (Ray titles an
    actor's worker process after its class). Replica actors that existed
    before (__consumer_offsets' partitions) are not counted."""
    root = t.proc.pid
    existing = stable_actor_pids(root, 30)
    before = tree_memory(root)
    wl = Workload(1, 1024, a.idle_partitions, "1")
    c = run_phase("create", t.bootstrap, topic, wl, a, t.workdir)
    if not c.get("ok") or not c.get("created"):
        return {"error": f"create {topic}: {c.get('error') or c.get('note')}"}
    deadline = time.monotonic() + a.start_timeout
    new: list[int] = []
    while time.monotonic() < deadline:
        new = [p for p in actor_processes(root, REPLICA_ACTOR_CLASS) if p not in existing]
        if len(new) >= a.idle_partitions:
            break
        time.sleep(0.5)
    time.sleep(a.idle_settle_s)
    new = [p for p in actor_processes(root, REPLICA_ACTOR_CLASS) if p not in existing]
    procs = [m for m in (process_memory(p) for p in new) if m]
    after = tree_memory(root)
    out = summarize_idle_replicas(procs, a.idle_partitions, before, after)
    out.update(settle_s=a.idle_settle_s, other_replica_actors=len(existing),
               tree_before=before, tree_after=after, processes=procs,
               create_s=c.get("leaders_after_s"))
    return out


def run_latency_session(t: Target, lr: int, rate: float, a, run_id: str,
                        measure_idle: bool) -> dict:
    session: dict = {"round": lr}
    try:
        t.start()
        topic = f"bench-{run_id}-{t.name}-latency{lr}"
        c = run_phase("create", t.bootstrap, topic, Workload(1, 1024, 1, "1"), a, t.workdir)
        if not c.get("ok") or (t.fixed_partitions is None and not c.get("created")):
            session["latency"] = {"ok": False, "error": f"create: {c.get('error') or c.get('note')}"}
        else:
            session["latency"] = run_latency(t, topic, rate, a)
        lat = session["latency"]
        if lat.get("na"):
            print(f"  {t.name:8s} latency n/a: {lat['na']}", flush=True)
        elif lat.get("ok"):
            x = lat["consume"]["latency"]
            print(f"  {t.name:8s} latency p50 {x['p50_ms']:.1f} ms, p99 {x['p99_ms']:.1f} ms, "
                  f"max {x['max_ms']:.1f} ms over {x['count']} records "
                  f"(achieved {lat['produce']['achieved_rate']:.0f} rec/s)", flush=True)
            worst = sorted(lat["consume"].get("timeline", []), key=lambda b: -b["max_ms"])[:3]
            if worst:
                print(f"  {t.name:8s} worst seconds of the window: "
                      + ", ".join(f"s{b['s']} max {b['max_ms']:.0f} ms" for b in worst), flush=True)
        else:
            print(f"  {t.name:8s} latency FAIL: {lat.get('error')}", flush=True)
        if measure_idle and t.proc is not None:
            if t.deletes_topics:
                run_phase("delete", t.bootstrap, topic, Workload(1, 1024, 1, "1"), a, t.workdir)
            idle = session["idle_replicas"] = measure_idle_replicas(
                t, a, f"bench-{run_id}-{t.name}-idle")
            if "pss_median" in idle:
                print(f"  {t.name:8s} {idle['replica_processes']} idle replica actors: PSS median "
                      f"{idle['pss_median'] / MIB:.1f} MiB", flush=True)
            if idle.get("error"):
                print(f"  {t.name:8s} idle replicas: {idle['error']}", flush=True)
    except TargetError as e:
        print(f"  {t.name}: FAIL: {e}", flush=True)
        session["error"] = str(e)
        session.setdefault("latency", {"ok": False, "error": str(e)})
    finally:
        t.stop()
    return session


def rotated(items: list, k: int) -> list:
    """items rotated left by k: round k starts with a different target, so
    no target always runs first (or last) in a round."""
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]


# ---- matrix report
def _f(v, fmt: str, width: int) -> str:
    return f"{v:{width}{fmt}}" if isinstance(v, (int, float)) else f"{'n/a':>{width}s}"


def cpu_and_runs(cell: dict) -> str:
    """A summary cell's last columns: client, broker and other CPU %, then
    every round's MB/s."""
    return (f"{_f(cell['client_cpu_pct'], '.0f', 5)} {_f(cell['broker_cpu_pct'], '.0f', 5)} "
            f"{_f(cell['other_cpu_pct'], '.0f', 5)}  {cell['all_mb_s']}")


def print_table_head(hdr: str) -> None:
    print(hdr)
    print("-" * len(hdr))


def print_cell(head: str, cell: dict, figures, cut: int) -> None:
    """A table line of one summary cell: head (row, target, partitions),
    then figures(cell) if it has figures, else n/a or FAIL and why (its
    first `cut` characters)."""
    if cell.get("status") == "ok":
        print(f"{head} {figures(cell)}")
    elif cell.get("status") == "na":
        print(f"{head} {'n/a':>8s}  {cell['reason'][:cut]}")
    else:
        err = (cell.get("error") or "not run").splitlines()[0][:cut]
        print(f"{head} {'FAIL':>8s}  {err}")


def print_rows(doc: dict) -> None:
    """The throughput table: one line per (row, target)."""
    targets, summary = doc["config"]["targets"], doc["summary"]
    print()
    hdr = (f"{'row':24s} {'target':9s} {'parts':>5s} {'MB/s':>8s} {'records/s':>10s} "
           f"{'/' + BASELINE:>7s} {'best':>5s} {'cli%':>5s} {'brk%':>5s} {'oth%':>5s}  runs MB/s")
    print_table_head(hdr)
    footnotes = set()
    for row in doc["rows"]:
        label = row["row"]
        for name in targets:
            cell = summary[row["row"]].get(name, {})
            parts = cell.get("partitions")
            ptxt = str(parts) if parts is not None else "-"
            if name == "mock" and cell.get("status") == "ok":
                ptxt += "*"
                footnotes.add("mock")
            print_cell(f"{label:24s} {name:9s} {ptxt:>5s}", cell, lambda c: (
                f"{c['mb_s']:8.1f} {c['records_s']:10.0f} {_f(c['ratio'], '.2f', 7)} "
                f"{_f(c['best_ratio'], '.2f', 5)} {cpu_and_runs(c)}"), 90)
            label = ""
    print("parts = partitions the topic had; cli/brk/oth% = CPU during the timed window in % "
          "of ONE core: client process, broker process tree, everything else.")
    if "mock" in footnotes:
        print("* mock: no CreateTopics, every topic is auto-created with 4 partitions; its "
              "p1 rows write only partition 0, its p6 rows use all 4.")


def print_matrix_report(doc: dict) -> None:
    cfg, machine, summary = doc["config"], doc["machine"], doc["summary"]
    targets = cfg["targets"]
    print()
    print(f"Matrix: {cfg['row_mib']:g} MiB of record values per row (1 KiB: "
          f"{doc['rows'][0]['records']} records, 16 KiB: {doc['rows'][-1]['records']}), keyed, "
          f"lz4, linger.ms=5, batch.size=1000000; median of {cfg['repeat']} interleaved "
          f"round(s); MB = 10^6 bytes of record values; /{BASELINE} = this target's median "
          f"MB/s / {BASELINE}'s (best = same for each side's best round)")
    print(f"Machine: {machine['cpus_usable']} usable cores shared by client and broker; "
          f"load average at start {machine['loadavg_at_start']}, at end "
          f"{machine.get('loadavg_at_end')}")
    if cfg.get("latency_only"):
        print("(--latency-only: no throughput rows were run)")
    else:
        print_rows(doc)

    lat = doc.get("latency") or {}
    if lat.get("rate"):
        print()
        print(f"End-to-end latency at {lat['rate']:.0f} records/s ({lat['rate'] * 1024 / 1e6:.1f} "
              f"MB/s; {lat['rate_source']}): 1 KiB, 1 partition, acks=1, lz4, linger.ms=5, "
              f"subscribed consumer; {cfg['latency_window_s']:g} s window after "
              f"{cfg['latency_warmup_s']:g} s warm-up")
        print(f"{'target':9s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99.9 ms':>9s} {'max ms':>8s} "
              f"{'p99/' + BASELINE:>10s} {'sent rec/s':>10s} {'lag max ms':>10s} "
              f"{'cli%':>5s} {'brk%':>5s} {'oth%':>5s}")
        base = lat["summary"].get(BASELINE, {})
        for name in targets:
            x = lat["summary"].get(name, {})
            if x.get("ok"):
                rp99 = ratio(x["p99_ms"], base.get("p99_ms")) if base.get("ok") else None
                print(f"{name:9s} {x['p50_ms']:8.2f} {x['p99_ms']:8.2f} {x['p999_ms']:9.2f} "
                      f"{x['max_ms']:8.2f} {_f(rp99, '.2f', 10)} {x['achieved_rate']:10.0f} "
                      f"{x['schedule_lag_max_ms']:10.1f} {_f(x.get('clients_cpu_pct'), '.0f', 5)} "
                      f"{_f(x.get('broker_cpu_pct'), '.0f', 5)} {_f(x.get('other_cpu_pct'), '.0f', 5)}")
            elif x.get("na"):
                print(f"{name:9s} n/a: {x['na']}")
            else:
                print(f"{name:9s} FAIL: {(x.get('error') or 'not run').splitlines()[0][:100]}")
        print("lag max = how far the producer's worst burst went out behind its schedule "
              "(a producer that cannot keep the rate shows here); cli/brk/oth% = CPU while "
              "the producer ran: both client processes, broker tree, everything else.")
    elif lat.get("skipped"):
        print(f"\nEnd-to-end latency: not run ({lat['skipped']})")

    mem = doc.get("memory") or {}
    if mem:
        print()
        print(f"Broker memory (MiB; whole process tree the harness started)")
        print(f"{'target':9s} {'RSS after rows':>14s} {'PSS after rows':>14s} {'peak RSS':>9s} "
              f"{'PSS at start':>12s} {'procs':>5s}")
        for name in targets:
            m = mem.get(name) or {}
            if not m:
                print(f"{name:9s} n/a")
                continue
            mib = lambda v: v / MIB if v is not None else None
            print(f"{name:9s} {_f(mib(m['rss_after_rows']), '.0f', 14)} "
                  f"{_f(mib(m['pss_after_rows']), '.0f', 14)} {_f(mib(m['peak_rss']), '.0f', 9)} "
                  f"{_f(mib(m['pss_after_start']), '.0f', 12)} {m['processes']:5.0f}")
        print("RSS counts shared pages once per process (Ray's workers share much); PSS "
              "splits them, so the PSS sum is the tree's real footprint. peak RSS: sampled "
              "every second during the rows.")
    idle = doc.get("idle_replicas")
    if idle:
        print()
        if "pss_median" in idle:
            grow = idle.get("tree_pss_growth_per_partition")
            print(f"raykafka idle replica actors: {idle['partitions']} partitions -> "
                  f"{idle['replica_processes']} ray::{REPLICA_ACTOR_CLASS} processes after "
                  f"{idle['settle_s']:g} s idle; per process PSS median "
                  f"{idle['pss_median'] / MIB:.1f} MiB (min {idle['pss_min'] / MIB:.1f}, max "
                  f"{idle['pss_max'] / MIB:.1f}), RSS {idle['rss_median'] / MIB:.1f}, USS "
                  f"{idle['uss_median'] / MIB:.1f}; whole tree PSS "
                  + (f"+{grow / MIB:.1f} MiB per partition" if grow is not None else "n/a"))
        if idle.get("error"):
            print(f"raykafka idle replica actors: {idle['error']}")

    print()
    print(f"{'issue 8 target':46s} {'measured':>10s} {'goal':>12s}  met")
    for g in doc.get("goals", []):
        v = g["value"]
        shown = f"{v:.2f}{g['unit']}" if g["unit"] == "x" and v is not None else \
            (f"{v:.1f} {g['unit']}" if v is not None else "n/a")
        met = {True: "yes", False: "NO", None: "n/a"}[g["met"]]
        print(f"{g['goal']:46s} {shown:>10s} {g['target']:>12s}  {met}")
    print("(reported, not asserted: the exit status only reflects correctness)")


def main_matrix(a, machine: dict, run_id: str, targets: list[Target], workroot: Path) -> int:
    workloads = matrix_workloads(a.row_mib)
    rows = matrix_rows(workloads)
    sessions: dict[str, list[dict]] = {t.name: [] for t in targets}
    latency_sessions: dict[str, list[dict]] = {t.name: [] for t in targets}
    doc: dict = {"run_id": run_id, "mode": "matrix", "machine": machine,
                 "config": config_of(a), "rows": rows, "workdir": str(workroot)}
    rate, rate_source = None, None
    with StopsEverything(targets) as run:
        for r in range(0 if a.latency_only else a.repeat):
            print(f"[round {r + 1}/{a.repeat}]", flush=True)
            for t in rotated(targets, r):
                sessions[t.name].append(run_session(t, r, workloads, a, run_id))
        summary = summarize_matrix(rows, sessions)
        rate, rate_source = latency_rate(summary, a.latency_rate)
        if rate and a.latency_rounds > 0:
            print(f"[latency: {rate:.0f} records/s, {rate_source}]", flush=True)
            for lr in range(a.latency_rounds):
                for t in rotated(targets, lr):
                    latency_sessions[t.name].append(run_latency_session(
                        t, lr, rate, a, run_id,
                        measure_idle=(t.name == "raykafka" and lr == 0 and a.idle_partitions > 0)))
    interrupted = run.interrupted
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize_matrix(rows, sessions)
    if rate is None:
        rate, rate_source = latency_rate(summary, a.latency_rate)
    lat_runs = {n: [s["latency"] for s in ss if "latency" in s] for n, ss in latency_sessions.items()}
    doc["latency"] = ({"rate": rate, "rate_source": rate_source,
                       "summary": {n: summarize_latency(rs) for n, rs in lat_runs.items()},
                       "runs": lat_runs}
                      if rate and a.latency_rounds > 0 else
                      {"skipped": rate_source if not rate else "--latency-rounds 0"})
    idle = next((s["idle_replicas"] for s in latency_sessions.get("raykafka", [])
                 if "idle_replicas" in s), None)
    doc.update(summary=summary, idle_replicas=idle, interrupted=interrupted,
               memory={n: summarize_memory(ss) for n, ss in sessions.items()},
               goals=goal_report(summary, doc["latency"].get("summary", {}), idle),
               sessions=sessions, latency_sessions=latency_sessions,
               notes={t.name: t.notes for t in targets},
               broker_logs={t.name: t.logs for t in targets})
    path = a.output or RESULTS / f"matrix-{run_id}.json"
    save_results(doc, path, indent=1)
    print_matrix_report(doc)
    end_report(interrupted, targets, summary,
               "{cells} cell(s) above " + f"{OTHER_CPU_WARN:.0f}%: ratios are noisy, prefer "
               "the best-round column or rerun.", path, workroot)
    failed = interrupted or (not a.latency_only and any(
        c["status"] == "fail" for cells in summary.values() for c in cells.values()))
    failed |= any(s.get("ok") is False for s in doc["latency"].get("summary", {}).values())
    failed |= bool(idle and idle.get("error"))
    return 1 if failed else 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Produce/consume throughput of raykafka vs Tansu vs librdkafka mock.")
    ap.add_argument("--matrix", action="store_true",
                    help="run issue 8's matrix (produce/consume rows, latency, memory) "
                         "instead of one workload")
    ap.add_argument("--quick", action="store_true",
                    help="matrix: small rows (--row-mib 16), 1 round, short latency "
                         "window: a few minutes in all")
    ap.add_argument("--records", type=int, default=200000, help="single workload only")
    ap.add_argument("--record-size", type=int, default=1024, help="single workload only")
    ap.add_argument("--partitions", type=int, default=3, help="single workload only")
    ap.add_argument("--targets", default="raykafka,tansu,mock",
                    help="comma-separated subset of raykafka,tansu,mock")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"],
                    help="single workload only")
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds (fresh topic each); the median is reported "
                         "(default 3; 1 with --quick)")
    ap.add_argument("--row-mib", type=float, default=None,
                    help="matrix: MiB of record values per row (default 192; 16 with --quick)")
    ap.add_argument("--latency-rate", type=float, default=None,
                    help="matrix: records/s for the latency phase (default: half of "
                         "raykafka's median records/s in the row " + repr(PEAK_ROW) + ")")
    ap.add_argument("--latency-warmup-s", type=float, default=None,
                    help="matrix: seconds of warm-up before the latency window (5; 2 quick)")
    ap.add_argument("--latency-window-s", type=float, default=None,
                    help="matrix: seconds of the steady latency window (15; 5 quick)")
    ap.add_argument("--latency-only", action="store_true",
                    help="matrix: skip the throughput rows, run only latency and the "
                         "idle-replica measurement (needs --latency-rate)")
    ap.add_argument("--latency-rounds", type=int, default=1,
                    help="matrix: latency rounds per target, interleaved (0: skip latency "
                         "and the idle-replica measurement)")
    ap.add_argument("--idle-partitions", type=int, default=20,
                    help="matrix: partitions of the idle topic whose raykafka replica "
                         "actors are measured (0: skip)")
    ap.add_argument("--idle-settle-s", type=float, default=None,
                    help="matrix: seconds the idle replicas sit before their PSS is read "
                         "(10; 5 quick)")
    add_raykafka_options(ap)
    ap.add_argument("--start-timeout", type=float, default=180.0,
                    help="seconds to wait for a broker to become ready (tansu's first run "
                         "pip-installs it)")
    ap.add_argument("--phase-timeout", type=float, default=60.0,
                    help="produce: a record not acknowledged this many seconds after "
                         "produce() fails (message.timeout.ms), and flush() waits at "
                         "most this long; the client process is killed 60 s later")
    ap.add_argument("--idle-timeout", type=float, default=30.0,
                    help="consume gives up (FAIL) after this long without a record")
    ap.add_argument("--output", type=Path, help="JSON result path (default bench/results/<ts>.json)")
    a = ap.parse_args(argv)
    a.targets = parse_targets(ap, a.targets)
    quick = a.matrix and a.quick
    for key, full, small in (("repeat", 3, 1), ("row_mib", 192.0, 16.0),
                             ("latency_warmup_s", 5.0, 2.0), ("latency_window_s", 15.0, 5.0),
                             ("idle_settle_s", 10.0, 5.0)):
        if getattr(a, key) is None:
            setattr(a, key, small if quick else full)
    if a.records <= 0 or a.record_size <= 0 or a.partitions <= 0 or a.repeat <= 0:
        ap.error("--records, --record-size, --partitions, --repeat must be positive")
    if a.row_mib <= 0 or a.latency_window_s <= 0 or a.latency_warmup_s < 0 \
            or a.latency_rounds < 0 or a.idle_partitions < 0 or a.idle_settle_s < 0:
        ap.error("--row-mib and --latency-window-s must be positive, the other matrix "
                 "options non-negative")
    if a.latency_rate is not None and a.latency_rate <= 0:
        ap.error("--latency-rate must be positive")
    if a.latency_only and not (a.matrix and a.latency_rate):
        ap.error("--latency-only needs --matrix and --latency-rate")
    return a


def add_raykafka_options(ap: argparse.ArgumentParser) -> None:
    """--raykafka-bootstrap and --raykafka-cmd: which raykafka RaykafkaTarget runs."""
    ap.add_argument("--raykafka-bootstrap", metavar="HOST:PORT",
                    help="benchmark an already running raykafka instead of starting one")
    ap.add_argument("--raykafka-cmd", metavar="CMD",
                    help="command prefix that starts raykafka (default .venv/bin/raykafka); "
                         "'start --data-dir ... --override listeners=...' is appended")


def parse_targets(ap: argparse.ArgumentParser, text: str) -> list[str]:
    """The targets of a comma-separated --targets (an argparse error if one is unknown)."""
    targets = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in targets if t not in ALL_TARGETS]
    if bad or not targets:
        ap.error(f"unknown target(s) {bad}; choose from {','.join(ALL_TARGETS)}")
    return targets


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def begin_run() -> tuple[dict, str]:
    """Ctrl-C, SIGTERM and SIGHUP made KeyboardInterrupt (a run then stops
    what it started); returns the machine (with its load average now) and
    the run id."""
    # Explicit: a shell that starts us in the background ignores SIGINT, and
    # Python then never installs its KeyboardInterrupt handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)
    machine = machine_info()
    machine["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    return machine, time.strftime("%Y%m%d-%H%M%S")


def warn_if_loaded(machine: dict) -> None:
    load = machine["loadavg_at_start"][0]
    if load > 0.5:
        print(f"warning: 1-minute load average is {load:.2f} before the run: other "
              f"work shares these cores, figures will be noisy", flush=True)


def standard_targets(a) -> dict:
    """name -> (workdir -> Target) of the three targets."""
    return {
        "raykafka": lambda wd: RaykafkaTarget(wd, a.start_timeout,
                                              a.raykafka_bootstrap, a.raykafka_cmd),
        "tansu": lambda wd: TansuTarget(wd, a.start_timeout),
        "mock": lambda wd: MockTarget(wd, a.start_timeout),
    }


def make_targets(names: list[str], workroot: Path, makers: dict) -> list[Target]:
    """The targets named, each with its own work directory under workroot."""
    targets = []
    for name in names:
        (workroot / name).mkdir()
        targets.append(makers[name](workroot / name))
    return targets


class StopsEverything:
    """``with StopsEverything(targets) as run:`` a KeyboardInterrupt (Ctrl-C,
    SIGTERM, SIGHUP) ends the block and sets run.interrupted; either way every
    client process and broker this run started is stopped after it."""

    def __init__(self, targets: list[Target]):
        self.targets = targets
        self.interrupted = False

    def __enter__(self) -> "StopsEverything":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.interrupted = True
            print("\ninterrupted; stopping brokers and clients", file=sys.stderr)
        _cleanup(self.targets)
        return self.interrupted


def config_of(a) -> dict:
    """The run's options as JSON values."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}


def save_results(doc: dict, path: Path, indent: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=indent, default=str))


def print_notes(targets: list[Target]) -> None:
    for t in targets:
        for note in t.notes:
            print(f"note [{t.name}]: {note}")


def end_report(interrupted: bool, targets: list[Target], summary: dict, advice: str,
               path: Path, workroot: Path) -> None:
    """What follows a run's table: whether it was interrupted, the targets'
    notes, a warning if other processes disturbed timed windows (then
    `advice`, where {cells} is how many cells), where the results are."""
    if interrupted:
        print("INTERRUPTED: only what completed before the interrupt is shown")
    print_notes(targets)
    disturbed = [(label, n, c.get("other_cpu_pct")) for label, cells in summary.items()
                 for n, c in cells.items() if c.get("status") == "ok"
                 and (c.get("other_cpu_pct") or 0) > OTHER_CPU_WARN]
    if disturbed:
        worst = max(disturbed, key=lambda x: x[2])
        print(f"warning: other processes used up to {worst[2]:.0f}% of a core during timed "
              f"windows ({worst[1]}, {worst[0]}); " + advice.format(cells=len(disturbed)))
    print(f"\nresults: {path}  (broker/client logs: {workroot})")


def _cleanup(targets: list[Target]) -> None:
    """Stop every client process and broker this run started."""
    # A second Ctrl-C must not abort the cleanup half way.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    for p in list(_children):
        kill_tree(p, grace=2)
    for t in targets:
        t.stop()


def main(argv=None) -> int:
    a = parse_args(argv)
    machine, run_id = begin_run()
    print(f"raykafka bench {run_id}: targets={','.join(a.targets)}; "
          f"{machine['cpus']} cores ({machine['cpus_usable']} usable) shared by "
          f"client and broker", flush=True)
    warn_if_loaded(machine)
    if a.matrix:
        print(f"matrix: {a.row_mib:g} MiB per row, {a.repeat} round(s), latency "
              f"{a.latency_warmup_s:g}+{a.latency_window_s:g} s x {a.latency_rounds}, "
              f"{a.idle_partitions} idle partitions", flush=True)
    workroot = Path(tempfile.mkdtemp(prefix=f"raykafka-bench-{run_id}-"))
    targets = make_targets(a.targets, workroot, standard_targets(a))
    if a.matrix:
        return main_matrix(a, machine, run_id, targets, workroot)
    results: dict[str, dict] = {t.name: {"target": t.name, "runs": [], "notes": t.notes,
                                         "broker_logs": t.logs} for t in targets}
    with StopsEverything(targets) as run:
        # Rounds are interleaved (round r runs every target once, one broker at
        # a time) so drifting background load hits all targets alike.
        for r in range(a.repeat):
            print(f"[round {r + 1}/{a.repeat}]", flush=True)
            for t in targets:
                res = results[t.name]
                if "error" in res:
                    continue  # could not start before; do not retry
                try:
                    res["runs"].append(run_round(t, r, a, run_id))
                except TargetError as e:
                    print(f"  {t.name}: FAIL: {e}", flush=True)
                    res["error"] = str(e)
    interrupted = run.interrupted

    summary = {n: summarize(r) for n, r in results.items()}
    ratios = {}
    if "raykafka" in summary:
        for peer in PEERS:
            if peer in summary:
                ratios[peer] = {}
                for phase in ("produce", "consume"):
                    rk, pr = summary["raykafka"][phase], summary[peer][phase]
                    ok = rk["ok"] and pr["ok"]
                    ratios[peer][phase] = rk["mb_s"] / pr["mb_s"] if ok else None
                    ratios[peer][phase + "_best"] = (rk["best_mb_s"] / pr["best_mb_s"]
                                                     if ok else None)
    print_report(summary, ratios, a, machine)
    if interrupted:
        print("INTERRUPTED: only the rounds completed before the interrupt are shown")
    print_notes(targets)
    busy = [(n, p, s[p].get("other_cpu_pct")) for n, s in summary.items()
            for p in ("produce", "consume") if s[p].get("ok")]
    busy = [(n, p, v) for n, p, v in busy if v is not None and v > OTHER_CPU_WARN]
    if busy:
        worst = max(busy, key=lambda x: x[2])
        print(f"warning: other processes used up to {worst[2]:.0f}% of a core during timed "
              f"windows ({worst[0]} {worst[1]}); on this machine even the same broker "
              f"measured twice can differ by 30% or more then. Ratios are unreliable: "
              f"rerun when the machine is quiet and/or with a larger --repeat.")

    doc = {"run_id": run_id, "interrupted": interrupted, "machine": machine,
           "config": config_of(a), "summary": summary, "ratios": ratios, "targets": results,
           "workdir": str(workroot)}
    path = a.output or RESULTS / f"{run_id}.json"
    save_results(doc, path, indent=2)
    print(f"\nresults: {path}  (broker/client logs: {workroot})")
    failed = interrupted or any(not s[p]["ok"] for s in summary.values()
                                for p in ("produce", "consume"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
