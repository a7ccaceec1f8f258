"""`raykafka console-producer` and `raykafka console-consumer`: Kafka's
kafka-console-producer.sh / kafka-console-consumer.sh, with their option
names, on librdkafka (confluent-kafka).

    raykafka console-producer --bootstrap-server H:P --topic t \\
        [--property parse.key=true --property key.separator=:] < lines
    raykafka console-consumer --bootstrap-server H:P --topic t --from-beginning \\
        [--max-messages N] [--property print.key=true ...]

Both exit 0 at the end of input (the producer: once every line is
acknowledged) and on Ctrl-C / SIGTERM, without a traceback; 1 when a record
could not be delivered or the consumer failed, 2 on a usage error.

Client settings: `--command-config FILE` (and Kafka's `--producer.config` /
`--consumer.config`) and `--producer-property` / `--consumer-property`
take Kafka's client keys. librdkafka shares most of them
(bootstrap.servers, security.protocol, sasl.mechanism, acks, ...); the
Java-only ones that name credentials are translated (sasl.jaas.config's
username/password, PEM ssl.truststore.location / ssl.keystore.location),
and other Java-only keys are refused with their name, never silently
dropped.
"""
from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import sys
import threading
import time
import uuid
from typing import Optional

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class UsageError(Exception):
    pass


class StopFlag:
    """Set by Ctrl-C (SIGINT) and SIGTERM. The handlers only set it: an
    exception raised from a signal handler while librdkafka's C code runs
    (poll, flush) comes out of it mangled (a SystemError, or later)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Also where SIGINT came in ignored (a background job of a script).
            signal.signal(sig, lambda *_: self.event.set())

    def __bool__(self) -> bool:
        return self.event.is_set()


# ---- client configuration ---------------------------------------------------------------------
def parse_properties_text(text: str) -> dict[str, str]:
    """A Java .properties file's key=value lines (# and ! comments; key:value too)."""
    found = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)", line)
        if not match:
            raise UsageError(f"cannot read the property line {raw!r}")
        found[match.group(1)] = match.group(2).strip()
    return found


def parse_pairs(items: list[str], option: str) -> dict[str, str]:
    """--property key=value (repeatable; Kafka also takes several in one argument? no: one each)."""
    found = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"{option} expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        found[key.strip()] = value
    return found


# Java client keys librdkafka does not know, and what they become.
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAVA_ONLY_IGNORED = {"key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
                      "ssl.truststore.type", "ssl.keystore.type", "ssl.endpoint.identification.algorithm"}


