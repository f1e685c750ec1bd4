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

Only copies whose copy needs no check against the local log take this path (``fits_together``:
one source, an empty local partition, no fillers; bigger than one fetch only over one
connection per broker, since K connections are what the usual copy's pieces use on a long
fat link). A partition whose first fetch brings anything unusual is handed back untouched
(nothing appended), and the caller copies it the usual way, which also reports whatever was
wrong with it; one that meets something unusual later (a transaction, a compaction hole, a
batch the local topic would refuse, a throttled fetch) stops before it, and its usual rounds
go on from the local end.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from partsync.copy.appender import check_next, finish
from partsync.copy.context import CopyContext, ProgressFn, Stop
from partsync.copy.fetcher import throttle
from partsync.copy.options import CopyOptions
from partsync.copy.partition import copy_result
from partsync.copy.producer import ProducerSession
from partsync.copy.sender import Sender
from partsync.errors import ClusterError, HandedOnError, PartsyncError, UnsafeError
from partsync.io.cluster import Cluster
from partsync.io.fetch_lane import FetchAnswer
from partsync.io.reader import RangeRead
from partsync.plan.comparator import Bounds, PartitionPlan
from partsync.plan.results import PartitionResult
from partsync.plan.together import SMALL_OFFSETS
from partsync.plan.topic_rules import LocalTopicRules
from partsync.wire.batch import Batch
from partsync.wire.digest import batch_digest

__all__ = ["SMALL_FETCH_BYTES", "WAVE", "SmallCopy", "copy_small"]

log = logging.getLogger(__name__)

# What a small copy's one fetch asks for (one missing at most ``plan.together.SMALL_OFFSETS``).
SMALL_FETCH_BYTES = 64 << 10
# Partitions fetched and appended together (their fetches' bytes are held at once).
WAVE = 256

TopicPartition = tuple[str, int]


