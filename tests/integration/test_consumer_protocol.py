"""Kafka 4's consumer group protocol (KIP-848) with real clients:
confluent-kafka consumers with ``group.protocol=consumer`` against a real
broker (its own, with a short consumer heartbeat interval). Members join and
leave while a producer runs; every record is consumed, none twice, and the
assignment history recorded from the clients' callbacks never shows a
partition owned by two members at once; a group moves between the classic
and the consumer protocol both ways. Also DescribeTopicPartitions
(KIP-966) paging, and ListGroups/ConsumerGroupDescribe/DeleteGroups of a
consumer group.
"""
from __future__ import annotations

import functools
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kio.schema.describe_topic_partitions.v0.request import Cursor, TopicRequest

from tests import cli_runner
from tests.broker_process import BrokerProcess
from tests.kafka_admin import create_topic
from tests.wire_client import WireClient

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SIX = 6
wait_for = functools.partial(cli_runner.wait_for, poll_s=0.1)


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("consumer-protocol") / "data",
                            log_name="consumer-protocol-broker.log",
                            overrides={"offsets.topic.num.partitions": "2",
                                       "group.consumer.heartbeat.interval.ms": "300",
                                       "group.consumer.session.timeout.ms": "10000"})
    process.start()
    yield process
    code = process.stop()
    assert code == 0, f"broker did not stop cleanly (exit {code}):\n{process.log_tail()}"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class History:
    """Assignment events from every member's callbacks, in the order they
    happened: a partition is owned from the start of its assign callback to
    the end of its revoke (or lost) callback."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, tuple[int, ...]]] = []
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []

    def assigned(self, member: str, partitions) -> None:
        with self.lock:
            parts = tuple(sorted(p.partition for p in partitions))
            self.events.append((member, "assign", parts))
            for p in parts:
                if p in self.owner and self.owner[p] != member:
                    self.violations.append(f"partition {p} given to {member} while {self.owner[p]} owns it")
                self.owner[p] = member

    def revoked(self, member: str, partitions, kind: str = "revoke") -> None:
        with self.lock:
            parts = tuple(sorted(p.partition for p in partitions))
            self.events.append((member, kind, parts))
            for p in parts:
                if self.owner.get(p) == member:
                    del self.owner[p]


class Member:
    """A consumer-protocol member consuming in a thread, committing each
    record synchronously after it is processed."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, history: History,
                 consumed: dict, extra: dict | None = None) -> None:
        self.name, self.history, self.consumed = name, history, consumed
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                       "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": name,
                       **(extra or {})}
        self.topic = topic
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        consumer = Consumer(self.config)
        consumer.subscribe([self.topic],
                           on_assign=lambda c, ps: self.history.assigned(self.name, ps),
                           on_revoke=lambda c, ps: self.history.revoked(self.name, ps),
                           on_lost=lambda c, ps: self.history.revoked(self.name, ps, "lost"))
        try:
            while not self.stop_event.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                with self.history.lock:
                    self.consumed.setdefault((msg.partition(), msg.offset()), []).append(self.name)
                try:
                    consumer.commit(message=msg, asynchronous=False)
                except KafkaException as exc:
                    self.errors.append(f"commit {msg.partition()}@{msg.offset()}: {exc}")
        finally:
            consumer.close()  # leaves the group (epoch -1): its partitions are revoked first

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), f"{self.name} did not stop"


def owned_by(history: History) -> dict[str, set[int]]:
    with history.lock:
        result: dict[str, set[int]] = {}
        for p, m in history.owner.items():
            result.setdefault(m, set()).add(p)
        return result


