"""Fetchers: threads that read a copy's pieces as raw batches from their sources.

Each chunk is served by one source (the plan's choice) and cut into byte-sized pieces as it is
fetched (``pieces``). Up to ``connections_per_broker`` threads per source take the source's
pieces in offset order, each over a connection of its own, and each keeps up to
``fetches_in_flight`` fetches outstanding on its connection when the broker is far (Kafka
answers them in order), so a long fat link is kept busy instead of idling for a round trip
after every answer. Batches go into their piece under the copy's byte budget; the appender
walks the pieces in offset order.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

from partsync._kafka import THROTTLE_WAIT_LIMIT_S, Connection
from partsync.copy.context import CopyContext, Stop
from partsync.copy.pieces import Piece, Pieces, SourceWork
from partsync.copy.throttle import limiter_for
from partsync.errors import PartsyncError
from partsync.io.reader import RangeRead
from partsync.wire.batch import Batch

__all__ = ["END", "Piece", "Pieces", "plan_pieces", "start_fetchers"]

log = logging.getLogger(__name__)

END = object()  # the last item of every piece, whether it completed or not

# A connection whose first round trip took this long is on a link where round trips cost
# (a LAN answers in well under a millisecond): only there do fetches overlap.
FAR_RTT_S = 0.01

# The smallest fetch asked for: a few bytes more than expected cost nothing, a second fetch does.
_MIN_FETCH = 64 << 10


@dataclass(eq=False)
class _Read:
    """One piece being read by one fetcher: its range read and the fetch on the wire."""

    piece: Piece
    read: RangeRead
    size: int = 0  # bytes the outstanding (or next) fetch asks for
    throttled_s: float = 0.0
    sent: bool = False  # a fetch of it went out (its start is fixed from then on)


def plan_pieces(ctx: CopyContext) -> Pieces:
    opts = ctx.opts
    return Pieces(
        ctx.plan.chunks,
        connections=opts.connections_per_broker,
        in_flight=opts.fetches_in_flight,
        fetch_bytes=opts.fetch_bytes,
        probe_bytes=min(opts.fetch_bytes, 64 << 10),
    )


def start_fetchers(ctx: CopyContext, pieces: Pieces) -> list[threading.Thread]:
    """Start the fetcher threads; every piece they carve ends with ``END``."""
    threads = []
    for source, work in pieces.sources.items():
        for n in range(ctx.opts.connections_per_broker):
            t = threading.Thread(
                target=_fetch_worker, args=(ctx, source, work, n), daemon=True,
                name=f"fetch-{ctx.topic}-{ctx.partition}-{source}-{n}",
            )  # fmt: skip
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
        self.conn: Connection | None = None
        self.depth = 1  # until the connection says how far the broker is
        self.sent: deque[_Read] = deque()  # fetches on the wire, in the order sent
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
            if self.conn is None:
                self.conn = self.ctx.open(self.ctx.sources[self.source])
                if self.conn.setup_rtt >= FAR_RTT_S:
                    self.depth = max(1, self.ctx.opts.fetches_in_flight)
            r.size = self._size_for(r)
            self.ctx.check_running()
            if not self.ctx.budget.acquire(r.size, r.piece.index, wait=idle):
                if self.ctx.budget.closed:
                    raise Stop()
                return  # the budget is full: read answers first
            offset, _ = r.read.request()
            try:
                self.conn.send_fetch(self.ctx.topic, [(self.ctx.partition, offset, r.size)],
                                     max_wait_ms=self.ctx.opts.fetch_wait_ms, min_bytes=1,
                                     max_bytes=r.size)  # fmt: skip
            except BaseException:
                self.ctx.budget.release(r.size)
                raise
            self.ready.pop(0)
            r.sent = True
            self.sent.append(r)

    def _take(self, piece: Piece) -> None:
        # A chunk's first piece starts one offset early where the source has it: the batch
        # holding start - 1 is the boundary the appender compares with what it appended last
        # (two sources never mixed). A later piece starts at its start: a batch straddling the
        # cut comes back first and is compared the same way.
        start = piece.start
        if piece.first and start > 0 and start - 1 >= self.bounds.log_start:
            start -= 1
        end = piece.end if piece.end is not None else piece.chunk.end
        r = _Read(piece, RangeRead(self.source, self.ctx.topic, self.ctx.partition, start, end,
                                   self.ctx.opts.fetch_bytes))  # fmt: skip
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
        r = self.sent.popleft()
        assert self.conn is not None
        answer = self.conn.receive_fetch().get(self.ctx.partition)
        pause = self.conn.last_throttle_ms / 1000
        if answer is None and pause > 0 and r.throttled_s + pause <= THROTTLE_WAIT_LIMIT_S:
            # Throttled (KIP-219): the broker reads nothing more from us for that long; ask
            # again after it, for up to THROTTLE_WAIT_LIMIT_S per piece.
            self.ctx.budget.release(r.size)
            r.throttled_s += pause
            self.ctx.stopping.wait(pause)
            self._requeue(r)
            return
        piece = r.piece
        probe = piece.end is None
        try:
            fetched = r.read.take(answer, r.size)
        except BaseException:
            self.ctx.budget.release(r.size)
            raise
        _throttle(self.ctx, self.source, fetched.received)
        kept = 0
        kept_batches: list[Batch] = []
        # A bootstrap's first chunk begins at the sources' log start, which may cut a batch:
        # that batch is copied whole (the records below the log start are deleted after).
        whole_first = self.ctx.plan.bootstrap and piece.chunk_no == 0 and piece.first
        for b in fetched.batches:
            if b.base_offset < piece.start and not whole_first:
                piece.boundary = b  # the batch just below the piece (agreement check)
                continue
            piece.items.put(b)
            kept_batches.append(b)
            kept += b.size
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


def _throttle(ctx: CopyContext, source: str, nbytes: int) -> None:
    """Hold this fetcher back so the run's and the source cluster's byte rates hold."""
    ref = ctx.sources[source].ref
    for lim in (limiter_for("run", ctx.opts.max_bytes_per_sec),
                limiter_for(f"cluster:{source}", ref.max_bytes_per_sec)):  # fmt: skip
        if lim is not None:
            lim.acquire(nbytes, cancel=ctx.stopping)
