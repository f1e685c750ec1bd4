"""A one-shot run's first round for many small partitions at once: ``first_round_small``.

Each partition still goes through the steps of its own first round (``task.copy_round``), in
the same order and with the same guarantee, but every step is taken for all of them together:

1. fence: each partition's InitProducerId under its own transactional id (many in flight on
   the coordinators' connections, not one partition after another);
2. copy (``copy.bulk``), a few hundred partitions at a time: one fetch per partition, many
   partitions per Fetch request; once every answer is in, the local bounds, read after the
   fence in one request per leader, must still be what the driver planned with, and the high
   watermark the log end (where the next append lands); right after that the appends, many
   partitions per Produce request, each verified.

Anything else (a refused fence, a local log that moved, a fetch that did not bring the whole
range, a retriable error) sends the partition to the usual per-partition rounds, which also
report it properly. The per-partition task stays the unit an engine runs: this is only the
local runner's way of starting many of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from partsync.copy.bulk import SmallCopy, copy_small, fits_small
from partsync.copy.context import ProgressFn
from partsync.copy.producer import ProducerSession, open_producer
from partsync.errors import PartsyncError
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import PartitionPlan
from partsync.plan.results import PartitionResult, Status
from partsync.run.task import PartitionTask, interrupted

__all__ = ["MIN_PARTITIONS", "choose_small", "first_round_small"]

log = logging.getLogger(__name__)

# Below this many small partitions the usual rounds (a few at a time, each pipelined) are as
# fast; above it their per-partition cost dominates a run.
MIN_PARTITIONS = 32
# InitProducerId calls in flight at once, over this many connections to each coordinator
# (Kafka works through a connection's requests one at a time: 1000 fences took 0.4-1.1 s on
# one connection and 0.27 s on eight).
FENCES_IN_FLIGHT = 16
FENCE_CONNECTIONS = 8

TopicPartition = tuple[str, int]


def choose_small(tasks: Sequence[PartitionTask]) -> list[PartitionTask]:
    """The tasks whose first round ``first_round_small`` takes: small copies planned moments
    ago by this process, when there are enough of them to pay."""
    small = [t for t in tasks if t.plan_is_fresh() and fits_small(t.plan)]
    return small if len(small) >= MIN_PARTITIONS else []


def first_round_small(
    tasks: Sequence[PartitionTask],
    pool: ClusterPool,
    *,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    stops: Mapping[TopicPartition, threading.Event] | None = None,
    handed_over: Callable[[], bool] | None = None,
    on_plan: Callable[[PartitionPlan], None] | None = None,
) -> tuple[list[PartitionResult], list[PartitionTask]]:
    """The first round of each task (all from ``choose_small``): the results of the rounds
    taken, and the tasks to go on with the usual way (not copied here, a failure a retry may
    mend, or a copy a stop cut short, whose result says so as ``task.interrupted`` does).

    ``stops``: a partition's own stop (revoked), which ends its round and no other; ``stop``:
    the one for partitions without their own."""
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
    for group in groups.values():
        done, again = _copy_group(group, pool, progress, stop_of, on_plan)
        for r in done:
            cut = stop_of[(r.topic, r.partition)].is_set() and r.status is Status.ERROR
            results.append(interrupted(r, handed_over) if cut else r)
        rest.extend(again)
    return results, rest


def _copy_group(
    tasks: list[PartitionTask],
    pool: ClusterPool,
    progress: ProgressFn | None,
    stop_of: Mapping[TopicPartition, threading.Event],
    on_plan: Callable[[PartitionPlan], None] | None,
) -> tuple[list[PartitionResult], list[PartitionTask]]:
    first = tasks[0]
    local = pool.get(first.local)
    sources = {ref.name: pool.get(ref) for ref in first.sources}
    sessions = _fence(tasks, pool, stop_of)
    fenced = [t for t in tasks if t.key in sessions]
    again = [t for t in tasks if t.key not in sessions]
    copies = []
    for t in fenced:
        if on_plan is not None:
            on_plan(t.plan)
        copies.append(SmallCopy(t.plan, t.rules, sessions[t.key], stop_of[t.key]))
    by_key = {t.key: t for t in fenced}
    done: list[PartitionResult] = []
    for key, result in copy_small(copies, sources, local, first.options, progress).items():
        if result is None:
            again.append(by_key[key])
            continue
        done.append(result)
        if result.status is Status.ERROR and (result.retriable or stop_of[key].is_set()):
            again.append(by_key[key])  # retried like any failed first round, or cut short
    return done, again


def _fence(
    tasks: list[PartitionTask],
    pool: ClusterPool,
    stop_of: Mapping[TopicPartition, threading.Event],
) -> dict[TopicPartition, ProducerSession]:
    """Each partition's producer session, opened under its own transactional id (which fences
    any earlier writer of it); a partition whose fence failed is left out."""
    local = pool.get(tasks[0].local)

    def fence(t: PartitionTask, n: int) -> ProducerSession | None:
        # Revoked or stopping: fence nothing more (it may be another's now).
        if stop_of[t.key].is_set():
            return None
        try:
            return open_producer(local, t.plan.topic, t.plan.partition, t.options.fencing,
                                 lane=n % FENCE_CONNECTIONS)  # fmt: skip
        except PartsyncError as e:
            log.debug("fencing %s-%d: %s", *t.key, e)
            return None

    with ThreadPoolExecutor(FENCES_IN_FLIGHT, thread_name_prefix="fence") as ex:
        sessions = list(ex.map(fence, tasks, range(len(tasks))))
    return {t.key: s for t, s in zip(tasks, sessions, strict=True) if s is not None}
