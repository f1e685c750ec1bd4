"""The one executor for partition work on this machine: ``PartitionRunner``.

One-shot and follow runs, with or without a group, go through it. It hands every local
partition this process owns to the copy engine (``run.engine``: rounds of re-plan, fence,
verified copy, with the one retry policy, on a few threads for all partitions; a burst of
small copies takes one round together). Ownership comes from the local group (``group`` set:
partsync processes of one job split the partitions through the LOCAL cluster's group
coordinator) or, without one, is every task given.

Losing ownership (rebalance, lease expiry, fencing, a stop request) stops the partition's copy
at once: batches not yet sent are dropped, the ones in flight are confirmed. In follow mode a
caught-up partition waits, without a thread, on the sources' ``Tail`` (the broker's fetch wait)
for new data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, Protocol

from partsync.config import ClusterRef
from partsync.copy.context import ProgressFn
from partsync.copy.options import PARALLELISM
from partsync.copy.producer import transactional_id
from partsync.errors import PartsyncError, SourceGoneError, UnsafeError
from partsync.io.group import GroupMember
from partsync.io.group_lease import LeasedStop
from partsync.io.pool import ClusterPool
from partsync.io.tail import Tail
from partsync.plan.comparator import Condition, PartitionPlan
from partsync.plan.results import PartitionResult, Status
from partsync.run.engine import Engine
from partsync.run.source_ends import SourceEnds
from partsync.run.task import PartitionTask, merge_results
from partsync.run.topic_watch import TopicChanges, TopicWatch

__all__ = ["PartitionRunner", "RunObserver", "RunOptions"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_HEARTBEAT_S = 1.0  # how often the control loop tells the observer it runs (liveness)


@dataclass(frozen=True)
class RunOptions:
    follow: bool = False
    group: str | None = None
    session_timeout_ms: int = 10_000
    # How long a rebalance waits for members to stop writing and rejoin. Stopping takes as long
    # as confirming in-flight appends (well under a second), and some brokers wait this long for
    # a member that died, so it is the session timeout unless set.
    rebalance_timeout_ms: int | None = None
    follow_wait_ms: int = 500
    # Copy rounds running at once; the others wait their turn (idle followers hold no slot).
    parallelism: int = PARALLELISM
    # Follow mode: how often the sources' topics are checked for new partitions and for being
    # deleted and created again.
    topic_check_s: float = 30.0
    # The group protocol: "auto" (KIP-848's where the local cluster offers it), "consumer",
    # "classic" (``io.group``).
    group_protocol: str = "auto"

    @property
    def rebalance_ms(self) -> int:
        return self.rebalance_timeout_ms or self.session_timeout_ms


class RunObserver(Protocol):
    """What a runner reports as it goes (live metrics implement it)."""

    def observe_plan(self, plan: PartitionPlan) -> None: ...

    def observe(self, result: PartitionResult) -> None: ...

    def set_owned(self, parts: Iterable[TopicPartition]) -> None: ...

    def source_high_watermark(self, source: str, topic: str, partition: int, hw: int) -> None: ...

    def source_batch(
        self, source: str, topic: str, partition: int, last_offset: int, max_timestamp: int
    ) -> None: ...

    def heartbeat(self, last_progress: float) -> None:
        """The control loop's tick (about once a second), with the monotonic time of the
        latest verified append (``PartitionRunner.progressed``)."""

    def watch_group(self, member: GroupMember) -> None: ...


class PartitionRunner:
    """Runs the tasks this process owns until stopped (follow) or until each had its rounds."""

    def __init__(
        self,
        tasks: Sequence[PartitionTask],
        pool: ClusterPool,
        opts: RunOptions,
        *,
        stop: threading.Event | None = None,
        progress: ProgressFn | None = None,
        observer: RunObserver | None = None,
        watch: TopicWatch | None = None,
    ) -> None:
        self.pool = pool
        # Follow mode: the sources' topics checked for new partitions and for being recreated.
        self.watch = watch if opts.follow else None
        self._watch_now = threading.Event()
        self.opts = opts
        self.stop = stop or threading.Event()
        self.progress = progress
        self.observer = observer
        # Follow mode: the sources' ends it sees, recorded at each topic check (promote).
        self.source_ends = self.watch.source_ends if self.watch is not None else None
        self.tasks: dict[TopicPartition, PartitionTask] = {t.key: t for t in tasks}
        self.ended: dict[TopicPartition, PartitionTask] = {}  # the watch stopped their topics
        self.results: dict[TopicPartition, PartitionResult] = {}
        # Partitions started and not finished (counted, not scanned: a run of 1000 partitions
        # checks this each time one of them finishes).
        self._running = 0
        self.member: GroupMember | None = None
        # Set when a partition finishes, so a one-shot run ends as soon as the last one does.
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._closing = False  # no partition starts any more
        # The partitions this process owns now (the group's assignments, less its revokes).
        self._owned: set[TopicPartition] = set()
        self.progressed = time.monotonic()  # the latest verified append (liveness)
        self.tails: dict[str, Tail] = {}
        self.engine = _engine(self)
        self._add_tails(tasks)

    def _add_tails(self, tasks: Iterable[PartitionTask]) -> None:
        """Follow mode: a tail for each source of ``tasks`` that has none yet (a topic planned
        only later may be the first from a source)."""
        if not self.opts.follow:
            return
        for ref in {ref.name: ref for t in tasks for ref in t.sources}.values():
            if ref.name not in self.tails:
                tail = _tail(self.pool, ref, self.opts, self.observer, self.source_ends)
                tail.ring_many = self.engine.ring
                self.tails[ref.name] = tail
                self.engine.add_tail(ref.name, tail)

    # -- GroupListener ------------------------------------------------------------------

    def assigned(self, parts: list[TopicPartition], generation: int) -> None:
        with self._lock:
            self._owned.update(parts)
            owned = sorted(self._owned)
        if self.member is None:
            self._prefetch_fencing(parts)
        else:  # not in the group member's thread, which must heartbeat
            threading.Thread(target=self._prefetch_fencing, args=(parts,), daemon=True).start()
        self._start_workers(parts)
        if self.observer:
            self.observer.set_owned(owned)

    def _start_workers(self, parts: list[TopicPartition]) -> None:
        """Hand the engine each partition whose rounds are not going."""
        with self._lock:
            if self._closing:
                return
            starting = []
            for tp in parts:
                task = self.tasks.get(tp)
                if task is None:
                    # A topic this process refused, or a partition it has not seen yet (the
                    # topic grew): not written; the watch looks for new partitions at once.
                    self._watch_now.set()
                    continue
                stop = threading.Event() if self.member is None else LeasedStop(self.member.lease)
                starting.append((task, stop))
            # All queued at once: a burst of small copies is taken together.
            self._running += self.engine.start_all(starting)

    def revoke(self, parts: list[TopicPartition], wait: bool) -> None:
        # Outside the lock: a parked partition's rounds end at once, which reports back here.
        ended = self.engine.stop(parts)
        with self._lock:
            self._owned.difference_update(parts)
            still = sorted(self._owned)
        if wait:
            # Each revoked partition's last append is waited for (in a round together, not the
            # round's other partitions), so no revoked partition is written after this.
            for ev in ended:
                ev.wait()
        if self.observer:
            self.observer.set_owned(still)

    # -- topic changes (follow mode) ------------------------------------------------------

    def _apply(self, change: TopicChanges) -> None:
        for topic, reason in change.refused.items():
            _end_topic(self, topic, reason, Status.UNSAFE)
        for topic, reason in change.gone.items():
            _end_topic(self, topic, reason, Status.SOURCE_GONE)
        if not change.tasks:
            return
        with self._lock:
            for task in change.tasks:
                self.tasks[task.key] = task
        self._add_tails(change.tasks)
        member = self.member
        if member is not None:
            member.resubscribe(change.grown)
        else:
            self.assigned(sorted(t.key for t in change.tasks), 0)

    def _prefetch_fencing(self, parts: list[TopicPartition]) -> None:
        with self._lock:
            tasks = [t for tp in parts if (t := self.tasks.get(tp)) is not None]
        _prefetch_fencing(self.pool, tasks, self.opts.follow)

    # -- bookkeeping --------------------------------------------------------------------

    def record(self, result: PartitionResult) -> None:
        key = (result.topic, result.partition)
        with self._lock:
            prev = self.results.get(key)
            self.results[key] = merge_results(prev, result) if prev else result
        if self.observer:
            self.observer.observe(result)

    def note_progress(self, topic: str, partition: int, size: int, next_offset: int) -> None:
        """The engine's progress callback where an observer watches liveness."""
        self.progressed = time.monotonic()
        if self.progress is not None:
            self.progress(topic, partition, size, next_offset)

    def partition_finished(self, tp: TopicPartition) -> None:
        """The engine's callback once a partition has no more rounds."""
        with self._lock:
            self._running -= 1
        self.wake.set()

    # -- the run ------------------------------------------------------------------------

    def run(self) -> PartsyncError | None:
        """Run until stopped (follow) or until every owned partition had its rounds (one-shot).
        Returns the group's fatal error if membership failed (nothing is written without it);
        the results are in ``results``."""
        opts = self.opts
        fatal: PartsyncError | None = None
        try:
            if opts.group:
                self.member = _group_member(self, opts.group)
                if self.member is None:
                    return None
                if self.observer:
                    self.observer.watch_group(self.member)
                self.member.start()
            else:
                self.assigned(sorted(self.tasks), 0)
            member = self.member
            if self.watch is not None:
                _start_topic_watch(self.watch, self.pool, self.stop, self._watch_now, self._apply)
            beat = 0.0
            while not self.stop.is_set():
                self.wake.clear()
                if self.observer is not None and time.monotonic() - beat >= _HEARTBEAT_S:
                    beat = time.monotonic()
                    self.observer.heartbeat(self.progressed)
                if member is not None and not member.alive:
                    fatal = member.error
                    break
                # One-shot: every partition this process owns now has had its rounds (an int
                # read: the loop looks again at the next wake).
                idle = self._running == 0
                if not opts.follow and idle and (member is None or member.joined.is_set()):
                    break
                self.wake.wait(0.1)
        finally:
            if self.member is not None:
                self.member.stop(timeout=opts.rebalance_ms / 1000 + 30)
                fatal = fatal or self.member.error
            self._watch_now.set()
            with self._lock:
                self._closing = True  # nothing starts after the revoke below
                everything = self.engine.keys()
            self.revoke(everything, wait=True)
            self.engine.close()
            for t in self.tails.values():
                t.close()
        return fatal


