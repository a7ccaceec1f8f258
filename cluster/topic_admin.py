"""Topic creation rules, without Ray or ZooKeeper: validation of CreateTopics
entries with Kafka's error codes and messages, and replica assignment
(Kafka's AdminUtils.assignReplicasToBrokers, rack-unaware form).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from core.controller_messages import CreateTopicSpec
from core.error_codes import ErrorCode

from cluster.capacity import NodeCapacity, place_with_room
from core.config import (TOPIC_CONFIGS, BrokerConfig, ConfigError, is_sensitive_broker_key, is_sensitive_topic_key,
                         validate_topic_configs)
from core.naming import topic_name_error

# DescribeConfigs/CreateTopics config sources (Kafka's ConfigSource ids).
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


class TopicSpecError(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error


@dataclasses.dataclass
class TopicPlan:
    name: str
    assignment: dict[int, list[int]]
    configs: dict[str, str]

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(next(iter(self.assignment.values())))


def assign_replicas(num_partitions: int, replication_factor: int, brokers: list[int],
                    start_index: int | None = None, next_replica_shift: int | None = None,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """Spread leaders round-robin from a random start; followers shifted so
    replicas of consecutive partitions land on different broker pairs."""
    if replication_factor > len(brokers):
        raise TopicSpecError(ErrorCode.invalid_replication_factor,
                             f"Replication factor: {replication_factor} larger than available brokers: "
                             f"{len(brokers)}.")
    rng = rng or random.Random()
    ids = sorted(brokers)
    n = len(ids)
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if next_replica_shift is None else next_replica_shift
    assignment: dict[int, list[int]] = {}
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            offset = 1 + (shift + j) % (n - 1)
            replicas.append(ids[(first + offset) % n])
        assignment[p] = replicas
    return assignment


def assign_replicas_rack_aware(num_partitions: int, replication_factor: int, racks: dict[int, str],
                               start_index: int | None = None, next_replica_shift: int | None = None,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """Kafka's rack-aware assignment: brokers interleaved rack by rack, and each
    partition's replicas on as many distinct racks as possible (then distinct
    brokers), so losing a rack loses at most one replica while RF <= racks."""
    if replication_factor > len(racks):
        raise TopicSpecError(ErrorCode.invalid_replication_factor,
                             f"Replication factor: {replication_factor} larger than available brokers: "
                             f"{len(racks)}.")
    rng = rng or random.Random()
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    arranged: list[int] = []
    rack_lists = [by_rack[r] for r in sorted(by_rack)]
    for i in range(max(len(lst) for lst in rack_lists)):
        arranged.extend(lst[i] for lst in rack_lists if i < len(lst))
    n, num_racks = len(arranged), len(by_rack)
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if next_replica_shift is None else next_replica_shift
    assignment: dict[int, list[int]] = {}
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks, used_brokers = {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                offset = 1 + (shift * num_racks + k) % (n - 1)
                broker = arranged[(first + offset) % n]
                k += 1
                rack_ok = racks[broker] not in used_racks or len(used_racks) == num_racks
                broker_ok = broker not in used_brokers or len(used_brokers) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    used_racks.add(racks[broker])
                    used_brokers.add(broker)
                    break
        assignment[p] = replicas
    return assignment


def plan_topic(spec: CreateTopicSpec, config: BrokerConfig, live_brokers: list[int],
               existing_topics: set[str], racks: dict[int, str | None] | None = None,
               capacity: NodeCapacity | None = None, internal: bool = False) -> TopicPlan:
    """Validate one CreateTopics entry; raise TopicSpecError with Kafka's code.

    With `capacity`, replicas go to brokers with room (place_with_room) and a
    topic that would still put a broker past raykafka.replicas.per.node.max is
    refused whole with POLICY_VIOLATION (Kafka's answer for a topic a broker
    policy rejects), manual assignments included."""
    name = spec.name
    problem = topic_name_error(name)
    if problem:
        raise TopicSpecError(ErrorCode.invalid_topic_exception, problem)
    if name in existing_topics:
        raise TopicSpecError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    try:
        validate_topic_configs(spec.configs or {})
    except ConfigError as exc:
        raise TopicSpecError(ErrorCode.invalid_config, str(exc)) from None
    num_partitions = spec.num_partitions
    replication_factor = spec.replication_factor
    manual = spec.assignments or {}
    if manual:
        if num_partitions != -1 or replication_factor != -1:
            raise TopicSpecError(ErrorCode.invalid_request,
                                 "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                 "Both cannot be used at the same time.")
        assignment = {int(p): list(r) for p, r in manual.items()}
        if sorted(assignment) != list(range(len(assignment))):
            raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                 "Partitions should be a consecutive 0-based integer sequence")
        sizes = {len(r) for r in assignment.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                 "All partitions should have the same number of replicas")
        for p, replicas in assignment.items():
            if len(set(replicas)) != len(replicas):
                raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                     f"Duplicate replica assignment found: {replicas}")
            unknown = [b for b in replicas if b not in live_brokers]
            if unknown:
                raise TopicSpecError(ErrorCode.invalid_replica_assignment,
                                     f"Unknown broker(s) in replica assignment: {unknown}")
    else:
        if num_partitions == -1:
            num_partitions = config["num.partitions"]
        if replication_factor == -1:
            replication_factor = config["default.replication.factor"]
        if num_partitions <= 0:
            raise TopicSpecError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise TopicSpecError(ErrorCode.invalid_replication_factor,
                                 "Replication factor must be larger than 0.")
        if num_partitions > 100_000:
            raise TopicSpecError(ErrorCode.invalid_partitions,
                                 f"Number of partitions {num_partitions} exceeds the limit of 100000")
        known = {b: r for b, r in (racks or {}).items() if r}
        if known and len(known) != len(live_brokers):
            # Kafka's RackAwareMode.Enforced.
            raise TopicSpecError(ErrorCode.unknown_server_error,
                                 "Not all brokers have rack information for replica rack aware assignment.")
        assignment = assign_within_capacity(num_partitions, replication_factor, live_brokers, known, capacity,
                                            internal)
    check_capacity(assignment, capacity, internal)
    configs = {k: str(v) for k, v in (spec.configs or {}).items()}
    return TopicPlan(name, assignment, configs)


def assign_within_capacity(num_partitions: int, replication_factor: int, live_brokers: list[int],
                           racks: dict[int, str], capacity: NodeCapacity | None,
                           internal: bool = False) -> dict[int, list[int]]:
    """Kafka's assignment (rack-aware when every broker has a rack), over the
    brokers with room when capacities are known."""
    def assign(n: int, rf: int, brokers: list[int]) -> dict[int, list[int]]:
        if racks:
            return assign_replicas_rack_aware(n, rf, {b: racks[b] for b in brokers})
        return assign_replicas(n, rf, brokers)

    if capacity is None:
        return assign(num_partitions, replication_factor, list(live_brokers))
    return place_with_room(num_partitions, replication_factor, list(live_brokers), capacity, assign, internal)


def check_capacity(assignment: dict[int, list[int]], capacity: NodeCapacity | None, internal: bool = False) -> None:
    """POLICY_VIOLATION naming the limit when `assignment` overfills a broker."""
    if capacity is None:
        return
    violation = capacity.check(assignment, internal)
    if violation is not None:
        raise TopicSpecError(ErrorCode.policy_violation, violation.message())


def described_configs(configs: dict[str, str], broker: BrokerConfig) -> dict[str, dict[str, Any]]:
    """Every topic config with its value and source, as CreateTopics v5+ returns."""
    out = {}
    for key, definition in TOPIC_CONFIGS.items():
        if key in configs:
            out[key] = {"value": configs[key], "source": SOURCE_TOPIC}
            continue
        value = broker.topic_default(key)
        synonym = definition.broker_synonym
        source = SOURCE_STATIC_BROKER if synonym and broker.is_explicit(synonym) else SOURCE_DEFAULT
        if isinstance(value, list):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = str(value).lower()
        out[key] = {"value": None if value is None else str(value), "source": source}
    return out


# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType ids).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def apply_config_ops(current: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
    """IncrementalAlterConfigs on a topic's overrides; raises TopicSpecError
    (INVALID_CONFIG / INVALID_REQUEST) naming the key, as Kafka does."""
    updated = dict(current)
    seen = set()
    for key, op, value in ops:
        if key in seen:
            raise TopicSpecError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {key}")
        seen.add(key)
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise TopicSpecError(ErrorCode.invalid_config, f"Unknown topic config name: {key}")
        if op == OP_SET:
            updated[key] = value
        elif op == OP_DELETE:
            updated.pop(key, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if definition.type != "list":
                raise TopicSpecError(ErrorCode.invalid_config,
                                     f"Config value append is not allowed for config key: {key}")
            items = [i.strip() for i in (updated.get(key) or "").split(",") if i.strip()]
            if key not in updated:
                default = definition.default or []
                items = list(default) if isinstance(default, list) else []
            change = [i.strip() for i in (value or "").split(",") if i.strip()]
            if op == OP_APPEND:
                items += [i for i in change if i not in items]
            else:
                items = [i for i in items if i not in change]
            updated[key] = ",".join(items)
        else:
            raise TopicSpecError(ErrorCode.invalid_request, f"Unknown config operation {op} for {key}")
    try:
        validate_topic_configs(updated)
    except ConfigError as exc:
        raise TopicSpecError(ErrorCode.invalid_config, str(exc)) from None
    return {k: str(v) for k, v in updated.items()}


# DescribeConfigs config types (Kafka's ConfigEntry.ConfigType ids).
_CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
                 "class": 8, "password": 9}


def describe_topic_config_entries(configs: dict[str, str], broker: BrokerConfig) -> list[dict[str, Any]]:
    """Every topic config: value, source, synonyms (topic > static broker > default),
    type and documentation, as DescribeConfigs answers."""
    entries = []
    for key, definition in sorted(TOPIC_CONFIGS.items()):
        synonyms = []
        if key in configs:
            synonyms.append({"name": key, "value": configs[key], "source": SOURCE_TOPIC})
        synonym = definition.broker_synonym
        if synonym and broker.is_explicit(synonym):
            synonyms.append({"name": synonym, "value": _as_text(broker[synonym]), "source": SOURCE_STATIC_BROKER})
        synonyms.append({"name": synonym or key, "value": _as_text(definition.default), "source": SOURCE_DEFAULT})
        top = synonyms[0]
        value = top["value"] if top["source"] != SOURCE_DEFAULT else _as_text(broker.topic_default(key))
        sensitive = is_sensitive_topic_key(key) or (synonym is not None and is_sensitive_broker_key(synonym))
        entries.append(_masked({"name": key, "value": value, "source": top["source"], "synonyms": synonyms,
                                "read_only": False, "sensitive": sensitive,
                                "type": _CONFIG_TYPES.get(definition.type, 0), "doc": definition.doc or None}))
    return entries


def _masked(entry: dict[str, Any]) -> dict[str, Any]:
    """Kafka's ConfigHelper: a sensitive entry answers null for its value and
    for every synonym's value (the synonyms hold the same secret)."""
    if entry["sensitive"]:
        entry["value"] = None
        entry["synonyms"] = [{**s, "value": None} for s in entry["synonyms"]]
    return entry


def describe_broker_config_entries(broker: BrokerConfig) -> list[dict[str, Any]]:
    """Static broker configs (read-only here: dynamic broker configs are not supported)."""
    from core.config import BROKER_CONFIGS

    entries = []
    for key, definition in sorted(BROKER_CONFIGS.items()):
        explicit = broker.is_explicit(key)
        value = _as_text(broker[key])
        source = SOURCE_STATIC_BROKER if explicit else SOURCE_DEFAULT
        synonyms = [{"name": key, "value": value, "source": source}]
        entries.append(_masked({"name": key, "value": value, "source": source, "synonyms": synonyms,
                                "read_only": True, "sensitive": is_sensitive_broker_key(key),
                                "type": _CONFIG_TYPES.get(definition.type, 0), "doc": definition.doc or None}))
    return entries


def _as_text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    return str(value)
