"""The edge's side of acks=all commit notices (net/replica_router.py): an
acks=all append over the direct channel answered in two parts, and the
produce's commit wait taken from the second part instead of a call, falling
back to the wait_committed call where the notice does not cover the set. A
real ReplicaRouter and PartitionAppender over a stand-in for ActorCalls."""
from __future__ import annotations

import asyncio

from core import shared_region
from core.error_codes import ErrorCode
from core.local_calls import TwoPartAnswer
from core.replica_messages import AppendAnswer, AppendResult, CommitNotice
from net.replica_router import ReplicaRouter


class Calls:
    """net/ports.ActorCalls: a channel to the leader answering appends in two parts."""

    def __init__(self, channel: bool = True):
        self.channel = channel
        self.counters = {}
        self.calls = []  # (method, args)
        self.notices = []  # the second parts handed out, to complete
        self.log_end = 0

    def _answer(self, request):
        results = []
        for length, acks in zip(request.lengths, request.acks):
            base = self.log_end
            self.log_end += length
            results.append(AppendResult(ErrorCode.none, base, -1, 0, None, self.log_end - 1, 0))
        return AppendAnswer(results)

    def call_local(self, ref, method, args, timeout_s, later_timeout_s):
        if not self.channel:
            return None
        (request,) = args
        assert method == "append_shared" and request.commit_notice
        self.calls.append((method, args))
        future = asyncio.get_running_loop().create_future()
        later = asyncio.get_running_loop().create_future()
        self.notices.append(later)
        future.set_result(TwoPartAnswer(self._answer(request), later))
        return future

    def call(self, ref, method, args, timeout_s):
        self.calls.append((method, args))
        future = asyncio.get_running_loop().create_future()
        if method == "append_shared":
            assert not args[0].commit_notice
            future.set_result(self._answer(args[0]))
        else:
            assert method == "wait_committed"
            future.set_result(ErrorCode.none)
        return future


def _router(calls) -> ReplicaRouter:
    router = ReplicaRouter(1, 5.0, calls, None)
    router.set_leaders({("t", 0): object()})
    return router


def _methods(calls) -> list[str]:
    return [method for method, _ in calls.calls]


def test_the_commit_wait_comes_from_the_notice_without_a_call(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))

    async def run():
        calls = Calls()
        router = _router(calls)
        first = await router.append("t", 0, b"a" * 10, -1, 5000, 0)
        assert first.high_watermark < first.last_offset + 1
        waiting = asyncio.ensure_future(router.wait_committed([("t", 0, first.last_offset + 1, 0)], 5000))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        calls.notices[0].set_result(CommitNotice(ErrorCode.none, first.last_offset + 1))
        assert await waiting == {("t", 0): ErrorCode.none}
        assert _methods(calls) == ["append_shared"], "no wait_committed call"
        # A notice that says the ISR fell short is that produce's answer.
        second = await router.append("t", 0, b"b" * 10, -1, 5000, 0)
        calls.notices[1].set_result(CommitNotice(ErrorCode.not_enough_replicas_after_append, second.last_offset + 1))
        assert await router.wait_committed([("t", 0, second.last_offset + 1, 0)], 5000) == \
            {("t", 0): ErrorCode.not_enough_replicas_after_append}
        # Leadership lost: the notice's error, whatever the HW.
        third = await router.append("t", 0, b"c" * 10, -1, 5000, 0)
        calls.notices[2].set_result(CommitNotice(ErrorCode.not_leader_or_follower, 0))
        assert await router.wait_committed([("t", 0, third.last_offset + 1, 0)], 5000) == \
            {("t", 0): ErrorCode.not_leader_or_follower}
        assert _methods(calls) == ["append_shared"] * 3
        router.close()

    asyncio.run(run())


def test_a_set_the_notice_does_not_cover_asks_the_leader(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))

    async def run():
        calls = Calls()
        router = _router(calls)
        result = await router.append("t", 0, b"a" * 10, -1, 5000, 0)
        end = result.last_offset + 1
        # The HW short of this set: a notice this set cannot take its answer from.
        calls.notices[0].set_result(CommitNotice(ErrorCode.none, end - 1))
        assert await router.wait_committed([("t", 0, end, 0)], 5000) == {("t", 0): ErrorCode.none}
        assert _methods(calls) == ["append_shared", "wait_committed"]
        # The channel went: ask too.
        result = await router.append("t", 0, b"b" * 10, -1, 5000, 0)
        calls.notices[1].set_exception(ConnectionError("lost"))
        assert await router.wait_committed([("t", 0, result.last_offset + 1, 0)], 5000) == {("t", 0): ErrorCode.none}
        # A set appended under another leader epoch has no notice here.
        assert await router.wait_committed([("t", 0, result.last_offset + 1, 1)], 5000) == {("t", 0): ErrorCode.none}
        assert _methods(calls) == ["append_shared", "wait_committed", "append_shared", "wait_committed",
                                   "wait_committed"]
        router.close()

    asyncio.run(run())


def test_a_notice_that_timed_out_after_the_hw_passed_the_set_asks_the_leader(tmp_path, monkeypatch):
    """The notice waits for the call's last acks=all set: if that wait timed out, an
    earlier set the HW had already passed is not answered with the timeout (it may be
    committed): the leader is asked. A set the HW had not reached gets the timeout."""
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))

    async def run():
        calls = Calls()
        router = _router(calls)
        result = await router.append("t", 0, b"a" * 10, -1, 5000, 0)
        end = result.last_offset + 1
        calls.notices[0].set_result(CommitNotice(ErrorCode.request_timed_out, end))
        assert await router.wait_committed([("t", 0, end, 0)], 5000) == {("t", 0): ErrorCode.none}
        assert _methods(calls) == ["append_shared", "wait_committed"]
        result = await router.append("t", 0, b"b" * 10, -1, 5000, 0)
        end = result.last_offset + 1
        calls.notices[1].set_result(CommitNotice(ErrorCode.request_timed_out, end - 1))
        assert await router.wait_committed([("t", 0, end, 0)], 5000) == {("t", 0): ErrorCode.request_timed_out}
        assert _methods(calls) == ["append_shared", "wait_committed", "append_shared"]
        router.close()

    asyncio.run(run())


def test_without_a_channel_acks_all_appends_go_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_region, "SHM_DIR", str(tmp_path))

    async def run():
        calls = Calls(channel=False)
        router = _router(calls)
        result = await router.append("t", 0, b"a" * 10, -1, 5000, 0)
        assert await router.wait_committed([("t", 0, result.last_offset + 1, 0)], 5000) == {("t", 0): ErrorCode.none}
        assert _methods(calls) == ["append_shared", "wait_committed"]
        # acks=1 never asks for a notice.
        calls.channel = True
        await router.append("t", 0, b"b" * 10, 1, 5000, 0)
        assert _methods(calls)[-1] == "append_shared" and not calls.notices
        router.close()

    asyncio.run(run())
