"""Helpers for the sync integration tests: named clusters, report checks, independent reads,
and raw record batches for the cases no well-behaved client produces.

Results are checked with ordinary Kafka clients (``partsync.demo.data``); partsync's own
``Cluster`` is only used to read partition bounds (it copes with Tansu's ListOffsets quirk) and
its ``Connection`` to put hand-built batches on a source.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partsync._kafka import DEBUG_REPLICA, LATEST, Connection, ProducedPartition
from partsync.config import ClusterRef
from partsync.demo.brokers import Broker
from partsync.demo.data import Rec, consume_all, create_topic, make_records, wait_for_leaders
from partsync.io.cluster import Cluster
from partsync.plan.comparator import Bounds
from partsync.wire.batch import CRC_OFFSET, Batch, compute_crc, iter_batches, rewrite_for_append

# --------------------------------------------------------------------------------------------
# Named clusters
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clusters:
    """The session's brokers under the names the config file gives them: a, b, local."""

    brokers: Mapping[str, Broker]
    config: Path
    # partsync's way to the local cluster (the config file names it): the strict proxy.
    proxy: Any = None

    @property
    def kafka(self) -> Any:
        """The local cluster's Kafka behaviours on demand (``KafkaSemantics``)."""
        return self.proxy.kafka

    def __getitem__(self, name: str) -> Broker:
        return self.brokers[name]

    def bootstrap(self, name: str) -> str:
        return self.brokers[name].bootstrap

    def kind(self, name: str) -> str:
        return self.brokers[name].kind


def write_config(
    path: Path,
    brokers: Mapping[str, Broker],
    local: str = "local",
    addresses: Mapping[str, str] | None = None,
) -> Path:
    """A config file naming the brokers; ``addresses`` overrides where partsync reaches one."""
    lines = [f'local = "{local}"', ""]
    for name, b in brokers.items():
        bootstrap = (addresses or {}).get(name, b.bootstrap)
        lines += [f"[clusters.{name}]", f'bootstrap_servers = ["{bootstrap}"]', ""]
    path.write_text("\n".join(lines))
    return path


def cluster_ref(broker: Broker | str, name: str | None = None) -> ClusterRef:
    """A reference to a broker, or to every address of a comma-separated bootstrap list."""
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    servers = tuple((h, int(p)) for h, p in (s.rsplit(":", 1) for s in bootstrap.split(",")))
    return ClusterRef(name=name or bootstrap, bootstrap_servers=servers)


_ref = cluster_ref


def bounds(broker: Broker | str, topic: str, partitions: int | Sequence[int]) -> dict[int, Bounds]:
    """Log start and end (high watermark) of each partition."""
    parts = list(range(partitions)) if isinstance(partitions, int) else list(partitions)
    with Cluster(_ref(broker), timeout=10) as c:
        return c.bounds(topic, parts)


def ends(broker: Broker | str, topic: str, partitions: int | Sequence[int]) -> dict[int, int]:
    return {p: b.end for p, b in bounds(broker, topic, partitions).items()}


def topic_partitions(bootstrap: str, topic: str) -> int | None:
    """Partition count from an independent client's metadata, None if the topic is missing."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        # Ask for every topic: a Metadata request naming the topic makes Tansu and noida
        # auto-create it.
        md = admin.list_topics(timeout=10).topics.get(topic)
    finally:
        del admin
    if md is None or md.error is not None:
        return None
    return len(md.partitions)


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        result = next(iter(futures.values())).result(10)
    finally:
        del admin
    return {k: v.value for k, v in result.items()}


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    """Move a partition's log start to ``before`` (DeleteRecords)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        futures = admin.delete_records([TopicPartition(topic, partition, before)])
        for f in futures.values():
            f.result(10)
    finally:
        del admin


