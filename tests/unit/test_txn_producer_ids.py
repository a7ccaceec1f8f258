"""Producer id blocks in /latest_producer_id_block (Kafka's ZooKeeper-mode JSON)."""
import asyncio
import json

import pytest

from cluster.transactions.producer_ids import (ProducerIdBlock, ProducerIdManager,
                                               ProducerIdsExhausted, allocate_block, decode_block, encode_block)


class FakeZk:
    """A znode with a version; ``interfere`` writes another broker's block before our write."""

    def __init__(self, data=None, exists=True):
        self.data, self.version, self.exists = data, 0 if exists else -1, exists
        self.interfere = 0
        self.calls = []

    def latest_block(self):
        self.calls.append("get")
        return (self.data or None) if self.exists else None, self.version

    def set_latest_block(self, data, expected_version):
        self.calls.append("set")
        if self.interfere:
            self.interfere -= 1
            current = decode_block(self.data) if self.data else None
            other = ProducerIdBlock(9, current.next_block_first_id if current else 0)
            self.data, self.version, self.exists = encode_block(other), self.version + 1, True
        if expected_version != self.version or (expected_version < 0) == self.exists:
            return False, -1
        self.data, self.version, self.exists = data, self.version + 1, True
        return True, self.version


def test_block_json_is_kafkas():
    data = encode_block(ProducerIdBlock(1001, 2000))
    assert json.loads(data) == {"version": 1, "broker": 1001, "block_start": "2000", "block_end": "2999"}
    assert decode_block(b'{"version":1,"broker":3,"block_start":"0","block_end":"999"}') == ProducerIdBlock(3, 0, 1000)


def test_first_block_from_an_empty_znode_and_the_next():
    zk = FakeZk()
    assert allocate_block(zk, 1) == ProducerIdBlock(1, 0)
    assert allocate_block(zk, 2) == ProducerIdBlock(2, 1000)
    assert json.loads(zk.data)["block_start"] == "1000"


def test_znode_created_when_missing():
    zk = FakeZk(exists=False)
    assert allocate_block(zk, 1) == ProducerIdBlock(1, 0)
    assert zk.exists


def test_conflicting_write_retries():
    zk = FakeZk(encode_block(ProducerIdBlock(5, 4000)))
    zk.interfere = 2
    assert allocate_block(zk, 1) == ProducerIdBlock(1, 7000)  # two other brokers took 5000 and 6000
    assert zk.calls == ["get", "set", "get", "set", "get", "set"]


def test_exhausted():
    zk = FakeZk(encode_block(ProducerIdBlock(5, (1 << 63) - 1000)))
    with pytest.raises(ProducerIdsExhausted):
        allocate_block(zk, 1)


def test_manager_hands_out_ids_in_order_across_blocks():
    async def main():
        zk = FakeZk()
        manager = ProducerIdManager(zk, 1)
        ids = [await manager.generate_producer_id() for _ in range(1001)]
        assert ids == list(range(1001))
        assert decode_block(zk.data) == ProducerIdBlock(1, 1000)
        # concurrent callers share one block fetch
        other = ProducerIdManager(lambda: zk, 2)
        got = await asyncio.gather(*(other.generate_producer_id() for _ in range(10)))
        assert sorted(got) == list(range(2000, 2010))
        assert zk.calls.count("set") == 3
    asyncio.run(main())


def test_against_real_zookeeper(zookeeper):
    # The unit session's shared server (tests/unit/conftest.py), in a chroot of its own: no JVM of its own.
    from metadata.testing import unique_chroot
    from metadata.kafka_zk import KafkaZkClient

    connect = unique_chroot(zookeeper.connect_string)
    with KafkaZkClient(connect) as a, KafkaZkClient(connect) as b:
        a.start()
        b.start()
        blocks = [allocate_block(a.producer_ids, 1), allocate_block(b.producer_ids, 2), allocate_block(a.producer_ids, 1)]
        assert [x.first_producer_id for x in blocks] == [0, 1000, 2000]
        data, version = a.producer_ids.latest_block()
        assert json.loads(data) == {"version": 1, "broker": 1, "block_start": "2000", "block_end": "2999"}
        assert version == 3
        assert a.producer_ids.set_latest_block(b"x", 1) == (False, -1)
