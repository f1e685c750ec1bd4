"""The copy engine: every partition this process owns, driven by a few threads.

Each partition is a small record of where its rounds stand (``_Part``); the step after each
round is ``plan.rounds.after_round``'s. A partition is in one of four states:

- ``ready``: queued for a round;
- ``running``: a worker thread runs its round (``run.task.copy_round``: re-plan, fence,
  verified copy), then carries out the decision;
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
from partsync.plan.rounds import RoundsState, Step, after_round
from partsync.retry import Backoff
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

__all__ = ["Doorbell", "Engine", "RoundFn", "run_partition_task", "run_tasks"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# ``run.task.copy_round``'s shape: one round of a partition, and the session to go on with.
RoundFn = Callable[..., tuple[PartitionResult, ProducerSession | None]]


class Doorbell(Protocol):
    """What a parked follower waits on: a source's ``io.tail.Tail``."""

    def watch(self, tp: TopicPartition, offset: int, wake: WakeFn) -> None: ...

    def unwatch(self, tp: TopicPartition) -> None: ...


@dataclass(eq=False)
class _Part:
    task: PartitionTask
    stop: threading.Event
    after: PartitionResult | None  # a first round that failed elsewhere (``run.small``)
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
    finished: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> TopicPartition:
        return self.task.key


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
    ) -> None:
        self.pool = pool
        self.follow = follow
        self.tails = dict(tails or {})
        self.progress = progress
        self.on_round = on_round
        self.on_plan = on_plan
        self.on_finished = on_finished
        self.handed_over = handed_over
        self.copy = copy
        self._sched: Scheduler[_Part] = Scheduler(workers, self._run)
        self._lock = self._sched.lock
        self._parts: dict[TopicPartition, _Part] = {}

    # -- what the runner asks -----------------------------------------------------------

    def start(
        self, task: PartitionTask, stop: threading.Event, after: PartitionResult | None = None
    ) -> bool:
        """Queue the partition's first round; False if its rounds are still going (it is not
        started twice) or the engine is closed."""
        with self._lock:
            cur = self._parts.get(task.key)
            if self._sched.closed or (cur is not None and not cur.finished.is_set()):
                return False
            part = _Part(task, stop, after, last_end=task.plan.local.end)
            self._parts[task.key] = part
            self._sched.ready(part)
            return True

    def started(self, tp: TopicPartition) -> bool:
        """The partition was given to the engine (its rounds may be over)."""
        with self._lock:
            return tp in self._parts

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
                waits.append(part.finished)
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

    # -- one partition's rounds -----------------------------------------------------------

    def _run(self, part: _Part) -> None:
        try:
            self._round(part)
        except Exception as e:  # pragma: no cover - a bug; report it on the partition
            log.exception("rounds of %s-%d crashed", *part.key)
            crash = _crashed(part, e)
            part.merged = merge_results(part.merged, crash) if part.merged is not None else crash
            if self.on_round is not None:
                self.on_round(crash)
            self._done(part)

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
        """One round of ``part`` and the step after it."""
        for tail in self.tails.values():
            tail.unwatch(part.key)
        if part.merged is not None and part.stop.is_set():
            self._done(part)
            return
        if part.refresh:
            part.refresh = False
            refresh_metadata(part.task, self.pool)  # a moved leader is asked, not the old one
        reported = part.after is not None
        if part.after is not None:
            result, part.after = part.after, None
        else:
            result, part.session = self.copy(
                part.task,
                self.pool,
                part.session,
                progress=self.progress,
                stop=part.stop,
                on_plan=self.on_plan,
                first=part.merged is None,
                last_end=part.last_end,
            )
        part.last_end = result.local_end_after
        stopped = part.stop.is_set()
        if stopped and result.status in (Status.ERROR, Status.STOPPED):
            result = interrupted(result, self.handed_over)
        if self.on_round is not None and not reported:
            self.on_round(result)
        part.merged = merge_results(part.merged, result) if part.merged is not None else result
        d = after_round(
            result, part.rounds, follow=self.follow, retries=part.task.retries, stopped=stopped
        )
        part.rounds = d.state
        if d.reset_backoff:
            part.backoff.reset()
        if d.step is Step.DONE:
            self._done(part)
        elif d.step is Step.AGAIN:
            part.session = None
            with self._lock:
                self._sched.ready(part)
        elif d.step is Step.RETRY:
            part.session = None  # the broker's sequence state is unknown after a failure
            part.refresh = True
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
        for task in tasks:
            engine.start(task, stop)
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
