"""``partsync diff``: are N clusters' copies of a partition identical? Read-only.

Per partition: read every cluster's bounds, take the common range ``[max log start, min high
watermark)`` (what every cluster holds; the rest is lag, not divergence), stream that range from
every cluster chunk by chunk, digest it (``partsync.digest``) and compare the chunk digests. The
first chunk whose digests differ is opened to its first divergent batch, and a divergent batch
to its first divergent record, so the report names an exact offset and the clusters that
disagree there.

Levels: ``batch`` compares ``Batch.digest()`` (no decompression; partsync's shallow copies compare
equal), ``record`` decompresses and compares records (offset, timestamp, key, value, headers), so
clusters with different batch boundaries can still be compared offset by offset.

``diff_partition`` takes plain data (cluster references, topic, partition, options) and returns a
frozen ``PartitionDiff``; it never raises for Kafka or data problems, so an engine can run it per
partition (or per offset range with ``DiffOptions.within``) on threads or on Spark executors.
"""

from __future__ import annotations

import enum
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from partsync._kafka import (
    PROBE_WAIT_MS,
    Connection,
    fetch_error,
)
from partsync.batch import Batch, iter_batches
from partsync.cluster import Cluster
from partsync.config import ClusterRef
from partsync.digest import (
    DEFAULT_CHUNK_OFFSETS,
    ChunkDigest,
    Divergence,
    batch_unit,
    describe_record_difference,
    first_divergence,
    iter_chunks,
    record_unit,
)
from partsync.digest import compare_chunks as _compare_chunks
from partsync.errors import (
    ClusterError,
    CorruptBatchError,
    ExitStatus,
    PartsyncError,
    UsageError,
)
from partsync.plan import Bounds
from partsync.records import Record, iter_records
from partsync.selection import select
from partsync.task import ClusterPool

__all__ = [
    "DiffOptions",
    "DiffReport",
    "DiffRequest",
    "DiffStatus",
    "Level",
    "PartitionDiff",
    "TopicDiff",
    "common_range",
    "diff_partition",
    "diff_topics",
    "lags",
]

log = logging.getLogger(__name__)

_MAX_FETCH_BYTES = 64 << 20
# Attribute bits other than codec (0-2), timestamp type (3), transactional (4), control (5).
_OTHER_ATTRIBUTES = 0xFFC0


class Level(str, enum.Enum):
    BATCH = "batch"
    RECORD = "record"


class DiffStatus(str, enum.Enum):
    IDENTICAL = "identical"
    LAGGING = "lagging"
    DIVERGENT = "divergent"
    ERROR = "error"


@dataclass(frozen=True)
class DiffOptions:
    """Knobs of one diff.

    ``chunk_offsets``: offsets per range-digest chunk (the unit confirmed equal at once).
    ``fetch_bytes``: max bytes per fetch (noida ignores it). ``prefetch_chunks``: chunks each
    cluster's reader may digest ahead of the comparison (the memory bound per cluster).
    ``within``: compare only ``[a, b)`` of the common range (for engines that split partitions).
    """

    level: Level = Level.BATCH
    chunk_offsets: int = DEFAULT_CHUNK_OFFSETS
    fetch_bytes: int = 4 << 20
    fetch_wait_ms: int = PROBE_WAIT_MS
    prefetch_chunks: int = 2
    within: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.chunk_offsets < 1:
            raise UsageError("chunk size must be at least one offset")
        if self.fetch_bytes < 1024:
            raise UsageError("fetch size must be at least 1024 bytes")
        if self.prefetch_chunks < 1:
            raise UsageError("prefetch must be at least one chunk")


def common_range(bounds: Mapping[str, Bounds]) -> tuple[int, int]:
    """``[max log start, min high watermark)``; empty (start == end) when nothing is shared."""
    start = max(b.log_start for b in bounds.values())
    end = min(b.end for b in bounds.values())
    return start, max(start, end)


def lags(bounds: Mapping[str, Bounds]) -> dict[str, int]:
    """Each cluster's distance behind the furthest high watermark."""
    top = max(b.end for b in bounds.values())
    return {name: top - b.end for name, b in bounds.items()}


