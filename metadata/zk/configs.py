"""Dynamic configs: /config/<entity type>/<name> (topics, brokers, users,
clients; quotas and SCRAM credentials live here too) and the
/config/changes notifications announcing each write (Kafka's ConfigEntityZNode
and ConfigEntityChangeNotificationZNode)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from metadata import zk_paths
from metadata.zk.errors import TopicNotFoundError
from metadata.zk.payloads import CONFIG_CHANGE_NOTIFICATION_VERSION, CONFIG_ZNODE_VERSION, decode_json, encode_json
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession


class ConfigsZk:
    """/config/<type>/<name> overrides and their /config/changes notifications."""

    def __init__(self, session: ZkSession):
        self._session = session

    def get(self, entity_type: str, entity_name: str) -> dict[str, str]:
        """/config/<type>/<name>'s "config" map ({} when absent)."""
        return self.get_at(zk_paths.config_change_entity_path(entity_type, entity_name))

    def set(self, entity_type: str, entity_name: str, config: Mapping[str, str]) -> str:
        """Replace /config/<type>/<name> and announce it with a version-2 change
        notification, as Kafka's AdminZkClient.changeConfigs does. Returns the
        notification's znode name."""
        return self.set_at(zk_paths.config_change_entity_path(entity_type, entity_name), config)

    # Nested entities (a user's client, /config/users/<u>/clients/<c>) are named
    # by their entity path, the notification's "entity_path": "users/<u>/clients/<c>".

    def get_at(self, entity_path: str) -> dict[str, str]:
        """The "config" map of /config/<entity_path> ({} when absent)."""
        found = self._session.get(self._znode(entity_path))
        if found is None:
            return {}
        body = decode_json(found[0]) or {}
        return dict(body.get("config", {}))

    def set_at(self, entity_path: str, config: Mapping[str, str]) -> str:
        """Replace /config/<entity_path> and write its change notification;
        returns the notification's znode name."""
        self._session.set_or_create(
            self._znode(entity_path), encode_json({"version": CONFIG_ZNODE_VERSION, "config": dict(config)}))
        notification = encode_json({"version": CONFIG_CHANGE_NOTIFICATION_VERSION, "entity_path": entity_path})
        created = self._session.create(zk_paths.CONFIG_CHANGE_SEQUENTIAL_PREFIX, notification, sequence=True,
                                       makepath=True)
        return created.rsplit("/", 1)[1]

    def entity_names(self, parent_path: str) -> list[str]:
        """The (sanitized) entity names under /config/<parent_path>, e.g. "users",
        "clients" or "users/<u>/clients"; [] when absent."""
        return sorted(self._session.children(self._znode(parent_path)) or [])

    @staticmethod
    def _znode(entity_path: str) -> str:
        parts = entity_path.split("/")
        if parts[0] not in zk_paths.CONFIG_ENTITY_TYPES or any(not part or part in (".", "..") or "\x00" in part
                                                               for part in parts):
            raise ValueError(f"not a config entity path: {entity_path!r}")
        return f"{zk_paths.CONFIG}/{entity_path}"

    def topic(self, topic: str) -> dict[str, str]:
        """The topic's overrides ({} when it has none or does not exist)."""
        return self.get(zk_paths.CONFIG_ENTITY_TOPICS, topic)

    def set_topic(self, topic: str, config: Mapping[str, str]) -> str:
        """Replace the topic's overrides and write the change notification."""
        if not self._session.exists(zk_paths.topic_path(topic)):
            raise TopicNotFoundError(f"Topic '{topic}' does not exist.")
        return self.set(zk_paths.CONFIG_ENTITY_TOPICS, topic, config)

    def broker(self, broker: int | str) -> dict[str, str]:
        """/config/brokers/<id> overrides ({} when none); broker may be "<default>",
        the cluster-wide defaults that a broker's own entry overrides."""
        return self.get(zk_paths.CONFIG_ENTITY_BROKERS, zk_paths.broker_config_entity_name(broker))

    def set_broker(self, broker: int | str, config: Mapping[str, str]) -> str:
        """Replace a broker's (or "<default>") dynamic overrides, e.g.
        leader.replication.throttled.rate, and write the change notification.
        Values are stored as given (strings, as Kafka stores them); callers
        validate them against the broker config definitions."""
        for key, value in config.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"broker config entries must be str -> str, got {key!r}: {value!r}")
        return self.set(zk_paths.CONFIG_ENTITY_BROKERS, zk_paths.broker_config_entity_name(broker), config)

    def watch_changes(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted /config/changes entry names) now and on every change."""
        return self._session.watch_children(zk_paths.CONFIG_CHANGES, WatchHandle("config_changes"), sorted, callback)

    def change_notifications(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, body) of each pending /config/changes entry, oldest first."""
        names = self.change_names()
        found = self._session.get_many(zk_paths.config_change_notification_path(name) for name in names)
        return [(path.rsplit("/", 1)[1], decode_json(data)) for path, (data, _stat) in sorted(found.items())]

    def change_names(self) -> list[str]:
        """The pending /config/changes entry names, oldest first."""
        return sorted(self._session.children(zk_paths.CONFIG_CHANGES) or [])

    def change_notification(self, name: str) -> dict[str, Any] | None:
        """The body of /config/changes/<name>; None when it is gone (purged)."""
        found = self._session.get(zk_paths.config_change_notification_path(name))
        return None if found is None or not found[0] else decode_json(found[0])
