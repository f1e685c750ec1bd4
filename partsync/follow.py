"""Owning partitions over time: follow mode, and cron runs that share work through a group.

``run_owned`` keeps one worker thread per local partition this process owns. Ownership comes
from the local group (``--group``) or, without one, is every planned partition. A worker:

1. opens its producer session (InitProducerId under the partition's transactional id, which
   fences any earlier writer of the partition),
2. runs copy rounds: re-read bounds, plan, verified copy (the same code as one-shot sync),
3. in follow mode, when caught up, waits on the sources' ``Tail`` (the broker's fetch wait)
   and goes again; in a one-shot run it is done.

Losing ownership (rebalance, lease expiry, fencing, a stop request) stops the worker's copy at
once: batches not yet sent are dropped, the ones in flight are confirmed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from partsync.copier import ProducerSession, ProgressFn, copy_partition, open_producer
from partsync.errors import ExitStatus, PartsyncError, StoppedError
from partsync.group import GroupMember
from partsync.metrics import LiveMetrics
from partsync.plan import Condition, PartitionPlan
from partsync.result import PartitionResult, Status, SyncReport, TopicResult
from partsync.sync import (
    SyncRequest,
    TopicPlan,
    merge_results,
    uncopied_result,
    whole_topic_results,
)
from partsync.tail import Tail
from partsync.task import ClusterPool, PartitionTask, refresh_plan

__all__ = ["OwnedRun", "follow_exit_status", "run_owned"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_RECHECK_S = 30.0  # a caught-up worker re-reads bounds this often even if no doorbell rang
_MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class OwnedRun:
    follow: bool = False
    group: str | None = None
    session_timeout_ms: int = 10_000
    # How long a rebalance waits for members to stop writing and rejoin. Stopping takes as long
    # as confirming in-flight appends (well under a second), and some brokers wait this long for
    # a member that died, so it is the session timeout unless set.
    rebalance_timeout_ms: int | None = None
    follow_wait_ms: int = 500
    retries: int = 2
    # Copy rounds running at once; the others wait their turn (idle followers hold no slot).
    parallelism: int = 8


class _Worker:
    def __init__(self, runner: _Runner, task: PartitionTask) -> None:
        self.runner = runner
        self.task = task
        self.tp: TopicPartition = task.key
        self.stop = threading.Event()
        self.doorbell = threading.Event()
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"own-{task.key[0]}-{task.key[1]}", daemon=True)

    def _stopped(self) -> bool:
        return self.stop.is_set() or self.runner.stop.is_set()

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # pragma: no cover - a bug; report it on the partition
            log.exception("worker %s-%d crashed", *self.tp)
            p = self.task.plan
            self.runner.record(PartitionResult(p.topic, p.partition, Status.ERROR, p.local.end,
                                               p.local.end, p.target_end, reason=f"crashed: {e!r}"))
        finally:
            self.finished.set()

    def _loop(self) -> None:
        r = self.runner
        session: ProducerSession | None = None
        failures = 0
        while not self._stopped():
            with r.slots:
                result, session = self._round(session) if not self._stopped() else (None, session)
            if result is None:
                break
            if self._stopped() and result.status is Status.ERROR:
                # Interrupted by a rebalance, lease expiry or a stop request: what was appended
                # is confirmed and counted; the rest is the next owner's (or run's).
                if r.stop.is_set():
                    result = result.with_status(
                        Status.ERROR, f"stopped on request at offset {result.local_end_after}",
                        StoppedError("stopped on request", offset=result.local_end_after))
                else:
                    result = result.with_status(
                        Status.HANDED_OVER,
                        f"ownership moved to another group member at offset {result.local_end_after}")
            r.record(result)
            if result.status in (Status.UNSAFE, Status.HANDED_OVER):
                return  # it needs a person, or someone else writes it now
            if result.status is Status.ERROR:
                failures += 1
                retriable = bool(result.error and result.error.get("retriable"))
                if not retriable or (not r.opts.follow and failures > r.opts.retries):
                    return
                session = None  # the broker's sequence state is unknown after a failure
                self.stop.wait(min(_MAX_BACKOFF_S, 0.5 * 2 ** failures))
                continue
            failures = 0
            if not r.opts.follow:
                return
            self._wait_for_data(result.local_end_after)

    def _wait_for_data(self, offset: int) -> None:
        self.doorbell.clear()
        for tail in self.runner.tails.values():
            tail.watch(self.tp, offset, self.doorbell)
        deadline = time.monotonic() + _RECHECK_S
        while not self._stopped() and not self.doorbell.wait(0.2):
            if time.monotonic() > deadline:
                break
        for tail in self.runner.tails.values():
            tail.unwatch(self.tp)

    def _round(self, session: ProducerSession | None) -> tuple[PartitionResult, ProducerSession | None]:
        r = self.runner
        t = self.task
        p0 = t.plan
        local = r.pool.get(t.local)
        sources = {ref.name: r.pool.get(ref) for ref in t.sources if ref.name in p0.sources}
        try:
            plan = refresh_plan(t, local, sources)
            if plan.condition is Condition.BEHIND and (session is None or not session.usable):
                # About to write: take the partition over first (the new producer epoch fences
                # any earlier writer), then read the local end again, after the fence.
                session = open_producer(local, p0.topic, p0.partition, t.options.fencing)
                plan = refresh_plan(t, local, sources)
        except PartsyncError as e:
            return uncopied_result(p0).with_status(Status.ERROR, str(e), e), None
        r.metrics_plan(plan)
        if plan.condition is not Condition.BEHIND:
            return uncopied_result(plan), session
        res = copy_partition(plan, sources, local, t.options, t.rules, r.progress, self.stop, session)
        return res, (session if session is not None and session.usable else None)


class _Runner:
    """Starts and stops workers as ownership changes (the group's ``GroupListener``)."""

    def __init__(
        self,
        req: SyncRequest,
        pool: ClusterPool,
        plans: list[TopicPlan],
        opts: OwnedRun,
        stop: threading.Event,
        progress: ProgressFn | None,
        metrics: LiveMetrics | None,
    ) -> None:
        self.req = req
        self.pool = pool
        self.opts = opts
        self.stop = stop
        self.progress = progress
        self.metrics = metrics
        self.tasks: dict[TopicPartition, PartitionTask] = {}
        self.slots = threading.BoundedSemaphore(max(1, opts.parallelism))
        for tp in plans:
            if tp.refused or tp.error:
                continue
            for plan in tp.partitions:
                srcs = tuple(ref for ref in req.sources if ref.name in plan.sources)
                self.tasks[(tp.topic, plan.partition)] = PartitionTask(
                    plan, srcs, req.local, req.options, tp.rules, req.policy
                )
        self.workers: dict[TopicPartition, _Worker] = {}
        self.results: dict[TopicPartition, PartitionResult] = {}
        self._lock = threading.Lock()
        self.generation = -1
        self.tails: dict[str, Tail] = {}
        if opts.follow:
            on_hw = metrics.source_high_watermark if metrics else None
            for ref in req.sources:
                self.tails[ref.name] = Tail(pool.get(ref), opts.follow_wait_ms, on_hw)

    # -- GroupListener ------------------------------------------------------------------

    def assigned(self, parts: list[TopicPartition], generation: int) -> None:
        with self._lock:
            self.generation = generation
            for tp in parts:
                task = self.tasks.get(tp)
                if task is None:
                    continue  # a topic this process refused or does not know; not written
                w = self.workers.get(tp)
                if w is not None and not w.finished.is_set():
                    continue
                w = self.workers[tp] = _Worker(self, task)
                w.thread.start()
        if self.metrics:
            self.metrics.set_owned(parts)

    def revoke(self, parts: list[TopicPartition], wait: bool) -> None:
        with self._lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop.set()
        if wait:
            for w in workers:
                w.thread.join()
        if self.metrics:
            self.metrics.set_owned([])

    # -- bookkeeping --------------------------------------------------------------------

    def record(self, result: PartitionResult) -> None:
        key = (result.topic, result.partition)
        with self._lock:
            prev = self.results.get(key)
            self.results[key] = merge_results(prev, result) if prev else result
        if self.metrics:
            self.metrics.observe(result)

    def metrics_plan(self, plan: PartitionPlan) -> None:
        if self.metrics:
            self.metrics.observe_plan(plan)

    def idle(self) -> bool:
        """One-shot: every partition this process owns now has had its round."""
        with self._lock:
            return all(w.finished.is_set() for w in self.workers.values())

    def close(self) -> None:
        for t in self.tails.values():
            t.close()

    def report(self, plans: list[TopicPlan], seconds: float, stopped: str | None) -> SyncReport:
        """Every planned partition: what this process did with it, else what the plan found."""
        topics = []
        for tp in plans:
            if tp.refused or tp.error:
                topics.append(whole_topic_results(tp))
                continue
            parts = []
            for plan in tp.partitions:
                r = self.results.get((tp.topic, plan.partition))
                if r is None:
                    r = uncopied_result(plan)
                    if plan.condition is Condition.BEHIND:
                        r = (r.with_status(Status.HANDED_OVER,
                                           f"owned by another member of group {self.opts.group!r}")
                             if self.opts.group and not self.stop.is_set()
                             else r.with_status(Status.ERROR, "not reached before the stop",
                                                StoppedError("not reached before the stop")))
                parts.append(r)
            topics.append(TopicResult(tp.topic, tuple(parts), tp.warnings))
        return SyncReport(tuple(topics), seconds, stopped)


def run_owned(
    req: SyncRequest,
    pool: ClusterPool,
    plans: list[TopicPlan],
    opts: OwnedRun,
    *,
    stop: threading.Event,
    progress: ProgressFn | None = None,
    metrics: LiveMetrics | None = None,
    stopped_reason: Callable[[], str | None] | None = None,
) -> tuple[SyncReport, PartsyncError | None]:
    """Run until stopped (follow) or until every owned partition had its round (one-shot).

    Returns the report of the partitions this process wrote or checked, and the group's fatal
    error if membership failed (nothing is written without membership)."""
    started = time.monotonic()
    runner = _Runner(req, pool, plans, opts, stop, progress, metrics)
    member: GroupMember | None = None
    fatal: PartsyncError | None = None
    try:
        if opts.group:
            topics = sorted({t for t, _p in runner.tasks})
            member = GroupMember(pool.get(req.local), opts.group, topics, runner,
                                 session_timeout_ms=opts.session_timeout_ms,
                                 rebalance_timeout_ms=opts.rebalance_timeout_ms or opts.session_timeout_ms,
                                 # A cron run must end; a follower keeps trying.
                                 join_timeout=None if opts.follow else max(30.0, 4 * opts.session_timeout_ms / 1000))
            if metrics:
                metrics.member = member
            member.start()
        else:
            runner.assigned(sorted(runner.tasks), 0)
        while not stop.wait(0.1):
            if member is not None and not member.alive:
                fatal = member.error
                break
            if not opts.follow and runner.idle() and (member is None or member.joined.is_set()):
                break
    finally:
        if member is not None:
            member.stop(timeout=(opts.rebalance_timeout_ms or opts.session_timeout_ms) / 1000 + 30)
            fatal = fatal or member.error
        runner.revoke([], wait=True)
        runner.close()
    why = stopped_reason() if stopped_reason and stop.is_set() else None
    return runner.report(plans, time.monotonic() - started, why), fatal


def follow_exit_status(report: SyncReport) -> ExitStatus:
    """Follow mode ends by being stopped: rounds cut short by the stop are not failures."""
    code = report.exit_status
    if code is ExitStatus.FAILURE and all(
        p.status is not Status.ERROR or (p.error or {}).get("error") == "StoppedError"
        for p in report.all_partitions()
    ):
        return ExitStatus.OK
    return code
