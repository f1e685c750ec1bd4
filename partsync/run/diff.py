"""``partsync diff``: are N clusters' copies of a partition identical? Read-only.

Per partition: read every cluster's bounds, take the common range ``[max log start, min high
watermark)`` (what every cluster holds; the rest is lag, not divergence), stream that range from
every cluster chunk by chunk, digest it (``partsync.wire.digest``; each cluster's reader thread in
``run.diff_reader``) and compare the chunk digests. The first chunk whose digests differ is opened
to its first divergent batch, and a divergent batch to its first divergent record
(``run.diff_narrow``), so the report names an exact offset and the clusters that disagree there.

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
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from partsync.config import ClusterRef
from partsync.errors import ClusterError, PartsyncError
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import Bounds
from partsync.plan.diff_model import (
    DiffOptions,
    DiffReport,
    DiffRequest,
    DiffStatus,
    PartitionDiff,
    TopicDiff,
    common_range,
    error_partition,
    lag_reason,
    lags,
)
from partsync.plan.selection import select
from partsync.retry import Backoff, retry_until
from partsync.run.diff_narrow import narrow
from partsync.run.diff_reader import ChunkReader, MarkerTimes, chunk_stream
from partsync.wire.digest import compare_chunks as _compare_chunks

__all__ = ["DiffJob", "DiffRunner", "diff_partition", "diff_topics"]

log = logging.getLogger(__name__)


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
    tries = 0

    def attempt() -> tuple[bool, PartitionDiff]:
        nonlocal bounds, tries
        tries += 1
        result = _diff_once(clusters, topic, partition, options, bounds=bounds, pool=pool)
        if result.status is not DiffStatus.ERROR or not result.unreachable:
            return True, result
        if tries == DIFF_ATTEMPTS:
            return True, result  # the last try's error is the answer
        log.info("diff of %s[%d]: %s; reading again", topic, partition, result.reason)
        bounds = None
        return False, result

    return retry_until(attempt, Backoff(0.5, 4.0))


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
    markers = MarkerTimes(names)
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
                ChunkReader(
                    n,
                    functools.partial(
                        chunk_stream,
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
            offset, disagreeing, reason = narrow(
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
