"""The copier: execute one partition's plan, shallowly and verified.

Per partition:

1. Before writing anything, every source that will serve a chunk must agree with the local log
   at its end: the batch ending at ``local_end - 1`` must have the same digest on both (else the
   histories diverged and the partition is refused).
2. Fetcher threads (one per source connection) fetch chunks as raw batches, verifying CRC32C,
   under a shared in-flight byte budget; chunks from different sources arrive in any order.
3. The appender (calling thread) walks chunks strictly in offset order. At each chunk boundary
   it checks the serving source's copy of the previous batch against what was just appended, so
   two sources that disagree are never mixed. Each batch is checked (no control/transactional
   batch, no compaction holes, no offset gap), rewritten shallowly and produced, one batch per
   Produce request, several requests in flight with the idempotent sequence as ordering guard.
4. A receiver thread verifies every Produce response: the broker's base offset must equal the
   source batch's base offset. On any mismatch writing stops at once.

The local log end is the checkpoint: after a crash, running again resumes from it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from partsync._kafka import (
    PROBE_WAIT_MS,
    Connection,
    broker_error,
    fetch_error,
)
from partsync.batch import Batch, check_appendable, iter_batches, rewrite_for_append
from partsync.cluster import Cluster
from partsync.errors import (
    AppendMismatchError,
    ClusterError,
    CorruptBatchError,
    DivergenceError,
    FencedError,
    PartsyncError,
    StoppedError,
    UnsafeError,
)
from partsync.plan import Chunk, Condition, PartitionPlan
from partsync.result import PartitionResult, Status
from partsync.throttle import limiter_for
from partsync.writer import Cancelled

__all__ = [
    "Budget",
    "CopyOptions",
    "LocalTopicRules",
    "ProducerSession",
    "copy_partition",
    "open_producer",
    "transactional_id",
]

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, int, int, int], None]  # (topic, partition, bytes, offsets)


@dataclass(frozen=True)
class CopyOptions:
    max_in_flight_bytes: int = 64 << 20
    fetch_max_bytes: int = 8 << 20
    max_in_flight_requests: int = 5
    connections_per_broker: int = 1
    produce_timeout_ms: int = 30_000
    fetch_wait_ms: int = 500
    # Whole-run cap on fetched bytes per second in this process (None: unlimited); per-cluster
    # caps come from the cluster's config (ClusterRef.max_bytes_per_sec).
    max_bytes_per_sec: int | None = None
    # Fence other partsync writers of the same local partition (see ``transactional_id``).
    fencing: bool = True

    def __post_init__(self) -> None:
        if self.max_in_flight_bytes < 1 << 16:
            raise ValueError("max_in_flight_bytes must be at least 64 KiB")
        if self.connections_per_broker < 1:
            raise ValueError("connections_per_broker must be at least 1")

    @property
    def fetch_bytes(self) -> int:
        return max(1 << 16, min(self.fetch_max_bytes, self.max_in_flight_bytes // 4))


@dataclass(frozen=True)
class LocalTopicRules:
    """What the local topic's configs allow to be stored byte-for-byte."""

    compression_type: str = "producer"
    max_message_bytes: int | None = None

    def check(self, batch: Batch) -> None:
        if self.compression_type not in ("producer", batch.codec) and not (
            self.compression_type == "uncompressed" and batch.codec == "none"
        ):
            raise UnsafeError(
                f"local topic has compression.type={self.compression_type}, so the broker would "
                f"recompress {batch.describe()} and change it; set compression.type=producer",
                offset=batch.base_offset,
            )
        if self.max_message_bytes is not None and batch.size > self.max_message_bytes:
            raise UnsafeError(
                f"{batch.describe()} is larger than the local topic's max.message.bytes="
                f"{self.max_message_bytes}; raise it to at least the source's",
                offset=batch.base_offset,
            )


# Kafka answers an append from a producer whose epoch was bumped by a newer InitProducerId with
# INVALID_PRODUCER_EPOCH (47); some brokers say PRODUCER_FENCED (90).
_FENCED_CODES = frozenset({47, 90})


def transactional_id(topic: str, partition: int) -> str:
    """The transactional id every partsync writer of a local partition initialises with.

    It names the local partition only (not the group or the run), so any two partsync
    processes writing it fence each other: the later InitProducerId bumps the producer epoch and
    the broker rejects the earlier writer's appends. ':' cannot occur in a topic name.
    """
    return f"partsync:{topic}:{partition}"


