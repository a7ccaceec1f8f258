"""A small blocking Kafka admin client over kio, for `raykafka topics`,
`raykafka reassign` and `raykafka elect-leaders` (works against any Kafka
broker that serves the versions in CLIENT_VERSIONS).

Every connection starts with ApiVersions; each request then goes out at the
highest version both sides speak. An API the broker does not advertise fails
with UnsupportedApi before anything is sent: Kafka closes the connection on
an unknown key, which would otherwise read as a network error.

Controller-bound requests (CreateTopics, DeleteTopics, CreatePartitions,
ElectLeaders, the reassignment APIs) go to the controller named by Metadata,
as Kafka's AdminClient does, else to the bootstrap broker (brokers forward).
Results come back as plain values (Outcome, ClusterMetadata, ...), never as kio
entities, so the commands and their tests do not depend on message versions.
"""
from __future__ import annotations

import dataclasses
import datetime
import socket
import struct
from typing import Any, Optional

from cli.admin_errors import AdminError
from cli.client_security import AuthenticationFailed, authenticate, load_security, secure_socket
from core.error_codes import ErrorCode

from net.codec import decode_response, encode_request, request_schema
from net.schema_build import build, nested

METADATA = 3
CREATE_TOPICS = 19
DELETE_TOPICS = 20
API_VERSIONS = 18
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51

API_NAMES = {METADATA: "Metadata", CREATE_TOPICS: "CreateTopics", DELETE_TOPICS: "DeleteTopics",
             API_VERSIONS: "ApiVersions", DESCRIBE_CONFIGS: "DescribeConfigs",
             CREATE_PARTITIONS: "CreatePartitions", ELECT_LEADERS: "ElectLeaders",
             INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
             ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
             LIST_PARTITION_REASSIGNMENTS: "ListPartitionReassignments",
             SASL_HANDSHAKE: "SaslHandshake", SASL_AUTHENTICATE: "SaslAuthenticate",
             DESCRIBE_CLIENT_QUOTAS: "DescribeClientQuotas", ALTER_CLIENT_QUOTAS: "AlterClientQuotas",
             DESCRIBE_USER_SCRAM_CREDENTIALS: "DescribeUserScramCredentials",
             ALTER_USER_SCRAM_CREDENTIALS: "AlterUserScramCredentials"}

