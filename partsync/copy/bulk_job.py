"""One partition of a round taken together (``copy.bulk``): its copy, its job while the round
runs, and what every stage of the round does with it (finish it, hand it back, check a batch
against what only the usual round copies)."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from partsync.copy.appender import check_next, finish
from partsync.copy.context import CopyContext
from partsync.copy.options import CopyOptions
from partsync.copy.partition import copy_result
from partsync.copy.producer import ProducerSession
from partsync.copy.sender import Sender
from partsync.errors import PartsyncError, UnsafeError
from partsync.io.fetch_lane import FetchAnswer
from partsync.io.reader import RangeRead
from partsync.plan.comparator import PartitionPlan
from partsync.plan.results import PartitionResult
from partsync.plan.topic_rules import LocalTopicRules
from partsync.wire.batch import Batch

__all__ = [
    "SMALL_FETCH_BYTES",
    "Claim",
    "Job",
    "SmallCopy",
    "fetch_size",
    "finish_job",
    "hand_back",
    "settle",
    "settled_once_fenced",
    "usual_rounds_must",
]

log = logging.getLogger("partsync.copy.bulk")

# What a small copy's one fetch asks for (one missing at most ``plan.together.SMALL_OFFSETS``).
SMALL_FETCH_BYTES = 64 << 10

TopicPartition = tuple[str, int]


class Claim:
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
    claim: Claim = field(default_factory=Claim)

    @property
    def key(self) -> TopicPartition:
        return (self.plan.topic, self.plan.partition)


@dataclass(eq=False)
class Job:
    copy: SmallCopy
    ctx: CopyContext
    source: str
    read: RangeRead
    size: int
    fetch: FetchAnswer | None = None
    # The local log's last batch, read to compare with the source's copy of it (a copy that
    # continues a local log; ``plan.together``).
    local_fetch: FetchAnswer | None = None
    tip: int = 0  # the bytes reserved in the budget for that read
    expected: int = 0  # where the next batch must start (the local end after those sent)
    # What ended its reading after its first fetch: the copy fails with it only once every
    # append sent was answered (failing closes the byte budget, which still holds them).
    error: PartsyncError | None = None
    session: ProducerSession | None = None
    sender: Sender | None = None
    started: float = 0.0


def settled_once_fenced(c: SmallCopy) -> None:
    """``c.settled`` once its fence has answered too (an InitProducerId still on its way would
    fence the partition's next owner)."""
    c.fence.add_done_callback(lambda _f: c.settled.set())


def finish_job(job: Job, out: dict[TopicPartition, PartitionResult | None]) -> None:
    """The partition's last append answered (``settle``), its result into ``out``."""
    settle(job)
    if job.error is not None:
        job.ctx.fail(job.error)
    out[job.copy.key] = copy_result(job.ctx, job.started)
    settled_once_fenced(job.copy)


def settle(job: Job) -> None:
    """Wait for the partition's last answer, as at the end of ``append_in_order``."""
    assert job.session is not None
    finish(job.ctx, job.sender, job.session)


def usual_rounds_must(ctx: CopyContext, b: Batch, expected: int, source: str) -> str | None:
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


def fetch_size(opts: CopyOptions, partitions: int) -> int:
    """What each of ``partitions`` copies read together asks for per fetch: a quarter of the
    memory budget between them, within a fetch's usual size."""
    return max(SMALL_FETCH_BYTES, min(opts.fetch_bytes, opts.memory_budget // (4 * partitions)))


def hand_back(job: Job, out: dict[TopicPartition, PartitionResult | None], why: str) -> None:
    log.debug("%s-%d goes the usual way: %s", job.ctx.topic, job.ctx.partition, why)
    job.ctx.budget.close()
    out[job.copy.key] = None
    settled_once_fenced(job.copy)  # nothing appended
