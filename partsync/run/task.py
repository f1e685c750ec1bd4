"""The per-partition task every engine runs, and its round: re-plan, fence, verified copy.

A ``PartitionTask`` is plain picklable data (plan, cluster references, options), so the local
runner and a Spark executor run it with the same code (``run.engine``) and the same
``PartitionResult``. A *round* re-reads the partition's bounds where it runs (the driver's plan
may be stale: a retried Spark task, an earlier crashed attempt), takes the partition over by
opening a producer session (the new epoch fences any earlier writer) and reads the bounds again
after the fence, then copies. The engine runs rounds until the partition is caught up,
refused, handed over or out of retries (``plan.rounds``); in follow mode it waits for new data
between rounds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from partsync.config import ClusterRef
from partsync.copy.boundary import checked_in_sync, local_for_plan
from partsync.copy.context import ProgressFn
from partsync.copy.options import CopyOptions
from partsync.copy.partition import copy_partition
from partsync.copy.producer import (
    ProducerSession,
    open_producer_for,
    partsync_ids,
    renew_producer,
)
from partsync.errors import ClusterError, FencedError, PartsyncError, StoppedError
from partsync.io.cluster import Cluster
from partsync.io.foreign import with_foreign
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import (
    Bounds,
    Condition,
    PartitionPlan,
    PlanPolicy,
    plan_partition,
    unknown_without,
)
from partsync.plan.results import PartitionResult, Status
from partsync.plan.topic_rules import LocalTopicRules
from partsync.run.planner import SyncRequest, TopicPlan, uncopied_result
from partsync.run.topic_plan import located

__all__ = [
    "PartitionTask",
    "copy_round",
    "interrupted",
    "merge_results",
    "refresh_metadata",
    "refresh_plan",
    "tasks_for",
]

log = logging.getLogger(__name__)

# Retries wait 1 s, 2 s, 4 s ... up to this: appends still in flight on a dropped connection
# settle before the local end is read again.
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0
# How long the driver's bounds serve a task's first round: a source's log start rarely moves
# within this (Kafka checks retention every 5 minutes by default), and if it does the fetch
# answers OFFSET_OUT_OF_RANGE, which is retried with bounds read afresh.
PLAN_REUSE_S = 30.0


@dataclass(frozen=True)
class PartitionTask:
    plan: PartitionPlan
    sources: tuple[ClusterRef, ...]
    local: ClusterRef
    options: CopyOptions
    rules: LocalTopicRules
    policy: PlanPolicy = PlanPolicy()
    # Retriable failures in a row, without progress in between, that a one-shot run retries
    # (a round that appended something starts the count again, so a flaky link that keeps
    # making progress converges in one run; follow mode retries for as long as it runs).
    retries: int = 2
    # When and where the driver read the plan's bounds (``time.monotonic()``, ``os.getpid()``):
    # a first round in the same process within ``PLAN_REUSE_S`` reuses them up to the fence.
    planned_at: float | None = None
    planned_in: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.plan.topic, self.plan.partition)

    def plan_is_fresh(self) -> bool:
        """The plan's bounds were read by this process moments ago (not a Spark executor's
        pickled copy, not a partition reassigned long after the run planned it)."""
        return (
            self.planned_at is not None
            and self.planned_in == os.getpid()
            and time.monotonic() - self.planned_at <= PLAN_REUSE_S
        )


def refresh_plan(
    task: PartitionTask,
    local: Cluster,
    sources: dict[str, Cluster],
    source_bounds: dict[str, Bounds] | None = None,
) -> PartitionPlan:
    """Re-read the partition's bounds where the task runs and plan again.

    Copying from a stale local end would make every append land at the wrong offset, so each
    round starts from the bounds it reads itself; the local end is the log end (where the next
    append lands), read once the high watermark has reached it. ``source_bounds`` reuses the sources' bounds
    of the same round (after a fence only the local end must be read again). A partition the
    driver refused stays refused unless it is now in sync.
    """
    p = task.plan
    local_b = local.bounds_for_append(p.topic, p.partition, wait=task.options.hw_wait_s)
    src_b = source_bounds
    unreachable: list[str] = []
    if src_b is None:
        src_b = {}
        for name, c in sources.items():
            try:
                src_b[name] = c.bounds(p.topic, [p.partition])[p.partition]
            except ClusterError as e:
                if len(unreachable) + 1 == len(sources):  # none answered: nothing to plan with
                    raise
                log.info("source %s did not answer (%s); planning without it", name, e.reason)
                unreachable.append(name)
    local_b = local_for_plan(local, p.topic, p.partition, local_b, src_b)
    fresh = plan_partition(p.topic, p.partition, local_b, src_b, task.policy)
    fresh = unknown_without(fresh, unreachable)
    if p.condition is Condition.UNSAFE and fresh.condition is not Condition.IN_SYNC:
        return p
    if fresh.condition is Condition.UNSAFE:
        fresh = located(with_foreign(fresh, local, partsync_ids(p.topic, p.partition)), local.name)
    return fresh


def _unplanned(task: PartitionTask, plan: PartitionPlan | None = None) -> PartitionResult:
    return uncopied_result(plan or task.plan)


def copy_round(
    task: PartitionTask,
    pool: ClusterPool,
    session: ProducerSession | None,
    *,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    on_plan: Callable[[PartitionPlan], None] | None = None,
    first: bool = False,
    last_end: int | None = None,
) -> tuple[PartitionResult, ProducerSession | None]:
    """One round: re-plan, take the partition over if about to write, copy. Returns the result
    and the session to continue with (None after a failure: the broker's sequence is unknown).

    ``first``: the round right after the driver planned, which reuses the plan's bounds up to
    the fence. ``last_end``: where the previous round left the local log (or the driver's plan
    found it)."""
    local = pool.get(task.local)
    sources = {ref.name: pool.get(ref) for ref in task.sources}
    try:
        # The driver just read every bound a fresh plan holds: take the partition over at once
        # and read only the local end again, after the fence (many partitions' reads of the
        # sources would otherwise all be made twice).
        reuse = (
            first
            and task.plan.condition is Condition.BEHIND
            and session is None
            and task.plan_is_fresh()
        )
        plan = task.plan if reuse else refresh_plan(task, local, sources)
        if (
            plan.condition is Condition.BEHIND
            and session is not None
            and session.usable
            and session.older_than(task.options.fencing_renew_s)
        ):
            session = renew_producer(local, task.plan.topic, task.plan.partition, session)
            plan = refresh_plan(task, local, sources, dict(plan.sources))
        if plan.condition is Condition.BEHIND and (session is None or not session.usable):
            # About to write: take the partition over first (the new producer epoch fences any
            # earlier writer), then read the local end again, after the fence.
            session = open_producer_for(local, task.plan.topic, task.plan.partition, task.options)
            plan = refresh_plan(task, local, sources, dict(plan.sources))
        if reuse and (
            plan.local.end != task.plan.local.end or plan.condition is not Condition.BEHIND
        ):
            # The local log moved since the driver planned (another writer, an earlier
            # attempt): the sources' bounds are read again too, so both sides are fresh.
            plan = refresh_plan(task, local, sources)
    except FencedError as e:  # another writer initialised the partition's transactional id
        return _unplanned(task).with_status(Status.HANDED_OVER, str(e), e), None
    except PartsyncError as e:
        return _unplanned(task).with_status(Status.ERROR, str(e), e), None
    if on_plan is not None:
        on_plan(plan)
    if plan.condition is Condition.IN_SYNC and (
        (last_end is not None and plan.local.end != last_end)
        or (task.options.replay_transactions and session is not None and bool(session.open_txns))
    ):
        # The local log moved since the last round without this process, or a replayed
        # transaction was left open: a write by someone else that took the offset the source's
        # next record has (the ends then agree), or the local coordinator's abort marker of a
        # replayed transaction (a stall past --transaction-timeout) where the source's marker
        # is. Its last batch is compared with the sources'.
        plan = checked_in_sync(plan, sources, local, task.options, task.rules)
    if plan.condition is not Condition.BEHIND:
        return _unplanned(task, plan), session
    res = copy_partition(plan, sources, local, task.options, task.rules, progress, stop, session)
    return res, (session if session is not None and session.usable else None)


def merge_results(first: PartitionResult, retry: PartitionResult) -> PartitionResult:
    """One result for a partition copied in several rounds.

    When the last round found the partition in sync: ``synced`` if the local end is where this
    process's own appends left it (and it appended some), ``in-sync`` if nothing moved at all.
    If the end moved after this process's last round (another writer of the job, e.g. the
    member that owned it during a rebalance, brought it further), the result is
    ``handed-over`` and keeps where this process left it, so the offsets a run reports as its
    own are the ones it wrote. A move to exactly where this process's own unanswered append
    would have ended the log (its answer was lost with a connection) is this process's."""
    adopted = first.unconfirmed_end is not None and retry.local_end_before == first.unconfirmed_end
    if adopted:
        first = first.with_copy(local_end_after=first.unconfirmed_end)
    by_source = dict(first.bytes_by_source)
    for s, n in retry.bytes_by_source.items():
        by_source[s] = by_source.get(s, 0) + n
    batches_by_source = dict(first.batches_by_source)
    for s, n in retry.batches_by_source.items():
        batches_by_source[s] = batches_by_source.get(s, 0) + n
    batches = first.batches + retry.batches
    merged = retry.with_copy(
        batches_by_source=batches_by_source,
        local_end_before=first.local_end_before,
        batches=batches,
        bytes=first.bytes + retry.bytes,
        bytes_by_source=by_source,
        seconds=first.seconds + retry.seconds,
        peak_buffered_bytes=max(first.peak_buffered_bytes, retry.peak_buffered_bytes),
        holes_filled=first.holes_filled + retry.holes_filled,
        batches_reencoded=first.batches_reencoded + retry.batches_reencoded,
        notes=tuple(dict.fromkeys((*first.notes, *retry.notes))),
    )
    if retry.status is not Status.IN_SYNC:
        return merged
    if retry.local_end_after != first.local_end_after:
        return merged.with_copy(local_end_after=first.local_end_after).with_status(
            Status.HANDED_OVER,
            f"another writer of the partition brought it from offset {first.local_end_after} "
            f"to {retry.local_end_after}",
        )
    if batches or adopted:  # appended by this process (an append whose answer was lost, too)
        return merged.with_status(Status.SYNCED, None)
    return merged


