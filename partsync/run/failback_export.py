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

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from partsync.errors import PartsyncError, TopicError, UsageError
from partsync.io.cluster import Cluster
from partsync.io.reader import read_batches
from partsync.io.record_topic import append_plain
from partsync.plan.failback import (
    ExportCount,
    TxnEvent,
    orphan_markers,
    transaction_starts,
    transaction_states,
)
from partsync.plan.topic_configs import MIRROR_OWNED
from partsync.wire.batch import Batch
from partsync.wire.export import Origin, export_batch, record_line
from partsync.wire.markers import marker_name, marker_type
from partsync.wire.records import Record, iter_records

__all__ = ["ExportTarget", "ensure_export_topic", "export_partition"]

_FETCH_BYTES = 4 << 20
# Records per exported batch, and bytes: well inside Kafka's default max.message.bytes (1 MiB);
# a record bigger than that goes alone, in a topic created to take the old topic's biggest.
_BATCH_RECORDS = 500
_BATCH_BYTES = 512 << 10
_RECORD_OVERHEAD = 32  # a record's varints and attributes, at most
# Offsets read back from a divergence point at first, looking for where a transaction open
# there began (then four times as many, until found or at the log start).
_WINDOW = 1000
# An export topic keeps what it holds, at the records' own (maybe old) timestamps.
EXPORT_TOPIC_CONFIGS = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    **MIRROR_OWNED,
}


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


def _event(b: Batch) -> TxnEvent:
    marker = marker_name(marker_type(b)) if b.is_control else None
    return TxnEvent(b.base_offset, b.producer_id, b.is_transactional, marker)


def _straddling(
    old: Cluster, topic: str, partition: int, start: int, pids: set[int]
) -> dict[int, int]:
    """Where each transaction of ``pids`` open at ``start`` began: read back from ``start`` in
    growing windows until each producer's last marker before it (or the log start) is seen."""
    if not pids:
        return {}
    log_start = old.bounds(topic, [partition])[partition].log_start
    window = _WINDOW
    while True:
        lo = max(log_start, start - window)
        events = [
            _event(b) for b in _batches(old, topic, partition, lo, start) if b.base_offset < start
        ]
        starts, unresolved = transaction_starts(events, pids, from_log_start=lo == log_start)
        if not unresolved:
            return starts
        window *= 4


def _straddles(b: Batch, start: int, straddle: dict[int, int]) -> bool:
    """A data batch below ``start`` of a transaction open there."""
    first = straddle.get(b.producer_id)
    return (
        first is not None
        and b.base_offset < start
        and b.is_transactional
        and not b.is_control
        and b.base_offset >= first
    )


def export_partition(
    old: Cluster,
    new: Cluster,
    topic: str,
    partition: int,
    rng: tuple[int, int],
    diverged_at: int,
    target: ExportTarget,
    *,
    promoted_ms: int = 0,
    dry_run: bool = False,
) -> ExportCount:
    """Export ``[start, end)`` of the old primary's partition, and below ``start`` the data of
    transactions open there whose markers lie past it (counted only, on a dry run)."""
    start, end = rng
    tail = [_event(b) for b in _batches(old, topic, partition, start, end)]
    straddle = _straddling(old, topic, partition, start, orphan_markers(tail))
    lo = min([start, *straddle.values()])
    below = [
        _event(b)
        for b in _batches(old, topic, partition, lo, start)
        if _straddles(b, start, straddle)
    ]
    states = transaction_states([*below, *tail])
    job = Origin(old.name, topic, partition, 0, diverged_at, promoted_ms=promoted_ms)
    files = None if dry_run or target.directory is None else _Files(target.directory, job)
    if files is not None and files.done(lo, end):
        files = None
    out_topic = None if dry_run else target.topic_for(topic)
    after = lo - 1
    if out_topic is not None:
        after = max(after, _resume_after(new, out_topic, partition, job))
    count = ExportCount()
    out = _TopicOut(new, out_topic, partition) if out_topic is not None else None
    if files is not None:
        files.open()
    for b in _batches(old, topic, partition, lo, end):
        straddling = _straddles(b, start, straddle)
        if straddling:
            records = list(iter_records(b))
        elif b.last_offset >= start:
            records = [r for r in iter_records(b) if r.offset >= start]
        else:
            continue
        marker = marker_name(marker_type(b)) if b.is_control else None
        state = states.get(b.base_offset)
        count.add(len(records), b.size, state, marker=marker is not None, straddling=straddling)
        if files is not None:
            files.write(b, records, state, marker)
        if out is None or marker is not None:
            continue
        for r in records:
            if r.offset > after:
                out.add(r, dataclasses.replace(job, offset=r.offset, transaction=state))
    if out is not None:
        out.flush()
    if files is not None:
        files.close(lo, end, count)
    return count


