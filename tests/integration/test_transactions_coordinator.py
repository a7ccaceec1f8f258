"""The transaction coordinator and the producer-id APIs against a real broker
(issue 19): InitProducerId with and without a transactional id, fencing,
FindCoordinator(TRANSACTION), AddPartitionsToTxn / EndTxn through
confluent-kafka's transactional producer, and the __transaction_state records."""
from __future__ import annotations

import datetime
import time
import uuid

import pytest

from tests.broker_process import BrokerProcess
from tests.three_nodes import TXN_STATE_PARTITIONS
from tests.wire_client import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def txn_broker(session_dir):
    process = BrokerProcess(session_dir / "txn-broker" / "data", log_name="txn-broker.log",
                            overrides={"offsets.topic.num.partitions": "1",
                                       "transaction.state.log.num.partitions": "2",
                                       "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
                                       "raykafka.replicas.per.node.max": "200"})
    process.start()
    yield process
    process.stop()


def _admin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create_topic(broker, name, partitions=2):
    from confluent_kafka.admin import NewTopic

    admin = _admin(broker)  # kept alive until the result is in
    futures = admin.create_topics([NewTopic(name, partitions, 1)])
    futures[name].result(60)


def test_idempotent_producer_gets_an_id(txn_broker):
    client = WireClient(txn_broker.bootstrap)
    try:
        ids = []
        for version in (0, 2, 4, 5):
            response = client.request(22, version, transactional_id=None,
                                      transaction_timeout=datetime.timedelta(milliseconds=60000))
            assert response.error_code == 0, response
            assert response.producer_epoch == 0
            ids.append(response.producer_id)
        assert len(set(ids)) == 4 and all(i >= 0 for i in ids)
        # KIP-360: a producer that held an id gets a new one
        response = client.request(22, 4, transactional_id=None,
                                  transaction_timeout=datetime.timedelta(milliseconds=60000),
                                  producer_id=ids[-1], producer_epoch=3)
        assert response.error_code == 0 and response.producer_id not in ids
        # half of an id/epoch pair is invalid
        response = client.request(22, 4, transactional_id=None,
                                  transaction_timeout=datetime.timedelta(milliseconds=60000),
                                  producer_id=7, producer_epoch=-1)
        assert response.error_code == 42  # INVALID_REQUEST
    finally:
        client.close()
    # a real idempotent producer initialises (and its records go through whatever the produce path checks)
    producer = confluent_kafka.Producer({"bootstrap.servers": txn_broker.bootstrap, "enable.idempotence": True,
                                         "message.timeout.ms": 30000})
    topic = f"idem-{uuid.uuid4().hex[:6]}"
    _create_topic(txn_broker, topic, 1)
    errors = []
    for i in range(20):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(60) == 0
    assert errors == [None] * 20


# ---- transactional producers -------------------------------------------------------------------------------
def _txn_producer(broker, transactional_id, **extra):
    return confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                                     "message.timeout.ms": 30000, **extra})


def _initialised_producer(broker, transactional_id, **extra):
    """A transactional producer after init_transactions()."""
    producer = _txn_producer(broker, transactional_id, **extra)
    producer.init_transactions(60)
    return producer


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _id_and_topic(broker, prefix: str, partitions: int = 2) -> tuple[str, str]:
    """A new transactional id and a new topic of `partitions` partitions, both named after prefix."""
    tid, topic = _unique(prefix), _unique(prefix)
    _create_topic(broker, topic, partitions)
    return tid, topic


