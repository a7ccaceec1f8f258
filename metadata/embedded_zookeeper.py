"""A standalone ZooKeeper server run as a child process of the caller.

Used by single-machine deployments and by tests: the broker process starts it,
points its KafkaZkClient at `connect_string`, and stops it on shutdown. It runs
Debian's `zookeeper` package (3.8) with the system Java; nothing is downloaded.

The child stays in the caller's process group, so killing the broker's process
tree also kills ZooKeeper; `stop()` itself only ever signals the pid it started.
"""
from __future__ import annotations

import atexit
import logging
import os
import random
import shutil
import subprocess
import threading
import time
import weakref
import zipfile
from pathlib import Path

from kazoo.client import KazooClient

from core.processes import pid_alive

log = logging.getLogger(__name__)

DEBIAN_JAVA_DIR = Path("/usr/share/java")
DEBIAN_ZOOKEEPER_JAR = DEBIAN_JAVA_DIR / "zookeeper.jar"
# ZooKeeper logs through SLF4J; without a binding on the classpath it logs nothing.
# slf4j-simple (Debian's libslf4j-java, a dependency of `zookeeper`) writes to
# stdout, which goes to zookeeper.log, and needs no config file.
DEBIAN_SLF4J_SIMPLE_JAR = DEBIAN_JAVA_DIR / "slf4j-simple.jar"
# Without these two the server cannot even load its main class. The rest of the
# jar manifest's Class-Path (jetty, jackson, netty...) is only needed by the admin
# server and the Netty transport, which stay off.
REQUIRED_SIBLING_JARS = ("zookeeper-jute.jar", "slf4j-api.jar")
SERVER_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

CONFIG_FILE_NAME = "zoo.cfg"
LOG_FILE_NAME = "zookeeper.log"
PORT_FILE_NAME = "zookeeper.port"
PID_FILE_NAME = "zookeeper.pid"
DATA_SUBDIR = "data"

# Auto-chosen ports come from below Linux's default ephemeral range (32768+), so
# they do not collide with the local ends of outgoing connections.
AUTO_PORT_RANGE = (20000, 32000)
# How many fresh ports to try when an auto-chosen one turns out to be taken.
AUTO_PORT_ATTEMPTS = 5
LOG_TAIL_LINES = 40
# /proc/net/tcp states that keep a port busy: ESTABLISHED, SYN_SENT, SYN_RECV, LISTEN.
_PORT_HOLDING_STATES = frozenset({"01", "02", "03", "0A"})


class ZooKeeperError(RuntimeError):
    """Base class of the embedded server's errors."""


class ZooKeeperNotInstalledError(ZooKeeperError):
    """Java or the ZooKeeper jars are missing; the message names the apt package."""


class ZooKeeperStartError(ZooKeeperError):
    """The server exited or did not become ready; the message carries the log tail."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(f"{message}\n--- last lines of the ZooKeeper log ---\n{log_tail}" if log_tail else message)
        self.log_tail = log_tail


class ZooKeeperAlreadyRunningError(ZooKeeperError):
    """Another live server was started on the same data directory (for example by a
    broker process that was killed while its ZooKeeper child survived). Two servers
    on one data directory would corrupt it, so we refuse to start."""

    def __init__(self, pid: int, port: int | None, data_dir: Path):
        super().__init__(
            f"a ZooKeeper server (pid {pid}, port {port}) is already running on {data_dir}; "
            "stop it before starting another one on the same directory"
        )
        self.pid = pid
        self.port = port


def find_java() -> str:
    """The java executable: $JAVA_HOME/bin/java, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    raise ZooKeeperNotInstalledError(
        "no Java runtime found (checked $JAVA_HOME and PATH); "
        "install one with `apt-get install default-jre-headless` (or openjdk-17-jre-headless)"
    )