class _TopicOut:
    """Records for the export topic, appended in batches that stay within its size limit."""

    def __init__(self, new: Cluster, topic: str, partition: int) -> None:
        self.new, self.topic, self.partition = new, topic, partition
        self.pending: list[tuple[Record, Origin]] = []
        self.size = 0

    def add(self, r: Record, origin: Origin) -> None:
        size = _RECORD_OVERHEAD + len(r.key or b"") + len(r.value or b"")
        size += sum(len(k) + len(v or b"") for k, v in r.headers) + len(origin.to_bytes())
        if self.pending and (
            len(self.pending) >= _BATCH_RECORDS or self.size + size > _BATCH_BYTES
        ):
            self.flush()
        self.pending.append((r, origin))
        self.size += size

    def flush(self) -> None:
        if self.pending:
            _append(self.new, self.topic, self.partition, self.pending)
            self.pending, self.size = [], 0


def _append(new: Cluster, topic: str, partition: int, records: list[tuple[Record, Origin]]) -> None:
    append_plain(new, topic, partition, export_batch(records), "exporting the old primary's tail")


def ensure_export_topic(new: Cluster, name: str, partitions: int, max_bytes: int | None) -> None:
    """The export topic on the new primary, created with ``partitions`` (keeping what it holds)
    where it does not exist, taking batches of ``max_bytes`` (the old topic's limit) and a
    little more for the origin headers; an existing one needs at least as many partitions."""
    info = new.topic(name, refresh=True)
    if info is None:
        configs = dict(EXPORT_TOPIC_CONFIGS)
        if max_bytes is not None:
            configs["max.message.bytes"] = str(max(max_bytes, _BATCH_BYTES) + (64 << 10))
        new.create_topic(name, partitions, configs)
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
    """The export files of one partition (temporary names until complete), for one failback
    (``job``: the old primary, topic, partition, divergence point and promotion)."""

    def __init__(self, directory: Path, job: Origin) -> None:
        self.directory = directory
        self.job = job
        self.base = directory / job.topic / str(job.partition)

    def _identity(self) -> dict[str, object]:
        j = self.job
        return {
            "cluster": j.cluster,
            "topic": j.topic,
            "partition": j.partition,
            "diverged_at": j.diverged_at,
            "promoted_ms": j.promoted_ms,
        }

    def done(self, start: int, end: int) -> bool:
        """Whether a complete export of this failback covering ``[start, end)`` is there.
        Another failback's (or one that no longer covers the range) is never overwritten."""
        manifest = self.base.with_suffix(".json")
        try:
            d = json.loads(manifest.read_text())
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as e:
            raise PartsyncError(f"export manifest {manifest} cannot be read: {e}") from e
        mine = all(d.get(k) == v for k, v in self._identity().items())
        rng = d.get("range") or [None, None]
        if mine and rng[0] is not None and rng[0] <= start and rng[1] == end:
            return True
        raise PartsyncError(
            f"export directory {self.directory} holds another export of topic {self.job.topic} "
            f"partition {self.job.partition} ({manifest}: {json.dumps(d.get('range'))}, "
            f"diverged at {d.get('diverged_at')}, promotion {d.get('promoted_ms')}); this "
            f"failback exports [{start}, {end}): give another --export-dir",
            topic=self.job.topic,
            partition=self.job.partition,
        )

    def open(self) -> None:
        try:
            self.base.parent.mkdir(parents=True, exist_ok=True)
            self._lines = open(f"{self.base}.jsonl.tmp", "w", encoding="utf-8")  # noqa: SIM115
            self._raw = open(f"{self.base}.batches.tmp", "wb")  # noqa: SIM115
        except OSError as e:
            raise PartsyncError(
                f"export directory {self.directory}: {e}", topic=self.job.topic
            ) from e

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

    def close(self, start: int, end: int, count: ExportCount) -> None:
        base = self.base
        for f in (self._lines, self._raw):
            f.flush()
            os.fsync(f.fileno())
            f.close()
        os.replace(f"{base}.jsonl.tmp", f"{base}.jsonl")
        os.replace(f"{base}.batches.tmp", f"{base}.batches")
        doc = {
            **self._identity(),
            "range": [start, end],
            **count.to_dict(),
            "files": {"records": f"{base.name}.jsonl", "batches": f"{base.name}.batches"},
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
