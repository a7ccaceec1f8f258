"""Topics: /brokers/topics/<t> (Kafka's TopicZNode: the replica assignment and
the topic id), created, read, extended and deleted the way Kafka's
AdminZkClient and controller do."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterable, Mapping, Sequence

from core.naming import topic_name_error
from metadata import zk_paths
from metadata.zk.errors import (InvalidReplicaAssignmentError, InvalidTopicError, TopicExistsError,
                                TopicNotFoundError, ZkNodeExistsError)
from metadata.zk.payloads import (CONFIG_ZNODE_VERSION, TopicAssignment, decode_json, encode_json,
                                  generate_kafka_uuid, validate_replica_assignment)
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession

log = logging.getLogger(__name__)


class TopicsZk:
    """/brokers/topics/<t>: which brokers hold each partition, and the topic id."""

    def __init__(self, session: ZkSession):
        self._session = session

    def create(
        self,
        topic: str,
        assignment: Mapping[int, Sequence[int]],
        config: Mapping[str, str] | None = None,
        topic_id: str | None = None,
    ) -> str:
        """Create a topic the way Kafka's AdminZkClient does: /config/topics/<t>
        first, then /brokers/topics/<t>, whose creation makes it visible to the
        controller. Returns the topic id (generated when None)."""
        problem = topic_name_error(topic)
        if problem:
            raise InvalidTopicError(problem)
        validate_replica_assignment(assignment)
        if self._session.exists(zk_paths.topic_path(topic)):
            raise TopicExistsError(f"Topic '{topic}' already exists.")
        if self._session.exists(zk_paths.delete_topic_path(topic)):
            raise TopicExistsError(f"Topic '{topic}' is marked for deletion.")
        if "." in topic or "_" in topic:
            # Kafka refuses names that differ only in '.' vs '_': they share metric names.
            collisions = [
                existing for existing in (self.names())
                if existing.replace(".", "_") == topic.replace(".", "_")
            ]
            if collisions:
                raise InvalidTopicError(f"Topic '{topic}' collides with existing topics: {', '.join(collisions)}")
        topic_id = topic_id or generate_kafka_uuid()
        self._session.set_or_create(
            zk_paths.topic_config_path(topic),
            encode_json({"version": CONFIG_ZNODE_VERSION, "config": dict(config or {})}),
        )
        body = TopicAssignment({p: list(r) for p, r in assignment.items()}, topic_id).to_json()
        try:
            self._session.create(zk_paths.topic_path(topic), encode_json(body), makepath=True)
        except ZkNodeExistsError:
            raise TopicExistsError(f"Topic '{topic}' already exists.") from None
        log.info("created topic %s (%s) with %d partitions", topic, topic_id, len(assignment))
        return topic_id

    def get(self, topic: str) -> TopicAssignment | None:
        found = self._session.get(zk_paths.topic_path(topic))
        return None if found is None else TopicAssignment.from_json(decode_json(found[0]))

    def get_with_version(self, topic: str) -> tuple[TopicAssignment, int] | None:
        found = self._session.get(zk_paths.topic_path(topic))
        return None if found is None else (TopicAssignment.from_json(decode_json(found[0])), found[1].version)

    def exists(self, topic: str) -> bool:
        return self._session.exists(zk_paths.topic_path(topic))

    def names(self) -> list[str]:
        return sorted(self._session.children(zk_paths.BROKER_TOPICS) or [])

    def assignments(self, topics: Iterable[str] | None = None) -> dict[str, TopicAssignment]:
        """Many topics' assignments in one pipelined round (all topics by default)."""
        names = self.names() if topics is None else list(topics)
        found = self._session.get_many(zk_paths.topic_path(topic) for topic in names)
        return {
            path.rsplit("/", 1)[1]: TopicAssignment.from_json(decode_json(data))
            for path, (data, _stat) in found.items()
        }

    def watch_names(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted topic names) now and on every change, on the event thread."""
        return self._session.watch_children(zk_paths.BROKER_TOPICS, WatchHandle("topics"), sorted, callback)

    def watch(self, topic: str, callback: Callable[[TopicAssignment | None], Any]) -> WatchHandle:
        """callback(assignment or None) now and whenever /brokers/topics/<t> changes
        (partitions added, reassignment), on the event thread."""
        return self._session.watch_data(
            zk_paths.topic_path(topic), WatchHandle(f"topic {topic}"),
            lambda data: None if data is None else TopicAssignment.from_json(decode_json(data)), callback,
        )

    def add_partitions(self, topic: str, new_partitions: Mapping[int, Sequence[int]]) -> dict[int, list[int]]:
        """Add partitions to /brokers/topics/<t>, keeping its topic id. `new_partitions`
        numbers them right after the existing ones; repeating an existing partition
        with its current replicas is allowed. Returns the whole new assignment.
        Raises BadVersionError if the znode changed concurrently."""
        current = self.get_with_version(topic)
        if current is None:
            raise TopicNotFoundError(f"Topic '{topic}' does not exist.")
        assignment, version = current
        added = {}
        for partition, replicas in new_partitions.items():
            if partition in assignment.partitions:
                if list(replicas) != assignment.partitions[partition]:
                    raise InvalidReplicaAssignmentError(
                        f"partition {partition} of '{topic}' exists with replicas {assignment.partitions[partition]}"
                    )
                continue
            added[partition] = list(replicas)
        if not added:
            raise InvalidReplicaAssignmentError(f"no new partitions for '{topic}'")
        validate_replica_assignment(added, first_partition=len(assignment.partitions))
        merged = {**assignment.partitions, **added}
        validate_replica_assignment(merged)
        updated = dataclasses.replace(assignment, partitions=merged)
        self._session.set(zk_paths.topic_path(topic), encode_json(updated.to_json()), version)
        return merged

    def set_assignment(self, topic: str, assignment: TopicAssignment, expected_zk_version: int,
                       *, expected_controller_epoch_zk_version: int | None = None) -> int:
        """Conditionally rewrite /brokers/topics/<t> (reassignments); returns the new version."""
        path = zk_paths.topic_path(topic)
        return self._session.conditional_set(path, encode_json(assignment.to_json()), expected_zk_version,
                                             expected_controller_epoch_zk_version)

    def delete(self, topic: str) -> None:
        """Remove the topic's znodes in Kafka's order: assignment and partition
        states, then config, then the deletion mark (so a crash part-way leaves
        the mark for the controller to finish). Absent pieces are skipped."""
        self._session.delete_recursive(zk_paths.topic_path(topic))
        self._session.delete(zk_paths.topic_config_path(topic))
        self._session.delete(zk_paths.delete_topic_path(topic))
        log.info("deleted topic %s from ZooKeeper", topic)