@dataclass(frozen=True)
class PartitionDiff:
    """One partition's comparison across clusters (``to_dict`` is the JSON contract)."""

    topic: str
    partition: int
    status: DiffStatus
    level: Level
    clusters: Mapping[str, Bounds | None]
    common_range: tuple[int, int] | None = None
    first_divergent_offset: int | None = None
    disagreeing: tuple[str, ...] = ()
    lag: Mapping[str, int] = field(default_factory=dict)
    reason: str | None = None
    unreachable: tuple[str, ...] = ()
    chunks: int = 0
    bytes_read: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "clusters": {
                name: {
                    "log_start": b.log_start if b else None,
                    "high_watermark": b.end if b else None,
                }
                for name, b in self.clusters.items()
            },
            "common_range": list(self.common_range) if self.common_range is not None else None,
            "status": self.status.value,
            "first_divergent_offset": self.first_divergent_offset,
            "disagreeing": list(self.disagreeing),
            "lag": dict(self.lag),
            "reason": self.reason,
            "unreachable": list(self.unreachable),
            "level": self.level.value,
            "chunks_compared": self.chunks,
            "bytes_read": dict(self.bytes_read),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class TopicDiff:
    """A topic's partitions, plus a topic-wide finding (partition counts differ, a cluster
    unreachable, the topic missing somewhere)."""

    topic: str
    partitions: tuple[PartitionDiff, ...]
    partition_counts: Mapping[str, int | None] = field(default_factory=dict)
    reason: str | None = None
    topic_status: DiffStatus | None = None

    @property
    def status(self) -> DiffStatus:
        statuses = {p.status for p in self.partitions}
        if self.topic_status is not None:
            statuses.add(self.topic_status)
        for s in (DiffStatus.DIVERGENT, DiffStatus.ERROR, DiffStatus.LAGGING):
            if s in statuses:
                return s
        return DiffStatus.IDENTICAL

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "status": self.status.value,
            "reason": self.reason,
            "partition_counts": dict(self.partition_counts),
            "partitions": [p.to_dict() for p in sorted(self.partitions, key=lambda p: p.partition)],
        }


@dataclass(frozen=True)
class DiffReport:
    topics: tuple[TopicDiff, ...]
    clusters: tuple[str, ...]
    level: Level
    chunk_offsets: int
    seconds: float = 0.0

    def all_partitions(self) -> list[PartitionDiff]:
        return [p for t in self.topics for p in t.partitions]

    @property
    def exit_status(self) -> ExitStatus:
        """3 any divergence (it needs a person, so it wins); 1 any other failure; else 0."""
        statuses = {t.status for t in self.topics}
        if DiffStatus.DIVERGENT in statuses:
            return ExitStatus.UNSAFE
        if DiffStatus.ERROR in statuses:
            return ExitStatus.FAILURE
        return ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusters": list(self.clusters),
            "level": self.level.value,
            "chunk_offsets": self.chunk_offsets,
            "topics": [t.to_dict() for t in self.topics],
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class DiffRequest:
    topics: tuple[str, ...]
    clusters: tuple[ClusterRef, ...]
    partitions: frozenset[int] | None = None
    options: DiffOptions = DiffOptions()

    def __post_init__(self) -> None:
        if len(self.clusters) < 2:
            raise UsageError("diff needs at least two clusters")


# -- reading one cluster's range -------------------------------------------------------------


