"""/latest_producer_id_block (Kafka's ProducerIdBlockZNode): the last block of
producer ids handed out, taken by a read and a write conditional on the
znode's version (cluster/transactions/producer_ids.py decides the blocks)."""
from __future__ import annotations

from metadata import zk_paths
from metadata.zk.session import ZkSession


class ProducerIdsZk:
    """/latest_producer_id_block, read and conditionally replaced."""

    def __init__(self, session: ZkSession):
        self._session = session

    def latest_block(self) -> tuple[bytes | None, int]:
        """(data, znode version); (None, -1) before the first block."""
        return self._session.get_data_and_version(zk_paths.LATEST_PRODUCER_ID_BLOCK)

    def set_latest_block(self, data: bytes, expected_version: int) -> tuple[bool, int]:
        """Write only if the znode is still at ``expected_version`` (-1: create it,
        only if absent); -> (written, new version)."""
        return self._session.conditional_update_path(zk_paths.LATEST_PRODUCER_ID_BLOCK, data, expected_version)