def add_partitions(bootstrap: str, topic: str, count: int) -> None:
    """Grow ``topic`` to ``count`` partitions (CreatePartitions) and wait until each has an
    answering leader."""
    from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        admin.create_partitions([NewPartitions(topic, count)])[topic].result(15)
    finally:
        del admin
    deadline = time.monotonic() + 15
    while topic_partitions(bootstrap, topic) != count:
        assert time.monotonic() < deadline, f"{topic} did not grow to {count} partitions"
        time.sleep(0.1)
    error = wait_for_leaders(bootstrap, topic, count, 15)
    assert error is None, error


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` (an independent admin client; Kafka deletes asynchronously)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        admin.delete_topics([topic], operation_timeout=15)[topic].result(15)
    finally:
        del admin


def set_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Set ``configs`` on ``topic`` with an independent admin client (IncrementalAlterConfigs)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ]
        res = ConfigResource("topic", topic, incremental_configs=entries)
        admin.incremental_alter_configs([res])[res].result(15)
    finally:
        del admin


def recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again empty (Kafka deletes asynchronously: wait until
    it is gone, and retry a creation that meets the old one still being deleted)."""
    from confluent_kafka import KafkaException

    delete_topic(bootstrap, topic)
    deadline = time.monotonic() + 30
    while True:
        if topic_partitions(bootstrap, topic) is None:
            try:
                create_topic(bootstrap, topic, partitions)
                return
            except (RuntimeError, KafkaException) as e:
                if "already exists" not in str(e).lower() and "marked for deletion" not in str(e):
                    raise
        assert time.monotonic() < deadline, f"{topic} could not be created again"
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def records(
    n: int,
    *,
    seed: int,
    partition: int | None = None,
    kafka_python: bool = False,
    **kw: Any,
) -> list[Rec]:
    """Sample records with headers, null keys and null values.

    kafka-python refuses a record with neither key nor value and null header values, so for it
    such records get a key and the null header values are left out.
    """
    kw.setdefault("null_keys_every", 7)
    kw.setdefault("null_values_every", 11)
    if not kafka_python:
        kw.setdefault("null_header_values_every", 13)
    out = make_records(n, seed=seed, partition=partition, **kw)
    if kafka_python:
        out = [
            r
            if r.key is not None or r.value is not None
            else Rec(b"tombstone-key", None, r.headers, r.timestamp_ms, r.partition)
            for r in out
        ]
    return out


def produce_transactional(bootstrap: str, topic: str, partition: int, recs: Iterable[Rec]) -> None:
    """Produce ``recs`` in one committed transaction with confluent-kafka."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"partsync-test-{topic}-{partition}",
            "log_level": 3,
        }
    )
    try:
        producer.init_transactions(15)
        producer.begin_transaction()
        for r in recs:
            headers: Any = r.headers or None
            producer.produce(
                topic,
                key=r.key,
                value=r.value,
                headers=headers,
                timestamp=r.timestamp_ms or 0,
                partition=partition,
            )
        producer.commit_transaction(15)
    finally:
        close = getattr(producer, "close", None)
        if close is not None:
            close()
    host, _, port = bootstrap.rpartition(":")
    wait_for_markers(host, int(port), topic, partition)


def wait_for_markers(host: str, port: int, topic: str, partition: int) -> None:
    """Until every ended transaction of the partition has its marker in the log: a
    transactional producer's commit returns once the coordinator has the decision, and the
    coordinator writes the markers after (Kafka's TransactionMarkerChannelManager), so data
    produced right after could land before the last marker. Asked of the leader with
    DescribeProducers (KIP-664) for up to 30 s; a broker that cannot tell gets a second. Then
    until the high watermark has reached the log end: the leader ends a producer's transaction
    when it appends the marker, a moment before its high watermark covers it."""
    with Connection(host, port, cluster="source") as conn:
        deadline = time.monotonic() + 30
        while conn.supports("DescribeProducers") and time.monotonic() < deadline:
            code, producers = conn.describe_producers(topic, partition)
            if code or not any(p.txn_start >= 0 for p in producers):
                break
            time.sleep(0.02)
        else:
            time.sleep(1.0)  # a broker that cannot tell: its markers are written by now
        while time.monotonic() < deadline:
            hw = conn.list_offsets(topic, [partition], LATEST)[partition]
            leo = conn.list_offsets(topic, [partition], LATEST, replica_id=DEBUG_REPLICA)
            if hw[0] or leo[partition][0] or hw[1] >= leo[partition][1]:
                return
            time.sleep(0.02)


def consumed(bootstrap: str, topic: str, partition: int) -> list[tuple[Any, ...]]:
    """Every record of a partition as comparable tuples (offset first)."""
    return [
        (r.offset, r.timestamp_type, r.timestamp, r.key, r.value, r.headers)
        for r in consume_all(bootstrap, topic, partition, timeout=30)
    ]


def assert_prefix_of(src: str, dst: str, topic: str, partition: int, end: int) -> None:
    """``dst`` holds exactly the records of ``src`` below offset ``end`` (same offsets), nothing
    else."""
    want = [r for r in consumed(src, topic, partition) if r[0] < end]
    got = consumed(dst, topic, partition)
    assert got == want, f"{topic}[{partition}]: destination is not the source's log below {end}"


def assert_same_below(x: str, y: str, topic: str, partition: int, end: int) -> None:
    """Both clusters hold the same records at every offset below ``end``."""
    xs = [r for r in consumed(x, topic, partition) if r[0] < end]
    ys = [r for r in consumed(y, topic, partition) if r[0] < end]
    assert xs and xs == ys, f"{topic}[{partition}]: the logs differ below {end}"


# --------------------------------------------------------------------------------------------
# The JSON report contract
# --------------------------------------------------------------------------------------------

# "stopped" came with the cron mode (sync --deadline, 7e87296); docs/cli.md shows the other two.
REPORT_KEYS = {"topics", "seconds", "stopped"}
# Present only when it applies: the run's group (issue 15), follow mode's --sync-groups (14),
# the error that ended the run.
OPTIONAL_REPORT_KEYS = {"group", "group_offsets", "error"}
# "unreachable" (sources that did not answer) came with issue 13; a partition's "seconds" with
# issue 15, "holes_filled" and "batches_reencoded" with issue 17, "open_transactions" with
# issue 36.
TOPIC_KEYS = {"topic", "partitions", "warnings", "unreachable"}
PARTITION_KEYS = {
    "partition",
    "status",
    "local_end_before",
    "local_end_after",
    "target_end",
    "batches",
    "bytes",
    "bytes_by_source",
    "batches_by_source",
    "reason",
    "notes",
    "seconds",
    "holes_filled",
    "batches_reencoded",
    "open_transactions",
}
# "handed-over" came with group ownership and fencing (issue 5).
# "stopped" replaced "error" for partitions a deadline or signal stopped (issue 13).
OPEN_TXN_KEYS = {"source_producer_id", "first_offset", "local_slot", "open_until_ms"}
# "behind" for a partition a replay stopped short of, before a transaction it held (issue 36).
STATUSES = {"in-sync", "synced", "behind", "unsafe", "error", "handed-over", "stopped"}


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_report(doc: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """Assert ``sync --json`` output has exactly the documented keys and types, and internally
    consistent numbers; return the partition entries by (topic, partition)."""
    assert isinstance(doc, dict) and set(doc) - OPTIONAL_REPORT_KEYS == REPORT_KEYS, doc
    if "group" in doc:
        g = doc["group"]
        assert isinstance(g, dict) and set(g) == {"name", "protocol"}, g
        assert isinstance(g["name"], str) and g["protocol"] in ("consumer", "classic"), g
    assert isinstance(doc["seconds"], (int, float)) and not isinstance(doc["seconds"], bool)
    assert doc["stopped"] in (None, "deadline", "signal"), doc
    assert doc["seconds"] >= 0
    assert isinstance(doc["topics"], list)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for t in doc["topics"]:
        assert isinstance(t, dict) and set(t) == TOPIC_KEYS, t
        assert isinstance(t["topic"], str) and t["topic"]
        assert isinstance(t["warnings"], list) and all(isinstance(w, str) for w in t["warnings"])
        assert isinstance(t["partitions"], list) and t["partitions"]
        for p in t["partitions"]:
            assert isinstance(p, dict) and set(p) == PARTITION_KEYS, p
            for k in (
                "partition",
                "local_end_before",
                "local_end_after",
                "target_end",
                "batches",
                "bytes",
                "holes_filled",
                "batches_reencoded",
            ):
                assert _is_int(p[k]), (k, p)
            assert p["status"] in STATUSES, p
            assert isinstance(p["bytes_by_source"], dict), p
            assert all(
                isinstance(s, str) and _is_int(n) and n > 0 for s, n in p["bytes_by_source"].items()
            ), p
            assert sum(p["bytes_by_source"].values()) == p["bytes"], p
            assert set(p["batches_by_source"]) == set(p["bytes_by_source"]), p
            assert sum(p["batches_by_source"].values()) == p["batches"], p
            assert p["reason"] is None or (isinstance(p["reason"], str) and p["reason"]), p
            assert isinstance(p["notes"], list) and all(
                isinstance(n, str) and n for n in p["notes"]
            )
            assert isinstance(p["seconds"], float) and p["seconds"] >= 0, p
            assert isinstance(p["open_transactions"], list), p
            for txn in p["open_transactions"]:
                assert set(txn) == OPEN_TXN_KEYS and all(_is_int(v) for v in txn.values()), p
            assert p["local_end_after"] >= p["local_end_before"] >= 0, p
            if p["status"] == "in-sync":
                assert p["local_end_before"] == p["local_end_after"] == p["target_end"], p
                assert p["batches"] == p["bytes"] == 0 and p["reason"] is None, p
            elif p["status"] == "synced":
                assert p["local_end_after"] == p["target_end"] > p["local_end_before"], p
                assert p["batches"] > 0 and p["reason"] is None, p
            elif p["status"] == "behind":
                assert p["local_end_after"] < p["target_end"] and p["reason"], p
            else:
                assert p["reason"], p
            key = (t["topic"], p["partition"])
            assert key not in out, f"partition listed twice: {key}"
            out[key] = p
    return out


def by_partition(doc: Any, topic: str) -> dict[int, dict[str, Any]]:
    """The checked report's entries for one topic, by partition number."""
    return {p: e for (t, p), e in check_report(doc).items() if t == topic}


def check_plan(doc: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """Assert the shape of ``plan --json`` output; return partition plans by (topic, partition)."""
    assert isinstance(doc, dict) and set(doc) == {"topics"}, doc
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for t in doc["topics"]:
        assert set(t) == {
            "topic",
            "refused",
            "error",
            "warnings",
            "unreachable",
            "grow",
            "partitions",
        }, t
        assert t["grow"] is None or set(t["grow"]) == {"from", "to"}, t
        for p in t["partitions"]:
            assert set(p) == {
                "topic",
                "partition",
                "condition",
                "local",
                "sources",
                "target_end",
                "missing",
                "ranges",
                "reason",
                "bootstrap",
                "scan",
            }, p
            assert (
                p["scan"] is None
                or set(p["scan"])
                == {
                    "start",
                    "end",
                    "batches",
                    "bytes",
                    "holes",
                    "holes_between_batches",
                    "holes_inside_batches",
                    "batches_with_holes",
                    "transactional_batches",
                    "committed",
                    "aborted",
                    "most_open_transactions",
                    "open_at_end",
                    "most_held_bytes",
                    "stop",
                    "error",
                }
                or set(p["scan"]) == {"stop", "error"}
            ), p
            assert p["condition"] in {"in-sync", "behind", "unsafe", "unknown"}, p
            assert set(p["local"]) == {"log_start", "end"}, p
            for b in p["sources"].values():
                assert set(b) == {"log_start", "high_watermark"}, p
            assert p["missing"] == max(0, p["target_end"] - p["local"]["end"]), p
            if p["condition"] == "behind":
                # One contiguous run of ranges from the local end to the target.
                # A bootstrap starts at the sources' log start (fillers cover the rest).
                edges = [(r["start"], r["end"]) for r in p["ranges"]]
                boot = p["bootstrap"]
                first = boot["log_start"] if boot else p["local"]["end"]
                assert boot is None or boot["fill_from"] == p["local"]["end"] < first, p
                assert edges and edges[0][0] == first, p
                assert edges[-1][1] == p["target_end"], p
                assert all(x[1] == y[0] for x, y in itertools.pairwise(edges)), p
                for r in p["ranges"]:
                    src = p["sources"][r["source"]]
                    assert src["log_start"] <= r["start"] < r["end"] <= src["high_watermark"], p
            else:
                assert p["ranges"] == [], p
            out[(t["topic"], p["partition"])] = p
    return out


# --------------------------------------------------------------------------------------------
# Raw record batches
#
# RecordBatch v2 after BatchLength: PartitionLeaderEpoch int32, Magic int8, CRC uint32,
# Attributes int16, LastOffsetDelta int32, BaseTimestamp int64, MaxTimestamp int64,
# ProducerId int64, ProducerEpoch int16, BaseSequence int32, RecordCount int32, Records.
# Record: Length varint, Attributes int8, TimestampDelta varlong, OffsetDelta varint,
# Key varbytes, Value varbytes, Headers [varint count].
# --------------------------------------------------------------------------------------------

_AFTER_LENGTH = struct.Struct(">ibIhiqqqhii")
CONTROL_ATTRIBUTES = 0x30  # control + transactional, as a coordinator writes markers


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _varbytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def raw_record(offset_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = b"\x00" + _varint(offset_delta) + _varint(offset_delta) + _varbytes(key)
    body += _varbytes(value) + _varint(0)
    return _varint(len(body)) + body


def raw_batch(
    recs: Sequence[bytes],
    last_offset_delta: int,
    *,
    attributes: int = 0,
    base_timestamp: int = 1_700_000_000_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> bytes:
    """An uncompressed v2 batch with a valid CRC; ``last_offset_delta`` may exceed
    ``len(recs) - 1`` (a compacted batch with holes)."""
    tail = _AFTER_LENGTH.pack(
        0,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        base_timestamp + last_offset_delta,
        producer_id,
        producer_epoch,
        -1,
        len(recs),
    ) + b"".join(recs)
    buf = bytearray(struct.pack(">qi", 0, len(tail)) + tail)
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf))
    return bytes(buf)


def try_produce_raw(broker: Broker, topic: str, partition: int, batch: bytes) -> ProducedPartition:
    """Send one raw batch in one Produce request; return the broker's answer as it is."""
    with Connection(broker.host, broker.port, cluster=broker.kind) as conn:
        conn.send_produce(topic, {partition: batch}, acks=-1)
        return conn.receive_produce()[partition]


def produce_raw(broker: Broker, topic: str, partition: int, batch: bytes) -> int:
    """Append one raw batch (one Produce request); return the base offset the broker gave it."""
    res = try_produce_raw(broker, topic, partition, batch)
    assert res.error_code == 0, f"raw produce to {broker.kind} failed: {res}"
    return res.base_offset


def fetch_batches(broker: Broker, topic: str, partition: int, start: int = 0) -> list[Batch]:
    """Every stored batch from the one containing ``start`` to the end, as the broker has them."""
    out: list[Batch] = []
    offset = start
    with Connection(broker.host, broker.port, cluster=broker.kind) as conn:
        while True:
            f = conn.fetch(topic, [(partition, offset, 1 << 20)], max_wait_ms=100, min_bytes=1)
            got = f[partition]
            assert got.error_code == 0, got
            # Parse copies, so the batches outlive the response buffer.
            batches = [
                Batch.parse(memoryview(bytes(b.data)))
                for b in iter_batches(got.records, start=offset)
            ]
            out.extend(batches)
            if batches:
                offset = batches[-1].next_offset
            if offset >= got.high_watermark:
                return out
            if not batches:
                time.sleep(0.05)


def append_copies(src: Broker, dst: Broker, topic: str, partition: int, start: int) -> int:
    """Append ``src``'s batches from ``start`` onwards to ``dst`` byte for byte (shallow, no
    partsync checks), asserting each lands at its source offset; return the new end."""
    end = start
    for b in fetch_batches(src, topic, partition, start):
        data = bytes(rewrite_for_append(b, -1, -1, -1))
        landed = produce_raw(dst, topic, partition, data)
        assert landed == b.base_offset, f"batch {b.base_offset} landed at {landed}"
        end = b.next_offset
    return end


def _stored_form(b: Batch) -> tuple[bytes, bytes, bytes]:
    """What a shallow copy keeps: base offset, attributes through max timestamp, record count and
    the (possibly compressed) record bytes. Leaves out the leader epoch, the CRC and the producer
    id/epoch/sequence, which the copy legitimately rewrites."""
    data = bytes(b.data)
    return data[0:8], data[21:43], data[57:]


def assert_batches_identical(src: Broker, dst: Broker, topic: str, partition: int) -> int:
    """The destination stores the source's batches byte for byte (same boundaries, codec and
    compressed bytes), not merely the same records; returns the batch count."""
    theirs = [_stored_form(b) for b in fetch_batches(src, topic, partition)]
    ours = [_stored_form(b) for b in fetch_batches(dst, topic, partition)]
    assert len(ours) == len(theirs), f"{topic}[{partition}]: {len(theirs)} batches vs {len(ours)}"
    for i, (x, y) in enumerate(zip(theirs, ours)):
        assert x == y, f"{topic}[{partition}]: batch #{i} differs (source base {x[0].hex()})"
    return len(ours)
