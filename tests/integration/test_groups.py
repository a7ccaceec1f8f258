"""Consumer groups with real clients against a real broker (its own, with a
short group.initial.rebalance.delay.ms): confluent-kafka (librdkafka),
kafka-python and aiokafka form groups with each assignor, lose a member to
kill -9 and resume from committed offsets, restart a static member without a
rebalance; `raykafka groups` administers groups; the wire-level details of
the group APIs are checked with kio-encoded requests.
"""
from __future__ import annotations

import asyncio
import datetime
import functools
import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from cluster.groups import partition_for_group
from cluster.groups.records import GroupMetadataKey, decode_group_metadata_value, decode_key
from cli.groups import decode_assignment
from tests import cli_runner
from tests.broker_process import RAYKAFKA, REPO, BrokerProcess, broker_env
from tests.kafka_admin import create_topic
from tests.wire_client import WireClient

# kafka-python loads its protocol schemas with a deprecated importlib API.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

OFFSETS = "__consumer_offsets"
OFFSETS_PARTITIONS = 2
SESSION_MS = 6000
HEARTBEAT_MS = 500
SIX = 6


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    """A broker of our own: quick initial rebalances, two offsets partitions."""
    process = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", log_name="groups-broker.log",
                            overrides={"group.initial.rebalance.delay.ms": "1000",
                                       "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


@pytest.fixture(scope="module")
def six(gbroker):
    """A 6-partition topic with records in every partition."""
    topic = "six"
    create_topic(gbroker.bootstrap, topic, SIX)
    produce(gbroker.bootstrap, topic, 20)
    return topic


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int = SIX, timestamp: int | None = None):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(per_partition):
            kwargs = {"timestamp": timestamp} if timestamp else {}
            producer.produce(topic, key=f"{p}:{i}".encode(), value=b"x" * 20, partition=p, **kwargs)
    assert producer.flush(30) == 0


wait_for = functools.partial(cli_runner.wait_for, poll_s=0.1)


# ---- wire helpers ------------------------------------------------------------------------------------
def find_coordinator(bootstrap: str, group: str) -> str:
    client = WireClient(bootstrap)
    try:
        answer = wait_for(lambda: _found(client, group), 60, f"a coordinator for {group}")
        return f"{answer.host}:{answer.port}"
    finally:
        client.close()


def _found(client, group):
    answer = client.request(10, 3, key=group, key_type=0)
    return answer if answer.error_code == 0 else None


def describe(bootstrap: str, group: str):
    client = WireClient(find_coordinator(bootstrap, group))
    try:
        [described] = client.request(15, 5, groups=(group,), include_authorized_operations=False).groups
        return described
    finally:
        client.close()


def assignments_of(described) -> dict[str, set[int]]:
    """member id -> partitions of its assignment (one topic in these tests)."""
    return {m.member_id: {p for parts in decode_assignment(bytes(m.member_assignment)).values() for p in parts}
            for m in described.members}


def group_records(bootstrap: str, group: str) -> list:
    """The group's metadata records in __consumer_offsets, in log order."""
    partition = partition_for_group(group, OFFSETS_PARTITIONS)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(OFFSETS, partition, OFFSET_BEGINNING)])
    out = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    break
                raise AssertionError(msg.error())
            if msg.value() is not None and decode_key(msg.key()) == GroupMetadataKey(group):
                out.append(decode_group_metadata_value(msg.value()))
    finally:
        consumer.close()
    return out


def assert_generations_disjoint(bootstrap: str, group: str) -> list:
    """No partition is assigned to two members of the same generation."""
    records = group_records(bootstrap, group)
    assert records, "no group metadata written"
    for record in records:
        seen: dict[int, str] = {}
        for member in record.members:
            for parts in decode_assignment(member.assignment).values():
                for p in parts:
                    assert p not in seen, f"generation {record.generation}: partition {p} owned by {seen[p]} and " \
                                          f"{member.member_id}"
                    seen[p] = member.member_id
    return records


