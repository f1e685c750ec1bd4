"""Sample data for the demo, checked with an ordinary Kafka client, independently of partsync.

``partsync demo``, the tests and the benchmark use these helpers to create topics, produce records
(with confluent-kafka),
read partitions back and compare two clusters offset by offset. confluent-kafka is imported
lazily: it is a dev dependency only.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COMPRESSIONS",
    "UNLIMITED_RETENTION",
    "ConsumedRecord",
    "Rec",
    "assert_partitions_identical",
    "consume_all",
    "create_topic",
    "make_records",
    "produce",
    "wait_for_leaders",
]

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
# Record timestamps from make_records start here (2023-11-14): fixed, so data is deterministic.
BASE_TIMESTAMP_MS = 1_700_000_000_000
# Without these noida evicts a partition's oldest data past roughly 1 MB (its default), and
# Kafka's 7-day default deletes records stamped from BASE_TIMESTAMP_MS at its next retention
# check.
UNLIMITED_RETENTION = {"retention.bytes": "-1", "retention.ms": "-1"}

Headers = list[tuple[str, "bytes | None"]]


@dataclass(frozen=True)
class Rec:
    """A record to produce. ``partition``/``timestamp_ms`` None = producer's choice."""

    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)
    timestamp_ms: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class ConsumedRecord:
    """A record as a consumer sees it. ``timestamp_type``: 0 none, 1 CreateTime, 2 LogAppendTime
    (confluent-kafka's TIMESTAMP_* constants)."""

    offset: int
    timestamp_type: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


# --------------------------------------------------------------------------------------------
# Topics
# --------------------------------------------------------------------------------------------


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    config: dict[str, str] | None = None,
    *,
    timeout: float = 15.0,
) -> None:
    """Create ``topic`` with unlimited retention (unless ``config`` overrides it) and wait until
    metadata lists all its partitions with a leader."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    cfg = {**UNLIMITED_RETENTION, **(config or {})}
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    error: str | None = None
    try:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=cfg)],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        try:
            futures[topic].result(timeout)
        except KafkaException as exc:
            # noida rejects unknown config names and badly typed values (INVALID_CONFIG);
            # Tansu 0.6 accepts any config and ignores most of them.
            error = f"CreateTopics {topic!r} on {bootstrap} with {cfg}: {exc}"
        else:
            error = _wait_for_topic(admin, topic, partitions, timeout)
    finally:
        del admin  # no close() on AdminClient: drop it now, not when a traceback dies
    if error is None:
        error = wait_for_leaders(bootstrap, topic, partitions, timeout)
    if error is not None:
        raise RuntimeError(error)


def _wait_for_topic(admin: Any, topic: str, partitions: int, timeout: float) -> str | None:
    """None once metadata lists ``partitions`` partitions with a leader, else an error text."""
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return None
        if time.monotonic() > deadline:
            return f"topic {topic!r} not ready after {timeout}s: {md}"
        time.sleep(0.1)


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout: float) -> str | None:
    """None once every partition's leader answers for it (Apache Kafka's metadata names a new
    partition's leader before that broker has taken the partition on), else an error text."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "partsync-readiness", "log_level": 3}
    )
    deadline = time.monotonic() + timeout
    try:
        for p in range(partitions):
            while True:
                try:
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                    break
                except KafkaException as exc:
                    if time.monotonic() > deadline:
                        return f"partition {p} of {topic!r} has no answering leader: {exc}"
                    time.sleep(0.1)
    finally:
        consumer.close()
    return None


# --------------------------------------------------------------------------------------------
# Producing
# --------------------------------------------------------------------------------------------


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Rec],
    *,
    compression: str = "none",
    partition: int | None = None,
    linger_ms: int = 5,
    batch_size: int = 64 * 1024,
    idempotent: bool = True,
    timeout: float = 30.0,
) -> int:
    """Produce with confluent-kafka (librdkafka), flush, and raise on any delivery error.

    ``partition`` applies to records whose own ``partition`` is None. Returns the record count.
    """
    from confluent_kafka import KafkaException, Producer

    _check_codec(compression)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "linger.ms": linger_ms,
            "batch.size": batch_size,
            "enable.idempotence": idempotent,
            "acks": "all",
            "log_level": 3,
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    count = 0
    try:
        for rec in records:
            kwargs: dict[str, Any] = {
                "key": rec.key,
                "value": rec.value,
                "on_delivery": on_delivery,
            }
            if rec.headers:
                kwargs["headers"] = rec.headers
            if rec.timestamp_ms is not None:
                kwargs["timestamp"] = rec.timestamp_ms
            part = rec.partition if rec.partition is not None else partition
            if part is not None:
                kwargs["partition"] = part
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.1)
            producer.poll(0)
            count += 1
        remaining = producer.flush(timeout)
        if remaining:
            errors.append(f"{remaining} records not delivered within {timeout}s")
    except KafkaException as exc:
        errors.append(str(exc))
    finally:
        close = getattr(producer, "close", None)  # confluent-kafka >= 2.12
        if close is not None:
            close()
    if errors:
        raise RuntimeError(f"produce to {topic!r} on {bootstrap} failed: {errors[:5]}")
    return count