# -- the runner's parts that need none of its state ----------------------------------------


def _start_topic_watch(
    watch: TopicWatch,
    pool: ClusterPool,
    stop: threading.Event,
    now: threading.Event,
    apply: Callable[[TopicChanges], None],
) -> None:
    """Follow mode's topic watch, a thread: the sources' topics checked every interval (or at
    once when ``now`` is set) for new partitions, topics and recreated ones."""

    def loop() -> None:
        while not stop.is_set():
            now.wait(watch.interval_s)
            now.clear()
            if stop.is_set():
                return
            try:
                apply(watch.check(pool))
            except PartsyncError as e:
                log.warning("checking the sources' topics: %s", e)
            except Exception:  # pragma: no cover - a bug; the copy itself goes on
                log.exception("topic watch crashed")
                return

    threading.Thread(target=loop, name="topic-watch", daemon=True).start()


def _engine(runner: PartitionRunner) -> Engine:
    observer = runner.observer
    on_plan = observer.observe_plan if observer else None
    if (ends := runner.source_ends) is not None:
        on_plan = _both(on_plan, ends.saw_plan)
    return Engine(
        runner.pool,
        workers=runner.opts.parallelism,
        follow=runner.opts.follow,
        # With an observer, each verified append also stamps the runner's progress
        # (liveness): a field update per batch, read by the control loop.
        progress=runner.note_progress if observer else runner.progress,
        on_round=runner.record,
        on_plan=on_plan,
        on_finished=runner.partition_finished,
        handed_over=lambda: not runner.stop.is_set(),
    )