# ---- in-process members (one thread each; aiokafka on its own loop) -----------------------------------------
class Member:
    """One group member polling in the background; `owned` is its current
    assignment (partition numbers), `changes` how often it changed."""

    def __init__(self, client: str, bootstrap: str, topic: str, group: str, assignor: str,
                 instance_id: str | None = None):
        self.client, self.bootstrap, self.topic, self.group = client, bootstrap, topic, group
        self.assignor, self.instance_id = assignor, instance_id
        self.owned: frozenset[int] = frozenset()
        self.changes = 0
        self.member_id: str | None = None
        self.errors: list = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _see(self, partitions) -> None:
        owned = frozenset(partitions)
        if owned != self.owned:
            self.owned = owned
            self.changes += 1

    def _run(self) -> None:
        try:
            getattr(self, f"_run_{self.client}")()
        except Exception as exc:  # surfaced by stop()
            self.errors.append(exc)

    def _run_confluent(self) -> None:
        config = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                  "partition.assignment.strategy": self.assignor, "enable.auto.commit": False}
        if self.instance_id:
            config["group.instance.id"] = self.instance_id
        consumer = Consumer(config)
        consumer.subscribe([self.topic])
        try:
            while not self.stop_event.is_set():
                consumer.poll(0.1)
                self._see(tp.partition for tp in consumer.assignment())
                self.member_id = consumer.memberid()
        finally:
            consumer.close()

    def _run_kafka_python(self) -> None:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                    "cooperative-sticky": CooperativeStickyAssignor}[self.assignor]
        consumer = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                 group_instance_id=self.instance_id, auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                                 heartbeat_interval_ms=HEARTBEAT_MS, partition_assignment_strategy=[assignor])
        try:
            while not self.stop_event.is_set():
                consumer.poll(timeout_ms=100)
                self._see(tp.partition for tp in consumer.assignment())
                self.member_id = consumer._coordinator._generation.member_id
        finally:
            consumer.close()

    def _run_aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                    "sticky": StickyPartitionAssignor}[self.assignor]

        async def go():
            consumer = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                        group_instance_id=self.instance_id, auto_offset_reset="earliest",
                                        enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                                        heartbeat_interval_ms=HEARTBEAT_MS, partition_assignment_strategy=(assignor,))
            await consumer.start()
            try:
                while not self.stop_event.is_set():
                    await consumer.getmany(timeout_ms=100)
                    self._see(tp.partition for tp in consumer.assignment())
                    self.member_id = consumer._coordinator.member_id
            finally:
                await consumer.stop()

        asyncio.run(go())

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), f"{self.client} member did not stop"
        assert not self.errors, self.errors


def settled(members: list[Member], per_member: int, total: int, hold_s: float = 1.0) -> bool:
    """Every member owns ``per_member`` partitions, together all ``total``, unchanged for ``hold_s``."""
    failed = [e for m in members for e in m.errors]
    if failed:
        raise AssertionError(f"a member failed: {failed}")

    def ok():
        owned = [m.owned for m in members]
        return all(len(o) == per_member for o in owned) and len(frozenset().union(*owned)) == total
    if not ok():
        return False
    before = [m.changes for m in members]
    time.sleep(hold_s)
    return ok() and [m.changes for m in members] == before


ASSIGNORS = [("confluent", "range"), ("confluent", "roundrobin"), ("confluent", "cooperative-sticky"),
             ("kafka_python", "range"), ("kafka_python", "roundrobin"), ("kafka_python", "cooperative-sticky"),
             # aiokafka has no cooperative assignor; its sticky one is eager.
             ("aiokafka", "range"), ("aiokafka", "roundrobin"), ("aiokafka", "sticky")]


