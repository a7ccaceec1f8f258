"""``meta.properties`` of a log directory, in Java properties syntax.

Kafka writes, per log dir::

    #
    #<date>
    version=0
    broker.id=1
    cluster.id=AbCdEf...

(KRaft brokers write ``version=1`` with ``node.id`` and ``directory.id``.)
The broker refuses to start when the ids do not match its configuration;
that policy belongs to the caller, this module only reads and writes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from storage.checkpoint import atomic_write
from storage.errors import CorruptCheckpointError

__all__ = [
    "META_PROPERTIES",
    "MetaProperties",
    "read_properties",
    "parse_properties",
    "write_properties",
    "format_properties",
]

META_PROPERTIES = "meta.properties"

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str):
    """Join continuation lines: a line ending in an odd number of backslashes
    continues on the next line, whose leading whitespace is dropped."""
    pending = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f") if pending is not None else raw
        if pending is None:
            stripped = line.lstrip(" \t\f")
            if not stripped or stripped[0] in "#!":
                continue
            line = stripped
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        yield (pending or "") + line
        pending = None
    if pending is not None:
        yield pending


def _unescape(s: str, path: str) -> str:
    out = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= n:
            break
        c = s[i]
        if c == "u":
            code = s[i + 1 : i + 5]
            if len(code) != 4:
                raise CorruptCheckpointError(f"malformed \\u escape in properties file {path}")
            try:
                out.append(chr(int(code, 16)))
            except ValueError:
                raise CorruptCheckpointError(f"malformed \\u escape in properties file {path}") from None
            i += 5
        else:
            out.append(_ESCAPES.get(c, c))
            i += 1
    # \\u escapes of a surrogate pair decode to two lone surrogates; join them.
    return "".join(out).encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")


def _split_key_value(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or whitespace; the
    # separator may be surrounded by whitespace.
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in " \t\f":
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in " \t\f":
            j += 1
    return key, line[j:]


def parse_properties(text: str, path: str = "<string>") -> dict[str, str]:
    props = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[_unescape(key, path)] = _unescape(value, path)
    return props


def read_properties(path: str) -> dict[str, str]:
    with open(path, "rb") as f:
        raw = f.read()
    # Java's Properties.load(InputStream) reads ISO-8859-1 (non-Latin-1
    # characters are written as \\u escapes).
    return parse_properties(raw.decode("latin-1"), path)


def _escape(s: str, is_key: bool) -> str:
    out = []
    for idx, c in enumerate(s):
        if c == "\\":
            out.append("\\\\")
        elif c == " " and (is_key or idx == 0):
            out.append("\\ ")
        elif c in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[c])
        elif c in "=:#!":
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            # Java writes \\uXXXX (UTF-16 code units, so surrogate pairs above
            # the BMP) to keep the file ISO-8859-1 clean.
            units = c.encode("utf-16-be", "surrogatepass")
            out.append("".join(f"\\u{int.from_bytes(units[k:k + 2], 'big'):04X}" for k in range(0, len(units), 2)))
        else:
            out.append(c)
    return "".join(out)


def format_properties(props: dict[str, str], comment: str | None = None) -> str:
    lines = []
    if comment is not None:
        lines.append("#" + comment)
    lines.append("#" + time.strftime("%a %b %d %H:%M:%S %Z %Y"))
    for key, value in props.items():
        lines.append(f"{_escape(str(key), True)}={_escape(str(value), False)}")
    return "\n".join(lines) + "\n"


def write_properties(path: str, props: dict[str, str], comment: str | None = None) -> None:
    atomic_write(path, format_properties(props, comment).encode("latin-1"))


@dataclass
class MetaProperties:
    """The identity of a log directory."""

    cluster_id: str | None = None
    broker_id: int | None = None
    version: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.broker_id is not None:
            props["node.id" if self.version >= 1 else "broker.id"] = str(self.broker_id)
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        props.update(self.extra)
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str], path: str = "<properties>") -> "MetaProperties":
        props = dict(props)
        try:
            version = int(props.pop("version"))
        except KeyError:
            raise CorruptCheckpointError(f"{path} has no version") from None
        except ValueError:
            raise CorruptCheckpointError(f"{path} has a malformed version") from None
        if version not in (0, 1):
            raise CorruptCheckpointError(f"{path} has unsupported version {version}")
        id_key = "node.id" if version >= 1 else "broker.id"
        raw_id = props.pop(id_key, None)
        if version >= 1:
            # v1 may also carry a legacy broker.id; it must agree.
            legacy = props.pop("broker.id", None)
            if legacy is not None and raw_id is not None and legacy != raw_id:
                raise CorruptCheckpointError(f"{path}: broker.id {legacy} != node.id {raw_id}")
        broker_id = None
        if raw_id is not None:
            try:
                broker_id = int(raw_id)
            except ValueError:
                raise CorruptCheckpointError(f"{path} has a malformed {id_key}: {raw_id!r}") from None
        return cls(cluster_id=props.pop("cluster.id", None), broker_id=broker_id, version=version, extra=props)

    @classmethod
    def read(cls, path: str) -> "MetaProperties":
        """Read ``path`` (a ``meta.properties`` file or a log dir holding one)."""
        if os.path.isdir(path):
            path = os.path.join(path, META_PROPERTIES)
        return cls.from_properties(read_properties(path), path)

    @classmethod
    def read_if_exists(cls, path: str) -> "MetaProperties | None":
        try:
            return cls.read(path)
        except FileNotFoundError:
            return None

    def write(self, path: str) -> None:
        """Atomically write to ``path`` (a file, or a log dir to write into)."""
        if os.path.isdir(path):
            path = os.path.join(path, META_PROPERTIES)
        write_properties(path, self.to_properties())