def zookeeper_classpath(zookeeper_jar: Path = DEBIAN_ZOOKEEPER_JAR) -> str:
    """Classpath for ZooKeeperServerMain from Debian's `zookeeper` package.

    The zookeeper jar's manifest lists its dependencies by absolute path, so the
    JVM finds them itself; we only add the SLF4J binding so the server has a log.
    """
    if not zookeeper_jar.is_file():
        raise ZooKeeperNotInstalledError(
            f"ZooKeeper jar not found at {zookeeper_jar}; "
            "install the Debian package with `apt-get install zookeeper`"
        )
    missing = [name for name in REQUIRED_SIBLING_JARS if not (zookeeper_jar.parent / name).is_file()]
    if missing:
        raise ZooKeeperNotInstalledError(
            f"ZooKeeper dependencies {missing} not found in {zookeeper_jar.parent}; "
            "reinstall with `apt-get install --reinstall zookeeper libslf4j-java`"
        )
    entries = [str(zookeeper_jar)]
    slf4j_simple = zookeeper_jar.parent / DEBIAN_SLF4J_SIMPLE_JAR.name
    if slf4j_simple.is_file() and not _manifest_mentions(zookeeper_jar, slf4j_simple.name):
        entries.append(str(slf4j_simple))
    return os.pathsep.join(entries)


def _manifest_mentions(jar: Path, name: str) -> bool:
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    # Manifest lines are folded at 72 bytes with a leading space on continuations.
    return name in manifest.replace("\r\n ", "").replace("\n ", "")


def _tcp_sockets() -> list[list[str]] | None:
    """The fields of every line of /proc/net/tcp and tcp6 (None when neither is readable)."""
    sockets: list[list[str]] = []
    found_any = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        found_any = True
        sockets += [line.split() for line in lines]
    return sockets if found_any else None


def _local_port(fields: list[str]) -> int:
    return int(fields[1].rsplit(":", 1)[1], 16)


def _ports_in_use() -> set[int] | None:
    """Local TCP ports with a socket on them, from /proc/net (None when unavailable).

    Read from /proc instead of probing with a bind so this module opens no sockets;
    the answer is racy either way, which is why a failed bind is retried.
    """
    sockets = _tcp_sockets()
    if sockets is None:
        return None
    # Sockets still closing (FIN_WAIT*, TIME_WAIT, CLOSE_WAIT...; e.g. those a
    # stopped server leaves behind) do not stop ZooKeeper's SO_REUSEADDR bind;
    # counting them would move a restarted server to another port for nothing.
    return {_local_port(fields) for fields in sockets if len(fields) >= 4 and fields[3] in _PORT_HOLDING_STATES}


def _listening_socket_inodes(port: int) -> set[int] | None:
    sockets = _tcp_sockets()
    if sockets is None:
        return None
    # 0A is LISTEN; field 9 is the socket's inode.
    return {int(fields[9]) for fields in sockets
            if len(fields) > 9 and fields[3] == "0A" and _local_port(fields) == port}


def _process_listens_on(pid: int, port: int) -> bool:
    """Whether `pid` itself holds the listening socket on `port`.

    Readiness must be judged on our own server: a client probe alone would also
    succeed against another server that already had the port."""
    inodes = _listening_socket_inodes(port)
    if inodes is None:
        return True  # no /proc: rely on the client probe alone
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if target.startswith("socket:[") and int(target[8:-1]) in inodes:
            return True
    return False


def _port_is_free(port: int) -> bool:
    used = _ports_in_use()
    return used is None or port not in used


def _pick_free_port(exclude: set[int]) -> int:
    used = _ports_in_use() or set()
    low, high = AUTO_PORT_RANGE
    for _ in range(1000):
        port = random.randint(low, high)
        if port not in used and port not in exclude:
            return port
    raise ZooKeeperStartError(f"no free TCP port found in {AUTO_PORT_RANGE}")