def librdkafka_config(java: dict[str, str]) -> dict[str, str]:
    """Kafka (Java) client properties -> librdkafka's."""
    out: dict[str, str] = {}
    for key, value in java.items():
        if key == "sasl.jaas.config":
            fields = dict(_JAAS.findall(value))
            if "username" in fields:
                out["sasl.username"] = fields["username"]
            if "password" in fields:
                out["sasl.password"] = fields["password"]
        elif key == "ssl.truststore.location":
            out["ssl.ca.location"] = value
        elif key == "ssl.keystore.location":
            out["ssl.certificate.location"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            out["ssl.endpoint.identification.algorithm"] = value or "none"
        elif key in _JAVA_ONLY_IGNORED:
            continue
        else:
            out[key] = value
    return out


def client_config(args, extra_option: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for path in (args.command_config, getattr(args, "config_file", None)):
        if path:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties_text(f.read()))
    props.update(parse_pairs(getattr(args, extra_option), "--" + extra_option.replace("_", "-")))
    config = librdkafka_config(props)
    config["bootstrap.servers"] = args.bootstrap_server
    return config


def _import_confluent():
    try:
        import confluent_kafka
    except ImportError:
        raise UsageError("the console tools need confluent-kafka: pip install 'raykafka[tools]'") from None
    return confluent_kafka


def _stdin_lines(lines: queue.Queue) -> None:
    """Read stdin's lines into `lines` (None at the end). Runs on a daemon
    thread so the main thread never blocks in a read and sees Ctrl-C at once;
    os.read on the descriptor holds no lock of sys.stdin's that interpreter
    shutdown would wait for."""
    pending = b""
    try:
        while True:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                lines.put(line)
    except OSError:
        pass
    if pending:
        lines.put(pending)
    lines.put(None)


def _flag(props: dict[str, str], key: str, default: bool = False) -> bool:
    value = props.get(key)
    return default if value is None else value.strip().lower() == "true"


def _unescape(text: str) -> str:
    # kafka-console-* take "\t" and "\n" written out in properties
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


# ---- producer --------------------------------------------------------------------------------------
class LineReader:
    """Kafka's LineMessageReader: parse.key / key.separator, parse.headers /
    headers.delimiter / headers.separator / headers.key.separator,
    null.marker, ignore.error."""

    def __init__(self, props: dict[str, str]):
        self.parse_key = _flag(props, "parse.key")
        self.key_separator = _unescape(props.get("key.separator", "\t"))
        self.parse_headers = _flag(props, "parse.headers")
        self.headers_delimiter = _unescape(props.get("headers.delimiter", "\t"))
        self.headers_separator = _unescape(props.get("headers.separator", ","))
        self.headers_key_separator = _unescape(props.get("headers.key.separator", ":"))
        self.null_marker = props.get("null.marker")
        self.ignore_error = _flag(props, "ignore.error")
        if self.parse_key and self.parse_headers and self.key_separator == self.headers_delimiter:
            pass  # Kafka allows it: headers come first, then the key

    def _null(self, text: Optional[str]) -> Optional[bytes]:
        if text is None or (self.null_marker is not None and text == self.null_marker):
            return None
        return text.encode("utf-8")

    def parse(self, line: str, number: int) -> tuple[Optional[bytes], Optional[bytes], list]:
        rest = line
        headers = []
        if self.parse_headers:
            head, sep, rest = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise UsageError(f"No headers delimiter found on line number {number}: '{line}'")
                head, rest = "", line
            for item in head.split(self.headers_separator) if head else []:
                name, sep, value = item.partition(self.headers_key_separator)
                headers.append((name, None if not sep or value == self.null_marker else value.encode("utf-8")))
        key = None
        if self.parse_key:
            key_text, sep, value_text = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise UsageError(f"No key separator found on line number {number}: '{line}'")
                return None, self._null(rest), headers
            return self._null(key_text), self._null(value_text), headers
        return key, self._null(rest), headers


def add_producer_parser(sub) -> None:
    p = sub.add_parser("console-producer", help="lines from stdin to a topic (kafka-console-producer.sh)",
                       description="Send each line of stdin as a record. Exit status: 0 all lines delivered, "
                                   "1 a record failed, 2 usage error.")
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--topic", required=True)
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="line reader: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a producer config (Kafka's key names)")
    p.add_argument("--producer.config", dest="config_file", help="producer config file")
    p.add_argument("--command-config", help="client config file (security settings, ...)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", choices=_CODECS,
                   help="none, gzip (the default when given without a value), snappy, lz4, zstd")
    p.add_argument("--request-required-acks", default="-1", help="acks: -1/all (default), 0, 1")
    p.add_argument("--request-timeout-ms", type=int, default=None)
    p.add_argument("--message-send-max-retries", type=int, default=None)
    p.add_argument("--timeout", type=int, default=None, metavar="MS", help="linger.ms")
    p.add_argument("--batch-size", type=int, default=None, help="records per batch (batch.num.messages)")
    p.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement")
    p.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    p.set_defaults(run_admin_command=run_producer)


