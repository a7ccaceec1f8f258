"""Render COMPATIBILITY.md from the handler registry.

    .venv/bin/python -m net.compatibility > COMPATIBILITY.md

tests/unit/test_compatibility_doc.py fails when the file and the registry drift.
"""
from __future__ import annotations

from kio.schema.index import api_key_map

from net import registry

HEADER = """# Kafka API compatibility

Generated from the edge's handler registry (`net/apis/`) by
`.venv/bin/python -m net.compatibility > COMPATIBILITY.md`; a unit test fails if
this file and the registry drift. ApiVersions advertises exactly these ranges.

| key | API | versions served | advertised | proving tests |
|---:|---|---|---|---|
"""


def render() -> str:
    handlers = registry.handlers()
    rows = []
    for key in sorted(handlers):
        h = handlers[key]
        served = f"{h.min_version}–{h.max_version}"
        advertised = f"{h.advertised_min_version}–{h.max_version}"
        if h.advertised_min_version != h.min_version:
            advertised += f" (v{h.advertised_min_version}–{h.min_version - 1} advertised, refused: KAFKA-18659)"
        tests = "<br>".join(f"`{t}`" for t in h.proving_tests) or "—"
        rows.append(f"| {key} | {h.name} | {served} | {advertised} | {tests} |")
    missing = [f"{k} {api_key_map[k]}" for k in sorted(api_key_map) if k not in handlers]
    footer = ("\n\nNot served yet (the connection is closed, as Kafka does for unknown keys): "
              + ", ".join(missing) + ".\n")
    return HEADER + "\n".join(rows) + footer


if __name__ == "__main__":
    print(render(), end="")
