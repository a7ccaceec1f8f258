"""Broker and topic configuration, with Apache Kafka's key names and defaults.

One table per scope. Each entry knows its type, default and validation, so the
CLI (server.properties / --override / env), CreateTopics validation and later
DescribeConfigs all read the same definitions.
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from core import security_config
from core.config_errors import ConfigError  # noqa: F401  (importers name it core.config.ConfigError)
from core.security_config import SECURITY_KEYS, first_listener, prefixed_base_key


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {raw!r}")


def _parse_int(raw: str) -> int:
    return int(raw.strip())


def _parse_float(raw: str) -> float:
    return float(raw.strip())


def _parse_str(raw: str) -> str:
    return raw.strip()


def _parse_list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


_PARSERS: dict[str, Callable[[str], Any]] = {
    "bool": _parse_bool,
    "int": _parse_int,
    "long": _parse_int,
    "double": _parse_float,
    "string": _parse_str,
    "list": _parse_list,
    "password": _parse_str,
}


@dataclasses.dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # one of _PARSERS
    default: Any
    doc: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    # Broker key whose value is this topic key's default (Kafka's "synonym").
    broker_synonym: str | None = None
    # Accepted for compatibility with existing server.properties files, but
    # has no effect here; a warning is logged when it is set.
    no_effect: bool = False
    # Checks a parsed value beyond min/max/choices (Kafka's ConfigDef.Validator);
    # raises ValueError with the reason.
    validator: Callable[[Any], None] | None = None

    def parse(self, raw: Any) -> Any:
        if raw is None:
            return None
        if not isinstance(raw, str):
            raw = str(raw).lower() if isinstance(raw, bool) else str(raw)
        try:
            value = _PARSERS[self.type](raw)
        except ValueError as exc:
            if self.type == "password":  # never echo a secret into an error message or a log
                raise ConfigError(self.name, f"invalid {self.type} value") from None
            raise ConfigError(self.name, f"invalid {self.type} value {raw!r} ({exc})") from None
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        if value is None:
            return
        if self.min is not None and value < self.min:
            raise ConfigError(self.name, f"value {value} is below the minimum {self.min:g}")
        if self.max is not None and value > self.max:
            raise ConfigError(self.name, f"value {value} is above the maximum {self.max:g}")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if str(item) not in self.choices:
                    raise ConfigError(
                        self.name, f"value {item!r} is not one of {', '.join(self.choices)}"
                    )
        if self.validator is not None:
            try:
                self.validator(value)
            except ValueError as exc:
                # a secret's validator may quote it: never echo it
                raise ConfigError(self.name, "invalid value" if self.type == "password" else str(exc)) from None


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# The replicas import it without this module (core/throttled_replicas.py).
from core.throttled_replicas import validate_throttled_replicas  # noqa: E402,F401


# Kafka's MetadataVersion strings ("0.10.2", "0.11.0-IV2", "2.8", "3.0-IV1",
# "3.9"): what message.format.version and inter.broker.protocol.version take.
# Kafka reads two segments ("2.8.1" is 2.8), three for 0.x.
_KAFKA_VERSION = re.compile(r"(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|1\.[01]|2\.[0-8]|3\.[0-9])(\.\d+)?(-IV\d+)?")


def _validate_migration_policy(value: str) -> None:
    # Kafka's CaseInsensitiveValidString.
    if str(value).lower() not in ("disabled", "upgrade", "downgrade", "bidirectional"):
        raise ValueError(f"value {value!r} is not one of disabled, upgrade, downgrade, bidirectional")


def _validate_kafka_version(value: str) -> None:
    if not _KAFKA_VERSION.fullmatch(value):
        raise ValueError(f"Version `{value}` is not a valid version")


# Kafka 3.9's deprecated keys it still accepts, their value ignored: with an
# inter-broker protocol of 3.0 or later Kafka writes only the v2 record
# format (KIP-724), never down-converts for old fetchers here, and this
# broker speaks no older protocol.
MESSAGE_FORMAT_VERSION_DEFAULT = "3.0-IV1"


def _defs(*items: ConfigDef) -> dict[str, ConfigDef]:
    return {item.name: item for item in items}


BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("broker.id", "int", -1, "Broker id; -1 = from meta.properties or generated via /brokers/seqid", min=-1),
    ConfigDef("broker.rack", "string", None, "Rack of this broker, for rack-aware assignment"),
    ConfigDef("reserved.broker.max.id", "int", 1000, "Generated broker ids start above this", min=0),
    ConfigDef("broker.id.generation.enable", "bool", True),
    ConfigDef("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "Listener the edge binds"),
    ConfigDef("advertised.listeners", "string", None, "Listener clients are told to use (default: listeners)"),
    ConfigDef("listener.security.protocol.map", "string", None,
              "NAME:PROTOCOL per listener (unset: Kafka's default, each protocol named after itself)"),
    ConfigDef("log.dirs", "list", None, "Log directories (default: <data-dir>/logs)"),
    ConfigDef("log.dir", "string", None, "Single log directory (used when log.dirs is unset)"),
    ConfigDef("num.partitions", "int", 1, min=1),
    ConfigDef("default.replication.factor", "int", 1, min=1),
    ConfigDef("auto.create.topics.enable", "bool", True),
    ConfigDef("delete.topic.enable", "bool", True),
    ConfigDef("zookeeper.connect", "string", None, "ZooKeeper connect string; unset = start an embedded ZooKeeper"),
    ConfigDef("zookeeper.session.timeout.ms", "int", 18000, min=1000),
    ConfigDef("zookeeper.connection.timeout.ms", "int", None, min=1),
    # ZooKeeper security (metadata/zk_security.py). The embedded ZooKeeper
    # always uses generated digest credentials and these ACLs.
    ConfigDef("zookeeper.set.acl", "bool", False,
              "Create znodes with Kafka's ACLs: all rights to the brokers' identity, read for others "
              "(none on /config/users and /config/brokers)"),
    ConfigDef("raykafka.zookeeper.digest.file", "string", None,
              "File holding user:password, sent to ZooKeeper with its digest scheme (addauth); "
              "embedded ZooKeeper: generated under <data-dir>/zookeeper at first start"),
    ConfigDef("zookeeper.ssl.client.enable", "bool", False, "TLS to ZooKeeper's secure client port"),
    ConfigDef("zookeeper.ssl.keystore.location", "string", None,
              "PEM file: client certificate chain and private key"),
    ConfigDef("zookeeper.ssl.keystore.password", "password", None, "Password of the PEM private key"),
    ConfigDef("zookeeper.ssl.keystore.type", "string", None, "PEM only", choices=("PEM",)),
    ConfigDef("zookeeper.ssl.truststore.location", "string", None,
              "PEM file: trusted CA certificates (unset: the system's)"),
    ConfigDef("zookeeper.ssl.truststore.password", "password", None, "Not used with PEM (an error if set)"),
    ConfigDef("zookeeper.ssl.truststore.type", "string", None, "PEM only", choices=("PEM",)),
    ConfigDef("zookeeper.ssl.endpoint.identification.algorithm", "string", "HTTPS",
              "HTTPS: check ZooKeeper's hostname against its certificate; empty: don't"),
    ConfigDef("log.segment.bytes", "int", 1073741824, min=14),
    ConfigDef("log.roll.ms", "long", None, min=1),
    ConfigDef("log.roll.hours", "int", 168, min=1),
    ConfigDef("log.roll.jitter.ms", "long", None, min=0),
    ConfigDef("log.roll.jitter.hours", "int", 0, min=0),
    ConfigDef("log.index.size.max.bytes", "int", 10485760, min=4),
    ConfigDef("log.index.interval.bytes", "int", 4096, min=0),
    ConfigDef("log.flush.interval.messages", "long", INT64_MAX, min=1),
    ConfigDef("log.flush.interval.ms", "long", None, min=0),
    ConfigDef("log.retention.hours", "int", 168),
    ConfigDef("log.retention.minutes", "int", None),
    ConfigDef("log.retention.ms", "long", None),
    ConfigDef("log.retention.bytes", "long", -1),
    ConfigDef("log.retention.check.interval.ms", "long", 300000, min=1),
    ConfigDef("log.cleanup.policy", "list", ["delete"], choices=("delete", "compact")),
    ConfigDef("log.cleaner.enable", "bool", True),
    ConfigDef("log.cleaner.backoff.ms", "long", 15000, min=0),
    ConfigDef("log.cleaner.delete.retention.ms", "long", 86400000, min=0),
    ConfigDef("log.cleaner.min.compaction.lag.ms", "long", 0, min=0),
    ConfigDef("log.cleaner.max.compaction.lag.ms", "long", INT64_MAX, min=1),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5, min=0, max=1),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", 134217728, min=1024 * 1024),
    ConfigDef("log.segment.delete.delay.ms", "long", 60000, min=0),
    ConfigDef("log.message.timestamp.type", "string", "CreateTime", choices=("CreateTime", "LogAppendTime")),
    # Deprecated in Kafka 3.x and still accepted by 3.9 (see MESSAGE_FORMAT_VERSION_DEFAULT).
    ConfigDef("log.message.format.version", "string", MESSAGE_FORMAT_VERSION_DEFAULT,
              "Deprecated (Kafka 3.0); accepted, ignored: batches are always v2", no_effect=True,
              validator=_validate_kafka_version),
    ConfigDef("inter.broker.protocol.version", "string", "3.9-IV0",
              "Brokers talk through Ray here; accepted for server.properties compatibility", no_effect=True,
              validator=_validate_kafka_version),
    ConfigDef("log.message.timestamp.difference.max.ms", "long", INT64_MAX, min=0, no_effect=True),
    ConfigDef("log.message.timestamp.before.max.ms", "long", INT64_MAX, min=0, no_effect=True),
    ConfigDef("log.message.timestamp.after.max.ms", "long", INT64_MAX, min=0, no_effect=True),
    ConfigDef("log.message.downconversion.enable", "bool", True, no_effect=True),
    ConfigDef("log.preallocate", "bool", False, no_effect=True),
    ConfigDef("compression.type", "string", "producer", choices=_COMPRESSION),
    ConfigDef("message.max.bytes", "int", 1048588, min=0),
    ConfigDef("min.insync.replicas", "int", 1, min=1),
    ConfigDef("unclean.leader.election.enable", "bool", False),
    ConfigDef("replica.lag.time.max.ms", "long", 30000, min=1),
    ConfigDef("producer.id.expiration.ms", "int", 86400000,
              "How long a producer id's state is kept in a partition after its last write", min=1),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, min=0),
    ConfigDef("fetch.max.bytes", "int", 57671680,
              "Most bytes one Fetch response returns (the request's max_bytes is cut to it); the first batch of "
              "the first non-empty partition is returned whole even when larger (KIP-74)", min=1024),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500, min=0),
    ConfigDef("replica.fetch.backoff.ms", "int", 1000, min=0),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000, min=0),
    ConfigDef("min.incremental.fetch.session.eviction.ms", "int", 120000, min=0),
    ConfigDef("socket.request.max.bytes", "int", 104857600, min=1),
    ConfigDef("socket.send.buffer.bytes", "int", 102400, no_effect=True),
    ConfigDef("socket.receive.buffer.bytes", "int", 102400, no_effect=True),
    ConfigDef("num.network.threads", "int", 3, no_effect=True),
    ConfigDef("num.io.threads", "int", 8, no_effect=True),
    ConfigDef("num.recovery.threads.per.data.dir", "int", 1, no_effect=True),
    ConfigDef("queued.max.requests", "int", 500, "Requests in flight per connection before reading pauses", min=1),
    ConfigDef("queued.max.request.bytes", "long", 512 * 1024 * 1024,
              "Request bytes held by the edge across all connections before reading pauses", min=1024),
    ConfigDef("connections.max.idle.ms", "long", 600000, min=1),
    ConfigDef("max.connections", "int", 10000, min=1),
    # ---- consumer groups (group coordinator, __consumer_offsets) -------------------------------
    # offsets.topic.num.partitions: Kafka's default is 50. Here every partition
    # is a replica actor process (~90 MB) per replica plus a group-coordinator
    # actor process on its leader, so 50 would mean ~100 processes (~9 GB) on a
    # single broker before the first group commits anything. 3 gives one
    # coordinator per broker on a 3-node cluster and ~0.5 GB on a single node.
    # As in Kafka, it cannot change once the topic exists (groups hash to it).
    ConfigDef("offsets.topic.num.partitions", "int", 3,
              "Partitions of __consumer_offsets (Kafka: 50; see the comment above)", min=1),
    # Kafka's default (3). Kafka refuses to create the topic (FindCoordinator
    # answers COORDINATOR_NOT_AVAILABLE) while fewer brokers are alive; here it
    # is capped at the live broker count (Kafka's behaviour before KIP-115), so
    # a single-node `raykafka start` serves groups out of the box. The cap is
    # logged; set it explicitly on multi-node clusters started one by one.
    ConfigDef("offsets.topic.replication.factor", "int", 3,
              "Replication factor of __consumer_offsets, capped at the live brokers", min=1),
    ConfigDef("offsets.topic.segment.bytes", "int", 104857600, min=1),
    ConfigDef("offsets.topic.compression.codec", "int", 0, no_effect=True),
    ConfigDef("offsets.load.buffer.size", "int", 5242880, "Bytes read per step while loading a coordinator",
              min=1),
    ConfigDef("offsets.commit.timeout.ms", "int", 5000,
              "How long a commit waits for the offsets partition's HW (acks=-1)", min=1),
    ConfigDef("offsets.commit.required.acks", "int", -1, no_effect=True),
    ConfigDef("offsets.retention.minutes", "int", 10080, min=1),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600000, min=1),
    ConfigDef("offset.metadata.max.bytes", "int", 4096, min=0),
    ConfigDef("group.min.session.timeout.ms", "int", 6000, min=0),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000, min=0),
    ConfigDef("group.max.size", "int", INT32_MAX, min=1),
    # ---- KIP-848 consumer groups (cluster/groups/consumer) ------------------------------------------
    ConfigDef("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"],
              "Group protocols served (Kafka 4.0: classic and consumer)", no_effect=True),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000,
              "The heartbeat interval given to consumer-protocol members", min=1),
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000,
              "A consumer-protocol member without a heartbeat this long is fenced", min=1),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", "int", 5000, min=1, no_effect=True),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", "int", 15000, min=1, no_effect=True),
    ConfigDef("group.consumer.min.session.timeout.ms", "int", 45000, min=1, no_effect=True),
    ConfigDef("group.consumer.max.session.timeout.ms", "int", 60000, min=1, no_effect=True),
    ConfigDef("group.consumer.max.size", "int", INT32_MAX, "Most members of a consumer group", min=1),
    ConfigDef("group.consumer.assignors", "list", ["uniform", "range"],
              "Server-side assignors of consumer groups; the first is the default"),
    ConfigDef("group.consumer.migration.policy", "string", "bidirectional",
              "Online migration between classic and consumer groups (Kafka 4.0's default; any case, as Kafka)",
              validator=_validate_migration_policy),
    # ---- transactions (transaction coordinator, __transaction_state) -----------------------------
    # As for __consumer_offsets, every partition is a replica actor plus a
    # coordinator actor on its leader; the topic is created on the first
    # FindCoordinator(TRANSACTION) / transactional InitProducerId. The
    # replication factor is capped at the live brokers like the offsets topic's.
    # Kafka's default is 50; 3 here for the reason given for
    # offsets.topic.num.partitions (50 would start ~100 actor processes, ~5 GB,
    # on a single node at the first transactional producer).
    ConfigDef("transaction.state.log.num.partitions", "int", 3,
              "Partitions of __transaction_state (Kafka: 50; see the comment above)", min=1),
    ConfigDef("transaction.state.log.replication.factor", "int", 3,
              "Replication factor of __transaction_state, capped at the live brokers", min=1),
    ConfigDef("transaction.state.log.min.isr", "int", 2, min=1),
    ConfigDef("transaction.state.log.segment.bytes", "int", 104857600, min=1),
    ConfigDef("transaction.state.log.load.buffer.size", "int", 5242880, min=1),
    ConfigDef("transaction.max.timeout.ms", "int", 900000, min=1),
    ConfigDef("transaction.partition.verification.enable", "bool", True,
              "KIP-890: the leader asks the transaction coordinator whether a transactional batch's "
              "partition is in its producer's ongoing transaction before appending it"),
    ConfigDef("transactional.id.expiration.ms", "int", 604800000, min=1),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, min=1),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, min=1),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000, min=0),
    ConfigDef("controlled.shutdown.enable", "bool", True),
    ConfigDef("controlled.shutdown.max.retries", "int", 3,
              "Attempts at a controlled shutdown before the broker stops uncleanly"),
    ConfigDef("controlled.shutdown.retry.backoff.ms", "long", 5000,
              "Wait between controlled shutdown attempts"),
    # ---- leader balance (controller) ------------------------------------------------------------
    ConfigDef("auto.leader.rebalance.enable", "bool", True,
              "Move leadership back to preferred replicas when a broker's imbalance passes the threshold"),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", 10,
              "Percent of a broker's partitions led by others above which the controller rebalances"),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", 300, "How often the controller checks", min=1),
    # ---- the balancer (issue 31; cluster/controller/balancer.py, README "Scaling out") --------------
    ConfigDef("raykafka.balancer.enabled", "bool", True,
              "Move replicas onto a node that joins and off a node lost for good (through reassignments)"),
    ConfigDef("raykafka.balancer.max.concurrent.moves", "int", 2,
              "Replica moves the balancer keeps in flight at once (each copies one partition's log)", min=1),
    ConfigDef("raykafka.balancer.throttle.bytes.per.sec", "long", 10 * 1024 * 1024,
              "Replication throttle (leader and follower rate) on each replica a balancer move copies", min=1),
    ConfigDef("raykafka.balancer.imbalance.threshold", "double", 0.1,
              "Balance when a live node's replica or preferred-leader count deviates from the mean by more "
              "than this fraction (and by more than one)", min=0),
    ConfigDef("raykafka.balancer.check.interval.ms", "long", 5000,
              "How often the balancer checks for lost nodes and starts its next moves", min=100),
    # Five minutes: longer than a node restart (Ray node, broker, replicas: ~1-2 min
    # here), so a reboot or a rolling upgrade does not copy every log it held;
    # shorter than Redpanda's 15 min default, because a lost node's partitions run
    # under-replicated (one more failure from offline) until healed.
    ConfigDef("raykafka.self.healing.delay.ms", "long", 300_000,
              "A broker absent this long is given up on: its replicas are re-created on live nodes", min=0),
    # ---- replication quotas (KIP-73) -------------------------------------------------------------
    # Kafka sets the two rates dynamically (/config/brokers/<id>); a value here is
    # this broker's static default. They apply only to the replicas listed in a
    # topic's leader/follower.replication.throttled.replicas.
    ConfigDef("leader.replication.throttled.rate", "long", INT64_MAX,
              "Bytes/s a leader serves to lagging throttled replicas", min=0),
    ConfigDef("follower.replication.throttled.rate", "long", INT64_MAX,
              "Bytes/s a follower fetches for its lagging throttled replicas", min=0),
    ConfigDef("replication.quota.window.num", "int", 11, "Samples kept for the replication quota rate", min=1),
    ConfigDef("replication.quota.window.size.seconds", "int", 1, "Span of one replication quota sample",
              min=1),
    # ---- client quotas (KIP-13): the rate a quota bounds is measured over these samples -------------
    ConfigDef("quota.window.num", "int", 11, "Samples kept for client quota rates", min=1),
    ConfigDef("quota.window.size.seconds", "int", 1, "Span of one client quota sample", min=1),
    # raykafka's own keys (no Kafka equivalent)
    ConfigDef("raykafka.namespace", "string", "raykafka", "Ray namespace holding this cluster's named actors"),
    ConfigDef("raykafka.actor.call.timeout.ms", "int", 30000, "Bound on every cross-actor await", min=1),
    ConfigDef("raykafka.edge.max.inflight.bytes", "long", 256 * 1024 * 1024,
              "Bytes of requests in flight per connection before reading pauses", min=1024),
    ConfigDef("raykafka.fetch.read.ahead", "int", 3,
              "Consecutive reads a consumer fetch asks its leader replica for beyond the one it answers; "
              "the edge serves the client's next fetches from them without a call each (0: off)",
              min=0, max=15),
    ConfigDef("raykafka.fetch.local.tail.wait.ms", "int", 50,
              "How long a consumer fetch at the tail waits on the edge for the edge's own next append "
              "to the partition before parking in the leader replica; answers from local appends save "
              "the replica call (0: off, and no tail answers at all)", min=0, max=1000),
    ConfigDef("raykafka.fetch.read.ahead.ttl.ms", "int", 500,
              "How long the edge keeps read-ahead answers; bounds how stale a served high watermark "
              "or log start offset can be", min=1),
    ConfigDef("raykafka.local.calls", "bool", True,
              "Per-request calls between actors of one node (edge -> leader replica: appends, consumer "
              "reads, offset lookups; edge -> purgatory: parked fetches and acks=all produces; replica "
              "-> purgatory: progress; edge -> group coordinator: group requests; coordinator -> "
              "offsets replica and purgatory: commits) go over a Unix socket the callee opens, instead "
              "of Ray's task path (~0.15 vs ~1.3 ms of CPU per side); false: every call through Ray"),
    # Every replica is a process (~48 MiB PSS, ~1.1% of a core idle): a node
    # that hosts too many stops serving (issue 18). Unset: computed at start
    # from the node's cores and memory (cluster/capacity.py,
    # default_replicas_per_node; 90 on a 2-core 24 GiB machine). Each broker
    # publishes its value in /brokers/ids/<id>; the controller refuses
    # CreateTopics/CreatePartitions/auto-creation beyond it (POLICY_VIOLATION).
    ConfigDef("raykafka.replicas.per.node.max", "int", None,
              "Partition replicas (Ray actors) this broker's node may host; creations beyond it are refused "
              "with POLICY_VIOLATION. Unset: min(cores * 0.5 / 0.011, memory * 0.5 / 48 MiB)", min=1),
    # Idle replicas hibernate (issue 30, cluster/replica_pool.py): with it on,
    # raykafka.replicas.per.node.max bounds the live replica actors (the
    # least recently used idle one is hibernated when a wake would pass it),
    # and the hosted limit below bounds the partitions a node holds.
    # On by default at 60000 (cluster/replica_pool.py: the ski-rental break-even);
    # 0 turns it off.
    ConfigDef("raykafka.replica.hibernate.ms", "int", 60_000,
              "A non-internal replica (an RF=1 leader; with raykafka.replica.hibernate.replicated, an RF > 1 "
              "set, all its replicas together) with no request for this long checkpoints and ends its actor; "
              "the next request wakes it (same name, log, epoch). Default 60000: a "
              "wake costs about as much CPU as 40-60 s of an idle live replica (cluster/replica_pool.py). "
              "0: replicas never hibernate (every replica a live actor, as before)", min=0),
    # RF > 1 (issue 30): the whole replica set hibernates together once every
    # ISR member is caught up (HW = LEO), and the leader's wake wakes its
    # followers. On by default; it needs raykafka.replica.hibernate.ms > 0 too.
    ConfigDef("raykafka.replica.hibernate.replicated", "bool", True,
              "With raykafka.replica.hibernate.ms > 0: replicated (RF > 1), non-internal partitions hibernate "
              "too, the whole replica set at once when every ISR member has caught up (HW = LEO); the first "
              "request that needs the leader wakes it and it wakes its followers. false: only RF=1 leaders "
              "hibernate"),
    # A wake that starts a process waits ~0.6 s quiet and seconds under load; a spare
    # (a started replica actor with nothing open) takes a partition in one call.
    ConfigDef("raykafka.replica.spares", "int", 4,
              "With hibernation on: started, empty replica actors a node keeps for wakes to adopt (each "
              "costs what an idle live replica does, and takes a slot of raykafka.replicas.per.node.max); "
              "0: every wake starts a process", min=0, max=64),
    ConfigDef("raykafka.partitions.per.node.max", "int", None,
              "Partition replicas this broker's node may host (live or hibernated) when replicas hibernate; "
              "creations beyond it are refused with POLICY_VIOLATION. Unset: min(open-file limit / 2, "
              "free log-dir space / 2 / 1 MiB) (cluster/capacity.py, default_partitions_per_node)", min=1),
    ConfigDef("raykafka.edge.processes", "int", 1,
              "Edge actors (Kafka listener processes) per node; above 1 they share the listener port "
              "with SO_REUSEPORT and the kernel spreads new connections across them", min=1, max=16),
    # Metrics (core/metrics.py): recorded in process-local counters, handed
    # to Ray's metrics API in the background, served by Ray's per-node
    # Prometheus endpoint.
    ConfigDef("raykafka.metrics.enabled", "bool", True,
              "Record the broker's metrics (Kafka's names, README 'Metrics'); false: record nothing"),
    ConfigDef("raykafka.metrics.port", "int", 0,
              "Port of Ray's per-node Prometheus endpoint on a cluster raykafka starts (0: Ray's choice; "
              "with --nodes each further node takes the next port)", min=0, max=65535),
    ConfigDef("raykafka.metrics.report.interval.ms", "int", 5000,
              "How often each broker process hands its local metrics to Ray, and the edge samples "
              "partition and group state", min=100),
)

# Listener and security keys (issue 21), defined in core/security_config.py.
BROKER_CONFIGS.update(_defs(*(ConfigDef(name, kind, default, doc, **extra)
                              for name, kind, default, doc, extra in SECURITY_KEYS)))
# Authorization (issue 21 part 4): Kafka's ZooKeeper-mode AclAuthorizer, cluster/security/.
BROKER_CONFIGS.update(_defs(
    ConfigDef("authorizer.class.name", "string", "", "Authorizer; empty: every request is allowed",
              choices=("", "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")),
    ConfigDef("super.users", "string", None, "Principals allowed everything, semicolon-separated (User:admin;User:ops)"),
    ConfigDef("allow.everyone.if.no.acl.found", "bool", False, "Allow a resource that has no ACL to everyone"),
))


def is_sensitive_broker_key(key: str) -> bool:
    """Kafka's KafkaConfig.maybeSensitive: a password, or a key whose type is
    unknown (it may hold one). Listener-prefixed keys take their base key's type
    (listener.name.sasl_ssl.plain.sasl.jaas.config is as secret as sasl.jaas.config)."""
    definition = _broker_def(key)
    return definition is None or definition.type == "password"


def is_sensitive_topic_key(key: str) -> bool:
    """The same rule for topic configs (none of Kafka's is a password; an unknown key may be)."""
    definition = TOPIC_CONFIGS.get(key)
    return definition is None or definition.type == "password"


def _broker_def(key: str) -> ConfigDef | None:
    """The definition of a broker key, including listener.name.<l>.-prefixed security keys."""
    definition = BROKER_CONFIGS.get(key)
    if definition is None:
        base = prefixed_base_key(key)
        if base is not None:
            definition = dataclasses.replace(BROKER_CONFIGS[base], name=key, default=None)
    return definition


TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("cleanup.policy", "list", ["delete"], choices=("delete", "compact"), broker_synonym="log.cleanup.policy"),
    ConfigDef("compression.type", "string", "producer", choices=_COMPRESSION, broker_synonym="compression.type"),
    ConfigDef("delete.retention.ms", "long", 86400000, min=0, broker_synonym="log.cleaner.delete.retention.ms"),
    ConfigDef("file.delete.delay.ms", "long", 60000, min=0, broker_synonym="log.segment.delete.delay.ms"),
    ConfigDef("flush.messages", "long", INT64_MAX, min=1, broker_synonym="log.flush.interval.messages"),
    ConfigDef("flush.ms", "long", INT64_MAX, min=0, broker_synonym="log.flush.interval.ms"),
    ConfigDef("index.interval.bytes", "int", 4096, min=0, broker_synonym="log.index.interval.bytes"),
    ConfigDef("max.compaction.lag.ms", "long", INT64_MAX, min=1, broker_synonym="log.cleaner.max.compaction.lag.ms"),
    ConfigDef("max.message.bytes", "int", 1048588, min=0, broker_synonym="message.max.bytes"),
    ConfigDef("message.timestamp.type", "string", "CreateTime", choices=("CreateTime", "LogAppendTime"),
              broker_synonym="log.message.timestamp.type"),
    ConfigDef("message.timestamp.before.max.ms", "long", INT64_MAX, min=0,
              broker_synonym="log.message.timestamp.before.max.ms"),
    ConfigDef("message.timestamp.after.max.ms", "long", INT64_MAX, min=0,
              broker_synonym="log.message.timestamp.after.max.ms"),
    # Deprecated (Kafka 3.6, KIP-937) and still accepted by 3.9.
    ConfigDef("message.timestamp.difference.max.ms", "long", INT64_MAX, min=0,
              broker_synonym="log.message.timestamp.difference.max.ms"),
    ConfigDef("message.downconversion.enable", "bool", True, no_effect=True,
              broker_synonym="log.message.downconversion.enable"),
    # Deprecated (Kafka 3.0, KIP-724) and still accepted by 3.9: validated
    # as a version, stored and described, its value ignored.
    ConfigDef("message.format.version", "string", MESSAGE_FORMAT_VERSION_DEFAULT, no_effect=True,
              validator=_validate_kafka_version, broker_synonym="log.message.format.version"),
    ConfigDef("min.cleanable.dirty.ratio", "double", 0.5, min=0, max=1, broker_synonym="log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.compaction.lag.ms", "long", 0, min=0, broker_synonym="log.cleaner.min.compaction.lag.ms"),
    ConfigDef("min.insync.replicas", "int", 1, min=1, broker_synonym="min.insync.replicas"),
    ConfigDef("preallocate", "bool", False, no_effect=True, broker_synonym="log.preallocate"),
    ConfigDef("retention.bytes", "long", -1, broker_synonym="log.retention.bytes"),
    ConfigDef("retention.ms", "long", 604800000, min=-1, broker_synonym="log.retention.ms"),
    ConfigDef("segment.bytes", "int", 1073741824, min=14, broker_synonym="log.segment.bytes"),
    ConfigDef("segment.index.bytes", "int", 10485760, min=4, broker_synonym="log.index.size.max.bytes"),
    ConfigDef("segment.jitter.ms", "long", 0, min=0, broker_synonym="log.roll.jitter.ms"),
    ConfigDef("segment.ms", "long", 604800000, min=1, broker_synonym="log.roll.ms"),
    ConfigDef("unclean.leader.election.enable", "bool", False, broker_synonym="unclean.leader.election.enable"),
    # Replicas held to the leader's / follower's replication.throttled.rate while
    # they lag: "partitionId:brokerId,..." or "*" (all replicas of the topic).
    ConfigDef("leader.replication.throttled.replicas", "list", [], validator=validate_throttled_replicas),
    ConfigDef("follower.replication.throttled.replicas", "list", [], validator=validate_throttled_replicas),
)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text (the subset server.properties files use)."""
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            result[line] = ""
        else:
            result[match.group(1)] = match.group(2)
    return result


ENV_PREFIX = "RAYKAFKA_"


def env_overrides(environ: Mapping[str, str], defs: Mapping[str, ConfigDef] = BROKER_CONFIGS) -> dict[str, str]:
    """RAYKAFKA_LOG_SEGMENT_BYTES=... overrides log.segment.bytes, and so on."""
    by_env_name = {ENV_PREFIX + name.upper().replace(".", "_"): name for name in defs}
    return {by_env_name[key]: value for key, value in environ.items() if key in by_env_name}


class BrokerConfig:
    """Validated broker configuration: Kafka key -> typed value. Remembers which
    keys were set explicitly (DescribeConfigs reports them as STATIC_BROKER_CONFIG)."""

    def __init__(self, values: Mapping[str, Any], explicit: frozenset[str] | set[str] = frozenset()):
        if isinstance(values, BrokerConfig):
            explicit = set(values._explicit) | set(explicit)
            values = values._values
        self._values = dict(values)
        self._explicit = set(explicit)

    def with_values(self, changes: Mapping[str, Any]) -> "BrokerConfig":
        """A copy with some values replaced (e.g. one node's listener)."""
        return BrokerConfig({**self._values, **changes}, self._explicit | set(changes))

    @classmethod
    def from_sources(
        cls,
        properties: Mapping[str, str] | None = None,
        overrides: Iterable[tuple[str, str]] = (),
        environ: Mapping[str, str] | None = None,
    ) -> "BrokerConfig":
        """Merge, lowest precedence first: defaults, properties file, env, --override."""
        raw: dict[str, str] = {}
        for source in (properties or {}, env_overrides(environ or {}), dict(overrides)):
            for key, value in source.items():
                if _broker_def(key) is None:
                    raise ConfigError(key, "unknown broker configuration key")
                raw[key] = value
        values = {name: d.default for name, d in BROKER_CONFIGS.items()}
        for key, value in raw.items():
            values[key] = _broker_def(key).parse(value)
        config = cls(values, set(raw))
        config._validate_cross_keys()
        return config

    def _validate_cross_keys(self) -> None:
        security_config.validate(self)  # listeners, protocol map, TLS stores, SASL mechanisms
        if self["socket.request.max.bytes"] < self["message.max.bytes"]:
            # A produce request carrying one maximal batch must fit in a frame.
            raise ConfigError("socket.request.max.bytes", "must be at least message.max.bytes")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        value = self._values.get(key)
        return default if value is None else value

    def is_explicit(self, key: str) -> bool:
        return key in self._explicit

    def no_effect_keys_set(self) -> list[str]:
        return sorted(k for k in self._explicit if k in BROKER_CONFIGS and BROKER_CONFIGS[k].no_effect)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def log_dirs(self, data_dir: Path) -> list[Path]:
        if self._values.get("log.dirs"):
            return [Path(p) for p in self._values["log.dirs"]]
        if self._values.get("log.dir"):
            return [Path(self._values["log.dir"])]
        return [data_dir / "logs"]

    def roll_ms(self) -> int:
        if self._values.get("log.roll.ms") is not None:
            return self._values["log.roll.ms"]
        return self._values["log.roll.hours"] * 3600 * 1000

    def retention_ms(self) -> int:
        if self._values.get("log.retention.ms") is not None:
            return self._values["log.retention.ms"]
        if self._values.get("log.retention.minutes") is not None:
            return self._values["log.retention.minutes"] * 60 * 1000
        return self._values["log.retention.hours"] * 3600 * 1000

    def topic_default(self, topic_key: str) -> Any:
        """Default of a topic config on this broker (Kafka's broker synonym rule)."""
        definition = TOPIC_CONFIGS[topic_key]
        if topic_key == "segment.ms":
            return self.roll_ms()
        if topic_key == "retention.ms":
            return self.retention_ms()
        if definition.broker_synonym and self._values.get(definition.broker_synonym) is not None:
            return self._values[definition.broker_synonym]
        return definition.default


@dataclasses.dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listener(value: str, key: str = "listeners") -> Listener:
    """The first NAME://host:port of a listeners value (all of them:
    core/security_config.listener_specs)."""
    return Listener(*first_listener(value, key))


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Validate CreateTopics/AlterConfigs entries; raise ConfigError naming the key."""
    parsed = {}
    for key, value in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigError(key, "unknown topic config")
        if value is None:
            raise ConfigError(key, "null value")
        parsed[key] = definition.parse(value)
    return parsed


def load_properties_file(path: str | os.PathLike) -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from None
    return parse_properties(text)