def run_producer(args) -> int:
    try:
        ck = _import_confluent()
        props = parse_pairs(args.property, "--property")
        reader = LineReader(props)
        config = client_config(args, "producer_property")
    except (UsageError, OSError) as exc:
        print(f"console-producer: {exc}", file=sys.stderr)
        return 2
    config.setdefault("acks", "all" if args.request_required_acks in ("-1", "all") else args.request_required_acks)
    if args.compression_codec:
        config["compression.type"] = args.compression_codec
    if args.request_timeout_ms is not None:
        config["request.timeout.ms"] = str(args.request_timeout_ms)
    if args.message_send_max_retries is not None:
        config["message.send.max.retries"] = str(args.message_send_max_retries)
    if args.timeout is not None:
        config["linger.ms"] = str(args.timeout)
    if args.batch_size is not None:
        config["batch.num.messages"] = str(args.batch_size)
    try:
        producer = ck.Producer(config)
    except ck.KafkaException as exc:
        print(f"console-producer: {exc}", file=sys.stderr)
        return 2
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(err)
            print(f"Error when sending message to topic {msg.topic()} with key: "
                  f"{'null' if msg.key() is None else f'{len(msg.key())} bytes'}, value: "
                  f"{0 if msg.value() is None else len(msg.value())} bytes with error: {err.str()}",
                  file=sys.stderr)

    stop = StopFlag()
    lines: queue.Queue = queue.Queue(maxsize=10_000)
    threading.Thread(target=_stdin_lines, args=(lines,), name="stdin", daemon=True).start()
    number = 0
    while not stop:
        try:
            raw = lines.get(timeout=0.1)
        except queue.Empty:
            producer.poll(0)
            continue
        if raw is None:
            break
        number += 1
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        try:
            key, value, headers = reader.parse(line, number)
        except UsageError as exc:
            print(f"console-producer: {exc}", file=sys.stderr)
            failures.append(exc)
            break
        while not stop:
            try:
                producer.produce(args.topic, value=value, key=key, headers=headers or None, on_delivery=delivered)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)
        if args.sync:
            while len(producer) and not stop:
                producer.poll(0.1)
    # End of input or Ctrl-C: what was read is sent (bounded), then exit.
    interrupted = bool(stop)
    deadline = time.monotonic() + (5 if interrupted else 60)
    while len(producer) and time.monotonic() < deadline:
        producer.poll(0.1)
    left = len(producer)
    if left:
        print(f"console-producer: {left} records not acknowledged", file=sys.stderr)
        return 1
    return 1 if failures else 0


# ---- consumer --------------------------------------------------------------------------------------
class Formatter:
    """Kafka's DefaultMessageFormatter: print.timestamp, print.partition,
    print.offset, print.headers, print.key, print.value, key.separator,
    line.separator, headers.separator, headers.key.separator, null.literal."""

    def __init__(self, props: dict[str, str]):
        self.timestamp = _flag(props, "print.timestamp")
        self.partition = _flag(props, "print.partition")
        self.offset = _flag(props, "print.offset")
        self.headers = _flag(props, "print.headers")
        self.key = _flag(props, "print.key")
        self.value = _flag(props, "print.value", True)
        self.key_separator = _unescape(props.get("key.separator", "\t")).encode()
        self.line_separator = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = _unescape(props.get("headers.separator", ",")).encode()
        self.headers_key_separator = _unescape(props.get("headers.key.separator", ":")).encode()
        self.null = props.get("null.literal", "null").encode()

    def format(self, msg) -> bytes:
        fields = []
        if self.timestamp:
            kind, ts = msg.timestamp()
            name = {1: "CreateTime", 2: "LogAppendTime"}.get(kind)
            fields.append(f"{name}:{ts}".encode() if name else b"NO_TIMESTAMP")
        if self.partition:
            fields.append(f"Partition:{msg.partition()}".encode())
        if self.offset:
            fields.append(f"Offset:{msg.offset()}".encode())
        if self.headers:
            headers = msg.headers() or []
            fields.append(self.headers_separator.join(
                k.encode() + self.headers_key_separator + (self.null if v is None else v) for k, v in headers)
                if headers else b"NO_HEADERS")
        if self.key:
            fields.append(self.null if msg.key() is None else msg.key())
        if self.value:
            fields.append(self.null if msg.value() is None else msg.value())
        return self.key_separator.join(fields) + self.line_separator


