"""Apache Kafka's ZooKeeper layout (ZK mode, Kafka 3.x, kafka.zk.ZkData).

Every znode path the broker reads or writes is built here, so the layout stays
the same as Kafka's and tools that know Kafka's layout (zookeeper-shell,
kafka-topics --zookeeper of old releases, Burrow...) can read ours.

Paths are relative to the client's chroot: a connect string such as
"127.0.0.1:2181/raykafka" puts all of them below /raykafka, which the client
creates on start (`split_chroot` parses it).
"""
from __future__ import annotations

from urllib.parse import unquote

ROOT = "/"

# Brokers.
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQUENCE_ID = "/brokers/seqid"

# Controller election.
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"

# Admin requests the controller acts upon.
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"

# Notifications (persistent sequential children, consumed by the controller).
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"

# Dynamic configs.
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONFIG_ENTITY_TOPICS = "topics"
CONFIG_ENTITY_BROKERS = "brokers"
CONFIG_ENTITY_USERS = "users"
CONFIG_ENTITY_CLIENTS = "clients"
CONFIG_ENTITY_IPS = "ips"
# Kafka's ConfigType.all: every one gets a persistent /config/<type> node.
CONFIG_ENTITY_TYPES = (
    CONFIG_ENTITY_TOPICS,
    CONFIG_ENTITY_CLIENTS,
    CONFIG_ENTITY_USERS,
    CONFIG_ENTITY_BROKERS,
    CONFIG_ENTITY_IPS,
)
# The entity name Kafka uses for cluster-wide defaults (ConfigEntityName.Default).
CONFIG_DEFAULT_ENTITY = "<default>"

# Cluster identity, ACLs, producer ids.
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
KAFKA_ACL = "/kafka-acl"
KAFKA_ACL_CHANGES = "/kafka-acl-changes"
KAFKA_ACL_EXTENDED = "/kafka-acl-extended"
KAFKA_ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
# Where Kafka's AclAuthorizer keeps ACLs and their change notifications (ZkAclStore).
ACL_ROOT_PATHS = (KAFKA_ACL, f"{KAFKA_ACL_EXTENDED}/prefixed", KAFKA_ACL_CHANGES, KAFKA_ACL_EXTENDED_CHANGES)
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# raykafka's balancer (issue 31; no Kafka equivalent). The operator's pause
# switch and the controller's published plan are separate znodes so neither
# writer overwrites the other: /balancer/paused exists while paused (written
# by `raykafka balancer --pause`, read and watched by every controller);
# /balancer/state is written only by the active controller (fenced on its
# epoch) and read by a new controller at failover and by `--status`.
BALANCER = "/balancer"
BALANCER_PAUSED = "/balancer/paused"
BALANCER_STATE = "/balancer/state"

# Old-consumer root; still in Kafka 3.x's list of persistent paths.
CONSUMERS = "/consumers"

# What Kafka creates at broker start (ZkData.PersistentZkPaths), in its order.
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQUENCE_ID,
    ISR_CHANGE_NOTIFICATION,
    LATEST_PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
) + tuple(f"{CONFIG}/{entity_type}" for entity_type in CONFIG_ENTITY_TYPES)


def _checked_name(kind: str, name: str) -> str:
    # A "/" (or a "."/".." component) would silently address a different
    # znode, so names are refused here rather than trusted to the callers.
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty string, got {name!r}")
    if "/" in name or name in (".", "..") or "\x00" in name:
        raise ValueError(f"{kind} name {name!r} cannot be used as a znode name")
    return name