class _Claim:
    """Whether a copy taken together has begun (from then on it may write, and a revoke must
    wait until it settled), decided under a lock against its stop: a copy stopped before its
    wave reached it is let go at once, without waiting for the waves before it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.begun = False
        self.let_go = False

    def begin(self, stop: threading.Event) -> bool:
        with self._lock:
            if stop.is_set() or self.let_go:
                return False
            self.begun = True
            return True

    def let_go_if_stopped(self, stop: threading.Event) -> bool:
        """True (once) if the copy was stopped before it began: it will never write."""
        with self._lock:
            if self.begun or self.let_go or not stop.is_set():
                return False
            self.let_go = True
            return True


@dataclass(frozen=True)
class SmallCopy:
    """One partition to copy: its plan, the local topic's rules, its fence (the session that
    fenced every earlier writer, or None where that failed: still under way while the source
    is read, waited for before the local bounds are read again and anything is appended), its
    own stop (set when the partition is revoked or the run stops; the others go on) and when it
    has settled after that."""

    plan: PartitionPlan
    rules: LocalTopicRules
    fence: Future[ProducerSession | None]
    stop: threading.Event = field(default_factory=threading.Event)
    # Set once nothing of the partition's is in flight any more and nothing more will be sent
    # (its result is in, or it was handed back, and its fence answered): a revoke waits for
    # this, not for the whole round.
    settled: threading.Event = field(default_factory=threading.Event)
    claim: _Claim = field(default_factory=_Claim)

    @property
    def key(self) -> TopicPartition:
        return (self.plan.topic, self.plan.partition)


@dataclass(eq=False)
class _Job:
    copy: SmallCopy
    ctx: CopyContext
    source: str
    read: RangeRead
    size: int
    fetch: FetchAnswer | None = None
    # The local log's last batch, read to compare with the source's copy of it (a copy that
    # continues a local log; ``plan.together``).
    local_fetch: FetchAnswer | None = None
    expected: int = 0  # where the next batch must start (the local end after those sent)
    # What ended its reading after its first fetch: the copy fails with it only once every
    # append sent was answered (failing closes the byte budget, which still holds them).
    error: PartsyncError | None = None
    session: ProducerSession | None = None
    sender: Sender | None = None
    started: float = 0.0


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
                    _settled_once_fenced(c)
    finally:
        done.set()
        for c in copies:
            _settled_once_fenced(c)
    return out


def _let_go_stopped(copies: Sequence[SmallCopy], done: threading.Event) -> None:
    """A copy revoked before its wave began is settled at once (once its fence answered): the
    revoke need not wait for the waves before it, which may hold long copies."""
    waiting = list(copies)
    while waiting and not done.wait(0.05):
        left = []
        for c in waiting:
            if c.claim.let_go_if_stopped(c.stop):
                _settled_once_fenced(c)
            elif not c.claim.begun:
                left.append(c)
        waiting = left


def _settled_once_fenced(c: SmallCopy) -> None:
    """``c.settled`` once its fence has answered too (an InitProducerId still on its way would
    fence the partition's next owner)."""
    c.fence.add_done_callback(lambda _f: c.settled.set())


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
    jobs: list[_Job] = []
    try:
        _fetch_and_append(copies, sources, local, opts, progress, jobs, out)
    finally:
        for job in jobs:
            if job.copy.key in out:
                continue
            if job.sender is not None:
                _finish(job, out)
            else:
                _hand_back(job, out, "not sent")
        out.update((c.key, None) for c in copies if c.key not in out)


def _fetch_and_append(
    copies: Sequence[SmallCopy],
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions,
    progress: ProgressFn | None,
    jobs: list[_Job],
    out: dict[TopicPartition, PartitionResult | None],
) -> None:
    first_size = _fetch_size(opts, len(copies))
    for c in copies:
        plan = c.plan
        if not c.claim.begin(c.stop):
            out[c.key] = None
            _settled_once_fenced(c)
            continue
        source = plan.serving[0]
        ctx = CopyContext(plan, sources, local, opts, c.rules, progress, c.stop)
        small = plan.missing <= SMALL_OFFSETS
        size = min(SMALL_FETCH_BYTES, opts.fetch_bytes) if small else first_size
        # A local log to continue: its last batch is read from both sides (the source's fetch
        # begins at the batch holding the offset below the local end, one batch early) and
        # compared before anything is appended, as the usual round's boundary check does.
        start = plan.copy_start - 1 if _continues(plan) else plan.copy_start
        tip = SMALL_FETCH_BYTES if _continues(plan) else 0
        read = RangeRead(
            source, plan.topic, plan.partition, start, plan.target_end, opts.fetch_bytes
        )
        job = _Job(c, ctx, source, read, size, started=time.monotonic())
        jobs.append(job)
        try:
            # Never waits: this thread holds the wave's earlier reservations until it appends,
            # so a small --memory-budget leaves the rest of the wave to the usual rounds.
            if not ctx.budget.acquire(size + tip, 0, wait=False):
                _hand_back(job, out, "no room in the memory budget")
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
            _hand_back(job, out, f"fetch not sent: {e}")
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
    sending: list[_Job] = []
    for job, batches in fetched:
        if job.copy.key not in unmoved:
            _hand_back(job, out, "the local log moved since the plan, or its end is not replicated")
            continue
        sending.append(job)
        try:
            _send(job, local, batches)
        except PartsyncError as e:
            job.ctx.fail(e)
        except Stop:
            pass  # the reason is in the context
    _go_on(sending, sources, opts, out)
    for job in sending:
        if job.copy.key not in out:
            _finish(job, out)


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


def _hand_back(job: _Job, out: dict[TopicPartition, PartitionResult | None], why: str) -> None:
    log.debug("%s-%d goes the usual way: %s", job.ctx.topic, job.ctx.partition, why)
    job.ctx.budget.close()
    out[job.copy.key] = None
    _settled_once_fenced(job.copy)  # nothing appended


def _finish(job: _Job, out: dict[TopicPartition, PartitionResult | None]) -> None:
    """The partition's last append answered (``_settle``), its result into ``out``."""
    _settle(job)
    if job.error is not None:
        job.ctx.fail(job.error)
    out[job.copy.key] = copy_result(job.ctx, job.started)
    _settled_once_fenced(job.copy)


def _fetched(job: _Job, out: dict[TopicPartition, PartitionResult | None]) -> list[Batch] | None:
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
            _hand_back(job, out, "left out of the fetch answer (throttled?)")
            return None
        node = reply.partition.preferred_read_replica
        if node >= 0 and not len(reply.partition.records):
            # KIP-392: its leader points this client's rack at another replica; the usual
            # way fetches from there.
            job.ctx.sources[job.source].prefer_read_replica(plan.topic, plan.partition, node)
            _hand_back(job, out, f"read from replica {node}")
            return None
        fetched = job.read.take(reply.partition, job.size)
    except PartsyncError as e:
        _hand_back(job, out, str(e))
        return None
    except Stop:
        _hand_back(job, out, "stopped while fetching")
        return None
    batches = fetched.batches
    tip = 0
    if job.local_fetch is not None:
        tip = SMALL_FETCH_BYTES
        try:
            why = _differs_from_local(job, batches)
        except Stop:
            why = "stopped while fetching"
        if why is not None:
            _hand_back(job, out, why)
            return None
        batches = batches[1:]
    expected = plan.copy_start
    for b in batches:
        if (why := _usual_rounds_must(ctx, b, expected, job.source)) is not None:
            _hand_back(job, out, why)
            return None
        expected = b.next_offset
    if job.read.done and expected != plan.target_end:
        _hand_back(job, out, f"the batches end at {expected}, not {plan.target_end}")
        return None
    job.expected = expected  # no whole batch yet (one bigger than the fetch): read on
    kept = sum(b.size for b in batches)
    ctx.budget.release(fetched.requested + tip - kept)
    throttle(ctx, job.source, fetched.received)  # the run's and the source's byte rates
    return batches


def _continues(plan: PartitionPlan) -> bool:
    """The copy continues a local log (``plan.together``: its last batch is compared)."""
    return plan.local.end > plan.local.log_start


def _differs_from_local(job: _Job, batches: list[Batch]) -> str | None:
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


def _usual_rounds_must(ctx: CopyContext, b: Batch, expected: int, source: str) -> str | None:
    """Why ``b`` is for the partition's usual rounds to copy or refuse, not this path: a
    transaction (a replay, ``txn_replay``) or anything ``check_next`` refuses (a gap, holes, a
    local topic rule); None where this path may append it at ``expected``."""
    if b.is_transactional or b.is_control:
        return f"a transaction at offset {b.base_offset}"
    try:
        check_next(ctx, b, expected, source)
    except UnsafeError as e:
        return str(e)
    return None


def _fenced(job: _Job, out: dict[TopicPartition, PartitionResult | None]) -> bool:
    """Whether the partition's fence succeeded (waited for); handed back where it did not."""
    job.session = job.copy.fence.result()
    if job.session is None:
        _hand_back(job, out, "not fenced")
    return job.session is not None


def _send(job: _Job, local: Cluster, batches: list[Batch]) -> None:
    ctx = job.ctx
    assert job.session is not None
    writer = local.shared_writer(ctx.topic, ctx.partition, timeout_ms=ctx.opts.produce_timeout_ms)
    job.sender = Sender(ctx, writer, job.session)
    for b in batches:
        job.sender.send(b, job.source, wait=False)  # the budget holds them: no thread waits


def _settle(job: _Job) -> None:
    """Wait for the partition's last answer, as at the end of ``append_in_order``."""
    assert job.session is not None
    finish(job.ctx, job.sender, job.session)


def _go_on(
    jobs: list[_Job],
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
    size = _fetch_size(opts, len(reading))
    asked: collections.deque[_Job] = collections.deque()
    starved: collections.deque[_Job] = collections.deque()  # no room in a budget yet
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


def _end_quiet(ending: list[_Job], out: dict[TopicPartition, PartitionResult | None]) -> list[_Job]:
    """Finish the partitions that stopped reading and have nothing in flight any more, and
    those revoked or stopped (their staged batches are dropped: only the append in flight is
    waited for). The ones still appending."""
    left = []
    for job in ending:
        if job.copy.key in out:
            continue
        if job.ctx.stopping.is_set() or job.sender is None or job.sender.quiet():
            _finish(job, out)
        else:
            left.append(job)
    return left


def _fetch_size(opts: CopyOptions, partitions: int) -> int:
    """What each of ``partitions`` copies read together asks for per fetch: a quarter of the
    memory budget between them, within a fetch's usual size."""
    return max(SMALL_FETCH_BYTES, min(opts.fetch_bytes, opts.memory_budget // (4 * partitions)))


def _reading(job: _Job) -> bool:
    ctx = job.ctx
    return (
        not job.read.done and job.error is None and ctx.error is None and not ctx.stopping.is_set()
    )


def _ask(job: _Job, sources: Mapping[str, Cluster], size: int, *, wait: bool) -> bool:
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


def _take_more(job: _Job) -> None:
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
            if (why := _usual_rounds_must(ctx, b, job.expected, job.source)) is not None:
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
