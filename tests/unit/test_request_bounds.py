"""The bounds walk that runs before kio decodes a request (net/request_bounds.py)."""
from __future__ import annotations

import datetime
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from net.codec import MalformedRequest, _reader, decode_request, encode_request, request_schema
from net.request_bounds import (
    MAX_ELEMENTS_PER_REQUEST,
    RequestOutOfBounds,
    check_request,
    read_uvarint,
)
from tests.protocol_fuzz import RequestGenerator, generate_inputs, served_versions

REPO = Path(__file__).resolve().parents[2]
LEAVE_GROUP_LYING_COUNT = bytes.fromhex(
    "00000046000d00050000005700056b66757a7a000e667a2d6a2d3030303030303536ffffffff0f07667a2d6d2d31"
    "000566757a7a00010a667a2d696e73742d310000000534c04b1604a6")[4:]


def _check(api_key: int, version: int, frame: bytes) -> int:
    schema = request_schema(api_key, version)
    return check_request(schema.__header_schema__, schema, frame)


def test_the_issue_frame_is_refused_before_kio_sees_it():
    with pytest.raises(MalformedRequest, match="collection of size 4294967294, but there are only 35 bytes"):
        decode_request(13, 5, LEAVE_GROUP_LYING_COUNT)


@pytest.mark.parametrize("api_key,version", served_versions())
def test_valid_requests_pass_and_the_walk_ends_where_kio_ends(api_key, version):
    """No false alarms: whatever a client may validly send is let through,
    and the walk agrees with kio's reader byte for byte."""
    rng = random.Random(api_key * 100 + version)
    generator = RequestGenerator(rng)
    schema = request_schema(api_key, version)
    for _ in range(15):
        frame = encode_request(generator.request(api_key, version), correlation_id=5)[4:]
        end = check_request(schema.__header_schema__, schema, frame)
        # kio's readers return how many bytes they used from the offset given.
        _header, header_size = _reader(schema.__header_schema__)(frame, 0)
        _body, body_size = _reader(schema)(frame, header_size)
        assert end == header_size + body_size
        decode_request(api_key, version, frame)


def _leave_group_v5(count_varint: bytes, rest: bytes = b"") -> bytes:
    # header v2: api key, version, correlation id, client id (legacy), no tags
    header = struct.pack(">hhih", 13, 5, 1, 1) + b"c" + b"\x00"
    return header + b"\x02g" + count_varint + rest


def test_compact_array_count_larger_than_the_bytes_left():
    with pytest.raises(RequestOutOfBounds, match="collection of size 1000"):
        _check(13, 5, _leave_group_v5(b"\xe9\x07", b"\x00" * 10))


def test_compact_string_length_larger_than_the_bytes_left():
    # one member whose member_id claims 200 bytes
    with pytest.raises(RequestOutOfBounds, match="declares 200 bytes"):
        _check(13, 5, _leave_group_v5(b"\x02", b"\xc9\x01abc"))


def test_varint_longer_than_five_bytes():
    with pytest.raises(RequestOutOfBounds, match="longer than 5 bytes"):
        read_uvarint(memoryview(b"\xff\xff\xff\xff\xff\x01"), 0, 6)
    with pytest.raises(RequestOutOfBounds, match="past the end"):
        read_uvarint(memoryview(b"\xff\xff"), 0, 2)


def test_tagged_field_size_larger_than_the_bytes_left():
    # LeaveGroup v5 body with no members and one tagged field claiming 100 bytes
    frame = _leave_group_v5(b"\x01", b"\x01\x00\x64xx")
    with pytest.raises(RequestOutOfBounds, match="tagged field 0 declares 100 bytes"):
        _check(13, 5, frame)


def test_known_tagged_field_value_must_fit_its_declared_size():
    # Fetch v12: cluster_id is tagged field 0 of the request (a compact string).
    schema = request_schema(1, 12)
    frame = encode_request(schema(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1, isolation_level=0,
                                  session_id=0, session_epoch=-1, topics=(), forgotten_topics_data=(),
                                  rack_id="", cluster_id="abc"), 1)[4:]
    assert _check(1, 12, frame) == len(frame)
    # tags: count=1, tag=0, size=4, value=compact string "abc" (04 61 62 63): declare size 2 instead
    at = frame.rindex(b"\x01\x00\x04\x04abc")
    lying = frame[:at] + b"\x01\x00\x02\x04abc"
    with pytest.raises(RequestOutOfBounds):
        _check(1, 12, lying)


def test_legacy_array_count_and_string_length():
    # Metadata v1 (not flexible): topics count int32 = 0x7fffffff
    header = struct.pack(">hhih", 3, 1, 1, -1)
    with pytest.raises(RequestOutOfBounds, match="collection of size 2147483647"):
        _check(3, 1, header + struct.pack(">i", 2**31 - 1))
    with pytest.raises(RequestOutOfBounds, match="array count -2"):
        _check(3, 1, header + struct.pack(">i", -2))
    with pytest.raises(RequestOutOfBounds, match="declares 5 bytes"):
        _check(3, 1, header + struct.pack(">ih", 1, 5) + b"ab")
    assert _check(3, 1, header + struct.pack(">i", -1)) == len(header) + 4  # null array: all topics


def test_element_budget_caps_what_a_frame_of_tiny_elements_declares():
    # Metadata v1 topics: MAX+1 empty strings, each 2 bytes on the wire: all bytes present.
    count = MAX_ELEMENTS_PER_REQUEST + 1
    frame = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", count) + b"\x00\x00" * count
    with pytest.raises(RequestOutOfBounds, match="more than 250000 array elements"):
        _check(3, 1, frame)


def test_mutated_inputs_never_abort_the_decoding_process():
    """The fuzzer's inputs through the codec, in a child process: a kio abort
    would kill it (SIGABRT), which no exception handler in-process can catch."""
    code = textwrap.dedent("""
        import collections
        from net.codec import MalformedRequest, decode_request
        from tests.protocol_fuzz import generate_inputs
        outcomes = collections.Counter()
        for item in generate_inputs(seed=7, count=4000):
            try:
                decode_request(item.api_key, item.api_version, item.frame[4:])
                outcomes["decoded"] += 1
            except MalformedRequest:
                outcomes["refused"] += 1
        print(outcomes["decoded"], outcomes["refused"])
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    decoded, refused = map(int, done.stdout.split())
    assert decoded + refused == 4000 and decoded > 0 and refused > 0


def test_generated_inputs_are_reproducible_from_the_seed():
    first = [i.frame for i in generate_inputs(seed=11, count=300)]
    again = [i.frame for i in generate_inputs(seed=11, count=300)]
    other = [i.frame for i in generate_inputs(seed=12, count=300)]
    assert first == again and first != other
