"""``partsync diff``: are N clusters' copies of a partition identical? Read-only.

Per partition: read every cluster's bounds, take the common range ``[max log start, min high
watermark)`` (what every cluster holds; the rest is lag, not divergence), stream that range from
every cluster chunk by chunk, digest it (``partsync.wire.digest``) and compare the chunk digests. The
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

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from partsync.config import ClusterRef
from partsync.errors import ClusterError, CorruptBatchError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.pool import ClusterPool
from partsync.io.reader import read_batches
from partsync.plan.comparator import Bounds
from partsync.plan.diff_model import (
    DiffOptions,
    DiffReport,
    DiffRequest,
    DiffStatus,
    Level,
    PartitionDiff,
    TopicDiff,
    common_range,
    error_partition,
    lag_reason,
    lags,
)
from partsync.plan.selection import select
from partsync.retry import Backoff
from partsync.wire.batch import Batch
from partsync.wire.digest import (
    ChunkDigest,
    Divergence,
    batch_unit,
    describe_record_difference,
    first_divergence,
    iter_chunks,
    record_unit,
)
from partsync.wire.digest import compare_chunks as _compare_chunks
from partsync.wire.holes import as_filled, is_hole
from partsync.wire.markers import describe_transactions_at
from partsync.wire.records import Record, iter_records

__all__ = ["DiffJob", "DiffRunner", "diff_partition", "diff_topics"]

log = logging.getLogger(__name__)

# Attribute bits other than codec (0-2), timestamp type (3), transactional (4), control (5).
_OTHER_ATTRIBUTES = 0xFFC0


# -- reading one cluster's range -------------------------------------------------------------


class _MarkerTimes:
    """The largest difference between each cluster's transaction-marker timestamps and the
    reference cluster's at the same offsets, collected as the readers (each on its thread)
    pass the markers. An offset is forgotten once every cluster has passed it, so what is kept
    is bounded by how far the readers run apart (their prefetch)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.reference, self.names = names[0], frozenset(names)
        self.skew: dict[str, int] = {}
        self._seen: dict[int, dict[str, int]] = {}
        self._lock = threading.Lock()

    def passed(self, name: str, batches: Iterator[Batch]) -> Iterator[Batch]:
        for b in batches:
            if b.is_control:
                self._add(name, b.base_offset, b.max_timestamp)
            yield b

    def _add(self, name: str, offset: int, ts: int) -> None:
        with self._lock:
            seen = self._seen.setdefault(offset, {})
            seen[name] = ts
            ref = seen.get(self.reference)
            if ref is not None:
                for n, t in seen.items():
                    if n != self.reference:
                        self.skew[n] = max(self.skew.get(n, 0), abs(t - ref))
            if len(seen) == len(self.names):
                del self._seen[offset]


def _records_in(
    batches: Iterator[Batch], start: int, end: int, opts: DiffOptions, holes: list[int]
) -> Iterator[Record]:
    for b in batches:
        for r in iter_records(b):
            if start <= r.offset < end:
                if opts.compaction_holes and is_hole(r.key, r.value, r.headers, opts.hole_key):
                    holes[0] += 1  # compared as the hole it fills
                    continue
                yield r


def _chunk_stream(
    cluster: Cluster,
    topic: str,
    partition: int,
    start: int,
    end: int,
    opts: DiffOptions,
    counter: list[int],
    holes: list[int],
    markers: _MarkerTimes,
) -> Iterator[ChunkDigest]:
    """One cluster's range as chunk digests, over a dedicated connection to the leader."""
    conn = cluster.connect_leader(topic, partition)
    try:
        batches = read_batches(
            conn,
            cluster.name,
            topic,
            partition,
            start,
            end,
            fetch_bytes=opts.fetch_bytes,
            wait_ms=opts.fetch_wait_ms,
            counter=counter,
        )
        batches = markers.passed(cluster.name, batches)
        if opts.level is Level.BATCH:
            if opts.compaction_holes:
                batches = as_filled(batches, start, opts.hole_key, opts.filler_records, holes)
            units = (batch_unit(b) for b in batches)
        else:
            units = (record_unit(r) for r in _records_in(batches, start, end, opts, holes))
        try:
            yield from iter_chunks(units, opts.chunk_offsets, start=start)
        except CorruptBatchError as e:
            raise CorruptBatchError(
                e.reason, cluster=cluster.name, topic=topic, partition=partition, offset=e.offset
            ) from None
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
        for b in read_batches(
            conn,
            cluster.name,
            topic,
            partition,
            offset,
            offset + 1,
            fetch_bytes=opts.fetch_bytes,
            wait_ms=opts.fetch_wait_ms,
        ):
            return b if b.base_offset <= offset <= b.last_offset else None
    return None


def _record_at(batch: Batch | None, offset: int) -> Record | None:
    if batch is None:
        return None
    return next((r for r in iter_records(batch) if r.offset == offset), None)


