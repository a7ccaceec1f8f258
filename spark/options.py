"""Option parsing for the `raykafka` Spark data source.

Option names and meanings follow Spark's Kafka source and sink
(https://spark.apache.org/docs/latest/structured-streaming-kafka-integration.html).
Spark hands Python data sources their option keys lower-cased, so every key
is compared lower-cased and reported in its documented spelling.

Unknown options, and options that contradict each other or the kind of query
(e.g. ``endingOffsets`` on a stream), raise :class:`OptionError` naming the
option.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

EARLIEST = -2
LATEST = -1


class OptionError(ValueError):
    """A bad data source option; the message names it."""

    def __init__(self, option: str, message: str):
        super().__init__(f"raykafka option '{option}': {message}")
        self.option = option


# documented spelling of every source option, keyed by its lower-case form
_SOURCE_OPTIONS = [
    "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "maxOffsetsPerTrigger", "minPartitions", "maxRecordsPerPartition", "failOnDataLoss", "includeHeaders",
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "groupIdPrefix",
    # raykafka's own
    "readPath", "ray.address", "ray.authTokenPath", "ray.namespace", "fetchMaxBytes",
]
SPELLING = {name.lower(): name for name in _SOURCE_OPTIONS}

# Kafka consumer settings (kafka.*) the source uses
_CONSUMER_USED = {"kafka.bootstrap.servers", "kafka.client.id", "kafka.request.timeout.ms",
                  "kafka.max.partition.fetch.bytes", "kafka.fetch.max.wait.ms", "kafka.isolation.level",
                  "kafka.security.protocol", "kafka.group.id"}
# Java consumer settings that tune the Java client only; accepted (so Spark jobs port
# unchanged) and without effect here.
_CONSUMER_IGNORED = {
    "kafka.session.timeout.ms", "kafka.heartbeat.interval.ms", "kafka.max.poll.records", "kafka.max.poll.interval.ms",
    "kafka.receive.buffer.bytes", "kafka.send.buffer.bytes", "kafka.metadata.max.age.ms",
    "kafka.reconnect.backoff.ms", "kafka.reconnect.backoff.max.ms", "kafka.retry.backoff.ms",
    "kafka.connections.max.idle.ms", "kafka.default.api.timeout.ms", "kafka.client.dns.lookup", "kafka.check.crcs",
    "kafka.fetch.min.bytes", "kafka.fetch.max.bytes", "kafka.client.rack", "kafka.allow.auto.create.topics",
}
# What Spark's Kafka source rejects, with its reason
_CONSUMER_FORBIDDEN = {
    "kafka.auto.offset.reset": "is not supported; set the source option 'startingOffsets' instead "
                               "(the source manages offsets itself)",
    "kafka.key.deserializer": "is not supported; keys are always read as bytes (cast the 'key' column)",
    "kafka.value.deserializer": "is not supported; values are always read as bytes (cast the 'value' column)",
    "kafka.enable.auto.commit": "is not supported; the source does not commit offsets to Kafka",
    "kafka.interceptor.classes": "is not supported; the source does not run Kafka interceptors",
}
_STREAM_ONLY = {"maxoffsetspertrigger"}
_BATCH_ONLY = {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}
# Spark passes these for some calls; they carry nothing for this source.
_SPARK_INTERNAL = {"path", "checkpointlocation"}

READ_PATHS = ("auto", "kafka", "ray")


def spelling(key: str) -> str:
    return SPELLING.get(key.lower(), key)


def _bool(key: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise OptionError(spelling(key), f"expected true or false, got {raw!r}")


def _positive_int(key: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(spelling(key), f"expected a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(spelling(key), f"must be positive, got {value}")
    return value


def _timestamp(key: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise OptionError(spelling(key), f"expected a timestamp in milliseconds since the epoch, got {raw!r}") from None


def _json(key: str, raw: str):
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(spelling(key), f"is not valid JSON ({exc.msg}): {raw!r}") from None


def _partition_map(key: str, raw: str, what: str) -> dict[tuple[str, int], int]:
    """{"topic": {"0": value, ...}, ...} -> {(topic, 0): value}."""
    data = _json(key, raw)
    if not isinstance(data, dict):
        raise OptionError(spelling(key), f'expected JSON like {{"topicA":{{"0":{what}}}}}, got {raw!r}')
    out = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OptionError(spelling(key), f'expected JSON like {{"topicA":{{"0":{what}}}}}, got {raw!r}')
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(spelling(key), f"partition {p!r} of topic {topic!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(spelling(key), f"{what} for {topic}-{p} must be an integer, got {value!r}")
            out[(topic, partition)] = value
    return out


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends.

    kind: "earliest" | "latest" | "offsets" (per partition, -2/-1 allowed) |
    "timestamp" (one for all partitions) | "timestamps" (per partition).
    """

    kind: str
    offsets: dict = field(default_factory=dict)  # (topic, partition) -> offset or timestamp
    timestamp: int | None = None
    option: str = ""  # the option it came from, for messages


