"""storage/ names why an append was refused (RecordsFault) without Kafka's
error codes; cluster/storage_faults.py answers each fault with the Kafka
error of the same name, and storage imports nothing else of ours."""
import ast
import pathlib

from cluster.storage_faults import FAULT_ERROR_CODES, append_error_code
from core.error_codes import ErrorCode
from storage.errors import InvalidRecordsError, RecordsFault

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_fault_maps_to_the_kafka_error_of_its_name():
    assert set(FAULT_ERROR_CODES) == set(RecordsFault)
    for fault, code in FAULT_ERROR_CODES.items():
        assert isinstance(code, ErrorCode) and code.name == fault.name


def test_a_refused_append_answers_with_its_faults_code():
    exc = InvalidRecordsError(RecordsFault.message_too_large, "too big")
    assert append_error_code(exc) is ErrorCode.message_too_large


def test_storage_imports_nothing_of_ours():
    ours = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - {"storage"}
    for path in (ROOT / "storage").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ours, f"{path.name} imports {name}"