# ---- tests -------------------------------------------------------------------------------------------------
def test_find_coordinator_batched_and_key_types(gbroker):
    client = WireClient(gbroker.bootstrap)
    try:
        groups = [f"fc-{i}" for i in range(6)]
        answer = wait_for(lambda: (a := client.request(10, 4, key_type=0, coordinator_keys=tuple(groups)))
                          and all(c.error_code == 0 for c in a.coordinators) and a, 60, "coordinators")
        assert [c.key for c in answer.coordinators] == groups
        assert {(c.host, c.port) for c in answer.coordinators} == {(gbroker.host, gbroker.port)}
        assert {partition_for_group(g, OFFSETS_PARTITIONS) for g in groups} == {0, 1}
        v0 = client.request(10, 0, key="fc-0")
        assert v0.error_code == 0 and v0.port == gbroker.port
        # Transaction coordinators are served (issue 19): the first lookup creates
        # __transaction_state, answering COORDINATOR_NOT_AVAILABLE (15) until its
        # coordinator is up, as Kafka does; then this broker.
        first = client.request(10, 1, key="tx", key_type=1)
        assert first.error_code in (0, 15)
        txn = wait_for(lambda: (a := client.request(10, 1, key="tx", key_type=1)) and a.error_code == 0 and a,
                       60, "the transaction coordinator")
        assert txn.node_id >= 0 and txn.port == gbroker.port
        share = client.request(10, 6, key_type=2, coordinator_keys=("s",))
        assert share.coordinators[0].error_code == 42  # INVALID_REQUEST
        md = client.request(3, 9, topics=None, allow_auto_topic_creation=False,
                            include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        [offsets] = [t for t in md.topics if t.name == OFFSETS]
        assert offsets.is_internal and len(offsets.partitions) == OFFSETS_PARTITIONS
    finally:
        client.close()


@pytest.mark.parametrize("client,assignor", ASSIGNORS, ids=[f"{c}-{a}" for c, a in ASSIGNORS])
def test_three_members_share_six_partitions(gbroker, six, client, assignor):
    group = unique(f"share-{client}-{assignor}")
    members = [Member(client, gbroker.bootstrap, six, group, assignor) for _ in range(3)]
    try:
        wait_for(lambda: settled(members, 2, SIX), 60, "two partitions each")
        described = describe(gbroker.bootstrap, group)
        assert described.group_state == "Stable" and described.protocol_type == "consumer"
        assert described.protocol_data == assignor
        by_member = assignments_of(described)
        assert sorted(by_member.values(), key=min) == sorted((set(m.owned) for m in members), key=min)
        assert {m.member_id for m in members} == set(by_member)
    finally:
        for m in members:
            m.stop()
    # Every member left with LeaveGroup: the group is Empty at once, not after a session timeout.
    assert wait_for(lambda: describe(gbroker.bootstrap, group).group_state == "Empty", 10, "an empty group")
    assert_generations_disjoint(gbroker.bootstrap, group)


# A consumer process for the kill test: consumes slowly, commits each batch's
# offsets explicitly (synchronously) and logs assignments, records and commits.
CONSUMER_SCRIPT = r'''
import asyncio, json, sys, time
client, bootstrap, topic, group, out_path = sys.argv[1:6]
out = open(out_path, "a", buffering=1)
def log(kind, *values):
    out.write(json.dumps([kind, time.time(), *values]) + "\n")
SLEEP = 0.01
if client == "confluent":
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic], on_assign=lambda c, ps: log("A", sorted(p.partition for p in ps)))
    while True:
        msgs = c.consume(10, 0.2)
        last = {}
        for m in msgs:
            if m.error():
                continue
            log("C", m.partition(), m.offset()); last[m.partition()] = m.offset() + 1; time.sleep(SLEEP)
        if last:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in last.items()], asynchronous=False)
                for p, o in last.items(): log("K", p, o)
            except Exception as exc:
                log("E", str(exc))
elif client == "kafka_python":
    from kafka import KafkaConsumer, TopicPartition, ConsumerRebalanceListener
    from kafka.structs import OffsetAndMetadata
    class L(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked): pass
        def on_partitions_assigned(self, assigned): log("A", sorted(p.partition for p in assigned))
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
    c.subscribe([topic], listener=L())
    while True:
        last = {}
        for tp, msgs in c.poll(timeout_ms=200, max_records=10).items():
            for m in msgs:
                log("C", m.partition, m.offset); last[m.partition] = m.offset + 1; time.sleep(SLEEP)
        if last:
            try:
                c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in last.items()})
                for p, o in last.items(): log("K", p, o)
            except Exception as exc:
                log("E", str(exc))
else:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.structs import TopicPartition
    class L(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked): pass
        async def on_partitions_assigned(self, assigned): log("A", sorted(p.partition for p in assigned))
    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
        c.subscribe([topic], listener=L())
        await c.start()
        while True:
            last = {}
            for tp, msgs in (await c.getmany(timeout_ms=200, max_records=10)).items():
                for m in msgs:
                    log("C", m.partition, m.offset); last[m.partition] = m.offset + 1; await asyncio.sleep(SLEEP)
            if last:
                try:
                    await c.commit({TopicPartition(topic, p): o for p, o in last.items()})
                    for p, o in last.items(): log("K", p, o)
                except Exception as exc:
                    log("E", str(exc))
    asyncio.run(go())
'''


def read_log(path) -> list:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


@pytest.mark.parametrize("client", ["confluent", "kafka_python", "aiokafka"])
def test_killed_member_partitions_reassigned_offsets_resume(gbroker, tmp_path, client):
    per_partition = 150
    topic, group = unique(f"kill-{client}"), unique(f"kill-{client}")
    create_topic(gbroker.bootstrap, topic, SIX)
    produce(gbroker.bootstrap, topic, per_partition)
    find_coordinator(gbroker.bootstrap, group)
    logs = [tmp_path / f"m{i}.log" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", CONSUMER_SCRIPT, client, gbroker.bootstrap, topic, group,
                               str(path)], cwd=REPO, env=broker_env(), stderr=subprocess.DEVNULL)
             for path in logs]
    try:
        def assigned_two_each():
            latest = [[e for e in read_log(p) if e[0] == "A"] for p in logs]
            return all(a and len(a[-1][2]) == 2 for a in latest) and \
                len({p for a in latest for p in a[-1][2]}) == SIX
        wait_for(assigned_two_each, 60, "three members with two partitions each")
        victim = logs[0]
        wait_for(lambda: sum(e[0] == "K" for e in read_log(victim)) >= 3, 30, "the victim to commit")
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        killed_at = time.time()
        victim_events = read_log(victim)
        victim_parts = [e for e in victim_events if e[0] == "A"][-1][2]
        victim_commits = {}
        for e in victim_events:
            if e[0] == "K":
                victim_commits[e[2]] = e[3]
        assert all(victim_commits.get(p, 0) < per_partition for p in victim_parts), "killed after it finished"

        def all_consumed():
            seen = {(e[2], e[3]) for path in logs for e in read_log(path) if e[0] == "C"}
            return len(seen) == SIX * per_partition
        wait_for(all_consumed, 90, "every record consumed")
        took_over_after = time.time() - killed_at
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)

    events = {i: read_log(path) for i, path in enumerate(logs)}
    consumed: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for i, evs in events.items():
        for e in evs:
            if e[0] == "C":
                consumed.setdefault((e[2], e[3]), []).append((e[1], i))
    # No gap: every offset of every partition was consumed.
    assert set(consumed) == {(p, o) for p in range(SIX) for o in range(per_partition)}
    # Duplicates only since the last commit: once a member has read a record
    # and then committed past it, nobody reads it again. A member may read a
    # record twice itself when its commit lost to a rebalance and it got the
    # partition back (times decide which commit followed which read).
    commits: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for i, evs in events.items():
        for e in evs:
            if e[0] == "K":
                commits.setdefault((i, e[2]), []).append((e[1], e[3]))
    duplicates = 0
    for (p, o), reads in consumed.items():
        reads.sort()
        for t, i in reads:
            committed_at = min((tc for tc, past in commits.get((i, p), []) if tc >= t and past > o), default=None)
            if committed_at is not None:
                again = [r for r in reads if r[0] > committed_at]
                assert not again, f"{p}:{o} read again after member {i} committed past it: {reads}"
        duplicates += len(reads) - 1
    # Resumed exactly at the victim's last committed offsets. The victim logs a
    # commit after the broker answered it, so a kill can land between the two:
    # then the commit of its last batch (its last read + 1) counts, unlogged.
    for p in victim_parts:
        after = [e[3] for i in (1, 2) for e in events[i] if e[0] == "C" and e[2] == p and e[1] > killed_at]
        last_read = max((e[3] for e in victim_events if e[0] == "C" and e[2] == p), default=-1)
        committed = {victim_commits.get(p, 0), last_read + 1}
        assert after and min(after) in committed, (p, min(after), victim_commits.get(p), last_read)
    # The session timeout (6 s), not sooner, moved the victim's partitions.
    assert took_over_after >= SESSION_MS / 1000 - 1
    records = assert_generations_disjoint(gbroker.bootstrap, group)
    final = records[-1]
    assert len(final.members) == 2 and {p for m in final.members for ps in decode_assignment(m.assignment).values()
                                        for p in ps} == set(range(SIX))


