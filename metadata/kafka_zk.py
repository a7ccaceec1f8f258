"""Kafka's ZooKeeper metadata, read and written the way Apache Kafka 3.x (ZK mode) does.

`KafkaZkClient` wraps one kazoo session. Every znode it writes has the path
(`zk_paths`) and the JSON shape Kafka's own KafkaZkClient/ZkData write, so a
ZooKeeper ensemble holding our metadata reads like a Kafka cluster's.

Rules the whole module keeps:
- Every call is bounded: kazoo requests are waited on with `request_timeout_ms`,
  connecting with `connection_timeout_ms`. A ZkTimeoutError on a write means its
  outcome is unknown (kazoo may still send it after a reconnect).
- kazoo's exceptions never escape; they become the ZkError family below.
- Watch and session callbacks run on one thread of ours ("event thread"), one at
  a time and in order, never on kazoo's connection thread, so they may call back
  into this client.
"""
from __future__ import annotations

import base64
import collections
import dataclasses
import json
import logging
import queue
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Mapping, Sequence

from kazoo import exceptions as kazoo_errors
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from core.naming import topic_name_error
from metadata import zk_paths, zk_security

log = logging.getLogger(__name__)

# Kafka's defaults: zookeeper.session.timeout.ms, and the connection timeout
# defaults to the session timeout.
DEFAULT_SESSION_TIMEOUT_MS = 18_000
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


# --------------------------------------------------------------------- errors


class ZkError(Exception):
    """Base of every error this module raises."""


class ZkConnectionError(ZkError):
    """The request could not be completed because the connection is down; retryable."""


class ZkTimeoutError(ZkConnectionError):
    """No answer in time. For a write the outcome is unknown."""


class ZkSessionExpiredError(ZkConnectionError):
    """The session ended; its ephemeral znodes (registration, /controller) are gone."""


class ZkClientClosedError(ZkConnectionError):
    """The client was closed (or never started)."""


class ZkNodeExistsError(ZkError):
    pass


class ZkNoNodeError(ZkError):
    pass


class ZkNotEmptyError(ZkError):
    """A delete of a znode that still has children."""


class BadVersionError(ZkError):
    """A conditional write lost a race: the znode's version is no longer the expected one."""


class ControllerMovedError(ZkError):
    """A controller write was fenced: /controller_epoch changed, so another controller
    was elected since the caller read it."""


class BrokerIdInUseError(ZkNodeExistsError):
    """/brokers/ids/<id> is held by another live session."""

    def __init__(self, broker_id: int, owner_session_id: int):
        super().__init__(
            f"broker id {broker_id} is registered by another live ZooKeeper session 0x{owner_session_id:x}"
        )
        self.broker_id = broker_id
        self.owner_session_id = owner_session_id


class TopicExistsError(ZkNodeExistsError):
    pass


class TopicNotFoundError(ZkNoNodeError):
    pass


class InvalidTopicError(ZkError, ValueError):
    """Illegal topic name, or a name that collides with an existing one."""


class InvalidReplicaAssignmentError(ZkError, ValueError):
    pass


class PartitionStateExistsError(ZkNodeExistsError):
    pass


class PreferredReplicaElectionInProgressError(ZkNodeExistsError):
    """/admin/preferred_replica_election exists: the controller has not finished
    the previous election (Kafka's tool refuses to start another)."""


def _translate(error: BaseException, what: str) -> ZkError:
    # Order matters: ConnectionClosedError is a SessionExpiredError in kazoo.
    if isinstance(error, ZkError):
        return error
    if isinstance(error, KazooTimeoutError):
        return ZkTimeoutError(f"{what}: no answer from ZooKeeper in time")
    if isinstance(error, kazoo_errors.ConnectionClosedError):
        return ZkClientClosedError(f"{what}: the ZooKeeper client is closed")
    if isinstance(error, kazoo_errors.SessionExpiredError):
        return ZkSessionExpiredError(f"{what}: ZooKeeper session expired")
    if isinstance(error, (kazoo_errors.ConnectionLoss, kazoo_errors.ConnectionDropped, kazoo_errors.SessionMovedError,
                          kazoo_errors.OperationTimeoutError, kazoo_errors.RequestTimeoutError)):
        return ZkConnectionError(f"{what}: connection to ZooKeeper lost ({type(error).__name__})")
    if isinstance(error, kazoo_errors.NodeExistsError):
        return ZkNodeExistsError(f"{what}: znode already exists")
    if isinstance(error, kazoo_errors.NoNodeError):
        return ZkNoNodeError(f"{what}: znode does not exist")
    if isinstance(error, kazoo_errors.BadVersionError):
        return BadVersionError(f"{what}: znode version changed")
    if isinstance(error, kazoo_errors.NotEmptyError):
        return ZkNotEmptyError(f"{what}: znode has children")
    return ZkError(f"{what}: {type(error).__name__}: {error}")


# ------------------------------------------------------------------ payloads


def encode_json(value: Any) -> bytes:
    # Jackson's compact output, UTF-8 without \u escapes, like Kafka's Json.encodeAsBytes.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_json(data: bytes | None) -> Any:
    if not data:
        return None
    return json.loads(data.decode("utf-8"))


def _now_ms() -> int:
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
        "timestamp": str(_now_ms() if timestamp_ms is None else timestamp_ms),
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


# ------------------------------------------------------------ event thread


class WatchHandle:
    """Returned by the watch_* methods; cancel() stops further callbacks."""

    def __init__(self, description: str):
        self.description = description
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


class _EventThread:
    """Runs callbacks one at a time, in submission order, off kazoo's threads."""

    _STOP = object()

    def __init__(self, name: str):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, handle: WatchHandle | None, callback: Callable[..., Any], *args: Any) -> None:
        self._queue.put((handle, callback, args))

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout_s: float) -> None:
        self._queue.put(self._STOP)
        if not self.is_current():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            handle, callback, args = item
            if handle is not None and handle.cancelled:
                continue
            try:
                callback(*args)
            except Exception:
                log.exception("ZooKeeper callback %r failed", getattr(callback, "__name__", callback))


# ------------------------------------------------------------------ client


