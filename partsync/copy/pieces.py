"""Pieces: a copy's chunks cut into byte-sized ranges as fetchers claim them.

The plan cuts a partition's range into chunks by offsets and gives each chunk to a source (the
sources' agreement is checked where the source changes). How many bytes an offset holds is
only known once data arrives, so the copy cuts each chunk further, at run time, into *pieces*
of about the same number of bytes: the first piece of a source is one fetch (a probe whose
answer tells the bytes per offset), every later piece is sized from what has arrived so far.
Pieces are the unit a source's connections take turns on, so ``K`` connections share even a
one-chunk partition, and each connection keeps several pieces' fetches in flight.

A piece holds the batches whose *base* offset lies in ``[start, end)``, like a chunk, so a batch
straddling a cut belongs to exactly one piece. Pieces are carved in offset order per source;
the appender walks every chunk's pieces in offset order (``Pieces``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from partsync.plan.comparator import Chunk
from partsync.wire.batch import Batch

__all__ = ["Piece", "Pieces", "SourceWork", "piece_bytes"]

# A piece spans at least this many bytes and this many of the source's batches: a fetch that
# starts inside a batch gets that whole batch, which the piece before it already has.
MIN_PIECE_BYTES = 256 << 10
MIN_PIECE_BATCHES = 8


@dataclass(eq=False)
class Piece:
    """The batches of one piece as they arrive, plus the batch just below its start."""

    chunk: Chunk
    chunk_no: int  # the chunk's position in the plan
    start: int
    # Where the piece ends; None while a probe's first answer has not said it yet.
    end: int | None
    # The first piece of its chunk (fetched from one offset early, for the agreement check).
    first: bool
    # Lists of batches, one per fetch answer, in offset order; then ``fetcher.END``.
    items: queue.Queue[object] = field(default_factory=queue.Queue)
    boundary: Batch | None = None

    @property
    def index(self) -> int:
        """Unique and increasing in offset order (the byte budget's notion of the head)."""
        return self.start


def piece_bytes(remaining: float, share: int, avg_batch: float, most: int) -> int:
    """Bytes per piece: the remaining bytes spread over ``share`` fetches in flight, but never
    so small that the batch a piece starts inside of (fetched twice) costs much, nor more than
    one fetch of ``most`` bytes holds with that batch (unless a few batches alone are that
    big)."""
    least = max(MIN_PIECE_BYTES, int(MIN_PIECE_BATCHES * avg_batch))
    return max(least, min(int(most - avg_batch), int(remaining / max(1, share))))


class _ChunkCut:
    """One chunk's pieces so far and where the next one starts."""

    def __init__(self, chunk: Chunk, chunk_no: int) -> None:
        self.chunk = chunk
        self.chunk_no = chunk_no
        self.next_start = chunk.start
        self.pieces: list[Piece] = []

    @property
    def carved(self) -> bool:
        # A probe leaves ``next_start`` at its own start until its end is known.
        return self.next_start >= self.chunk.end


class SourceWork:
    """What a source's fetchers still have to take: its chunks, cut into pieces on demand.

    ``claim`` hands out the next piece in offset order. Until the bytes per offset are known
    the first piece is a probe whose end is its first answer's end; claims wait for that. A
    fetcher takes a further piece only while no other fetcher of the source has fewer pieces
    open: a deep pipeline on one connection must not starve the others of work.
    """

    def __init__(
        self,
        cuts: list[_ChunkCut],
        *,
        fetchers: int,
        depth: int,
        fetch_bytes: int,
        probe_bytes: int,
        on_carve: Callable[[], None],
    ) -> None:
        self._cuts = cuts
        self.depth = depth  # fetches each fetcher keeps in flight
        self._share = fetchers * depth
        self.fetch_bytes = fetch_bytes
        self.probe_bytes = probe_bytes
        self._on_carve = on_carve
        self._cv = threading.Condition()
        self._probe: Piece | None = None
        # Pieces each fetcher took and has not finished (None: the fetcher has stopped).
        self._open: list[int | None] = [0] * fetchers
        self._bytes = 0
        self._offsets = 0
        self._batches = 0
        # Piece end -> the offset after that piece's last batch, once the piece is complete.
        self._resume: dict[int, int] = {}

    # -- what arrived ---------------------------------------------------------------------

    def learn(self, nbytes: int, offsets: int, batches: int) -> None:
        """Count kept batches (their bytes and the offsets they cover) for the estimates."""
        if batches <= 0 or offsets <= 0:
            return
        with self._cv:
            self._bytes += nbytes
            self._offsets += offsets
            self._batches += batches

    def probe_ended(self, piece: Piece, end: int) -> None:
        """A probe's first answer ended at ``end``: that is where its piece ends."""
        with self._cv:
            piece.end = end
            cut = self._cut_of(piece)
            cut.next_start = end
            self._probe = None
            self._cv.notify_all()
        self._on_carve()

    @property
    def density(self) -> float | None:
        """Bytes per offset so far (None before anything arrived)."""
        return self._bytes / self._offsets if self._offsets else None

    @property
    def avg_batch(self) -> float:
        return self._bytes / self._batches if self._batches else 0.0

    def estimate(self, first: int, end: int) -> int:
        """Bytes expected for batches based in ``[first, end)``."""
        d = self.density
        return int(d * (end - first)) if d is not None else self.probe_bytes

    # -- handing out ---------------------------------------------------------------------

    def finished(self, fetcher: int, piece: Piece, after: int) -> None:
        """A piece ``fetcher`` took is complete; its last batch ends before ``after``."""
        with self._cv:
            n = self._open[fetcher]
            if n:
                self._open[fetcher] = n - 1
            if piece.end is not None:
                self._resume[piece.end] = after

    def resume_at(self, piece: Piece) -> int | None:
        """Where ``piece``'s first batch starts, if the piece before it (same chunk, so the same
        source) is complete: its fetch can start there, skipping the batch that straddles the
        cut, which that piece already has."""
        if piece.first:
            return None  # the chunk's first piece fetches the boundary batch on purpose
        with self._cv:
            return self._resume.pop(piece.start, None)

    def retire(self, fetcher: int) -> None:
        """``fetcher`` takes nothing more (done, or failed)."""
        with self._cv:
            self._open[fetcher] = None

    def claim(self, fetcher: int, wait: bool, cancel: threading.Event) -> Piece | None:
        """The next piece for ``fetcher``, or None when every chunk is carved; without
        ``wait`` also when the next piece cannot be cut before a probe's answer arrives or
        another fetcher has fewer pieces open."""
        with self._cv:
            while True:
                cut = next((c for c in self._cuts if not c.carved), None)
                if cut is None:
                    return None
                least = min((n for n in self._open if n is not None), default=0)
                if not wait and (self._open[fetcher] or 0) > least:
                    return None
                if self._probe is None:
                    break
                if not wait or cancel.is_set():
                    return None
                self._cv.wait(0.2)
            start = cut.next_start
            density = self.density
            if density is None:
                piece = Piece(cut.chunk, cut.chunk_no, start, None, start == cut.chunk.start)
                self._probe = piece  # nothing after it is cut until its end is known
            else:
                remaining = sum(density * (c.chunk.end - c.next_start) for c in self._cuts)
                size = piece_bytes(remaining, self._share, self.avg_batch, self.fetch_bytes)
                end = min(cut.chunk.end, start + max(1, int(size / max(density, 1e-9))))
                piece = Piece(cut.chunk, cut.chunk_no, start, end, start == cut.chunk.start)
            # Listed before the cut moves past it: the appender (under another lock) must never
            # see a chunk carved to its end without its last piece.
            cut.pieces.append(piece)
            if piece.end is not None:
                cut.next_start = piece.end
            self._open[fetcher] = (self._open[fetcher] or 0) + 1
        self._on_carve()
        return piece

    def _cut_of(self, piece: Piece) -> _ChunkCut:
        return next(c for c in self._cuts if c.chunk_no == piece.chunk_no)


def _of(v: int | Mapping[str, int], source: str) -> int:
    return v if isinstance(v, int) else v[source]


class Pieces:
    """Every chunk's pieces in offset order, for the appender, as the fetchers carve them."""

    def __init__(
        self,
        chunks: tuple[Chunk, ...],
        *,
        connections: int,
        in_flight: int | Mapping[str, int],
        fetch_bytes: int,
        probe_bytes: int | Mapping[str, int],
    ) -> None:
        """``in_flight`` and ``probe_bytes`` may differ by source (a near and a far one)."""
        self._cv = threading.Condition()
        self.cuts = [_ChunkCut(c, i) for i, c in enumerate(chunks)]
        by_source: dict[str, list[_ChunkCut]] = {}
        for cut in self.cuts:
            by_source.setdefault(cut.chunk.source, []).append(cut)
        self.sources = {
            s: SourceWork(
                cuts,
                fetchers=connections,
                depth=_of(in_flight, s),
                fetch_bytes=fetch_bytes,
                probe_bytes=_of(probe_bytes, s),
                on_carve=self._carved,
            )
            for s, cuts in by_source.items()
        }

    def _carved(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def in_order(self, check: Callable[[], None]) -> Iterator[Piece]:
        """Every piece in offset order, waiting for each to be carved; ``check()`` runs while
        waiting (it raises to stop)."""
        for cut in self.cuts:
            k = 0
            while True:
                with self._cv:
                    while k >= len(cut.pieces) and not cut.carved:
                        self._cv.wait(0.5)
                        if k >= len(cut.pieces) and not cut.carved:
                            check()
                    if k >= len(cut.pieces):
                        break
                    piece = cut.pieces[k]
                k += 1
                yield piece
