"""The errors of the ZooKeeper client: kazoo's exceptions never escape it, they
become this family (`translate`)."""
from __future__ import annotations

from kazoo import exceptions as kazoo_errors
from kazoo.handlers.threading import KazooTimeoutError

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


def translate(error: BaseException, what: str) -> ZkError:
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

