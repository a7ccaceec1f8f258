"""core/memory_trace.py: off unless asked; when asked, reports where the heap grew."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Waits for reports, not for time: the list is allocated once a first report is written
# (so after the tracer's first snapshot), and the program ends once a later one is.
PROGRAM = """
import glob, os, time
from core import memory_trace
assert memory_trace.start_if_asked("probe")
assert not memory_trace.start_if_asked("probe")  # once per process

def reports():
    found = glob.glob(os.path.join(os.environ["RAYKAFKA_TRACEMALLOC_DIR"], "probe-*.txt"))
    return open(found[0]).read().count("since the first report, by allocation site:") if found else 0

deadline = time.monotonic() + 50
while reports() < 1 and time.monotonic() < deadline:
    time.sleep(0.05)
kept = [bytes(1000) for _ in range(3000)]  # ~3 MiB that stay
seen = reports()
while reports() < seen + 1 and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_off_without_the_variable(monkeypatch):
    from core import memory_trace

    monkeypatch.delenv(memory_trace.ENV_DIR, raising=False)
    assert memory_trace.start_if_asked("probe") is False


def test_reports_growth_by_allocation_site(tmp_path):
    env = {"RAYKAFKA_TRACEMALLOC_DIR": str(tmp_path), "RAYKAFKA_TRACEMALLOC_INTERVAL_S": "0.5",
           "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, env=env, check=True, timeout=60)
    reports = list(tmp_path.glob("probe-*.txt"))
    assert len(reports) == 1
    text = reports[0].read_text()
    assert "RSS" in text and "untraced growth" in text
    assert "since the first report, by allocation site:" in text
    # The kept list's bytes show up as growth at the program's own line.
    growth = [line for line in text.splitlines() if line.startswith("+") and "KiB" in line]
    assert any(float(line.split()[0]) > 2000 for line in growth), text[:2000]
