"""Partition state: /brokers/topics/<t>/partitions/<p>/state (Kafka's
TopicPartitionStateZNode: leader, leader epoch, ISR), written by the
controller and by leaders changing their ISR, always conditionally on its zk
version; and the /isr_change_notification entries with which a leader tells
the controller its ISR changed."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from metadata import zk_paths
from metadata.zk.errors import PartitionStateExistsError, TopicNotFoundError, ZkNoNodeError, ZkNodeExistsError
from metadata.zk.payloads import (ISR_CHANGE_NOTIFICATION_VERSION, IsrChangeNotification, PartitionState,
                                  decode_json, encode_json)
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession


class PartitionStatesZk:
    """/brokers/topics/<t>/partitions/<p>/state: leader, leader epoch, ISR, controller epoch."""

    def __init__(self, session: ZkSession):
        self._session = session

    def create_state(
        self,
        topic: str,
        partition: int,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int],
        controller_epoch: int,
        *,
        expected_controller_epoch_zk_version: int | None = None,
    ) -> int:
        """Create /brokers/topics/<t>/partitions/<p>/state (and its parents); returns
        its zk version (0). With expected_controller_epoch_zk_version, the create is
        fenced like Kafka's: it fails with ControllerMovedError once another
        controller bumped /controller_epoch."""
        state = PartitionState(leader, leader_epoch, list(isr), controller_epoch)
        try:
            self._session.create_if_absent(zk_paths.topic_partitions_path(topic), makepath=False)
        except ZkNoNodeError:
            raise TopicNotFoundError(f"Topic '{topic}' does not exist.") from None
        self._session.create_if_absent(zk_paths.partition_path(topic, partition), makepath=False)
        path = zk_paths.partition_state_path(topic, partition)
        data = encode_json(state.to_json())
        try:
            if expected_controller_epoch_zk_version is None:
                self._session.create(path, data)
            else:
                self._session.fenced(f"create {path}", expected_controller_epoch_zk_version,
                                     lambda transaction: transaction.create(path, data))
        except ZkNodeExistsError:
            raise PartitionStateExistsError(f"{path} already exists") from None
        return 0

    def state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        """(state, zk version) or None when the partition has no state yet."""
        found = self._session.get(zk_paths.partition_state_path(topic, partition))
        return None if found is None else (PartitionState.from_json(decode_json(found[0])), found[1].version)

    def update_state(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_zk_version: int,
        *,
        expected_controller_epoch_zk_version: int | None = None,
    ) -> int:
        """Conditional setData of the state znode; returns the new zk version.
        Raises BadVersionError if it changed since `expected_zk_version` was read,
        ControllerMovedError if fenced (see create_partition_state)."""
        path = zk_paths.partition_state_path(topic, partition)
        return self._session.conditional_set(path, encode_json(state.to_json()), expected_zk_version,
                                             expected_controller_epoch_zk_version)

    def states(self, topic: str) -> dict[int, tuple[PartitionState, int]]:
        """Every partition of the topic that has a state znode: {p: (state, zk version)}."""
        partitions = self._session.children(zk_paths.topic_partitions_path(topic)) or []
        paths = {zk_paths.partition_state_path(topic, int(p)): int(p) for p in partitions if p.isdigit()}
        found = self._session.get_many(paths)
        return {
            paths[path]: (PartitionState.from_json(decode_json(data)), stat.version)
            for path, (data, stat) in sorted(found.items(), key=lambda item: paths[item[0]])
        }

class IsrChangesZk:
    """/isr_change_notification/isr_change_<seq>: ISR changes for the controller to pick up."""

    def __init__(self, session: ZkSession):
        self._session = session

    def add(self, partitions: Iterable[tuple[str, int]]) -> str:
        """Persistent sequential /isr_change_notification/isr_change_<seq>; returns its name."""
        body = encode_json({
            "version": ISR_CHANGE_NOTIFICATION_VERSION,
            "partitions": [{"topic": topic, "partition": partition} for topic, partition in partitions],
        })
        created = self._session.create(zk_paths.ISR_CHANGE_SEQUENTIAL_PREFIX, body, sequence=True, makepath=True)
        return created.rsplit("/", 1)[1]

    def pending(self) -> list[IsrChangeNotification]:
        """Pending notifications, oldest first."""
        names = [
            name for name in (self._session.children(zk_paths.ISR_CHANGE_NOTIFICATION) or [])
            if name.startswith(zk_paths.ISR_CHANGE_PREFIX)
        ]
        names.sort(key=zk_paths.isr_change_sequence_number)
        found = self._session.get_many(zk_paths.isr_change_notification_path(name) for name in names)
        notifications = []
        for name in names:
            entry = found.get(zk_paths.isr_change_notification_path(name))
            if entry is None:
                continue  # deleted by another controller meanwhile
            body = decode_json(entry[0]) or {}
            notifications.append(IsrChangeNotification(
                name, [(item["topic"], int(item["partition"])) for item in body.get("partitions", [])]
            ))
        return notifications

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            self._session.delete(zk_paths.isr_change_notification_path(name))

    def watch(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted notification names) now and whenever they change."""
        return self._session.watch_children(
            zk_paths.ISR_CHANGE_NOTIFICATION, WatchHandle("isr_change_notification"),
            lambda names: sorted(n for n in names if n.startswith(zk_paths.ISR_CHANGE_PREFIX)), callback,
        )