STATIC = [("confluent", "range"), ("kafka_python", "range"), ("aiokafka", "range")]


@pytest.mark.parametrize("client,assignor", STATIC, ids=[c for c, _ in STATIC])
def test_static_member_restart_keeps_assignment(gbroker, six, client, assignor):
    group = unique(f"static-{client}")
    members = [Member(client, gbroker.bootstrap, six, group, assignor, instance_id=f"{group}-i{i}") for i in range(3)]
    try:
        wait_for(lambda: settled(members, 2, SIX), 60, "two partitions each")
        generation = group_records(gbroker.bootstrap, group)[-1].generation
        before = {m.instance_id: m.owned for m in members}
        changes = [m.changes for m in members]
        old_id = members[1].member_id
        members[1].stop()  # static: no LeaveGroup
        restarted = Member(client, gbroker.bootstrap, six, group, assignor, instance_id=members[1].instance_id)
        members[1] = restarted
        wait_for(lambda: restarted.owned == before[restarted.instance_id], 5.5, "the same partitions back")
        time.sleep(1.0)
        assert {m.instance_id: m.owned for m in members} == before
        assert [members[0].changes, members[2].changes] == [changes[0], changes[2]], "others were rebalanced"
        described = describe(gbroker.bootstrap, group)
        assert described.group_state == "Stable"
        assert {m.group_instance_id for m in described.members} == set(before)
        assert old_id not in {m.member_id for m in described.members}
        records = group_records(gbroker.bootstrap, group)
        assert records[-1].generation == generation, "the restart caused a rebalance"
        assert restarted.member_id in {m.member_id for m in records[-1].members}
    finally:
        for m in members:
            m.stop()


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def groups_cli(gbroker, *args, check: bool = True) -> CliResult:
    """`raykafka groups ARGS --bootstrap-server ...`, run in this process
    (cli.main.main, what the console script calls: no interpreter start-up per call)."""
    import contextlib
    import io

    from cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["groups", *args, "--bootstrap-server", gbroker.bootstrap])
    result = CliResult(code, out.getvalue(), err.getvalue())
    if check:
        assert result.returncode == 0, result.stderr + result.stdout
    return result


