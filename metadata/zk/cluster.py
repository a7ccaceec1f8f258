"""The cluster id znode (Kafka's ClusterIdZNode)."""
from __future__ import annotations

from metadata import zk_paths
from metadata.zk.payloads import decode_json, encode_json, generate_kafka_uuid
from metadata.zk.session import ZkSession


class ClusterZk:
    """/cluster/id: the cluster id, created once by the first writer."""

    def __init__(self, session: ZkSession):
        self._session = session

    def id(self) -> str | None:
        found = self._session.get(zk_paths.CLUSTER_ID)
        return None if found is None else decode_json(found[0])["id"]

    def get_or_create_id(self, proposed_cluster_id: str | None = None) -> str:
        """The cluster id in /cluster/id, creating it if absent; the first writer wins."""
        existing = self.id()
        if existing is not None:
            return existing
        proposed = proposed_cluster_id or generate_kafka_uuid()
        # Kafka writes this version as a string.
        if self._session.create_if_absent(zk_paths.CLUSTER_ID, encode_json({"version": "1", "id": proposed})):
            return proposed
        return self.id()
