"""The copy engine: every partition this process owns, driven by a few threads.

Each partition is a small record of where its rounds stand (``_Part``); the step after each
round is ``plan.rounds.after_round``'s. A partition is in one of four states:

- ``ready``: queued for a round;
- ``running``: a worker thread runs its round (``run.task.copy_round``: re-plan, fence,
  verified copy), then carries out the decision. A burst of ready partitions of one job (a
  one-shot run's start, a follower's partitions woken by one answer of a long poll) is taken
  together, one round for all of them (``run.together``: many partitions per request, each
  still planned, fenced, compared with the local log and verified); a partition that round
  hands back gets its usual round at once;
- ``parked``: waiting, with no thread: for a source to have data (follow mode: every source's
  ``Tail`` long-polls the partition's leader and calls back, also for an error worth
  re-planning for), or for its backoff after a failure (one timer thread for all). An idle
  partition costs nothing but its place in the tails' long polls;
- ``done``: its rounds are over (caught up in a one-shot run, unsafe, handed over, stopped).

Rounds run on at most ``workers`` threads at once (started as rounds queue up), which is also
the bound on concurrent copies. One partition never has two rounds at once, so there is at most
one append in flight per partition as the copy keeps it (Kafka checks sequence numbers and
epoch fencing per producer and partition).

A stop (a revoke, the run's stop, an expired lease read through ``LeasedStop``) ends a running
round at its next batch (the copy checks the stop; appends in flight are confirmed) and a parked
partition at once. A partition that has not had a round yet still gets one, which the stop ends
at once, so every partition the engine was given has a result.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from partsync.copy.context import ProgressFn
from partsync.copy.producer import ProducerSession
from partsync.errors import PartsyncError
from partsync.io.pool import ClusterPool
from partsync.io.tail import WakeFn
from partsync.plan.comparator import PartitionPlan
from partsync.plan.results import PartitionResult, Status
from partsync.plan.rounds import Decision, RoundsState, Step, after_round
from partsync.plan.together import TOGETHER_MAX, TOGETHER_MIN
from partsync.retry import Backoff
from partsync.run import heap
from partsync.run.scheduler import Scheduler
from partsync.run.task import (
    RETRY_CAP_S,
    RETRY_FIRST_S,
    PartitionTask,
    copy_round,
    interrupted,
    merge_results,
    refresh_metadata,
)
from partsync.run.together import TogetherItem, TogetherOutcome, copy_together

__all__ = ["Doorbell", "Engine", "RoundFn", "run_partition_task", "run_tasks"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# ``run.task.copy_round``'s shape: one round of a partition, and the session to go on with.
RoundFn = Callable[..., tuple[PartitionResult, ProducerSession | None]]
# ``run.together.copy_together``'s shape: one round of many partitions.
TogetherFn = Callable[..., dict[TopicPartition, TogetherOutcome]]


class Doorbell(Protocol):
    """What a parked follower waits on: a source's ``io.tail.Tail``."""

    def watch(self, tp: TopicPartition, offset: int, wake: WakeFn) -> None: ...

    def unwatch(self, tp: TopicPartition) -> None: ...


@dataclass(eq=False)
class _Part:
    task: PartitionTask
    stop: threading.Event
    last_end: int
    backoff: Backoff = field(default_factory=lambda: Backoff(RETRY_FIRST_S, RETRY_CAP_S))
    session: ProducerSession | None = None
    merged: PartitionResult | None = None
    rounds: RoundsState = field(default_factory=RoundsState)
    state: str = "ready"
    # Bumped each time the partition parks: a wake-up (doorbell, timer) for an older parking
    # is stale and ignored.
    parking: int = 0
    refresh: bool = False  # read the clusters' metadata again before the next round
    usual: bool = False  # a round together handed it back: its next round is the usual one
    # In a round together: set once nothing of the partition is in flight (a revoke waits for
    # this, not for the round's other partitions).
    settled: threading.Event | None = None
    # The session was opened by a round together, without the transaction slots a replay of
    # transactions describes at its fence (``copy.producer.open_producer_for``).
    plain: bool = False
    finished: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> TopicPartition:
        return self.task.key

    def took(
        self,
        result: PartitionResult,
        session: ProducerSession | None,
        *,
        follow: bool,
        handed_over: Callable[[], bool] | None,
    ) -> tuple[PartitionResult, Decision]:
        """Record a round that ended with ``result`` (the session to go on with, where it left
        the local log, the rounds merged) and decide the step after it (``plan.rounds``).
        Returns the result as reported (a stop's error is an interruption) and the decision."""
        self.session = session
        self.last_end = result.local_end_after
        stopped = self.stop.is_set()
        if stopped and result.status in (Status.ERROR, Status.STOPPED):
            result = interrupted(result, handed_over)
        self.merged = merge_results(self.merged, result) if self.merged is not None else result
        d = after_round(
            result, self.rounds, follow=follow, retries=self.task.retries, stopped=stopped
        )
        self.rounds = d.state
        if d.reset_backoff:
            self.backoff.reset()
        if d.step in (Step.AGAIN, Step.RETRY) or self.session is None:
            # The broker's sequence state is unknown after a failure; a new round fences anew.
            self.session, self.plain = None, False
        return result, d