@dataclass
class ProducerSession:
    """The idempotent producer identity one owner appends a partition with.

    Follow mode keeps one session for as long as it owns the partition (one epoch bump per
    ownership, not per round) and continues its sequence; a session that saw a failure is
    discarded, since the broker's sequence state is then unknown.
    """

    producer_id: int
    epoch: int
    sequence: int = 0
    usable: bool = True


def open_producer(local: Cluster, topic: str, partition: int, fencing: bool = True) -> ProducerSession:
    """A new producer identity for appending the partition: with ``fencing``, under the
    partition's transactional id, which fences every earlier writer of it."""
    pid, epoch = local.init_producer_id(transactional_id(topic, partition) if fencing else None)
    return ProducerSession(pid, epoch)


class Budget:
    """In-flight byte budget shared by fetchers; the chunk being appended may always proceed,
    so a full budget held by later chunks can never block the head (no deadlock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._cv = threading.Condition()
        self.head = 0  # index of the chunk being appended
        self.closed = False

    def acquire(self, n: int, chunk_index: int) -> bool:
        with self._cv:
            while not self.closed and chunk_index != self.head and self.used + n > self.limit:
                self._cv.wait(0.5)
            if self.closed:
                return False
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def release(self, n: int) -> None:
        if n:
            with self._cv:
                self.used -= n
                self._cv.notify_all()

    def advance(self, head: int) -> None:
        with self._cv:
            self.head = head
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()


_END = object()


@dataclass
class _ChunkStream:
    """Batches of one chunk as they arrive, plus the boundary batch just below its start."""

    chunk: Chunk
    index: int
    items: queue.Queue[object] = field(default_factory=queue.Queue)
    boundary: Batch | None = None


class _Stop(Exception):
    pass


class _AnyEvent(threading.Event):
    """An event that is set when any of two others is; polled, for waits of up to seconds."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        super().__init__()
        self._a, self._b = a, b

    def is_set(self) -> bool:
        return self._a.is_set() or self._b.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._a.wait(0.05 if left is None else min(0.05, left))
        return True


def _boundary_batch(conn: Connection, cluster: str, topic: str, partition: int, offset: int) -> Batch:
    """The batch containing ``offset`` on one cluster (verified CRC)."""
    fetched = conn.fetch(topic, [(partition, offset, 1 << 16)], max_wait_ms=PROBE_WAIT_MS, min_bytes=1, max_bytes=1 << 16)
    f = fetched.get(partition)
    if f is None:
        raise ClusterError("fetch returned no data for the partition", cluster=cluster, topic=topic, partition=partition, offset=offset)
    if f.error_code:
        raise fetch_error(cluster, topic, partition, offset, f.error_code)
    for b in iter_batches(f.records, start=offset):
        if b.base_offset > offset:
            break
        try:
            b.verify_crc()
        except CorruptBatchError as e:
            raise CorruptBatchError(e.reason, cluster=cluster, topic=topic, partition=partition, offset=b.base_offset) from None
        return b
    raise ClusterError(
        f"no batch containing offset {offset} was returned", cluster=cluster, topic=topic, partition=partition, offset=offset
    )