def _read_batches(
    conn: Connection,
    cluster: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    opts: DiffOptions,
    counter: list[int] | None = None,
) -> Iterator[Batch]:
    """Every batch overlapping ``[start, end)``, CRC-checked, fetched as the loop goes.

    The first batch may begin below ``start`` (a fetch returns the batch containing the fetch
    offset); a truncated tail batch is dropped by ``iter_batches`` and fetched whole next time.
    """
    offset = start
    size = opts.fetch_bytes
    while offset < end:
        fetched = conn.fetch(
            topic, [(partition, offset, size)],
            max_wait_ms=opts.fetch_wait_ms, min_bytes=1, max_bytes=size,
        )  # fmt: skip
        f = fetched.get(partition)
        if f is None:
            raise ClusterError("fetch returned no data for the partition", cluster=cluster,
                               topic=topic, partition=partition, offset=offset)  # fmt: skip
        if f.error_code:
            raise fetch_error(cluster, topic, partition, offset, f.error_code)
        progressed = False
        for b in iter_batches(f.records, start=offset):
            if b.base_offset >= end:
                return
            if not b.crc_ok():
                raise CorruptBatchError(
                    f"stored batch {b.base_offset}..{b.last_offset} fails its CRC32C check",
                    cluster=cluster, topic=topic, partition=partition, offset=b.base_offset,
                )  # fmt: skip
            progressed = True
            offset = b.next_offset
            if counter is not None:
                counter[0] += b.size
            yield b
            if offset >= end:
                return
        if not progressed:
            if 0 <= f.high_watermark <= offset:
                raise ClusterError(
                    f"high watermark {f.high_watermark} fell below the compared range end {end} "
                    "(truncated, or the leader changed)",
                    cluster=cluster, topic=topic, partition=partition, offset=offset,
                )  # fmt: skip
            if size >= _MAX_FETCH_BYTES:
                raise ClusterError(
                    f"fetch returned no whole batch even with {size} bytes",
                    cluster=cluster, topic=topic, partition=partition, offset=offset,
                )  # fmt: skip
            size = min(_MAX_FETCH_BYTES, size * 4)  # a batch bigger than the fetch size


def _records_in(batches: Iterator[Batch], start: int, end: int) -> Iterator[Record]:
    for b in batches:
        for r in iter_records(b):
            if start <= r.offset < end:
                yield r


def _chunk_stream(
    cluster: Cluster,
    topic: str,
    partition: int,
    start: int,
    end: int,
    opts: DiffOptions,
    counter: list[int],
) -> Iterator[ChunkDigest]:
    """One cluster's range as chunk digests, over a dedicated connection to the leader."""
    conn = cluster.connect_leader(topic, partition)
    try:
        batches = _read_batches(conn, cluster.name, topic, partition, start, end, opts, counter)
        if opts.level is Level.BATCH:
            units = (batch_unit(b) for b in batches)
        else:
            units = (record_unit(r) for r in _records_in(batches, start, end))
        try:
            yield from iter_chunks(units, opts.chunk_offsets, start=start)
        except CorruptBatchError as e:
            raise CorruptBatchError(e.reason, cluster=cluster.name, topic=topic,
                                    partition=partition, offset=e.offset) from None  # fmt: skip
    finally:
        conn.close()