def _txn_states(broker, transactional_id, timeout_s=20.0, partitions=2, bootstrap=None):
    """[(state name, producer id, epoch)] of ``transactional_id`` in __transaction_state, in log order."""
    from cluster.transactions.log_records import decode_key, decode_value

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap or broker.bootstrap,
                                         "group.id": f"rd-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        parts = [confluent_kafka.TopicPartition("__transaction_state", p, confluent_kafka.OFFSET_BEGINNING)
                 for p in range(partitions)]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        consumer.assign(parts)
        out, positions = [], {p: 0 for p in ends}
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            positions[msg.partition()] = msg.offset() + 1
            if decode_key(msg.key()) == transactional_id:
                value = decode_value(msg.value())
                out.append(None if value is None else
                           (value.transaction_status.kafka_name, value.producer_id, value.producer_epoch))
        return out
    finally:
        consumer.close()


def _wait_for_state(broker, transactional_id, state, timeout_s=30.0, **where):
    deadline = time.monotonic() + timeout_s
    states = []
    while time.monotonic() < deadline:
        states = _txn_states(broker, transactional_id, **where)
        if states and states[-1] and states[-1][0] == state:
            return states
        time.sleep(0.5)
    raise AssertionError(f"{transactional_id} never reached {state}: {states}")


def test_find_transaction_coordinator(txn_broker):
    client = WireClient(txn_broker.bootstrap)
    try:
        first = client.request(10, 3, key="some-txn", key_type=1)
        for _ in range(60):  # the first lookup creates __transaction_state
            if first.error_code == 0:
                break
            time.sleep(0.5)
            first = client.request(10, 3, key="some-txn", key_type=1)
        assert first.error_code == 0 and first.node_id >= 0 and first.port > 0
        batched = client.request(10, 4, key_type=1, coordinator_keys=("a", "b", "c"))
        assert [c.error_code for c in batched.coordinators] == [0, 0, 0]
        assert {c.node_id for c in batched.coordinators} == {first.node_id}
    finally:
        client.close()


def test_init_transactions_and_fencing(txn_broker):
    tid, topic = _id_and_topic(txn_broker, "fence")
    first = _initialised_producer(txn_broker, tid)
    first.begin_transaction()
    first.produce(topic, value=b"from the first", partition=0)
    first.flush(30)
    # a second producer with the same id: the open transaction of the first is aborted,
    # and the second gets the next epoch
    second = _initialised_producer(txn_broker, tid)
    with pytest.raises(confluent_kafka.KafkaException) as failure:
        first.commit_transaction(30)
    error = failure.value.args[0]
    assert error.fatal() or error.code() in (confluent_kafka.KafkaError._FENCED,
                                             confluent_kafka.KafkaError.PRODUCER_FENCED,
                                             confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH), error
    states = _wait_for_state(txn_broker, tid, "Empty")
    pid = states[0][1]
    assert [s for s in states if s] == [("Empty", pid, 0), ("Ongoing", pid, 0), ("PrepareAbort", pid, 1),
                                        ("CompleteAbort", pid, 1), ("Empty", pid, 2)]
    # the second one works
    second.begin_transaction()
    second.produce(topic, value=b"from the second", partition=1)
    second.commit_transaction(30)
    _wait_for_state(txn_broker, tid, "CompleteCommit")


def test_commit_and_abort(txn_broker):
    tid, topic = _id_and_topic(txn_broker, "ca")
    producer = _initialised_producer(txn_broker, tid)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"c%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted", partition=0)
    producer.flush(30)  # else librdkafka purges the record and, with no partition added, sends no EndTxn
    producer.abort_transaction(30)
    states = [s[0] for s in _wait_for_state(txn_broker, tid, "CompleteAbort") if s]
    assert states == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing", "PrepareAbort",
                      "CompleteAbort"]