class Engine:
    """Runs partitions' rounds on at most ``workers`` threads; follow mode parks caught-up
    partitions on the sources' ``tails``. ``on_round`` gets every round's result as it ends,
    ``on_finished`` each partition's key when its rounds are over. ``copy``: the
    round (``run.task.copy_round``; the engine's own tests give a scripted one)."""

    def __init__(
        self,
        pool: ClusterPool,
        *,
        workers: int,
        follow: bool,
        tails: Mapping[str, Doorbell] | None = None,
        progress: ProgressFn | None = None,
        on_round: Callable[[PartitionResult], None] | None = None,
        on_plan: Callable[[PartitionPlan], None] | None = None,
        on_finished: Callable[[TopicPartition], None] | None = None,
        handed_over: Callable[[], bool] | None = None,
        copy: RoundFn = copy_round,
        together: TogetherFn | None = copy_together,
    ) -> None:
        self.pool = pool
        self.follow = follow
        self.tails: Mapping[str, Doorbell] = dict(tails or {})
        self.progress = progress
        self.on_round = on_round
        self.on_plan = on_plan
        self.on_finished = on_finished
        self.handed_over = handed_over
        self.copy = copy
        self._together = _Together(self, together) if together is not None else None
        gather = self._together.take if self._together is not None else None
        self._sched: Scheduler[_Part] = Scheduler(workers, self._run, gather=gather)
        self._lock = self._sched.lock
        self._parts: dict[TopicPartition, _Part] = {}
        heap.settle()  # the imports and the plan are made: leave them out of collections

    # -- what the runner asks -----------------------------------------------------------

    def start(self, task: PartitionTask, stop: threading.Event) -> bool:
        """Queue the partition's first round; False if its rounds are still going (it is not
        started twice) or the engine is closed."""
        return self.start_all([(task, stop)]) == 1

    def start_all(self, tasks: Iterable[tuple[PartitionTask, threading.Event]]) -> int:
        """``start`` each (task, stop), all queued at once (so a round together can take them
        all); how many were started."""
        started = 0
        with self._lock:
            for task, stop in tasks:
                cur = self._parts.get(task.key)
                if self._sched.closed or (cur is not None and not cur.finished.is_set()):
                    continue
                part = _Part(task, stop, last_end=task.plan.local.end)
                self._parts[task.key] = part
                self._sched.ready(part)
                started += 1
        return started

    def keys(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._parts)

    def stop(self, keys: Iterable[TopicPartition]) -> list[threading.Event]:
        """Stop these partitions' rounds: a parked one ends now, a running one at its next
        batch. Returns what to wait on for each to be over."""
        over: list[_Part] = []
        waits = []
        with self._lock:
            for tp in keys:
                part = self._parts.get(tp)
                if part is None:
                    continue
                part.stop.set()
                # In a round together, its own part of the round ends the writes.
                waits.append(part.settled or part.finished)
                if part.state == "parked":  # parked only after a round: it has a result
                    part.state = "done"
                    over.append(part)
        for part in over:
            self._finish(part)
        return waits

    def merged(self, tp: TopicPartition) -> PartitionResult | None:
        """The partition's rounds so far, merged into one result (None before its first)."""
        with self._lock:
            part = self._parts.get(tp)
            return None if part is None else part.merged

    def ends(self, keys: Iterable[TopicPartition]) -> list[threading.Event]:
        """What to wait on for these partitions' rounds to be over."""
        with self._lock:
            return [self._parts[tp].finished for tp in keys if tp in self._parts]

    def close(self) -> None:
        """Stop every partition, wait for their rounds, end the threads."""
        for ev in self.stop(self.keys()):
            ev.wait()
        self._sched.close()

    @property
    def threads(self) -> int:
        return self._sched.threads

    def add_tail(self, name: str, tail: Doorbell) -> None:
        """A source's tail for followers to park on (replaced, not changed: the engine's
        threads iterate the one they read)."""
        self.tails = {**self.tails, name: tail}

    def ring(self, wakes: list[WakeFn]) -> None:
        """Ring parked partitions' doorbells all at once (a tail's ``ring_many``): a worker
        then takes the partitions one answer woke in one round."""
        with self._sched.hold():
            for wake in wakes:
                wake()

    # -- one partition's rounds -----------------------------------------------------------

    def _run(self, parts: list[_Part]) -> None:
        part = parts[0]
        try:
            if len(parts) > 1:
                assert self._together is not None
                self._together.round(parts)
            else:
                self._round(part)
        except Exception as e:  # pragma: no cover - a bug; report it on the partitions
            log.exception("rounds of %s-%d crashed", *part.key)
            _crash(self, parts, e)

    def _park(self, part: _Part, delay: float | None, watch_from: int | None) -> None:
        """Park ``part`` until ``delay`` passes or (``watch_from`` set) a source has data."""
        with self._lock:
            if not part.stop.is_set():
                parking = self._sched.park(part, delay)
                if watch_from is not None:
                    # Under the lock, so a stop cannot finish the partition between its
                    # parking and its watches (a tail calls back outside its own lock).
                    wake = functools.partial(self._sched.wake, part, parking)
                    for tail in self.tails.values():
                        tail.watch(part.key, watch_from, wake)
                return
            part.state = "done"
        self._finish(part)

    def _done(self, part: _Part) -> None:
        with self._lock:
            part.state = "done"
        self._finish(part)

    def _round(self, part: _Part) -> None:
        """One usual round of ``part`` and the step after it."""
        part.usual = False
        for tail in self.tails.values():
            tail.unwatch(part.key)
        if part.merged is not None and part.stop.is_set():
            self._done(part)
            return
        if part.refresh:
            part.refresh = False
            refresh_metadata(part.task, self.pool)  # a moved leader is asked, not the old one
        result, session = self.copy(
            part.task,
            self.pool,
            part.session,
            progress=self.progress,
            stop=part.stop,
            on_plan=self.on_plan,
            first=part.merged is None,
            last_end=part.last_end,
        )
        self._after(part, result, session)

    def _after(self, part: _Part, result: PartitionResult, session: ProducerSession | None) -> None:
        """Carry out the step after a round of ``part`` that ended with ``result``."""
        result, d = part.took(result, session, follow=self.follow, handed_over=self.handed_over)
        if self.on_round is not None:
            self.on_round(result)
        if d.step is Step.DONE:
            self._done(part)
        elif d.step is Step.AGAIN:
            with self._lock:
                self._sched.ready(part)
        elif d.step is Step.RETRY:
            part.refresh = True  # a moved leader is asked, not the old one
            self._park(part, part.backoff.next_delay(), None)
        else:
            self._park(part, None, d.wait_from)

    def _finish(self, part: _Part) -> None:
        for tail in self.tails.values():
            tail.unwatch(part.key)
        part.session = None
        part.finished.set()
        if self.on_finished is not None:
            self.on_finished(part.key)


