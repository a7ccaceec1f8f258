from pathlib import Path

from net import registry
from net.compatibility import render

REPO = Path(__file__).resolve().parents[2]


def test_compatibility_md_matches_registry():
    assert (REPO / "COMPATIBILITY.md").read_text() == render(), \
        "regenerate: .venv/bin/python -m net.compatibility > COMPATIBILITY.md"


def test_every_proving_test_exists():
    for handler in registry.handlers().values():
        assert handler.proving_tests, f"{handler.name} has no proving test"
        for ref in handler.proving_tests:
            path, _, name = ref.partition("::")
            source = (REPO / path).read_text()
            assert f"def {name}(" in source, f"{ref} does not exist"
