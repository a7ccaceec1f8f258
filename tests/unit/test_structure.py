"""The tree keeps the shape issue 32 gave it: net/ speaks to actors only through its
ports (no Ray), storage/ and delayed/ stand alone, ZooKeeper sessions are opened in one
place per process kind, and no product file grows past 800 lines. (Import loops and the
spelling of error codes have their own tests: test_import_loops, test_error_code_spelling.)
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("actors", "bench", "cli", "cluster", "core", "delayed", "metadata", "net", "node", "spark",
           "storage", "pyspark_raykafka")
MAX_LINES = 800
# Where a ZooKeeper session may be opened: metadata/ (the session itself and its tools) and
# one place per process kind that holds one.
ZK_OPENED_IN = {
    "actors/controller.py",  # the controller actor
    "actors/edge.py",  # an edge process (SCRAM, quotas, ACLs, listeners share it)
    "actors/isr_writer.py",  # a replica process writing its ISR
    "actors/transaction_coordinator.py",  # a transaction coordinator process
    "node/identity.py",  # the broker process, to read or generate its broker id
    "cli/balancer.py",  # the balancer console tool
}


def product_files() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_net_reaches_actors_only_through_its_ports():
    ray_use = re.compile(r"\.remote\(|^\s*import ray|^\s*from ray\b|\bray\.")
    found = [f"{rel(p)}:{i}" for p in (ROOT / "net").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if ray_use.search(line)]
    assert not found, f"Ray used in net/ (go through net/ports.py): {found}"


@pytest.mark.parametrize("package", ["storage", "delayed"])
def test_package_imports_nothing_of_ours(package):
    ours = set(PRODUCT) - {package}
    found = {rel(p): sorted(m for m in imported_modules(p) if m.split(".")[0] in ours)
             for p in (ROOT / package).rglob("*.py")}
    assert not {k: v for k, v in found.items() if v}


def test_zookeeper_sessions_are_opened_in_one_place_per_process_kind():
    opened = re.compile(r"\b(KafkaZkClient|KazooClient)\(")
    found = [f"{rel(p)}:{i}" for p in product_files() if not rel(p).startswith(("metadata/", "bench/"))
             and rel(p) not in ZK_OPENED_IN
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if opened.search(line) and not line.lstrip().startswith(("#", "class "))]
    assert not found, f"a ZooKeeper session opened outside its process's one place: {found}"


def test_no_private_zookeeper_client_method_is_called_outside_metadata():
    private_call = re.compile(r"\b(zk|azk|_zk|zk_client\(\))\._[a-z]\w*\(")
    found = [f"{rel(p)}:{i}" for p in product_files() if not rel(p).startswith("metadata/")
             for i, line in enumerate(p.read_text().splitlines(), 1) if private_call.search(line)]
    assert not found


def test_no_product_file_is_over_800_lines():
    long = {rel(p): n for p in product_files() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split along a real seam: {long}"


def test_the_checks_can_fail(tmp_path):
    """The scanners see what they look for (a planted file of each kind)."""
    planted = tmp_path / "planted.py"
    planted.write_text("import ray\nfrom core.clock import Clock\nx = zk._children('/')\n" + "y = 1\n" * MAX_LINES)
    assert "core.clock" in imported_modules(planted)
    text = planted.read_text()
    assert re.search(r"^\s*import ray", text, re.M)
    assert re.search(r"\b(zk|azk|_zk|zk_client\(\))\._[a-z]\w*\(", text)
    assert len(text.splitlines()) > MAX_LINES