@dataclass(frozen=True)
class Subscription:
    kind: str  # subscribe | subscribePattern | assign
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True)
class ReadOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    streaming: bool
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_path: str = "auto"
    ray_namespace: str = "raykafka"
    ray_address: str | None = None
    ray_auth_token_path: str | None = None  # the broker's Ray token, for the Ray-native path
    client_id: str = "raykafka-spark"
    request_timeout_ms: int = 30000
    poll_timeout_ms: int = 120000
    fetch_max_bytes: int = 8 << 20
    fetch_max_wait_ms: int = 500
    isolation_level: int = 0
    offset_retries: int = 3
    offset_retry_interval_ms: int = 10


def include_headers(options) -> bool:
    return _bool("includeheaders", _lower(options).get("includeheaders"), False)


def _lower(options) -> dict[str, str]:
    return {str(k).lower(): v for k, v in dict(options).items()}


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k) not in (None, "")]
    if len(given) > 1:
        names = " and ".join(spelling(k) for k in given)
        raise OptionError(spelling(given[1]),
                          f"only one of subscribe, subscribePattern, assign can be given; got {names}")
    if not given:
        raise OptionError("subscribe", "one of subscribe, subscribePattern or assign is required")
    key = given[0]
    raw = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe", f"no topic names in {raw!r}")
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError("subscribePattern", f"is not a valid regular expression: {exc}") from None
        return Subscription("subscribePattern", pattern=raw)
    data = _json(key, raw)
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise OptionError("assign", f'expected JSON like {{"topicA":[0,1],"topicB":[2,4]}}, got {raw!r}')
    assigned = []
    for topic, parts in data.items():
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise OptionError("assign", f"partition {p!r} of topic {topic!r} is not a partition number")
            assigned.append((topic, p))
    if not assigned:
        raise OptionError("assign", "assigns no partitions")
    return Subscription("assign", assigned=tuple(assigned))


def _offset_spec(opts: dict[str, str], which: str, streaming: bool) -> OffsetSpec:
    """startingX / endingX with Spark's precedence: timestamp > by-timestamp > offsets."""
    ts_key, by_ts_key, offsets_key = f"{which}timestamp", f"{which}offsetsbytimestamp", f"{which}offsets"
    if opts.get(ts_key) is not None:
        return OffsetSpec("timestamp", timestamp=_timestamp(ts_key, opts[ts_key]), option=spelling(ts_key))
    if opts.get(by_ts_key) is not None:
        return OffsetSpec("timestamps", offsets=_partition_map(by_ts_key, opts[by_ts_key], "timestamp"),
                          option=spelling(by_ts_key))
    raw = opts.get(offsets_key)
    default = "latest" if (which == "starting" and streaming) or which == "ending" else "earliest"
    if raw is None or raw.strip().lower() in ("earliest", "latest") and raw.strip():
        kind = (raw or default).strip().lower()
        return OffsetSpec(kind, option=spelling(offsets_key))
    spec = OffsetSpec("offsets", offsets=_partition_map(offsets_key, raw, "offset"), option=spelling(offsets_key))
    for tp, off in spec.offsets.items():
        if off < EARLIEST:
            raise OptionError(spelling(offsets_key), f"offset {off} for {tp[0]}-{tp[1]} is invalid "
                                                     "(use -2 for earliest, -1 for latest)")
    return spec


