"""Topic admin through confluent-kafka for tests (keeps the client alive until
the futures resolve: a collected AdminClient cancels its requests)."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 3, config: dict | None = None,
                 replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})],
                                  operation_timeout=30)
    futures[name].result(timeout=60)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)


def pool_stats(bootstrap: str, broker_id: int) -> dict[str, int]:
    """A broker's replica pool counts (issue 30): DescribeConfigs raykafka.replica.pool.stats,
    answered by the edge `bootstrap` reaches (a sibling edge shows its primary's, ~2 s old)."""
    from cli.admin_client import AdminClient as WireAdmin
    from cli.topics import broker_capacities

    pools: dict[int, str] = {}
    client = WireAdmin(bootstrap, timeout_s=10)
    try:
        broker_capacities(client, [broker_id], pools)
    finally:
        client.close()
    text = pools.get(broker_id, "")
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(",") if kv)}
