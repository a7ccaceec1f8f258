"""__consumer_offsets record formats, partition_for_group and the consumer
protocol subscription reader."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.groups.consumer_protocol import decode_subscription_topics, encode_assignment, encode_subscription
from cluster.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    group_metadata_tombstone,
    java_string_hash_code,
    offset_commit_tombstone,
    partition_for_group,
)


def hx(text: str) -> bytes:
    """Hex with spaces and comments (after '#') allowed, one field per line."""
    return bytes.fromhex("".join(line.split("#")[0] for line in text.splitlines()))


TS = "00 00 01 8b cf e5 68 00"  # 1_700_000_000_000 = 0x018BCFE56800


# -- hand-computed bytes ------------------------------------------------------------


def test_offset_commit_key_bytes():
    assert encode_offset_commit_key("g", "t", 0) == hx("""
        00 01        # key version 1 = offset commit
        00 01 67     # group "g"
        00 01 74     # topic "t"
        00 00 00 00  # partition 0
    """)
    assert decode_key(hx("00 01 0001 67 0001 74 00000007")) == OffsetCommitKey("g", "t", 7)
    # version 0 has the same layout
    assert decode_key(hx("00 00 0001 67 0001 74 00000007")) == OffsetCommitKey("g", "t", 7)


def test_group_metadata_key_bytes():
    assert encode_group_metadata_key("g") == hx("00 02  00 01 67")
    assert decode_key(hx("00 02 00 01 67")) == GroupMetadataKey("g")


def test_offset_commit_value_v3_bytes():
    value = OffsetCommitValue(offset=100, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_000)
    expected = hx(f"""
        00 03                    # version 3
        00 00 00 00 00 00 00 64  # offset 100
        00 00 00 05              # leader epoch 5
        00 04 6d 65 74 61        # metadata "meta"
        {TS}                     # commit timestamp
    """)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_v1_written_when_expire_timestamp_set():
    value = OffsetCommitValue(offset=1, leader_epoch=9, metadata="", commit_timestamp=1_700_000_000_000,
                              expire_timestamp=1_700_000_123_456)
    expected = hx(f"""
        00 01                    # version 1 (the only one with an expire timestamp)
        00 00 00 00 00 00 00 01  # offset
        00 00                    # metadata ""
        {TS}                     # commit timestamp
        00 00 01 8b cf e7 4a 40  # expire timestamp 1_700_000_123_456
    """)
    assert encode_offset_commit_value(value) == expected
    # v1 has no leader epoch
    assert decode_offset_commit_value(expected) == OffsetCommitValue(1, -1, "", 1_700_000_000_000, 1_700_000_123_456)


def test_offset_commit_value_old_and_flexible_versions_read():
    v0 = hx(f"00 00  0000000000000009  0002 6869  {TS}")
    assert decode_offset_commit_value(v0) == OffsetCommitValue(9, -1, "hi", 1_700_000_000_000, -1)
    v2 = hx(f"00 02  0000000000000009  0002 6869  {TS}")
    assert decode_offset_commit_value(v2) == OffsetCommitValue(9, -1, "hi", 1_700_000_000_000, -1)
    v4 = hx(f"""
        00 04
        0000000000000009
        00000003          # leader epoch
        03 6869           # compact string: length + 1
        {TS}
        01 00 02 abcd     # one tagged field (tag 0, 2 bytes), skipped
    """)
    assert decode_offset_commit_value(v4) == OffsetCommitValue(9, 3, "hi", 1_700_000_000_000, -1)
    value = OffsetCommitValue(9, 3, "hi", 1_700_000_000_000)
    assert decode_offset_commit_value(encode_offset_commit_value(value, version=4)) == value


def test_group_metadata_value_v3_bytes():
    sub = encode_subscription(["t"])
    assert sub == hx("0000  00000001  0001 74  ffffffff")
    value = GroupMetadataValue(
        protocol_type="consumer", generation=1, protocol="range", leader="m-1",
        current_state_timestamp=1_700_000_000_000,
        members=(MemberMetadataValue("m-1", None, "c", "/127.0.0.1", 300_000, 10_000, sub, b""),),
    )
    expected = hx(f"""
        00 03                            # version 3
        00 08 63 6f 6e 73 75 6d 65 72    # protocol type "consumer"
        00 00 00 01                      # generation 1
        00 05 72 61 6e 67 65             # protocol "range"
        00 03 6d 2d 31                   # leader "m-1"
        {TS}                             # current state timestamp
        00 00 00 01                      # 1 member
        00 03 6d 2d 31                   #   member id "m-1"
        ff ff                            #   group instance id null
        00 01 63                         #   client id "c"
        00 0a 2f 31 32 37 2e 30 2e 30 2e 31  # client host "/127.0.0.1"
        00 04 93 e0                      #   rebalance timeout 300000
        00 00 27 10                      #   session timeout 10000
        00 00 00 0d 0000 00000001 0001 74 ffffffff  # subscription (13 bytes)
        00 00 00 00                      #   assignment (empty)
    """)
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_group_metadata_value_static_member_and_empty_group():
    value = GroupMetadataValue("consumer", 7, None, None, 1_700_000_000_000, ())
    assert encode_group_metadata_value(value) == hx(f"""
        0003  0008 636f6e73756d6572  00000007
        ffff                # protocol null
        ffff                # leader null
        {TS}
        00000000            # no members
    """)
    static = GroupMetadataValue("consumer", 2, "range", "m", 5, (
        MemberMetadataValue("m", "inst-1", "c", "h", 1, 2, b"s", b"a"),))
    data = encode_group_metadata_value(static)
    assert b"\x00\x06inst-1" in data
    assert decode_group_metadata_value(data) == static


def test_group_metadata_value_old_versions():
    # v0: no rebalance timeout (reads as the session timeout), no state timestamp
    v0 = hx("""
        0000  0008 636f6e73756d6572  00000003  0005 72616e6765  0001 6d
        00000001
        0001 6d  0001 63  0001 68
        00002710            # session timeout 10000
        00000001 aa  00000001 bb
    """)
    assert decode_group_metadata_value(v0) == GroupMetadataValue(
        "consumer", 3, "range", "m", -1, (MemberMetadataValue("m", None, "c", "h", 10_000, 10_000, b"\xaa", b"\xbb"),))
    member = MemberMetadataValue("m", None, "c", "h", 20_000, 10_000, b"x", b"y")
    for version in (1, 2, 3, 4):
        value = GroupMetadataValue("consumer", 3, "range", "m", 42 if version >= 2 else -1, (member,))
        assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == value
    with pytest.raises(RecordFormatError):
        encode_group_metadata_value(GroupMetadataValue("c", 1, "p", "m", 1, (
            MemberMetadataValue("m", "static", "c", "h", 1, 1, b"", b""),)), version=2)


def test_unknown_key_versions_and_garbage():
    assert decode_key(hx("0003 0001 67")) == UnknownKey(3)
    for bad in (b"", b"\x00", hx("0001 0005 67")):
        with pytest.raises(RecordFormatError):
            decode_key(bad)
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(hx("0009 00"))
    with pytest.raises(RecordFormatError):
        decode_group_metadata_value(hx("0003 0008 636f6e73"))


def test_tombstones():
    assert offset_commit_tombstone("g", "t", 1) == (encode_offset_commit_key("g", "t", 1), None)
    assert group_metadata_tombstone("g") == (encode_group_metadata_key("g"), None)


# -- round trips -----------------------------------------------------------------------

text = st.text(max_size=20)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200)
@given(group=text, topic=text, partition=i32)
def test_offset_commit_key_round_trip(group, topic, partition):
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetCommitKey(group, topic, partition)


@settings(max_examples=200)
@given(offset=i64, epoch=i32, metadata=text, commit=i64, expire=st.one_of(st.just(-1), i64))
def test_offset_commit_value_round_trip(offset, epoch, metadata, commit, expire):
    value = OffsetCommitValue(offset, epoch, metadata, commit, expire)
    decoded = decode_offset_commit_value(encode_offset_commit_value(value))
    if expire == -1:
        assert decoded == value
    else:  # v1: no leader epoch
        assert decoded == OffsetCommitValue(offset, -1, metadata, commit, expire)


members = st.builds(
    MemberMetadataValue, text, st.one_of(st.none(), text), text, text, i32, i32, st.binary(max_size=30),
    st.binary(max_size=30))


@settings(max_examples=200)
@given(protocol_type=text, generation=i32, protocol=st.one_of(st.none(), text), leader=st.one_of(st.none(), text),
       ts=i64, members=st.lists(members, max_size=4), version=st.sampled_from([3, 4]))
def test_group_metadata_value_round_trip(protocol_type, generation, protocol, leader, ts, members, version):
    value = GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))
    assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == value


# -- partition_for_group -----------------------------------------------------------------

# Values from Java: "x".hashCode() (checked with a JDK).
JAVA_HASH_CODES = {
    "": 0,
    "a": 97,
    "hello": 99162322,
    "Hello World": -862545276,  # overflows int
    "polygenelubricants": -(2**31),  # Integer.MIN_VALUE
    "my-consumer-group-with-a-long-name-0123456789": -705239963,
    "console-consumer-12345": 158455506,
    "grüße-\U0001F600": 347391577,  # non-BMP: hashed as a UTF-16 surrogate pair
}


@pytest.mark.parametrize("value,expected", JAVA_HASH_CODES.items())
def test_java_string_hash_code(value, expected):
    assert java_string_hash_code(value) == expected


def test_partition_for_group_matches_kafka():
    # Utils.abs(h) % 50, with Utils.abs(x) = x & 0x7fffffff
    assert partition_for_group("", 50) == 0
    assert partition_for_group("a", 50) == 47
    assert partition_for_group("hello", 50) == 22
    assert partition_for_group("Hello World", 50) == 22  # 1284938372 % 50
    assert partition_for_group("polygenelubricants", 50) == 0  # MIN_VALUE & 0x7fffffff = 0
    assert partition_for_group("my-consumer-group-with-a-long-name-0123456789", 50) == 35
    assert partition_for_group("console-consumer-12345", 50) == 6
    assert partition_for_group("grüße-\U0001F600", 50) == 27
    assert partition_for_group("hello", 1) == 0
    with pytest.raises(ValueError):
        partition_for_group("g", 0)


# -- consumer protocol ---------------------------------------------------------------------


def test_subscription_topics_any_version():
    for version in range(4):
        data = encode_subscription(["b", "a"], b"ud", version=version, owned_partitions={"a": [0, 1]},
                                   generation_id=4, rack_id="r1")
        assert decode_subscription_topics(data) == {"a", "b"}
    assert decode_subscription_topics(encode_subscription([])) == set()


def test_subscription_topics_garbage_is_unknown():
    assert decode_subscription_topics(b"") is None
    assert decode_subscription_topics(b"\x00\x00\x00\x00\x00\x05") is None
    assert decode_subscription_topics(b"\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff") is None  # negative version
    assert decode_subscription_topics(encode_subscription(["t"])[:-2]) is None


def test_assignment_layout():
    assert encode_assignment({"t": [0, 2]}) == hx("0000  00000001  0001 74  00000002 00000000 00000002  ffffffff")