def refresh_metadata(task: PartitionTask, pool: ClusterPool) -> None:
    """Forget every cluster's metadata the task uses before a retry: after
    NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or a lost broker, the partition's leader (and
    the writer shared per leader) must be looked up again."""
    for ref in (task.local, *task.sources):
        try:
            pool.get(ref).metadata(refresh=True)
        except PartsyncError:
            pass  # the round itself reports an unreachable cluster


def interrupted(result: PartitionResult, handed_over: Callable[[], bool] | None) -> PartitionResult:
    """A round cut short by a stop: what was appended is confirmed and counted; the rest is the
    next owner's (a hand-over, ``handed_over()`` true) or the next run's (a stop request)."""
    at = result.local_end_after
    if handed_over is not None and handed_over():
        return result.with_status(
            Status.HANDED_OVER, f"ownership moved to another group member at offset {at}"
        )
    return result.with_status(
        Status.STOPPED,
        f"stopped at offset {at} before catching up",
        StoppedError("stopped before catching up", offset=at),
    )


def tasks_for(
    req: SyncRequest, plans: Sequence[TopicPlan], retries: int = 2, *, behind_only: bool = True
) -> list[PartitionTask]:
    """One task per partition of the topics not refused as a whole: the partitions that are
    behind, or (``behind_only`` off, for members that own partitions rather than copies) all."""
    tasks = []
    for tp in plans:
        if tp.refused or tp.error:
            continue
        for plan in tp.partitions:
            if behind_only and plan.condition is not Condition.BEHIND:
                continue
            # The sources that answered the plan, and those that did not (a round asks them
            # again: they may be back, and ahead).
            srcs = tuple(
                r for r in req.sources if r.name in plan.sources or r.name in tp.unreachable
            )
            tasks.append(
                PartitionTask(
                    plan,
                    srcs,
                    req.local,
                    req.options,
                    tp.rules,
                    req.policy,
                    retries,
                    planned_at=tp.planned_at,
                    planned_in=os.getpid(),
                )
            )
    return tasks
