"""What a failed call from the edge to an actor means (net/actor_calls.py),
and what the edge's replica pool does with it: only an actor that is gone is
started again; one whose call ended otherwise keeps running (issue 30). A
follower of a replicated set was killed when its leadership moved away and
the edge closed its direct channel under a parked call."""
import asyncio

import pytest

from cluster.controller.channel import LeaderAndIsr
from cluster.replica_pool import ReplicaPool
from core.error_codes import ErrorCode
from core.local_calls import LocalCallFailed, LocalCallLost
from core.pooled_replica import HibernateAnswer, PooledReplica
from net.actor_calls import ActorCallFailed, call_failure
from net.replica_router import ReplicaRouter


def _ray_error(name: str) -> BaseException:
    """An exception as Ray's own module would raise it (net/ imports no Ray)."""
    return type(name, (Exception,), {"__module__": "ray.exceptions"})("boom")


@pytest.mark.parametrize("exc, gone", [
    (LocalCallLost("connection closed"), True),  # the callee's process went away
    (LocalCallLost("closed by the caller", closed_by_caller=True), False),  # the edge closed it
    (LocalCallFailed("ValueError: bad offset"), False),  # the method raised; the actor runs on
    (_ray_error("ActorDiedError"), True),
    (_ray_error("ActorUnavailableError"), True),
    (_ray_error("RayTaskError(ValueError)"), False),
])
def test_a_call_ends_as_not_leader_and_says_whether_the_actor_is_gone(exc, gone):
    failure = call_failure(exc)
    assert failure.error == ErrorCode.not_leader_or_follower and failure.actor_gone is gone


def test_timeouts_and_our_own_errors():
    assert call_failure(asyncio.TimeoutError()).error == ErrorCode.request_timed_out
    assert not call_failure(asyncio.TimeoutError()).actor_gone
    assert call_failure(KeyError("ours")) is None  # re-raised by the caller


class Starter:
    def __init__(self):
        self.started, self.ended = [], []

    async def start(self, spec, request, spare=None):
        self.started.append(spec)
        return f"actor-{len(self.started)}"

    async def leader_and_isr(self, handle, request, spec=None):
        return 0

    async def hibernate(self, handle):
        return HibernateAnswer(True)

    def end(self, handle):
        self.ended.append(handle)

    def spares(self, wanted):
        pass

    def claim_spare(self):
        return None


class Calls:
    """net/ports.ActorCalls whose every call fails with ``failure``."""

    def __init__(self, failure: BaseException):
        self.counters, self.failure = {}, failure

    async def call(self, ref, method, args, timeout_s):
        raise self.failure

    call_via_runtime = call


@pytest.mark.parametrize("failure, restarted", [
    (LocalCallLost("closed by the caller", closed_by_caller=True), False),
    (LocalCallLost("connection closed"), True),
])
def test_the_pool_starts_a_replica_again_only_when_its_actor_is_gone(failure, restarted):
    async def scenario():
        starter = Starter()
        pool = ReplicaPool(starter, live_max=4, hibernate_s=60)
        await pool.leader_and_isr(("t", 0), "spec-t-0", LeaderAndIsr(1, 0, 1, [0], [0], 3))
        router = ReplicaRouter(0, 5.0, Calls(failure), None)
        router.pool = pool
        router.set_leaders({("t", 0): PooledReplica("t", 0, 0)})
        with pytest.raises(ActorCallFailed):
            await router.call("t", 0, "read_run", 0, 1024, 0, 0, 0, 0, 1)
        assert starter.ended == (["actor-1"] if restarted else [])
        assert (pool.live_handle(("t", 0)) is None) is restarted
        with pytest.raises(ActorCallFailed):
            await router.call("t", 0, "read_run", 0, 1024, 0, 0, 0, 0, 1)
        assert len(starter.started) == (2 if restarted else 1)

    asyncio.run(scenario())
