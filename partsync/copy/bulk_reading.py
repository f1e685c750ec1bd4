"""A round taken together reads on (``copy.bulk``): after each partition's first fetch was
appended, the rest of its range, one fetch in flight per partition, many partitions per
Fetch, each answer's batches checked and staged behind the partition's append in flight."""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping

from partsync.copy.bulk_job import Job, fetch_size, finish_job, usual_rounds_must
from partsync.copy.context import Stop
from partsync.copy.fetcher import throttle
from partsync.copy.options import CopyOptions
from partsync.errors import ClusterError, HandedOnError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.plan.results import PartitionResult

__all__ = ["go_on"]

TopicPartition = tuple[str, int]


def go_on(
    jobs: list[Job],
    sources: Mapping[str, Cluster],
    opts: CopyOptions,
    out: dict[TopicPartition, PartitionResult | None],
) -> None:
    """The rest of each partition's range, after its first fetch's batches were sent: one fetch
    in flight per partition, asked again as soon as its answer's batches are staged behind its
    append in flight (the lanes pack many partitions into each Fetch request), each answer's
    batches checked as ``append_in_order`` checks them (one append in flight per partition, as
    always). What is fetched and not yet appended is held in the byte budgets (the copy's
    ``--max-in-flight-bytes`` and the process's ``--memory-budget``); every byte fetched is sent
    before this thread waits for room, so that wait never waits on itself. A partition that
    stops reading is finished as soon as its last append is answered: a revoked one at once
    (its staged batches are dropped), so a revoke waits for its own partitions only."""
    reading = [j for j in jobs if _reading(j)]
    ending = [j for j in jobs if not _reading(j)]
    if not reading:
        return
    size = fetch_size(opts, len(reading))
    asked: collections.deque[Job] = collections.deque()
    starved: collections.deque[Job] = collections.deque()  # no room in a budget yet
    for job in reading:
        (asked if _ask(job, sources, size, wait=False) else starved).append(job)
    looked = time.monotonic()
    while asked or starved:
        if ending and time.monotonic() - looked >= _END_EVERY_S:
            ending, looked = _end_quiet(ending, out), time.monotonic()
        if not asked:
            job = starved.popleft()
            if _reading(job) and _ask(job, sources, size, wait=True):
                asked.append(job)
            elif _reading(job):
                # Not expected: a budget refuses a waiting fetch only once the copy is closed,
                # which fails it; should it happen, the job is simply asked again.
                starved.append(job)
            else:
                ending.append(job)
            continue
        job = asked.popleft()
        _take_more(job)
        for _ in range(len(starved)):  # room the sends above may have made, oldest first
            waiting = starved.popleft()
            if not _reading(waiting):
                ending.append(waiting)
            elif _ask(waiting, sources, size, wait=False):
                asked.append(waiting)
            else:
                starved.appendleft(waiting)
                break
        if not _reading(job):
            ending.append(job)
        else:
            (asked if _ask(job, sources, size, wait=False) else starved).append(job)
    _end_quiet(ending, out)


# How often the partitions that stopped reading are looked at (each look asks every one whether
# its appends are all answered): often enough that a finished partition settles in time for a
# revoke, seldom enough to cost nothing per fetch answer.
_END_EVERY_S = 0.02


def _end_quiet(ending: list[Job], out: dict[TopicPartition, PartitionResult | None]) -> list[Job]:
    """Finish the partitions that stopped reading and have nothing in flight any more, and
    those revoked or stopped (their staged batches are dropped: only the append in flight is
    waited for). The ones still appending."""
    left = []
    for job in ending:
        if job.copy.key in out:
            continue
        if job.ctx.stopping.is_set() or job.sender is None or job.sender.quiet():
            finish_job(job, out)
        else:
            left.append(job)
    return left


def _reading(job: Job) -> bool:
    ctx = job.ctx
    return (
        not job.read.done and job.error is None and ctx.error is None and not ctx.stopping.is_set()
    )


def _ask(job: Job, sources: Mapping[str, Cluster], size: int, *, wait: bool) -> bool:
    """Send the partition's next fetch (False: no room in the budgets now, or it stopped).
    Its bytes are a prefetch's (piece 1 of the copy's budget): they count against the copy's
    ``--max-in-flight-bytes`` too, which the first fetch (piece 0, the head) may exceed. A
    fetch bigger than that limit (a batch bigger than the fetches, ``RangeRead.least``) is a
    head's, or it would wait for room that can never be."""
    ctx, plan = job.ctx, job.ctx.plan
    size = max(size, job.read.least)
    piece = 1 if size <= ctx.opts.max_in_flight_bytes else 0
    if not ctx.budget.acquire(size, piece, wait=wait):
        return False
    try:
        lane = sources[job.source].fetch_lane(
            plan.topic, plan.partition, 0, in_flight=ctx.opts.fetches_in_flight
        )
        job.size = size
        job.fetch = lane.submit(
            plan.topic,
            plan.partition,
            job.read.offset,
            size,
            max_wait_ms=ctx.opts.fetch_wait_ms,
            cancelled=ctx.stopping.is_set,
        )
    except PartsyncError as e:
        ctx.budget.release(size)
        job.error = e
        return False
    return True


def _take_more(job: Job) -> None:
    """Check and send the batches of the partition's fetch in flight; a failure, or anything
    the usual rounds must see to (``HandedOnError``), ends the partition's reading here
    (``job.error``, the copy's error once its appends are answered)."""
    ctx = job.ctx
    assert job.fetch is not None and job.sender is not None
    kept = 0
    try:
        while not job.fetch.wait(0.1):
            ctx.check_running()
        reply = job.fetch.outcome()
        assert reply is not None
        if reply.partition is None or (
            reply.partition.preferred_read_replica >= 0 and not len(reply.partition.records)
        ):
            raise HandedOnError(
                "the source left the partition out of a fetch (throttled?) "
                "or points at another replica",
                cluster=job.source,
                offset=job.read.offset,
            )
        fetched = job.read.take(reply.partition, job.size)
        for b in fetched.batches:
            if (why := usual_rounds_must(ctx, b, job.expected, job.source)) is not None:
                raise HandedOnError(why, cluster=job.source, offset=b.base_offset)
            job.sender.send(b, job.source, wait=False)
            kept += b.size
            job.expected = b.next_offset
        throttle(ctx, job.source, fetched.received)
    except PartsyncError as e:
        job.error = e
    except Stop:
        pass  # the reason is in the context
    finally:
        job.fetch = None  # its buffer lives on only in the batches sent
        ctx.budget.release(job.size - kept)
    if job.read.done and job.error is None and job.expected != ctx.plan.target_end:
        job.error = ClusterError(
            f"the batches end at {job.expected}, not {ctx.plan.target_end}",
            cluster=job.source,
            offset=job.expected,
        )
