"""The JSON that Kafka's ZkData writes to each znode, and the checks Kafka makes
on what goes into them. Pure functions and dataclasses: no ZooKeeper here."""
from __future__ import annotations

import base64
import dataclasses
import json
import time
import uuid
from typing import Any, Mapping, Sequence

from metadata.zk.errors import InvalidReplicaAssignmentError

# reserved.broker.max.id: generated broker ids start above it.
DEFAULT_RESERVED_BROKER_MAX_ID = 1000
BROKER_REGISTRATION_VERSION = 5
TOPIC_ZNODE_VERSION = 3
PARTITION_STATE_VERSION = 1
CONTROLLER_ZNODE_VERSION = 1
ISR_CHANGE_NOTIFICATION_VERSION = 1
CONFIG_ZNODE_VERSION = 1
CONFIG_CHANGE_NOTIFICATION_VERSION = 2
REASSIGN_PARTITIONS_VERSION = 1
PREFERRED_REPLICA_ELECTION_VERSION = 1
# Kafka's KafkaController.InitialControllerEpoch: the first elected controller gets 1.
INITIAL_CONTROLLER_EPOCH = 0
# LeaderRecoveryState.RECOVERED; only RECOVERING (1) is written to the znode.
LEADER_RECOVERED = 0
PLAINTEXT = "PLAINTEXT"
# Keys of the broker registration that callers' `extra` must not replace.
BROKER_REGISTRATION_KEYS = frozenset(
    {"features", "listener_security_protocol_map", "endpoints", "jmx_port", "host", "port", "timestamp", "version", "rack"}
)



def encode_json(value: Any) -> bytes:
    # Jackson's compact output, UTF-8 without \u escapes, like Kafka's Json.encodeAsBytes.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_json(data: bytes | None) -> Any:
    if not data:
        return None
    return json.loads(data.decode("utf-8"))


def now_ms() -> int:
    return int(time.time() * 1000)


_ZERO_UUID = bytes(16)
_METADATA_TOPIC_UUID = bytes(15) + b"\x01"


def generate_kafka_uuid() -> str:
    """A random id as Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16
    bytes without padding (22 chars), never the reserved zero/metadata ids and
    never starting with '-' (which command-line tools would take for a flag)."""
    while True:
        raw = uuid.uuid4().bytes
        if raw in (_ZERO_UUID, _METADATA_TOPIC_UUID):
            continue
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


@dataclasses.dataclass
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state (LeaderIsrAndControllerEpoch)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERED

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": PARTITION_STATE_VERSION,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        # Kafka writes the field only while the partition is RECOVERING.
        if self.leader_recovery_state != LEADER_RECOVERED:
            body["leader_recovery_state"] = self.leader_recovery_state
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "PartitionState":
        return cls(
            leader=int(body["leader"]),
            leader_epoch=int(body["leader_epoch"]),
            isr=[int(replica) for replica in body["isr"]],
            controller_epoch=int(body["controller_epoch"]),
            leader_recovery_state=int(body.get("leader_recovery_state", LEADER_RECOVERED)),
        )


@dataclasses.dataclass
class TopicAssignment:
    """/brokers/topics/<t>: replicas per partition and the topic id."""

    partitions: dict[int, list[int]]
    topic_id: str | None
    adding_replicas: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "version": TOPIC_ZNODE_VERSION,
            "partitions": _int_keyed_to_json(self.partitions),
        }
        if self.topic_id is not None:
            body["topic_id"] = self.topic_id
        body["adding_replicas"] = _int_keyed_to_json(self.adding_replicas)
        body["removing_replicas"] = _int_keyed_to_json(self.removing_replicas)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "TopicAssignment":
        # Versions 1 and 2 (older Kafka) lack topic_id and/or the reassignment maps.
        return cls(
            partitions=_int_keyed_from_json(body.get("partitions", {})),
            topic_id=body.get("topic_id"),
            adding_replicas=_int_keyed_from_json(body.get("adding_replicas", {})),
            removing_replicas=_int_keyed_from_json(body.get("removing_replicas", {})),
        )


def _int_keyed_to_json(mapping: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
    return {str(partition): list(replicas) for partition, replicas in sorted(mapping.items())}


def _int_keyed_from_json(mapping: Mapping[str, Sequence[int]]) -> dict[int, list[int]]:
    return {int(partition): [int(replica) for replica in replicas] for partition, replicas in mapping.items()}


@dataclasses.dataclass
class IsrChangeNotification:
    name: str  # e.g. "isr_change_0000000007"
    partitions: list[tuple[str, int]]


def broker_registration_json(
    broker_id: int,
    host: str,
    port: int,
    rack: str | None = None,
    extra: Mapping[str, Any] | None = None,
    timestamp_ms: int | None = None,
    security: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Kafka's version-5 /brokers/ids/<id> payload for one PLAINTEXT listener, or, with
    ``security`` ({"endpoints": [...], "listener_security_protocol_map": {...}}), for
    the listeners it names (host/port stay the first listener's: the controller's)."""
    body: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {PLAINTEXT: PLAINTEXT},
        "endpoints": [f"{PLAINTEXT}://{host}:{port}"],
        "jmx_port": -1,
        "port": port,
        "host": host,
        "version": BROKER_REGISTRATION_VERSION,
        "timestamp": str(now_ms() if timestamp_ms is None else timestamp_ms),
    }
    if security:
        body.update({key: security[key] for key in ("endpoints", "listener_security_protocol_map")})
    if rack is not None:
        body["rack"] = rack
    if extra:
        clashing = BROKER_REGISTRATION_KEYS.intersection(extra)
        if clashing:
            raise ValueError(f"extra broker registration keys {sorted(clashing)} would replace Kafka's own")
        body.update(extra)
    return body


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]], first_partition: int = 0) -> None:
    """Kafka's checks on a replica assignment: partitions numbered first..n-1 with no
    gaps, each with a non-empty list of distinct broker ids, all of one size."""
    if not assignment:
        raise InvalidReplicaAssignmentError("a topic needs at least one partition")
    partitions = sorted(assignment)
    expected = list(range(first_partition, first_partition + len(partitions)))
    if partitions != expected:
        raise InvalidReplicaAssignmentError(
            f"partitions must be numbered consecutively from {first_partition}, got {partitions}"
        )
    sizes = set()
    for partition, replicas in assignment.items():
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has no replicas")
        if any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in replicas):
            raise InvalidReplicaAssignmentError(f"partition {partition} has invalid broker ids {list(replicas)}")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {partition} lists a broker twice: {list(replicas)}")
        sizes.add(len(replicas))
    if len(sizes) != 1:
        raise InvalidReplicaAssignmentError("all partitions should have the same number of replicas")



def check_topic_partition(topic: Any, partition: Any) -> None:
    if not isinstance(topic, str) or not topic:
        raise InvalidReplicaAssignmentError(f"invalid topic {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidReplicaAssignmentError(f"invalid partition {partition!r} of topic {topic!r}")

