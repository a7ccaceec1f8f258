"""One spelling of a Kafka error code across the product: ``ErrorCode.<name>``
from core/error_codes.py (issue 32, item 4).

An AST scan of every product module, except storage/ (which has its own error
types) and the codec (where error codes are int16s on the wire), fails on:

- an alias of ErrorCode (``E = ErrorCode``, ``import ErrorCode as E``), and
  kio's own ErrorCode imported instead of ours;
- an upper-case alias constant (``NOT_LEADER = ErrorCode.not_leader_or_follower``,
  ``error_codes.NOT_LEADER_OR_FOLLOWER``);
- an int literal spelled as an error code: passed, assigned, compared or used
  as a dict value under a name that says error code (``error_code=3``,
  ``"error_code": 0``, ``r.error == 0``), given positionally to a named type
  for a field typed ErrorCode, returned from a function annotated to return
  ErrorCode or that returns ErrorCode members elsewhere, or one branch of a
  conditional whose other branch is an ErrorCode member;
- ``int(ErrorCode.<name>)``, ``int(exc.error)``: members are ints already;
- a field of a named type (NamedTuple/dataclass) called error/error_code and
  typed ``int`` rather than ``ErrorCode``, and a function that returns
  ErrorCode members under another return annotation.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from core.error_codes import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
# storage/ owns its own error types; tests/ and the virtualenv are not product.
SKIPPED_DIRS = {"storage", "tests", ".venv", "node_modules", ".git", "build", "dist"}
# Where error codes are int16s on the wire: the codec and the wire-size table.
CODEC_FILES = {"net/codec.py", "net/request_bounds.py"}

# Names that say "this is an error code".
ERROR_NAME = re.compile(r"^(?:(?:\w+_)?error_code|errorCode|error)$")


def _is_error_name(name: str | None) -> bool:
    return name is not None and bool(ERROR_NAME.match(name))


def _is_error_or_code_name(name: str | None) -> bool:
    """Also a bare ``code`` where it is passed, keyed or compared (an
    assigned ``code`` is as often a process's exit code)."""
    return name == "code" or _is_error_name(name)


def _int_literal(node: ast.AST) -> int | None:
    """The int a literal spells (``3``, ``-1``), bools excluded; else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _int_literal(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _is_error_code_name(node: ast.AST) -> bool:
    """``ErrorCode`` or ``<module>.ErrorCode``."""
    return (isinstance(node, ast.Name) and node.id == "ErrorCode") or \
        (isinstance(node, ast.Attribute) and node.attr == "ErrorCode")


def _is_member(node: ast.AST) -> bool:
    """``ErrorCode.<name>``."""
    return isinstance(node, ast.Attribute) and _is_error_code_name(node.value)


def _mentions_error_code_type(annotation: ast.AST | None) -> bool:
    """An annotation that is ErrorCode, ErrorCode | None, Optional[ErrorCode]..."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    return any(_is_error_code_name(n) for n in ast.walk(annotation))


def _is_plain_int(annotation: ast.AST | None) -> bool:
    if isinstance(annotation, ast.Constant) and annotation.value == "int":
        return True
    return isinstance(annotation, ast.Name) and annotation.id == "int"


def _target_name(node: ast.AST) -> str | None:
    """The name an assignment target or a value is known by: x, a.x, a["x"]."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.slice.value
    return None


def _is_named_type(cls: ast.ClassDef) -> bool:
    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", None) for b in cls.bases}
    decorators = set()
    for d in cls.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        decorators.add(d.id if isinstance(d, ast.Name) else getattr(d, "attr", None))
    return "NamedTuple" in bases or "dataclass" in decorators


def _fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    return [s for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def error_code_fields(trees: dict[str, ast.Module]) -> dict[str, dict]:
    """Named types with fields typed ErrorCode: class name -> {positions, names}.
    Positional indices are only kept for NamedTuples and dataclasses, whose
    constructor takes the fields in order."""
    found: dict[str, dict] = {}
    for tree in trees.values():
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef) or not _is_named_type(cls):
                continue
            fields = _fields(cls)
            typed = {i: f.target.id for i, f in enumerate(fields) if _mentions_error_code_type(f.annotation)}
            if typed:
                found[cls.name] = {"positions": set(typed), "names": set(typed.values())}
    return found


class _Checker(ast.NodeVisitor):
    def __init__(self, path: str, typed_fields: dict[str, dict]):
        self.path = path
        self.typed_fields = typed_fields
        self.found: list[str] = []

    def report(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.path}:{getattr(node, 'lineno', 0)}: {what}")

    # aliases and kio's enum ------------------------------------------------
    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "ErrorCode" and alias.asname not in (None, "ErrorCode"):
                self.report(node, f"ErrorCode imported as {alias.asname}")
            if node.module == "core.error_codes" and alias.name.isupper():
                self.report(node, f"upper-case error-code alias {alias.name} imported")
        if node.module == "kio.schema.errors":
            self.report(node, "kio's ErrorCode used; use core.error_codes.ErrorCode")
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "kio.schema.errors":
                self.report(node, "kio's ErrorCode used; use core.error_codes.ErrorCode")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == "error_codes" and node.attr.isupper():
            self.report(node, f"upper-case error-code alias error_codes.{node.attr}")
        if node.attr == "value" and (_is_member(node.value) or _is_error_name(_target_name(node.value))):
            self.report(node, f"{ast.unparse(node)}: keep the ErrorCode member")
        if isinstance(node.value, ast.Attribute) and node.value.attr == "ErrorCode" \
                and isinstance(node.value.value, ast.Name):
            self.report(node, f"{ast.unparse(node)}: spell ErrorCode.{node.attr}")
        self.generic_visit(node)

    def _check_assignment(self, target: ast.AST, value: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                self._check_assignment(t, v, node)
            return
        name = _target_name(target)
        if _is_error_code_name(value):
            self.report(node, f"alias {name} = ErrorCode")
        elif _is_member(value) and name is not None and name.isupper() \
                and (value.attr.startswith(name.lower()) or name.lower().startswith(value.attr)):
            self.report(node, f"upper-case error-code alias {name}")
        elif _is_error_name(name) and _int_literal(value) is not None:
            self.report(node, f"int literal {_int_literal(value)} assigned to {name}")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_assignment(target, node.value, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._check_assignment(node.target, node.value, node)
        self.generic_visit(node)

    # int literals ------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "int" and len(node.args) == 1 \
                and (_is_member(node.args[0]) or _is_error_or_code_name(_target_name(node.args[0]))):
            self.report(node, f"int({ast.unparse(node.args[0])}): keep the ErrorCode member")
        callee = node.func.id if isinstance(node.func, ast.Name) else \
            node.func.attr if isinstance(node.func, ast.Attribute) else None
        typed = self.typed_fields.get(callee or "")
        for kw in node.keywords:
            value = _int_literal(kw.value)
            if value is not None and (_is_error_or_code_name(kw.arg) or (typed and kw.arg in typed["names"])):
                self.report(node, f"int literal {value} passed as {kw.arg}=")
        if typed:
            for i, arg in enumerate(node.args):
                if i in typed["positions"] and _int_literal(arg) is not None:
                    self.report(node, f"int literal {_int_literal(arg)} passed as {callee}'s error code")
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and _is_error_or_code_name(key.value) \
                    and _int_literal(value) is not None:
                self.report(node, f"int literal {_int_literal(value)} under key {key.value!r}")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for operand in operands:  # code in (0, ErrorCode.topic_already_exists)
            if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) and any(_is_member(e) for e in operand.elts):
                for e in operand.elts:
                    if _int_literal(e) is not None:
                        self.report(node, f"int literal {_int_literal(e)} among ErrorCode members")
        for a, b in zip(operands, operands[1:]):
            for named, other in ((a, b), (b, a)):
                if _is_error_or_code_name(_target_name(named)) and _int_literal(other) is not None:
                    self.report(node, f"{_target_name(named)} compared with int literal {_int_literal(other)}")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        pairs = [(node.body, node.orelse)]
        if isinstance(node.body, ast.Tuple) and isinstance(node.orelse, ast.Tuple) \
                and len(node.body.elts) == len(node.orelse.elts):
            pairs += list(zip(node.body.elts, node.orelse.elts))  # (code, message) if ... else (0, None)
        for a, b in pairs:
            for member, other in ((a, b), (b, a)):
                if _is_member(member) and _int_literal(other) is not None:
                    self.report(node, f"int literal {_int_literal(other)} beside {ast.unparse(member)}")
        self.generic_visit(node)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        returns = [n for n in _own_nodes(node) if isinstance(n, ast.Return) and n.value is not None]
        annotated = _mentions_error_code_type(node.returns)
        returns_members = any(_is_member(r.value) or (isinstance(r.value, ast.IfExp) and (
            _is_member(r.value.body) or _is_member(r.value.orelse))) for r in returns)
        if returns_members and node.returns is not None and not annotated:
            self.report(node, f"{node.name} returns ErrorCode members but is annotated {ast.unparse(node.returns)}")
        # ``if error: return error`` ... ``return 0``: the 0 is an error code too.
        returns_errors = any(isinstance(r.value, ast.Name) and _is_error_name(r.value.id) for r in returns)
        if annotated or returns_members or returns_errors:
            for r in returns:
                if _int_literal(r.value) is not None:
                    self.report(r, f"{node.name} returns int literal {_int_literal(r.value)} as an error code")
                if annotated and isinstance(r.value, ast.Call) and isinstance(r.value.func, ast.Name) \
                        and r.value.func.id == "int":
                    self.report(r, f"{node.name} returns int(...) as an error code: keep the member")
        for arg, default in _defaults(node.args):
            if _is_error_name(arg.arg) and _int_literal(default) is not None:
                self.report(node, f"parameter {arg.arg} defaults to int literal {_int_literal(default)}")
        self.generic_visit(node)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if _is_named_type(node):
            for field in _fields(node):
                if _is_error_name(field.target.id) and _is_plain_int(field.annotation):
                    self.report(field, f"{node.name}.{field.target.id} typed int; type it ErrorCode")
        self.generic_visit(node)


def _own_nodes(func: ast.AST):
    """The nodes of a function's body, not of functions nested in it."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _defaults(args: ast.arguments):
    positional = [*args.posonlyargs, *args.args]
    yield from zip(positional[len(positional) - len(args.defaults):], args.defaults)
    yield from ((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)


@functools.lru_cache(maxsize=1)
def product_sources(root: Path = ROOT) -> dict[str, str]:
    """Every product module's text by path (read once per session)."""
    tops = [p for p in root.iterdir() if not p.name.startswith(".") and p.name not in SKIPPED_DIRS]
    paths = [p for top in tops for p in ([top] if top.is_file() else top.rglob("*.py"))]
    sources = {}
    for path in sorted(p for p in paths if p.suffix == ".py"):
        relative = path.relative_to(root)
        if SKIPPED_DIRS.intersection(relative.parts) or relative.as_posix() in CODEC_FILES:
            continue
        sources[relative.as_posix()] = path.read_text()
    return sources


@functools.lru_cache(maxsize=1)
def product_modules(root: Path = ROOT) -> dict[str, ast.Module]:
    return {path: ast.parse(text, path) for path, text in product_sources(root).items()}


# ``return 11  # STALE_CONTROLLER_EPOCH``: a number whose comment names the code.
_NAMED_BY_COMMENT = re.compile(r"(?<![\w.])-?\d+\b[,)\]]*\s*#\s*([A-Z][A-Z0-9_]+)\b")


def commented_numbers(sources: dict[str, str]) -> list[str]:
    found = []
    for path, text in sources.items():
        for number, line in enumerate(text.splitlines(), 1):
            for match in _NAMED_BY_COMMENT.finditer(line):
                if match.group(1).lower() in ErrorCode.__members__:
                    found.append(f"{path}:{number}: a number spelled as {match.group(1)}")
    return found


def violations(trees: dict[str, ast.Module]) -> list[str]:
    typed = error_code_fields(trees)
    found: list[str] = []
    for path, tree in trees.items():
        checker = _Checker(path, typed)
        checker.visit(tree)
        found.extend(checker.found)
    return found


def test_product_spells_error_codes_one_way():
    trees = product_modules()
    assert len(trees) > 100  # the scan sees the product
    assert violations(trees) == []
    assert commented_numbers(product_sources()) == []


def test_a_number_named_by_its_comment_fails():
    assert commented_numbers({"planted.py": "    return 11  # STALE_CONTROLLER_EPOCH\n"})
    assert commented_numbers({"planted.py": "    return 0  # offsets start here\n"}) == []


def _check(source: str) -> list[str]:
    return violations({"planted.py": ast.parse(source)})


@pytest.mark.parametrize("source", [
    "from core.error_codes import ErrorCode\nE = ErrorCode\n",
    "from core import error_codes\nE = error_codes.ErrorCode\n",
    "from core.error_codes import ErrorCode as E\n",
    "from kio.schema.errors import ErrorCode\n",
    "import kio.schema.errors\n",
    "from core.error_codes import ErrorCode\nNOT_LEADER = ErrorCode.not_leader_or_follower\n",
    "from core.error_codes import NOT_LEADER_OR_FOLLOWER\n",
    "from core import error_codes\nx = error_codes.REQUEST_TIMED_OUT\n",
    "reply(error_code=42)\n",
    "reply(errorCode=-1)\n",
    "reply(top_level_error_code=3)\n",
    "answer = {'error_code': 3, 'results': []}\n",
    "result.error_code = 11\n",
    "error = 0\n",
    "r['error_code'] = 40\n",
    "if r.error_code == 0: pass\n",
    "ok = 0 != answer.error\n",
    "if code is not None and code != 0: pass\n",
    "KafkaError(code=7)\n",
    "from core.error_codes import ErrorCode\ndef f() -> ErrorCode:\n    return 11\n",
    "from core.error_codes import ErrorCode\ndef f() -> 'ErrorCode | None':\n    return 0\n",
    "from core.error_codes import ErrorCode\ndef f(x):\n    if x:\n        return ErrorCode.not_controller\n    return 0\n",
    "from core.error_codes import ErrorCode\nx = 0 if ok else ErrorCode.request_timed_out\n",
    "from core.error_codes import ErrorCode\ndenied = (int(ErrorCode.topic_authorization_failed), -1)\n",
    "results.append({'error_code': int(exc.error)})\n",
    "code = self.error.value\n",
    "from core.error_codes import ErrorCode\nok = code not in (0, ErrorCode.topic_already_exists)\n",
    "from core.error_codes import ErrorCode\nx = (ErrorCode.leader_not_available, None) if failed else (0, None)\n",
    "def f(error_code=0): pass\n",
    "def f(p):\n    error = p.fence()\n    if error:\n        return error\n    return 0\n",
    "from core import error_codes\nx = error_codes.ErrorCode.invalid_config\n",
    "from core.error_codes import ErrorCode\nasync def f(c) -> ErrorCode:\n    return int(await c())\n",
    "from core.error_codes import ErrorCode\ndef f() -> int:\n    return ErrorCode.not_controller\n",
    "from typing import NamedTuple\nclass R(NamedTuple):\n    offset: int\n    error: int\n",
    "from core.error_codes import ErrorCode\nfrom typing import NamedTuple\n"
    "class R(NamedTuple):\n    offset: int\n    status: ErrorCode\nR(5, 0)\n",
    "from core.error_codes import ErrorCode\nfrom typing import NamedTuple\n"
    "class R(NamedTuple):\n    offset: int\n    status: ErrorCode\nR(offset=5, status=3)\n",
], ids=lambda s: s.strip().splitlines()[-1][:40])
def test_a_planted_violation_fails(source):
    assert _check(source), source


@pytest.mark.parametrize("source", [
    "from core.error_codes import ErrorCode\nreply(error_code=ErrorCode.none)\n",
    "from core.error_codes import ErrorCode\ndef f() -> ErrorCode:\n    return ErrorCode.none\n",
    "def f() -> int:\n    return 0\n",
    "count = 0\nerrors = 0\ncount, code = 0, 0\n",
    "from core.error_codes import ErrorCode\nfrom typing import NamedTuple\n"
    "class R(NamedTuple):\n    error: ErrorCode\n    offset: int\nR(ErrorCode.none, 0)\n",
    "from core.error_codes import ErrorCode\nx = ErrorCode(code)\n",
], ids=lambda s: s.strip().splitlines()[-1][:40])
def test_the_one_spelling_passes(source):
    assert _check(source) == [], source


def test_a_planted_violation_in_a_product_file_fails():
    """The scan over the tree fails when one product module spells a code as a number."""
    trees = product_modules()
    path = "net/apis/n43_elect_leaders.py" if "net/apis/n43_elect_leaders.py" in trees else next(iter(trees))
    planted = dict(trees)
    planted[path] = ast.parse("def handle(r):\n    return {'error_code': 42}\n")
    assert any(v.startswith(path) for v in violations(planted))