def _tail(
    pool: ClusterPool,
    ref: ClusterRef,
    opts: RunOptions,
    obs: RunObserver | None,
    ends: SourceEnds | None = None,
) -> Tail:
    on_hw = obs.source_high_watermark if obs else None
    if ends is not None:
        on_hw = _both(on_hw, ends.saw)
    return Tail(pool.get(ref), opts.follow_wait_ms, on_hw, obs.source_batch if obs else None)


_P = ParamSpec("_P")


def _both(first: Callable[_P, None] | None, second: Callable[_P, None]) -> Callable[_P, None]:
    if first is None:
        return second

    def call(*args: _P.args, **kw: _P.kwargs) -> None:
        first(*args, **kw)
        second(*args, **kw)

    return call


def _end_topic(runner: PartitionRunner, topic: str, reason: str, status: Status) -> None:
    """Stop a topic's workers for good (refused, or gone from its sources): nothing more is
    written to it, and each partition's result says why."""
    log.error("%s", reason)
    with runner._lock:
        keys = [k for k in runner.tasks if k[0] == topic]
        runner.ended.update((k, runner.tasks.pop(k)) for k in keys)
        runner._owned.difference_update(keys)
        # A topic ended before (gone, then created again on a source) has no workers left.
        tasks = [t for k, t in runner.ended.items() if k[0] == topic]
    for ev in runner.engine.stop(keys):
        ev.wait()
    for task in tasks:
        runner.record(_ended(task, runner.results.get(task.key), reason, status))


