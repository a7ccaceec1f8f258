"""Requests to the controller under /admin (Kafka's DeleteTopicsZNode,
ReassignPartitionsZNode, PreferredReplicaElectionZNode): a tool or the admin
API writes one, the controller watches it, acts, and deletes it (fenced on
its epoch)."""
from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, Mapping, Sequence

from metadata import zk_paths
from metadata.zk.errors import (InvalidReplicaAssignmentError, PreferredReplicaElectionInProgressError,
                                TopicNotFoundError, ZkNoNodeError, ZkNodeExistsError)
from metadata.zk.payloads import (PREFERRED_REPLICA_ELECTION_VERSION, REASSIGN_PARTITIONS_VERSION,
                                  check_topic_partition, decode_json, encode_json)
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession


class AdminZk:
    """The /admin requests: topic deletions, partition reassignments, preferred replica elections."""

    def __init__(self, session: ZkSession):
        self._session = session

    def mark_topic_for_deletion(self, topic: str) -> bool:
        """Create /admin/delete_topics/<t> for the controller to act on; False if
        it was already marked."""
        if not self._session.exists(zk_paths.topic_path(topic)):
            raise TopicNotFoundError(f"Topic '{topic}' does not exist.")
        return self._session.create_if_absent(zk_paths.delete_topic_path(topic))

    def topics_marked_for_deletion(self) -> list[str]:
        return sorted(self._session.children(zk_paths.DELETE_TOPICS) or [])

    def watch_topic_deletions(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted topics marked for deletion) now and on every change."""
        return self._session.watch_children(zk_paths.DELETE_TOPICS, WatchHandle("delete_topics"), sorted, callback)

    def reassignment(self) -> dict[tuple[str, int], list[int]]:
        """/admin/reassign_partitions as {(topic, partition): target replicas}; {} when absent."""
        found = self._session.get(zk_paths.REASSIGN_PARTITIONS)
        return {} if found is None else (_decode_reassignment(found[0]) or {})

    def set_reassignment(self, reassignment: Mapping[tuple[str, int], Sequence[int]], *,
                         expected_controller_epoch_zk_version: int | None = None) -> None:
        """Create or overwrite /admin/reassign_partitions (Kafka's
        setOrCreatePartitionReassignment). An empty one deletes the znode, as
        Kafka's controller does once the last reassignment completes. With
        expected_controller_epoch_zk_version the write is fenced (ControllerMovedError)."""
        if not reassignment:
            self.delete_reassignment(
                expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)
            return
        data = _encode_reassignment(reassignment)
        path = zk_paths.REASSIGN_PARTITIONS
        if expected_controller_epoch_zk_version is None:
            self._session.set_or_create(path, data)
            return
        self._session.fenced_set_or_create(zk_paths.ADMIN, path, data, expected_controller_epoch_zk_version)

    def delete_reassignment(self, *, expected_controller_epoch_zk_version: int | None = None) -> bool:
        """Delete /admin/reassign_partitions; False if it was absent."""
        return self._delete_admin_request(zk_paths.REASSIGN_PARTITIONS, expected_controller_epoch_zk_version)

    def watch_reassignment(
        self, callback: Callable[[dict[tuple[str, int], list[int]] | None], Any]
    ) -> WatchHandle:
        """callback(reassignment, or None while the znode is absent) now and when
        it is created, changed or deleted, on the event thread. Kafka's controller
        acts on its creation."""
        return self._session.watch_data(
            zk_paths.REASSIGN_PARTITIONS, WatchHandle("reassign_partitions"),
            lambda data: None if data is None else (_decode_reassignment(data) or {}), callback,
        )

    def preferred_replica_election(self) -> list[tuple[str, int]]:
        """Partitions of the pending /admin/preferred_replica_election; [] when absent."""
        found = self._session.get(zk_paths.PREFERRED_REPLICA_ELECTION)
        return [] if found is None else (_decode_election(found[0]) or [])

    def create_preferred_replica_election(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Ask the controller to move leadership of `partitions` to their preferred
        replica, as Kafka's kafka-preferred-replica-election tool does. Raises
        PreferredReplicaElectionInProgressError while a previous one is pending."""
        partitions = [(topic, partition) for topic, partition in partitions]
        if not partitions:
            raise ValueError("a preferred replica election needs at least one partition")
        for topic, partition in partitions:
            check_topic_partition(topic, partition)
        duplicates = sorted(tp for tp, count in collections.Counter(partitions).items() if count > 1)
        if duplicates:
            raise ValueError(f"Preferred replica election data contains duplicate partitions: {duplicates}")
        data = encode_json({
            "version": PREFERRED_REPLICA_ELECTION_VERSION,
            "partitions": [{"topic": topic, "partition": partition} for topic, partition in partitions],
        })
        try:
            self._session.create(zk_paths.PREFERRED_REPLICA_ELECTION, data, makepath=True)
        except ZkNodeExistsError:
            pending = ",".join(f"{topic}-{partition}" for topic, partition in self.preferred_replica_election())
            raise PreferredReplicaElectionInProgressError(
                f"Preferred replica leader election currently in progress for {pending}. Aborting operation"
            ) from None

    def delete_preferred_replica_election(self, *,
                                          expected_controller_epoch_zk_version: int | None = None) -> bool:
        """Delete /admin/preferred_replica_election (the controller, once done); False if absent."""
        return self._delete_admin_request(zk_paths.PREFERRED_REPLICA_ELECTION,
                                          expected_controller_epoch_zk_version)

    def watch_preferred_replica_election(
        self, callback: Callable[[list[tuple[str, int]] | None], Any]
    ) -> WatchHandle:
        """callback(partitions, or None while the znode is absent) now and on every
        change, on the event thread."""
        return self._session.watch_data(
            zk_paths.PREFERRED_REPLICA_ELECTION, WatchHandle("preferred_replica_election"),
            lambda data: None if data is None else (_decode_election(data) or []), callback,
        )

    def _delete_admin_request(self, path: str, expected_controller_epoch_zk_version: int | None) -> bool:
        if expected_controller_epoch_zk_version is None:
            return self._session.delete(path)
        try:
            self._session.fenced(f"delete {path}", expected_controller_epoch_zk_version,
                                 lambda transaction: transaction.delete(path))
            return True
        except ZkNoNodeError:
            return False


def _encode_reassignment(reassignment: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """Kafka's ReassignPartitionsZNode (the legacy, pre-KIP-455 request format)."""
    entries = []
    for (topic, partition), replicas in sorted(reassignment.items()):
        check_topic_partition(topic, partition)
        replicas = list(replicas)
        if not replicas:
            raise InvalidReplicaAssignmentError(f"{topic}-{partition}: empty replica list")
        if any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in replicas):
            raise InvalidReplicaAssignmentError(f"{topic}-{partition}: invalid broker ids {replicas}")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"{topic}-{partition}: a broker is listed twice in {replicas}")
        entries.append({"topic": topic, "partition": partition, "replicas": replicas})
    return encode_json({"version": REASSIGN_PARTITIONS_VERSION, "partitions": entries})


def _decode_reassignment(data: bytes | None) -> dict[tuple[str, int], list[int]] | None:
    body = decode_json(data)
    if body is None:
        return None
    return {
        (item["topic"], int(item["partition"])): [int(replica) for replica in item["replicas"]]
        for item in body.get("partitions", [])
    }


def _decode_election(data: bytes | None) -> list[tuple[str, int]] | None:
    body = decode_json(data)
    if body is None:
        return None
    return [(item["topic"], int(item["partition"])) for item in body.get("partitions", [])]
