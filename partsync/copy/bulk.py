"""Many partitions copied together: ``copy_small``.

A first sync of 1000 one-record partitions spent ~17 ms of a parallelism slot on each, in
machinery made for large copies (a worker and fetcher threads, pieces, a fetch and an append
each waited for in turn); 128 partitions of 1.6 MB each spent the same per partition, plus a
thread hand-over per batch. Here every partition's range is read through the fetch lanes (many
partitions per Fetch request) and appended through the shared writer (many partitions per
Produce request), with the same sender and the same check of every answer as
``append_in_order``: one append in flight per partition, each verified to land at exactly the
source's offset. One thread drives them all: each partition has one fetch in flight, asked
again as soon as its answer's batches are staged behind its append in flight, and the memory
budget bounds what is fetched and not yet appended.

The engine's rounds taken together come here (``run.together``; which copies may is
``plan.together``: one source, no fillers, an empty local partition or one whose last batch is
compared here with the source's, read in the same round). A partition whose first fetch brings
anything unusual is handed back untouched (nothing appended), and its usual round copies it,
which also reports whatever was wrong with it; one that meets something unusual later (a
transaction, a compaction hole, a batch the local topic would refuse, a throttled fetch) stops
before it, and its usual rounds go on from the local end. A partition's job is in
``copy.bulk_job``, the reading on after the first fetch in ``copy.bulk_reading``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

from partsync.copy.bulk_job import (
    SMALL_FETCH_BYTES,
    Job,
    SmallCopy,
    fetch_size,
    finish_job,
    hand_back,
    settled_once_fenced,
    usual_rounds_must,
)
from partsync.copy.bulk_reading import go_on
from partsync.copy.context import CopyContext, ProgressFn, Stop
from partsync.copy.fetcher import throttle
from partsync.copy.options import CopyOptions
from partsync.copy.sender import Sender
from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.reader import RangeRead
from partsync.plan.comparator import Bounds, PartitionPlan
from partsync.plan.results import PartitionResult
from partsync.plan.together import SMALL_OFFSETS
from partsync.wire.batch import Batch
from partsync.wire.digest import batch_digest

__all__ = ["SMALL_FETCH_BYTES", "WAVE", "SmallCopy", "copy_small"]

log = logging.getLogger(__name__)

# Partitions fetched and appended together (their fetches' bytes are held at once).
WAVE = 256

TopicPartition = tuple[str, int]


def copy_small(
    copies: Sequence[SmallCopy],
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    progress: ProgressFn | None = None,
) -> dict[TopicPartition, PartitionResult | None]:
    """Copy each partition (all must ``fits_together``); its result, or None where it was
    handed back untouched (also where its ``stop`` was set before it was sent). Never raises:
    an error that stops a partition's appends is its result, as in ``copy_partition``."""
    out: dict[TopicPartition, PartitionResult | None] = {}
    # A wave's fetches are held until its appends: at most a quarter of the memory budget.
    wave = max(1, min(WAVE, opts.memory_budget // (4 * SMALL_FETCH_BYTES)))
    done = threading.Event()
    if len({id(c.stop) for c in copies}) > 1:  # stops of their own: a group member's revokes
        threading.Thread(
            target=_let_go_stopped, args=(copies, done), daemon=True, name="round-revokes"
        ).start()
    try:
        for i in range(0, len(copies), wave):
            try:
                _wave(copies[i : i + wave], sources, local, opts, progress, out)
            except Exception:  # a bug: every partition without a result goes the usual way
                log.exception("copying small partitions together failed")
                out.update((c.key, None) for c in copies[i:] if c.key not in out)
                break
            finally:
                for c in copies[i : i + wave]:
                    settled_once_fenced(c)
    finally:
        done.set()
        for c in copies:
            settled_once_fenced(c)
    return out


def _let_go_stopped(copies: Sequence[SmallCopy], done: threading.Event) -> None:
    """A copy revoked before its wave began is settled at once (once its fence answered): the
    revoke need not wait for the waves before it, which may hold long copies."""
    waiting = list(copies)
    while waiting and not done.wait(0.05):
        left = []
        for c in waiting:
            if c.claim.let_go_if_stopped(c.stop):
                settled_once_fenced(c)
            elif not c.claim.begun:
                left.append(c)
        waiting = left


def _wave(
    copies: Sequence[SmallCopy],
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    progress: ProgressFn | None,
    out: dict[TopicPartition, PartitionResult | None],
) -> None:
    """One wave's results into ``out``; every partition of it gets one, whatever is raised
    (appends sent are waited for and reported, everything else is handed back)."""
    jobs: list[Job] = []
    try:
        _fetch_and_append(copies, sources, local, opts, progress, jobs, out)
    finally:
        for job in jobs:
            if job.copy.key in out:
                continue
            if job.sender is not None:
                finish_job(job, out)
            else:
                hand_back(job, out, "not sent")
        out.update((c.key, None) for c in copies if c.key not in out)


def _fetch_and_append(
    copies: Sequence[SmallCopy],
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    progress: ProgressFn | None,
    jobs: list[Job],
    out: dict[TopicPartition, PartitionResult | None],
) -> None:
    first_size = fetch_size(opts, len(copies))
    for c in copies:
        plan = c.plan
        if not c.claim.begin(c.stop):
            out[c.key] = None
            settled_once_fenced(c)
            continue
        source = plan.serving[0]
        ctx = CopyContext(plan, sources, local, opts, c.rules, progress, c.stop)
        small = plan.missing <= SMALL_OFFSETS
        size = min(SMALL_FETCH_BYTES, opts.fetch_bytes) if small else first_size
        # A local log to continue: its last batch is read from both sides (the source's fetch
        # begins at the batch holding the offset below the local end, one batch early) and
        # compared before anything is appended, as the usual round's boundary check does.
        continues = _continues(plan)
        start = plan.copy_start - 1 if continues else plan.copy_start
        read = RangeRead(
            source, plan.topic, plan.partition, start, plan.target_end, opts.fetch_bytes
        )
        job = Job(c, ctx, source, read, size, started=time.monotonic())
        job.tip = SMALL_FETCH_BYTES if continues else 0
        tip = job.tip
        jobs.append(job)
        try:
            # Never waits: this thread holds the wave's earlier reservations until it appends,
            # so a small --memory-budget leaves the rest of the wave to the usual rounds.
            if not ctx.budget.acquire(size + tip, 0, wait=False):
                hand_back(job, out, "no room in the memory budget")
                continue
            lane = sources[source].fetch_lane(
                plan.topic, plan.partition, 0, in_flight=opts.fetches_in_flight
            )
            job.fetch = lane.submit(
                plan.topic, plan.partition, start, size, max_wait_ms=opts.fetch_wait_ms
            )
            if tip:
                # Not max_wait_ms 0: a broker may answer that at once without the partition
                # (Tansu); the batch is there, so Kafka answers at once anyway.
                job.local_fetch = local.fetch_lane(
                    plan.topic, plan.partition, 0, in_flight=opts.fetches_in_flight
                ).submit(plan.topic, plan.partition, start, tip, max_wait_ms=opts.fetch_wait_ms)
        except PartsyncError as e:
            hand_back(job, out, f"fetch not sent: {e}")
    # Every answer (and the rate limits' waits) and every fence first: then the local ends are
    # read, after the fences and as late as possible, right before the appends (a fenced
    # writer's append still in flight can land until the new owner's first append; see
    # docs/how-it-works.md).
    fetched = [
        (job, batches)
        for job in jobs
        if job.copy.key not in out and (batches := _fetched(job, out)) is not None
    ]
    fetched = [(job, batches) for job, batches in fetched if _fenced(job, out)]
    try:
        unmoved = _unmoved(local, [job.ctx.plan for job, _b in fetched])
    except PartsyncError as e:
        unmoved = set()
        log.debug("reading the local ends before appending: %s", e)
    sending: list[Job] = []
    for job, batches in fetched:
        if job.copy.key not in unmoved:
            hand_back(job, out, "the local log moved since the plan, or its end is not replicated")
            continue
        sending.append(job)
        try:
            _send(job, local, batches)
        except PartsyncError as e:
            job.ctx.fail(e)
        except Stop:
            pass  # the reason is in the context
    go_on(sending, sources, opts, out)
    for job in sending:
        if job.copy.key not in out:
            finish_job(job, out)


def _unmoved(local: Cluster, plans: list[PartitionPlan]) -> set[TopicPartition]:
    """The partitions whose local bounds are still the plan's and whose high watermark is their
    log end (where the next append lands; ``Cluster.bounds_for_append``, without its wait)."""
    by_topic: dict[str, list[int]] = {}
    for plan in plans:
        by_topic.setdefault(plan.topic, []).append(plan.partition)
    now: dict[TopicPartition, tuple[Bounds, int]] = {}
    for topic, parts in by_topic.items():
        now.update(((topic, p), v) for p, v in local.bounds_and_log_ends(topic, parts).items())
    return {
        (p.topic, p.partition)
        for p in plans
        if now[(p.topic, p.partition)] == (p.local, p.local.end)
    }


def _fetched(job: Job, out: dict[TopicPartition, PartitionResult | None]) -> list[Batch] | None:
    """The batches of the partition's whole range, checked as ``append_in_order`` checks them;
    None (handed back) for anything else."""
    ctx, plan = job.ctx, job.ctx.plan
    assert job.fetch is not None
    try:
        while not job.fetch.wait(0.1):
            ctx.check_running()
        reply = job.fetch.outcome()
        assert reply is not None
        if reply.partition is None:
            hand_back(job, out, "left out of the fetch answer (throttled?)")
            return None
        node = reply.partition.preferred_read_replica
        if node >= 0 and not len(reply.partition.records):
            # KIP-392: its leader points this client's rack at another replica; the usual
            # way fetches from there.
            job.ctx.sources[job.source].prefer_read_replica(plan.topic, plan.partition, node)
            hand_back(job, out, f"read from replica {node}")
            return None
        fetched = job.read.take(reply.partition, job.size)
    except PartsyncError as e:
        hand_back(job, out, str(e))
        return None
    except Stop:
        hand_back(job, out, "stopped while fetching")
        return None
    batches = fetched.batches
    if job.local_fetch is not None:
        try:
            why = _differs_from_local(job, batches)
        except Stop:
            why = "stopped while fetching"
        if why is not None:
            hand_back(job, out, why)
            return None
        batches = batches[1:]
    expected = plan.copy_start
    for b in batches:
        if (why := usual_rounds_must(ctx, b, expected, job.source)) is not None:
            hand_back(job, out, why)
            return None
        expected = b.next_offset
    if job.read.done and expected != plan.target_end:
        hand_back(job, out, f"the batches end at {expected}, not {plan.target_end}")
        return None
    job.expected = expected  # no whole batch yet (one bigger than the fetch): read on
    kept = sum(b.size for b in batches)
    ctx.budget.release(fetched.requested + job.tip - kept)
    throttle(ctx, job.source, fetched.received)  # the run's and the source's byte rates
    return batches


def _continues(plan: PartitionPlan) -> bool:
    """The copy continues a local log (``plan.together``: its last batch is compared)."""
    return plan.local.end > plan.local.log_start


def _differs_from_local(job: Job, batches: list[Batch]) -> str | None:
    """Why the local log's last batch is not the source's batch at the same offset, byte for
    byte (``batch_digest``: what a shallow copy keeps), or cannot be compared here; None where
    it is. The usual round reads both again and refuses a divergence with its reasons."""
    ctx, plan = job.ctx, job.ctx.plan
    assert job.local_fetch is not None
    end = plan.local.end
    while not job.local_fetch.wait(0.1):
        ctx.check_running()
    reply = job.local_fetch.outcome()
    assert reply is not None
    local_read = RangeRead(ctx.local.name, plan.topic, plan.partition, end - 1, end, 1)
    try:
        ours = local_read.take(reply.partition, SMALL_FETCH_BYTES).batches
    except PartsyncError as e:
        return f"the local log's last batch was not read: {e}"
    if len(ours) != 1 or ours[0].next_offset != end or not batches:
        return f"the local log's last batch below {end} was not read whole"
    theirs = batches[0]
    if theirs.base_offset != ours[0].base_offset or batch_digest(theirs) != batch_digest(ours[0]):
        return f"the local log's last batch below {end} is not the source's (compared again)"
    return None


def _fenced(job: Job, out: dict[TopicPartition, PartitionResult | None]) -> bool:
    """Whether the partition's fence succeeded (waited for); handed back where it did not."""
    job.session = job.copy.fence.result()
    if job.session is None:
        hand_back(job, out, "not fenced")
    return job.session is not None


def _send(job: Job, local: Cluster, batches: list[Batch]) -> None:
    ctx = job.ctx
    assert job.session is not None
    writer = local.shared_writer(ctx.topic, ctx.partition, timeout_ms=ctx.opts.produce_timeout_ms)
    job.sender = Sender(ctx, writer, job.session)
    for b in batches:
        job.sender.send(b, job.source, wait=False)  # the budget holds them: no thread waits