def add_consumer_parser(sub) -> None:
    p = sub.add_parser("console-consumer", help="a topic's records to stdout (kafka-console-consumer.sh)",
                       description="Print records. Exit status: 0 (also on Ctrl-C, --max-messages, "
                                   "--timeout-ms), 1 consumer error, 2 usage error.")
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--include", "--whitelist", dest="include", metavar="REGEX",
                       help="topics matching this regular expression")
    p.add_argument("--group", help="consumer group (default: a new console-consumer-<id>)")
    p.add_argument("--from-beginning", action="store_true",
                   help="with no committed offset, start at the earliest record instead of the latest")
    p.add_argument("--partition", type=int, help="consume only this partition (of --topic)")
    p.add_argument("--offset", default=None, help="with --partition: earliest, latest (default) or an offset")
    p.add_argument("--max-messages", type=int, default=None, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, default=None, help="exit when no record came for this long")
    p.add_argument("--isolation-level", default="read_uncommitted",
                   choices=("read_uncommitted", "read_committed"))
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="formatter: print.key, print.timestamp, print.headers, print.offset, print.partition, "
                        "print.value, key.separator, line.separator, headers.separator, null.literal")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a consumer config (Kafka's key names)")
    p.add_argument("--consumer.config", dest="config_file", help="consumer config file")
    p.add_argument("--command-config", help="client config file (security settings, ...)")
    p.add_argument("--skip-message-on-error", action="store_true",
                   help="accepted for compatibility: errors short of fatal are printed and skipped anyway")
    p.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    p.set_defaults(run_admin_command=run_consumer)


def _start_offset(text: Optional[str]):
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if text is None or text == "latest":
        return OFFSET_END
    if text == "earliest":
        return OFFSET_BEGINNING
    try:
        offset = int(text)
    except ValueError:
        raise UsageError(f"--offset must be earliest, latest or a number, got {text!r}") from None
    if offset < 0:
        raise UsageError("--offset must not be negative")
    return offset


def run_consumer(args) -> int:
    try:
        ck = _import_confluent()
        formatter = Formatter(parse_pairs(args.property, "--property"))
        config = client_config(args, "consumer_property")
        if args.partition is not None and args.topic is None:
            raise UsageError("--partition needs --topic")
        if args.offset is not None and args.partition is None:
            raise UsageError("--offset needs --partition")
        if args.partition is not None and args.from_beginning and args.offset is not None:
            raise UsageError("--from-beginning and --offset cannot be used together")
        start = _start_offset("earliest" if args.from_beginning and args.offset is None else args.offset) \
            if args.partition is not None else None
    except (UsageError, OSError) as exc:
        print(f"console-consumer: {exc}", file=sys.stderr)
        return 2
    own_group = args.group is None and "group.id" not in config
    config.setdefault("group.id", args.group or f"console-consumer-{uuid.uuid4().int % 100000}")
    config.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
    config["isolation.level"] = args.isolation_level
    if args.partition is not None and own_group:
        config.setdefault("enable.auto.commit", "false")  # an assigned partition, no group: nothing to commit
    try:
        consumer = ck.Consumer(config)
    except ck.KafkaException as exc:
        print(f"console-consumer: {exc}", file=sys.stderr)
        return 2
    if args.partition is not None:
        consumer.assign([ck.TopicPartition(args.topic, args.partition, start)])
    else:
        consumer.subscribe([args.topic] if args.topic else ["^" + args.include])
    stop = StopFlag()
    out = sys.stdout.buffer
    count, code = 0, 0
    last = time.monotonic()
    try:
        while (args.max_messages is None or count < args.max_messages) and not stop:
            msg = consumer.poll(0.2)
            if msg is None:
                if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= args.timeout_ms:
                    print("console-consumer: no record within --timeout-ms", file=sys.stderr)
                    break
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    continue
                # As Kafka's tool: a topic that does not exist yet, a leader
                # moving, ... are warnings while it waits; a fatal error ends it.
                print(f"console-consumer: {msg.error().str()}", file=sys.stderr)
                if msg.error().fatal():
                    code = 1
                    break
                continue
            last = time.monotonic()
            out.write(formatter.format(msg))
            out.flush()
            count += 1
    except BrokenPipeError:  # `| head`
        pass
    try:
        consumer.close()  # commits (auto commit) and leaves the group
    except ck.KafkaException:
        pass
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return code