class _PartitionCopy:
    def __init__(
        self,
        plan: PartitionPlan,
        sources: Mapping[str, Cluster],
        local: Cluster,
        opts: CopyOptions,
        rules: LocalTopicRules,
        progress: ProgressFn | None,
        stop: threading.Event | None,
        producer: ProducerSession | None = None,
    ) -> None:
        self.plan = plan
        self.producer = producer
        self.topic = plan.topic
        self.partition = plan.partition
        self.sources = sources
        self.local = local
        self.opts = opts
        self.rules = rules
        self.progress = progress
        self.external_stop = stop or threading.Event()
        self.budget = Budget(opts.max_in_flight_bytes)
        self.failed = threading.Event()
        self.append_failed = threading.Event()
        # Set when this copy must wind down (failure or a stop request): ends throttle waits.
        self.stopping = _AnyEvent(self.failed, self.external_stop)
        self.error: PartsyncError | None = None
        self._error_lock = threading.Lock()
        self.bytes_by_source: dict[str, int] = {}
        self.batches_by_source: dict[str, int] = {}
        self.batches = 0
        self.bytes = 0
        self.confirmed_end = plan.local.end
        self._conns: list[Connection] = []
        self._conns_lock = threading.Lock()

    # -- error plumbing -------------------------------------------------------------------

    def fail(self, err: PartsyncError) -> None:
        with self._error_lock:
            if self.error is None:
                if err.topic is None:
                    err.topic = self.topic
                if err.partition is None:
                    err.partition = self.partition
                self.error = err
        self.failed.set()
        self.budget.close()

    def _check_running(self) -> None:
        if self.failed.is_set():
            raise _Stop()
        if self.external_stop.is_set():
            self.fail(StoppedError("stopped on request before catching up"))
            raise _Stop()

    def _open(self, cluster: Cluster) -> Connection:
        conn = cluster.connect_leader(self.topic, self.partition)
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _close_all(self) -> None:
        with self._conns_lock:
            for c in self._conns:
                c.close()
            self._conns.clear()

    # -- 1. agreement at the local end ----------------------------------------------------

    def check_sources_agree(self) -> None:
        """Serving sources must hold the same batch at the last offset they all have.

        Histories that diverged anywhere before it differ there too (a batch digest covers its
        absolute offsets and record bytes), so this catches most disagreements before anything
        is written; chunk boundary checks catch the rest before two sources are mixed.
        """
        serving = [n for n in self.plan.serving]
        if len(serving) < 2:
            return
        bounds = [self.plan.sources[n] for n in serving]
        common = min(b.end for b in bounds) - 1
        if common < max(b.log_start for b in bounds) or common < self.plan.local.end:
            return
        ref_name, ref = serving[0], None
        for name in serving:
            b = _boundary_batch(self._open(self.sources[name]), name, self.topic, self.partition, common)
            if ref is None:
                ref = b
            elif b.base_offset != ref.base_offset or b.digest() != ref.digest():
                raise DivergenceError(
                    f"sources disagree: {name}'s batch {b.base_offset}..{b.last_offset} differs from "
                    f"{ref_name}'s batch {ref.base_offset}..{ref.last_offset} at offset {common}; "
                    "refusing to copy from sources that disagree",
                    cluster=name, topic=self.topic, partition=self.partition, offset=common,
                )

    def check_local_boundary(self) -> Batch | None:
        """Return the local batch ending at local_end-1 after every serving source agreed on it."""
        self.check_sources_agree()
        local_end = self.plan.local.end
        if local_end == 0 or local_end <= self.plan.local.log_start:
            return None
        conn = self._open(self.local)
        mine = _boundary_batch(conn, self.local.name, self.topic, self.partition, local_end - 1)
        if mine.last_offset != local_end - 1:
            raise UnsafeError(
                f"local batch {mine.base_offset}..{mine.last_offset} does not end at the local log "
                f"end {local_end}",
                cluster=self.local.name, topic=self.topic, partition=self.partition, offset=local_end - 1,
            )
        for name in self.plan.serving:
            if not self.plan.sources[name].holds(local_end - 1):
                continue  # that source no longer has it: nothing to compare
            theirs = _boundary_batch(self._open(self.sources[name]), name, self.topic, self.partition, local_end - 1)
            if theirs.digest() != mine.digest():
                raise DivergenceError(
                    f"divergent history: the local batch {mine.base_offset}..{mine.last_offset} "
                    f"differs from {name}'s batch {theirs.base_offset}..{theirs.last_offset} that "
                    f"holds offset {local_end - 1}",
                    cluster=name, topic=self.topic, partition=self.partition, offset=local_end - 1,
                )
        return mine

    # -- 2. fetchers ----------------------------------------------------------------------

    def fetch_worker(self, source: str, jobs: queue.Queue[_ChunkStream]) -> None:
        conn: Connection | None = None
        try:
            while True:
                try:
                    stream = jobs.get_nowait()
                except queue.Empty:
                    return
                if conn is None:
                    conn = self._open(self.sources[source])
                self._fetch_chunk(conn, source, stream)
        except _Stop:
            pass
        except PartsyncError as e:
            if e.cluster is None:
                e.cluster = source
            self.fail(e)
        except Exception as e:  # a bug or an unexpected library error: report, do not hang
            log.exception("fetcher for %s failed", source)
            self.fail(PartsyncError(f"fetcher crashed: {e!r}", cluster=source))

    def _throttle(self, source: str, nbytes: int) -> None:
        """Hold this fetcher back so the run's and the source cluster's byte rates hold."""
        ref = self.sources[source].ref
        for lim in (limiter_for("run", self.opts.max_bytes_per_sec),
                    limiter_for(f"cluster:{source}", ref.max_bytes_per_sec)):
            if lim is not None:
                lim.acquire(nbytes, cancel=self.stopping)

    def _fetch_chunk(self, conn: Connection, source: str, stream: _ChunkStream) -> None:
        chunk = stream.chunk
        bounds = self.plan.sources[source]
        offset = chunk.start - 1 if chunk.start - 1 >= bounds.log_start and chunk.start > 0 else chunk.start
        size = self.opts.fetch_bytes
        if self.opts.max_bytes_per_sec:
            # Fetch about a second's worth at a time so a throttled copy flows evenly.
            size = min(size, max(1 << 16, self.opts.max_bytes_per_sec))
        try:
            while True:
                self._check_running()
                if not self.budget.acquire(size, stream.index):
                    raise _Stop()
                try:
                    fetched = conn.fetch(
                        self.topic,
                        [(self.partition, offset, size)],
                        max_wait_ms=self.opts.fetch_wait_ms,
                        min_bytes=1,
                        max_bytes=size,
                    )
                except BaseException:
                    self.budget.release(size)
                    raise
                f = fetched.get(self.partition)
                if f is None or f.error_code:
                    self.budget.release(size)
                    code = f.error_code if f is not None else -1
                    raise fetch_error(source, self.topic, self.partition, offset, code)
                self._throttle(source, len(f.records))
                kept = 0
                done = False
                progressed = False
                for b in iter_batches(f.records, start=offset):
                    try:
                        b.verify_crc()
                    except CorruptBatchError as e:
                        raise CorruptBatchError(
                            f"corrupt source batch: {e.reason}", cluster=source, topic=self.topic,
                            partition=self.partition, offset=b.base_offset,
                        ) from None
                    progressed = True
                    offset = b.next_offset
                    if b.base_offset < chunk.start:
                        stream.boundary = b  # the batch just below the chunk (agreement check)
                        continue
                    if b.base_offset >= chunk.end:
                        done = True
                        break
                    stream.items.put(b)
                    kept += b.size
                    if b.next_offset >= chunk.end:
                        done = True
                        break
                # The response buffer stays alive while its batches wait in the queue; account for
                # what we keep (noida ignores max bytes, so it can exceed the reservation).
                self.budget.release(size - kept)
                if done or offset >= chunk.end:
                    break
                if not progressed:
                    if f.high_watermark <= offset:
                        raise ClusterError(
                            f"source high watermark {f.high_watermark} fell below the planned "
                            f"range end {chunk.end} (truncated or leader changed)",
                            cluster=source, topic=self.topic, partition=self.partition, offset=offset,
                        )
                    raise ClusterError(
                        f"fetch at offset {offset} returned no whole batch (a batch larger than "
                        f"{size} bytes?)",
                        cluster=source, topic=self.topic, partition=self.partition, offset=offset,
                    )
        finally:
            stream.items.put(_END)

    # -- 3./4. appender and verifier ------------------------------------------------------

    def run(self) -> None:
        plan = self.plan
        last = self.check_local_boundary()
        last_source = self.local.name

        streams = [_ChunkStream(c, i) for i, c in enumerate(plan.chunks)]
        jobs: dict[str, queue.Queue[_ChunkStream]] = {}
        for s in streams:
            jobs.setdefault(s.chunk.source, queue.Queue()).put(s)
        workers = []
        for source, q in jobs.items():
            for n in range(min(self.opts.connections_per_broker, q.qsize())):
                t = threading.Thread(
                    target=self.fetch_worker, args=(source, q), daemon=True,
                    name=f"fetch-{self.topic}-{self.partition}-{source}-{n}",
                )
                workers.append(t)
                t.start()

        # The producer identity: the caller's session (follow mode), else a new one for this
        # copy, which also fences any other writer of the partition. Asked over the process's
        # shared connection to the leader; the appends go through the shared writer.
        if self.producer is None or not self.producer.usable:
            self.producer = open_producer(self.local, self.topic, self.partition, self.opts.fencing)
        session = self.producer
        pid, epoch = session.producer_id, session.epoch
        # Batches go out through the writer this process shares per local broker, so many
        # partitions' batches travel in one Produce request; answers come back per partition.
        writer = self.local.shared_writer(self.topic, self.partition,
                                          timeout_ms=self.opts.produce_timeout_ms)
        # Sent, unanswered Produce requests, in send order. A request is queued for the verifier
        # only after it was sent (the verifier reads its answer at once); ``slots`` bounds how
        # many are in flight (the broker dedupes idempotent retries over the last 5 only).
        inflight: queue.Queue[object] = queue.Queue()
        slots = threading.BoundedSemaphore(self.opts.max_in_flight_requests)
        verifier = threading.Thread(
            target=self.verify_worker, args=(inflight, slots), daemon=True,
            name=f"verify-{self.topic}-{self.partition}",
        )
        verifier.start()
        sequence = session.sequence
        expected = plan.local.end
        try:
            for stream in streams:
                self.budget.advance(stream.index)
                chunk = stream.chunk
                source = chunk.source
                first = True
                while True:
                    self._check_running()
                    try:
                        item = stream.items.get(timeout=0.5)
                    except queue.Empty:
                        continue
                    if item is _END:
                        break
                    assert isinstance(item, Batch)
                    b = item
                    if first:
                        first = False
                        self._check_agreement(stream, last, last_source)
                    if b.base_offset != expected:
                        raise UnsafeError(
                            f"offset gap: the next batch from {source} starts at {b.base_offset} "
                            f"but the local log end is {expected} (records removed by compaction "
                            "or deletion cannot be recreated by producing)",
                            cluster=source, offset=expected,
                        )
                    try:
                        check_appendable(b)
                        self.rules.check(b)
                    except UnsafeError as e:
                        e.cluster = e.cluster or source
                        raise
                    data = rewrite_for_append(b, pid, epoch, sequence)
                    sequence = (sequence + b.record_count) & 0x7FFFFFFF
                    while not slots.acquire(timeout=0.5):
                        self._check_running()
                    self._check_running()
                    fut = writer.submit(self.topic, self.partition, data, self._drop_unsent)
                    inflight.put((b.base_offset, b.next_offset, b.size, source, fut))
                    expected = b.next_offset
                    last, last_source = b, source
                # An empty chunk (a straddling batch covered it) has nothing to check or append.
        except _Stop:
            pass
        except PartsyncError as e:
            self.fail(e)
        finally:
            # The verifier reads every outstanding answer, then stops at _END. Requests sent before
            # a failure may well have been appended: they are verified and counted like any other,
            # so the result shows where the local log really ends.
            deadline = time.monotonic() + self.opts.produce_timeout_ms / 1000 + 5
            inflight.put(_END)
            verifier.join(timeout=max(0.0, deadline - time.monotonic()))
            self.budget.close()
            self._close_all()
            verifier.join(timeout=5)
            for t in workers:
                t.join(timeout=5)
            # Only a clean copy leaves the broker's sequence where we think it is.
            session.sequence = sequence
            session.usable = self.error is None and not verifier.is_alive()

    def _check_agreement(self, stream: _ChunkStream, last: Batch | None, last_source: str) -> None:
        """Before using a chunk's source, its copy of the previous batch must equal ours."""
        b = stream.boundary
        if b is None or last is None:
            return
        if b.base_offset != last.base_offset or b.digest() != last.digest():
            raise DivergenceError(
                f"sources disagree: {stream.chunk.source}'s batch {b.base_offset}..{b.last_offset} "
                f"differs from {last_source}'s batch {last.base_offset}..{last.last_offset} already "
                "appended; refusing to mix them",
                cluster=stream.chunk.source, offset=b.base_offset,
            )

    def _drop_unsent(self) -> bool:
        """Batches submitted but not yet sent are dropped once an append failed or went to the
        wrong offset (stop writing at once) or a stop was requested. A refusal of a *later*
        batch does not drop them: what came before it is still the source's data, in order."""
        return self.append_failed.is_set() or self.external_stop.is_set()

    def verify_worker(self, inflight: queue.Queue[object], slots: threading.BoundedSemaphore) -> None:
        answer_timeout = self.opts.produce_timeout_ms / 1000 + 10
        try:
            while True:
                item = inflight.get()
                if item is _END:
                    return
                base, next_offset, size, source, fut = item  # type: ignore[misc]
                try:
                    res = fut.result(answer_timeout)
                except Cancelled:
                    # Dropped unsent because the partition had already stopped.
                    slots.release()
                    self.budget.release(size)
                    continue
                except PartsyncError as e:
                    slots.release()
                    self.budget.release(size)
                    if e.topic is None:
                        e.topic, e.partition, e.offset = self.topic, self.partition, base
                    raise
                slots.release()
                self.budget.release(size)
                if res is None:
                    raise ClusterError("Produce response lacks the partition", cluster=self.local.name, offset=base)
                if res.error_code in _FENCED_CODES:
                    raise FencedError(
                        f"append of batch {base}..{next_offset - 1} was refused: another partsync "
                        "writer of this partition has a newer producer epoch; stopped writing it",
                        cluster=self.local.name, topic=self.topic, partition=self.partition, offset=base,
                    )
                if res.error_code:
                    raise broker_error(
                        res.error_code,
                        f"append of batch {base}..{next_offset - 1} failed"
                        + (f" ({res.error_message})" if res.error_message else ""),
                        cluster=self.local.name, topic=self.topic, partition=self.partition, offset=base,
                    )
                if res.base_offset != base:
                    raise AppendMismatchError(
                        f"batch from {source} with base offset {base} landed at offset "
                        f"{res.base_offset}: another writer or a changed log; stopped writing",
                        cluster=self.local.name, topic=self.topic, partition=self.partition, offset=base,
                    )
                self.confirmed_end = next_offset
                self.batches += 1
                self.bytes += size
                self.bytes_by_source[source] = self.bytes_by_source.get(source, 0) + size
                self.batches_by_source[source] = self.batches_by_source.get(source, 0) + 1
                if self.progress:
                    self.progress(self.topic, self.partition, size, next_offset)
        except PartsyncError as e:
            self.append_failed.set()
            self.fail(e)
        except Exception as e:
            self.append_failed.set()
            log.exception("verifier failed")
            self.fail(PartsyncError(f"verifier crashed: {e!r}", cluster=self.local.name))


