"""The brokers a benchmark runs against (raykafka, Tansu, librdkafka's mock
cluster), each started in its own process group and killed with all its
descendants, and the process helpers they use (bench.run)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
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
