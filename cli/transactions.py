"""`raykafka transactions`: Kafka's kafka-transactions.sh (same subcommands,
options, columns and hanging-transaction logic), over the Kafka protocol, so
it works against any broker serving the APIs below.

    raykafka transactions [--bootstrap-server H:P] [--command-config FILE] COMMAND ...
      list               [--duration-filter MS]                       ListTransactions (66), every broker
      describe           --transactional-id ID                        FindCoordinator (10, type 1) +
                                                                      DescribeTransactions (65)
      describe-producers --topic T --partition P [--broker-id B]      DescribeProducers (61)
      find-hanging       (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MIN]
      abort              --topic T --partition P (--start-offset O |
                         --producer-id I --producer-epoch E --coordinator-epoch C)   WriteTxnMarkers (27)

--bootstrap-server and --command-config are taken before or after COMMAND.

find-hanging is Kafka's algorithm: the producers of the partitions searched
(those with a replica on --broker-id, or --topic's) with an open transaction
(a CurrentTransactionStartOffset) whose last write is older than
--max-transaction-timeout minutes (default 15) are candidates; ListTransactions
filtered by their producer ids names their transactional ids, and
DescribeTransactions tells which partitions each coordinator still expects to
write a marker to. A candidate is hanging when no coordinator lists its
producer id, its transactional id is unknown, or its partition is not among
the transaction's partitions. `abort` then writes the ABORT marker itself, to
the partition's leader, with the producer's id, epoch and latest coordinator
epoch (0 when it has none), as Kafka's AdminClient.abortTransaction does.

Output: Kafka's tables (each column padded to its widest value, a tab after
each). Exit status: 0 done; 1 the broker refused or could not be reached, or
no open transaction starts at --start-offset; 2 usage error.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Optional

from core.error_codes import ErrorCode

from cli.admin_client import AdminClient, AdminError, BrokerConnection, ClusterMetadata, Outcome
from net.codec import request_schema
from net.schema_build import build, nested
from storage.byte_reader import ByteReader

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

FIND_COORDINATOR = 10
WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
API_NAMES = {FIND_COORDINATOR: "FindCoordinator", WRITE_TXN_MARKERS: "WriteTxnMarkers",
             DESCRIBE_PRODUCERS: "DescribeProducers", DESCRIBE_TRANSACTIONS: "DescribeTransactions",
             LIST_TRANSACTIONS: "ListTransactions"}
# The versions this tool builds and reads. FindCoordinator v4+ asks for a batch
# of keys; ListTransactions v1 adds the duration filter.
TXN_VERSIONS: dict[int, tuple[int, int]] = {
    FIND_COORDINATOR: (1, 6),
    WRITE_TXN_MARKERS: (1, 1),
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
}
COORDINATOR_TRANSACTION = 1  # FindCoordinator key type
MAX_BATCH_SIZE = 500  # partitions per DescribeProducers request, as Kafka's tool
RETRY_BACKOFF_S = 0.1
# Errors after which Kafka's AdminClient looks the leader / coordinator up again and retries.
RETRY_LEADER = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch}
RETRY_COORDINATOR = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                     ErrorCode.coordinator_load_in_progress}

TopicPartition = tuple[str, int]

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"]
PRODUCERS_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset"]
HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]


class TransactionsError(AdminError):
    """The command cannot go on; the message is what Kafka's tool would print."""


class UsageError(Exception):
    pass


# ---- results as plain values ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclasses.dataclass(frozen=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: Optional[int]  # None: no transaction open
    partitions: tuple[TopicPartition, ...]


@dataclasses.dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: Optional[int]  # None: no marker written for it yet (-1 on the wire)
    current_txn_start_offset: Optional[int]  # None: no transaction open (-1 on the wire)


@dataclasses.dataclass(frozen=True)
class AbortSpec:
    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __str__(self) -> str:  # Kafka's AbortTransactionSpec.toString
        return (f"AbortTransactionSpec(topicPartition={tp_text(self.partition)}, producerId={self.producer_id}, "
                f"producerEpoch={self.producer_epoch}, coordinatorEpoch={self.coordinator_epoch})")


