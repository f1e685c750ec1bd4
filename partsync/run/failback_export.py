"""A failback's export: the old primary's diverged tail of a partition, written before anything
is deleted, so that nothing it held is lost.

- **Files** (``--export-dir``): per partition ``<topic>/<partition>.jsonl`` (one JSON line per
  record, markers included, with its transaction state) and ``<topic>/<partition>.batches``
  (the batches as the old primary stores them, byte for byte, for a replay that must be
  exact), then ``<topic>/<partition>.json`` naming what they hold. Each is written to a
  temporary name and renamed: a kill -9 leaves either the whole file or none, and a rerun
  whose manifest names the same range leaves them as they are.
- **A topic on the new primary** (``--export-topic``): the data records (not the markers),
  with their keys, values, headers and timestamps, each with a header naming its origin
  (``wire.export``), into the same partition number, one batch at a time with acks=all. A
  rerun reads the last record's origin there and resumes after it, so a kill -9 leaves no
  duplicate.

Transaction states come from a first pass over the tail (a transaction's marker follows its
data): ``committed``, ``aborted``, or ``open`` where the old primary holds no marker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from partsync.errors import PartsyncError, TopicError, UsageError
from partsync.io.cluster import Cluster
from partsync.io.reader import read_batches
from partsync.io.record_topic import append_plain
from partsync.plan.failback import ExportCount, TxnEvent, transaction_states
from partsync.wire.batch import Batch
from partsync.wire.export import Origin, export_batch, record_line
from partsync.wire.markers import marker_name, marker_type
from partsync.wire.records import Record, iter_records

__all__ = ["ExportTarget", "ensure_export_topic", "export_partition"]

_FETCH_BYTES = 4 << 20
# Records per exported batch, and bytes: well inside Kafka's default max.message.bytes (1 MiB).
_BATCH_RECORDS = 500
_BATCH_BYTES = 512 << 10
# An export topic keeps what it holds: the records' own timestamps may be old.
EXPORT_TOPIC_CONFIGS = {"retention.ms": "-1", "cleanup.policy": "delete"}


@dataclass(frozen=True)
class ExportTarget:
    """Where exports go: a directory and/or a topic on the new primary (``{topic}`` in its
    name stands for the exported topic's name)."""

    directory: Path | None = None
    topic: str | None = None

    @property
    def any(self) -> bool:
        return self.directory is not None or self.topic is not None

    def topic_for(self, topic: str) -> str | None:
        return None if self.topic is None else self.topic.replace("{topic}", topic)

    def check(self, topics: int) -> None:
        if self.topic is not None and topics > 1 and "{topic}" not in self.topic:
            raise UsageError(
                f"--export-topic {self.topic}: several topics are failed back; put {{topic}} in "
                "the name, so each topic's export has a topic of its own"
            )


def _batches(old: Cluster, topic: str, partition: int, start: int, end: int) -> Iterator[Batch]:
    conn = old.connect_leader(topic, partition)
    try:
        yield from read_batches(
            conn, old.name, topic, partition, start, end, fetch_bytes=_FETCH_BYTES
        )
    finally:
        old.release(conn)


def _states(old: Cluster, topic: str, partition: int, start: int, end: int) -> dict[int, str]:
    events = []
    for b in _batches(old, topic, partition, start, end):
        marker = marker_name(marker_type(b)) if b.is_control else None
        events.append(TxnEvent(b.base_offset, b.producer_id, b.is_transactional, marker))
    return transaction_states(events)


def export_partition(
    old: Cluster,
    new: Cluster,
    topic: str,
    partition: int,
    rng: tuple[int, int],
    diverged_at: int,
    target: ExportTarget,
    *,
    dry_run: bool = False,
) -> ExportCount:
    """Export ``[start, end)`` of the old primary's partition (counted only, on a dry run)."""
    start, end = rng
    states = _states(old, topic, partition, start, end)
    files = None if dry_run or target.directory is None else _Files(target.directory, old.name)
    if files is not None and files.done(topic, partition, start, end):
        files = None
    out_topic = None if dry_run else target.topic_for(topic)
    after = start - 1
    if out_topic is not None:
        mine = Origin(old.name, topic, partition, 0, diverged_at)
        after = max(after, _resume_after(new, out_topic, partition, mine))
    count = ExportCount()
    pending: list[tuple[Record, Origin]] = []
    size = 0
    if files is not None:
        files.open(topic, partition)
    for b in _batches(old, topic, partition, start, end):
        records = [r for r in iter_records(b) if r.offset >= start]
        marker = marker_name(marker_type(b)) if b.is_control else None
        state = states.get(b.base_offset)
        count.add(len(records), b.size, state, marker=marker is not None)
        if files is not None:
            files.write(b, records, state, marker)
        if out_topic is None or marker is not None:
            continue
        for r in records:
            if r.offset <= after:
                continue
            pending.append((r, Origin(old.name, topic, partition, r.offset, diverged_at, state)))
            size += len(r.key or b"") + len(r.value or b"")
            if len(pending) >= _BATCH_RECORDS or size >= _BATCH_BYTES:
                _append(new, out_topic, partition, pending)
                pending, size = [], 0
    if out_topic is not None and pending:
        _append(new, out_topic, partition, pending)
    if files is not None:
        files.close(topic, partition, start, end, count)
    return count


def _append(new: Cluster, topic: str, partition: int, records: list[tuple[Record, Origin]]) -> None:
    append_plain(new, topic, partition, export_batch(records), "exporting the old primary's tail")


def ensure_export_topic(new: Cluster, name: str, partitions: int) -> None:
    """The export topic on the new primary, created with ``partitions`` (keeping what it holds)
    where it does not exist; an existing one needs at least as many partitions."""
    info = new.topic(name, refresh=True)
    if info is None:
        new.create_topic(name, partitions, dict(EXPORT_TOPIC_CONFIGS))
    elif info.partitions < partitions:
        raise TopicError(
            f"the export topic has {info.partitions} partitions, fewer than the {partitions} "
            "of the topic exported into it (partition for partition)",
            cluster=new.name,
            topic=name,
        )


def _resume_after(new: Cluster, topic: str, partition: int, mine: Origin) -> int:
    """The last offset already exported to ``topic`` by this failback of the partition (its
    last record's origin), or the one before the range."""
    b = new.bounds(topic, [partition])[partition]
    if b.end == b.log_start:
        return -1
    last: Record | None = None
    conn = new.connect_leader(topic, partition)
    try:
        for batch in read_batches(
            conn, new.name, topic, partition, b.end - 1, b.end, fetch_bytes=_FETCH_BYTES
        ):
            for r in iter_records(batch):
                last = r
    finally:
        new.release(conn)
    origin = None if last is None else Origin.of(last.headers)
    if origin is not None and origin.same_export(mine):
        return origin.offset
    return -1


class _Files:
    """The export files of one partition at a time (temporary names until complete)."""

    def __init__(self, directory: Path, cluster: str) -> None:
        self.directory = directory
        self.cluster = cluster

    def _base(self, topic: str, partition: int) -> Path:
        return self.directory / topic / str(partition)

    def done(self, topic: str, partition: int, start: int, end: int) -> bool:
        manifest = self._base(topic, partition).with_suffix(".json")
        try:
            d = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return False
        want = {"cluster": self.cluster, "topic": topic, "partition": partition}
        return all(d.get(k) == v for k, v in want.items()) and d.get("range") == [start, end]

    def open(self, topic: str, partition: int) -> None:
        base = self._base(topic, partition)
        try:
            base.parent.mkdir(parents=True, exist_ok=True)
            self._lines = open(f"{base}.jsonl.tmp", "w", encoding="utf-8")  # noqa: SIM115
            self._raw = open(f"{base}.batches.tmp", "wb")  # noqa: SIM115
        except OSError as e:
            raise PartsyncError(f"export directory {self.directory}: {e}", topic=topic) from e

    def write(self, b: Batch, records: list[Record], state: str | None, marker: str | None) -> None:
        self._raw.write(b.data)
        for r in records:
            self._lines.write(
                record_line(
                    r,
                    producer_id=b.producer_id,
                    transaction=state,
                    log_append_time=b.log_append_time,
                    marker=marker,
                )
                + "\n"
            )

    def close(self, topic: str, partition: int, start: int, end: int, count: ExportCount) -> None:
        base = self._base(topic, partition)
        for f in (self._lines, self._raw):
            f.flush()
            os.fsync(f.fileno())
            f.close()
        os.replace(f"{base}.jsonl.tmp", f"{base}.jsonl")
        os.replace(f"{base}.batches.tmp", f"{base}.batches")
        doc = {
            "cluster": self.cluster,
            "topic": topic,
            "partition": partition,
            "range": [start, end],
            **count.to_dict(),
            "files": {"records": f"{partition}.jsonl", "batches": f"{partition}.batches"},
        }
        tmp = f"{base}.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, base.with_suffix(".json"))
        fd = os.open(base.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
