"""Side-by-side throughput benchmark: raykafka vs Tansu vs librdkafka's mock.

    .venv/bin/python -m bench.run [--records N] [--record-size B]
        [--partitions P] [--targets raykafka,tansu,mock] [--acks 1|all]
        [--repeat R] [--raykafka-bootstrap HOST:PORT]

For every target the harness starts the broker itself (own process group,
killed at the end, also on Ctrl-C / errors), then per repeat: creates a fresh
topic (AdminClient; falls back to auto-create and says so), runs the produce
phase and then the consume phase, each in a fresh client process
(bench.client). It prints MB/s, records/s and raykafka/peer ratios (medians
over repeats) and writes everything as JSON under bench/results/.

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
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is as good as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
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


def run_phase(phase: str, bootstrap: str, topic: str, a, log_dir: Path,
              broker_pid: int | None = None) -> dict:
    cmd = [PYTHON, "-m", "bench.client", phase, "--bootstrap", bootstrap,
           "--broker-pid", str(broker_pid or 0),
           "--topic", topic, "--partitions", str(a.partitions),
           "--records", str(a.records), "--record-size", str(a.record_size),
           "--acks", str(a.acks), "--timeout", str(a.phase_timeout),
           "--idle-timeout", str(a.idle_timeout)]
    err_log = log_dir / f"{topic}-{phase}.stderr"
    with open(err_log, "w") as err:
        p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=err,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        _children.add(p)
        limit = a.phase_timeout + 60
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
        res = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = err_log.read_text(errors="replace")[-2000:]
        res = {"ok": False, "phase": phase,
               "error": f"client exited {p.returncode} without a result; stderr:\n{tail}"}
    if res.get("ok") and res.get("elapsed_s", 0) > 0:
        res["mb_s"] = res["bytes"] / res["elapsed_s"] / 1e6
        res["records_s"] = res["records"] / res["elapsed_s"]
    return res


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
        c = run["create"] = run_phase("create", bootstrap, topic, a, t.workdir)
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
            res = run_phase(phase, bootstrap, topic, a, t.workdir,
                            t.proc.pid if t.proc else None)
            res["loadavg_1m_before"] = round(load, 2)
            run[phase] = res
            cpu = res.get("cpu") or {}
            print(f"  {t.name} #{r} {phase:8s}" + (
                f"{res['mb_s']:8.1f} MB/s {res['records_s']:10.0f} rec/s "
                f"({res['elapsed_s']:.2f}s; CPU% client {cpu.get('client_cpu_pct')} "
                f"broker {cpu.get('broker_cpu_pct')} other {cpu.get('other_cpu_pct')})"
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
    print(hdr)
    print("-" * len(hdr))
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


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Produce/consume throughput of raykafka vs Tansu vs librdkafka mock.")
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--targets", default="raykafka,tansu,mock",
                    help="comma-separated subset of raykafka,tansu,mock")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per target (fresh topic each); the median is reported")
    ap.add_argument("--raykafka-bootstrap", metavar="HOST:PORT",
                    help="benchmark an already running raykafka instead of starting one")
    ap.add_argument("--raykafka-cmd", metavar="CMD",
                    help="command prefix that starts raykafka (default .venv/bin/raykafka); "
                         "'start --data-dir ... --override listeners=...' is appended")
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
    a.targets = [t.strip() for t in a.targets.split(",") if t.strip()]
    bad = [t for t in a.targets if t not in ALL_TARGETS]
    if bad or not a.targets:
        ap.error(f"unknown target(s) {bad}; choose from {','.join(ALL_TARGETS)}")
    if a.records <= 0 or a.record_size <= 0 or a.partitions <= 0 or a.repeat <= 0:
        ap.error("--records, --record-size, --partitions, --repeat must be positive")
    return a


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    a = parse_args(argv)
    # Explicit: a shell that starts us in the background ignores SIGINT, and
    # Python then never installs its KeyboardInterrupt handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)
    machine = machine_info()
    run_id = time.strftime("%Y%m%d-%H%M%S")
    print(f"raykafka bench {run_id}: targets={','.join(a.targets)}; "
          f"{machine['cpus']} cores ({machine['cpus_usable']} usable) shared by "
          f"client and broker", flush=True)
    load = os.getloadavg()
    machine["loadavg_at_start"] = [round(x, 2) for x in load]
    if load[0] > 0.5:
        print(f"warning: 1-minute load average is {load[0]:.2f} before the run: other "
              f"work shares these cores, figures will be noisy", flush=True)
    workroot = Path(tempfile.mkdtemp(prefix=f"raykafka-bench-{run_id}-"))
    makers = {
        "raykafka": lambda wd: RaykafkaTarget(wd, a.start_timeout,
                                              a.raykafka_bootstrap, a.raykafka_cmd),
        "tansu": lambda wd: TansuTarget(wd, a.start_timeout),
        "mock": lambda wd: MockTarget(wd, a.start_timeout),
    }
    targets: list[Target] = []
    for name in a.targets:
        (workroot / name).mkdir()
        targets.append(makers[name](workroot / name))
    results: dict[str, dict] = {t.name: {"target": t.name, "runs": [], "notes": t.notes,
                                         "broker_logs": t.logs} for t in targets}
    interrupted = False
    try:
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
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; stopping brokers and clients", file=sys.stderr)
    finally:
        # A second Ctrl-C must not abort the cleanup half way.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for p in list(_children):
            kill_tree(p, grace=2)
        for t in targets:
            t.stop()

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
    for n, r in results.items():
        for note in r.get("notes", []):
            print(f"note [{n}]: {note}")
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
           "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
           "summary": summary, "ratios": ratios, "targets": results,
           "workdir": str(workroot)}
    path = a.output or RESULTS / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"\nresults: {path}  (broker/client logs: {workroot})")
    failed = interrupted or any(not s[p]["ok"] for s in summary.values()
                                for p in ("produce", "consume"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
