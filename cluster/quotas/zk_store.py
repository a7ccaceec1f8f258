"""Client quotas in ZooKeeper, Kafka's layout (AdminZkClient):

    /config/users/<user>                   {"version":1,"config":{"producer_byte_rate":"1048576"}}
    /config/users/<user>/clients/<client>
    /config/clients/<client>

names sanitized (Sanitizer), defaults as "<default>", each write announced by
/config/changes/config_change_<seq> {"version":2,"entity_path":"users/alice"}.
A users znode also holds the user's SCRAM credentials: alterations rewrite
only the quota keys. Every call blocks (run them off the event loop).
"""
from __future__ import annotations

from typing import Mapping

from cluster.quotas.model import DEFAULT, QUOTA_KEYS, QuotaConfigs, QuotaEntity, quota_value_text, quota_values
from metadata import zk_paths
from metadata.kafka_zk import KafkaZkClient

USERS = zk_paths.CONFIG_ENTITY_USERS
CLIENTS = zk_paths.CONFIG_ENTITY_CLIENTS


def _sanitized(name: str) -> str:
    return name if name == DEFAULT else zk_paths.sanitize_entity_name(name)


def _desanitized(name: str) -> str:
    return name if name == DEFAULT else zk_paths.desanitize_entity_name(name)


def entity_path(entity: QuotaEntity) -> str:
    """The change notification's entity_path; /config/<it> is the znode."""
    if entity.user is not None and entity.client_id is not None:
        return f"{USERS}/{_sanitized(entity.user)}/{CLIENTS}/{_sanitized(entity.client_id)}"
    if entity.user is not None:
        return f"{USERS}/{_sanitized(entity.user)}"
    return f"{CLIENTS}/{_sanitized(entity.client_id)}"


def read_all(zk: KafkaZkClient) -> QuotaConfigs:
    """Every entity with a quota value."""
    entries: dict[QuotaEntity, dict[str, float]] = {}
    for user in zk.configs.entity_names(USERS):
        values = quota_values(zk.configs.get_at(f"{USERS}/{user}"))
        if values:
            entries[QuotaEntity(_desanitized(user), None)] = values
        for client in zk.configs.entity_names(f"{USERS}/{user}/{CLIENTS}"):
            values = quota_values(zk.configs.get_at(f"{USERS}/{user}/{CLIENTS}/{client}"))
            if values:
                entries[QuotaEntity(_desanitized(user), _desanitized(client))] = values
    for client in zk.configs.entity_names(CLIENTS):
        values = quota_values(zk.configs.get_at(f"{CLIENTS}/{client}"))
        if values:
            entries[QuotaEntity(None, _desanitized(client))] = values
    return QuotaConfigs(entries)


def read_entity(zk: KafkaZkClient, entity: QuotaEntity) -> dict[str, float]:
    return quota_values(zk.configs.get_at(entity_path(entity)))


def alter(zk: KafkaZkClient, entity: QuotaEntity, sets: Mapping[str, float], removes: list[str],
          validate_only: bool = False) -> None:
    """Set and remove quota keys of one entity, keeping every other key of its
    znode (SCRAM credentials); ValueError for a value Kafka would refuse."""
    config = zk.configs.get_at(entity_path(entity))
    for key in removes:
        config.pop(key, None)
    for key, value in sets.items():
        if key not in QUOTA_KEYS:
            raise ValueError(f"Invalid configuration key {key}")
        config[key] = quota_value_text(key, value)
    if validate_only:
        return
    zk.configs.set_at(entity_path(entity), config)  # and its /config/changes notification