def test_transaction_timeout_aborts(txn_broker):
    tid, topic = _id_and_topic(txn_broker, "to", 1)
    producer = _initialised_producer(txn_broker, tid, **{"transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, value=b"left open", partition=0)
    producer.flush(30)
    states = _wait_for_state(txn_broker, tid, "CompleteAbort", timeout_s=30)
    assert [s[0] for s in states if s][-2:] == ["PrepareAbort", "CompleteAbort"]
    assert states[-1][2] == 1  # aborted at a bumped epoch: the producer is fenced
    with pytest.raises(confluent_kafka.KafkaException):
        producer.commit_transaction(30)


def test_add_partitions_wire_versions(txn_broker):
    topic = f"wire-{uuid.uuid4().hex[:6]}"
    _create_topic(txn_broker, topic)
    tid = f"wire-{uuid.uuid4().hex[:6]}"
    client = WireClient(txn_broker.bootstrap)
    try:
        for _ in range(60):
            found = client.request(10, 3, key=tid, key_type=1)
            if found.error_code == 0:
                break
            time.sleep(0.5)
        timeout = datetime.timedelta(milliseconds=60000)
        for _ in range(60):
            init = client.request(22, 3, transactional_id=tid, transaction_timeout=timeout)
            if init.error_code not in (14, 15, 51):  # loading, not available, concurrent
                break
            time.sleep(0.5)
        assert init.error_code == 0, init
        pid, epoch = init.producer_id, init.producer_epoch
        add = client.request(24, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                             v3_and_below_producer_epoch=epoch,
                             v3_and_below_topics=_topics(client, 24, 3, [(topic, [0, 1])]))
        assert [(r.name, p.partition_index, p.partition_error_code)
                for r in add.results_by_topic_v3_and_below for p in r.results_by_partition] == \
            [(topic, 0, 0), (topic, 1, 0)]
        # a wrong epoch: INVALID_PRODUCER_EPOCH below v2, PRODUCER_FENCED from v2
        for version, code in ((1, 47), (3, 90)):
            bad = client.request(24, version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                 v3_and_below_producer_epoch=epoch + 1,
                                 v3_and_below_topics=_topics(client, 24, version, [(topic, [0])]))
            assert bad.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == code
        # an unknown topic fails the whole transaction
        unknown = client.request(24, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                 v3_and_below_producer_epoch=epoch,
                                 v3_and_below_topics=_topics(client, 24, 3, [(topic, [0]), ("no-such-topic", [0])]))
        assert sorted((r.name, p.partition_error_code) for r in unknown.results_by_topic_v3_and_below
                      for p in r.results_by_partition) == [("no-such-topic", 3), (topic, 55)]
        # v4+: batched, verify_only
        from kio.schema.add_partitions_to_txn.v4.request import (AddPartitionsToTxnTopic,
                                                                 AddPartitionsToTxnTransaction)
        verify = client.request(24, 4, transactions=(
            AddPartitionsToTxnTransaction(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                          verify_only=True,
                                          topics=(AddPartitionsToTxnTopic(name=topic, partitions=(0, 1)),)),
            AddPartitionsToTxnTransaction(transactional_id="unknown-" + tid, producer_id=pid, producer_epoch=epoch,
                                          verify_only=True,
                                          topics=(AddPartitionsToTxnTopic(name=topic, partitions=(0,)),))))
        assert verify.error_code == 0
        codes = {(r.transactional_id, p.partition_index): p.partition_error_code
                 for r in verify.results_by_transaction for t in r.topic_results for p in t.results_by_partition}
        assert codes[(tid, 0)] == 0 and codes[(tid, 1)] == 0
        assert codes[("unknown-" + tid, 0)] in (49, 16)  # INVALID_PRODUCER_ID_MAPPING, or NOT_COORDINATOR
        # EndTxn: abort, then a second abort is a retry (OK), a commit INVALID_TXN_STATE
        assert client.request(26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                              committed=False).error_code == 0
        for _ in range(60):
            again = client.request(26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   committed=False)
            if again.error_code != 51:
                break
            time.sleep(0.2)
        assert again.error_code == 0
        assert client.request(26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                              committed=True).error_code == 48
        assert client.request(26, 1, transactional_id=tid, producer_id=pid, producer_epoch=epoch + 3,
                              committed=True).error_code == 47
        # a transaction timeout above transaction.max.timeout.ms
        assert client.request(22, 3, transactional_id=tid,
                              transaction_timeout=datetime.timedelta(milliseconds=900001)).error_code == 50
    finally:
        client.close()


def _topics(client, api_key, version, pairs):
    module = __import__(f"kio.schema.add_partitions_to_txn.v{version}.request", fromlist=["AddPartitionsToTxnTopic"])
    return tuple(module.AddPartitionsToTxnTopic(name=name, partitions=tuple(parts)) for name, parts in pairs)


def test_write_txn_markers_wire(txn_broker):
    topic = f"mk-{uuid.uuid4().hex[:6]}"
    _create_topic(txn_broker, topic, 1)
    from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic

    client = WireClient(txn_broker.bootstrap)
    try:
        response = client.request(27, 1, markers=(
            WritableTxnMarker(producer_id=424242, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
                              topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),
                                      WritableTxnMarkerTopic(name="no-such-topic", partition_indexes=(0,)))),))
        codes = {(t.name, p.partition_index): p.error_code for m in response.markers for t in m.topics
                 for p in t.partitions}
        assert codes[("no-such-topic", 0)] == 3
        assert codes[(topic, 0)] == 0
    finally:
        client.close()


