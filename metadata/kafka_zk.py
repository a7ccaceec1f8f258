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

from kazoo.client import KazooClient

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
from metadata.zk.session import DEFAULT_SESSION_TIMEOUT_MS, KazooClientFactory, ZkSession  # noqa: F401 (re-exported)


class KafkaZkClient:
    """One ZooKeeper session holding Kafka's metadata layout, one attribute per znode family."""

    def __init__(
        self,
        connect_string: str,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        request_timeout_ms: int | None = None,
        security: "zk_security.ZkClientSecurity | None" = None,
        client_factory: KazooClientFactory = KazooClient,
    ):
        """See ZkSession: connect_string "host:port[,host:port...][/chroot]"; every
        request is bounded by request_timeout_ms (default: the session timeout);
        client_factory builds the kazoo client (an in-memory one in unit tests)."""
        self.session = ZkSession(connect_string, session_timeout_ms, connection_timeout_ms, request_timeout_ms,
                                 security, client_factory)
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