def tp_text(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _error_text(code, message: Optional[str] = None) -> str:
    return Outcome(ErrorCode(code), message).text()


@dataclasses.dataclass(frozen=True)
class _RawTransactionState:
    error_code: ErrorCode
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


def decode_describe_transactions(frame: bytes) -> tuple[int, list[_RawTransactionState]]:
    """(correlation id, states) of a DescribeTransactions v0 response. Read here rather than by kio:
    a transactional id with no transaction open has TransactionStartTimeMs -1, which kio refuses to
    read as a timestamp."""
    r = ByteReader(frame)
    correlation_id = r.int32()
    r.skip_tagged_fields()  # response header v1
    r.int32()  # throttle time

    def text() -> Optional[str]:
        return r.string(nullable=True, compact=True)

    def topic() -> list[TopicPartition]:
        name = text()
        partitions = r.array(r.int32)
        r.skip_tagged_fields()
        return [(name, p) for p in partitions]

    def state() -> _RawTransactionState:
        error, tid, name = ErrorCode(r.int16()), text(), text()
        timeout_ms, start_ms, producer_id, epoch = r.int32(), r.int64(), r.int64(), r.int16()
        partitions = tuple(sorted(tp for t in r.array(topic) for tp in t))
        r.skip_tagged_fields()
        return _RawTransactionState(error, tid, name, timeout_ms, start_ms, producer_id, epoch, partitions)

    states = r.array(state)
    return correlation_id, states


# ---- the client -------------------------------------------------------------------------------------------------
def txn_version(conn: BrokerConnection, api_key: int) -> int:
    """The highest version of a transaction API both the broker and this tool speak."""
    offered = conn.api_versions.get(api_key)
    low, high = TXN_VERSIONS[api_key]
    if offered is None or offered[1] < low or offered[0] > high:
        name = API_NAMES[api_key]
        if offered is None:
            text = f"the broker at {conn.address} does not support {name} (api key {api_key})"
        else:
            text = (f"the broker at {conn.address} serves {name} v{offered[0]}-{offered[1]}, "
                    f"this tool speaks v{low}-{high}")
        raise TransactionsError(f"UNSUPPORTED_VERSION: {text}")
    return min(high, offered[1])


class TxnConnection(BrokerConnection):
    """admin_client's connection, speaking the transaction APIs at this tool's versions."""

    def version_for(self, api_key: int) -> int:
        return txn_version(self, api_key) if api_key in TXN_VERSIONS else super().version_for(api_key)


class TransactionsClient:
    """Metadata through admin_client's AdminClient; one TxnConnection per broker asked."""

    def __init__(self, bootstrap: str, request_timeout_s: float = 30.0, api_timeout_s: float = 60.0,
                 client_id: str = "raykafka-transactions", security=None):
        self.request_timeout_s = request_timeout_s
        self.api_timeout_s = api_timeout_s
        self.client_id = client_id
        self.security = security  # --command-config's TLS / SASL (cli/client_security.py)
        self.admin = AdminClient(bootstrap, request_timeout_s, client_id, security)
        self.connections: dict[int, TxnConnection] = {}
        self.cluster: Optional[ClusterMetadata] = None

    def close(self) -> None:
        self.admin.close()
        for conn in self.connections.values():
            conn.close()

    def __enter__(self) -> "TransactionsClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _deadline(self) -> float:
        return time.monotonic() + self.api_timeout_s

    def metadata(self, topics: Optional[list[str]] = None) -> ClusterMetadata:
        self.cluster = self.admin.metadata(topics)
        return self.cluster

    def broker(self, broker_id: int) -> TxnConnection:
        conn = self.connections.get(broker_id)
        if conn is not None:
            return conn
        if self.cluster is None or broker_id not in self.cluster.brokers:
            self.metadata([])
        info = self.cluster.brokers.get(broker_id)
        if info is None:
            raise TransactionsError(f"broker {broker_id} is not in the cluster metadata")
        try:
            conn = TxnConnection(info.host, info.port, self.request_timeout_s, self.client_id, self.security)
        except OSError as exc:
            raise TransactionsError(f"cannot connect to broker {broker_id} at {info.host}:{info.port}: {exc}") \
                from None
        self.connections[broker_id] = conn
        return conn

    def _forget(self, broker_id: int) -> None:
        conn = self.connections.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def leader(self, tp: TopicPartition, refresh: bool = False) -> int:
        topic, partition = tp
        if refresh or self.cluster is None or topic not in self.cluster.topics:
            self.metadata([topic])
        info = self.cluster.topics.get(topic)
        if info is None:
            error = self.cluster.errors.get(topic, Outcome(ErrorCode.unknown_topic_or_partition))
            raise TransactionsError(error.text())
        if partition not in info.partitions:
            raise TransactionsError(f"UNKNOWN_TOPIC_OR_PARTITION: {tp_text(tp)} does not exist")
        return info.partitions[partition].leader

    # ---- ListTransactions ----------------------------------------------------------------------------------
    def list_transactions(self, producer_ids: tuple[int, ...] = (), states: tuple[str, ...] = (),
                          duration_ms: int = -1) -> dict[int, list[TransactionListing]]:
        """Every broker's coordinators' transactions, by broker id (Kafka's allByBrokerId)."""
        brokers = sorted(self.metadata([]).brokers)
        return {b: self._list_on(b, producer_ids, states, duration_ms) for b in brokers}

    def _list_on(self, broker_id: int, producer_ids, states, duration_ms) -> list[TransactionListing]:
        deadline = self._deadline()
        while True:
            conn = self.broker(broker_id)
            if duration_ms >= 0 and conn.version_for(LIST_TRANSACTIONS) < 1:
                raise TransactionsError(f"UNSUPPORTED_VERSION: broker {broker_id} cannot filter transactions "
                                        f"by duration (ListTransactions v1)")
            answer = conn.request(LIST_TRANSACTIONS, state_filters=tuple(states),
                                  producer_id_filters=tuple(producer_ids), duration_filter=duration_ms)
            if answer.error_code == ErrorCode.none:
                return [TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state)
                        for t in answer.transaction_states]
            if answer.error_code not in RETRY_COORDINATOR or time.monotonic() > deadline:
                raise TransactionsError(f"ListTransactions on broker {broker_id}: {_error_text(answer.error_code)}")
            time.sleep(RETRY_BACKOFF_S)

    # ---- FindCoordinator + DescribeTransactions -------------------------------------------------------------
    def find_coordinator(self, transactional_id: str) -> int:
        deadline = self._deadline()
        while True:
            conn = self.admin.bootstrap
            version = txn_version(conn, FIND_COORDINATOR)
            schema = request_schema(FIND_COORDINATOR, version)
            if version >= 4:
                answer = conn._call(FIND_COORDINATOR, version, build(
                    schema, key_type=COORDINATOR_TRANSACTION, coordinator_keys=(transactional_id,)))
                [found] = answer.coordinators
            else:
                found = conn._call(FIND_COORDINATOR, version, build(
                    schema, key=transactional_id, key_type=COORDINATOR_TRANSACTION))
            if found.error_code == ErrorCode.none:
                if self.cluster is None or int(found.node_id) not in self.cluster.brokers:
                    self.metadata([])
                return int(found.node_id)
            if found.error_code not in RETRY_COORDINATOR or time.monotonic() > deadline:
                raise TransactionsError(_error_text(found.error_code, getattr(found, "error_message", None)))
            time.sleep(RETRY_BACKOFF_S)

    def describe_transactions(self, transactional_ids: list[str]) -> dict[str, Optional[TransactionDescription]]:
        """Each id's state from its coordinator; None for TRANSACTIONAL_ID_NOT_FOUND."""
        return {t: self.describe_transaction(t) for t in dict.fromkeys(transactional_ids)}

    def describe_transaction(self, transactional_id: str) -> Optional[TransactionDescription]:
        deadline = self._deadline()
        while True:
            coordinator = self.find_coordinator(transactional_id)
            conn = self.broker(coordinator)
            version = conn.version_for(DESCRIBE_TRANSACTIONS)
            frame = conn._exchange(build(request_schema(DESCRIBE_TRANSACTIONS, version),
                                         transactional_ids=(transactional_id,)))
            correlation_id, states = decode_describe_transactions(frame)
            if correlation_id != conn.correlation_id:
                raise TransactionsError(f"{conn.address} answered out of order")
            [state] = states
            if state.error_code == ErrorCode.transactional_id_not_found:
                return None
            if state.error_code == ErrorCode.none:
                return TransactionDescription(
                    coordinator, transactional_id, state.producer_id, state.producer_epoch, state.state,
                    state.timeout_ms, state.start_time_ms if state.start_time_ms >= 0 else None, state.partitions)
            if state.error_code not in RETRY_COORDINATOR or time.monotonic() > deadline:
                raise TransactionsError(_error_text(state.error_code))
            time.sleep(RETRY_BACKOFF_S)

    # ---- DescribeProducers ---------------------------------------------------------------------------------
    def describe_producers(self, partitions: list[TopicPartition],
                           broker_id: Optional[int] = None) -> dict[TopicPartition, list[ProducerState]]:
        """Each partition's active producers, from its leader or from broker_id's replica."""
        out: dict[TopicPartition, list[ProducerState]] = {}
        pending = list(dict.fromkeys(partitions))
        deadline = self._deadline()
        refresh = False
        while pending:
            by_broker: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                target = broker_id if broker_id is not None else self.leader(tp, refresh)
                if target < 0:
                    by_broker.setdefault(-1, []).append(tp)
                else:
                    by_broker.setdefault(target, []).append(tp)
            retry: list[TopicPartition] = []
            last_error: dict[TopicPartition, str] = {}
            for target, tps in by_broker.items():
                if target < 0:  # no leader at the moment
                    retry.extend(tps)
                    last_error.update({tp: "LEADER_NOT_AVAILABLE" for tp in tps})
                    continue
                conn = self.broker(target)
                schema = request_schema(DESCRIBE_PRODUCERS, conn.version_for(DESCRIBE_PRODUCERS))
                topic_cls = nested(schema, "TopicRequest")
                by_topic: dict[str, list[int]] = {}
                for t, p in tps:
                    by_topic.setdefault(t, []).append(p)
                answer = conn.request(DESCRIBE_PRODUCERS, topics=tuple(
                    build(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()))
                for t in answer.topics:
                    for p in t.partitions:
                        tp = (t.name, int(p.partition_index))
                        if p.error_code == ErrorCode.none:
                            out[tp] = [ProducerState(
                                int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                                int(s.last_timestamp), int(s.coordinator_epoch) if s.coordinator_epoch >= 0 else None,
                                int(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else None)
                                for s in p.active_producers]
                        elif p.error_code in RETRY_LEADER and broker_id is None:
                            retry.append(tp)
                            last_error[tp] = _error_text(p.error_code, p.error_message)
                        else:
                            raise TransactionsError(f"{tp_text(tp)}: {_error_text(p.error_code, p.error_message)}")
            missing = [tp for tp in tps_of(by_broker) if tp not in out and tp not in retry]
            if missing:
                raise TransactionsError(f"DescribeProducers left out {', '.join(map(tp_text, missing))}")
            if retry and time.monotonic() > deadline:
                raise TransactionsError(f"{tp_text(retry[0])}: {last_error[retry[0]]}")
            if retry:
                time.sleep(RETRY_BACKOFF_S)
            pending, refresh = retry, True
        return out

    # ---- WriteTxnMarkers -----------------------------------------------------------------------------------
    def abort_transaction(self, spec: AbortSpec) -> None:
        """An ABORT marker for the producer's open transaction, written by the partition's leader."""
        deadline = self._deadline()
        refresh = False
        while True:
            leader = self.leader(spec.partition, refresh)
            if leader >= 0:
                conn = self.broker(leader)
                schema = request_schema(WRITE_TXN_MARKERS, conn.version_for(WRITE_TXN_MARKERS))
                marker_cls, topic_cls = nested(schema, "WritableTxnMarker"), nested(schema, "WritableTxnMarkerTopic")
                answer = conn.request(WRITE_TXN_MARKERS, markers=(build(
                    marker_cls, producer_id=spec.producer_id, producer_epoch=spec.producer_epoch,
                    transaction_result=False, coordinator_epoch=spec.coordinator_epoch,
                    topics=(build(topic_cls, name=spec.partition[0], partition_indexes=(spec.partition[1],)),)),))
                codes = [(t.name, int(p.partition_index), p.error_code) for m in answer.markers
                         if int(m.producer_id) == spec.producer_id for t in m.topics for p in t.partitions]
                if len(codes) != 1 or codes[0][:2] != spec.partition:
                    raise TransactionsError(f"WriteTxnMarkers answered {codes} (expected exactly one entry for "
                                            f"{tp_text(spec.partition)})")
                error = codes[0][2]
                if error == ErrorCode.none:
                    return
                if error not in RETRY_LEADER or time.monotonic() > deadline:
                    raise TransactionsError(_error_text(error))
            elif time.monotonic() > deadline:
                raise TransactionsError("LEADER_NOT_AVAILABLE")
            time.sleep(RETRY_BACKOFF_S)
            refresh = True


def tps_of(by_broker: dict[int, list[TopicPartition]]) -> list[TopicPartition]:
    return [tp for tps in by_broker.values() for tp in tps]


# ---- output -----------------------------------------------------------------------------------------------------
def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: each column padded to its widest value, a tab after each."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return ["".join(value.ljust(width) + "\t" for value, width in zip(row, widths)) for row in [headers, *rows]]


def list_rows(by_broker: dict[int, list[TransactionListing]]) -> list[list[str]]:
    return [[t.transactional_id, str(broker), str(t.producer_id), t.state]
            for broker, listings in sorted(by_broker.items())
            for t in sorted(listings, key=lambda t: t.transactional_id)]


def describe_row(d: TransactionDescription, now_ms: int) -> list[str]:
    start = "None" if d.start_time_ms is None else str(d.start_time_ms)
    duration = "None" if d.start_time_ms is None else str(now_ms - d.start_time_ms)
    return [str(d.coordinator_id), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
            str(d.timeout_ms), start, duration, ",".join(tp_text(tp) for tp in d.partitions)]


def producer_row(p: ProducerState) -> list[str]:
    return [str(p.producer_id), str(p.producer_epoch),
            str(p.coordinator_epoch if p.coordinator_epoch is not None else -1), str(p.last_sequence),
            str(p.last_timestamp), "None" if p.current_txn_start_offset is None else str(p.current_txn_start_offset)]


# ---- find-hanging -----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class OpenTransaction:
    partition: TopicPartition
    producer: ProducerState


def partitions_to_search(client: TransactionsClient, topic: Optional[str], partition: Optional[int],
                         broker_id: Optional[int]) -> list[TopicPartition]:
    """--topic --partition as given; else --topic's (or every topic's, internal ones too) partitions,
    those with a replica on --broker-id when it is given."""
    if topic is not None and partition is not None:
        return [(topic, partition)]
    cluster = client.metadata([topic] if topic is not None else None)
    if topic is not None and topic not in cluster.topics:
        error = cluster.errors.get(topic, Outcome(ErrorCode.unknown_topic_or_partition))
        raise TransactionsError(f"Failed to describe 1 topics: {error.text()}")
    return [(name, p.partition) for name, info in sorted(cluster.topics.items())
            for p in sorted(info.partitions.values(), key=lambda p: p.partition)
            if broker_id is None or broker_id in p.replicas]


def open_transactions(producers: dict[TopicPartition, list[ProducerState]], now_ms: int,
                      max_timeout_ms: int) -> list[OpenTransaction]:
    """Producers with an open transaction whose last write is more than max_timeout_ms old."""
    return [OpenTransaction(tp, p) for tp, states in producers.items() for p in states
            if p.current_txn_start_offset is not None and now_ms - p.last_timestamp > max_timeout_ms]


def hanging(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
            descriptions: dict[str, Optional[TransactionDescription]]) -> list[OpenTransaction]:
    """Kafka's filter: no transactional id lists the producer id, the id is unknown to its coordinator,
    or the coordinator does not expect to write a marker to the candidate's partition."""
    out = []
    for c in candidates:
        tid = transactional_ids.get(c.producer.producer_id)
        description = descriptions.get(tid) if tid is not None else None
        if description is None or c.partition not in description.partitions:
            out.append(c)
    return out


def hanging_rows(found: list[OpenTransaction], now_ms: int) -> list[list[str]]:
    return [[c.partition[0], str(c.partition[1]), str(c.producer.producer_id), str(c.producer.producer_epoch),
             str(c.producer.coordinator_epoch if c.producer.coordinator_epoch is not None else -1),
             str(c.producer.current_txn_start_offset if c.producer.current_txn_start_offset is not None else -1),
             str(c.producer.last_timestamp), str((now_ms - c.producer.last_timestamp) // 60000)]
            for c in found]


def find_hanging(client: TransactionsClient, broker_id: Optional[int], topic: Optional[str],
                 partition: Optional[int], max_timeout_minutes: int) -> tuple[list[OpenTransaction], int]:
    """(hanging transactions, the time they were judged at)."""
    partitions = partitions_to_search(client, topic, partition, broker_id)
    producers: dict[TopicPartition, list[ProducerState]] = {}
    for start in range(0, len(partitions), MAX_BATCH_SIZE):
        batch = partitions[start:start + MAX_BATCH_SIZE]
        try:
            producers.update(client.describe_producers(batch, broker_id))
        except AdminError as exc:
            where = f" on broker {broker_id}" if broker_id is not None else ""
            raise TransactionsError(f"Failed to describe producers for {len(batch)} partitions{where}: {exc}") \
                from None
    now_ms = int(time.time() * 1000)
    candidates = open_transactions(producers, now_ms, max_timeout_minutes * 60_000)
    if not candidates:
        return [], now_ms
    producer_ids = sorted({c.producer.producer_id for c in candidates})
    transactional_ids: dict[int, str] = {}
    try:
        listed = client.list_transactions(producer_ids=tuple(producer_ids))
    except AdminError as exc:
        raise TransactionsError(f"Failed to list transactions for {len(producer_ids)} producers: {exc}") from None
    for listings in listed.values():
        for t in listings:
            if t.producer_id in producer_ids:  # a listing for another producer id is ignored, as Kafka does
                transactional_ids[t.producer_id] = t.transactional_id
    try:
        descriptions = client.describe_transactions(sorted(set(transactional_ids.values())))
    except AdminError as exc:
        raise TransactionsError(f"Failed to describe {len(set(transactional_ids.values()))} transactions: "
                                f"{exc}") from None
    return hanging(candidates, transactional_ids, descriptions), now_ms


# ---- abort ------------------------------------------------------------------------------------------------------
def abort_spec_at(producers: list[ProducerState], tp: TopicPartition, start_offset: int) -> AbortSpec:
    found = next((p for p in producers if p.current_txn_start_offset == start_offset), None)
    if found is None:
        raise TransactionsError(f"Could not find any open transactions starting at offset {start_offset} on "
                                f"partition {tp_text(tp)}")
    return AbortSpec(tp, found.producer_id, found.producer_epoch,
                     found.coordinator_epoch if found.coordinator_epoch is not None else 0)


# ---- command line -----------------------------------------------------------------------------------------------
def _common(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--bootstrap-server", default=default, metavar="host:port",
                        help="HOST:PORT[,HOST:PORT...] of brokers to bootstrap from (default 127.0.0.1:9092)")
    parser.add_argument("--command-config", default=default, metavar="FILE",
                        help="client properties (Kafka's keys): client.id, request.timeout.ms, "
                             "default.api.timeout.ms, security.protocol, sasl.*, ssl.*")


def add_parser(sub) -> None:
    """Register `transactions` under the raykafka command's subparsers."""
    top = sub.add_parser("transactions", help="list, describe and abort transactions (kafka-transactions.sh)",
                         description="Analyze the transactional state of producers in the cluster; detect and "
                                     "recover from hanging transactions. Exit status: 0 done, 1 failed, 2 usage.")
    _common(top, None)
    top.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    top.set_defaults(run_admin_command=run)
    commands = top.add_subparsers(dest="transactions_command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", type=int,
                         help="Duration (in millis) to filter by: if < 0, all transactions will be returned; "
                              "otherwise, only transactions running longer than this duration will be returned")

    describe = commands.add_parser("describe", help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True, help="transactional id")

    producers = commands.add_parser("describe-producers",
                                    help="describe the states of active producers for a topic partition")
    producers.add_argument("--broker-id", type=int,
                           help="optional broker id to describe the producer state on a specific replica")
    producers.add_argument("--topic", required=True, help="topic name")
    producers.add_argument("--partition", type=int, required=True, help="partition number")

    abort = commands.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    abort.add_argument("--topic", required=True, help="topic name")
    abort.add_argument("--partition", type=int, required=True, help="partition number")
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int, help="producer id (with --producer-epoch and --coordinator-epoch)")
    abort.add_argument("--producer-epoch", type=int, help="producer epoch")
    abort.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")

    find = commands.add_parser("find-hanging", help="find hanging transactions")
    find.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    find.add_argument("--max-transaction-timeout", type=int, default=15,
                      help="maximum transaction timeout in minutes to limit the scope of the search "
                           "(15 minutes by default)")
    find.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    find.add_argument("--partition", type=int, help="partition number")
    for parser in (listing, describe, producers, abort, find):
        _common(parser, argparse.SUPPRESS)  # also accepted after COMMAND


def usage_problem(args) -> Optional[str]:
    command = args.transactions_command
    if command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            return "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"
        if args.partition is not None and args.topic is None:
            return "The --partition argument requires --topic to be provided"
        if args.max_transaction_timeout < 0:
            return "--max-transaction-timeout must not be negative"
    if command == "abort":
        if args.start_offset is None and args.producer_id is None:
            return ("The transaction to abort must be identified either with --start-offset (for brokers on 3.0 "
                    "or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)")
        if args.start_offset is None and args.producer_epoch is None:
            return "Missing required argument --producer-epoch"
        if args.start_offset is None and args.coordinator_epoch is None:
            return "Missing required argument --coordinator-epoch"
    return None


def client_settings(path: Optional[str]) -> tuple[str, float, float]:
    """(client id, request timeout s, api timeout s) from the --command-config file."""
    props: dict[str, str] = {}
    if path:
        from cli.console import UsageError as PropertiesError
        from cli.console import parse_properties_text

        try:
            with open(path, encoding="utf-8") as f:
                props = parse_properties_text(f.read())
        except OSError as exc:
            raise UsageError(f"Failed to load admin client properties: {path}: {exc.strerror}") from None
        except PropertiesError as exc:
            raise UsageError(f"Failed to load admin client properties: {exc}") from None
    try:
        request_s = int(props.get("request.timeout.ms", "30000")) / 1000
        api_s = int(props.get("default.api.timeout.ms", "60000")) / 1000
    except ValueError as exc:
        raise UsageError(f"Failed to load admin client properties: {exc}") from None
    return props.get("client.id", "raykafka-transactions"), request_s, api_s


def execute(client: TransactionsClient, args, out) -> None:
    command = args.transactions_command
    if command == "list":
        duration = args.duration_filter if args.duration_filter is not None else -1
        try:
            by_broker = client.list_transactions(duration_ms=duration)
        except AdminError as exc:
            raise TransactionsError(f"Failed to list transactions: {exc}") from None
        lines = table(LIST_HEADERS, list_rows(by_broker))
    elif command == "describe":
        tid = args.transactional_id
        try:
            description = client.describe_transaction(tid)
            if description is None:
                raise TransactionsError(_error_text(ErrorCode.transactional_id_not_found))
        except AdminError as exc:
            raise TransactionsError(f"Failed to describe transaction state of transactional-id `{tid}`: {exc}") \
                from None
        lines = table(DESCRIBE_HEADERS, [describe_row(description, int(time.time() * 1000))])
    elif command == "describe-producers":
        tp = (args.topic, args.partition)
        try:
            producers = client.describe_producers([tp], args.broker_id)[tp]
        except AdminError as exc:
            where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
            raise TransactionsError(f"Failed to describe producers for partition {tp_text(tp)} on {where}: "
                                    f"{exc}") from None
        lines = table(PRODUCERS_HEADERS, [producer_row(p) for p in producers])
    elif command == "find-hanging":
        found, now_ms = find_hanging(client, args.broker_id, args.topic, args.partition,
                                     args.max_transaction_timeout)
        lines = table(HANGING_HEADERS, hanging_rows(found, now_ms))
    else:  # abort
        tp = (args.topic, args.partition)
        if args.start_offset is not None:
            try:
                producers = client.describe_producers([tp])[tp]
            except AdminError as exc:
                raise TransactionsError(f"Failed to validate producer state for partition {tp_text(tp)}: "
                                        f"{exc}") from None
            spec = abort_spec_at(producers, tp, args.start_offset)
        else:
            # A producer whose first transaction hangs has no coordinator epoch yet (-1): 0 is at most any.
            spec = AbortSpec(tp, args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0))
        try:
            client.abort_transaction(spec)
        except AdminError as exc:
            raise TransactionsError(f"Failed to abort transaction {spec}: {exc}") from None
        lines = []
    for line in lines:
        print(line, file=out)


def run(args) -> int:
    problem = usage_problem(args)
    if problem is None:
        try:
            client_id, request_s, api_s = client_settings(args.command_config)
            from cli.client_security import load_security

            security = load_security(args.command_config)
        except (UsageError, ValueError) as exc:
            problem = str(exc)
    if problem is not None:
        print(f"raykafka transactions: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with TransactionsClient(args.bootstrap_server or DEFAULT_BOOTSTRAP, request_s, api_s, client_id,
                                security) as client:
            execute(client, args, sys.stdout)
    except (AdminError, OSError) as exc:
        print(f"raykafka transactions: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