def _ended(
    task: PartitionTask, prev: PartitionResult | None, reason: str, status: Status
) -> PartitionResult:
    """A partition of a topic the watch ended: refused (``unsafe``: recreated on a source) or
    ``source-gone`` (deleted on its sources). Nothing more is written; its end is what was
    mirrored."""
    t, p = task.key
    end = prev.local_end_after if prev else task.plan.local.end
    kind = UnsafeError if status is Status.UNSAFE else SourceGoneError
    return PartitionResult(
        t,
        p,
        status,
        end,
        end,
        task.plan.target_end,
        reason=reason,
        error=kind(reason, topic=t, partition=p, offset=end),
    )


def _prefetch_fencing(pool: ClusterPool, tasks: Iterable[PartitionTask], follow: bool) -> None:
    """Each partition's copy fences under its own transactional id: look up all their
    coordinators in one request first, not one request per partition. A one-shot run only
    fences the partitions it is about to write (a no-op run waits for nothing).

    Not the ids of each partition's 8 transaction slots, which only a usual round's fence
    describes (``describe_transactions`` looks them up, coalesced with the other partitions'
    fences of the moment): for a start of 1000 one-record partitions, which a round together
    copies, looking them all up first took 0.6 s of a 2.4 s run."""
    by_local: dict[ClusterRef, list[str]] = {}
    for task in tasks:
        if task.options.fencing and (follow or task.plan.condition is Condition.BEHIND):
            by_local.setdefault(task.local, []).append(transactional_id(*task.key))
    for ref, ids in by_local.items():
        if len(ids) > 1:
            try:
                pool.get(ref).prefetch_txn_coordinators(ids)
            except Exception:  # only a shortcut: each partition looks its own up anyway
                log.debug("looking up fencing coordinators failed", exc_info=True)


def _group_member(runner: PartitionRunner, group: str) -> GroupMember | None:
    """The runner's member of the local group, over its tasks' topics (None: no topic)."""
    opts, watch = runner.opts, runner.watch
    # A follower's topics whose plan failed are in the subscription too: owned, they have no
    # task yet, and the watch plans them again at once.
    failed = set(watch.failed) if watch is not None else set()
    topics = sorted({t for t, _p in runner.tasks} | failed)
    local = next(iter(runner.tasks.values())).local if runner.tasks else None
    if local is None and failed and watch is not None:
        local = watch.req.local
    if local is None:
        return None
    return GroupMember(
        runner.pool.get(local),
        group,
        topics,
        runner,
        session_timeout_ms=opts.session_timeout_ms,
        rebalance_timeout_ms=opts.rebalance_ms,
        # A cron run must end; a follower keeps trying.
        join_timeout=None if opts.follow else max(30.0, 4 * opts.session_timeout_ms / 1000),
        protocol=opts.group_protocol,
    )
