"""Who a starting broker is: its broker.id and the cluster id, checked
against what its log dirs' meta.properties say (Kafka's order: broker.id from
the config, else meta.properties, else a new one from /brokers/seqid), and
written back to every log dir."""
from __future__ import annotations

from core.config import BrokerConfig
from node.errors import StartupError


def identify_broker(config: BrokerConfig, zk_connect: str, log_dirs: list[str], configured: int) -> tuple[int, str]:
    """broker.id from config, else meta.properties, else /brokers/seqid (Kafka's order)."""
    from metadata.kafka_zk import KafkaZkClient
    from storage.meta_properties import MetaProperties

    zk = KafkaZkClient(zk_connect, session_timeout_ms=config["zookeeper.session.timeout.ms"])
    zk.start()
    try:
        zk.ensure_persistent_paths()
        if zk.security.set_acl:
            zk.secure_existing_paths()
        cluster_id = zk.cluster.get_or_create_id()
        found = {}
        for d in log_dirs:
            meta = MetaProperties.read_if_exists(d)
            if meta is not None:
                found[d] = meta
        ids = {m.broker_id for m in found.values()}
        clusters = {m.cluster_id for m in found.values() if m.cluster_id}
        if len(ids) > 1:
            raise StartupError(f"log dirs disagree on broker.id: {sorted(ids)} (InconsistentBrokerIdException)")
        if clusters and clusters != {cluster_id}:
            raise StartupError(f"log dirs belong to cluster {clusters.pop()} but ZooKeeper holds cluster "
                               f"{cluster_id} (InconsistentClusterIdException)")
        stored = ids.pop() if ids else None
        if configured >= 0 and stored is not None and configured != stored:
            raise StartupError(f"configured broker.id {configured} doesn't match stored broker.id "
                               f"{stored} in meta.properties (InconsistentBrokerIdException)")
        if configured >= 0:
            broker_id = configured
        elif stored is not None:
            broker_id = stored
        else:
            broker_id = zk.brokers.generate_id(config["reserved.broker.max.id"])
        for d in log_dirs:
            MetaProperties(cluster_id=cluster_id, broker_id=broker_id).write(d)
        return broker_id, cluster_id
    finally:
        zk.close()
