"""Fetchers: threads that read a copy's pieces as raw batches from their sources.

Each chunk is served by one source (the plan's choice) and cut into byte-sized pieces as it is
fetched (``pieces``). Up to ``connections_per_broker`` threads per source take the source's
pieces in offset order, thread n over fetch lane n to the leader (``io.fetch_lane``: one
connection shared with every other partition copy fetching from that broker, many partitions
per Fetch request), and each keeps up to ``fetches_in_flight`` fetches outstanding when the
broker is far (Kafka answers them in order), so a long fat link is kept busy instead of idling
for a round trip after every answer. Batches go into their piece under the copy's byte budget,
one list per answer; the appender walks the pieces in offset order.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

from partsync.copy.context import CopyContext, Stop
from partsync.copy.pieces import Piece, Pieces, SourceWork
from partsync.copy.throttle import limiter_for
from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.fetch_lane import FetchAnswer, FetchLane
from partsync.io.kafka_types import THROTTLE_WAIT_LIMIT_S, FetchedPartition
from partsync.io.reader import RangeRead
from partsync.wire.batch import Batch

__all__ = ["END", "Piece", "Pieces", "plan_pieces", "start_fetchers", "throttle"]

log = logging.getLogger(__name__)

END = object()  # the last item of every piece, whether it completed or not

# The smallest fetch asked for: a few bytes more than expected cost nothing, a second fetch does.
_MIN_FETCH = 64 << 10
# A probe (the first fetch of a source, whose answer tells the bytes per offset): small where
# the rest is cut into many pieces, larger where one fetcher reads it all one fetch at a time.
_PROBE_BYTES = 64 << 10
_LONE_PROBE_BYTES = 1 << 20
# A rack replica whose high watermark is below the range the leader's covers is asked again
# every _BEHIND_WAIT_S, for up to _BEHIND_LIMIT_S; then the leader serves.
_BEHIND_WAIT_S = 0.05
_BEHIND_LIMIT_S = 3.0


@dataclass(eq=False)
class _Read:
    """One piece being read by one fetcher: its range read and the fetch on the wire."""

    piece: Piece
    read: RangeRead
    size: int = 0  # bytes the outstanding (or next) fetch asks for
    throttled_s: float = 0.0
    behind_s: float = 0.0  # waited for a rack replica's high watermark to reach the range
    sent: bool = False  # a fetch of it went out (its start is fixed from then on)


def plan_pieces(ctx: CopyContext) -> Pieces:
    """The copy's pieces, cut for how each source is fetched: ``K`` connections with several
    fetches in flight on a far broker, one at a time on a near one. Where that is a single
    fetch at a time, pieces gain nothing, so the probe (which still tells the bytes per offset)
    may be large and the rest of a chunk is one piece of up to a fetch's size."""
    opts = ctx.opts
    k = opts.connections_per_broker
    depth: dict[str, int] = {}
    probe: dict[str, int] = {}
    for source in {c.source for c in ctx.plan.chunks}:
        # Only to a far broker do one partition's fetches overlap.
        depth[source] = max(1, opts.fetches_in_flight) if _lane(ctx, source, 0).far else 1
        probe[source] = min(
            opts.fetch_bytes, _PROBE_BYTES if k * depth[source] > 1 else _LONE_PROBE_BYTES
        )
    return Pieces(
        ctx.plan.chunks,
        connections=k,
        in_flight=depth,
        fetch_bytes=opts.fetch_bytes,
        probe_bytes=probe,
    )


def _lane(ctx: CopyContext, source: str, n: int) -> FetchLane:
    """Lane ``n`` to the broker the partition is read from on ``source`` (its leader, or a
    replica in the client's rack: ``Cluster.fetch_lane``): shared with every other copy that
    fetches from that broker, and one partition's ``n`` fetchers still use ``n`` connections
    (a long fat link)."""
    return ctx.sources[source].fetch_lane(
        ctx.topic, ctx.partition, n, in_flight=ctx.opts.fetches_in_flight
    )


def start_fetchers(ctx: CopyContext, pieces: Pieces) -> list[threading.Thread]:
    """Start the fetcher threads; every piece they carve ends with ``END``."""
    threads = []
    for source, work in pieces.sources.items():
        for n in range(ctx.opts.connections_per_broker):
            t = threading.Thread(
                target=_fetch_worker,
                args=(ctx, source, work, n),
                daemon=True,
                name=f"fetch-{ctx.topic}-{ctx.partition}-{source}-{n}",
            )
            threads.append(t)
            t.start()
    return threads


