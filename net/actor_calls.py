"""What a failed call from the edge to another actor (a replica, the
purgatory, the controller) means to the Kafka client: the one mapping of
those failures to error codes, shared by the edge's routers and handlers.

Every cross-actor await of the edge is bounded by a timeout (``call``)."""
from __future__ import annotations

import asyncio
import logging

from core.error_codes import ErrorCode

from core.local_calls import LocalCallFailed, LocalCallLost

log = logging.getLogger("raykafka.edge")


# Kafka's own messages (Errors.java) for what a failed call answers. A
# client sees only these: the failure's detail (a Ray traceback, node
# addresses, actor ids) goes to the log, never into error_message.
KAFKA_MESSAGES: dict[int, str] = {
    ErrorCode.unknown_server_error: "The server experienced an unexpected error when processing the request.",
    ErrorCode.not_leader_or_follower: "For requests intended only for the leader, this error indicates that the "
                                      "broker is not the current leader. For requests intended for any replica, "
                                      "this error indicates that the broker is not a replica of the topic "
                                      "partition.",
    ErrorCode.request_timed_out: "The request timed out.",
    ErrorCode.not_controller: "This is not the correct controller for this cluster.",
    ErrorCode.leader_not_available: "There is no leader for this topic-partition as we are in the middle of a "
                                    "leadership election.",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
}


def kafka_message(error: ErrorCode) -> str:
    """Kafka's message for ``error`` (what a client may be shown)."""
    return KAFKA_MESSAGES.get(error, KAFKA_MESSAGES[ErrorCode.unknown_server_error])


def internal_error(exc: BaseException, what: str = "request") -> str:
    """Log a failure of our own (ZooKeeper unreachable, a bug) with its detail
    and return the message a client may see: Kafka's UNKNOWN_SERVER_ERROR text."""
    log.warning("%s failed: %s: %s", what, type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "")
    return KAFKA_MESSAGES[ErrorCode.unknown_server_error]


class ActorCallFailed(Exception):
    """A replica/controller call timed out or its actor is gone. ``str()`` is
    Kafka's message for ``error``, safe to send to a client. ``actor_gone``:
    the callee's process is gone (Ray says it died, or its direct channel
    dropped under the caller); False when the call ended otherwise (a
    timeout, the callee's method raised, the caller closed the channel
    itself), so nobody restarts an actor that is still running."""

    def __init__(self, error: ErrorCode, message: str | None = None, actor_gone: bool = False):
        super().__init__(message or kafka_message(error))
        self.error = error
        self.actor_gone = actor_gone


def call_failure(exc: BaseException) -> ActorCallFailed | None:
    """What a failed cross-actor call means to the client, or None for an
    error of our own (re-raised). A gone actor (Ray's RayActorError /
    ActorDiedError, or its direct channel lost) is NOT_LEADER_OR_FOLLOWER:
    retriable, the client refreshes metadata; a timeout REQUEST_TIMED_OUT.
    The failure's own text is logged here, not handed on."""
    if isinstance(exc, asyncio.TimeoutError):
        return ActorCallFailed(ErrorCode.request_timed_out)
    if isinstance(exc, (LocalCallLost, LocalCallFailed)):
        # The edge closes a channel itself when its replica stops leading
        # here (a metadata update): calls still parked on it end as expected.
        quiet = isinstance(exc, LocalCallLost) and exc.closed_by_caller
        log.log(logging.INFO if quiet else logging.WARNING, "direct actor call failed: %s", str(exc)[:300])
        return ActorCallFailed(ErrorCode.not_leader_or_follower,
                               actor_gone=isinstance(exc, LocalCallLost) and not exc.closed_by_caller)
    if type(exc).__module__.startswith("ray"):
        log.warning("actor call failed: %s", str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
        # RayTaskError: the actor's method raised, the actor runs on.
        return ActorCallFailed(ErrorCode.not_leader_or_follower,
                               actor_gone=not type(exc).__name__.startswith("RayTaskError"))
    return None


async def call(ref, timeout_s: float):
    """Await a call's answer, at most ``timeout_s``; failures as ActorCallFailed."""
    return await settle(asyncio.wait_for(ref, timeout_s))


async def settle(pending):
    """Await a call already bounded by its timeout (net/ports.ActorCalls);
    failures as ActorCallFailed."""
    try:
        return await pending
    except Exception as exc:
        failure = call_failure(exc)
        if failure is None:
            raise
        raise failure from None
