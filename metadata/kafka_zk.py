"""Kafka's ZooKeeper metadata, read and written the way Apache Kafka 3.x (ZK mode) does.

`KafkaZkClient` is one ZooKeeper session (`metadata/zk/session.py`) and, over
it, one object per family of znodes, as Kafka's own KafkaZkClient/ZkData group
them:

    zk.cluster      /cluster/id                                   zk/cluster.py
    zk.brokers      /brokers/ids/<id>, /brokers/seqid             zk/brokers.py
    zk.topics       /brokers/topics/<t>                           zk/topics.py
    zk.partitions   /brokers/topics/<t>/partitions/<p>/state      zk/partitions.py
    zk.isr_changes  /isr_change_notification/isr_change_<seq>     zk/partitions.py
    zk.controller   /controller, /controller_epoch                zk/controller.py
    zk.configs      /config/<type>/<name>, /config/changes        zk/configs.py
    zk.acls         /kafka-acl*, /kafka-acl*-changes              zk/acls.py
    zk.admin        /admin/{delete_topics,reassign_partitions,    zk/admin.py
                    preferred_replica_election}
    zk.balancer     /balancer/{paused,state}                      zk/balancer.py
    zk.producer_ids /latest_producer_id_block                     zk/producer_ids.py

Every znode written has the path (`zk_paths`) and the JSON shape
(`zk/payloads.py`) Kafka writes, so a ZooKeeper ensemble holding our metadata
reads like a Kafka cluster's. A process builds one client where it is wired
and passes it to whatever needs ZooKeeper.
"""
from __future__ import annotations

from typing import Any, Callable

from metadata import zk_security
from metadata.zk.acls import AclsZk
from metadata.zk.admin import AdminZk
from metadata.zk.balancer import BalancerZk
from metadata.zk.brokers import BrokersZk
from metadata.zk.cluster import ClusterZk
from metadata.zk.configs import ConfigsZk
from metadata.zk.controller import ControllerZk
from metadata.zk.errors import (BadVersionError, BrokerIdInUseError, ControllerMovedError,  # noqa: F401 (re-exported)
                                InvalidReplicaAssignmentError, InvalidTopicError, PartitionStateExistsError,
                                PreferredReplicaElectionInProgressError, TopicExistsError, TopicNotFoundError,
                                ZkClientClosedError, ZkConnectionError, ZkError, ZkNodeExistsError, ZkNoNodeError,
                                ZkNotEmptyError, ZkSessionExpiredError, ZkTimeoutError)
from metadata.zk.partitions import IsrChangesZk, PartitionStatesZk
from metadata.zk.payloads import (BROKER_REGISTRATION_KEYS, BROKER_REGISTRATION_VERSION,  # noqa: F401 (re-exported)
                                  CONFIG_CHANGE_NOTIFICATION_VERSION, CONFIG_ZNODE_VERSION,
                                  CONTROLLER_ZNODE_VERSION, DEFAULT_RESERVED_BROKER_MAX_ID,
                                  INITIAL_CONTROLLER_EPOCH, ISR_CHANGE_NOTIFICATION_VERSION, LEADER_RECOVERED,
                                  PARTITION_STATE_VERSION, PLAINTEXT, PREFERRED_REPLICA_ELECTION_VERSION,
                                  REASSIGN_PARTITIONS_VERSION, TOPIC_ZNODE_VERSION, IsrChangeNotification,
                                  PartitionState, TopicAssignment, broker_registration_json, decode_json,
                                  encode_json, generate_kafka_uuid, validate_replica_assignment)
from metadata.zk.producer_ids import ProducerIdsZk
from metadata.zk.topics import TopicsZk
from metadata.zk.events import WatchHandle  # noqa: F401 (re-exported)
from metadata.zk.session import DEFAULT_SESSION_TIMEOUT_MS, ZkSession  # noqa: F401 (re-exported)


class KafkaZkClient:
    """One ZooKeeper session holding Kafka's metadata layout, one attribute per znode family."""

    def __init__(
        self,
        connect_string: str,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        request_timeout_ms: int | None = None,
        security: "zk_security.ZkClientSecurity | None" = None,
    ):
        """See ZkSession: connect_string "host:port[,host:port...][/chroot]"; every
        request is bounded by request_timeout_ms (default: the session timeout)."""
        self.session = ZkSession(connect_string, session_timeout_ms, connection_timeout_ms, request_timeout_ms,
                                 security)
        self.cluster = ClusterZk(self.session)
        self.brokers = BrokersZk(self.session)
        self.topics = TopicsZk(self.session)
        self.partitions = PartitionStatesZk(self.session)
        self.isr_changes = IsrChangesZk(self.session)
        self.controller = ControllerZk(self.session)
        self.configs = ConfigsZk(self.session)
        self.acls = AclsZk(self.session)
        self.admin = AdminZk(self.session)
        self.balancer = BalancerZk(self.session)
        self.producer_ids = ProducerIdsZk(self.session)

    # ---- the session ------------------------------------------------------------------------------

    def start(self, ensure_paths: bool = True) -> "KafkaZkClient":
        """Connect (creating the chroot if any) and, by default, create Kafka's
        persistent top-level paths. Raises ZkTimeoutError if no session in time."""
        self.session.start(ensure_paths)
        return self

    def close(self) -> None:
        """End the session (its ephemeral znodes go at once) and stop the event thread."""
        self.session.close()

    def __enter__(self) -> "KafkaZkClient":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def connect_string(self) -> str:
        return self.session.connect_string

    @property
    def chroot(self) -> str:
        return self.session.chroot

    @property
    def session_timeout_ms(self) -> int:
        return self.session.session_timeout_ms

    @property
    def connection_timeout_ms(self) -> int:
        return self.session.connection_timeout_ms

    @property
    def request_timeout_ms(self) -> int:
        return self.session.request_timeout_ms

    @property
    def security(self) -> "zk_security.ZkClientSecurity":
        return self.session.security

    @property
    def session_id(self) -> int | None:
        """The current session's id, None while disconnected."""
        return self.session.session_id

    @property
    def connected(self) -> bool:
        return self.session.connected

    def wait_connected(self, timeout_s: float) -> bool:
        """True once connected (e.g. after a session loss, before re-registering)."""
        return self.session.wait_connected(timeout_s)

    def on_session_lost(self, callback: Callable[[], Any]) -> None:
        """callback() on the event thread when the session expires (our ephemerals are gone)."""
        self.session.on_session_lost(callback)

    def on_new_session(self, callback: Callable[[int], Any]) -> None:
        """callback(session_id) on the event thread when a new session replaces a lost one."""
        self.session.on_new_session(callback)

    def ensure_persistent_paths(self) -> None:
        self.session.ensure_persistent_paths()

    def secure_existing_paths(self) -> None:
        self.session.secure_existing_paths()


