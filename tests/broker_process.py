"""Run `raykafka start` as a real subprocess, the way users run it, for tests.

The broker's process tree (Ray's GCS, raylet and workers, the embedded
ZooKeeper) is tracked by pid so a test can kill -9 all of it, and so teardown
only ever ends processes this helper started.
"""
from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
RAYKAFKA = REPO / ".venv" / "bin" / "raykafka"
READY = re.compile(r"raykafka ready on (\S+):(\d+)")


def broker_env(changes: dict[str, str | None] | None = None) -> dict[str, str]:
    """The test brokers' environment: a throwaway Ray cluster without token auth,
    unless ``changes`` says otherwise (a None value removes the variable)."""
    env = dict(os.environ)
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
               PYTHONUNBUFFERED="1")
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, log_name: str = "broker.log",
                 extra_args: list[str] | None = None, env_changes: dict[str, str | None] | None = None):
        self.extra_args = list(extra_args or [])
        self.env_changes = dict(env_changes or {})
        self.data_dir = Path(data_dir)
        # As Kafka's own integration tests (TestUtils): a group's first join
        # completes at once, not after group.initial.rebalance.delay.ms' 3 s;
        # tests of the delay itself set it.
        self.overrides = {"listeners": "PLAINTEXT://127.0.0.1:0", "zookeeper.session.timeout.ms": "6000",
                          "group.initial.rebalance.delay.ms": "0", **(overrides or {})}
        self.log_path = self.data_dir.parent / log_name
        self.proc: subprocess.Popen | None = None
        self.host: str | None = None
        self.port: int | None = None
        self._known: dict[int, psutil.Process] = {}
        self._lines: queue.Queue = queue.Queue()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 180) -> "BrokerProcess":
        args = [str(RAYKAFKA), "start", "--data-dir", str(self.data_dir), *self.extra_args]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log_file, env=broker_env(self.env_changes),
                                     cwd=REPO)
        threading.Thread(target=self._pump, args=(self.proc.stdout, log_file), daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._track_tree()
            try:
                line = self._lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"broker exited with {self.proc.returncode}; see {self.log_path}:\n"
                                       + self.log_tail())
                continue
            match = READY.search(line)
            if match:
                self.host, self.port = match.group(1), int(match.group(2))
                self._track_tree()
                return self
        self.kill9()
        raise RuntimeError(f"broker not ready in {timeout_s}s; see {self.log_path}:\n" + self.log_tail())

    def _pump(self, stream, log_file) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            log_file.write(raw)
            log_file.flush()
            self._lines.put(line)

    def nodes(self) -> list[dict]:
        """The brokers this process runs (from <data-dir>/nodes.json)."""
        import json

        return json.loads((self.data_dir / "nodes.json").read_text())

    @property
    def bootstrap_all(self) -> str:
        return ",".join(f"{n['host']}:{n['port']}" for n in self.nodes())

    def kill_node(self, broker_id: int, timeout_s: float = 15) -> float:
        """kill -9 one Ray node (its raylet and every worker under it): a machine
        crash. Returns once all of them are gone (or zombies), at most timeout_s;
        -> the monotonic time of the kill."""
        node = next(n for n in self.nodes() if n["broker_id"] == broker_id)
        raylet = psutil.Process(node["raylet_pid"])
        victims = [raylet, *raylet.children(recursive=True)]
        edge = node.get("edge_pid")
        if edge and psutil.pid_exists(edge) and edge not in {v.pid for v in victims}:
            victims.append(psutil.Process(edge))
        killed_at = time.monotonic()
        for p in victims:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        wait_gone(victims, timeout_s)
        return killed_at

    def revive(self, timeout_s: float = 120) -> None:
        """SIGHUP: the CLI restarts brokers whose Ray node died (same id, same log dir)."""
        dead = [n["broker_id"] for n in self.nodes() if not _pid_alive(n.get("raylet_pid"))]
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            nodes = {n["broker_id"]: n for n in self.nodes()}
            if all(_pid_alive(nodes[b].get("raylet_pid")) for b in dead):
                self._track_tree()
                return
            time.sleep(0.5)
        raise RuntimeError(f"brokers {dead} not revived in {timeout_s}s:\n" + self.log_tail())

    def add_node(self, timeout_s: float = 180) -> dict:
        """SIGUSR1: the CLI adds a broker on a new Ray node (a machine joining); -> its entry."""
        before = {n["broker_id"] for n in self.nodes()}
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fresh = [n for n in self.nodes() if n["broker_id"] not in before]
            if fresh:
                self._track_tree()
                return fresh[0]
            time.sleep(0.5)
        raise RuntimeError(f"no node added in {timeout_s}s:\n" + self.log_tail())

    def cpu_seconds(self) -> float:
        """CPU time used so far by the whole broker tree (user + system)."""
        total = 0.0
        for p in self.tree():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_for_log(self, text: str, timeout_s: float = 30, lines: int = 3000) -> bool:
        """Whether `text` shows in the last `lines` of the log within `timeout_s`.
        Actors' log lines reach it through Ray's log monitor, asynchronously."""
        deadline = time.monotonic() + timeout_s
        while text not in self.log_tail(lines):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def _track_tree(self) -> None:
        """Remember every descendant, so it can be killed even after reparenting."""
        if self.proc is None:
            return
        try:
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                self._known.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass

    def tree(self) -> list[psutil.Process]:
        self._track_tree()
        return [p for p in self._known.values() if _alive(p)]

    def kill9(self) -> None:
        """kill -9 the broker and every process it started (Ray workers, ZooKeeper)."""
        procs = self.tree()
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        wait_gone(procs, timeout_s=15)
        if self.proc is not None:
            self.proc.wait(timeout=15)
        self._known.clear()

    def stop(self, timeout_s: float = 90) -> int | None:
        """SIGTERM (clean shutdown), then kill -9 whatever is left."""
        if self.proc is None:
            return None
        self._track_tree()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        code = self.proc.poll()
        leftovers = [p for p in self._known.values() if _alive(p)]
        if leftovers:
            # Ray's workers exit on their own once their raylet is gone: give them
            # 2 s (returning as soon as they have), then kill -9 what is left.
            wait_gone(leftovers, timeout_s=2)
            self.kill9()
        self._known.clear()
        return code

    def rss_of_tree_mb(self) -> float:
        total = 0
        for p in self.tree():
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total / 2**20


def wait_gone(procs: list[psutil.Process], timeout_s: float) -> None:
    """Return once every process in ``procs`` has exited or is a zombie, or at
    the timeout. Not psutil.wait_procs: a killed process whose parent is still
    running (a raylet under the CLI's ray.cluster_utils) stays a zombie until
    that parent reaps it, and wait_procs counts a zombie as running: each node
    kill waited out its full 15 s (seen in test_replication's failover)."""
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)


def _pid_alive(pid) -> bool:
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


if __name__ == "__main__":  # manual use: python -m tests.broker_process DIR
    b = BrokerProcess(Path(sys.argv[1])).start()
    print(b.bootstrap)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        b.stop()


def replica_processes(broker: BrokerProcess) -> int:
    """ReplicaActor processes alive under `broker` (hibernation tests count them against the live limit)."""
    count = 0
    for p in broker.tree():
        try:
            if "ReplicaActor" in " ".join(p.cmdline()):
                count += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return count
