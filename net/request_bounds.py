"""Bounds check of a request's bytes before kio decodes them.

kio's native reader sizes every array by the count the client declared before
it reads a single element: a compact count of `ff ff ff ff 0f` makes it ask
for 32 GiB, and Rust's allocator then aborts the whole process
(docs/kio-preallocation.md). Kafka's own generated readers refuse a
collection whose declared size exceeds the bytes that remain; this module
does the same, and more: it walks the request with the very schema kio will
decode it with, and checks every array count and every string/bytes length
against the bytes that remain, through nested structs and tagged fields.
Only a request that passes reaches kio, so whatever kio allocates is backed
by bytes that really are in the frame, and the walk itself costs O(frame).

The walk never builds values: it only moves a position. Each entity type's
walker is built once from the dataclass fields (the same metadata kio's
writer uses: `kafka_type`, `tag`, `__flexible__`, optionality) and cached.
"""
from __future__ import annotations

import functools
import struct
from dataclasses import fields, is_dataclass
from types import EllipsisType, NoneType, UnionType
from typing import Callable, Union, get_args, get_origin

# A walker takes (buffer, position, end, budget) and returns the position
# after the value; it raises RequestOutOfBounds when the bytes lie.
Walker = Callable[[memoryview, int, int, "ElementBudget"], int]

_FIXED_SIZES = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}

# The most array elements one request may declare in all. A decoded element
# is a Python object of ~100 bytes or more, whatever its size on the wire;
# this caps what a frame of 1-byte elements can make the edge build. Real
# clients stay far below it: a Fetch or OffsetCommit naming every partition of
# a 200,000-partition cluster is the extreme.
MAX_ELEMENTS_PER_REQUEST = 250_000


class RequestOutOfBounds(ValueError):
    """A declared count or length is not backed by the bytes of the frame."""