class _Together:
    """The engine's rounds taken together (``run.together``): which ready partitions join a
    partition's round, and that round."""

    def __init__(self, engine: Engine, copy: TogetherFn) -> None:
        self.engine = engine
        self.copy = copy

    def take(self, part: _Part) -> list[_Part]:
        """``part`` and the ready partitions of its job to take a round together with, when
        there are at least ``TOGETHER_MIN`` of them; else ``[part]`` (the scheduler's
        ``gather``: the lock is held)."""
        if not _may_go_together(part):
            return [part]
        t = part.task
        job = (t.local, t.sources, t.options)

        def fits(other: _Part) -> bool:
            o = other.task
            return (o.local, o.sources, o.options) == job and _may_go_together(other)

        others = self.engine._sched.take(fits, TOGETHER_MAX - 1, least=TOGETHER_MIN - 1)
        parts = [part, *others]
        if len(parts) > 1:
            for p in parts:
                p.settled = threading.Event()
        return parts

    def round(self, parts: list[_Part]) -> None:
        """One round for all of ``parts``; the ones it hands back get their usual round next."""
        engine = self.engine
        for part in parts:
            for tail in engine.tails.values():
                tail.unwatch(part.key)
        items = []
        for p in parts:
            assert p.settled is not None
            first = p.merged is None
            items.append(TogetherItem(p.task, p.session, p.stop, p.settled, first, p.last_end))
        outcome = self.copy(items, engine.pool, progress=engine.progress, on_plan=engine.on_plan)
        back = sum(o.result is None for o in outcome.values())
        log.debug("a round together of %d partitions handed back %d", len(parts), back)
        for p in parts:
            with engine._lock:
                p.settled = None
            got = outcome[p.key]
            p.plain = p.plain or got.fenced_here
            if got.result is not None:
                engine._after(p, got.result, got.session)
                continue
            # Handed back untouched: the usual round now. A replay of transactions needs the
            # usual fence's slots: it fences again.
            p.session = got.session
            if p.plain and p.task.options.replay_transactions:
                p.session, p.plain = None, False
            p.usual = True
            with engine._lock:
                engine._sched.ready(p)


