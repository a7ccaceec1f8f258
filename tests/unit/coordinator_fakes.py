"""Fakes for driving the coordinator actors (actors/group_coordinator.py,
actors/transaction_coordinator.py) without Ray: a real partition
(cluster.partition.Partition over a storage.log.Log) posing as the leader
replica actor, and the node purgatory's delay_produce."""
from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from cluster.partition import Partition
from core.replica_messages import AppendAnswer
from storage.log import Log, LogConfig

BROKER = 1


class _Method:
    """``actor.method.remote(*args)``: runs the function on the next loop turn."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        async def run():
            await asyncio.sleep(0)
            return self.fn(*args)

        return run()


class FakeReplica:
    """The leader replica actor's methods the coordinators use, over a real Partition."""

    def __init__(self, partition: Partition):
        self.partition = partition
        self.state = _Method(partition.state)
        self.read = _Method(partition.read)
        self.append = _Method(lambda request: AppendAnswer(partition.append(
            request.record_sets(), request.leader_epoch, int(time.time() * 1000), request.origin)))
        self.write_txn_markers = _Method(lambda markers, timeout_ms=30000:
                                         partition.write_txn_markers(list(markers), int(time.time() * 1000)))


def make_partition(tmp_path, topic: str, p: int, epoch: int = 0, isr: tuple[int, ...] = (BROKER,)) -> Partition:
    """A compacted partition led by BROKER at ``epoch``."""
    log = Log(str(tmp_path / f"{topic}-{p}"), LogConfig(segment_bytes=1 << 20, cleanup_policy="compact"))
    partition = Partition(topic, p, BROKER, log)
    assert partition.make_leader(1, epoch, list(isr), list(isr)) == 0
    return partition


def make_replica(tmp_path, topic: str, p: int, epoch: int = 0) -> FakeReplica:
    return FakeReplica(make_partition(tmp_path, topic, p, epoch))


class FakePurgatory:
    """The node purgatory's delay_produce: lets the follower catch up (or not) first."""

    def __init__(self, replica: FakeReplica, follower: int, catch_up: bool):
        self.replica, self.follower, self.catch_up = replica, follower, catch_up
        self.calls = []
        self.delay_produce = _Method(self._delay_produce)

    def _delay_produce(self, required, timeout_ms):
        self.calls.append((list(required), timeout_ms))
        p = self.replica.partition
        if self.catch_up:
            p.fetch_for_follower(self.follower, p.log.log_end_offset, -1, p.leader_epoch, 1 << 20,
                                 int(time.time() * 1000))
        return {(t, part): (0 if p.high_watermark >= offset else int(ErrorCode.request_timed_out))
                for t, part, offset in required}
