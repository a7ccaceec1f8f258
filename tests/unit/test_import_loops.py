"""No two product modules import each other, directly or around a loop
(issue 32 item 5): every import counts, module-level, inside functions and
under TYPE_CHECKING, since each one ties the two modules together."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_PRODUCT = {"tests", "docs", "deploy", "node_modules"}

# Loops still open, each in another engineer's part of issue 32 (a loop that
# holds one of these is let through while that work goes on); remove an entry
# when its loop is gone (a stale entry does no harm, a new loop fails).
KNOWN: set[frozenset[str]] = set()


def product_modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] in NOT_PRODUCT or any(p.startswith(".") or p == "__pycache__" for p in parts):
            continue
        names = list(parts[:-1]) + ([] if parts[-1] == "__init__.py" else [parts[-1][:-3]])
        modules[".".join(names)] = path
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the submodule; `from mod import name` the module.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                found = resolve(target)
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


def loops(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_the_scan_sees_a_loop():
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]


def test_no_product_module_imports_itself_around_a_loop():
    new = [sorted(loop) for loop in loops(import_graph(product_modules()))
           if not any(known <= loop for known in KNOWN)]
    assert not new, f"import loops: {new}"
