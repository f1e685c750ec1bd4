"""Execute one partition's plan, shallowly and verified: ``copy_partition``.

1. ``boundary``: before writing anything, every source that will serve a chunk must agree with
   the local log at its end (and with each other), else the partition is refused.
2. ``fetcher``: threads fetch the chunks, cut into byte-sized pieces (``pieces``), as raw,
   CRC-checked batches under a byte budget, several fetches in flight per connection.
3. ``appender``: batches are appended strictly in offset order and every answer is verified to
   put the batch at exactly the source's offset; on any mismatch writing stops at once.

The local log end is the checkpoint: after a crash, running again resumes from it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from partsync.copy.appender import append_in_order
from partsync.copy.boundary import check_local_boundary, trim_bootstrap_head
from partsync.copy.context import CopyContext, ProgressFn
from partsync.copy.fetcher import plan_pieces, start_fetchers
from partsync.copy.options import CopyOptions
from partsync.copy.producer import ProducerSession, open_producer_for
from partsync.errors import ClusterError, FencedError, PartsyncError, UnsafeError
from partsync.io.cluster import Cluster
from partsync.plan.comparator import Condition, PartitionPlan
from partsync.plan.results import PartitionResult, Status
from partsync.plan.topic_rules import LocalTopicRules

__all__ = ["copy_partition", "copy_result"]

log = logging.getLogger(__name__)


def _run(ctx: CopyContext, producer: ProducerSession | None) -> ProducerSession | None:
    if ctx.opts.replay_transactions and (producer is None or not producer.usable):
        # Before the local end is compared: fencing the transaction slots aborts what a killed
        # run left open, and the abort marker moves the local end.
        producer = _open(ctx)
        now = ctx.local.bounds_for_append(ctx.topic, ctx.partition, wait=ctx.opts.hw_wait_s)
        if now != ctx.plan.local:
            raise ClusterError(
                f"the local log moved since the plan (now {now.log_start}..{now.end}, planned "
                f"{ctx.plan.local.log_start}..{ctx.plan.local.end}): a transaction an earlier "
                "run left open was aborted, or another writer appended; plan again",
                cluster=ctx.local.name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=ctx.plan.local.end,
            )
    last = check_local_boundary(ctx)
    trim_bootstrap_head(ctx)
    pieces = plan_pieces(ctx)
    fetchers = start_fetchers(ctx, pieces)
    clean = False
    try:
        # The caller's session (an owner continues its own), else a new one for this copy,
        # which also fences any other writer of the partition.
        if producer is None or not producer.usable:
            producer = _open(ctx)
        append_in_order(ctx, pieces.in_order(ctx.check_running), last, producer)
        clean = not ctx.failed.is_set()
    finally:
        ctx.budget.close()
        if not clean:
            ctx.close_all()  # wakes fetchers blocked on a connection
        for t in fetchers:
            t.join(timeout=5)
        if any(t.is_alive() for t in fetchers):
            ctx.close_all()
        else:
            ctx.release_all()  # clean connections serve the next copy
    return producer


def _open(ctx: CopyContext) -> ProducerSession:
    return open_producer_for(ctx.local, ctx.topic, ctx.partition, ctx.opts)


def copy_partition(
    plan: PartitionPlan,
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions = CopyOptions(),
    rules: LocalTopicRules = LocalTopicRules(),
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    producer: ProducerSession | None = None,
) -> PartitionResult:
    """Execute ``plan`` for one partition and report what happened (never raises PartsyncError).

    ``producer`` continues an owner's session; it is marked unusable if anything went wrong."""
    base = _untouched(plan)
    if plan.condition is Condition.IN_SYNC:
        return base
    if plan.condition is Condition.UNSAFE:
        return base.with_status(Status.UNSAFE, plan.reason)
    started = time.monotonic()
    ctx = CopyContext(plan, sources, local, opts, rules, progress, stop)
    try:
        _run(ctx, producer)
    except PartsyncError as e:
        ctx.fail(e)
    except Exception as e:
        log.exception("copy of %s-%d failed", plan.topic, plan.partition)
        ctx.fail(PartsyncError(f"unexpected failure: {e!r}"))
    finally:
        ctx.close_all()
    if producer is not None and ctx.error is not None:
        producer.usable = False
    return copy_result(ctx, started)


def _untouched(plan: PartitionPlan) -> PartitionResult:
    return PartitionResult(
        topic=plan.topic,
        partition=plan.partition,
        status=Status.IN_SYNC,
        local_end_before=plan.local.end,
        local_end_after=plan.local.end,
        target_end=plan.target_end,
    )


def copy_result(ctx: CopyContext, started: float) -> PartitionResult:
    """What a copy did, from its context (started at ``time.monotonic()`` ``started``): its
    counts, where the local log ends, and its status (the error that stopped it, or synced)."""
    plan = ctx.plan
    notes = list(ctx.notes)
    if ctx.expired is not None and ctx.expired[0] < ctx.confirmed_end:
        # Checked as batches were fetched: only what was appended counts.
        first, last = ctx.expired[0], min(ctx.expired[1], ctx.confirmed_end - 1)
        notes.append(
            f"copied records between offsets {first} and {last} are older than the local "
            f"topic's retention.ms={ctx.rules.retention_ms}: {ctx.local.name} deletes them at "
            "its next retention check (their source timestamps are kept), so the local log "
            "start will move past them; raise the local topic's retention.ms (e.g. to the "
            "source's) to keep them"
        )
    result = _untouched(plan).with_copy(
        local_end_after=ctx.confirmed_end,
        batches=ctx.batches,
        bytes=ctx.bytes,
        bytes_by_source=dict(ctx.bytes_by_source),
        batches_by_source=dict(ctx.batches_by_source),
        seconds=time.monotonic() - started,
        peak_buffered_bytes=ctx.budget.peak,
        holes_filled=ctx.holes_filled,
        batches_reencoded=ctx.batches_reencoded,
        notes=tuple(notes),
        unconfirmed_end=ctx.unconfirmed_end if ctx.error is not None else None,
    )
    if ctx.error is not None:
        status = (
            Status.UNSAFE
            if isinstance(ctx.error, UnsafeError)
            else Status.HANDED_OVER
            if isinstance(ctx.error, FencedError)
            else Status.ERROR
        )
        return result.with_status(status, str(ctx.error), ctx.error)
    result = result.with_copy(open_transactions=tuple(ctx.open_txns))
    if ctx.stopped_at is not None and ctx.confirmed_end == ctx.stopped_at:
        # A replay of transactions stopped right before one it held back for its marker:
        # behind, never in sync (follow mode waits for source data past what it held).
        result = result.with_copy(wait_from=plan.target_end)
        if ctx.stopped_at < plan.target_end:
            return result.with_status(Status.BEHIND, ctx.behind)
        return result.with_status(Status.SYNCED, None)
    if ctx.confirmed_end != plan.target_end:
        return result.with_status(
            Status.ERROR,
            f"copy ended at offset {ctx.confirmed_end}, planned {plan.target_end}",
        )
    return result.with_status(Status.SYNCED, None)