def test_send_offsets_to_transaction(txn_broker):
    tid = f"so-{uuid.uuid4().hex[:6]}"
    topic = f"so-{uuid.uuid4().hex[:6]}"
    group = f"so-group-{uuid.uuid4().hex[:6]}"
    _create_topic(txn_broker, topic, 1)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = _txn_producer(txn_broker, tid)
    try:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(topic, value=b"x", partition=0)
        offsets = [confluent_kafka.TopicPartition(topic, 0, 7)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        states = _wait_for_state(txn_broker, tid, "CompleteCommit")
        prepared = [s for s in states if s and s[0] == "PrepareCommit"]
        assert prepared
        committed = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
        assert committed[0].offset == 7
    finally:
        consumer.close()


def test_describe_and_list_transactions(txn_broker):
    tid, topic = _id_and_topic(txn_broker, "dl", 1)
    producer = _initialised_producer(txn_broker, tid)
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=0)
    producer.flush(30)
    client = WireClient(txn_broker.bootstrap)
    try:
        described = client.request(65, 0, transactional_ids=(tid, "no-such-" + tid))
        found, missing = described.transaction_states
        assert (found.error_code, found.transaction_state) == (0, "Ongoing")
        assert [(t.topic, tuple(t.partitions)) for t in found.topics] == [(topic, (0,))]
        assert found.transaction_timeout.total_seconds() == 60 and found.producer_epoch == 0
        assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = client.request(66, 1, state_filters=("Ongoing", "Nonsense"), producer_id_filters=(),
                                duration_filter=-1)
        assert listed.error_code == 0 and tuple(listed.unknown_state_filters) == ("Nonsense",)
        assert (tid, found.producer_id, "Ongoing") in {(t.transactional_id, t.producer_id, t.transaction_state)
                                                        for t in listed.transaction_states}
        by_pid = client.request(66, 0, state_filters=(), producer_id_filters=(found.producer_id,))
        assert [t.transactional_id for t in by_pid.transaction_states] == [tid]
    finally:
        client.close()
    producer.abort_transaction(30)