class _Reader:
    """Runs one cluster's chunk stream on a thread, ``depth`` chunks ahead of the comparison, so
    clusters are fetched and digested in parallel while memory stays bounded."""

    def __init__(self, name: str, make: Callable[[], Iterator[ChunkDigest]], depth: int) -> None:
        self.name = name
        self._make = make
        self._q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"diff-{name}", daemon=True)
        self._thread.start()

    def _put(self, msg: tuple[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(msg, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            it = self._make()
            try:
                for item in it:
                    if not self._put(("chunk", item)):
                        return
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()
            self._put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the comparing thread, which raises it
            self._put(("error", e))

    def __iter__(self) -> Iterator[ChunkDigest]:
        while True:
            try:
                kind, value = self._q.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive() and self._q.empty():
                    raise ClusterError("reader stopped unexpectedly", cluster=self.name) from None
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


# -- narrowing a divergence ------------------------------------------------------------------


def _batch_at(
    cluster: Cluster, topic: str, partition: int, offset: int, opts: DiffOptions
) -> Batch | None:
    with cluster.connect_leader(topic, partition) as conn:
        for b in _read_batches(conn, cluster.name, topic, partition, offset, offset + 1, opts):
            return b if b.base_offset <= offset <= b.last_offset else None
    return None


def _record_at(batch: Batch | None, offset: int) -> Record | None:
    if batch is None:
        return None
    return next((r for r in iter_records(batch) if r.offset == offset), None)


def _spans(div: Divergence) -> str:
    return ", ".join(
        f"{n} {'has no batch there' if u is None else 'holds ' + u.span}"
        for n, u in div.units.items()
    )


def _header_differences(batches: Mapping[str, Batch | None], reference: str) -> str:
    ref = batches[reference]
    out = []
    for name, b in batches.items():
        if name == reference or b is None or ref is None:
            continue
        fields = []
        if b.codec != ref.codec:
            fields.append(f"codec {ref.codec} vs {b.codec}")
        if b.base_timestamp != ref.base_timestamp or b.max_timestamp != ref.max_timestamp:
            fields.append("batch timestamps")
        if (b.attributes ^ ref.attributes) & _OTHER_ATTRIBUTES:
            fields.append("attributes")
        if b.log_append_time != ref.log_append_time:
            fields.append("timestamp type")
        if fields:
            out.append(f"{name} vs {reference}: {', '.join(fields)}")
    return "; ".join(out)


def _narrow(
    div: Divergence,
    clusters: Mapping[str, Cluster],
    topic: str,
    partition: int,
    start: int,
    end: int,
    opts: DiffOptions,
) -> tuple[int, tuple[str, ...], str]:
    """(first divergent offset, disagreeing clusters, reason) for a divergence found in chunks."""
    reference = div.agreeing[0]
    if opts.level is Level.RECORD:
        got = {n: _record_at(_batch_at(clusters[n], topic, partition, div.offset, opts), div.offset)
               for n in div.units}  # fmt: skip
        detail = describe_record_difference(got, reference)
        return div.offset, div.disagreeing, f"records differ at offset {div.offset}: {detail}"
    if div.boundaries_differ:
        return (
            div.offset,
            div.disagreeing,
            (
                f"batch boundaries differ at offset {div.offset} ({_spans(div)}); the records may "
                "still be equal: compare them with --level record"
            ),
        )
    # Same offsets, different digests: open the batch on every cluster and compare its records.
    span = next(u for u in div.units.values() if u is not None).span
    batches = {n: _batch_at(clusters[n], topic, partition, div.offset, opts) for n in div.units}
    lo = div.offset
    hi = min(end, max(u.last for u in div.units.values() if u is not None) + 1)
    try:
        per = {}
        for n, b in batches.items():
            per[n] = [record_unit(r) for r in iter_records(b) if lo <= r.offset < hi] if b else []
        inner = first_divergence(per, start=start, chunk=div.chunk)
        got = {n: _record_at(batches[n], inner.offset) for n in inner.units} if inner else {}
    except CorruptBatchError as e:
        return (
            div.offset,
            div.disagreeing,
            (
                f"batch {span} differs between clusters; its records could not be decoded to narrow "
                f"it down: {e.reason}"
            ),
        )
    if inner is None:
        headers = (
            _header_differences(batches, reference) or "same codec, different compressed bytes"
        )
        return (
            div.offset,
            div.disagreeing,
            (
                f"batch {span} holds the same records on every cluster but its stored bytes differ "
                f"({headers}); --level record would report these records as identical"
            ),
        )
    detail = describe_record_difference(got, inner.agreeing[0])
    return (
        inner.offset,
        inner.disagreeing,
        f"records differ at offset {inner.offset} (in batch {span}): {detail}",
    )


# -- one partition ---------------------------------------------------------------------------


def diff_partition(
    clusters: Sequence[ClusterRef],
    topic: str,
    partition: int,
    options: DiffOptions = DiffOptions(),
    *,
    bounds: Mapping[str, Bounds] | None = None,
    pool: ClusterPool | None = None,
) -> PartitionDiff:
    """Compare one partition across ``clusters`` (the first is the reference for ties).

    ``bounds`` (per cluster name) skips reading them when the caller already has them. Never
    raises for Kafka or data problems: they come back as status ``error`` with the reason.
    """
    started = time.monotonic()
    own = pool is None
    pool = pool or ClusterPool()
    names = [c.name for c in clusters]
    result = PartitionDiff(topic, partition, DiffStatus.ERROR, options.level, dict.fromkeys(names))
    counters: dict[str, list[int]] = {n: [0] for n in names}
    try:
        conns = {c.name: pool.get(c) for c in clusters}
        if bounds is None:
            bounds = {n: c.bounds(topic, [partition])[partition] for n, c in conns.items()}
        bounds = {n: bounds[n] for n in names}
        lo, hi = common_range(bounds)
        result = replace(result, clusters=bounds, common_range=(lo, hi), lag=lags(bounds))
        start, end = lo, hi
        if options.within is not None:
            start, end = max(lo, options.within[0]), max(lo, min(hi, options.within[1]))
        comparison = None
        if end > start:
            readers = [
                _Reader(n, functools.partial(_chunk_stream, c, topic, partition, start, end,
                                             options, counters[n]), options.prefetch_chunks)
                for n, c in conns.items()
            ]  # fmt: skip
            try:
                comparison = _compare_chunks({r.name: r for r in readers}, start=start)
            finally:
                for r in readers:
                    r.close()
        chunks = comparison.chunks if comparison else 0
        read = {n: k[0] for n, k in counters.items()}
        offset: int | None
        reason: str | None
        if comparison is not None and comparison.divergence is not None:
            offset, disagreeing, reason = _narrow(
                comparison.divergence, conns, topic, partition, start, end, options
            )
            status = DiffStatus.DIVERGENT
        else:
            offset, disagreeing = None, ()
            status = DiffStatus.LAGGING if any(result.lag.values()) else DiffStatus.IDENTICAL
            reason = None if status is DiffStatus.IDENTICAL else _lag_reason(result.lag)
        return replace(result, status=status, first_divergent_offset=offset,
                       disagreeing=disagreeing, reason=reason, chunks=chunks, bytes_read=read,
                       seconds=time.monotonic() - started)  # fmt: skip
    except PartsyncError as e:
        # A broker's error code is an answer, not an unreachable cluster.
        unreachable = (e.cluster,) if type(e) is ClusterError and e.cluster else ()
        return replace(result, status=DiffStatus.ERROR, reason=str(e), unreachable=unreachable,
                       bytes_read={n: k[0] for n, k in counters.items()},
                       seconds=time.monotonic() - started)  # fmt: skip
    except Exception as e:  # a bug or an unexpected library error: report it, do not hang
        log.exception("diff of %s[%d] failed", topic, partition)
        return replace(result, status=DiffStatus.ERROR, reason=f"internal error: {e!r}",
                       seconds=time.monotonic() - started)  # fmt: skip
    finally:
        if own:
            pool.close()


def _lag_reason(lag: Mapping[str, int]) -> str:
    behind = ", ".join(f"{n} by {k}" for n, k in lag.items() if k)
    return f"common range identical; behind the furthest cluster: {behind}"


# -- topics ------------------------------------------------------------------------------------


def _error_partition(
    topic: str, p: int, names: Sequence[str], bounds: Mapping[str, Bounds | None], level: Level,
    reason: str, unreachable: tuple[str, ...],
) -> PartitionDiff:  # fmt: skip
    known = {n: b for n, b in bounds.items() if b is not None}
    return PartitionDiff(
        topic, p, DiffStatus.ERROR, level, {n: bounds.get(n) for n in names},
        lag=lags(known) if known else {}, reason=reason, unreachable=unreachable,
    )  # fmt: skip


@dataclass(frozen=True)
class DiffJob:
    """One partition (or one ``options.within`` slice of it) to compare: plain picklable data,
    so an engine can run it on a thread or a Spark executor."""

    clusters: tuple[ClusterRef, ...]
    topic: str
    partition: int
    options: DiffOptions
    bounds: Mapping[str, Bounds]

    def run(self, pool: ClusterPool | None = None) -> PartitionDiff:
        return diff_partition(self.clusters, self.topic, self.partition, self.options,
                              bounds=self.bounds, pool=pool)  # fmt: skip

    def run_failed(self, reason: str) -> PartitionDiff:
        """The result of a job that could not run at all (e.g. its engine failed)."""
        names = [c.name for c in self.clusters]
        return _error_partition(self.topic, self.partition, names, dict(self.bounds),
                                self.options.level, reason, ())  # fmt: skip


DiffRunner = Callable[[Sequence[DiffJob]], list[PartitionDiff]]


def merge_slices(slices: Sequence[PartitionDiff]) -> PartitionDiff:
    """One partition's result from the results of its ``within`` slices (in offset order):
    the first error wins, else the first divergent slice, else the common verdict."""
    ordered = sorted(slices, key=lambda d: (d.first_divergent_offset is None, d.first_divergent_offset or 0))
    first = slices[0]
    chosen = next((d for d in slices if d.status is DiffStatus.ERROR), None)
    if chosen is None:
        chosen = next((d for d in ordered if d.status is DiffStatus.DIVERGENT), first)
    read: dict[str, int] = {}
    for d in slices:
        for n, k in d.bytes_read.items():
            read[n] = read.get(n, 0) + k
    return replace(chosen, common_range=first.common_range, chunks=sum(d.chunks for d in slices),
                   bytes_read=read, seconds=sum(d.seconds for d in slices))  # fmt: skip


def _diff_topic(
    topic: str, req: DiffRequest, pool: ClusterPool, run_jobs: DiffRunner
) -> TopicDiff:
    names = [c.name for c in req.clusters]
    level = req.options.level
    counts: dict[str, int | None] = {}
    unreachable: dict[str, str] = {}
    for ref in req.clusters:
        try:
            info = pool.get(ref).topic(topic)
        except ClusterError as e:
            unreachable[ref.name] = e.reason
            continue
        counts[ref.name] = info.partitions if info is not None else None
    present = {n: k for n, k in counts.items() if k is not None}
    if not present:
        if unreachable and not counts:
            reason = "; ".join(f"cluster {n} unreachable: {r}" for n, r in unreachable.items())
        else:
            reason = f"topic {topic} does not exist on any reachable cluster"
            if unreachable:
                reason += "; " + "; ".join(
                    f"cluster {n} unreachable: {r}" for n, r in unreachable.items()
                )
        return TopicDiff(topic, (), counts, reason, DiffStatus.ERROR)
    parts = select(max(present.values()), req.partitions, topic=topic)

    findings: list[str] = []
    topic_status: DiffStatus | None = None
    missing = [n for n, k in counts.items() if k is None]
    if missing:
        findings.append(f"topic {topic} does not exist on {', '.join(missing)}")
        topic_status = DiffStatus.DIVERGENT
    if len(set(present.values())) > 1:
        detail = ", ".join(f"{n}: {k}" for n, k in present.items())
        findings.append(f"partition counts differ ({detail})")
        topic_status = DiffStatus.DIVERGENT

    bounds: dict[str, dict[int, Bounds]] = {}
    for ref in req.clusters:
        k = present.get(ref.name)
        if k is None:
            continue
        try:
            bounds[ref.name] = pool.get(ref).bounds(topic, [p for p in parts if p < k])
        except ClusterError as e:
            unreachable[ref.name] = e.reason
    if unreachable:
        findings.append("; ".join(f"cluster {n} unreachable: {r}" for n, r in unreachable.items()))
        if topic_status is None:
            topic_status = DiffStatus.ERROR

    results: list[PartitionDiff] = []
    jobs: list[DiffJob] = []
    for p in parts:
        per = {n: bounds.get(n, {}).get(p) for n in names}
        if unreachable:
            why = "; ".join(f"cluster {n} unreachable: {r}" for n, r in unreachable.items())
            results.append(_error_partition(topic, p, names, per, level, why, tuple(unreachable)))
            continue
        lacking = [n for n, b in per.items() if b is None]
        if lacking:
            known = {n: b for n, b in per.items() if b is not None}
            results.append(PartitionDiff(
                topic, p, DiffStatus.DIVERGENT, level, per, lag=lags(known),
                disagreeing=tuple(lacking),
                reason=f"partition {p} does not exist on {', '.join(lacking)}",
            ))  # fmt: skip
            continue
        full = {n: b for n, b in per.items() if b is not None}
        jobs.append(DiffJob(tuple(req.clusters), topic, p, req.options, full))
    results.extend(run_jobs(jobs))
    results.sort(key=lambda r: r.partition)
    return TopicDiff(topic, tuple(results), counts, "; ".join(findings) or None, topic_status)


def diff_topics(
    req: DiffRequest, pool: ClusterPool, *, parallelism: int = 4, runner: DiffRunner | None = None
) -> DiffReport:
    """Diff every requested topic: ``runner`` executes the per-partition jobs (default: this
    process, ``parallelism`` partitions at a time; the Spark engine passes its own)."""
    started = time.monotonic()
    out = []
    with ThreadPoolExecutor(
        max_workers=max(1, parallelism), thread_name_prefix="partsync-diff"
    ) as ex:

        def run_local(jobs: Sequence[DiffJob]) -> list[PartitionDiff]:
            return list(ex.map(lambda j: j.run(pool), jobs))

        for topic in req.topics:
            out.append(_diff_topic(topic, req, pool, runner or run_local))
    return DiffReport(
        tuple(out), tuple(c.name for c in req.clusters), req.options.level,
        req.options.chunk_offsets, time.monotonic() - started,
    )  # fmt: skip
