"""Agreement checks before anything is written: the local log's last batch and every serving
source's copy of it must be the same batch, and serving sources must agree with each other."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from partsync.copy.context import CopyContext
from partsync.copy.options import CopyOptions
from partsync.copy.producer import partsync_ids
from partsync.errors import ClusterError, DivergenceError, PartsyncError, UnsafeError
from partsync.io.cluster import Cluster
from partsync.io.foreign import describe_foreign
from partsync.io.reader import batch_at
from partsync.plan.comparator import (
    RECREATED_HINT,
    Bounds,
    Condition,
    PartitionPlan,
    earliest_held,
)
from partsync.plan.topic_rules import LocalTopicRules
from partsync.wire.batch import Batch
from partsync.wire.digest import same_batch
from partsync.wire.filler import is_filler
from partsync.wire.holes import disagreement, holds_hole_records

__all__ = [
    "check_local_boundary",
    "check_sources_agree",
    "checked_in_sync",
    "checked_sources_agree",
    "differs_at",
    "local_for_plan",
    "trim_bootstrap_head",
]

# How far below the sources' log start the local log may start for its first batch to be worth
# a look (one fetch): a mirror's first batch holds far fewer records.
_FIRST_BATCH_SPAN = 1_000_000


def differs_at(ctx: CopyContext, a: Batch, b: Batch, offset: int) -> int | None:
    """Where two clusters' batches holding ``offset`` disagree (None: they agree). Byte for
    byte, unless compaction holes are filled: then copies of a compacted log agree where every
    offset both hold a record at has the same record (``wire.holes.disagreement``), and a
    copy that lost the batch holding ``offset`` has nothing to compare."""
    if not ctx.opts.fill_holes:
        return None if same_batch(a, b) else offset
    if not (a.base_offset <= offset <= a.last_offset and b.base_offset <= offset <= b.last_offset):
        return None
    return disagreement(a, b, ctx.opts.hole_key)


def _batch_on(ctx: CopyContext, name: str, offset: int) -> Batch:
    cluster = ctx.local if name == ctx.local.name else ctx.sources[name]
    return batch_at(ctx.open(cluster), name, ctx.topic, ctx.partition, offset)


def _compared_batch(ctx: CopyContext, name: str, offset: int) -> Batch | None:
    """``name``'s batch holding ``offset``; None where compaction removed it and holes are
    filled (nothing there to compare; otherwise that is unsafe, as ``batch_at`` says)."""
    try:
        return _batch_on(ctx, name, offset)
    except UnsafeError:
        if ctx.opts.fill_holes:
            return None
        raise


def check_sources_agree(ctx: CopyContext) -> None:
    """Serving sources must hold the same batch at the last offset they all have.

    Histories that diverged anywhere before it differ there too (a batch digest covers its
    absolute offsets and record bytes), so this catches most disagreements before anything
    is written; chunk boundary checks catch the rest before two sources are mixed.
    """
    plan = ctx.plan
    serving = list(plan.serving)
    if len(serving) < 2:
        return
    bounds = [plan.sources[n] for n in serving]
    common = min(b.end for b in bounds) - 1
    if common < max(b.log_start for b in bounds) or common < plan.local.end:
        return
    ref_name, ref = serving[0], None
    for name in serving:
        b = _compared_batch(ctx, name, common)
        if b is None:
            continue
        if ref is None:
            ref = b
        elif (at := differs_at(ctx, b, ref, common)) is not None:
            raise DivergenceError(
                f"sources disagree: {name}'s batch {b.base_offset}..{b.last_offset} differs from "
                f"{ref_name}'s batch {ref.base_offset}..{ref.last_offset} at offset {at}; "
                "refusing to copy from sources that disagree",
                cluster=name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=at,
            )


def check_local_boundary(ctx: CopyContext) -> Batch | None:
    """The local batch ending at local_end-1, after every serving source agreed on it."""
    check_sources_agree(ctx)
    plan = ctx.plan
    local_end = plan.local.end
    if local_end == 0 or local_end <= plan.local.log_start:
        return None
    if plan.bootstrap and min(b.log_start for b in plan.sources.values()) > local_end:
        # A retention gap skipped on request: the local records below the sources' log start
        # are deleted with the gap (``appender._fill``); there is nothing left to compare.
        return None
    mine = _batch_on(ctx, ctx.local.name, local_end - 1)
    if plan.bootstrap and is_filler(mine):
        return None  # a bootstrap killed while filling: the fill goes on from here
    if mine.last_offset != local_end - 1:
        raise UnsafeError(
            f"local batch {mine.base_offset}..{mine.last_offset} does not end at the local log "
            f"end {local_end}",
            cluster=ctx.local.name,
            topic=ctx.topic,
            partition=ctx.partition,
            offset=local_end - 1,
        )
    compared = _compare_last(ctx, mine, plan.serving)
    if not compared:
        # Retention moved every serving source's log start to the local end: the copy
        # continues the local log, but whether the local history equals theirs is unknown.
        ctx.notes.append(
            f"local history not verified: no source still holds offset {local_end - 1}, the "
            f"local log's last (log starts: "
            + ", ".join(f"{n} {plan.sources[n].log_start}" for n in plan.serving)
            + "); the copy continues from the local log end unchecked"
        )
    return mine


def _compare_last(ctx: CopyContext, mine: Batch, names: tuple[str, ...]) -> bool:
    """Raise ``DivergenceError`` where a source among ``names`` holds another batch at the
    local log's last offset (``mine``'s); whether any source had it to compare."""
    plan = ctx.plan
    local_end = mine.last_offset + 1
    compared = False
    for name in names:
        if not plan.sources[name].holds(local_end - 1):
            continue  # that source no longer has it: nothing to compare
        theirs = _compared_batch(ctx, name, local_end - 1)
        if theirs is None:
            continue  # compacted away there: nothing to compare
        compared = True
        if (at := differs_at(ctx, mine, theirs, local_end - 1)) is not None:
            hint = RECREATED_HINT
            if mine.is_control and ctx.opts.replay_transactions:
                hint = (
                    "the local batch is a transaction marker the local coordinator wrote "
                    "when it aborted a replayed transaction that no run resumed within "
                    "--transaction-timeout (a killed run's, or one left open for a source "
                    "transaction that ended later); the partition cannot be "
                    "repaired in place: mirror it into a new local topic"
                )
            elif not ctx.opts.fill_holes and holds_hole_records(mine):
                hint = (
                    "the local batch holds hole records of an earlier run with "
                    "--compaction-holes fill: run with it again"
                )
            elif not mine.is_control:
                # As a rule a write into the mirror by someone else: say whose it was.
                ids = partsync_ids(ctx.topic, ctx.partition)
                who = describe_foreign(ctx.local, ctx.topic, ctx.partition, mine, ids)
                hint = f"{who}; or {hint}"
            raise DivergenceError(
                f"divergent history: the local batch {mine.base_offset}..{mine.last_offset} "
                f"differs from {name}'s batch {theirs.base_offset}..{theirs.last_offset} that "
                f"holds offset {local_end - 1} (first difference at {at}; {hint})",
                cluster=name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=at,
            )
    return compared


def checked_in_sync(
    plan: PartitionPlan,
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    rules: LocalTopicRules,
) -> PartitionPlan:
    """``plan``, planned in sync (the local end equals the sources'), after its last local
    batch was compared with each source's at that offset: unsafe where they differ, unknown
    where that could not be read. Asked where a replayed transaction may have been aborted
    by the local coordinator (``run.planner``, ``run.task``): one a run left open for the
    source's marker and the local coordinator aborted before a run resumed it ends the local
    log with an abort marker at the very offset of the source's commit marker, so the ends
    agree."""
    end = plan.local.end
    holders = tuple(n for n, b in plan.sources.items() if b.holds(end - 1) and n in sources)
    if end == 0 or end <= plan.local.log_start or not holders:
        return plan

    def compare(ctx: CopyContext) -> None:
        _compare_last(ctx, _batch_on(ctx, local.name, end - 1), holders)

    return _checked(plan, sources, local, opts, rules, compare, "the local log's last batch")


def checked_sources_agree(
    plan: PartitionPlan,
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    rules: LocalTopicRules,
) -> PartitionPlan:
    """``plan``, after its serving sources were found to agree (``check_sources_agree``):
    unsafe where they do not, unknown where that could not be read. Asked before a local topic
    is created for it (``run.planner.apply_topic_changes``), so sources that disagree leave
    nothing behind."""
    if len(plan.serving) < 2:
        return plan
    return _checked(plan, sources, local, opts, rules, check_sources_agree, "the sources' batches")


def _checked(
    plan: PartitionPlan,
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    rules: LocalTopicRules,
    check: Callable[[CopyContext], None],
    what: str,
) -> PartitionPlan:
    ctx = CopyContext(plan, sources, local, opts, rules, None, None)
    try:
        check(ctx)
        return plan
    except ClusterError as e:
        reason = f"{what} could not be compared: {e}"
        return dataclasses.replace(plan, condition=Condition.UNKNOWN, reason=reason)
    except PartsyncError as e:
        return dataclasses.replace(
            plan, condition=Condition.UNSAFE, reason=e.reason, chunks=(), serving=()
        )
    finally:
        ctx.close_all()


def local_for_plan(
    local: Cluster, topic: str, partition: int, bounds: Bounds, sources: dict[str, Bounds]
) -> Bounds:
    """The local bounds to plan with: as read, except that a local log holding only filler
    records at its end (a mirror's start that was killed while filling) counts as empty at its
    end, so the start goes on instead of being refused."""
    if bounds.end == bounds.log_start or not sources:
        return bounds
    if min(b.log_start for b in sources.values()) <= bounds.end:
        return bounds  # a source holds the local end: an ordinary continuation
    conn = local.broker_conn(local.leader(topic, partition))
    last = batch_at(conn, local.name, topic, partition, bounds.end - 1)
    return Bounds(bounds.end, bounds.end) if is_filler(last) else bounds


def trim_bootstrap_head(ctx: CopyContext) -> None:
    """Finish a mirror start killed between its first copied batch and moving the local log
    start into it: when the local log's first batch begins below the sources' log start and
    contains it, the local log start moves there (DeleteRecords), as the start would have."""
    plan = ctx.plan
    local = plan.local
    start = earliest_held(plan.sources)
    if plan.bootstrap or start is None or local.end == local.log_start:
        return
    if not local.log_start < start <= local.end or start - local.log_start > _FIRST_BATCH_SPAN:
        return
    first = _batch_on(ctx, ctx.local.name, local.log_start)
    if first.base_offset != local.log_start or start > first.last_offset:
        return
    ctx.local.delete_records(ctx.topic, ctx.partition, start)
    ctx.notes.append(
        f"the local log start moved from {local.log_start} to {start}, the sources' log start "
        "inside the first copied batch (a mirror start that was stopped before it could)"
    )