def parse_read_options(options, streaming: bool) -> ReadOptions:
    opts = _lower(options)
    for key in opts:
        if key in _SPARK_INTERNAL:
            continue
        if key.startswith("kafka."):
            if key in _CONSUMER_FORBIDDEN:
                raise OptionError(key, _CONSUMER_FORBIDDEN[key])
            if key not in _CONSUMER_USED and key not in _CONSUMER_IGNORED:
                raise OptionError(key, "unknown Kafka consumer setting for the raykafka source")
            continue
        if key not in SPELLING:
            raise OptionError(key, "unknown option for the raykafka source")
        if streaming and key in _BATCH_ONLY:
            raise OptionError(spelling(key), "applies to batch queries only, not to streaming reads")
        if not streaming and key in _STREAM_ONLY:
            raise OptionError(spelling(key), "applies to streaming queries only, not to batch reads")
    if opts.get("path"):
        raise OptionError("path", "the raykafka source takes no path; name topics with subscribe, "
                                  "subscribePattern or assign")
    servers = opts.get("kafka.bootstrap.servers")
    if not servers or not servers.strip():
        raise OptionError("kafka.bootstrap.servers", "is required (host:port[,host:port...])")
    from spark.wire import parse_bootstrap

    try:
        parse_bootstrap(servers)
    except ValueError as exc:
        raise OptionError("kafka.bootstrap.servers", str(exc)) from None
    protocol = opts.get("kafka.security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        raise OptionError("kafka.security.protocol", f"only PLAINTEXT is supported, got {protocol}")
    subscription = _subscription(opts)
    starting = _offset_spec(opts, "starting", streaming)
    ending = _offset_spec(opts, "ending", streaming) if not streaming else OffsetSpec("latest")
    if not streaming:
        if starting.kind == "latest":
            raise OptionError(starting.option, "can't be latest for batch queries")
        if starting.kind == "offsets":
            for (topic, p), off in starting.offsets.items():
                if off == LATEST:
                    raise OptionError(starting.option, f"offset for {topic}-{p} can't be latest (-1) for batch queries")
        if ending.kind == "earliest":
            raise OptionError(ending.option, "can't be earliest for batch queries")
        if ending.kind == "offsets":
            for (topic, p), off in ending.offsets.items():
                if off == EARLIEST:
                    raise OptionError(ending.option, f"offset for {topic}-{p} can't be earliest (-2) for batch queries")
    for spec in (starting, ending):
        if spec.kind in ("offsets", "timestamps") and subscription.kind == "assign":
            extra = set(spec.offsets) - set(subscription.assigned)
            if extra:
                t, p = sorted(extra)[0]
                raise OptionError(spec.option, f"names {t}-{p}, which 'assign' does not assign")
    strategy = (opts.get("startingoffsetsbytimestampstrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy", f"expected error or latest, got {strategy!r}")
    read_path = (opts.get("readpath") or "auto").strip().lower()
    if read_path not in READ_PATHS:
        raise OptionError("readPath", f"expected one of {', '.join(READ_PATHS)}, got {read_path!r}")
    isolation = (opts.get("kafka.isolation.level") or "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError("kafka.isolation.level", f"expected read_uncommitted or read_committed, got {isolation!r}")
    request_timeout = _positive_int("kafka.request.timeout.ms", opts.get("kafka.request.timeout.ms")) or 30000
    fetch_max_bytes = (_positive_int("fetchMaxBytes", opts.get("fetchmaxbytes"))
                       or _positive_int("kafka.max.partition.fetch.bytes", opts.get("kafka.max.partition.fetch.bytes"))
                       or 8 << 20)
    retries = opts.get("fetchoffset.numretries")
    return ReadOptions(
        bootstrap_servers=servers.strip(),
        subscription=subscription,
        starting=starting,
        ending=ending,
        streaming=streaming,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=_positive_int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger")),
        min_partitions=_positive_int("minPartitions", opts.get("minpartitions")),
        max_records_per_partition=_positive_int("maxRecordsPerPartition", opts.get("maxrecordsperpartition")),
        fail_on_data_loss=_bool("failondataloss", opts.get("failondataloss"), True),
        include_headers=_bool("includeheaders", opts.get("includeheaders"), False),
        read_path=read_path,
        ray_namespace=(opts.get("ray.namespace") or "raykafka").strip(),
        ray_address=(opts.get("ray.address") or "").strip() or None,
        ray_auth_token_path=(opts.get("ray.authtokenpath") or "").strip() or None,
        client_id=(opts.get("kafka.client.id") or "raykafka-spark").strip(),
        request_timeout_ms=request_timeout,
        poll_timeout_ms=_positive_int("kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms")) or 120000,
        fetch_max_bytes=min(fetch_max_bytes, (1 << 31) - 1),
        fetch_max_wait_ms=_positive_int("kafka.fetch.max.wait.ms", opts.get("kafka.fetch.max.wait.ms")) or 500,
        isolation_level=1 if isolation == "read_committed" else 0,
        offset_retries=(_positive_int("fetchOffset.numRetries", retries) if retries not in (None, "0") else 3) or 3,
        offset_retry_interval_ms=_positive_int("fetchOffset.retryIntervalMs",
                                               opts.get("fetchoffset.retryintervalms")) or 10,
    )


# ---- sink --------------------------------------------------------------------------------------

_SINK_OPTIONS = {"kafka.bootstrap.servers", "topic", "includeheaders"}
_PRODUCER_FORBIDDEN = {
    "kafka.key.serializer": "is not supported; write a binary or string 'key' column",
    "kafka.value.serializer": "is not supported; write a binary or string 'value' column",
}


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None
    producer_config: dict  # librdkafka settings from kafka.* options


def parse_write_options(options) -> WriteOptions:
    opts = _lower(options)
    producer = {}
    for key, value in opts.items():
        if key in _SPARK_INTERNAL or key in _SINK_OPTIONS:
            continue
        if key.startswith("kafka."):
            if key in _PRODUCER_FORBIDDEN:
                raise OptionError(key, _PRODUCER_FORBIDDEN[key])
            producer[key[len("kafka."):]] = value
            continue
        raise OptionError(spelling(key), "unknown option for the raykafka sink")
    if opts.get("path"):
        raise OptionError("path", "the raykafka sink takes no path; use the 'topic' option or a topic column")
    servers = opts.get("kafka.bootstrap.servers")
    if not servers or not servers.strip():
        raise OptionError("kafka.bootstrap.servers", "is required (host:port[,host:port...])")
    producer["bootstrap.servers"] = servers.strip()
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("topic", "is empty")
    return WriteOptions(servers.strip(), topic.strip() if topic else None, producer)