# ---- INTERIM (issue 32): the pre-split method names --------------------------------------------------
# Callers are moving to the families (zk.brokers.register(...)). Until the last
# one has, an old flat name resolves to its family's method here. Delete this
# table and the __getattr__ below once `grep` finds no old name in the tree.
_PRE_SPLIT_NAMES: dict[str, tuple[str, str]] = {
    "get_cluster_id": ("cluster", "id"),
    "get_or_create_cluster_id": ("cluster", "get_or_create_id"),
    "register_broker": ("brokers", "register"),
    "deregister_broker": ("brokers", "deregister"),
    "get_broker": ("brokers", "get"),
    "get_broker_ids": ("brokers", "ids"),
    "get_brokers": ("brokers", "all"),
    "watch_brokers": ("brokers", "watch"),
    "generate_broker_id": ("brokers", "generate_id"),
    "create_topic": ("topics", "create"),
    "get_topic": ("topics", "get"),
    "get_topic_with_version": ("topics", "get_with_version"),
    "topic_exists": ("topics", "exists"),
    "get_topics": ("topics", "names"),
    "get_topic_assignments": ("topics", "assignments"),
    "watch_topics": ("topics", "watch_names"),
    "watch_topic": ("topics", "watch"),
    "add_partitions": ("topics", "add_partitions"),
    "set_topic_assignment": ("topics", "set_assignment"),
    "delete_topic": ("topics", "delete"),
    "get_entity_config": ("configs", "get"),
    "set_entity_config": ("configs", "set"),
    "get_topic_config": ("configs", "topic"),
    "set_topic_config": ("configs", "set_topic"),
    "get_broker_config": ("configs", "broker"),
    "set_broker_config": ("configs", "set_broker"),
    "watch_config_changes": ("configs", "watch_changes"),
    "get_config_change_notifications": ("configs", "change_notifications"),
    "create_partition_state": ("partitions", "create_state"),
    "get_partition_state": ("partitions", "state"),
    "update_partition_state": ("partitions", "update_state"),
    "get_all_partition_states": ("partitions", "states"),
    "add_isr_change_notification": ("isr_changes", "add"),
    "get_isr_change_notifications": ("isr_changes", "pending"),
    "delete_isr_change_notifications": ("isr_changes", "delete"),
    "watch_isr_change_notifications": ("isr_changes", "watch"),
    "mark_topic_for_deletion": ("admin", "mark_topic_for_deletion"),
    "get_topics_marked_for_deletion": ("admin", "topics_marked_for_deletion"),
    "watch_delete_topics": ("admin", "watch_topic_deletions"),
    "get_partition_reassignment": ("admin", "reassignment"),
    "set_partition_reassignment": ("admin", "set_reassignment"),
    "delete_partition_reassignment": ("admin", "delete_reassignment"),
    "watch_partition_reassignment": ("admin", "watch_reassignment"),
    "get_preferred_replica_election": ("admin", "preferred_replica_election"),
    "create_preferred_replica_election": ("admin", "create_preferred_replica_election"),
    "delete_preferred_replica_election": ("admin", "delete_preferred_replica_election"),
    "watch_preferred_replica_election": ("admin", "watch_preferred_replica_election"),
    "try_become_controller": ("controller", "try_elect"),
    "controller_epoch": ("controller", "epoch"),
    "get_controller_id": ("controller", "id"),
    "watch_controller": ("controller", "watch"),
    "resign_controller": ("controller", "resign"),
    "controller_znode": ("controller", "znode"),
    "delete_controller_if": ("controller", "delete_if"),
    "is_balancer_paused": ("balancer", "paused"),
    "set_balancer_paused": ("balancer", "set_paused"),
    "watch_balancer_paused": ("balancer", "watch_paused"),
    "get_balancer_state": ("balancer", "state"),
    "set_balancer_state": ("balancer", "set_state"),
    "exists": ("session", "exists"),
    "get_data_and_version": ("session", "get_data_and_version"),
    "conditional_update_path": ("session", "conditional_update_path"),
}


def _pre_split_getattr(self: KafkaZkClient, name: str) -> Any:
    target = _PRE_SPLIT_NAMES.get(name)
    if target is None:
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    family, method = target
    return getattr(getattr(self, family), method)


KafkaZkClient.__getattr__ = _pre_split_getattr  # type: ignore[attr-defined]
