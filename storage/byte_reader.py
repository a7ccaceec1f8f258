"""The one reader of Kafka's byte encodings outside the protocol codec: the
schema encoding of internal-topic keys and values (``__consumer_offsets``,
``__transaction_state``: int16/int32/int64, unsigned varints, legacy and
compact strings, bytes and arrays, tagged fields) and of the few responses a
tool reads by hand.

The primitives are kio's native readers (``kio._kio_native``, the codec the
protocol layer uses; it loads without kio's schema classes, so replica
processes stay light). This class adds the position, bounds checks on
counts, and the caller's error type: every malformed, truncated or null-
where-not-allowed input raises ``error`` (default :class:`MalformedBytesError`).

The zig-zag varints inside record batches are read by
``storage.records.read_varint`` (the record decoder's hot loop inlines it).
"""

from __future__ import annotations

import struct
from typing import Callable, NoReturn, TypeVar

from kio import _kio_native as kio_native

from storage.errors import StorageError

T = TypeVar("T")


class MalformedBytesError(StorageError, ValueError):
    """Bytes that do not hold what the reader was told to expect."""


class ByteReader:
    __slots__ = ("data", "pos", "error")

    def __init__(self, data, pos: int = 0, error: type[Exception] = MalformedBytesError):
        view = memoryview(data)
        # kio's readers take read-only buffers only
        self.data = view if view.readonly else view.toreadonly()
        self.pos = pos
        self.error = error

    def fail(self, message: str) -> NoReturn:
        raise self.error(message)

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def _read(self, reader: Callable[[memoryview, int], tuple[T, int]], what: str) -> T:
        try:
            value, size = reader(self.data, self.pos)
        except Exception as exc:  # kio's BufferUnderflow, UnexpectedNull, InvalidUnicode, ValueError
            raise self.error(f"cannot read {what} at byte {self.pos}: {exc}") from None
        self.pos += size
        return value

    # ---- fixed size ------------------------------------------------------------------------
    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes, as a view."""
        if n < 0 or n > self.remaining:
            self.fail(f"{n} bytes wanted at byte {self.pos}, {max(self.remaining, 0)} left: the data is truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> tuple:
        """``struct`` fields, e.g. ``">qhib"``."""
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def int8(self) -> int:
        return self._read(kio_native.read_int8, "an int8")

    def int16(self) -> int:
        return self._read(kio_native.read_int16, "an int16")

    def int32(self) -> int:
        return self._read(kio_native.read_int32, "an int32")

    def int64(self) -> int:
        return self._read(kio_native.read_int64, "an int64")

    # ---- variable size ---------------------------------------------------------------------
    def uvarint(self) -> int:
        """Kafka's unsigned varint (at most 5 bytes)."""
        return self._read(kio_native.read_unsigned_varint, "an unsigned varint")

    def _length(self, compact: bool, what: str) -> int:
        """A length or count: compact (unsigned varint, n + 1, 0 = null) or
        legacy (int16 for strings, int32 otherwise); -1 = null."""
        if compact:
            return self.uvarint() - 1
        return self.int16() if what == "string" else self.int32()

    def string(self, *, nullable: bool = False, compact: bool = False) -> str | None:
        n = self._length(compact, "string")
        if n < 0:
            if not nullable:
                self.fail(f"a non-nullable string is null at byte {self.pos}")
            return None
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail(f"a string is not UTF-8: {exc}")

    def bytes_(self, *, nullable: bool = False, compact: bool = False) -> bytes | None:
        n = self._length(compact, "bytes")
        if n < 0:
            if not nullable:
                self.fail(f"non-nullable bytes are null at byte {self.pos}")
            return None
        return bytes(self.take(n))

    def array_length(self, *, nullable: bool = False, compact: bool = False) -> int:
        """An array's element count (-1 = null, when ``nullable``); never more
        than the bytes left, so a corrupt count cannot make a caller loop long."""
        n = self._length(compact, "array")
        if n < 0 and not nullable:
            self.fail(f"a non-nullable array is null at byte {self.pos}")
        if n > self.remaining:
            self.fail(f"an array count of {n} is beyond the data ({self.remaining} bytes left)")
        return n

    def array(self, item: Callable[[], T], *, compact: bool = True) -> list[T]:
        """The elements ``item()`` reads, one per element (a null array is empty)."""
        return [item() for _ in range(max(self.array_length(nullable=True, compact=compact), 0))]

    def tagged_fields(self) -> dict[int, bytes]:
        """A flexible version's tagged fields: tag -> raw value."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = bytes(self.take(self.uvarint()))
        return fields

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())