def copy_partition(
    plan: PartitionPlan,
    sources: Mapping[str, Cluster],
    local: Cluster,
    opts: CopyOptions = CopyOptions(),
    rules: LocalTopicRules = LocalTopicRules(),
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    producer: ProducerSession | None = None,
) -> PartitionResult:
    """Execute ``plan`` for one partition and report what happened (never raises PartsyncError).

    ``producer`` continues an owner's session; it is marked unusable if anything went wrong."""
    base = PartitionResult(
        topic=plan.topic,
        partition=plan.partition,
        status=Status.IN_SYNC,
        local_end_before=plan.local.end,
        local_end_after=plan.local.end,
        target_end=plan.target_end,
    )
    if plan.condition is Condition.IN_SYNC:
        return base
    if plan.condition is Condition.UNSAFE:
        return base.with_status(Status.UNSAFE, plan.reason)
    started = time.monotonic()
    job = _PartitionCopy(plan, sources, local, opts, rules, progress, stop, producer)
    try:
        job.run()
    except PartsyncError as e:
        job.fail(e)
    except Exception as e:
        log.exception("copy of %s-%d failed", plan.topic, plan.partition)
        job.fail(PartsyncError(f"unexpected failure: {e!r}"))
    if producer is not None and job.error is not None:
        producer.usable = False
    result = base.with_copy(
        local_end_after=job.confirmed_end,
        batches=job.batches,
        bytes=job.bytes,
        bytes_by_source=dict(job.bytes_by_source),
        batches_by_source=dict(job.batches_by_source),
        seconds=time.monotonic() - started,
        peak_buffered_bytes=job.budget.peak,
    )
    if job.error is not None:
        status = (Status.UNSAFE if isinstance(job.error, UnsafeError)
                  else Status.HANDED_OVER if isinstance(job.error, FencedError) else Status.ERROR)
        return result.with_status(status, str(job.error), job.error)
    if job.confirmed_end != plan.target_end:
        return result.with_status(
            Status.ERROR,
            f"copy ended at offset {job.confirmed_end}, planned {plan.target_end}",
        )
    return result.with_status(Status.SYNCED, None)
