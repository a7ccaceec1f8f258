"""Shared-memory regions between the edge and a leader: round trip, and
orphans of dead processes removed."""
import os
import subprocess
import sys

from core import shared_region
from core.shared_region import SharedRegion, remove_orphans


def test_write_attach_read(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))
    region = SharedRegion.create(f"raykafka-{os.getpid()}-1-t-0", 4096)
    region.write(10, b"hello")
    reader = SharedRegion.attach(region.path)
    assert bytes(reader.buf[10:15]) == b"hello"
    reader.close()
    region.close()
    assert not os.path.exists(region.path), "the owner unlinks its region"


def test_orphans_of_dead_processes_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / f"raykafka-{dead}-1-t-0").write_bytes(b"x")
    mine = tmp_path / f"raykafka-{os.getpid()}-1-t-1"
    mine.write_bytes(b"x")
    other = tmp_path / "someone-else"
    other.write_bytes(b"x")
    assert remove_orphans() == 1
    assert mine.exists() and other.exists()