class ElementBudget:
    """Array elements still allowed in this request (MAX_ELEMENTS_PER_REQUEST).

    `sizes`, when a list, collects (position, kind) of every count and length
    the walk reads; the protocol fuzzer mutates exactly those places.
    """

    __slots__ = ("left", "sizes")

    def __init__(self, left: int = MAX_ELEMENTS_PER_REQUEST, sizes: list | None = None):
        self.left = left
        self.sizes = sizes

    def take(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise RequestOutOfBounds(
                f"request declares more than {MAX_ELEMENTS_PER_REQUEST} array elements in all")


def read_uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Kafka's unsigned varint: at most 5 bytes (an int32)."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise RequestOutOfBounds("varint runs past the end of the frame")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise RequestOutOfBounds("varint is longer than 5 bytes")


def _int16(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise RequestOutOfBounds("int16 length runs past the end of the frame")
    return int.from_bytes(buf[pos:pos + 2], "big", signed=True), pos + 2


_INT32 = struct.Struct(">i")


def _int32(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise RequestOutOfBounds("int32 length runs past the end of the frame")
    return int.from_bytes(buf[pos:pos + 4], "big", signed=True), pos + 4


def _check_length(length: int, pos: int, end: int, what: str) -> int:
    if length > end - pos:
        raise RequestOutOfBounds(
            f"{what} declares {length} bytes, but there are only {end - pos} bytes remaining")
    return pos + length


# ---- primitive walkers -------------------------------------------------------------------------

def _fixed(size: int) -> Walker:
    def walk(buf, pos, end, budget):
        if pos + size > end:
            raise RequestOutOfBounds(f"{size}-byte field runs past the end of the frame")
        return pos + size
    return walk


def _compact_bytes(buf, pos, end, budget):
    # N+1 encoding; 0 is null (kio rejects a null where the schema forbids it).
    if budget.sizes is not None:
        budget.sizes.append((pos, "uvarint"))
    encoded, pos = read_uvarint(buf, pos, end)
    if encoded == 0:
        return pos
    return _check_length(encoded - 1, pos, end, "compact string/bytes")


def _legacy_length_prefixed(kind: str, read_length, what: str) -> Walker:
    """A classic string (int16 length) or bytes (int32 length); -1 is null."""
    def walk(buf, pos, end, budget):
        if budget.sizes is not None:
            budget.sizes.append((pos, kind))
        length, pos = read_length(buf, pos, end)
        if length < -1:
            raise RequestOutOfBounds(f"{what} length {length}")
        if length == -1:
            return pos
        return _check_length(length, pos, end, what)
    return walk


_legacy_string = _legacy_length_prefixed("int16", _int16, "string")
_legacy_bytes = _legacy_length_prefixed("int32", _int32, "bytes")


def _primitive_walker(kafka_type: str, flexible: bool) -> Walker:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _fixed(size)
    if kafka_type == "string":
        return _compact_bytes if flexible else _legacy_string
    if kafka_type in ("bytes", "records"):
        return _compact_bytes if flexible else _legacy_bytes
    raise TypeError(f"no bounds walker for kafka type {kafka_type!r}")


# ---- arrays ------------------------------------------------------------------------------------

def _read_count(buf, pos, end, flexible: bool, budget: ElementBudget) -> tuple[int, int]:
    """Element count, or -1 for a null one."""
    if budget.sizes is not None:
        budget.sizes.append((pos, "uvarint" if flexible else "int32"))
    if flexible:
        encoded, pos = read_uvarint(buf, pos, end)
        return encoded - 1, pos
    count, pos = _int32(buf, pos, end)
    if count < -1:
        raise RequestOutOfBounds(f"array count {count}")
    return count, pos


def _array(element: Walker, flexible: bool, element_min: int, element_fixed: int | None) -> Walker:
    def walk(buf, pos, end, budget):
        count, pos = _read_count(buf, pos, end, flexible, budget)
        if count <= 0:
            return pos
        # Kafka's rule (its generated readers): a collection can't be larger
        # than the bytes left to fill it; here with each element's least size.
        if count * element_min > end - pos:
            raise RequestOutOfBounds(
                f"tried to allocate a collection of size {count}, but there are only "
                f"{end - pos} bytes remaining")
        budget.take(count)
        if element_fixed is not None:
            return pos + count * element_fixed
        for _ in range(count):
            pos = element(buf, pos, end, budget)
        return pos
    return walk


# ---- entities ----------------------------------------------------------------------------------

class _FieldShape:
    """How to walk one field: `walker` always works; `kind` (with `args`) lets
    the entity's generated walker inline the common cases instead of a call."""

    __slots__ = ("walker", "min_size", "fixed", "kind", "args")

    def __init__(self, walker: Walker, min_size: int, fixed: int | None, kind: str = "call", args: tuple = ()):
        self.walker, self.min_size, self.fixed, self.kind, self.args = walker, min_size, fixed, kind, args


def unwrap_field_type(field_type):
    """(inner type, is_optional, is_array) of a kio field annotation."""
    optional = False
    if get_origin(field_type) in (UnionType, Union):
        args = [a for a in get_args(field_type) if a is not NoneType]
        optional = len(args) != len(get_args(field_type))
        field_type = args[0]
    if get_origin(field_type) is tuple:
        args = get_args(field_type)
        if len(args) != 2 or not isinstance(args[1], EllipsisType):
            raise TypeError(f"unsupported tuple annotation {field_type}")
        inner = args[0]
        if get_origin(inner) in (UnionType, Union):
            inner = [a for a in get_args(inner) if a is not NoneType][0]
        return inner, optional, True
    return field_type, optional, False


def _nullable_entity(walker: Walker) -> Walker:
    """KIP-893: an int8 marker (-1 null, 1 present) before a nullable struct."""
    def walk(buf, pos, end, budget):
        if pos >= end:
            raise RequestOutOfBounds("nullable struct marker runs past the end of the frame")
        marker = buf[pos]
        pos += 1
        if marker == 0xFF:
            return pos
        return walker(buf, pos, end, budget)
    return walk


def _field_shape(field, flexible: bool, is_request_header: bool, is_tag: bool) -> _FieldShape:
    inner, optional, is_array = unwrap_field_type(field.type)
    if is_tag:
        optional = False  # a tagged field's absence is its null (as kio's writer has it)
    kind = "call"
    if is_request_header and field.name == "client_id":
        # Kafka keeps the header's client_id a legacy nullable string in every version.
        walker, min_size, fixed = _legacy_string, 2, None
    elif is_dataclass(inner):
        entity = _entity_shape(inner)
        walker, min_size, fixed = entity.walker, entity.min_size, entity.fixed
        if optional and not is_array:
            walker, min_size, fixed = _nullable_entity(walker), 1, None
    else:
        kafka_type = field.metadata["kafka_type"]
        walker = _primitive_walker(kafka_type, flexible)
        fixed = _FIXED_SIZES.get(kafka_type)
        min_size = fixed if fixed is not None else (1 if flexible else (2 if kafka_type == "string" else 4))
        if walker is _compact_bytes:
            kind = "compact"
    if is_array:
        element, element_min, element_fixed = walker, max(min_size, 1), fixed
        walker = _array(element, flexible, element_min, element_fixed)
        return _FieldShape(walker, 1 if flexible else 4, None, "array", (element, flexible, element_min, element_fixed))
    return _FieldShape(walker, min_size, fixed, kind)


# Source of the inlined steps of a generated entity walker. Every read checks
# `end` before it touches the buffer; a run of fixed-size fields only moves
# `pos`, and the check at the end of the entity (or the next read) catches a
# run that went past the end.
_INLINE_VARINT = """\
    if sizes is not None:
        sizes.append((pos, "uvarint"))
    if pos >= end:
        raise RequestOutOfBounds("varint runs past the end of the frame")
    n = buf[pos]
    if n < 128:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos, end)
"""
_INLINE_COMPACT = _INLINE_VARINT + """\
    if n > 1:
        n -= 1
        if n > end - pos:
            raise RequestOutOfBounds(f"compact string/bytes declares {n} bytes, but there are only "
                                     f"{end - pos} bytes remaining")
        pos += n
"""
_INLINE_LEGACY_COUNT = """\
    if sizes is not None:
        sizes.append((pos, "int32"))
    if pos + 4 > end:
        raise RequestOutOfBounds("int32 length runs past the end of the frame")
    n = _unpack_int32(buf, pos)[0]
    pos += 4
    if n < -1:
        raise RequestOutOfBounds(f"array count {n}")
"""
_INLINE_ARRAY_BODY = """\
    if n > 0:
        if n * {element_min} > end - pos:
            raise RequestOutOfBounds(f"tried to allocate a collection of size {{n}}, but there are only "
                                     f"{{end - pos}} bytes remaining")
        budget.take(n)
{advance}
"""


@functools.cache
def _entity_shape(entity_type) -> _FieldShape:
    flexible = bool(entity_type.__flexible__)
    is_request_header = entity_type.__name__ == "RequestHeader"
    tagged: dict[int, Walker] = {}
    min_size = 0
    lines: list[str] = []
    namespace: dict = {"RequestOutOfBounds": RequestOutOfBounds, "read_uvarint": read_uvarint,
                       "_unpack_int32": _INT32.unpack_from, "_walk_tagged_fields": _walk_tagged_fields,
                       "known_tags": tagged}
    fixed_run = 0
    all_fixed = not flexible
    for index, field in enumerate(fields(entity_type)):
        tag = field.metadata.get("tag")
        shape = _field_shape(field, flexible, is_request_header, tag is not None)
        if tag is not None:
            tagged[int(tag)] = shape.walker
            continue
        min_size += shape.min_size
        if shape.fixed is not None:
            fixed_run += shape.fixed
            continue
        all_fixed = False
        if fixed_run:
            lines.append(f"    pos += {fixed_run}\n")
            fixed_run = 0
        if shape.kind == "compact":
            lines.append(_INLINE_COMPACT)
        elif shape.kind == "array":
            element, element_flexible, element_min, element_fixed = shape.args
            lines.append(_INLINE_VARINT + "    n -= 1\n" if element_flexible else _INLINE_LEGACY_COUNT)
            if element_fixed is not None:
                advance = f"        pos += n * {element_fixed}"
            else:
                namespace[f"element_{index}"] = element
                advance = f"        for _ in range(n):\n            pos = element_{index}(buf, pos, end, budget)"
            lines.append(_INLINE_ARRAY_BODY.format(element_min=element_min, advance=advance))
        else:
            namespace[f"step_{index}"] = shape.walker
            lines.append(f"    pos = step_{index}(buf, pos, end, budget)\n")
    if fixed_run:
        lines.append(f"    pos += {fixed_run}\n")
    if flexible:
        min_size += 1  # the tagged-field count
        # Almost every entity carries no tagged field: one zero byte.
        lines.append("    if sizes is None and pos < end and buf[pos] == 0:\n        pos += 1\n"
                     "    else:\n        pos = _walk_tagged_fields(buf, pos, end, budget, known_tags)\n")
    lines.append("    if pos > end:\n"
                 f"        raise RequestOutOfBounds({entity_type.__name__ + ' runs past the end of the frame'!r})\n"
                 "    return pos\n")
    source = "def walk(buf, pos, end, budget):\n    sizes = budget.sizes\n" + "".join(lines)
    exec(compile(source, f"<bounds walker of {entity_type.__module__}.{entity_type.__name__}>", "exec"),
         namespace)
    fixed_total = min_size if all_fixed else None
    return _FieldShape(namespace["walk"], min_size, fixed_total)


def _walk_tagged_fields(buf, pos, end, budget, known: dict[int, Walker]) -> int:
    if budget.sizes is not None:
        budget.sizes.append((pos, "tagged"))
    count, pos = read_uvarint(buf, pos, end)
    # Each tagged field takes at least two bytes: its tag and its size.
    if count * 2 > end - pos:
        raise RequestOutOfBounds(
            f"{count} tagged fields declared, but there are only {end - pos} bytes remaining")
    for _ in range(count):
        if budget.sizes is not None:
            budget.sizes.append((pos, "uvarint"))
        tag, pos = read_uvarint(buf, pos, end)
        if budget.sizes is not None:
            budget.sizes.append((pos, "uvarint"))
        size, pos = read_uvarint(buf, pos, end)
        field_end = _check_length(size, pos, end, f"tagged field {tag}")
        walker = known.get(tag)
        if walker is not None:
            # A known tag's value must fit in the size it declared.
            walker(buf, pos, field_end, budget)
        pos = field_end
    return pos


def entity_walker(entity_type) -> Walker:
    """The bounds walker of one kio entity class (request, header or nested)."""
    return _entity_shape(entity_type).walker


def check_request(header_schema, body_schema, frame: bytes | memoryview,
                  sizes: list | None = None) -> int:
    """Walk header and body; return the end of the body, or raise RequestOutOfBounds.

    Trailing bytes after the body are allowed, as Kafka's parser allows them.
    `sizes`: see ElementBudget.
    """
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    end = len(buf)
    budget = ElementBudget(sizes=sizes)
    pos = entity_walker(header_schema)(buf, 0, end, budget)
    return entity_walker(body_schema)(buf, pos, end, budget)
