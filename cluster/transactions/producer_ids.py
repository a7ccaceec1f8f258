"""Producer ids in blocks from ZooKeeper, as Kafka's ZooKeeper mode allocates
them (ZkProducerIdManager, ProducerIdBlockZNode).

``/latest_producer_id_block`` holds the last block handed out, in Kafka's JSON::

    {"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}

(the ids as strings). A broker takes the next block by writing the following
1000 ids there, conditionally on the znode version it read; when another
broker wrote first the write fails and it reads again. Ids within a block are
handed out in order; a new block is fetched when the current one is used up.

``allocate_block`` is blocking (ZooKeeper calls); ``ProducerIdManager`` runs it
in an executor so an actor's event loop never waits on ZooKeeper.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, NamedTuple, Optional, Protocol

log = logging.getLogger("raykafka.producer_ids")

PRODUCER_ID_BLOCK_SIZE = 1000
BLOCK_ZNODE_VERSION = 1
INT64_MAX = (1 << 63) - 1
# Conditional writes lost to other brokers before giving up (each loss means
# another broker got a block: progress is made, so a bound only guards bugs).
MAX_ALLOCATION_ATTEMPTS = 100


class ProducerIdBlock(NamedTuple):
    broker_id: int
    first_producer_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


class ProducerIdsExhausted(Exception):
    pass


class BlockStore(Protocol):
    """The two ZooKeeper calls used (KafkaZkClient.producer_ids, metadata/zk/producer_ids.py, has them)."""

    def latest_block(self) -> tuple[Optional[bytes], int]: ...

    def set_latest_block(self, data: bytes, expected_version: int) -> tuple[bool, int]: ...


def encode_block(block: ProducerIdBlock) -> bytes:
    return json.dumps({"version": BLOCK_ZNODE_VERSION, "broker": block.broker_id,
                       "block_start": str(block.first_producer_id), "block_end": str(block.last_producer_id)},
                      separators=(",", ":")).encode()


def decode_block(data: bytes) -> ProducerIdBlock:
    body = json.loads(data)
    start, end = int(body["block_start"]), int(body["block_end"])
    if end < start:
        raise ValueError(f"producer id block ends before it starts: {body}")
    return ProducerIdBlock(int(body["broker"]), start, end - start + 1)


def allocate_block(store: BlockStore, broker_id: int) -> ProducerIdBlock:
    """Take the next block (blocking): read, compute, conditional write, retry on conflict."""
    for _ in range(MAX_ALLOCATION_ATTEMPTS):
        data, version = store.latest_block()
        if data:
            current = decode_block(data)
            if current.last_producer_id > INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
                raise ProducerIdsExhausted(f"every producer id is used (the last block ends at "
                                           f"{current.last_producer_id})")
            block = ProducerIdBlock(broker_id, current.next_block_first_id)
        else:
            block = ProducerIdBlock(broker_id, 0)
        written, new_version = store.set_latest_block(encode_block(block), version)
        if written:
            log.info("broker %d acquired producer id block %d..%d (znode version %d)", broker_id,
                     block.first_producer_id, block.last_producer_id, new_version)
            return block
    raise RuntimeError(f"no producer id block after {MAX_ALLOCATION_ATTEMPTS} conflicting writes")


class ProducerIdManager:
    """Hands out producer ids from this owner's current block; one block fetch at a time."""

    def __init__(self, store: Any, broker_id: int, executor: Any = None):
        """``store``: a BlockStore, or a function returning one (called in the
        executor, so it may connect to ZooKeeper)."""
        self.store = store
        self.broker_id = broker_id
        self._executor = executor
        self._block: Optional[ProducerIdBlock] = None
        self._next = 0
        self._lock: Optional[asyncio.Lock] = None

    async def generate_producer_id(self) -> int:
        if self._block is None or self._next > self._block.last_producer_id:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._block is None or self._next > self._block.last_producer_id:
                    block = await asyncio.get_running_loop().run_in_executor(self._executor, self._allocate)
                    self._block, self._next = block, block.first_producer_id
        producer_id = self._next
        self._next += 1
        return producer_id

    def _allocate(self) -> ProducerIdBlock:
        store = self.store if hasattr(self.store, "set_latest_block") else self.store()
        return allocate_block(store, self.broker_id)
