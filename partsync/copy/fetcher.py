"""Fetchers: threads that read a copy's chunks as raw batches from their sources.

Each chunk is handed to one source (the plan's choice); up to ``connections_per_broker``
threads per source take chunks from that source's queue, each over a connection of its own,
so chunks from different sources (and connections) arrive in any order. Batches go into the
chunk's stream under the copy's byte budget; the appender walks the streams in offset order.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field

from partsync._kafka import Connection
from partsync.copy.context import CopyContext, Stop
from partsync.copy.throttle import limiter_for
from partsync.errors import PartsyncError
from partsync.io.reader import read_fetches
from partsync.plan.comparator import Chunk
from partsync.wire.batch import Batch

__all__ = ["END", "ChunkStream", "start_fetchers"]

log = logging.getLogger(__name__)

END = object()  # the last item of every stream, whether the chunk completed or not


@dataclass
class ChunkStream:
    """Batches of one chunk as they arrive, plus the boundary batch just below its start."""

    chunk: Chunk
    index: int
    items: queue.Queue[object] = field(default_factory=queue.Queue)
    boundary: Batch | None = None


def start_fetchers(ctx: CopyContext, streams: list[ChunkStream]) -> list[threading.Thread]:
    """Start the fetcher threads for ``streams``; each stream ends with ``END``."""
    jobs: dict[str, queue.Queue[ChunkStream]] = {}
    for s in streams:
        jobs.setdefault(s.chunk.source, queue.Queue()).put(s)
    threads = []
    for source, q in jobs.items():
        for n in range(min(ctx.opts.connections_per_broker, q.qsize())):
            t = threading.Thread(
                target=_fetch_worker, args=(ctx, source, q), daemon=True,
                name=f"fetch-{ctx.topic}-{ctx.partition}-{source}-{n}",
            )  # fmt: skip
            threads.append(t)
            t.start()
    return threads


def _fetch_worker(ctx: CopyContext, source: str, jobs: queue.Queue[ChunkStream]) -> None:
    conn: Connection | None = None
    try:
        while True:
            try:
                stream = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                if conn is None:
                    conn = ctx.open(ctx.sources[source])
                _fetch_chunk(ctx, conn, source, stream)
            finally:
                stream.items.put(END)
    except Stop:
        pass
    except PartsyncError as e:
        if e.cluster is None:
            e.cluster = source
        ctx.fail(e)
    except Exception as e:  # a bug or an unexpected library error: report, do not hang
        log.exception("fetcher for %s failed", source)
        ctx.fail(PartsyncError(f"fetcher crashed: {e!r}", cluster=source))


def _throttle(ctx: CopyContext, source: str, nbytes: int) -> None:
    """Hold this fetcher back so the run's and the source cluster's byte rates hold."""
    ref = ctx.sources[source].ref
    for lim in (limiter_for("run", ctx.opts.max_bytes_per_sec),
                limiter_for(f"cluster:{source}", ref.max_bytes_per_sec)):  # fmt: skip
        if lim is not None:
            lim.acquire(nbytes, cancel=ctx.stopping)


def _fetch_chunk(ctx: CopyContext, conn: Connection, source: str, stream: ChunkStream) -> None:
    chunk = stream.chunk
    bounds = ctx.plan.sources[source]
    # Start one offset early where the source has it: the batch holding chunk.start - 1 is the
    # boundary the appender compares with what it appended last (two sources never mixed).
    start = (
        chunk.start - 1 if chunk.start > 0 and chunk.start - 1 >= bounds.log_start else chunk.start
    )

    def reserve(size: int) -> None:
        ctx.check_running()
        if not ctx.budget.acquire(size, stream.index):
            raise Stop()

    for fetched in read_fetches(conn, source, ctx.topic, ctx.partition, start, chunk.end,
                                fetch_bytes=ctx.opts.fetch_bytes, wait_ms=ctx.opts.fetch_wait_ms,
                                before_fetch=reserve):  # fmt: skip
        _throttle(ctx, source, fetched.received)
        kept = 0
        # A bootstrap's first chunk begins at the sources' log start, which may cut a batch:
        # that batch is copied whole (the records below the log start are deleted after).
        first_of_bootstrap = ctx.plan.bootstrap and stream.index == 0
        for b in fetched.batches:
            if b.base_offset < chunk.start and not first_of_bootstrap:
                stream.boundary = b  # the batch just below the chunk (agreement check)
                continue
            stream.items.put(b)
            kept += b.size
        # The response buffer stays alive while its batches wait in the stream; the budget keeps
        # what was kept (noida ignores max bytes, so that can exceed the reservation).
        ctx.budget.release(fetched.requested - kept)
