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
