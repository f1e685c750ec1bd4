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
from collections.abc import Iterable
from dataclasses import dataclass

from partsync.copy.context import CopyContext, Stop
from partsync.copy.pieces import Piece, Pieces, SourceWork
from partsync.copy.read_replica import ReadReplicas
from partsync.copy.throttle import limiter_for
from partsync.errors import PartsyncError
from partsync.io.fetch_lane import FetchAnswer, FetchLane
from partsync.io.kafka_types import THROTTLE_WAIT_LIMIT_S
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
        self.replicas = ReadReplicas(ctx.sources[source], ctx.topic, ctx.partition, ctx.stopping)
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
            if isinstance(e, PartsyncError):
                self.replicas.failed(broker)
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
        if answer is not None:
            behind = self.replicas.reroute(answer, broker, r.read.offset, r.read.end, r.behind_s)
            if behind is not None:
                self.ctx.budget.release(r.size)
                r.behind_s = behind
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
        # A bootstrap's first chunk begins at the sources' log start, which may cut a batch:
        # that batch is copied whole (the records below the log start are deleted after).
        whole_first = self.ctx.plan.bootstrap and piece.chunk_no == 0 and piece.first
        kept_batches, boundary = _keep_batches(fetched.batches, piece.start, whole=whole_first)
        if boundary is not None:
            piece.boundary = boundary  # the batch just below the piece (agreement check)
        kept = sum(b.size for b in kept_batches)
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

    def _complete(self, r: _Read) -> None:
        r.read.done = True
        self.mine.remove(r)
        self.work.finished(self.n, r.piece, r.read.offset)
        r.piece.items.put(END)

    def _requeue(self, r: _Read) -> None:
        self.ready.append(r)
        self.ready.sort(key=lambda x: x.piece.index)


def _keep_batches(
    batches: Iterable[Batch], start: int, *, whole: bool
) -> tuple[list[Batch], Batch | None]:
    """The batches of an answer that belong to a piece starting at ``start`` (those whose base
    offset is not below it, or all of them where the batch cut by ``start`` is copied
    ``whole``), and the last batch below it (the piece's boundary), if any."""
    kept: list[Batch] = []
    boundary = None
    for b in batches:
        if b.base_offset < start and not whole:
            boundary = b
            continue
        kept.append(b)
    return kept, boundary


def throttle(ctx: CopyContext, source: str, nbytes: int) -> None:
    """Hold this fetcher back so the run's and the source cluster's byte rates hold."""
    ref = ctx.sources[source].ref
    for lim in (
        limiter_for("run", ctx.opts.max_bytes_per_sec),
        limiter_for(f"cluster:{source}", ref.max_bytes_per_sec),
    ):
        if lim is not None:
            lim.acquire(nbytes, cancel=ctx.stopping)