def committed_rows(output: str, group: str) -> dict[int, tuple[str, str, str]]:
    """PARTITION -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) from `groups describe`."""
    rows = {}
    for line in output.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group and cells[2].isdigit():
            rows[int(cells[2])] = (cells[3], cells[4], cells[5])
    return rows


def test_groups_cli_list_describe_reset_delete(gbroker):
    topic, group = unique("cli"), unique("cli")
    create_topic(gbroker.bootstrap, topic, 2)
    # The first records a day old: within retention (7 days), however often a broker checks it,
    # and well before the reset to a datetime below.
    day_ago_ms = (int(time.time()) - 86_400) * 1000
    produce(gbroker.bootstrap, topic, 10, partitions=2, timestamp=day_ago_ms)
    consumer = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": SESSION_MS, "client.id": "cli-client"})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got += 1
    assert got == 20
    consumer.commit(asynchronous=False)
    produce(gbroker.bootstrap, topic, 5, partitions=1)
    try:
        # The installed command, once (the rest run in-process).
        listed = subprocess.run([str(RAYKAFKA), "groups", "list", "--bootstrap-server", gbroker.bootstrap],
                                capture_output=True, text=True, timeout=60, env=broker_env(), cwd=REPO)
        assert listed.returncode == 0 and group in listed.stdout.split(), listed.stderr
        out = groups_cli(gbroker, "describe", group).stdout
        assert "STATE Stable" in out and "cli-client" in out and f"{topic}:0/1" in out
        assert committed_rows(out, group) == {0: ("10", "15", "5"), 1: ("10", "10", "0")}
        refused = groups_cli(gbroker, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute",
                             check=False)
        assert refused.returncode == 1 and "inactive" in refused.stderr and "Stable" in refused.stderr
    finally:
        consumer.close()
    wait_for(lambda: group in groups_cli(gbroker, "list", "--state", "Empty").stdout, 10, "the group to be empty")
    dry = groups_cli(gbroker, "reset-offsets", group, "--topic", topic, "--to-offset", "3").stdout
    assert "dry run" in dry and [line.split()[-1] for line in dry.splitlines()[1:3]] == ["3", "3"]
    assert committed_rows(groups_cli(gbroker, "describe", group).stdout, group)[0][0] == "10"
    groups_cli(gbroker, "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "3", "--execute")
    out = groups_cli(gbroker, "describe", group).stdout
    assert "has no active members" in out
    assert committed_rows(out, group) == {0: ("3", "15", "12"), 1: ("10", "10", "0")}
    groups_cli(gbroker, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert {p: r[0] for p, r in committed_rows(groups_cli(gbroker, "describe", group).stdout, group).items()} == \
        {0: "0", 1: "0"}
    just_after = datetime.datetime.fromtimestamp(day_ago_ms / 1000 + 0.001, datetime.timezone.utc)
    groups_cli(gbroker, "reset-offsets", group, "--topic", topic, "--to-datetime",
               just_after.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
               "--execute")  # after the first 10 records' timestamp: the 5 produced "now" on p0, none on p1
    assert {p: r[0] for p, r in committed_rows(groups_cli(gbroker, "describe", group).stdout, group).items()} == \
        {0: "10", 1: "10"}
    # A consumer of the group resumes exactly there.
    consumer = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.subscribe([topic])
    first = None
    deadline = time.monotonic() + 60
    while first is None and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            first = (msg.partition(), msg.offset())
    consumer.close()
    assert first == (0, 10)
    assert "successful" in groups_cli(gbroker, "delete", group).stdout
    assert group not in groups_cli(gbroker, "list").stdout.split()
    gone = groups_cli(gbroker, "describe", group, check=False)
    assert gone.returncode == 1 and "does not exist" in gone.stderr


def test_offsets_wire_versions(gbroker, six):
    from kio.schema.offset_commit.v2.request import OffsetCommitRequestPartition as P2, \
        OffsetCommitRequestTopic as T2
    from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition as P8, \
        OffsetCommitRequestTopic as T8
    from kio.schema.offset_commit.v10.request import OffsetCommitRequestPartition as P10, \
        OffsetCommitRequestTopic as T10
    from kio.schema.offset_fetch.v1.request import OffsetFetchRequestTopic as F1
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequestGroup as G8, OffsetFetchRequestTopics as F8
    from kio.schema.offset_fetch.v10.request import OffsetFetchRequestGroup as G10, OffsetFetchRequestTopics as F10

    a, b = unique("wire-a"), unique("wire-b")
    client = WireClient(find_coordinator(gbroker.bootstrap, a))
    find_coordinator(gbroker.bootstrap, b)
    try:
        md = client.request(3, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
        six_id = next(t.topic_id for t in md.topics if t.name == six)
        r = client.request(8, 2, group_id=a, generation_id_or_member_epoch=-1, member_id="",
                           retention_time=datetime.timedelta(hours=1), topics=(
                               T2(name=six, partitions=(P2(partition_index=0, committed_offset=5,
                                                           committed_metadata="meta"),)),
                               T2(name="no-such-topic", partitions=(P2(partition_index=0, committed_offset=1,
                                                                       committed_metadata=None),))))
        assert [[p.error_code for p in t.partitions] for t in r.topics] == [[0], [3]]  # UNKNOWN_TOPIC_OR_PARTITION
        r = client.request(8, 8, group_id=a, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                           topics=(T8(name=six, partitions=(P8(partition_index=1, committed_offset=6,
                                                               committed_leader_epoch=0, committed_metadata=""),
                                                            P8(partition_index=99, committed_offset=1,
                                                               committed_leader_epoch=-1, committed_metadata=""))),))
        assert [p.error_code for p in r.topics[0].partitions] == [0, 3]
        r = client.request(8, 10, group_id=b, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                           topics=(T10(topic_id=six_id, partitions=(P10(partition_index=2, committed_offset=7,
                                                                        committed_leader_epoch=-1,
                                                                        committed_metadata=""),)),
                                   T10(topic_id=uuid.uuid4(), partitions=(P10(partition_index=0, committed_offset=1,
                                                                              committed_leader_epoch=-1,
                                                                              committed_metadata=""),))))
        assert r.topics[0].topic_id == six_id
        assert [[p.error_code for p in t.partitions] for t in r.topics] == [[0], [100]]  # UNKNOWN_TOPIC_ID
        # v1: named partitions; v7: every committed partition (null topics).
        r = client.request(9, 1, group_id=a, topics=(F1(name=six, partition_indexes=(0, 1, 2)),))
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in r.topics[0].partitions] == \
            [(0, 5, "meta"), (1, 6, ""), (2, -1, "")]
        r = client.request(9, 7, group_id=a, topics=None, require_stable=True)
        assert r.error_code == 0
        assert sorted((t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch)
                      for t in r.topics for p in t.partitions) == [(six, 0, 5, -1), (six, 1, 6, 0)]
        # v8: several groups in one request.
        r = client.request(9, 8, require_stable=False, groups=(
            G8(group_id=a, topics=None), G8(group_id=b, topics=(F8(name=six, partition_indexes=(2,)),))))
        assert [g.group_id for g in r.groups] == [a, b] and all(g.error_code == 0 for g in r.groups)
        assert [(p.partition_index, p.committed_offset) for p in r.groups[1].topics[0].partitions] == [(2, 7)]
        # v10: topics by id.
        r = client.request(9, 10, require_stable=False, groups=(
            G10(group_id=b, member_id=None, member_epoch=-1,
                topics=(F10(topic_id=six_id, partition_indexes=(2, 3)),)),))
        [g] = r.groups
        assert g.topics[0].topic_id == six_id
        assert [(p.partition_index, p.committed_offset) for p in g.topics[0].partitions] == [(2, 7), (3, -1)]
    finally:
        client.close()


def test_describe_list_delete_groups_wire(gbroker, six):
    from kio.schema.offset_delete.v0.request import OffsetDeleteRequestPartition as OffsetDeletePartition, \
        OffsetDeleteRequestTopic as OffsetDeleteTopic
    from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition as P8, \
        OffsetCommitRequestTopic as T8

    empty, missing = unique("wd-empty"), unique("wd-missing")
    client = WireClient(find_coordinator(gbroker.bootstrap, empty))
    find_coordinator(gbroker.bootstrap, missing)
    member = Member("confluent", gbroker.bootstrap, six, unique("wd-active"), "range")
    try:
        client.request(8, 8, group_id=empty, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                       topics=(T8(name=six, partitions=tuple(
                           P8(partition_index=p, committed_offset=1, committed_leader_epoch=-1,
                              committed_metadata="") for p in (0, 1))),))
        wait_for(lambda: len(member.owned) == SIX, 30, "the active member's assignment")
        active = member.group
        [d] = client.request(15, 6, groups=(missing,), include_authorized_operations=False).groups
        assert d.error_code == 69  # GROUP_ID_NOT_FOUND
        [d] = client.request(15, 5, groups=(missing,), include_authorized_operations=False).groups
        assert d.error_code == 0 and d.group_state == "Dead"
        [d] = client.request(15, 0, groups=(active,)).groups
        assert d.group_state == "Stable" and d.protocol_data == "range" and len(d.members) == 1
        assert d.members[0].client_host == "/127.0.0.1" and d.members[0].member_assignment
        listed = {g.group_id: g for g in client.request(16, 5, states_filter=(), types_filter=()).groups}
        assert listed[empty].group_state == "Empty" and listed[active].group_state == "Stable"
        assert listed[active].protocol_type == "consumer" and listed[active].group_type == "classic"
        assert not client.request(16, 5, states_filter=(), types_filter=("consumer",)).groups
        stable = {g.group_id for g in client.request(16, 4, states_filter=("stable",)).groups}
        assert active in stable and empty not in stable
        assert {g.group_id for g in client.request(16, 0).groups} >= {empty, active}
        # OffsetDelete: an active member's subscribed topic is protected.
        r = client.request(47, 0, group_id=active, topics=(
            OffsetDeleteTopic(name=six, partitions=(OffsetDeletePartition(partition_index=0),)),))
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 86  # GROUP_SUBSCRIBED_TO_TOPIC
        r = client.request(47, 0, group_id=empty, topics=(
            OffsetDeleteTopic(name=six, partitions=(OffsetDeletePartition(partition_index=0),)),
            OffsetDeleteTopic(name="no-such-topic", partitions=(OffsetDeletePartition(partition_index=0),))))
        assert [[p.error_code for p in t.partitions] for t in r.topics] == [[0], [3]]
        fetched = client.request(9, 7, group_id=empty, topics=None, require_stable=False)
        assert [(p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions] == [(1, 1)]
        # DeleteGroups: the active group is refused, the empty one goes, the missing one was never there.
        r = client.request(42, 2, groups_names=(active, empty, missing))
        assert [(g.group_id, g.error_code) for g in r.results] == [(active, 68), (empty, 0), (missing, 69)]
        [d] = client.request(15, 5, groups=(empty,), include_authorized_operations=False).groups
        assert d.group_state == "Dead"
    finally:
        member.stop()
        client.close()


def test_leave_group_batched_wire(gbroker):
    from kio.schema.join_group.v5.request import JoinGroupRequestProtocol
    from kio.schema.leave_group.v3.request import MemberIdentity

    from cluster.groups.consumer_protocol import encode_subscription

    group = unique("leave")
    client = WireClient(find_coordinator(gbroker.bootstrap, group))
    try:
        joined = client.request(11, 5, group_id=group, session_timeout=datetime.timedelta(seconds=10),
                                rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                                group_instance_id="wire-1", protocol_type="consumer",
                                protocols=(JoinGroupRequestProtocol(name="range",
                                                                    metadata=encode_subscription(["x"])),))
        assert joined.error_code == 0 and joined.leader == joined.member_id and joined.generation_id == 1
        assert [(m.member_id, m.group_instance_id) for m in joined.members] == [(joined.member_id, "wire-1")]
        synced = client.request(14, 3, group_id=group, generation_id=1, member_id=joined.member_id,
                                group_instance_id="wire-1", assignments=())
        assert synced.error_code == 0
        assert client.request(12, 3, group_id=group, generation_id=1, member_id=joined.member_id,
                              group_instance_id="wire-1").error_code == 0
        left = client.request(13, 3, group_id=group, members=(
            MemberIdentity(member_id="", group_instance_id="wire-1"),
            MemberIdentity(member_id="nobody", group_instance_id=None)))
        assert left.error_code == 0
        assert [(m.group_instance_id, m.error_code) for m in left.members] == [("wire-1", 0), (None, 25)]
        [d] = client.request(15, 5, groups=(group,), include_authorized_operations=False).groups
        assert d.group_state == "Empty" and not d.members
        assert client.request(12, 0, group_id=group, generation_id=1, member_id=joined.member_id).error_code == 25
        assert client.request(11, 4, group_id="", session_timeout=datetime.timedelta(seconds=10),
                              rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                              protocol_type="consumer", protocols=()).error_code == 24  # INVALID_GROUP_ID
    finally:
        client.close()