# The versions this client can build and read, per API key.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    # v4+ carries allow_auto_topic_creation: describing a topic must never create it.
    METADATA: (4, 12),
    CREATE_TOPICS: (2, 7),
    # v6 names topics by id as well; names are all this tool has.
    DELETE_TOPICS: (1, 5),
    DESCRIBE_CONFIGS: (1, 4),
    CREATE_PARTITIONS: (0, 3),
    # v0 has no election type (preferred only); PREFERRED and UNCLEAN both need v1+.
    ELECT_LEADERS: (1, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

# ConfigResource types and IncrementalAlterConfigs operations (Kafka's ids).
RESOURCE_TOPIC = 2
OP_SET, OP_DELETE = 0, 1
# DescribeConfigs source of a value nobody set (Kafka's ConfigSource.DEFAULT_CONFIG).
SOURCE_DEFAULT = 5
# ElectLeaders election types (Kafka's ElectionType ids).
ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1

# The server-side wait we ask for; the socket waits this long plus a margin.
SOCKET_MARGIN_S = 5.0
MAX_FRAME_BYTES = 100 * 1024 * 1024


class UnsupportedApi(AdminError):
    def __init__(self, api_key: int, broker: str, offered: Optional[tuple[int, int]]):
        name = API_NAMES.get(api_key, str(api_key))
        ours = CLIENT_VERSIONS[api_key]
        if offered is None:
            text = f"the broker at {broker} does not support {name} (api key {api_key})"
        else:
            text = (f"the broker at {broker} serves {name} v{offered[0]}-{offered[1]}, this tool speaks "
                    f"v{ours[0]}-{ours[1]}")
        super().__init__(f"UNSUPPORTED_VERSION: {text}")
        self.api_key = api_key


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One item's answer: Kafka's error code and the broker's message, if any."""
    error: ErrorCode = ErrorCode.none
    message: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.none

    def text(self) -> str:
        """Kafka's error name, then the broker's words: `TOPIC_ALREADY_EXISTS: Topic 'a' already exists.`"""
        name = self.error.name.upper()
        return f"{name}: {self.message}" if self.message else name


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: dict[int, PartitionInfo]
    topic_id: Optional[str] = None  # Kafka's text form (base64url, no padding); None when unknown
    internal: bool = False


@dataclasses.dataclass
class ClusterMetadata:
    brokers: dict[int, BrokerInfo]
    controller_id: int
    topics: dict[str, TopicInfo]
    errors: dict[str, Outcome]  # topics asked for by name that the broker could not describe


@dataclasses.dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: Optional[str]
    source: int
    sensitive: bool = False
    read_only: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == SOURCE_DEFAULT


@dataclasses.dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions (or the manual assignment's)
    replication_factor: int = -1
    assignment: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    configs: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OngoingReassignment:
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def kafka_topic_id(value) -> Optional[str]:
    """Kafka prints a topic id as URL-safe base64 of its 16 bytes, unpadded."""
    import base64

    if value is None or value.int == 0:
        return None
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise AdminError(f"bad broker address {address!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


class BrokerConnection:
    """One socket to one broker, with the API versions it advertised."""

    def __init__(self, host: str, port: int, timeout_s: float, client_id: str, security=None):
        """security: cli/client_security.ClientSecurity (--command-config), None for PLAINTEXT."""
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.sock = secure_socket(socket.create_connection((host, port), timeout=timeout_s + SOCKET_MARGIN_S),
                                  host, security)
        self.correlation_id = 0
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._negotiate()
        try:
            authenticate(self.request, security)
        except AuthenticationFailed as exc:
            raise AdminError(f"authentication with {self.address} failed: {exc}") from None

    def _negotiate(self) -> None:
        # v3 first; a broker that does not know it answers in v0's format with
        # UNSUPPORTED_VERSION (KIP-511), and v0 is then what to speak.
        frame = self._exchange(request_schema(API_VERSIONS, 3)(
            client_software_name="raykafka-admin", client_software_version="1"))
        error = struct.unpack_from(">h", frame, 4)[0] if len(frame) >= 6 else -1
        version = 0 if error == ErrorCode.unsupported_version else 3
        _, answer = decode_response(API_VERSIONS, version, frame)
        if answer.error_code == ErrorCode.unsupported_version:
            answer = self._call(API_VERSIONS, 0, request_schema(API_VERSIONS, 0)())
        if answer.error_code != ErrorCode.none:
            raise AdminError(f"ApiVersions to {self.address}: {answer.error_code.name.upper()}")
        self.api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}

    def version_for(self, api_key: int) -> int:
        """The highest version both sides speak; UnsupportedApi if none."""
        offered = self.api_versions.get(api_key)
        low, high = CLIENT_VERSIONS[api_key]
        if offered is None or offered[1] < low or offered[0] > high:
            raise UnsupportedApi(api_key, self.address, offered)
        return min(high, offered[1])

    def supports(self, api_key: int) -> bool:
        try:
            self.version_for(api_key)
            return True
        except UnsupportedApi:
            return False

    def request(self, api_key: int, **fields) -> Any:
        """Send one request at the negotiated version; fields a version lacks are dropped."""
        version = self.version_for(api_key)
        return self._call(api_key, version, build(request_schema(api_key, version), **fields))

    def _call(self, api_key: int, version: int, body) -> Any:
        correlation_id, answer = decode_response(api_key, version, self._exchange(body))
        if correlation_id != self.correlation_id:
            raise AdminError(f"{self.address} answered out of order")
        return answer

    def _exchange(self, body) -> bytes:
        self.correlation_id += 1
        try:
            self.sock.sendall(encode_request(body, self.correlation_id, client_id=self.client_id))
            (size,) = struct.unpack(">i", self._exactly(4))
            if not 0 < size <= MAX_FRAME_BYTES:
                raise AdminError(f"{self.address} sent a frame of {size} bytes")
            return self._exactly(size)
        except socket.timeout:
            raise AdminError(f"no answer from {self.address} in time (try a larger --timeout)") from None

    def _exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise AdminError(f"{self.address} closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class AdminClient:
    """Bootstrap once, then talk to whichever broker a request belongs to."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, client_id: str = "raykafka-admin",
                 security=None):
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.security = security
        self.connections: dict[int, BrokerConnection] = {}
        self.bootstrap: Optional[BrokerConnection] = None
        errors = []
        for address in [a for a in bootstrap.split(",") if a.strip()]:
            try:
                self.bootstrap = BrokerConnection(*split_address(address), timeout_s, client_id, security)
                break
            except (OSError, AdminError) as exc:
                errors.append(f"{address.strip()}: {exc}")
        if self.bootstrap is None:
            raise AdminError("cannot connect to " + ("; ".join(errors) or "an empty --bootstrap-server"))
        self.cluster: Optional[ClusterMetadata] = None

    def close(self) -> None:
        for conn in [self.bootstrap, *self.connections.values()]:
            if conn is not None:
                conn.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def _timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.timeout_s)

    def supports(self, api_key: int) -> bool:
        return self.bootstrap.supports(api_key)

    # ---- routing ------------------------------------------------------------------------------------------
    def controller(self) -> BrokerConnection:
        if self.cluster is None:
            self.metadata([])
        controller_id = self.cluster.controller_id
        broker = self.cluster.brokers.get(controller_id)
        if broker is None:
            return self.bootstrap
        conn = self.connections.get(controller_id)
        if conn is None:
            try:
                conn = BrokerConnection(broker.host, broker.port, self.timeout_s, self.client_id, self.security)
            except (OSError, AdminError):
                return self.bootstrap  # unreachable from here: any broker forwards
            self.connections[controller_id] = conn
        return conn

    # ---- Metadata -----------------------------------------------------------------------------------------
    def metadata(self, topics: Optional[list[str]] = None) -> ClusterMetadata:
        """Brokers, controller and the named topics (None: every topic)."""
        conn = self.bootstrap
        version = conn.version_for(METADATA)
        topic_cls = nested(request_schema(METADATA, version), "MetadataRequestTopic")
        wanted = None if topics is None else tuple(build(topic_cls, name=t, topic_id=None) for t in topics)
        answer = conn.request(METADATA, topics=wanted, allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=False,
                              include_topic_authorized_operations=False)
        top_error = getattr(answer, "error_code", ErrorCode.none)
        if top_error != ErrorCode.none:
            raise AdminError(f"Metadata from {conn.address}: {top_error.name.upper()}")
        brokers = {b.node_id: BrokerInfo(int(b.node_id), b.host, int(b.port), b.rack) for b in answer.brokers}
        found: dict[str, TopicInfo] = {}
        errors: dict[str, Outcome] = {}
        for t in answer.topics:
            # A topic whose partitions lack a leader still describes (LEADER_NOT_AVAILABLE is per partition).
            if t.error_code not in (ErrorCode.none, ErrorCode.leader_not_available) or t.name is None:
                errors[t.name or str(t.topic_id)] = Outcome(t.error_code)
                continue
            partitions = {int(p.partition_index): PartitionInfo(
                int(p.partition_index), int(p.leader_id), tuple(int(r) for r in p.replica_nodes),
                tuple(int(r) for r in p.isr_nodes), tuple(int(r) for r in getattr(p, "offline_replicas", ())))
                for p in t.partitions}
            found[t.name] = TopicInfo(t.name, partitions, kafka_topic_id(getattr(t, "topic_id", None)),
                                      bool(t.is_internal))
        self.cluster = ClusterMetadata(brokers, int(answer.controller_id), found, errors)
        return self.cluster

    # ---- topics -------------------------------------------------------------------------------------------
    def create_topics(self, topics: list[NewTopic], validate_only: bool = False) -> dict[str, Outcome]:
        conn = self.controller()
        schema = request_schema(CREATE_TOPICS, conn.version_for(CREATE_TOPICS))
        topic_cls = nested(schema, "CreatableTopic")
        assignment_cls = nested(schema, "CreatableReplicaAssignment")
        config_cls = nested(schema, "CreatableTopicConfig")
        answer = conn.request(CREATE_TOPICS, timeout=self._timeout, validate_only=validate_only, topics=tuple(
            build(topic_cls, name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                  assignments=tuple(build(assignment_cls, partition_index=p, broker_ids=tuple(r))
                                    for p, r in sorted(t.assignment.items())),
                  configs=tuple(build(config_cls, name=k, value=v) for k, v in t.configs.items()))
            for t in topics))
        return {r.name: Outcome(r.error_code, getattr(r, "error_message", None)) for r in answer.topics}

    def delete_topics(self, names: list[str]) -> dict[str, Outcome]:
        conn = self.controller()
        answer = conn.request(DELETE_TOPICS, topic_names=tuple(names), timeout=self._timeout)
        return {r.name: Outcome(r.error_code, getattr(r, "error_message", None)) for r in answer.responses}

    def create_partitions(self, increases: dict[str, tuple[int, Optional[list[list[int]]]]]) -> dict[str, Outcome]:
        """topic -> (new total partition count, replicas of each new partition or None)."""
        conn = self.controller()
        schema = request_schema(CREATE_PARTITIONS, conn.version_for(CREATE_PARTITIONS))
        topic_cls = nested(schema, "CreatePartitionsTopic")
        assignment_cls = nested(schema, "CreatePartitionsAssignment")
        answer = conn.request(CREATE_PARTITIONS, timeout=self._timeout, validate_only=False, topics=tuple(
            build(topic_cls, name=name, count=count,
                  assignments=None if new is None else tuple(build(assignment_cls, broker_ids=tuple(r)) for r in new))
            for name, (count, new) in increases.items()))
        return {r.name: Outcome(r.error_code, r.error_message) for r in answer.results}

    # ---- configs ------------------------------------------------------------------------------------------
    def describe_topic_configs(self, names: list[str]) -> dict[str, tuple[Outcome, list[ConfigEntry]]]:
        conn = self.bootstrap
        resource_cls = nested(request_schema(DESCRIBE_CONFIGS, conn.version_for(DESCRIBE_CONFIGS)),
                              "DescribeConfigsResource")
        answer = conn.request(DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=False,
                              resources=tuple(build(resource_cls, resource_type=RESOURCE_TOPIC, resource_name=n,
                                                    configuration_keys=None) for n in names))
        out = {}
        for r in answer.results:
            entries = [ConfigEntry(c.name, c.value, int(getattr(c, "config_source", -1)), bool(c.is_sensitive),
                                   bool(c.read_only)) for c in r.configs]
            out[r.resource_name] = (Outcome(r.error_code, r.error_message), entries)
        return out

    def alter_topic_configs(self, changes: dict[str, list[tuple[str, int, Optional[str]]]]) -> dict[str, Outcome]:
        """topic -> [(key, OP_SET / OP_DELETE, value)] through IncrementalAlterConfigs."""
        conn = self.bootstrap
        schema = request_schema(INCREMENTAL_ALTER_CONFIGS, conn.version_for(INCREMENTAL_ALTER_CONFIGS))
        resource_cls = nested(schema, "AlterConfigsResource")
        config_cls = nested(schema, "AlterableConfig")
        answer = conn.request(INCREMENTAL_ALTER_CONFIGS, validate_only=False, resources=tuple(
            build(resource_cls, resource_type=RESOURCE_TOPIC, resource_name=topic, configs=tuple(
                build(config_cls, name=k, config_operation=op, value=v) for k, op, v in ops))
            for topic, ops in changes.items()))
        return {r.resource_name: Outcome(r.error_code, r.error_message) for r in answer.responses}

    # ---- leaders and reassignments ------------------------------------------------------------------------
    def elect_leaders(self, election_type: int,
                      partitions: Optional[list[tuple[str, int]]]) -> dict[tuple[str, int], Outcome]:
        """None: every partition (the controller picks the eligible ones)."""
        conn = self.controller()
        wanted = None
        if partitions is not None:
            topic_cls = nested(request_schema(ELECT_LEADERS, conn.version_for(ELECT_LEADERS)), "TopicPartitions")
            wanted = tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in _by_topic(partitions).items())
        answer = conn.request(ELECT_LEADERS, election_type=election_type, topic_partitions=wanted,
                              timeout=self._timeout)
        top = getattr(answer, "error_code", ErrorCode.none)
        if top != ErrorCode.none:
            raise AdminError(f"ElectLeaders: {top.name.upper()}")
        return {(r.topic, int(p.partition_id)): Outcome(p.error_code, p.error_message)
                for r in answer.replica_election_results for p in r.partition_result}

    def alter_partition_reassignments(
            self, targets: dict[tuple[str, int], Optional[list[int]]]) -> dict[tuple[str, int], Outcome]:
        """(topic, partition) -> new replicas, or None to cancel that partition's reassignment."""
        conn = self.controller()
        schema = request_schema(ALTER_PARTITION_REASSIGNMENTS, conn.version_for(ALTER_PARTITION_REASSIGNMENTS))
        topic_cls = nested(schema, "ReassignableTopic")
        partition_cls = nested(schema, "ReassignablePartition")
        by_topic: dict[str, list[tuple[int, Optional[list[int]]]]] = {}
        for (t, p), replicas in sorted(targets.items()):
            by_topic.setdefault(t, []).append((p, replicas))
        answer = conn.request(ALTER_PARTITION_REASSIGNMENTS, timeout=self._timeout,
                              allow_replication_factor_change=True, topics=tuple(
                build(topic_cls, name=t, partitions=tuple(
                    build(partition_cls, partition_index=p, replicas=None if r is None else tuple(r)) for p, r in ps))
                for t, ps in by_topic.items()))
        if answer.error_code != ErrorCode.none:
            # A request-level error (e.g. NOT_CONTROLLER) applies to every partition in it.
            failed = Outcome(answer.error_code, answer.error_message)
            return {tp: failed for tp in targets}
        return {(t.name, int(p.partition_index)): Outcome(p.error_code, p.error_message)
                for t in answer.responses for p in t.partitions}

    def list_partition_reassignments(
            self, partitions: Optional[list[tuple[str, int]]] = None) -> dict[tuple[str, int], OngoingReassignment]:
        """Reassignments in flight (None: in the whole cluster)."""
        conn = self.controller()
        wanted = None
        if partitions is not None:
            topic_cls = nested(request_schema(LIST_PARTITION_REASSIGNMENTS,
                                              conn.version_for(LIST_PARTITION_REASSIGNMENTS)),
                               "ListPartitionReassignmentsTopics")
            wanted = tuple(build(topic_cls, name=t, partition_indexes=tuple(ps))
                           for t, ps in _by_topic(partitions).items())
        answer = conn.request(LIST_PARTITION_REASSIGNMENTS, timeout=self._timeout, topics=wanted)
        if answer.error_code != ErrorCode.none:
            raise AdminError(f"ListPartitionReassignments: {Outcome(answer.error_code, answer.error_message).text()}")
        return {(t.name, int(p.partition_index)): OngoingReassignment(
            tuple(int(r) for r in p.replicas), tuple(int(r) for r in p.adding_replicas),
            tuple(int(r) for r in p.removing_replicas)) for t in answer.topics for p in t.partitions}


def admin_client_for(args, client_id: str) -> AdminClient:
    """The AdminClient of a command's --bootstrap-server, --timeout and --command-config
    (TLS and SASL from Kafka's client properties, cli/client_security.py)."""
    return AdminClient(args.bootstrap_server, args.timeout, client_id=client_id,
                       security=load_security(getattr(args, "command_config", None)))


def add_command_config_option(parser) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties (Kafka's keys: security.protocol, sasl.mechanism, "
                             "sasl.jaas.config, ssl.truststore.location, ...)")


def _by_topic(partitions: list[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(set(partitions)):
        out.setdefault(t, []).append(p)
    return out
