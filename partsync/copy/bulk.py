"""Many small partitions copied together: ``copy_small``.

A first sync of 1000 one-record partitions spent ~17 ms of a parallelism slot on each, in
machinery made for large copies (a worker and fetcher threads, pieces, a fetch and an append
each waited for in turn). Here every partition's whole range is asked for at once through the
fetch lanes (many partitions per Fetch request) and appended through the shared writer (many
partitions per Produce request), with the same sender and the same check of every answer as
``append_in_order``: one append in flight per partition, each verified to land at exactly the
source's offset.

Only partitions a single fetch can finish and whose copy needs no check against the local log
take this path (``fits_small``); a partition whose fetch does not bring its whole range, or
brings anything unusual, is handed back untouched (nothing appended), and the caller copies it
the usual way, which also reports whatever was wrong with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from partsync.copy.appender import _Sender
from partsync.copy.context import CopyContext, ProgressFn, Stop
from partsync.copy.fetcher import throttle
from partsync.copy.options import CopyOptions
from partsync.copy.partition import copy_result
from partsync.copy.producer import ProducerSession
from partsync.errors import PartsyncError, UnsafeError
from partsync.io.bounds import read_log_ends
from partsync.io.cluster import Cluster
from partsync.io.fetch_lane import FetchAnswer
from partsync.io.reader import RangeRead
from partsync.plan.comparator import Bounds, Condition, PartitionPlan
from partsync.plan.results import PartitionResult
from partsync.plan.topic_rules import LocalTopicRules
from partsync.wire.batch import Batch, check_appendable

__all__ = ["SMALL_FETCH_BYTES", "SMALL_OFFSETS", "SmallCopy", "copy_small", "fits_small"]

log = logging.getLogger(__name__)

# What one fetch asks for per partition, and the most offsets a partition may miss to be tried
# this way. A partition with more than a fetch's worth goes back to the usual copy, having cost
# a fence and a fetch for nothing and waited for the others: 128 partitions of ~1,900 records
# (1.6 MB) each tried this way first copied at 0.39 of the ideal producer's rate, not 0.60.
SMALL_FETCH_BYTES = 64 << 10
SMALL_OFFSETS = 256
# Partitions fetched and appended together (their fetches' bytes are held at once).
WAVE = 256

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class SmallCopy:
    """One partition to copy: its plan, the local topic's rules and the session that fenced
    it (the local bounds are read again after that, before appending)."""

    plan: PartitionPlan
    rules: LocalTopicRules
    session: ProducerSession

    @property
    def key(self) -> TopicPartition:
        return (self.plan.topic, self.plan.partition)


def fits_small(plan: PartitionPlan) -> bool:
    """A copy this path can make: behind by a few offsets, from one source, into an empty local
    partition, starting at its end (no local batch to compare with, no fillers, no sources to
    compare with each other)."""
    return (
        plan.condition is Condition.BEHIND
        and not plan.bootstrap
        and len(plan.serving) == 1
        and plan.local.end == plan.local.log_start
        and plan.chunks[0].start == plan.local.end
        and 0 < plan.missing <= SMALL_OFFSETS
    )


@dataclass(eq=False)
class _Job:
    copy: SmallCopy
    ctx: CopyContext
    source: str
    read: RangeRead
    size: int
    fetch: FetchAnswer | None = None
    sender: _Sender | None = None
    started: float = 0.0


def copy_small(
    copies: Sequence[SmallCopy],
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
) -> dict[TopicPartition, PartitionResult | None]:
    """Copy each partition (all must ``fits_small``); its result, or None where it was handed
    back untouched. Never raises ``PartsyncError``: an error that stops a partition's appends is
    its result, as in ``copy_partition``."""
    stop = stop or threading.Event()
    out: dict[TopicPartition, PartitionResult | None] = {}
    # A wave's fetches are held until its appends: at most a quarter of the memory budget.
    wave = max(1, min(WAVE, opts.memory_budget // (4 * SMALL_FETCH_BYTES)))
    for i in range(0, len(copies), wave):
        if stop.is_set():
            out.update((c.key, None) for c in copies[i:])
            break
        out.update(_wave(copies[i : i + wave], sources, local, opts, progress, stop))
    return out


def _wave(
    copies: Sequence[SmallCopy],
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    progress: ProgressFn | None,
    stop: threading.Event,
) -> dict[TopicPartition, PartitionResult | None]:
    jobs: list[_Job] = []
    out: dict[TopicPartition, PartitionResult | None] = {}
    for c in copies:
        plan = c.plan
        source = plan.serving[0]
        ctx = CopyContext(plan, sources, local, opts, c.rules, progress, stop)
        size = min(SMALL_FETCH_BYTES, opts.fetch_bytes)
        read = RangeRead(source, plan.topic, plan.partition, plan.copy_start, plan.target_end,
                         opts.fetch_bytes)  # fmt: skip
        job = _Job(c, ctx, source, read, size, started=time.monotonic())
        try:
            # Never waits: this thread holds the wave's earlier reservations until it appends,
            # so a small --memory-budget leaves the rest of the wave to the usual rounds.
            if not ctx.budget.acquire(size, 0, wait=False):
                _hand_back(job, out, "no room in the memory budget")
                continue
            lane = sources[source].fetch_lane(plan.topic, plan.partition, 0,
                                              in_flight=opts.fetches_in_flight)  # fmt: skip
            job.fetch = lane.submit(plan.topic, plan.partition, plan.copy_start, size,
                                    max_wait_ms=opts.fetch_wait_ms)  # fmt: skip
        except PartsyncError as e:
            _hand_back(job, out, f"fetch not sent: {e}")
            continue
        jobs.append(job)
    # Every answer (and the rate limits' waits) first: then the local ends are read, after the
    # fences (``run.small``) and as late as possible, right before the appends (a fenced
    # writer's append still in flight can land until the new owner's first append; see
    # docs/how-it-works.md).
    fetched = [(job, batches) for job in jobs if (batches := _fetched(job, out)) is not None]
    try:
        unmoved = _unmoved(local, [job.ctx.plan for job, _b in fetched])
    except PartsyncError as e:
        unmoved = set()
        log.debug("reading the local ends before appending: %s", e)
    sending: list[_Job] = []
    for job, batches in fetched:
        if job.copy.key not in unmoved:
            _hand_back(job, out, "the local log moved since the plan, or its end is not replicated")
            continue
        sending.append(job)
        try:
            _send(job, local, batches)
        except PartsyncError as e:
            job.ctx.fail(e)
        except Stop:
            pass  # the reason is in the context
    for job in sending:
        _settle(job)
        out[job.copy.key] = copy_result(job.ctx, job.started)
    return out


def _unmoved(local: Cluster, plans: list[PartitionPlan]) -> set[TopicPartition]:
    """The partitions whose local bounds are still the plan's and whose high watermark is their
    log end (where the next append lands; ``Cluster.bounds_for_append``, without its wait)."""
    by_topic: dict[str, list[int]] = {}
    for plan in plans:
        by_topic.setdefault(plan.topic, []).append(plan.partition)
    now: dict[TopicPartition, tuple[Bounds, int]] = {}
    for topic, parts in by_topic.items():
        bounds = local.bounds(topic, parts)
        ends = read_log_ends(local, topic, parts)
        now.update(((topic, p), (bounds[p], ends[p])) for p in parts)
    return {(p.topic, p.partition) for p in plans
            if now[(p.topic, p.partition)][0] == p.local
            and now[(p.topic, p.partition)][1] <= p.local.end}  # fmt: skip


def _hand_back(job: _Job, out: dict[TopicPartition, PartitionResult | None], why: str) -> None:
    log.debug("%s-%d goes the usual way: %s", job.ctx.topic, job.ctx.partition, why)
    job.ctx.budget.close()
    out[job.copy.key] = None


def _fetched(job: _Job, out: dict[TopicPartition, PartitionResult | None]) -> list[Batch] | None:
    """The batches of the partition's whole range, checked as ``append_in_order`` checks them;
    None (handed back) for anything else."""
    ctx, plan = job.ctx, job.ctx.plan
    assert job.fetch is not None
    try:
        while not job.fetch.wait(0.1):
            ctx.check_running()
        reply = job.fetch.outcome()
        assert reply is not None
        if reply.partition is None:
            _hand_back(job, out, "left out of the fetch answer (throttled?)")
            return None
        fetched = job.read.take(reply.partition, job.size)
    except PartsyncError as e:
        _hand_back(job, out, str(e))
        return None
    except Stop:
        _hand_back(job, out, "stopped while fetching")
        return None
    if not job.read.done:
        _hand_back(job, out, "more than one fetch's worth")
        return None
    expected = plan.copy_start
    for b in fetched.batches:
        try:
            if b.base_offset != expected:
                raise UnsafeError(f"batch at {b.base_offset}, expected {expected}")
            check_appendable(b)
            ctx.rules.check(b)
        except UnsafeError as e:
            _hand_back(job, out, str(e))
            return None
        expected = b.next_offset
    if expected != plan.target_end:
        _hand_back(job, out, f"the batches end at {expected}, not {plan.target_end}")
        return None
    kept = sum(b.size for b in fetched.batches)
    ctx.budget.release(fetched.requested - kept)
    throttle(ctx, job.source, fetched.received)  # the run's and the source's byte rates
    return fetched.batches


def _send(job: _Job, local: Cluster, batches: list[Batch]) -> None:
    ctx = job.ctx
    writer = local.shared_writer(ctx.topic, ctx.partition, timeout_ms=ctx.opts.produce_timeout_ms)
    job.sender = _Sender(ctx, writer, job.copy.session)
    for b in batches:
        job.sender.send(b, job.source)


def _settle(job: _Job) -> None:
    """Wait for the partition's last answer; like the end of ``append_in_order``."""
    ctx, sender, session = job.ctx, job.sender, job.copy.session
    answered = sender.settle() if sender is not None else False
    ctx.budget.close()
    if sender is not None:
        session.sequence = sender.sequence
    session.usable = ctx.error is None and answered
