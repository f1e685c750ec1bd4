"""A one-shot run's first round for many partitions at once: ``first_round_small``.

Each partition still goes through the steps of its own first round (``task.copy_round``), in
the same order and with the same guarantee, but every step is taken for all of them together:

1. fence: each partition's InitProducerId under its own transactional id (many in flight on
   the coordinators' connections, not one partition after another), while
2. copy (``copy.bulk``), a few hundred partitions at a time, reads the sources: a fetch per
   partition, many partitions per Fetch request; once every first answer and every fence is
   in, the local bounds, read after the fences in one request per leader, must still be what
   the driver planned with, and the high watermark the log end (where the next append lands);
   right after that the appends, many partitions per Produce request, each verified, and the
   next fetches of the partitions with more to read.

Anything else (a refused fence, a local log that moved, a batch the usual round must check, a
retriable error) sends the partition to the usual per-partition rounds, which also report it
properly. The per-partition task stays the unit an engine runs: this is only the local
runner's way of starting many of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from partsync.copy.bulk import WAVE, SmallCopy, copy_small, fits_together
from partsync.copy.context import ProgressFn
from partsync.copy.producer import ProducerSession, open_fenced_producers, open_producer
from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import PartitionPlan
from partsync.plan.results import PartitionResult, Status
from partsync.run.task import PartitionTask, interrupted

__all__ = ["MIN_PARTITIONS", "choose_small", "first_round_small"]

log = logging.getLogger(__name__)

# Below this many small partitions the usual rounds (a few at a time, each pipelined) are as
# fast; above it their per-partition cost dominates a run.
MIN_PARTITIONS = 32
# Fences are sent a wave at a time, all of a wave's at once, over this many connections to
# each coordinator (Kafka works through a connection's requests one at a time: 1000 fences
# took 0.4-1.1 s on one connection and 0.27 s on eight, from threads each waiting for its
# answer). Those that fail there are fenced again with retries, this many at once. A fence
# wave is a copy wave: the copy's first wave needs exactly the first fence wave's fences.
FENCE_WAVE = WAVE
FENCE_CONNECTIONS = 8
FENCES_IN_FLIGHT = 16

TopicPartition = tuple[str, int]


def choose_small(tasks: Sequence[PartitionTask]) -> list[PartitionTask]:
    """The tasks whose first round ``first_round_small`` takes: copies it can make
    (``fits_together``) planned moments ago by this process, when there are enough of them to
    pay."""
    small = [t for t in tasks if t.plan_is_fresh() and fits_together(t.plan, t.options)]
    return small if len(small) >= MIN_PARTITIONS else []


def first_round_small(
    tasks: Sequence[PartitionTask],
    pool: ClusterPool,
    *,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    stops: Mapping[TopicPartition, threading.Event] | None = None,
    settled: Mapping[TopicPartition, threading.Event] | None = None,
    handed_over: Callable[[], bool] | None = None,
    on_plan: Callable[[PartitionPlan], None] | None = None,
) -> tuple[list[PartitionResult], list[PartitionTask]]:
    """The first round of each task (all from ``choose_small``): the results of the rounds
    taken, and the tasks to go on with the usual way (not copied here, a failure a retry may
    mend, or a copy a stop cut short, whose result says so as ``task.interrupted`` does).

    ``stops``: a partition's own stop (revoked), which ends its round and no other; ``stop``:
    the one for partitions without their own. ``settled``: set for each partition once nothing
    of it is in flight and nothing more will be sent in this round (a revoke waits for it)."""
    whole = stop or threading.Event()
    own = stops or {}
    stop_of = {t.key: own.get(t.key, whole) for t in tasks}
    results: list[PartitionResult] = []
    rest: list[PartitionTask] = []
    groups: dict[tuple[object, ...], list[PartitionTask]] = {}
    for t in tasks:
        if stop_of[t.key].is_set():
            rest.append(t)
        else:
            groups.setdefault((t.local, t.sources, t.options), []).append(t)
    settled_of = {t.key: (settled or {}).get(t.key) or threading.Event() for t in tasks}
    try:
        for group in groups.values():
            done, again = _copy_group(group, pool, progress, stop_of, settled_of, on_plan)
            for r in done:
                cut = stop_of[(r.topic, r.partition)].is_set() and r.status is Status.ERROR
                results.append(interrupted(r, handed_over) if cut else r)
            rest.extend(again)
    finally:
        for e in settled_of.values():
            e.set()  # (the copies set theirs already; these were never sent)
    return results, rest


def _copy_group(
    tasks: list[PartitionTask],
    pool: ClusterPool,
    progress: ProgressFn | None,
    stop_of: Mapping[TopicPartition, threading.Event],
    settled_of: Mapping[TopicPartition, threading.Event],
    on_plan: Callable[[PartitionPlan], None] | None,
) -> tuple[list[PartitionResult], list[PartitionTask]]:
    first = tasks[0]
    local = pool.get(first.local)
    sources = {ref.name: pool.get(ref) for ref in first.sources}
    by_key = {t.key: t for t in tasks}
    done: list[PartitionResult] = []
    again: list[PartitionTask] = []
    fences: dict[TopicPartition, Future[ProducerSession | None]] = {t.key: Future() for t in tasks}
    copies = []
    for t in tasks:
        if on_plan is not None:
            on_plan(t.plan)
        copies.append(SmallCopy(t.plan, t.rules, fences[t.key], stop_of[t.key], settled_of[t.key]))
    # The fences run while the sources are read: neither waits for the other (the copy waits
    # for each partition's fence before reading the local bounds it appends after).
    fencer = threading.Thread(
        target=_fence_all, args=(tasks, local, stop_of, fences), name="fences", daemon=True
    )
    fencer.start()
    try:
        results = copy_small(copies, sources, local, first.options, progress)
    finally:
        fencer.join()
    for key, result in results.items():
        if result is None:
            again.append(by_key[key])
            continue
        done.append(result)
        if result.status is Status.ERROR and (result.retriable or stop_of[key].is_set()):
            again.append(by_key[key])  # retried like any failed first round, or cut short
    return done, again


def _fence_all(
    tasks: list[PartitionTask],
    local: Cluster,
    stop_of: Mapping[TopicPartition, threading.Event],
    fences: Mapping[TopicPartition, Future[ProducerSession | None]],
) -> None:
    """Each partition's producer session into its future, in the tasks' order, a wave's worth
    at a time: opened under its own transactional id (which fences any earlier writer of it),
    all of a wave's sent at once (``open_fenced_producers``); those that failed there, or do
    not fence, one at a time with the usual retries. None where that failed too, or where the
    partition was stopped first (it goes the usual way)."""
    try:
        with ThreadPoolExecutor(FENCES_IN_FLIGHT, thread_name_prefix="fence") as one_by_one:
            for i in range(0, len(tasks), FENCE_WAVE):
                wave = [t for t in tasks[i : i + FENCE_WAVE] if not _stopped(t, stop_of, fences)]
                fencing = [t.key for t in wave if t.options.fencing]
                try:
                    opened = open_fenced_producers(local, fencing, lanes=FENCE_CONNECTIONS)
                except Exception:  # a bug: this wave is fenced one at a time
                    log.exception("fencing %d partitions together failed", len(fencing))
                    opened = {}
                for n, t in enumerate(wave):
                    got = opened.get(t.key)
                    if isinstance(got, ProducerSession):
                        fences[t.key].set_result(got)
                        continue
                    if got is not None:
                        log.debug("fencing %s-%d: %s (again, with retries)", *t.key, got)
                    one_by_one.submit(_fence_into, fences[t.key], t, local, stop_of[t.key], n)
    finally:  # a bug: every partition not fenced yet goes the usual way
        for f in fences.values():
            if not f.done():
                f.set_result(None)


def _stopped(
    t: PartitionTask,
    stop_of: Mapping[TopicPartition, threading.Event],
    fences: Mapping[TopicPartition, Future[ProducerSession | None]],
) -> bool:
    # Revoked or stopping: fence nothing more (it may be another's now).
    if stop_of[t.key].is_set():
        fences[t.key].set_result(None)
        return True
    return False


def _fence_into(
    fence: Future[ProducerSession | None],
    t: PartitionTask,
    local: Cluster,
    stop: threading.Event,
    n: int,
) -> None:
    """``fence`` set to the partition's producer session (``open_producer``, which retries),
    or None where that failed or the partition was stopped first."""
    session = None
    try:
        if not stop.is_set():
            session = open_producer(
                local, t.plan.topic, t.plan.partition, t.options.fencing, lane=n % FENCE_CONNECTIONS
            )
    except PartsyncError as e:
        log.debug("fencing %s-%d: %s", *t.key, e)
    finally:
        fence.set_result(session)
