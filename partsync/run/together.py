"""Many partitions' rounds taken together: ``copy_together``, the engine's round for a burst of
ready partitions (a one-shot run's first rounds, a follower's partitions woken by one answer of
a source's long poll).

Each partition still goes through the steps of its own round (``run.task.copy_round``), in the
same order and with the same guarantee, but every step is taken for all of them at once:

1. plan: the bounds of every source and of the local cluster, one request per leader for all
   the partitions (a first round just planned by this process reuses the driver's plan);
2. fence: each partition without a producer session gets one under its own transactional id
   (many in flight on the coordinators' connections), while
3. copy (``copy.bulk``) reads the sources, many partitions per Fetch request; once every first
   answer and every fence is in, the local bounds, read after the fences, must still be the
   plan's, and a local log being continued must end with the source's batch (read from both
   in the same round); then the appends, many partitions per Produce request, each verified.

A partition whose copy is not for this path (``plan.together``), or that meets anything the
usual round must see to (a refused fence, a local log that moved, a transaction, a retriable
error before anything was appended), is handed back untouched: its usual round follows at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from partsync.copy.bulk import WAVE, SmallCopy, copy_small
from partsync.copy.context import ProgressFn
from partsync.copy.producer import ProducerSession, open_fenced_producers, open_producer
from partsync.errors import ClusterError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import Condition, PartitionPlan, plan_partition
from partsync.plan.results import PartitionResult
from partsync.plan.together import TogetherRule, together_ok
from partsync.run.task import PartitionTask
from partsync.run.topic_plan import uncopied_result

__all__ = ["TogetherItem", "TogetherOutcome", "copy_together"]

log = logging.getLogger(__name__)

# Fences are sent a wave at a time, all of a wave's at once, over this many connections to
# each coordinator (Kafka works through a connection's requests one at a time: 1000 fences
# took 0.4-1.1 s on one connection and 0.27 s on eight, from threads each waiting for its
# answer). Those that fail there are fenced again with retries, this many at once. A fence
# wave is a copy wave: the copy's first wave needs exactly the first fence wave's fences.
FENCE_WAVE = WAVE
FENCE_CONNECTIONS = 8
FENCES_IN_FLIGHT = 16

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TogetherItem:
    """One partition's round: its task, the producer session its rounds go on with (None: the
    round fences), its stop, the event set once nothing of it is in flight any more (a revoke
    waits for that, not for the round's other partitions), whether this is the process's
    first round of it, and where its previous round left the local log."""

    task: PartitionTask
    session: ProducerSession | None
    stop: threading.Event
    settled: threading.Event
    first: bool
    last_end: int

    @property
    def key(self) -> TopicPartition:
        return self.task.key


@dataclass(frozen=True)
class TogetherOutcome:
    """A partition's round: its result, or None where it was handed back untouched (its usual
    round follows); and the session to go on with."""

    result: PartitionResult | None
    session: ProducerSession | None
    fenced_here: bool = False  # the session was opened by this round (no transaction slots)


def copy_together(
    items: Sequence[TogetherItem],
    pool: ClusterPool,
    *,
    progress: ProgressFn | None = None,
    on_plan: Callable[[PartitionPlan], None] | None = None,
) -> dict[TopicPartition, TogetherOutcome]:
    """The round of each item (all of one job: the same local cluster, sources and options).
    Never raises for Kafka or data problems: they are a partition's result, or hand it back."""
    first = items[0].task
    local = pool.get(first.local)
    sources = {ref.name: pool.get(ref) for ref in first.sources}
    opts = first.options
    rule = TogetherRule(opts.fill_holes, opts.connections_per_broker)
    plans = _plans(items, local, sources)
    out: dict[TopicPartition, TogetherOutcome] = {}
    copies: list[SmallCopy] = []
    fencing: list[TogetherItem] = []
    fences: dict[TopicPartition, Future[ProducerSession | None]] = {}
    for it in items:
        plan = plans.get(it.key)
        if plan is None or it.stop.is_set():
            out[it.key] = TogetherOutcome(None, it.session)
            continue
        if plan.condition is Condition.IN_SYNC and plan.local.end == it.last_end:
            # Nothing to copy, and nothing moved the local log since this process's last
            # round (an open replayed transaction is the usual round's: not taken together).
            if on_plan is not None:
                on_plan(plan)
            out[it.key] = TogetherOutcome(uncopied_result(plan), it.session)
            continue
        if not together_ok(plan, rule, first_round=it.first) or plan.local.end != it.last_end:
            out[it.key] = TogetherOutcome(None, it.session)
            continue
        if on_plan is not None:
            on_plan(plan)
        fence: Future[ProducerSession | None] = Future()
        if it.session is not None:
            fence.set_result(it.session)
        else:
            fencing.append(it)
        fences[it.key] = fence
        copies.append(SmallCopy(plan, it.task.rules, fence, it.stop, it.settled))
    for it in items:
        if it.key not in fences:
            it.settled.set()  # nothing of it is sent in this round
    if not copies:
        return out
    # The fences run while the sources are read: neither waits for the other (the copy waits
    # for each partition's fence before reading the local bounds it appends after).
    fencer = None
    if fencing:
        fencer = threading.Thread(
            target=_fence_all, args=(fencing, local, fences), name="fences", daemon=True
        )
        fencer.start()
    try:
        results = copy_small(copies, sources, local, opts, progress)
    finally:
        if fencer is not None:
            fencer.join()
    by_key = {it.key: it for it in items}
    for c in copies:
        session = c.fence.result()
        fenced_here = by_key[c.key].session is None
        result = results.get(c.key)
        out[c.key] = TogetherOutcome(result, session, fenced_here=fenced_here)
    return out