def _may_go_together(part: _Part) -> bool:
    """Whether the partition's next round may be taken together: not right after a round
    together handed it back or a failure (metadata is read again first), and with no session
    or one the round can go on with (no replayed transaction open, not due for renewal)."""
    s = part.session
    return (
        not part.usual
        and not part.refresh
        and not part.stop.is_set()
        and (
            s is None
            or s.usable
            and not s.open_txns
            and not s.older_than(part.task.options.fencing_renew_s)
        )
    )


def _crash(engine: Engine, parts: list[_Part], e: Exception) -> None:
    """A bug ended the round of ``parts``: the ones still in it end with it as their error."""
    for p in parts:
        if p.settled is not None:
            p.settled.set()
            p.settled = None
        if p.state != "running" or p.finished.is_set():
            continue
        crash = _crashed(p, e)
        p.merged = merge_results(p.merged, crash) if p.merged is not None else crash
        if engine.on_round is not None:
            engine.on_round(crash)
        engine._done(p)


def _crashed(part: _Part, e: Exception) -> PartitionResult:
    p = part.task.plan
    crash = PartsyncError(f"crashed: {e!r}")
    end = part.last_end
    return PartitionResult(
        p.topic, p.partition, Status.ERROR, end, end, p.target_end, reason=str(crash), error=crash
    )


def run_tasks(
    tasks: Sequence[PartitionTask],
    pool: ClusterPool | None = None,
    *,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    workers: int = 1,
) -> list[PartitionResult]:
    """One-shot rounds of ``tasks`` on an engine of their own (a Spark executor's task; with a
    pool of its own unless one is given), each result merged over its rounds. Never raises for
    Kafka or data problems: they come back as the result's status and reason.

    Each result is reported against the driver's starting point, so a resumed task's numbers
    add up."""
    own = pool is None
    pool = pool or ClusterPool()
    stop = stop or threading.Event()
    engine = Engine(pool, workers=workers, follow=False, progress=progress)
    try:
        engine.start_all((task, stop) for task in tasks)
        for ev in engine.ends([t.key for t in tasks]):
            ev.wait()
        merged = [engine.merged(t.key) for t in tasks]
    finally:
        engine.close()
        if own:
            pool.close()
    out = []
    for task, result in zip(tasks, merged, strict=True):
        assert result is not None, f"{task.key}: every started partition has a round"
        out.append(_from_driver_start(task, result))
    return out


def run_partition_task(
    task: PartitionTask,
    pool: ClusterPool | None = None,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
) -> PartitionResult:
    """One partition's one-shot rounds (``run_tasks`` of one)."""
    return run_tasks([task], pool, progress=progress, stop=stop)[0]


def _from_driver_start(task: PartitionTask, result: PartitionResult) -> PartitionResult:
    start = task.plan.local.end
    if result.local_end_before != start:
        result = result.with_copy(local_end_before=start)
        if result.status is Status.IN_SYNC and result.local_end_after != start:
            result = result.with_copy(status=Status.SYNCED)
    return result
