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


class ActorCallFailed(Exception):
    """A replica/controller call timed out or its actor is gone."""

    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error


def call_failure(exc: BaseException) -> ActorCallFailed | None:
    """What a failed cross-actor call means to the client, or None for an
    error of our own (re-raised). A gone actor (Ray's RayActorError /
    ActorDiedError, or its direct channel lost) is NOT_LEADER_OR_FOLLOWER:
    retriable, the client refreshes metadata; a timeout REQUEST_TIMED_OUT."""
    if isinstance(exc, asyncio.TimeoutError):
        return ActorCallFailed(ErrorCode.request_timed_out, "actor call timed out")
    if isinstance(exc, (LocalCallLost, LocalCallFailed)):
        # The edge closes a channel itself when its replica stops leading
        # here (a metadata update): calls still parked on it end as expected.
        quiet = isinstance(exc, LocalCallLost) and exc.closed_by_caller
        log.log(logging.INFO if quiet else logging.WARNING, "direct actor call failed: %s", str(exc)[:300])
        return ActorCallFailed(ErrorCode.not_leader_or_follower, str(exc))
    if type(exc).__module__.startswith("ray"):
        log.warning("actor call failed: %s", str(exc).splitlines()[0][:300])
        return ActorCallFailed(ErrorCode.not_leader_or_follower, str(exc))
    return None


async def call(ref, timeout_s: float):
    """Await a Ray call's ref, at most ``timeout_s``; failures as ActorCallFailed."""
    try:
        return await asyncio.wait_for(ref, timeout_s)
    except Exception as exc:
        failure = call_failure(exc)
        if failure is None:
            raise
        raise failure from None