def test_consumer_protocol_members_join_and_leave_under_load(cbroker):
    topic, group = unique("kip848"), unique("kip848-group")
    create_topic(cbroker.bootstrap, topic, SIX)
    history, consumed = History(), {}
    produced: list[tuple[int, int]] = []
    stop_producing = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cbroker.bootstrap, "linger.ms": 5, "enable.idempotence": True})

        def delivered(err, msg):
            if err is None:
                produced.append((msg.partition(), msg.offset()))

        i = 0
        while not stop_producing.is_set():
            producer.produce(topic, key=str(i).encode(), value=b"v%d" % i, partition=i % SIX, on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.005)
        assert producer.flush(30) == 0

    producer_thread = threading.Thread(target=produce, daemon=True)
    producer_thread.start()
    members = [Member(f"m{i}", cbroker.bootstrap, topic, group, history, consumed) for i in range(3)]
    try:
        wait_for(lambda: sorted(len(ps) for ps in owned_by(history).values()) == [2, 2, 2], 60,
                 "three members with two partitions each")
        members.append(Member("m3", cbroker.bootstrap, topic, group, history, consumed))
        wait_for(lambda: sorted(len(ps) for ps in owned_by(history).values()) == [1, 1, 2, 2], 60,
                 "four members sharing six partitions")
        # The group as the coordinator sees it (ConsumerGroupDescribe, ListGroups v5).
        client = WireClient(cbroker.bootstrap)
        try:
            coordinator = _coordinator_client(cbroker, group)
            [described] = coordinator.request(69, 1, group_ids=(group,), include_authorized_operations=False).groups
            assert described.error_code == 0 and described.group_state == "Stable", described
            assert len(described.members) == 4 and described.assignor_name == "uniform"
            assert all(m.member_epoch == described.assignment_epoch for m in described.members)
            listed = coordinator.request(16, 5, states_filter=(), types_filter=("consumer",)).groups
            assert any(g.group_id == group and g.group_type == "consumer" and g.protocol_type == "consumer"
                       for g in listed), listed
            coordinator.close()
        finally:
            client.close()
        members.pop(0).stop()
        wait_for(lambda: sorted(len(ps) for ps in owned_by(history).values()) == [2, 2, 2], 60,
                 "three members again after one left")
        settled_at = len(produced)  # the producer keeps running through the settled group
        wait_for(lambda: len(produced) >= settled_at + 100, 60, "100 more records produced to the settled group")
    finally:
        stop_producing.set()
        producer_thread.join(60)
    wait_for(lambda: set(produced) <= set(consumed), 60, "every produced record consumed")
    for member in members:
        member.stop()
    assert history.violations == [], history.violations
    twice = {k: v for k, v in consumed.items() if len(v) > 1}
    assert not twice, f"records consumed more than once: {sorted(twice.items())[:10]}"
    errors = [e for m in members for e in m.errors]
    assert not errors, errors[:10]


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_and_consumer_members_share_a_group_during_upgrade(cbroker, strategy):
    """A classic group (librdkafka, group.protocol=classic) is joined by a
    consumer-protocol member: the group is upgraded online, both kinds of
    member consume side by side with no partition owned twice, and when the
    classic member leaves the other one takes everything."""
    topic, group = unique("upgrade"), unique("upgrade-group")
    create_topic(cbroker.bootstrap, topic, SIX)
    history, consumed = History(), {}
    producer = Producer({"bootstrap.servers": cbroker.bootstrap, "linger.ms": 5})
    produced = []

    def send(count: int) -> None:
        for i in range(count):
            producer.produce(topic, value=b"%d" % i, partition=i % SIX,
                             on_delivery=lambda err, msg: err is None and produced.append((msg.partition(),
                                                                                          msg.offset())))
        assert producer.flush(30) == 0

    send(60)
    classic = Member("classic", cbroker.bootstrap, topic, group, history, consumed,
                     extra={"group.protocol": "classic", "partition.assignment.strategy": strategy,
                            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    members = [classic]
    try:
        wait_for(lambda: owned_by(history).get("classic") == set(range(SIX)), 60, "the classic member owns all")
        members.append(Member("modern", cbroker.bootstrap, topic, group, history, consumed))
        wait_for(lambda: sorted(len(ps) for ps in owned_by(history).values()) == [3, 3], 60,
                 "a classic and a consumer-protocol member with three partitions each")
        coordinator = _coordinator_client(cbroker, group)
        try:
            [described] = coordinator.request(69, 1, group_ids=(group,), include_authorized_operations=False).groups
            assert described.error_code == 0, described
            assert sorted(m.member_type for m in described.members) == [0, 1]  # classic, consumer
        finally:
            coordinator.close()
        send(60)
        wait_for(lambda: set(produced) <= set(consumed), 60, "records consumed by the mixed group")
        members.pop(0).stop()
        wait_for(lambda: owned_by(history).get("modern") == set(range(SIX)), 60,
                 "the consumer-protocol member owns all after the classic one left")
        send(60)
        wait_for(lambda: set(produced) <= set(consumed), 60, "records consumed after the classic member left")
    finally:
        for member in members:
            member.stop()
    assert history.violations == [], history.violations
    twice = {k: v for k, v in consumed.items() if len(v) > 1}
    assert not twice, f"records consumed more than once: {sorted(twice.items())[:10]}"


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_group_downgrades_to_classic_when_the_last_consumer_member_leaves(cbroker, strategy):
    """A classic member (librdkafka, group.protocol=classic) and a
    consumer-protocol member share a group (upgraded online); when the
    consumer-protocol member closes, the group becomes a classic group again
    (Kafka 4's downgrade, group.consumer.migration.policy=bidirectional): the
    classic member takes every partition in a classic rebalance, DescribeGroups
    and the admin client see a classic group, the committed offsets stay (no
    record consumed twice), and a new consumer-protocol member upgrades it once
    more."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    topic, group = unique("downgrade"), unique("downgrade-group")
    create_topic(cbroker.bootstrap, topic, SIX)
    history, consumed = History(), {}
    producer = Producer({"bootstrap.servers": cbroker.bootstrap, "linger.ms": 5})
    produced = []
    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})

    def group_type():
        try:
            return admin.describe_consumer_groups([group])[group].result(timeout=30).type
        except KafkaException:
            return None

    def send(count: int) -> None:
        for i in range(count):
            producer.produce(topic, value=b"%d" % i, partition=i % SIX,
                             on_delivery=lambda err, msg: err is None and produced.append((msg.partition(),
                                                                                          msg.offset())))
        assert producer.flush(30) == 0

    send(60)
    classic = Member("classic", cbroker.bootstrap, topic, group, history, consumed,
                     extra={"group.protocol": "classic", "partition.assignment.strategy": strategy,
                            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    members = [classic]
    try:
        wait_for(lambda: owned_by(history).get("classic") == set(range(SIX)), 60, "the classic member owns all")
        assert group_type() == ConsumerGroupType.CLASSIC
        modern = Member("modern", cbroker.bootstrap, topic, group, history, consumed)
        members.append(modern)
        wait_for(lambda: sorted(len(ps) for ps in owned_by(history).values()) == [3, 3], 60,
                 "a classic and a consumer-protocol member with three partitions each")
        assert group_type() == ConsumerGroupType.CONSUMER
        send(60)
        wait_for(lambda: set(produced) <= set(consumed), 60, "records consumed by the mixed group")
        members.remove(modern)
        modern.stop()  # leaves with epoch -1: the last consumer-protocol member
        wait_for(lambda: owned_by(history).get("classic") == set(range(SIX)), 60,
                 "the classic member owns all after the downgrade")
        wait_for(lambda: group_type() == ConsumerGroupType.CLASSIC, 30, "a classic group again")
        coordinator = _coordinator_client(cbroker, group)
        try:
            [described] = coordinator.request(15, 5, groups=(group,), include_authorized_operations=False).groups
            assert described.error_code == 0 and described.protocol_type == "consumer", described
            assert described.protocol_data == strategy and len(described.members) == 1, described
            [not_consumer] = coordinator.request(69, 1, group_ids=(group,),
                                                 include_authorized_operations=False).groups
            assert not_consumer.error_code == 69, not_consumer  # GROUP_ID_NOT_FOUND: not a consumer group
        finally:
            coordinator.close()
        send(60)
        wait_for(lambda: set(produced) <= set(consumed), 60, "records consumed after the downgrade")
        # ... and up again.
        members.append(Member("modern2", cbroker.bootstrap, topic, group, history, consumed))
        wait_for(lambda: sorted(len(ps) for ps in owned_by(history).values()) == [3, 3], 60,
                 "upgraded again: three partitions each")
        assert group_type() == ConsumerGroupType.CONSUMER
        send(60)
        wait_for(lambda: set(produced) <= set(consumed), 60, "records consumed after the second upgrade")
    finally:
        for member in members:
            member.stop()
    assert history.violations == [], history.violations
    twice = {k: v for k, v in consumed.items() if len(v) > 1}
    assert not twice, f"records consumed more than once: {sorted(twice.items())[:10]}"


def _coordinator_client(broker, group: str) -> WireClient:
    client = WireClient(broker.bootstrap)
    try:
        def found():
            answer = client.request(10, 4, key_type=0, coordinator_keys=(group,))
            c = answer.coordinators[0]
            return f"{c.host}:{c.port}" if c.error_code == 0 else None
        address = wait_for(found, 30, "the group's coordinator")
    finally:
        client.close()
    return WireClient(address)


def test_describe_topic_partitions_pages(cbroker):
    topic = unique("dtp")
    create_topic(cbroker.bootstrap, topic, 5)
    client = WireClient(cbroker.bootstrap)
    try:
        first = client.request(75, 0, topics=(TopicRequest(name=topic),), response_partition_limit=3, cursor=None)
        [t] = first.topics
        assert t.error_code == 0 and t.name == topic and t.topic_id is not None
        assert [p.partition_index for p in t.partitions] == [0, 1, 2]
        assert all(p.leader_id >= 0 and p.isr_nodes for p in t.partitions)
        assert first.next_cursor is not None and first.next_cursor.partition_index == 3
        rest = client.request(75, 0, topics=(TopicRequest(name=topic),), response_partition_limit=3,
                              cursor=Cursor(topic_name=topic, partition_index=3))
        assert [p.partition_index for p in rest.topics[0].partitions] == [3, 4] and rest.next_cursor is None
        missing = client.request(75, 0, topics=(TopicRequest(name=unique("nope")),), response_partition_limit=10,
                                 cursor=None)
        assert missing.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        client.close()


def test_regex_subscription_is_evaluated_by_the_broker(cbroker):
    """A consumer subscribing to a pattern gets the partitions of every
    matching topic, and of a matching topic created later, from the broker."""
    prefix = unique("rx")
    create_topic(cbroker.bootstrap, f"{prefix}-a", 2)
    create_topic(cbroker.bootstrap, f"{prefix}-b", 2)
    create_topic(cbroker.bootstrap, unique("other"), 2)
    assigned: set = set()
    lock = threading.Lock()

    def on_assign(consumer, partitions):
        with lock:
            assigned.update((p.topic, p.partition) for p in partitions)

    consumer = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": unique("rx-group"),
                         "group.protocol": "consumer", "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([f"^{prefix}-.*"], on_assign=on_assign)
    try:
        def polled_until(expected):
            consumer.poll(0.2)
            with lock:
                return assigned >= expected
        wait_for(lambda: polled_until({(f"{prefix}-{t}", p) for t in "ab" for p in range(2)}), 60,
                 "the matching topics assigned")
        with lock:
            assert {t for t, _ in assigned} == {f"{prefix}-a", f"{prefix}-b"}
        create_topic(cbroker.bootstrap, f"{prefix}-c", 3)
        wait_for(lambda: polled_until({(f"{prefix}-c", p) for p in range(3)}), 60, "the new matching topic")
    finally:
        consumer.close()


def test_static_member_restart_keeps_its_partitions(cbroker):
    """A static member (group.instance.id) that closes and comes back gets its
    partitions again, and the other member's assignment never moves."""
    topic, group = unique("static"), unique("static-group")
    create_topic(cbroker.bootstrap, topic, 4)
    history, consumed = History(), {}
    extra = {"group.instance.id": "instance-a"}
    a = Member("a1", cbroker.bootstrap, topic, group, history, consumed, extra=extra)
    b = Member("b", cbroker.bootstrap, topic, group, history, consumed)
    members = [a, b]
    try:
        wait_for(lambda: sorted(len(ps) for ps in owned_by(history).values()) == [2, 2], 60, "two and two")
        before = owned_by(history)
        b_events = len([e for e in history.events if e[0] == "b"])
        members.remove(a)
        a.stop()  # leaves with epoch -2: its partitions wait for it
        again = Member("a2", cbroker.bootstrap, topic, group, history, consumed, extra=extra)
        members.append(again)
        wait_for(lambda: owned_by(history).get("a2") == before["a1"], 60, "the static member's partitions back")
        time.sleep(1.0)
        assert owned_by(history)["b"] == before["b"]
        assert len([e for e in history.events if e[0] == "b"]) == b_events, history.events
    finally:
        for member in members:
            member.stop()
    assert history.violations == [], history.violations


@pytest.mark.cpu_heavy
def test_consumer_group_survives_a_coordinator_crash(tmp_path):
    """Members joined with ConsumerGroupHeartbeat; the broker is killed (-9)
    and started again on its data: the coordinator replays the KIP-848
    records, so the group, its epochs and assignments are as before and the
    members carry on at their epochs without rejoining."""
    import datetime

    from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions

    data = tmp_path / "data"
    overrides = {"offsets.topic.num.partitions": "1", "group.consumer.session.timeout.ms": "60000"}
    broker = BrokerProcess(data, log_name="consumer-protocol-crash.log", overrides=overrides).start()
    topic, group = unique("crash"), unique("crash-group")
    members = {"m-1": {"epoch": 0, "owned": ()}, "m-2": {"epoch": 0, "owned": ()}}

    def beat(address: str, member_id: str, first: bool = False):
        state = members[member_id]
        client = WireClient(address)
        try:
            answer = client.request(
                68, 1, group_id=group, member_id=member_id, member_epoch=0 if first else state["epoch"],
                instance_id=None, rack_id=None,
                rebalance_timeout=datetime.timedelta(milliseconds=30000 if first else -1),
                subscribed_topic_names=(topic,) if first else None, subscribed_topic_regex=None,
                server_assignor=None,
                topic_partitions=() if first else tuple(TopicPartitions(topic_id=t, partitions=ps)
                                                         for t, ps in state["owned"]))
        finally:
            client.close()
        assert answer.error_code == 0, answer
        state["epoch"] = answer.member_epoch
        if answer.assignment is not None:
            state["owned"] = tuple((tp.topic_id, tuple(tp.partitions)) for tp in answer.assignment.topic_partitions)
        return answer

    def describe(address: str):
        client = WireClient(address)
        try:
            [d] = client.request(69, 1, group_ids=(group,), include_authorized_operations=False).groups
        finally:
            client.close()
        return d

    try:
        create_topic(broker.bootstrap, topic, 4)
        address = wait_for(lambda: _found_coordinator(broker, group), 60, "the coordinator")
        for member_id in members:
            beat(address, member_id, first=True)

        def stable():
            for member_id in members:
                beat(address, member_id)
            d = describe(address)
            return d if d.group_state == "Stable" and all(
                len(members[m]["owned"][0][1]) == 2 if members[m]["owned"] else False for m in members) else None
        before = wait_for(stable, 60, "a stable group of two")
        broker.kill9()
        broker = BrokerProcess(data, log_name="consumer-protocol-crash.log", overrides=overrides).start()
        address = wait_for(lambda: _found_coordinator(broker, group), 120, "the coordinator after the crash")
        after = wait_for(lambda: (lambda d: d if d.error_code == 0 else None)(describe(address)), 120,
                         "the group loaded")
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == \
            (before.group_epoch, before.assignment_epoch, "Stable")
        assert sorted((m.member_id, m.member_epoch, m.assignment) for m in after.members) == \
            sorted((m.member_id, m.member_epoch, m.assignment) for m in before.members)
        for member_id in members:  # at their epochs, no rejoin
            answer = beat(address, member_id)
            assert answer.member_epoch == before.group_epoch
    finally:
        assert broker.stop() == 0


def _found_coordinator(broker, group: str):
    client = WireClient(broker.bootstrap)
    try:
        answer = client.request(10, 4, key_type=0, coordinator_keys=(group,))
    finally:
        client.close()
    c = answer.coordinators[0]
    return f"{c.host}:{c.port}" if c.error_code == 0 else None
