"""The sync driver: plans in, a ``SyncReport`` out.

``run_sync`` hands the behind partitions of a set of plans to an engine (threads here, or Spark)
as ``PartitionTask``s and assembles the report. ``run_job`` is what ``partsync sync`` calls: it
applies the plans' topic creations, decides whether the run joins the local group, runs the
partitions (through the ``PartitionRunner`` on this machine, or the engine given) and decides
the exit status. Routing, naming and exit-code policy live here, not in the CLI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from partsync.config import ClusterRef
from partsync.copy.context import ProgressFn
from partsync.errors import ExitStatus, PartsyncError, StoppedError
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import Condition
from partsync.plan.results import PartitionResult, Status, SyncReport, TopicResult
from partsync.run.offsets import OffsetsFollower
from partsync.run.planner import (
    SyncRequest,
    TopicPlan,
    apply_topic_changes,
    plan_topics,
    uncopied_result,
    whole_topic_results,
)
from partsync.run.runner import PartitionRunner, RunObserver, RunOptions
from partsync.run.task import PartitionTask, tasks_for
from partsync.run.topic_watch import TopicWatch

__all__ = [
    "Engine",
    "GroupsToSync",
    "JobOutcome",
    "default_group",
    "plan_exit_status",
    "run_job",
    "run_sync",
]


@dataclass(frozen=True)
class GroupsToSync:
    """Follow mode's ``--sync-groups``: consumer groups whose committed offsets are copied from
    ``source`` to the local cluster every ``interval_s`` seconds."""

    groups: tuple[str, ...]
    source: ClusterRef
    interval_s: float = 5.0


class Engine:
    """Runs partition tasks; engines differ only in where the tasks execute."""

    name = "abstract"

    def run(
        self,
        tasks: Sequence[PartitionTask],
        pool: ClusterPool,
        on_result: Callable[[PartitionResult], None] | None = None,
    ) -> list[PartitionResult]:
        raise NotImplementedError


# What stopped a run (SyncReport.stopped), as a partition's reason says it.
_STOP_CAUSES = {"deadline": "the deadline stopped the run", "signal": "a signal stopped the run"}


def _report(
    req: SyncRequest,
    plans: Sequence[TopicPlan],
    results: dict[tuple[str, int], PartitionResult],
    *,
    group: str | None,
    stopped: bool,
    seconds: float,
    why: str | None,
    fatal: PartsyncError | None = None,
) -> SyncReport:
    """Every planned partition: what this process did with it, else what the plan found."""
    topics = []
    for tp in plans:
        # A follower's topic whose plan failed has results once a later plan of it succeeded.
        if tp.refused or tp.error and not any(t == tp.topic for t, _p in results):
            topics.append(whole_topic_results(tp))
            continue
        parts = []
        for plan in tp.partitions:
            r = results.get((tp.topic, plan.partition))
            if r is None:
                r = uncopied_result(plan)
                if plan.condition is Condition.BEHIND:
                    if fatal is not None:
                        # The group refused or lost this run: not handed to anyone.
                        r = r.with_status(Status.ERROR, f"not copied: {fatal}", fatal)
                    elif group and not stopped:
                        r = r.with_status(
                            Status.HANDED_OVER, f"owned by another member of group {group!r}"
                        )
                    else:
                        r = r.with_status(
                            Status.STOPPED,
                            "not reached before the stop",
                            StoppedError("not reached before the stop"),
                        )
            if r.status is Status.STOPPED and why:
                r = r.with_copy(reason=f"{_STOP_CAUSES.get(why, why)}: {r.reason}")
            parts.append(r)
        # Partitions a follower added when the topic grew under it.
        planned = {plan.partition for plan in tp.partitions}
        parts.extend(
            r for (t, p), r in sorted(results.items()) if t == tp.topic and p not in planned
        )
        topics.append(TopicResult(tp.topic, tuple(parts), tp.warnings, tp.unreachable))
    # Topics a follower adopted after its start (they appeared on a source and match).
    planned_topics = {tp.topic for tp in plans}
    for topic in sorted({t for t, _p in results} - planned_topics):
        parts = [r for (t, _p), r in sorted(results.items()) if t == topic]
        topics.append(TopicResult(topic, tuple(parts), (), ()))
    order = {t: i for i, t in enumerate(req.topics)}
    topics.sort(key=lambda t: order.get(t.topic, len(order)))
    return SyncReport(tuple(topics), seconds, why)


def default_group(topics: Sequence[str]) -> str:
    """The group a job joins unless --group names one: derived from its local topics, so runs
    of the same job (same topics) meet in the same group."""
    name = "partsync." + ",".join(sorted(topics))
    if len(name) > 200:
        name = "partsync." + hashlib.sha256(name.encode()).hexdigest()[:16]
    return name


@dataclass(frozen=True)
class JobOutcome:
    report: SyncReport
    exit_status: ExitStatus
    # The group membership failure that ended the run, if any (nothing is written without it).
    fatal: PartsyncError | None = None


def _follow_exit_status(report: SyncReport) -> ExitStatus:
    """Follow mode ends by being stopped: rounds cut short by the stop are not failures."""
    code = report.exit_status
    if code is ExitStatus.FAILURE and all(
        p.status is not Status.ERROR for p in report.all_partitions()
    ):
        return ExitStatus.OK
    return code


def run_job(
    req: SyncRequest,
    pool: ClusterPool,
    plans: list[TopicPlan],
    opts: RunOptions,
    *,
    engine: Engine | None = None,
    retries: int = 2,
    use_group: bool = True,
    stop: threading.Event | None = None,
    progress: ProgressFn | None = None,
    observer: RunObserver | None = None,
    stopped_reason: Callable[[], str | None] | None = None,
    sync_groups: GroupsToSync | None = None,
) -> JobOutcome:
    """Run a sync job from its plans (topic creations already applied).

    On this machine (``engine`` None) partitions run on the ``PartitionRunner``; a one-shot run
    with something to copy joins the local group (``opts.group``, default from the topics) so
    overlapping runs split the work, unless ``use_group`` is off; a run with nothing to copy does
    not join. Follow mode always runs here. Another engine (Spark) runs the tasks itself and holds
    no group membership."""
    started = time.monotonic()
    stop = stop or threading.Event()
    tasks = tasks_for(req, plans, retries)
    group = None
    protocol = None
    fatal = None
    offsets = None
    offsets_done = threading.Event()
    if engine is None:
        if use_group and (opts.follow or tasks):
            group = opts.group or default_group(req.job_topics)
        run_opts = dataclasses.replace(opts, group=group)
        if group or opts.follow:
            # Members own partitions, not copies: every partition of the job's topics (one in
            # sync now is checked again when owned, and followed as the sources grow).
            tasks = tasks_for(req, plans, retries, behind_only=False)
        watch = TopicWatch(req, plans, retries, opts.topic_check_s) if opts.follow else None
        runner = PartitionRunner(
            tasks, pool, run_opts, stop=stop, progress=progress, observer=observer, watch=watch
        )
        if opts.follow and sync_groups is not None:
            offsets = OffsetsFollower(
                pool.get(sync_groups.source),
                pool.get(req.local),
                sync_groups.groups,
                req.topics,
                sync_groups.interval_s,
                offsets_done,
            )
            offsets.start()
        fatal = runner.run()
        results = runner.results
        if runner.member is not None:
            protocol = runner.member.protocol_in_use
        if offsets is not None:
            offsets_done.set()
            offsets.join()
    else:
        results = {(r.topic, r.partition): r for r in engine.run(tasks, pool)} if tasks else {}
    stopped = stop.is_set()
    why = stopped_reason() if stopped_reason and stopped else None
    report = _report(
        req,
        plans,
        results,
        group=group,
        stopped=stopped,
        seconds=time.monotonic() - started,
        why=why,
        fatal=fatal,
    )
    if offsets is not None:
        report = dataclasses.replace(report, group_offsets=tuple(offsets.to_dict()))
    if group and protocol:
        report = dataclasses.replace(report, group=group, group_protocol=protocol)
    code = _follow_exit_status(report) if opts.follow else report.exit_status
    if fatal is not None:
        code = ExitStatus.FAILURE
    return JobOutcome(report, code, fatal)


def run_sync(
    req: SyncRequest,
    pool: ClusterPool,
    *,
    engine: Engine | None = None,
    opts: RunOptions | None = None,
    use_group: bool = True,
    retries: int = 2,
    stop: threading.Event | None = None,
    stopped_reason: Callable[[], str | None] | None = None,
) -> SyncReport:
    """A one-shot sync the way ``partsync sync`` runs it: plan (missing topics created when the
    request says so), then ``run_job`` (in the local group unless ``use_group`` is off, or on
    ``engine``). The demo and the tests use this, so they take the users' path."""
    plans = apply_topic_changes(req, pool, plan_topics(req, pool))
    outcome = run_job(
        req,
        pool,
        plans,
        opts or RunOptions(),
        engine=engine,
        retries=retries,
        use_group=use_group,
        stop=stop,
        stopped_reason=stopped_reason,
    )
    return outcome.report


def plan_exit_status(plans: Sequence[TopicPlan]) -> ExitStatus:
    """``partsync plan``: 3 if anything would be refused (``--scan``: in the data too), 1 if a
    topic failed, a source did not answer or a scan failed, else 0."""
    parts = [p for tp in plans for p in tp.partitions]
    unsafe = any(tp.refused for tp in plans) or any(
        p.condition is Condition.UNSAFE
        or (p.scan is not None and p.scan.stop is not None and p.scan.stop.refused)
        for p in parts
    )
    if unsafe:
        return ExitStatus.UNSAFE
    if any(tp.error or tp.unreachable for tp in plans) or any(
        p.scan is not None and p.scan.error for p in parts
    ):
        return ExitStatus.FAILURE
    return ExitStatus.OK
