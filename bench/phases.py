"""One workload phase (produce or consume) in a fresh client process
(bench.client), and the topic set-up around it: what bench.run's single
workload and the matrix (bench.matrix_run) both run."""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.targets import kill_tree, PYTHON, REPO, Target


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



def _client_kernel_note(cpu: dict) -> str:
    """' (kernel K%, F k faults)' of a client phase, when recorded: a client
    that faults on memory the host took back spends its time in the kernel."""
    if cpu.get("client_kernel_cpu_pct") is None:
        return ""
    faults_k = cpu.get("client_page_faults", 0) / 1000
    return f" (kernel {cpu['client_kernel_cpu_pct']:.0f}%, {faults_k:.0f}k faults)"