def _check_codec(compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression {compression!r} not in {COMPRESSIONS}")


def make_records(
    n: int,
    *,
    seed: int = 0,
    key_size: int = 16,
    value_size: int = 100,
    headers: bool = True,
    null_keys_every: int = 0,
    null_values_every: int = 0,
    null_header_values_every: int = 0,
    base_timestamp_ms: int | None = BASE_TIMESTAMP_MS,
    partition: int | None = None,
) -> list[Rec]:
    """Deterministic sample records: the same arguments always give the same list.

    Keys start with ``k<index>``; values are hex text (compressible about 2:1, like real
    payloads); every ``null_keys_every``-th record (index % every == every - 1) has a null key,
    likewise for null values and null header values (0 = never). Timestamps are
    ``base_timestamp_ms + index`` (None = let the producer stamp them).
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key: bytes | None = (b"k%08d-" % i + rng.randbytes(key_size).hex().encode())[:key_size]
        value: bytes | None = rng.randbytes((value_size + 1) // 2).hex().encode()[:value_size]
        hdrs: Headers = []
        if headers:
            hdrs = [("seq", str(i).encode()), ("src", b"partsync-test")]
            if _every(i, null_header_values_every):
                hdrs.append(("nullable", None))
        if _every(i, null_keys_every):
            key = None
        if _every(i, null_values_every):
            value = None
        ts = None if base_timestamp_ms is None else base_timestamp_ms + i
        out.append(Rec(key, value, hdrs, ts, partition))
    return out


def _every(i: int, every: int) -> bool:
    return every > 0 and i % every == every - 1


# --------------------------------------------------------------------------------------------
# Consuming and comparing
# --------------------------------------------------------------------------------------------


def consume_all(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int | None = None,
    end: int | None = None,
    *,
    timeout: float = 60.0,
    isolation: str = "read_uncommitted",
) -> list[ConsumedRecord]:
    """Read ``partition`` from ``start`` (default: log start) up to ``end`` (exclusive; default:
    the high watermark, or with ``isolation="read_committed"`` the last stable offset) with a
    manually assigned confluent-kafka consumer.

    Where to stop: ``get_watermark_offsets`` queries ListOffsets, and Tansu 0.6 answers
    ListOffsets(latest) with the last batch's *base* offset + 1, not the high watermark (10
    records in batches ending at 9 gave 9, not 10). The high watermark in Fetch responses is
    right on every broker, and librdkafka raises a partition-EOF event when the fetch position
    reaches it (also past trailing transaction markers, which a consumer never sees). So the
    ListOffsets answer only decides "empty" (it is never 0 for a non-empty partition, even on
    Tansu) and the default end is the EOF event.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"partsync-check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,  # Tansu holds an empty fetch for the full wait
            "auto.offset.reset": "error",
            "log_level": 3,
        }
    )
    out: list[ConsumedRecord] = []
    try:
        tp = TopicPartition(topic, partition)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        first = low if start is None else start
        # high == low means empty on every broker; "high <= start" would be wrong on Tansu.
        if high <= low or (end is not None and end <= first):
            return out
        consumer.assign([TopicPartition(topic, partition, first)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return out
                raise KafkaException(err)
            offset = msg.offset()
            assert offset is not None  # set on every fetched message
            if end is not None and offset >= end:
                return out
            ts_type, ts = msg.timestamp()
            headers: Any = msg.headers() or []  # a list of (str, bytes | None) for consumers
            out.append(ConsumedRecord(offset, ts_type, ts, msg.key(), msg.value(), list(headers)))
            if end is not None and offset + 1 >= end:
                return out
        raise TimeoutError(
            f"{topic}[{partition}] on {bootstrap}: no end of partition after {timeout}s "
            f"({len(out)} records read from {first})"
        )
    finally:
        consumer.close()


def assert_partitions_identical(
    src_bootstrap: str,
    dst_bootstrap: str,
    topic: str,
    partitions: int | Sequence[int],
    *,
    dst_topic: str | None = None,
) -> int:
    """Assert that every offset of each partition holds the same record on both clusters.

    Compares offsets, keys, values, headers, timestamps and timestamp types; raises
    AssertionError naming the first differing offset. ``partitions`` is a count or a list.
    Returns the number of records compared.
    """
    parts = range(partitions) if isinstance(partitions, int) else partitions
    total = 0
    for p in parts:
        src = consume_all(src_bootstrap, topic, p)
        dst = consume_all(dst_bootstrap, dst_topic or topic, p)
        for a, b in zip(src, dst):
            if a != b:
                diff = [
                    f"{name}: {getattr(a, name)!r} != {getattr(b, name)!r}"
                    for name in ("offset", "timestamp_type", "timestamp", "key", "value", "headers")
                    if getattr(a, name) != getattr(b, name)
                ]
                raise AssertionError(
                    f"{topic}[{p}] differs at offset {a.offset} (source) / {b.offset} "
                    f"(destination): {'; '.join(diff)}"
                )
        if len(src) != len(dst):
            shorter, longer = (src, dst) if len(src) < len(dst) else (dst, src)
            where = longer[len(shorter)].offset
            raise AssertionError(
                f"{topic}[{p}]: source has {len(src)} records, destination {len(dst)}; "
                f"first offset only on one side: {where}"
            )
        total += len(src)
    return total