def _fetch_worker(ctx: CopyContext, source: str, work: SourceWork, n: int) -> None:
    mine: list[_Read] = []  # every piece this fetcher took and has not finished
    try:
        _Fetcher(ctx, source, work, n, mine).run()
    except Stop:
        pass
    except PartsyncError as e:
        if e.cluster is None:
            e.cluster = source
        ctx.fail(e)
    except Exception as e:  # a bug or an unexpected library error: report, do not hang
        log.exception("fetcher for %s failed", source)
        ctx.fail(PartsyncError(f"fetcher crashed: {e!r}", cluster=source))
    finally:
        work.retire(n)
        for r in mine:
            r.piece.items.put(END)


class _Fetcher:
    def __init__(
        self, ctx: CopyContext, source: str, work: SourceWork, n: int, mine: list[_Read]
    ) -> None:
        self.ctx = ctx
        self.source = source
        self.work = work
        self.n = n
        self.mine = mine
        self.bounds = ctx.plan.sources[source]
        self.lane: FetchLane | None = None
        self.depth = work.depth  # fetches in flight: several only to a far broker (plan_pieces)
        # Fetches asked, in order, with the broker each went to.
        self.sent: deque[tuple[_Read, FetchAnswer, int]] = deque()
        self.ready: list[_Read] = []  # taken pieces whose next fetch is not sent yet
        self.claimed_all = False

    def run(self) -> None:
        while True:
            self.ctx.check_running()
            self._fill()
            if not self.sent:
                if self.claimed_all and not self.ready:
                    return
                continue
            self._receive()

    # -- sending --------------------------------------------------------------------------

    def _fill(self) -> None:
        """Send fetches until ``depth`` are in flight or nothing more may be sent now. A
        fetcher blocks (for budget, or for a probe's answer) only with nothing in flight: it
        must never sit on answers the appender is waiting for."""
        while len(self.sent) < self.depth:
            idle = not self.sent
            if not self.ready:
                if self.claimed_all:
                    return
                piece = self.work.claim(self.n, wait=idle, cancel=self.ctx.stopping)
                if piece is None:
                    if idle and not self.ctx.stopping.is_set():
                        self.claimed_all = True
                    return
                self._take(piece)
            r = self.ready[0]
            if not r.sent and (at := self.work.resume_at(r.piece)) is not None:
                # The piece before ended at ``at``: no need to fetch its last batch again.
                r.read.offset = max(r.read.offset, at)
                if r.read.offset >= (r.read.end):
                    self.ready.pop(0)
                    self._complete(r)  # a batch of the piece before covers this one
                    continue
            if self.lane is None:
                self.lane = _lane(self.ctx, self.source, self.n)
            r.size = self._size_for(r)
            self.ctx.check_running()
            if not self.ctx.budget.acquire(r.size, r.piece.index, wait=idle):
                if self.ctx.budget.closed:
                    raise Stop()
                return  # the budget is full: read answers first
            offset, _ = r.read.request()
            fut = self.lane.submit(
                self.ctx.topic,
                self.ctx.partition,
                offset,
                r.size,
                max_wait_ms=self.ctx.opts.fetch_wait_ms,
                cancelled=self.ctx.stopping.is_set,
            )
            self.ready.pop(0)
            r.sent = True
            self.sent.append((r, fut, self.lane.broker))

    def _take(self, piece: Piece) -> None:
        # A chunk's first piece starts one offset early where the source has it: the batch
        # holding start - 1 is the boundary the appender compares with what it appended last
        # (two sources never mixed). A later piece starts at its start: a batch straddling the
        # cut comes back first and is compared the same way.
        start = piece.start
        if piece.first and start > 0 and start - 1 >= self.bounds.log_start:
            start -= 1
        end = piece.end if piece.end is not None else piece.chunk.end
        r = _Read(
            piece,
            RangeRead(
                self.source,
                self.ctx.topic,
                self.ctx.partition,
                start,
                end,
                self.ctx.opts.fetch_bytes,
            ),
        )
        self.mine.append(r)
        self._requeue(r)

    def _size_for(self, r: _Read) -> int:
        """What the next fetch of ``r`` asks for: the bytes expected up to the piece's end (plus
        one batch: the one the fetch starts inside of), or the reader's size when it had to
        grow past a batch bigger than that."""
        offset, _ = r.read.request()
        if r.piece.end is None:
            want = self.work.probe_bytes
        else:
            want = self.work.estimate(offset, r.piece.end) + int(self.work.avg_batch)
        return max(_MIN_FETCH, min(self.work.fetch_bytes, want), r.read.least)

    # -- receiving ------------------------------------------------------------------------

    def _receive(self) -> None:
        r, fut, broker = self.sent.popleft()
        while not fut.wait(0.1):
            self.ctx.check_running()
        try:
            reply = fut.outcome()
        except BaseException as e:
            self.ctx.budget.release(r.size)
            if isinstance(e, PartsyncError) and self._from_replica(broker):
                self._cluster.forget_read_replica(self.ctx.topic, self.ctx.partition, broker)
            raise
        assert reply is not None
        answer = reply.partition
        pause = reply.throttle_ms / 1000
        if answer is None and pause > 0 and r.throttled_s + pause <= THROTTLE_WAIT_LIMIT_S:
            # Throttled (KIP-219): the broker reads nothing more from us for that long; ask
            # again after it, for up to THROTTLE_WAIT_LIMIT_S per piece.
            self.ctx.budget.release(r.size)
            r.throttled_s += pause
            self.ctx.stopping.wait(pause)
            self._requeue(r)
            return
        if answer is not None and self._redirected(answer, broker, r):
            self.ctx.budget.release(r.size)
            self.lane = None  # the next fetch goes where the partition is read from now
            self._requeue(r)
            return
        piece = r.piece
        probe = piece.end is None
        try:
            fetched = r.read.take(answer, r.size)
        except BaseException:
            self.ctx.budget.release(r.size)
            raise
        throttle(self.ctx, self.source, fetched.received)
        kept = 0
        kept_batches: list[Batch] = []
        # A bootstrap's first chunk begins at the sources' log start, which may cut a batch:
        # that batch is copied whole (the records below the log start are deleted after).
        whole_first = self.ctx.plan.bootstrap and piece.chunk_no == 0 and piece.first
        for b in fetched.batches:
            if b.base_offset < piece.start and not whole_first:
                piece.boundary = b  # the batch just below the piece (agreement check)
                continue
            kept_batches.append(b)
            kept += b.size
        if kept_batches:
            piece.items.put(kept_batches)  # one hand-over per answer, not per batch
        # The answer's buffer stays alive while its batches wait in the piece; the budget keeps
        # what was kept (noida ignores max bytes, so that can exceed the reservation).
        self.ctx.budget.release(fetched.requested - kept)
        if kept_batches:
            first, last = kept_batches[0], kept_batches[-1]
            self.work.learn(kept, last.next_offset - first.base_offset, len(kept_batches))
        if probe and (kept_batches or r.read.done):
            # A probe is one answer long: the piece ends where the answer's batches do.
            end = piece.chunk.end if r.read.done else r.read.offset
            r.read.end, r.read.done = end, True
            self.work.probe_ended(piece, end)
        if r.read.done:
            self._complete(r)
        else:
            self._requeue(r)

    @property
    def _cluster(self) -> Cluster:
        return self.ctx.sources[self.source]

    def _from_replica(self, broker: int) -> bool:
        """Whether ``broker`` is a rack replica of the partition, not its leader."""
        return broker >= 0 and broker != self._cluster.leader(self.ctx.topic, self.ctx.partition)

    def _redirected(self, answer: FetchedPartition, broker: int, r: _Read) -> bool:
        """Whether this answer moves the partition's fetches elsewhere (KIP-392), and the
        fetch is to be asked again: the leader points at a replica in this client's rack (its
        answer holds no records); the replica answered an error; or its high watermark stays
        below the range, which the leader's reached (the plan's), for more than
        ``_BEHIND_LIMIT_S``. Then its leader serves the partition, without the rack, for a
        while. A replica's high watermark trails the leader's by up to a replication round."""
        cluster, topic, partition = self._cluster, self.ctx.topic, self.ctx.partition
        if answer.error_code:
            if self._from_replica(broker):
                cluster.forget_read_replica(topic, partition, broker)
                return True
            return False
        if answer.preferred_read_replica >= 0 and not len(answer.records):
            cluster.prefer_read_replica(topic, partition, answer.preferred_read_replica)
            return True
        offset, end = r.read.offset, r.read.end
        if (
            not len(answer.records)
            and 0 <= answer.high_watermark <= offset < end
            and self._from_replica(broker)
        ):
            if r.behind_s >= _BEHIND_LIMIT_S:
                cluster.forget_read_replica(topic, partition, broker)
            else:
                r.behind_s += _BEHIND_WAIT_S
                self.ctx.stopping.wait(_BEHIND_WAIT_S)
            return True
        return False

    def _complete(self, r: _Read) -> None:
        r.read.done = True
        self.mine.remove(r)
        self.work.finished(self.n, r.piece, r.read.offset)
        r.piece.items.put(END)

    def _requeue(self, r: _Read) -> None:
        self.ready.append(r)
        self.ready.sort(key=lambda x: x.piece.index)


def throttle(ctx: CopyContext, source: str, nbytes: int) -> None:
    """Hold this fetcher back so the run's and the source cluster's byte rates hold."""
    ref = ctx.sources[source].ref
    for lim in (
        limiter_for("run", ctx.opts.max_bytes_per_sec),
        limiter_for(f"cluster:{source}", ref.max_bytes_per_sec),
    ):
        if lim is not None:
            lim.acquire(nbytes, cancel=ctx.stopping)
