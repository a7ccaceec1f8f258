"""storage.byte_reader.ByteReader, the one reader of Kafka's schema-encoded
bytes (internal-topic records, hand-read responses): values, nulls, bounds,
and that every malformed input raises the caller's error type."""
import struct

import pytest

from storage.byte_reader import ByteReader, MalformedBytesError


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_reads_fixed_and_variable_fields_in_order():
    data = (struct.pack(">bhiq", -3, 7, -9, 1 << 40) + _uvarint(300) + struct.pack(">h", 2) + b"ab"
            + _uvarint(4) + b"xyz" + _uvarint(0) + struct.pack(">i", 2) + b"\x01\x02"
            + _uvarint(3) + struct.pack(">ii", 5, 6)
            + _uvarint(1) + _uvarint(7) + _uvarint(2) + b"tv")
    r = ByteReader(bytearray(data))  # writable input is fine
    assert (r.int8(), r.int16(), r.int32(), r.int64(), r.uvarint()) == (-3, 7, -9, 1 << 40, 300)
    assert r.string() == "ab"
    assert r.string(compact=True) == "xyz"
    assert r.string(nullable=True, compact=True) is None
    assert r.bytes_() == b"\x01\x02"
    assert r.array(r.int32) == [5, 6]
    assert r.tagged_fields() == {7: b"tv"}
    assert r.remaining == 0


class Custom(Exception):
    pass


@pytest.mark.parametrize("data, read", [
    (b"\x00", lambda r: r.int16()),
    (b"\xff\xff\xff\xff\xff\xff", lambda r: r.uvarint()),
    (struct.pack(">h", -1), lambda r: r.string()),
    (struct.pack(">h", 5) + b"ab", lambda r: r.string()),
    (struct.pack(">h", 2) + b"\xff\xfe", lambda r: r.string()),
    (_uvarint(0), lambda r: r.bytes_(compact=True)),
    (struct.pack(">i", 1000) + b"\x00", lambda r: r.array_length()),
    (_uvarint(1) + _uvarint(1) + _uvarint(9) + b"x", lambda r: r.tagged_fields()),
    (b"\x00\x01", lambda r: r.unpack(">i")),
])
def test_malformed_input_raises_the_callers_error(data, read):
    with pytest.raises(Custom):
        read(ByteReader(data, error=Custom))
    with pytest.raises(MalformedBytesError):
        read(ByteReader(data))


def test_null_array_is_allowed_only_when_nullable():
    assert ByteReader(struct.pack(">i", -1)).array_length(nullable=True) == -1
    assert ByteReader(_uvarint(0)).array(lambda: 1) == []
    with pytest.raises(MalformedBytesError):
        ByteReader(struct.pack(">i", -1)).array_length()