def _checked_int(kind: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{kind} must be a non-negative int, got {value!r}")
    return value


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{_checked_int('broker id', broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{_checked_name('topic', topic)}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{_checked_int('partition', partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{_checked_name('topic', topic)}"


def config_entity_type_path(entity_type: str) -> str:
    if entity_type not in CONFIG_ENTITY_TYPES:
        raise ValueError(f"unknown config entity type {entity_type!r}, expected one of {CONFIG_ENTITY_TYPES}")
    return f"{CONFIG}/{entity_type}"


def config_entity_path(entity_type: str, entity_name: str) -> str:
    """/config/<type>/<name>. User and client names must be sanitized first
    (`sanitize_entity_name`), as Kafka does; topic and broker names are used as is."""
    return f"{config_entity_type_path(entity_type)}/{_checked_name('config entity', entity_name)}"


def topic_config_path(topic: str) -> str:
    return config_entity_path(CONFIG_ENTITY_TOPICS, topic)


def broker_config_entity_name(broker_id: int | str) -> str:
    """The /config/brokers child for a broker: its id, or "<default>" for the
    cluster-wide default (the only names Kafka's ConfigCommand accepts)."""
    if isinstance(broker_id, str):
        if broker_id == CONFIG_DEFAULT_ENTITY:
            return broker_id
        if not broker_id.isdigit():
            raise ValueError(
                f"broker config entity must be a broker id or {CONFIG_DEFAULT_ENTITY!r}, got {broker_id!r}"
            )
        return str(int(broker_id))
    return str(_checked_int("broker id", broker_id))


def broker_config_path(broker_id: int | str) -> str:
    return config_entity_path(CONFIG_ENTITY_BROKERS, broker_config_entity_name(broker_id))


def user_config_path(sanitized_user: str) -> str:
    return config_entity_path(CONFIG_ENTITY_USERS, sanitized_user)


def client_config_path(sanitized_client_id: str) -> str:
    return config_entity_path(CONFIG_ENTITY_CLIENTS, sanitized_client_id)


def config_change_entity_path(entity_type: str, entity_name: str) -> str:
    """The "entity_path" value of a version-2 config change notification."""
    config_entity_type_path(entity_type)
    return f"{entity_type}/{_checked_name('config entity', entity_name)}"


# Prefixes handed to a sequential create; ZooKeeper appends a 10-digit counter.
CONFIG_CHANGE_SEQUENTIAL_PREFIX = f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"
ISR_CHANGE_SEQUENTIAL_PREFIX = f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}"
LOG_DIR_EVENT_SEQUENTIAL_PREFIX = f"{LOG_DIR_EVENT_NOTIFICATION}/{LOG_DIR_EVENT_PREFIX}"


def isr_change_notification_path(name: str) -> str:
    """Path of one notification given its child name, e.g. "isr_change_0000000003"."""
    if not _checked_name("isr change notification", name).startswith(ISR_CHANGE_PREFIX):
        raise ValueError(f"{name!r} is not an ISR change notification name")
    return f"{ISR_CHANGE_NOTIFICATION}/{name}"


def isr_change_sequence_number(name: str) -> int:
    return int(name[len(ISR_CHANGE_PREFIX):])


def config_change_notification_path(name: str) -> str:
    if not _checked_name("config change notification", name).startswith(CONFIG_CHANGE_PREFIX):
        raise ValueError(f"{name!r} is not a config change notification name")
    return f"{CONFIG_CHANGES}/{name}"


def sanitize_entity_name(name: str) -> str:
    """Kafka's Sanitizer.sanitize: URL-encode the UTF-8 bytes the way Java's
    URLEncoder does, then spell space as %20 and '*' as %2A, so user principals
    and client ids become single znode names."""
    safe = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._"
    out = []
    for byte in name.encode("utf-8"):
        out.append(chr(byte) if byte in safe else f"%{byte:02X}")
    return "".join(out)


def desanitize_entity_name(sanitized: str) -> str:
    return unquote(sanitized, encoding="utf-8", errors="strict")


def split_chroot(connect_string: str) -> tuple[str, str | None]:
    """Split "h1:p1,h2:p2/some/chroot" into ("h1:p1,h2:p2", "/some/chroot").

    Same rule as ZooKeeper's ConnectStringParser: the chroot starts at the first
    "/"; a bare "/" means no chroot.
    """
    if not connect_string or not connect_string.strip():
        raise ValueError("empty ZooKeeper connect string")
    slash = connect_string.find("/")
    if slash < 0:
        return connect_string, None
    hosts, chroot = connect_string[:slash], connect_string[slash:]
    if not hosts:
        raise ValueError(f"connect string {connect_string!r} has no host")
    if chroot == "/":
        return hosts, None
    if chroot.endswith("/") or "//" in chroot:
        raise ValueError(f"invalid chroot {chroot!r} in connect string {connect_string!r}")
    for component in chroot[1:].split("/"):
        if component in (".", ".."):
            raise ValueError(f"invalid chroot {chroot!r} in connect string {connect_string!r}")
    return hosts, chroot