def _with_transactions(detail: str, batches: Mapping[str, Batch | None], offset: int) -> str:
    """``detail``, and which transaction each cluster holds at ``offset`` where one holds a
    marker and another a transaction's data there."""
    try:
        txns = describe_transactions_at(batches, offset)
    except PartsyncError:  # a batch that cannot be decoded was reported already
        txns = None
    return detail if txns is None else f"{detail}; {txns}"


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
        held = {n: _batch_at(clusters[n], topic, partition, div.offset, opts) for n in div.units}
        got = {n: _record_at(b, div.offset) for n, b in held.items()}
        detail = _with_transactions(describe_record_difference(got, reference), held, div.offset)
        return div.offset, div.disagreeing, f"records differ at offset {div.offset}: {detail}"
    if div.boundaries_differ:
        held = {n: _batch_at(clusters[n], topic, partition, div.offset, opts) for n in div.units}
        detail = (
            f"batch boundaries differ at offset {div.offset} ({_spans(div)}); the records "
            "may still be equal: compare them with --level record"
        )
        return div.offset, div.disagreeing, _with_transactions(detail, held, div.offset)
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
    detail = _with_transactions(
        describe_record_difference(got, inner.agreeing[0]), batches, inner.offset
    )
    return (
        inner.offset,
        inner.disagreeing,
        f"records differ at offset {inner.offset} (in batch {span}): {detail}",
    )


# -- one partition ---------------------------------------------------------------------------


# Attempts per partition when a cluster's connection fails (a diff only reads: retrying is
# always safe), waiting 0.5 s, then 1 s.
DIFF_ATTEMPTS = 3


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
    raises for Kafka or data problems: they come back as status ``error`` with the reason. A
    lost connection is retried (bounds read again) before it is reported.
    """
    backoff = Backoff(0.5, 4.0)
    for attempt in range(1, DIFF_ATTEMPTS + 1):
        result = _diff_once(clusters, topic, partition, options, bounds=bounds, pool=pool)
        if result.status is not DiffStatus.ERROR or not result.unreachable:
            break
        if attempt < DIFF_ATTEMPTS:
            log.info("diff of %s[%d]: %s; reading again", topic, partition, result.reason)
            backoff.wait()
            bounds = None
    return result


def _diff_once(
    clusters: Sequence[ClusterRef],
    topic: str,
    partition: int,
    options: DiffOptions,
    *,
    bounds: Mapping[str, Bounds] | None,
    pool: ClusterPool | None,
) -> PartitionDiff:
    started = time.monotonic()
    own = pool is None
    pool = pool or ClusterPool()
    names = [c.name for c in clusters]
    result = PartitionDiff(topic, partition, DiffStatus.ERROR, options.level, dict.fromkeys(names))
    counters: dict[str, list[int]] = {n: [0] for n in names}
    holes: dict[str, list[int]] = {n: [0] for n in names}
    markers = _MarkerTimes(names)
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
                _Reader(
                    n,
                    functools.partial(
                        _chunk_stream,
                        c,
                        topic,
                        partition,
                        start,
                        end,
                        options,
                        counters[n],
                        holes[n],
                        markers,
                    ),
                    options.prefetch_chunks,
                )
                for n, c in conns.items()
            ]
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
            reason = None if status is DiffStatus.IDENTICAL else lag_reason(result.lag)
        return replace(
            result,
            status=status,
            first_divergent_offset=offset,
            disagreeing=disagreeing,
            reason=reason,
            chunks=chunks,
            bytes_read=read,
            seconds=time.monotonic() - started,
            holes={n: k[0] for n, k in holes.items() if k[0]},
            marker_skew_ms=dict(markers.skew),
        )
    except PartsyncError as e:
        # A broker's error code is an answer, not an unreachable cluster.
        unreachable = (e.cluster,) if type(e) is ClusterError and e.cluster else ()
        return replace(
            result,
            status=DiffStatus.ERROR,
            reason=str(e),
            unreachable=unreachable,
            bytes_read={n: k[0] for n, k in counters.items()},
            seconds=time.monotonic() - started,
        )
    except Exception as e:  # a bug or an unexpected library error: report it, do not hang
        log.exception("diff of %s[%d] failed", topic, partition)
        return replace(
            result,
            status=DiffStatus.ERROR,
            reason=f"internal error: {e!r}",
            seconds=time.monotonic() - started,
        )
    finally:
        if own:
            pool.close()


# -- topics ------------------------------------------------------------------------------------


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
        return diff_partition(
            self.clusters, self.topic, self.partition, self.options, bounds=self.bounds, pool=pool
        )

    def run_failed(self, reason: str) -> PartitionDiff:
        """The result of a job that could not run at all (e.g. its engine failed)."""
        names = [c.name for c in self.clusters]
        return error_partition(
            self.topic, self.partition, names, dict(self.bounds), self.options.level, reason, ()
        )


DiffRunner = Callable[[Sequence[DiffJob]], list[PartitionDiff]]


def _diff_topic(topic: str, req: DiffRequest, pool: ClusterPool, run_jobs: DiffRunner) -> TopicDiff:
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
            results.append(error_partition(topic, p, names, per, level, why, tuple(unreachable)))
            continue
        lacking = [n for n, b in per.items() if b is None]
        if lacking:
            known = {n: b for n, b in per.items() if b is not None}
            results.append(
                PartitionDiff(
                    topic,
                    p,
                    DiffStatus.DIVERGENT,
                    level,
                    per,
                    lag=lags(known),
                    disagreeing=tuple(lacking),
                    reason=f"partition {p} does not exist on {', '.join(lacking)}",
                )
            )
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

        pool.watch(req.clusters, req.topics)
        for topic in req.topics:
            out.append(_diff_topic(topic, req, pool, runner or run_local))
    return DiffReport(
        tuple(out),
        tuple(c.name for c in req.clusters),
        req.options.level,
        req.options.chunk_offsets,
        time.monotonic() - started,
    )