def _read_int_file(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop_at_exit_hook(server: "EmbeddedZooKeeper"):
    # A weak reference, so the hook does not keep a forgotten server object alive;
    # one function object per server, because atexit.unregister matches by equality.
    reference = weakref.ref(server)

    def stop_at_exit() -> None:
        alive = reference()
        if alive is not None:
            alive.stop()

    return stop_at_exit


def _in_data_dir(name: str) -> property:
    """A read-only attribute of the server: data_dir / name."""
    return property(lambda server: server.data_dir / name, doc=f"data_dir / {name!r}")


class EmbeddedZooKeeper:
    """A ZooKeeper server owned by this process.

    Everything lives in `data_dir`: zoo.cfg, the snapshots and transaction logs
    (data_dir/data), zookeeper.log, and the port it listens on (zookeeper.port), so
    a restart on the same directory keeps both the data and the connect string.
    """

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        tick_time_ms: int = 500,
        *,
        max_session_timeout_ms: int = 60_000,
        heap_mb: int = 256,
        log_level: str = "info",
        extra_config: dict[str, str] | None = None,
        zookeeper_jar: Path = DEBIAN_ZOOKEEPER_JAR,
    ):
        """
        port: None picks a free one the first time and reuses it on later starts.
        max_session_timeout_ms: ZooKeeper's default cap is 20 ticks (10 s at the
            default tick), which would silently shorten Kafka's 18 s sessions.
        log_level: the server's log threshold (trace, debug, info, warn, error); at
            info it logs a line per client session, so long-lived deployments may want warn.
        extra_config: more zoo.cfg lines, e.g. {"forceSync": "no"} for tests.
        """
        if tick_time_ms <= 0:
            raise ValueError("tick_time_ms must be positive")
        self.data_dir = Path(data_dir).resolve()
        self._requested_port = port
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max(max_session_timeout_ms, 2 * tick_time_ms)
        self.heap_mb = heap_mb
        self.log_level = log_level
        self.extra_config = dict(extra_config or {})
        self.zookeeper_jar = Path(zookeeper_jar)
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._lock = threading.Lock()
        self._atexit_hook = None

    # ----------------------------------------------------------------- paths

    config_path = _in_data_dir(CONFIG_FILE_NAME)
    log_path = _in_data_dir(LOG_FILE_NAME)
    port_file = _in_data_dir(PORT_FILE_NAME)
    pid_file = _in_data_dir(PID_FILE_NAME)
    snapshot_dir = _in_data_dir(DATA_SUBDIR)

    # ----------------------------------------------------------------- state

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def connect_string(self) -> str:
        if self._port is None or not self.is_running():
            raise ZooKeeperError("ZooKeeper is not running; call start() first")
        return f"127.0.0.1:{self._port}"

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 30) -> str:
        """Start the server and wait until it accepts sessions; returns the
        connect string "127.0.0.1:PORT". Idempotent while running."""
        with self._lock:
            if self.is_running():
                return self.connect_string
            java = find_java()
            classpath = zookeeper_classpath(self.zookeeper_jar)
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.snapshot_dir.mkdir(parents=True, exist_ok=True)
            self._refuse_if_another_server_runs_here()

            deadline = time.monotonic() + timeout_s
            tried: set[int] = set()
            while True:
                port, port_is_pinned = self._choose_port(tried)
                tried.add(port)
                try:
                    self._launch(java, classpath, port, deadline)
                    break
                except _PortTakenError as taken:
                    # Only a port we picked ourselves may be swapped for another:
                    # an explicit one is part of the caller's contract.
                    if port_is_pinned or len(tried) >= AUTO_PORT_ATTEMPTS or time.monotonic() >= deadline:
                        raise ZooKeeperStartError(f"port {port} is already in use", taken.log_tail) from None
                    log.info("ZooKeeper port %d was taken, trying another", port)

            self._port = port
            self.port_file.write_text(f"{port}\n")
            self.pid_file.write_text(f"{self._process.pid}\n")
            # A normal interpreter exit must not leave the JVM behind.
            self._atexit_hook = atexit.register(_stop_at_exit_hook(self))
            log.info("ZooKeeper started: pid %d, 127.0.0.1:%d, data in %s", self._process.pid, port, self.data_dir)
            return f"127.0.0.1:{port}"

    def stop(self, timeout_s: float = 10) -> None:
        """SIGTERM the server's pid, SIGKILL it after `timeout_s`. Idempotent."""
        with self._lock:
            process = self._process
            if process is None:
                return
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    log.warning("ZooKeeper pid %d ignored SIGTERM for %.0f s, killing it", process.pid, timeout_s)
                    process.kill()
                    process.wait(timeout=timeout_s)
            self._process = None
            if self._atexit_hook is not None:
                atexit.unregister(self._atexit_hook)
                self._atexit_hook = None
            if _read_int_file(self.pid_file) == process.pid:
                self.pid_file.unlink(missing_ok=True)
            log.info("ZooKeeper pid %d stopped (exit code %s)", process.pid, process.returncode)

    def restart(self, timeout_s: float = 30) -> str:
        self.stop()
        return self.start(timeout_s)

    def __enter__(self) -> "EmbeddedZooKeeper":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - 64 * 1024))
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -------------------------------------------------------------- helpers

    def _refuse_if_another_server_runs_here(self) -> None:
        pid = _read_int_file(self.pid_file)
        if pid is None or not pid_alive(pid):
            return
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            cmdline = []
        # The pid may have been reused by an unrelated process since.
        if str(self.config_path).encode() in cmdline:
            raise ZooKeeperAlreadyRunningError(pid, _read_int_file(self.port_file), self.data_dir)

    def _choose_port(self, tried: set[int]) -> tuple[int, bool]:
        if self._requested_port is not None:
            if not _port_is_free(self._requested_port):
                raise ZooKeeperStartError(f"port {self._requested_port} is already in use (Address already in use)")
            return self._requested_port, True
        remembered = _read_int_file(self.port_file)
        if remembered is not None and remembered not in tried and _port_is_free(remembered):
            return remembered, False
        return _pick_free_port(tried), False

    def _write_config(self, port: int) -> None:
        settings = {
            "tickTime": str(self.tick_time_ms),
            "dataDir": str(self.snapshot_dir),
            "clientPort": str(port),
            "clientPortAddress": "127.0.0.1",
            "maxSessionTimeout": str(self.max_session_timeout_ms),
            # Every broker and client of a one-machine cluster comes from 127.0.0.1,
            # so the default cap of 60 connections per address is too low.
            "maxClientCnxns": "0",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat",
            # Keep the disk bounded: purge old snapshots/logs hourly, and
            # preallocate 4 MiB transaction log files instead of 64 MiB.
            "autopurge.snapRetainCount": "3",
            "autopurge.purgeInterval": "1",
            "preAllocSize": "4096",
        }
        settings.update(self.extra_config)
        body = "".join(f"{key}={value}\n" for key, value in settings.items())
        temporary = self.config_path.with_suffix(".cfg.tmp")
        temporary.write_text("# Written by raykafka's EmbeddedZooKeeper; rewritten on every start.\n" + body)
        temporary.replace(self.config_path)

    def _launch(self, java: str, classpath: str, port: int, deadline: float) -> None:
        self._write_config(port)
        command = [
            java,
            f"-Xmx{self.heap_mb}m",
            "-cp",
            classpath,
            "-Dzookeeper.admin.enableServer=false",
            "-Dorg.slf4j.simpleLogger.logFile=System.out",
            f"-Dorg.slf4j.simpleLogger.defaultLogLevel={self.log_level}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss,SSS",
            SERVER_MAIN_CLASS,
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"\n===== starting ZooKeeper on 127.0.0.1:{port} at {time.strftime('%Y-%m-%d %H:%M:%S')} =====\n".encode())
            log_file.flush()
            start_offset = log_file.tell()
            # No start_new_session: the server must die with the broker's process tree.
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                close_fds=True,
            )
        try:
            self._wait_until_ready(port, deadline, start_offset)
        except BaseException:
            self._kill_failed_launch()
            raise

    def _wait_until_ready(self, port: int, deadline: float, start_offset: int) -> None:
        # Readiness = a client session can be opened, which is what callers need;
        # a bare TCP accept happens before the database is loaded.
        probe_logger = logging.getLogger(f"{__name__}.probe")
        probe_logger.setLevel(logging.CRITICAL)
        while True:
            exit_code = self._process.poll()
            if exit_code is not None:
                tail = self._log_since(start_offset)
                if "Address already in use" in tail:
                    raise _PortTakenError(tail)
                raise ZooKeeperStartError(f"ZooKeeper exited with code {exit_code} during start", tail)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZooKeeperStartError(
                    f"ZooKeeper did not accept sessions on 127.0.0.1:{port} in time", self._log_since(start_offset)
                )
            if not _process_listens_on(self._process.pid, port):
                time.sleep(0.05)
                continue
            probe = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10.0, logger=probe_logger)
            try:
                probe.start(timeout=min(1.0, remaining))
            except Exception:  # kazoo's timeout; the server is not up yet
                continue
            else:
                return
            finally:
                try:
                    probe.stop()
                finally:
                    probe.close()

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(offset)
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])

    def _kill_failed_launch(self) -> None:
        process = self._process
        self._process = None
        if process is not None and process.poll() is None:
            process.kill()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.error("ZooKeeper pid %d did not exit after SIGKILL", process.pid)


class _PortTakenError(Exception):
    def __init__(self, log_tail: str):
        super().__init__("address already in use")
        self.log_tail = log_tail
