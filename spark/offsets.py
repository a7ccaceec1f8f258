"""Driver-side offset work: which partitions a query reads, where each range
starts and ends, and how ranges become Spark partitions.

Offsets live in Spark's checkpoint as ``{"topic": {"partition": offset}}``,
the JSON Spark's own Kafka source writes.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions
from spark.wire import KafkaError, KafkaWireClient

log = logging.getLogger("raykafka.spark")

TP = tuple[str, int]


class DataLossError(RuntimeError):
    pass


def data_loss_message(what: str) -> str:
    return (f"{what}. Some data may have been lost because they are not available in Kafka any more; either the "
            "data was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
            "processed. If you want your query to continue on such cases, set the source option "
            "'failOnDataLoss' to 'false'.")


def report_data_loss(options: ReadOptions, what: str) -> None:
    """Raise (failOnDataLoss=true, the default) or log a warning."""
    if options.fail_on_data_loss:
        raise DataLossError(data_loss_message(what))
    log.warning("%s; continuing because failOnDataLoss is false", what)


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def to_json_offsets(offsets: dict[TP, int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(off)
    return out


def from_json_offsets(data: dict) -> dict[TP, int]:
    return {(topic, int(p)): int(off) for topic, parts in data.items() for p, off in parts.items()}


class OffsetResolver:
    """Talks to the cluster for the driver (metadata, ListOffsets)."""

    def __init__(self, options: ReadOptions):
        self.options = options
        self._client: KafkaWireClient | None = None

    @property
    def client(self) -> KafkaWireClient:
        if self._client is None:
            o = self.options
            self._client = KafkaWireClient(o.bootstrap_servers, client_id=o.client_id,
                                           timeout_s=o.request_timeout_ms / 1000)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self):
        return {"options": self.options, "_client": None}

    # ---- partitions ------------------------------------------------------------------------
    def topic_partitions(self) -> set[TP]:
        """The partitions the subscription covers now."""
        sub = self.options.subscription
        if sub.kind == "assign":
            return set(sub.assigned)
        if sub.kind == "subscribe":
            md = self.client.metadata(list(sub.topics))
        else:
            md = self.client.metadata(None)
        return {(t, p) for t, parts in md.topics.items() if sub.matches(t) and t not in md.internal for p in parts}

    def existing(self, tps: set[TP]) -> set[TP]:
        topics = sorted({t for t, _ in tps})
        if not topics:
            return set()
        md = self.client.metadata(topics).topics
        return {(t, p) for t, p in tps if p in md.get(t, {})}

    # ---- ListOffsets --------------------------------------------------------------------------
    def list_offsets(self, wanted: dict[TP, int]) -> dict[TP, int]:
        last: Exception | None = None
        for attempt in range(self.options.offset_retries):
            try:
                return self.client.list_offsets(wanted, self.options.isolation_level)
            except (KafkaError, OSError) as exc:
                last = exc
                self.client.close()
                time.sleep(self.options.offset_retry_interval_ms / 1000 * (attempt + 1))
        raise KafkaError(f"could not list offsets: {last}")

    def earliest(self, tps) -> dict[TP, int]:
        return self.list_offsets({tp: EARLIEST for tp in tps})

    def latest(self, tps) -> dict[TP, int]:
        return self.list_offsets({tp: LATEST for tp in tps})

    # ---- OffsetSpec -> offsets ------------------------------------------------------------------
    def resolve(self, spec: OffsetSpec, tps: set[TP], *, starting: bool) -> dict[TP, int]:
        """Concrete offsets for ``tps`` (the partitions the subscription covers)."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            self._check_all_given(spec, tps)
            wanted = {tp: off for tp, off in spec.offsets.items() if off < 0}
            resolved = self.list_offsets(wanted) if wanted else {}
            return {tp: resolved.get(tp, spec.offsets[tp]) for tp in tps}
        if spec.kind == "timestamp":
            timestamps = {tp: spec.timestamp for tp in tps}
        else:
            self._check_all_given(spec, tps)
            timestamps = {tp: spec.offsets[tp] for tp in tps}
        found = self.list_offsets(timestamps)
        missing = [tp for tp, off in found.items() if off < 0]
        if missing:
            if starting and self.options.timestamp_strategy == "error":
                tp = sorted(missing)[0]
                raise OptionError(spec.option, f"no record at or after timestamp {timestamps[tp]} in {tp[0]}-{tp[1]} "
                                  "(set startingOffsetsByTimestampStrategy to 'latest' to start at the latest offset "
                                  "instead)")
            latest = self.latest(missing)
            found.update(latest)
        return found

    @staticmethod
    def _check_all_given(spec: OffsetSpec, tps: set[TP]) -> None:
        given = set(spec.offsets)
        if given != tps:
            missing = sorted(tps - given)
            extra = sorted(given - tps)
            detail = []
            if missing:
                detail.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing[:10]))
            if extra:
                detail.append("not subscribed/existing " + ", ".join(f"{t}-{p}" for t, p in extra[:10]))
            raise OptionError(spec.option, "specific offsets must name every subscribed partition (use -2 for "
                                           "earliest, -1 for latest): " + "; ".join(detail))


def plan_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                max_records_per_partition: int | None) -> list[OffsetRange]:
    """Split offset ranges into Spark partitions, as Spark's KafkaOffsetRangeCalculator:
    at most maxRecordsPerPartition records each, and at least minPartitions in all
    (large ranges split proportionally to their size)."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records_per_partition:
        pieces = []
        for r in ranges:
            parts = max(1, math.ceil(r.size / max_records_per_partition))
            pieces.extend(_split(r, parts))
        ranges = pieces
    if min_partitions and len(ranges) < min_partitions:
        # Proportional shares, then the leftover parts to the largest remainders:
        # at least min_partitions in all (Spark rounds each share, which can fall short).
        total = sum(r.size for r in ranges)
        shares = [r.size / total * min_partitions for r in ranges]
        parts = [max(1, math.floor(s)) for s in shares]
        by_remainder = sorted(range(len(ranges)), key=lambda i: shares[i] - math.floor(shares[i]), reverse=True)
        for i in by_remainder[:max(0, min_partitions - sum(parts))]:
            parts[i] += 1
        ranges = [piece for r, n in zip(ranges, parts) for piece in _split(r, n)]
    return ranges


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = min(parts, r.size)
    if parts <= 1:
        return [r]
    out = []
    for i in range(parts):
        start = r.start + r.size * i // parts
        end = r.start + r.size * (i + 1) // parts
        out.append(OffsetRange(r.topic, r.partition, start, end))
    return out


def rate_limit(start: dict[TP, int], latest: dict[TP, int], max_rows: int) -> dict[TP, int]:
    """Spread ``max_rows`` over partitions in proportion to their backlog (Spark's
    KafkaMicroBatchStream.rateLimit)."""
    sizes = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = sizes[tp]
        if size <= 0:
            out[tp] = end
            continue
        prorate = max_rows * (size / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + step)
    return out
