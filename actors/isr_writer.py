"""A leader replica's ISR changes, committed to ZooKeeper before they take
effect (Kafka's ZK-mode AlterIsr): a conditional write of the partition
state znode on the version the leader last saw, plus an
/isr_change_notification entry for the controller. Blocking (kazoo): the
replica actor runs it on a worker thread.
"""
from __future__ import annotations


class IsrZkWriter:
    def __init__(self, zk_connect: str, topic: str, partition: int, broker_id: int, session_timeout_ms: int):
        self.zk_connect = zk_connect
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.session_timeout_ms = session_timeout_ms
        self._zk = None

    def _client(self):
        if self._zk is None:
            from metadata.kafka_zk import KafkaZkClient

            self._zk = KafkaZkClient(self.zk_connect, session_timeout_ms=self.session_timeout_ms)
            self._zk.start(ensure_paths=False)
        return self._zk

    def write(self, isr: list[int], leader_epoch: int, expected_version: int, controller_epoch: int) -> int | None:
        """The znode's new version, or None when the controller has moved on
        (another leader or epoch there: a LeaderAndIsr is coming)."""
        from metadata.kafka_zk import BadVersionError, PartitionState

        zk = self._client()
        state = PartitionState(self.broker_id, leader_epoch, list(isr), controller_epoch)
        try:
            version = zk.partitions.update_state(self.topic, self.partition, state, expected_version)
        except BadVersionError:
            found = zk.partitions.state(self.topic, self.partition)
            if found is None or found[0].leader_epoch != leader_epoch or found[0].leader != self.broker_id:
                return None
            version = zk.partitions.update_state(self.topic, self.partition, state, found[1])
        zk.isr_changes.add([(self.topic, self.partition)])
        return version

    def close_session(self) -> None:
        """Close the ZooKeeper session, if open (idle replicas keep none:
        kazoo's threads and pings); the next write opens one again. Blocking."""
        zk, self._zk = self._zk, None
        if zk is not None:
            zk.close()