class KafkaZkClient:
    """One ZooKeeper session holding Kafka's metadata layout."""

    def __init__(
        self,
        connect_string: str,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        request_timeout_ms: int | None = None,
        security: "zk_security.ZkClientSecurity | None" = None,
    ):
        """
        connect_string: "host:port[,host:port...][/chroot]"; the chroot is created on start().
        security: credentials, TLS and znode ACLs (metadata/zk_security.py); default: this
            process's (zk_security.current()).
        connection_timeout_ms: how long start() waits for a session (default: the session timeout).
        request_timeout_ms: how long any single call waits (default: the session timeout,
            since a request cannot usefully outlive the session it was sent on).
        """
        self.connect_string = connect_string
        self._hosts, self.chroot = zk_paths.split_chroot(connect_string)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms if connection_timeout_ms is not None else session_timeout_ms
        self.request_timeout_ms = request_timeout_ms if request_timeout_ms is not None else session_timeout_ms
        self._kazoo: KazooClient | None = None
        self._events: _EventThread | None = None
        self._closing = False
        self._connected = threading.Event()
        self._state_lock = threading.Lock()
        self._last_session_id: int | None = None
        self._session_lost_callbacks: list[Callable[[], Any]] = []
        self._new_session_callbacks: list[Callable[[int], Any]] = []
        self._kazoo_watches: list[Any] = []  # keep recipe objects alive with the client
        self.security = security if security is not None else zk_security.current()

    # ------------------------------------------------------------ lifecycle

    def start(self, ensure_paths: bool = True) -> "KafkaZkClient":
        """Connect (creating the chroot if any) and, by default, create Kafka's
        persistent top-level paths. Raises ZkTimeoutError if no session in time."""
        if self._kazoo is not None:
            return self
        self._closing = False
        if self.chroot:
            self._create_chroot()
        self._events = _EventThread(name=f"kafka-zk-events[{self.connect_string}]")
        self._kazoo = KazooClient(
            hosts=self.connect_string,
            timeout=self.session_timeout_ms / 1000.0,
            **self.security.kazoo_kwargs(),
            # kazoo's default backs off reconnects up to an hour; a broker must
            # keep trying every second or so to get its session back.
            connection_retry=dict(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=dict(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        )
        self._kazoo.add_listener(self._on_kazoo_state)
        try:
            self._kazoo.start(timeout=self.connection_timeout_ms / 1000.0)
        except KazooTimeoutError:
            self._discard_after_failed_start()
            raise ZkTimeoutError(
                f"could not connect to ZooKeeper at {self.connect_string} "
                f"within {self.connection_timeout_ms} ms"
            ) from None
        except Exception as error:
            self._discard_after_failed_start()
            raise _translate(error, f"connect to {self.connect_string}") from error
        client_id = self._kazoo.client_id
        self._last_session_id = client_id[0] if client_id else None
        if ensure_paths:
            try:
                self.ensure_persistent_paths()
            except BaseException:
                self.close()
                raise
        return self

    def close(self) -> None:
        """End the session (its ephemeral znodes go at once) and stop the event thread."""
        kazoo_client, events = self._kazoo, self._events
        if kazoo_client is None:
            return
        self._closing = True
        try:
            kazoo_client.stop()
        except Exception:
            log.exception("stopping the ZooKeeper session failed")
        finally:
            try:
                kazoo_client.close()
            except Exception:
                log.exception("closing the ZooKeeper client failed")
            self._kazoo = None
            self._events = None
            self._kazoo_watches.clear()
            self._connected.clear()
            if events is not None:
                events.stop(timeout_s=5.0)

    def __enter__(self) -> "KafkaZkClient":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def session_id(self) -> int | None:
        """The current session's id, None while disconnected."""
        client_id = self._kazoo.client_id if self._kazoo is not None else None
        return client_id[0] if client_id else None

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout_s: float) -> bool:
        """True once connected (e.g. after a session loss, before re-registering)."""
        return self._connected.wait(timeout_s)

    def on_session_lost(self, callback: Callable[[], Any]) -> None:
        """Call `callback()` (on the event thread) when the session expires: our
        ephemerals are gone. Not called for close(). kazoo then opens a new session
        by itself; see on_new_session."""
        self._session_lost_callbacks.append(callback)

    def on_new_session(self, callback: Callable[[int], Any]) -> None:
        """Call `callback(session_id)` (on the event thread) when a new session
        replaces a lost one: the time to re-register the broker."""
        self._new_session_callbacks.append(callback)

    def _on_kazoo_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: record and hand off, never call ZooKeeper here.
        events = self._events
        if state == KazooState.CONNECTED:
            self._connected.set()
            client_id = self._kazoo.client_id if self._kazoo is not None else None
            session_id = client_id[0] if client_id else None
            with self._state_lock:
                previous, self._last_session_id = self._last_session_id, session_id
            if previous is not None and session_id is not None and session_id != previous and events is not None:
                log.warning("new ZooKeeper session 0x%x replaces lost session 0x%x", session_id, previous)
                for callback in list(self._new_session_callbacks):
                    events.submit(None, callback, session_id)
        elif state == KazooState.SUSPENDED:
            self._connected.clear()
            log.info("ZooKeeper connection suspended; kazoo is reconnecting")
        elif state == KazooState.LOST:
            self._connected.clear()
            if not self._closing and events is not None:
                log.warning("ZooKeeper session lost")
                for callback in list(self._session_lost_callbacks):
                    events.submit(None, callback)

    def _create_chroot(self) -> None:
        # kazoo expects the chroot to exist; Kafka creates it the same way, with a
        # short-lived session on the bare hosts.
        bootstrap = KazooClient(hosts=self._hosts, timeout=self.session_timeout_ms / 1000.0,
                                **self.security.kazoo_kwargs())
        try:
            bootstrap.start(timeout=self.connection_timeout_ms / 1000.0)
        except KazooTimeoutError:
            raise ZkTimeoutError(
                f"could not connect to ZooKeeper at {self._hosts} within {self.connection_timeout_ms} ms"
            ) from None
        try:
            bootstrap.ensure_path_async(self.chroot).get(timeout=self.request_timeout_ms / 1000.0)
        except Exception as error:
            raise _translate(error, f"create chroot {self.chroot}") from error
        finally:
            bootstrap.stop()
            bootstrap.close()

    def _discard_after_failed_start(self) -> None:
        if self._kazoo is not None:
            try:
                self._kazoo.stop()
                self._kazoo.close()
            except Exception:
                pass
        self._kazoo = None
        if self._events is not None:
            self._events.stop(timeout_s=1.0)
            self._events = None

    # ------------------------------------------------------- request plumbing

    def _client(self) -> KazooClient:
        kazoo_client = self._kazoo
        if kazoo_client is None:
            raise ZkClientClosedError("the ZooKeeper client is not started")
        return kazoo_client

    def _await(self, what: str, start_request: Callable[[KazooClient], Any], retry: bool = False) -> Any:
        """Send one request and wait for it, bounded by the request timeout.

        retry=True re-sends after a dropped connection, for requests that are safe
        to repeat (reads, unconditional idempotent writes)."""
        deadline = time.monotonic() + self.request_timeout_ms / 1000.0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZkTimeoutError(f"{what}: no answer from ZooKeeper in time")
            try:
                return start_request(self._client()).get(timeout=remaining)
            except ZkError:
                raise
            except Exception as error:
                translated = _translate(error, what)
                if (retry and type(translated) is ZkConnectionError
                        and deadline - time.monotonic() > 0):
                    # Wait for the reconnect rather than spinning on a dead connection.
                    self._connected.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                    continue
                raise translated from error

    def _get(self, path: str, watch: Callable | None = None) -> tuple[bytes, Any] | None:
        try:
            return self._await(f"get {path}", lambda zk: zk.get_async(path, watch), retry=True)
        except ZkNoNodeError:
            return None

    def _exists(self, path: str, watch: Callable | None = None) -> Any:
        return self._await(f"exists {path}", lambda zk: zk.exists_async(path, watch), retry=True)

    def _children(self, path: str) -> list[str] | None:
        try:
            return self._await(f"children of {path}", lambda zk: zk.get_children_async(path), retry=True)
        except ZkNoNodeError:
            return None

    def _create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                makepath: bool = False) -> str:
        return self._await(
            f"create {path}",
            lambda zk: zk.create_async(path, data, acl=self.security.acl_for(path), ephemeral=ephemeral,
                                       sequence=sequence, makepath=makepath),
        )

    def _create_if_absent(self, path: str, data: bytes = b"", makepath: bool = True) -> bool:
        try:
            self._create(path, data, makepath=makepath)
            return True
        except ZkNodeExistsError:
            return False

    def _set(self, path: str, data: bytes, version: int = -1) -> Any:
        return self._await(f"set {path}", lambda zk: zk.set_async(path, data, version))

    def _delete(self, path: str, version: int = -1) -> bool:
        try:
            self._await(f"delete {path}", lambda zk: zk.delete_async(path, version))
            return True
        except ZkNoNodeError:
            return False

    def _delete_recursive(self, path: str) -> None:
        # Our own walk instead of kazoo's recursive delete, whose calls have no timeout.
        for _ in range(5):
            children = self._children(path)
            if children is None:
                return
            for child in children:
                self._delete_recursive(f"{path}/{child}")
            try:
                self._delete(path)
                return
            except ZkNotEmptyError:
                pass  # a child appeared while we deleted the others; walk again
        raise ZkError(f"delete {path}: children keep appearing")

    def _set_or_create(self, path: str, data: bytes) -> None:
        for _ in range(5):
            try:
                self._set(path, data)
                return
            except ZkNoNodeError:
                pass
            try:
                self._create(path, data, makepath=True)
                return
            except ZkNodeExistsError:
                pass  # created by someone else in between: set it
        raise ZkError(f"set or create {path}: raced with concurrent deletes")

    def _commit(self, what: str, build: Callable[[Any], None]) -> list[Any]:
        """Run a multi-op transaction; returns kazoo's per-op results (exception
        instances mark failed ops, RolledBackError the ones undone with them)."""

        def start_request(zk: KazooClient) -> Any:
            transaction = zk.transaction()
            build(transaction)
            return transaction.commit_async()

        return self._await(what, start_request)

    @staticmethod
    def _first_failure(results: Sequence[Any]) -> tuple[int, BaseException] | None:
        for index, result in enumerate(results):
            if isinstance(result, BaseException) and not isinstance(
                result, (kazoo_errors.RolledBackError, kazoo_errors.RuntimeInconsistency)
            ):
                return index, result
        return None

    def _watch_children(self, path: str, handle: WatchHandle, convert: Callable[[list[str]], Any],
                        callback: Callable[[Any], Any]) -> WatchHandle:
        self._create_if_absent(path)
        events = self._events
        if events is None:
            raise ZkClientClosedError("the ZooKeeper client is not started")

        def on_children(children: list[str]) -> bool | None:
            # On a kazoo thread: hand the callback to our event thread.
            if handle.cancelled:
                return False
            events.submit(handle, callback, convert(children))
            return None

        return self._install_watch(handle, f"watch children of {path}",
                                   lambda: ChildrenWatch(self._client(), path, on_children))

    # ------------------------------------------------------------ structure

    def ensure_persistent_paths(self) -> None:
        """Create Kafka's persistent top-level znodes (ZkData.PersistentZkPaths)."""
        for path in zk_paths.PERSISTENT_PATHS:
            if self._exists(path) is None:
                self._create_if_absent(path)
        if self.security.set_acl:
            # The ACL roots too, so that nobody else can create them (and the
            # ACLs in them) before an authorizer is configured.
            for path in zk_paths.ACL_ROOT_PATHS:
                if self._exists(path) is None:
                    self._create_if_absent(path, makepath=True)

    def secure_existing_paths(self) -> None:
        """zookeeper.set.acl on a cluster whose znodes were created without it
        (Kafka's zookeeper-security-migration, for what matters most): Kafka's
        ACLs on the persistent paths and their parents, and on everything under
        /config and the ACL paths, where credentials and ACLs live. Znodes that
        already carry other ACLs are left alone. `raykafka start` calls it once
        per start, before the broker's other sessions open."""
        roots = {zk_paths.CONFIG, *(p for p in zk_paths.ACL_ROOT_PATHS if p.count("/") == 1)}
        tops = set()
        for path in zk_paths.PERSISTENT_PATHS:
            parts = path.strip("/").split("/")
            tops.update("/" + "/".join(parts[:i + 1]) for i in range(len(parts)))
        for path in sorted(tops - roots):
            self._secure(path)
        for root in sorted(roots):
            self._secure_tree(root, limit=100_000)

    def _secure(self, path: str) -> bool:
        """Kafka's ACL on ``path`` if it is world-writable now; False if it does not exist."""
        from kazoo.security import OPEN_ACL_UNSAFE

        try:
            acls, stat = self._await(f"get acl {path}", lambda zk: zk.get_acls_async(path), retry=True)
        except ZkNoNodeError:
            return False
        if list(acls) == list(OPEN_ACL_UNSAFE):
            self._await(f"set acl {path}", lambda zk: zk.set_acls_async(path, self.security.acl_for(path),
                                                                       stat.aversion))
        return True

    def _secure_tree(self, root: str, limit: int) -> None:
        todo = [root]
        while todo and limit > 0:
            path = todo.pop()
            limit -= 1
            if self._secure(path):
                todo.extend(f"{path.rstrip('/')}/{child}" for child in (self._children(path) or ()))

    def exists(self, path: str) -> bool:
        return self._exists(path) is not None

    def get_data_and_version(self, path: str) -> tuple[bytes | None, int]:
        """(data, znode version); (None, -1) when the znode does not exist. Empty data reads as None."""
        found = self._get(path)
        if found is None:
            return None, -1
        data, stat = found
        return (data or None), stat.version

    def conditional_update_path(self, path: str, data: bytes, expected_version: int) -> tuple[bool, int]:
        """Kafka's conditionalUpdatePath: write only if the znode is still at
        ``expected_version`` (-1: create it, only if absent); -> (written, new version)."""
        if expected_version < 0:
            try:
                self._create(path, data, makepath=True)
                return True, 0
            except ZkNodeExistsError:
                return False, -1
        try:
            return True, self._set(path, data, expected_version).version
        except (BadVersionError, ZkNoNodeError):
            return False, -1

    # --------------------------------------------------------------- cluster

    def get_cluster_id(self) -> str | None:
        found = self._get(zk_paths.CLUSTER_ID)
        return None if found is None else decode_json(found[0])["id"]

    def get_or_create_cluster_id(self, proposed_cluster_id: str | None = None) -> str:
        """The cluster id in /cluster/id, creating it if absent; the first writer wins."""
        existing = self.get_cluster_id()
        if existing is not None:
            return existing
        proposed = proposed_cluster_id or generate_kafka_uuid()
        # Kafka writes this version as a string.
        if self._create_if_absent(zk_paths.CLUSTER_ID, encode_json({"version": "1", "id": proposed})):
            return proposed
        return self.get_cluster_id()

    # --------------------------------------------------------------- brokers

    def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None = None,
        extra: Mapping[str, Any] | None = None,
        *,
        wait_for_stale_s: float | None = None,
        replace_stale: Callable[[dict[str, Any]], bool] | None = None,
        security: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create the ephemeral /brokers/ids/<id>; returns the JSON written.

        A registration left by a session that died without closing (kill -9)
        stays until ZooKeeper expires it, so by default we wait up to one session
        timeout (plus a little, since expiry is checked once per tick) for it to go.
        Raises BrokerIdInUseError if it is still held by another session then.

        ``replace_stale``: for a caller that knows the previous holder is dead
        (the supervisor replacing an edge whose process died): a registration
        owned by another session for which it answers True (given that
        registration's JSON) is deleted at once instead of waited for. The
        delete is conditional on the znode's version, so a registration that
        changed in between is looked at again."""
        path = zk_paths.broker_path(broker_id)
        body = broker_registration_json(broker_id, host, port, rack, extra, security=security)
        data = encode_json(body)
        if wait_for_stale_s is None:
            wait_for_stale_s = self.session_timeout_ms / 1000.0 + 3.0
        deadline = time.monotonic() + wait_for_stale_s
        self._create_if_absent(zk_paths.BROKER_IDS)
        while True:
            try:
                self._create(path, data, ephemeral=True)
                log.info("registered broker %d at %s:%d", broker_id, host, port)
                return body
            except ZkNodeExistsError:
                pass
            gone = threading.Event()
            stat = self._exists(path, watch=lambda event: gone.set())
            if stat is None:
                continue
            if stat.ephemeralOwner == self.session_id:
                # Our own create whose answer was lost with a dropped connection.
                self._set(path, data)
                return body
            if replace_stale is not None and self._delete_stale_registration(path, stat, replace_stale):
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerIdInUseError(broker_id, stat.ephemeralOwner)
            log.info(
                "broker id %d is still registered by session 0x%x; waiting up to %.1f s for it to expire",
                broker_id, stat.ephemeralOwner, remaining,
            )
            gone.wait(remaining)

    def _delete_stale_registration(self, path: str, stat: Any,
                                   replace_stale: Callable[[dict[str, Any]], bool]) -> bool:
        """Delete the registration at ``path`` (held by another session, as of
        ``stat``) if ``replace_stale`` says it is a dead holder's; True if the
        caller should try to create again."""
        found = self._get(path)
        if found is None:
            return True  # gone meanwhile
        raw, current = found
        if current.ephemeralOwner != stat.ephemeralOwner or current.ephemeralOwner == self.session_id:
            return True  # changed hands meanwhile: look again
        try:
            existing = decode_json(raw)
        except Exception:  # noqa: BLE001 - not ours to judge: wait for it as for any other holder
            return False
        if not isinstance(existing, dict) or not replace_stale(existing):
            return False
        try:
            self._delete(path, current.version)
        except BadVersionError:
            return True
        log.info("deleted %s left by dead session 0x%x", path, current.ephemeralOwner)
        return True

    def deregister_broker(self, broker_id: int) -> bool:
        """Delete /brokers/ids/<id> if this session owns it (a controlled shutdown)."""
        path = zk_paths.broker_path(broker_id)
        stat = self._exists(path)
        if stat is None or stat.ephemeralOwner != self.session_id:
            return False
        try:
            return self._delete(path, stat.version)
        except BadVersionError:
            return False

    def get_broker(self, broker_id: int) -> dict[str, Any] | None:
        found = self._get(zk_paths.broker_path(broker_id))
        return None if found is None else decode_json(found[0])

    def get_broker_ids(self) -> list[int]:
        return sorted(int(child) for child in (self._children(zk_paths.BROKER_IDS) or []))

    def get_brokers(self) -> dict[int, dict[str, Any]]:
        """Every registered broker's JSON, by id."""
        return {
            int(path.rsplit("/", 1)[1]): decode_json(data)
            for path, (data, _stat) in self._get_many(zk_paths.broker_path(i) for i in self.get_broker_ids()).items()
        }

    def watch_brokers(self, callback: Callable[[list[int]], Any]) -> WatchHandle:
        """callback(sorted live broker ids) now and on every change, on the event thread."""
        return self._watch_children(
            zk_paths.BROKER_IDS, WatchHandle("brokers"),
            lambda children: sorted(int(child) for child in children), callback,
        )

    def generate_broker_id(self, reserved_max: int = DEFAULT_RESERVED_BROKER_MAX_ID) -> int:
        """Kafka's broker.id.generation: reserved_max + the version /brokers/seqid
        reaches after an unconditional setData, so ids are unique and > reserved_max."""
        for _ in range(3):
            try:
                stat = self._set(zk_paths.BROKER_SEQUENCE_ID, b"")
                return reserved_max + stat.version
            except ZkNoNodeError:
                self._create_if_absent(zk_paths.BROKER_SEQUENCE_ID)
        raise ZkError("generate broker id: /brokers/seqid keeps disappearing")

    def _get_many(self, paths: Iterable[str]) -> dict[str, tuple[bytes, Any]]:
        """Read many znodes with pipelined requests; absent ones are left out."""
        paths = list(paths)
        client = self._client()
        pending = [(path, client.get_async(path)) for path in paths]
        deadline = time.monotonic() + self.request_timeout_ms / 1000.0
        found: dict[str, tuple[bytes, Any]] = {}
        for path, request in pending:
            try:
                found[path] = request.get(timeout=max(0.0, deadline - time.monotonic()))
            except kazoo_errors.NoNodeError:
                continue
            except Exception as error:
                translated = _translate(error, f"get {path}")
                if type(translated) is ZkConnectionError:
                    # Fall back to one-by-one reads, which wait for the reconnect.
                    again = self._get(path)
                    if again is not None:
                        found[path] = again
                    continue
                raise translated from error
        return found

    # ---------------------------------------------------------------- topics

    def create_topic(
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
        if self.exists(zk_paths.topic_path(topic)):
            raise TopicExistsError(f"Topic '{topic}' already exists.")
        if self.exists(zk_paths.delete_topic_path(topic)):
            raise TopicExistsError(f"Topic '{topic}' is marked for deletion.")
        if "." in topic or "_" in topic:
            # Kafka refuses names that differ only in '.' vs '_': they share metric names.
            collisions = [
                existing for existing in (self.get_topics())
                if existing.replace(".", "_") == topic.replace(".", "_")
            ]
            if collisions:
                raise InvalidTopicError(f"Topic '{topic}' collides with existing topics: {', '.join(collisions)}")
        topic_id = topic_id or generate_kafka_uuid()
        self._set_or_create(
            zk_paths.topic_config_path(topic),
            encode_json({"version": CONFIG_ZNODE_VERSION, "config": dict(config or {})}),
        )
        body = TopicAssignment({p: list(r) for p, r in assignment.items()}, topic_id).to_json()
        try:
            self._create(zk_paths.topic_path(topic), encode_json(body), makepath=True)
        except ZkNodeExistsError:
            raise TopicExistsError(f"Topic '{topic}' already exists.") from None
        log.info("created topic %s (%s) with %d partitions", topic, topic_id, len(assignment))
        return topic_id

    def get_topic(self, topic: str) -> TopicAssignment | None:
        found = self._get(zk_paths.topic_path(topic))
        return None if found is None else TopicAssignment.from_json(decode_json(found[0]))

    def get_topic_with_version(self, topic: str) -> tuple[TopicAssignment, int] | None:
        found = self._get(zk_paths.topic_path(topic))
        return None if found is None else (TopicAssignment.from_json(decode_json(found[0])), found[1].version)

    def topic_exists(self, topic: str) -> bool:
        return self.exists(zk_paths.topic_path(topic))

    def get_topics(self) -> list[str]:
        return sorted(self._children(zk_paths.BROKER_TOPICS) or [])

    def get_topic_assignments(self, topics: Iterable[str] | None = None) -> dict[str, TopicAssignment]:
        """Many topics' assignments in one pipelined round (all topics by default)."""
        names = self.get_topics() if topics is None else list(topics)
        found = self._get_many(zk_paths.topic_path(topic) for topic in names)
        return {
            path.rsplit("/", 1)[1]: TopicAssignment.from_json(decode_json(data))
            for path, (data, _stat) in found.items()
        }

    def watch_topics(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted topic names) now and on every change, on the event thread."""
        return self._watch_children(zk_paths.BROKER_TOPICS, WatchHandle("topics"), sorted, callback)

    def watch_topic(self, topic: str, callback: Callable[[TopicAssignment | None], Any]) -> WatchHandle:
        """callback(assignment or None) now and whenever /brokers/topics/<t> changes
        (partitions added, reassignment), on the event thread."""
        return self._watch_data(
            zk_paths.topic_path(topic), WatchHandle(f"topic {topic}"),
            lambda data: None if data is None else TopicAssignment.from_json(decode_json(data)), callback,
        )

    def add_partitions(self, topic: str, new_partitions: Mapping[int, Sequence[int]]) -> dict[int, list[int]]:
        """Add partitions to /brokers/topics/<t>, keeping its topic id. `new_partitions`
        numbers them right after the existing ones; repeating an existing partition
        with its current replicas is allowed. Returns the whole new assignment.
        Raises BadVersionError if the znode changed concurrently."""
        current = self.get_topic_with_version(topic)
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
        self._set(zk_paths.topic_path(topic), encode_json(updated.to_json()), version)
        return merged

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment, expected_zk_version: int,
                             *, expected_controller_epoch_zk_version: int | None = None) -> int:
        """Conditionally rewrite /brokers/topics/<t> (reassignments); returns the new version."""
        path = zk_paths.topic_path(topic)
        return self._conditional_set(path, encode_json(assignment.to_json()), expected_zk_version,
                                     expected_controller_epoch_zk_version)

    # ---------------------------------------------------------------- configs

    def get_entity_config(self, entity_type: str, entity_name: str) -> dict[str, str]:
        found = self._get(zk_paths.config_entity_path(entity_type, entity_name))
        if found is None:
            return {}
        body = decode_json(found[0]) or {}
        return dict(body.get("config", {}))

    def set_entity_config(self, entity_type: str, entity_name: str, config: Mapping[str, str]) -> str:
        """Replace /config/<type>/<name> and announce it with a version-2 change
        notification, as Kafka's AdminZkClient.changeConfigs does. Returns the
        notification's znode name."""
        self._set_or_create(
            zk_paths.config_entity_path(entity_type, entity_name),
            encode_json({"version": CONFIG_ZNODE_VERSION, "config": dict(config)}),
        )
        notification = encode_json({
            "version": CONFIG_CHANGE_NOTIFICATION_VERSION,
            "entity_path": zk_paths.config_change_entity_path(entity_type, entity_name),
        })
        created = self._create(zk_paths.CONFIG_CHANGE_SEQUENTIAL_PREFIX, notification, sequence=True, makepath=True)
        return created.rsplit("/", 1)[1]

    def get_topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides ({} when it has none or does not exist)."""
        return self.get_entity_config(zk_paths.CONFIG_ENTITY_TOPICS, topic)

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> str:
        """Replace the topic's overrides and write the change notification."""
        if not self.topic_exists(topic):
            raise TopicNotFoundError(f"Topic '{topic}' does not exist.")
        return self.set_entity_config(zk_paths.CONFIG_ENTITY_TOPICS, topic, config)

    def get_broker_config(self, broker: int | str) -> dict[str, str]:
        """/config/brokers/<id> overrides ({} when none); broker may be "<default>",
        the cluster-wide defaults that a broker's own entry overrides."""
        return self.get_entity_config(zk_paths.CONFIG_ENTITY_BROKERS, zk_paths.broker_config_entity_name(broker))

    def set_broker_config(self, broker: int | str, config: Mapping[str, str]) -> str:
        """Replace a broker's (or "<default>") dynamic overrides, e.g.
        leader.replication.throttled.rate, and write the change notification.
        Values are stored as given (strings, as Kafka stores them); callers
        validate them against the broker config definitions."""
        for key, value in config.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"broker config entries must be str -> str, got {key!r}: {value!r}")
        return self.set_entity_config(zk_paths.CONFIG_ENTITY_BROKERS, zk_paths.broker_config_entity_name(broker),
                                      config)

    def watch_config_changes(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted /config/changes entry names) now and on every change."""
        return self._watch_children(zk_paths.CONFIG_CHANGES, WatchHandle("config_changes"), sorted, callback)

    def get_config_change_notifications(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, body) of each pending /config/changes entry, oldest first."""
        names = sorted(self._children(zk_paths.CONFIG_CHANGES) or [])
        found = self._get_many(zk_paths.config_change_notification_path(name) for name in names)
        return [(path.rsplit("/", 1)[1], decode_json(data)) for path, (data, _stat) in sorted(found.items())]

    # ------------------------------------------------------- partition state

    def create_partition_state(
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
            self._create_if_absent(zk_paths.topic_partitions_path(topic), makepath=False)
        except ZkNoNodeError:
            raise TopicNotFoundError(f"Topic '{topic}' does not exist.") from None
        self._create_if_absent(zk_paths.partition_path(topic, partition), makepath=False)
        path = zk_paths.partition_state_path(topic, partition)
        data = encode_json(state.to_json())
        try:
            if expected_controller_epoch_zk_version is None:
                self._create(path, data)
            else:
                self._fenced(f"create {path}", expected_controller_epoch_zk_version,
                             lambda transaction: transaction.create(path, data))
        except ZkNodeExistsError:
            raise PartitionStateExistsError(f"{path} already exists") from None
        return 0

    def get_partition_state(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        """(state, zk version) or None when the partition has no state yet."""
        found = self._get(zk_paths.partition_state_path(topic, partition))
        return None if found is None else (PartitionState.from_json(decode_json(found[0])), found[1].version)

    def update_partition_state(
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
        return self._conditional_set(path, encode_json(state.to_json()), expected_zk_version,
                                     expected_controller_epoch_zk_version)

    def get_all_partition_states(self, topic: str) -> dict[int, tuple[PartitionState, int]]:
        """Every partition of the topic that has a state znode: {p: (state, zk version)}."""
        partitions = self._children(zk_paths.topic_partitions_path(topic)) or []
        paths = {zk_paths.partition_state_path(topic, int(p)): int(p) for p in partitions if p.isdigit()}
        found = self._get_many(paths)
        return {
            paths[path]: (PartitionState.from_json(decode_json(data)), stat.version)
            for path, (data, stat) in sorted(found.items(), key=lambda item: paths[item[0]])
        }

    def _conditional_set(self, path: str, data: bytes, expected_zk_version: int,
                         expected_controller_epoch_zk_version: int | None) -> int:
        if expected_controller_epoch_zk_version is None:
            return self._set(path, data, expected_zk_version).version
        results = self._fenced(f"set {path}", expected_controller_epoch_zk_version,
                               lambda transaction: transaction.set_data(path, data, expected_zk_version))
        return results[1].version

    def _fenced(self, what: str, expected_controller_epoch_zk_version: int,
                add_operation: Callable[[Any], None]) -> list[Any]:
        """One write guarded by a check on /controller_epoch's version, in a single
        transaction, as Kafka's controller does to fence a deposed controller."""

        def build(transaction: Any) -> None:
            transaction.check(zk_paths.CONTROLLER_EPOCH, expected_controller_epoch_zk_version)
            add_operation(transaction)

        results = self._commit(what, build)
        failure = self._first_failure(results)
        if failure is None:
            return results
        index, error = failure
        if index == 0:
            raise ControllerMovedError(
                f"{what}: /controller_epoch is no longer at version {expected_controller_epoch_zk_version}"
            )
        raise _translate(error, what)

    # ---------------------------------------------------------------- deletion

    def mark_topic_for_deletion(self, topic: str) -> bool:
        """Create /admin/delete_topics/<t> for the controller to act on; False if
        it was already marked."""
        if not self.topic_exists(topic):
            raise TopicNotFoundError(f"Topic '{topic}' does not exist.")
        return self._create_if_absent(zk_paths.delete_topic_path(topic))

    def get_topics_marked_for_deletion(self) -> list[str]:
        return sorted(self._children(zk_paths.DELETE_TOPICS) or [])

    def watch_delete_topics(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted topics marked for deletion) now and on every change."""
        return self._watch_children(zk_paths.DELETE_TOPICS, WatchHandle("delete_topics"), sorted, callback)

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's znodes in Kafka's order: assignment and partition
        states, then config, then the deletion mark (so a crash part-way leaves
        the mark for the controller to finish). Absent pieces are skipped."""
        self._delete_recursive(zk_paths.topic_path(topic))
        self._delete(zk_paths.topic_config_path(topic))
        self._delete(zk_paths.delete_topic_path(topic))
        log.info("deleted topic %s from ZooKeeper", topic)

    # ---------------------------------------------------------------- controller

    def try_become_controller(self, broker_id: int) -> int | None:
        """Kafka's controller election: create the ephemeral /controller and bump
        /controller_epoch in one transaction, so the epoch moves exactly once per
        elected controller. Returns the new epoch, or None if another live session
        is controller."""
        data = encode_json({"version": CONTROLLER_ZNODE_VERSION, "brokerid": broker_id, "timestamp": str(_now_ms())})
        for _ in range(10):
            current = self.controller_epoch()
            if current is None:
                self._create_if_absent(zk_paths.CONTROLLER_EPOCH, str(INITIAL_CONTROLLER_EPOCH).encode())
                continue
            epoch, epoch_zk_version = current
            new_epoch = epoch + 1

            def build(transaction: Any) -> None:
                transaction.create(zk_paths.CONTROLLER, data, ephemeral=True)
                transaction.set_data(zk_paths.CONTROLLER_EPOCH, str(new_epoch).encode(), epoch_zk_version)

            try:
                results = self._commit("elect controller", build)
            except ZkConnectionError:
                # The transaction may have been applied before the connection dropped;
                # the owner check below tells.
                if self._controller_owned_by_me():
                    return self._current_epoch_value()
                raise
            failure = self._first_failure(results)
            if failure is None:
                log.info("broker %d is the controller, epoch %d", broker_id, new_epoch)
                return new_epoch
            index, error = failure
            if index == 0 and isinstance(error, kazoo_errors.NodeExistsError):
                if self._controller_owned_by_me():
                    # Won in an earlier attempt whose answer was lost.
                    return self._current_epoch_value()
                return None
            if index == 1 and isinstance(error, kazoo_errors.BadVersionError):
                continue  # the epoch moved (an election came and went); read it again
            if index == 1 and isinstance(error, kazoo_errors.NoNodeError):
                continue
            raise _translate(error, "elect controller")
        raise ZkError("elect controller: /controller_epoch kept changing")

    def _controller_owned_by_me(self) -> bool:
        stat = self._exists(zk_paths.CONTROLLER)
        return stat is not None and stat.ephemeralOwner == self.session_id

    def _current_epoch_value(self) -> int | None:
        current = self.controller_epoch()
        return None if current is None else current[0]

    def controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zk version) of /controller_epoch, None before the first election.
        The zk version is what expected_controller_epoch_zk_version fences on."""
        found = self._get(zk_paths.CONTROLLER_EPOCH)
        if found is None:
            return None
        data, stat = found
        return int(data.decode("ascii").strip()), stat.version

    def get_controller_id(self) -> int | None:
        found = self._get(zk_paths.CONTROLLER)
        return None if found is None else _controller_id_from(found[0])

    def watch_controller(self, callback: Callable[[int | None], Any]) -> WatchHandle:
        """callback(controller broker id, or None when there is none) now and on every
        change, on the event thread. A None is the cue for candidates to re-run
        try_become_controller."""
        return self._watch_data(zk_paths.CONTROLLER, WatchHandle("controller"), _controller_id_from, callback)

    def resign_controller(self) -> bool:
        """Delete /controller if this session holds it; True if it did."""
        stat = self._exists(zk_paths.CONTROLLER)
        if stat is None or stat.ephemeralOwner != self.session_id:
            return False
        try:
            return self._delete(zk_paths.CONTROLLER, stat.version)
        except BadVersionError:
            return False

    def controller_znode(self) -> tuple[int, int, int] | None:
        """(controller broker id, ephemeralOwner session id, zk version) of
        /controller, None when no controller is elected."""
        found = self._get(zk_paths.CONTROLLER)
        if found is None:
            return None
        data, stat = found
        return _controller_id_from(data), stat.ephemeralOwner, stat.version

    def delete_controller_if(self, owner_session_id: int, broker_id: int) -> bool:
        """Delete /controller only if it is still the znode that `broker_id`'s
        session `owner_session_id` created; True if this call deleted it.

        Why: Ray reports an actor's process dead at once, while ZooKeeper keeps
        the dead controller's ephemeral /controller until its session times out
        (zookeeper.session.timeout.ms). Deleting it then lets the surviving
        brokers elect a new controller without that wait. Kafka itself waits.

        Why this is safe:
        - Only that exact znode goes. ZooKeeper cannot check an ephemeralOwner in
          a transaction, and every /controller has zk version 0, so the version
          alone cannot tell one election's znode from the next. But every
          election creates /controller and bumps /controller_epoch in one
          transaction, and no election commits while a /controller exists. So
          we read /controller, then /controller_epoch, then /controller again:
          if it is the same znode both times (same czxid), the epoch version read
          belongs to its election, and a transaction "check /controller_epoch at
          that version; delete /controller at its version" deletes that znode
          or nothing (a newer controller moved the epoch version on).
        - Controller fencing is unchanged: a zombie controller (the process was
          not dead after all) still writes through /controller_epoch version
          checks, which fail once a successor is elected, and it learns it lost
          /controller from its watch.
        A ZkConnectionError means the outcome is unknown; calling again answers
        False if the znode is gone either way."""
        first = self._get(zk_paths.CONTROLLER)
        if first is None:
            return False
        data, stat = first
        if stat.ephemeralOwner != owner_session_id or _controller_id_from(data) != broker_id:
            return False
        epoch = self._exists(zk_paths.CONTROLLER_EPOCH)
        again = self._exists(zk_paths.CONTROLLER)
        if epoch is None or again is None or again.czxid != stat.czxid:
            return False

        def build(transaction: Any) -> None:
            transaction.check(zk_paths.CONTROLLER_EPOCH, epoch.version)
            transaction.delete(zk_paths.CONTROLLER, stat.version)

        results = self._commit("delete /controller", build)
        failure = self._first_failure(results)
        if failure is None:
            log.info("deleted /controller of broker %d (session 0x%x)", broker_id, owner_session_id)
            return True
        _index, error = failure
        if isinstance(error, (kazoo_errors.BadVersionError, kazoo_errors.NoNodeError)):
            return False
        raise _translate(error, "delete /controller")

    def _watch_data(self, path: str, handle: WatchHandle, convert: Callable[[bytes | None], Any],
                    callback: Callable[[Any], Any]) -> WatchHandle:
        events = self._events
        if events is None:
            raise ZkClientClosedError("the ZooKeeper client is not started")

        def on_data(data: bytes | None, _stat: Any) -> bool | None:
            # On a kazoo thread: hand the callback to our event thread.
            if handle.cancelled:
                return False
            try:
                value = convert(data)
            except Exception:
                log.exception("undecodable data at %s", path)
                return None
            events.submit(handle, callback, value)
            return None

        return self._install_watch(handle, f"watch {path}", lambda: DataWatch(self._client(), path, on_data))

    def _install_watch(self, handle: WatchHandle, what: str, make_watch: Callable[[], Any]) -> WatchHandle:
        # kazoo's watch recipes make their first read inline and retry it without
        # limit while disconnected. Run that on a helper thread so the caller waits
        # at most the request timeout; if it is still retrying then, the watch gets
        # established (and fires) once the connection is back.
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def install() -> None:
            try:
                outcome["watch"] = make_watch()
            except BaseException as error:  # handed to the caller below
                outcome["error"] = error
            finally:
                done.set()

        threading.Thread(target=install, name=f"install {handle.description} watch", daemon=True).start()
        if not done.wait(self.request_timeout_ms / 1000.0):
            log.warning("%s: still waiting for ZooKeeper; the watch will start once it answers", what)
            return handle
        if "error" in outcome:
            raise _translate(outcome["error"], what) from outcome["error"]
        self._kazoo_watches.append(outcome["watch"])
        return handle

    # ------------------------------------------------------- admin requests

    def get_partition_reassignment(self) -> dict[tuple[str, int], list[int]]:
        """/admin/reassign_partitions as {(topic, partition): target replicas}; {} when absent."""
        found = self._get(zk_paths.REASSIGN_PARTITIONS)
        return {} if found is None else (_decode_reassignment(found[0]) or {})

    def set_partition_reassignment(self, reassignment: Mapping[tuple[str, int], Sequence[int]], *,
                                   expected_controller_epoch_zk_version: int | None = None) -> None:
        """Create or overwrite /admin/reassign_partitions (Kafka's
        setOrCreatePartitionReassignment). An empty one deletes the znode, as
        Kafka's controller does once the last reassignment completes. With
        expected_controller_epoch_zk_version the write is fenced (ControllerMovedError)."""
        if not reassignment:
            self.delete_partition_reassignment(
                expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)
            return
        data = _encode_reassignment(reassignment)
        path = zk_paths.REASSIGN_PARTITIONS
        if expected_controller_epoch_zk_version is None:
            self._set_or_create(path, data)
            return
        self._fenced_set_or_create(zk_paths.ADMIN, path, data, expected_controller_epoch_zk_version)

    def delete_partition_reassignment(self, *, expected_controller_epoch_zk_version: int | None = None) -> bool:
        """Delete /admin/reassign_partitions; False if it was absent."""
        return self._delete_admin_request(zk_paths.REASSIGN_PARTITIONS, expected_controller_epoch_zk_version)

    def watch_partition_reassignment(
        self, callback: Callable[[dict[tuple[str, int], list[int]] | None], Any]
    ) -> WatchHandle:
        """callback(reassignment, or None while the znode is absent) now and when
        it is created, changed or deleted, on the event thread. Kafka's controller
        acts on its creation."""
        return self._watch_data(
            zk_paths.REASSIGN_PARTITIONS, WatchHandle("reassign_partitions"),
            lambda data: None if data is None else (_decode_reassignment(data) or {}), callback,
        )

    # ---- the balancer (issue 31): /balancer/paused, /balancer/state ----------------------------------
    def is_balancer_paused(self) -> bool:
        return self._exists(zk_paths.BALANCER_PAUSED) is not None

    def set_balancer_paused(self, paused: bool, reason: str = "") -> bool:
        """Pause (create /balancer/paused) or resume (delete it); True if it changed."""
        if paused:
            return self._create_if_absent(zk_paths.BALANCER_PAUSED, encode_json({"version": 1, "reason": reason}))
        return self._delete(zk_paths.BALANCER_PAUSED)

    def watch_balancer_paused(self, callback: Callable[[bool], Any]) -> WatchHandle:
        """callback(paused) now and whenever /balancer/paused appears or goes."""
        return self._watch_data(zk_paths.BALANCER_PAUSED, WatchHandle("balancer_paused"),
                                lambda data: data is not None, callback)

    def get_balancer_state(self) -> dict[str, Any] | None:
        """What the active controller last published (cluster/controller/balancer.py); None if never."""
        found = self._get(zk_paths.BALANCER_STATE)
        return None if found is None or not found[0] else decode_json(found[0])

    def set_balancer_state(self, state: Mapping[str, Any], *,
                           expected_controller_epoch_zk_version: int | None = None) -> None:
        """Write /balancer/state; fenced on the controller epoch (ControllerMovedError) when given."""
        data = encode_json(dict(state))
        path = zk_paths.BALANCER_STATE
        if expected_controller_epoch_zk_version is None:
            self._set_or_create(path, data)
            return
        self._fenced_set_or_create(zk_paths.BALANCER, path, data, expected_controller_epoch_zk_version)

    def _fenced_set_or_create(self, parent: str, path: str, data: bytes,
                              expected_controller_epoch_zk_version: int) -> None:
        """Set or create `path` in a transaction fenced on the controller epoch (ControllerMovedError)."""
        self._create_if_absent(parent)
        for _ in range(5):
            try:
                self._fenced(f"set {path}", expected_controller_epoch_zk_version,
                             lambda transaction: transaction.set_data(path, data))
                return
            except ZkNoNodeError:
                pass
            try:
                self._fenced(f"create {path}", expected_controller_epoch_zk_version,
                             lambda transaction: transaction.create(path, data))
                return
            except ZkNodeExistsError:
                pass  # created by someone else in between: set it
        raise ZkError(f"set or create {path}: raced with concurrent deletes")

    def get_preferred_replica_election(self) -> list[tuple[str, int]]:
        """Partitions of the pending /admin/preferred_replica_election; [] when absent."""
        found = self._get(zk_paths.PREFERRED_REPLICA_ELECTION)
        return [] if found is None else (_decode_election(found[0]) or [])

    def create_preferred_replica_election(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Ask the controller to move leadership of `partitions` to their preferred
        replica, as Kafka's kafka-preferred-replica-election tool does. Raises
        PreferredReplicaElectionInProgressError while a previous one is pending."""
        partitions = [(topic, partition) for topic, partition in partitions]
        if not partitions:
            raise ValueError("a preferred replica election needs at least one partition")
        for topic, partition in partitions:
            _check_topic_partition(topic, partition)
        duplicates = sorted(tp for tp, count in collections.Counter(partitions).items() if count > 1)
        if duplicates:
            raise ValueError(f"Preferred replica election data contains duplicate partitions: {duplicates}")
        data = encode_json({
            "version": PREFERRED_REPLICA_ELECTION_VERSION,
            "partitions": [{"topic": topic, "partition": partition} for topic, partition in partitions],
        })
        try:
            self._create(zk_paths.PREFERRED_REPLICA_ELECTION, data, makepath=True)
        except ZkNodeExistsError:
            pending = ",".join(f"{topic}-{partition}" for topic, partition in self.get_preferred_replica_election())
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
        return self._watch_data(
            zk_paths.PREFERRED_REPLICA_ELECTION, WatchHandle("preferred_replica_election"),
            lambda data: None if data is None else (_decode_election(data) or []), callback,
        )

    def _delete_admin_request(self, path: str, expected_controller_epoch_zk_version: int | None) -> bool:
        if expected_controller_epoch_zk_version is None:
            return self._delete(path)
        try:
            self._fenced(f"delete {path}", expected_controller_epoch_zk_version,
                         lambda transaction: transaction.delete(path))
            return True
        except ZkNoNodeError:
            return False

    # ----------------------------------------------------- ISR notifications

    def add_isr_change_notification(self, partitions: Iterable[tuple[str, int]]) -> str:
        """Persistent sequential /isr_change_notification/isr_change_<seq>; returns its name."""
        body = encode_json({
            "version": ISR_CHANGE_NOTIFICATION_VERSION,
            "partitions": [{"topic": topic, "partition": partition} for topic, partition in partitions],
        })
        created = self._create(zk_paths.ISR_CHANGE_SEQUENTIAL_PREFIX, body, sequence=True, makepath=True)
        return created.rsplit("/", 1)[1]

    def get_isr_change_notifications(self) -> list[IsrChangeNotification]:
        """Pending notifications, oldest first."""
        names = [
            name for name in (self._children(zk_paths.ISR_CHANGE_NOTIFICATION) or [])
            if name.startswith(zk_paths.ISR_CHANGE_PREFIX)
        ]
        names.sort(key=zk_paths.isr_change_sequence_number)
        found = self._get_many(zk_paths.isr_change_notification_path(name) for name in names)
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

    def delete_isr_change_notifications(self, names: Iterable[str]) -> None:
        for name in names:
            self._delete(zk_paths.isr_change_notification_path(name))

    def watch_isr_change_notifications(self, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(sorted notification names) now and whenever they change."""
        return self._watch_children(
            zk_paths.ISR_CHANGE_NOTIFICATION, WatchHandle("isr_change_notification"),
            lambda names: sorted(n for n in names if n.startswith(zk_paths.ISR_CHANGE_PREFIX)), callback,
        )


def _controller_id_from(data: bytes | None) -> int | None:
    if not data:
        return None
    text = data.decode("utf-8").strip()
    # Kafka before 0.9 wrote a bare integer; later versions write JSON.
    if text.lstrip("-").isdigit():
        return int(text)
    return int(decode_json(data)["brokerid"])


def _check_topic_partition(topic: Any, partition: Any) -> None:
    if not isinstance(topic, str) or not topic:
        raise InvalidReplicaAssignmentError(f"invalid topic {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidReplicaAssignmentError(f"invalid partition {partition!r} of topic {topic!r}")


def _encode_reassignment(reassignment: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """Kafka's ReassignPartitionsZNode (the legacy, pre-KIP-455 request format)."""
    entries = []
    for (topic, partition), replicas in sorted(reassignment.items()):
        _check_topic_partition(topic, partition)
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