def test_open_transaction_aborted_after_kill9_and_restart(txn_broker):
    """Runs last in this module: kill -9 of the whole broker with an open
    transaction and a committed one in __transaction_state; after the restart
    the coordinator reloads them from the log (committed stays committed) and
    aborts the open one once its timeout passes."""
    done_id, open_id = f"kd-{uuid.uuid4().hex[:6]}", f"ko-{uuid.uuid4().hex[:6]}"
    topic = f"k9-{uuid.uuid4().hex[:6]}"
    _create_topic(txn_broker, topic, 1)
    done = _initialised_producer(txn_broker, done_id)
    done.begin_transaction()
    done.produce(topic, value=b"committed", partition=0)
    done.commit_transaction(30)
    _wait_for_state(txn_broker, done_id, "CompleteCommit")
    left_open = _initialised_producer(txn_broker, open_id,
                                      **{"transaction.timeout.ms": 5000, "message.timeout.ms": 5000})
    left_open.begin_transaction()
    left_open.produce(topic, value=b"open", partition=0)
    left_open.flush(30)
    assert [s[0] for s in _txn_states(txn_broker, open_id) if s][-1] == "Ongoing"
    txn_broker.kill9()
    txn_broker.start()
    states = _wait_for_state(txn_broker, open_id, "CompleteAbort", timeout_s=90)
    assert [s[0] for s in states if s][-3:] == ["Ongoing", "PrepareAbort", "CompleteAbort"]
    assert [s[0] for s in _txn_states(txn_broker, done_id) if s][-1] == "CompleteCommit"
    # the recovered coordinator serves the committed producer's id again (epoch bumped)
    again = _initialised_producer(txn_broker, done_id)
    states = _wait_for_state(txn_broker, done_id, "Empty")
    assert states[-1][1] == states[0][1] and states[-1][2] == 1


def test_coordinator_node_killed_mid_transaction(three_nodes):
    """3 Ray nodes, __transaction_state with RF=3 and min.insync.replicas=2: the
    node hosting a transaction's coordinator is killed (-9) between the
    producer's records and its commit. A replica on another node becomes the
    leader, its coordinator replays the partition; the producer's commit either
    completes there or fails with an error, and the transaction ends Complete
    (CompleteCommit when the producer was told it committed), never stuck in
    a Prepare state."""
    from confluent_kafka.admin import NewTopic

    cluster = three_nodes  # the session's shared cluster: __transaction_state with 3 partitions, RF=3, min ISR 2
    nodes = cluster.nodes()
    head = nodes[0]["broker_id"]  # the controller: not the victim
    bootstrap = cluster.bootstrap_all
    topic = f"fo-{uuid.uuid4().hex[:6]}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(120)
    client = WireClient(nodes[0]["host"] + ":" + str(nodes[0]["port"]))
    try:
        tid, coordinator = None, None
        for i in range(200):  # a transactional id whose coordinator is not on the controller's node
            candidate = f"fo-{i}-{uuid.uuid4().hex[:4]}"
            for _ in range(120):
                found = client.request(10, 3, key=candidate, key_type=1)
                if found.error_code == 0:
                    break
                time.sleep(0.5)
            assert found.error_code == 0, found
            if found.node_id != head:
                tid, coordinator = candidate, found.node_id
                break
    finally:
        client.close()
    assert tid is not None
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                                         "message.timeout.ms": 60000, "transaction.timeout.ms": 60000})
    producer.init_transactions(120)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"fo-%d" % i, partition=0)
    assert producer.flush(60) == 0
    cluster.kill_node(coordinator)
    live = ",".join(f"{n['host']}:{n['port']}" for n in nodes if n["broker_id"] != coordinator)
    try:
        producer.commit_transaction(120)
        committed = True
    except confluent_kafka.KafkaException as exc:
        committed = False
        print(f"commit after the coordinator's node died failed: {exc.args[0]}")
    deadline = time.monotonic() + 120
    while True:
        states = [s for s in _txn_states(cluster, tid, partitions=TXN_STATE_PARTITIONS, bootstrap=live) if s]
        if states and states[-1][0] in ("CompleteCommit", "CompleteAbort") and \
                (not committed or states[-1][0] == "CompleteCommit"):
            break
        assert time.monotonic() < deadline, (committed, states)
        time.sleep(1)
    print(f"transaction of {tid} after the failover: committed={committed}, states={states}")
    if committed:
        assert states[-1][0] == "CompleteCommit"