def _plans(
    items: Sequence[TogetherItem], local: Cluster, sources: Mapping[str, Cluster]
) -> dict[TopicPartition, PartitionPlan]:
    """Each item's plan: the driver's for a first round it planned moments ago (``copy_round``
    reuses it up to the fence the same way), else one from bounds read now, one request per
    leader for all of a topic's partitions. Left out: a partition whose bounds were not all
    read, whose local high watermark is below its log end (the usual round waits for it), or
    that the driver refused (the usual round reports it)."""
    out: dict[TopicPartition, PartitionPlan] = {}
    by_topic: dict[str, list[TogetherItem]] = {}
    for it in items:
        t = it.task
        if t.plan.condition is Condition.UNSAFE:
            continue
        fresh = it.first and it.session is None and t.plan_is_fresh()
        if fresh and t.plan.condition is Condition.BEHIND:
            out[it.key] = t.plan
            continue
        by_topic.setdefault(t.plan.topic, []).append(it)
    for topic, group in by_topic.items():
        parts = [it.task.plan.partition for it in group]
        try:
            src = {name: c.bounds(topic, parts) for name, c in sources.items()}
            here = local.bounds_and_log_ends(topic, parts)
        except ClusterError as e:
            log.debug("bounds of %s for a round together: %s (the usual rounds)", topic, e)
            continue
        for it in group:
            p = it.task.plan.partition
            local_b, log_end = here[p]
            if log_end != local_b.end:
                continue  # an append not yet replicated: the usual round waits for it
            src_b = {name: b[p] for name, b in src.items()}
            if local_b.end != local_b.log_start and local_b.end < min(
                b.log_start for b in src_b.values()
            ):
                continue  # a local log ending below every source (``local_for_plan``)
            out[it.key] = plan_partition(topic, p, local_b, src_b, it.task.policy)
    return out


def _fence_all(
    items: list[TogetherItem],
    local: Cluster,
    fences: Mapping[TopicPartition, Future[ProducerSession | None]],
) -> None:
    """Each partition's producer session into its future, in the items' order, a wave's worth
    at a time: opened under its own transactional id (which fences any earlier writer of it),
    all of a wave's sent at once (``open_fenced_producers``); those that failed there, or do
    not fence, one at a time with the usual retries. None where that failed too, or where the
    partition was stopped first (it goes the usual way)."""
    try:
        with ThreadPoolExecutor(FENCES_IN_FLIGHT, thread_name_prefix="fence") as one_by_one:
            for i in range(0, len(items), FENCE_WAVE):
                wave = [it for it in items[i : i + FENCE_WAVE] if not _stopped(it, fences)]
                fencing = [it.key for it in wave if it.task.options.fencing]
                try:
                    opened = open_fenced_producers(local, fencing, lanes=FENCE_CONNECTIONS)
                except Exception:  # a bug: this wave is fenced one at a time
                    log.exception("fencing %d partitions together failed", len(fencing))
                    opened = {}
                for n, it in enumerate(wave):
                    got = opened.get(it.key)
                    if isinstance(got, ProducerSession):
                        fences[it.key].set_result(got)
                        continue
                    if got is not None:
                        log.debug("fencing %s-%d: %s (again, with retries)", *it.key, got)
                    one_by_one.submit(_fence_into, fences[it.key], it, local, n)
    finally:  # a bug: every partition not fenced yet goes the usual way
        for f in fences.values():
            if not f.done():
                f.set_result(None)


def _stopped(
    it: TogetherItem, fences: Mapping[TopicPartition, Future[ProducerSession | None]]
) -> bool:
    # Revoked or stopping: fence nothing more (it may be another's now).
    if it.stop.is_set():
        fences[it.key].set_result(None)
        return True
    return False


def _fence_into(
    fence: Future[ProducerSession | None], it: TogetherItem, local: Cluster, n: int
) -> None:
    """``fence`` set to the partition's producer session (``open_producer``, which retries),
    or None where that failed or the partition was stopped first."""
    session = None
    t = it.task
    try:
        if not it.stop.is_set():
            session = open_producer(
                local, t.plan.topic, t.plan.partition, t.options.fencing, lane=n % FENCE_CONNECTIONS
            )
    except PartsyncError as e:
        log.debug("fencing %s-%d: %s", *it.key, e)
    finally:
        fence.set_result(session)
