"""The appender: batches go to the local cluster strictly in offset order, each at exactly the
source's offset.

The appender walks a copy's pieces in offset order. At each piece's first batch it compares the
serving source's copy of the previous batch with what it appended last, so two sources that
disagree are never mixed. Each batch is checked (no control/transactional batch, no compaction
holes, no offset gap, the local topic stores it as sent) and handed to the partition's sender
(``copy.sender``), or to the transaction replay (``copy.txn_replay``) that sends through it.
One append per partition is in flight at a time, and every answer is checked: Kafka keeps no
producer state for a partition it has not seen this producer on (every new session, and any
partition whose state expired after ``producer.id.expiration.ms``, which is all historical
data) and then accepts any sequence, so a batch sent behind an append that is rejected would
land at the rejected batch's offset.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterable

from partsync.copy.boundary import differs_at
from partsync.copy.context import CopyContext, Stop
from partsync.copy.fetcher import END, Piece
from partsync.copy.producer import ProducerSession
from partsync.copy.sender import Sender
from partsync.copy.txn_replay import TxnReplay
from partsync.errors import DivergenceError, PartsyncError, UnsafeError
from partsync.plan.txn_window import HeldBack
from partsync.wire.batch import Batch, check_appendable
from partsync.wire.filler import filler_batch
from partsync.wire.holes import fill_inner_holes, gap_batches, gap_stamp

__all__ = ["append_in_order", "check_next", "finish"]

# Filler batches appended between two DeleteRecords of those below the last one (with the
# default 500,000 records a batch, about 25 MB of fillers on disk, 32 M offsets).
FILLER_DELETE_EVERY = 32


def append_in_order(
    ctx: CopyContext, streams: Iterable[Piece], last: Batch | None, session: ProducerSession
) -> None:
    """Append every piece's batches in order; returns when done, failed or stopped (the first
    error is in ``ctx.error``). ``last`` is the local batch the copy continues from."""
    writer = ctx.local.shared_writer(
        ctx.topic, ctx.partition, timeout_ms=ctx.opts.produce_timeout_ms
    )
    sender = Sender(ctx, writer, session)
    replay = None
    if ctx.opts.replay_transactions:
        replay = TxnReplay(ctx, sender, session)
    expected = ctx.plan.local.end
    last_source = ctx.local.name
    # The boundary batch of an empty piece (a batch from before it covered it all): the next
    # piece of the chunk may start past that batch and bring none, so it is checked there.
    carried: Batch | None = None
    try:
        for stream in streams:
            ctx.budget.advance(stream.index)
            source = stream.chunk.source
            if stream.first:
                carried = None
            first = True
            while True:
                ctx.check_running()
                try:
                    item = stream.items.get(timeout=0.5)
                except queue.Empty:
                    sender.check_due()  # batches staged by _append_plain may wait on it
                    continue
                if item is END:
                    if first and stream.boundary is not None:
                        carried = stream.boundary  # empty: a straddling batch covered it
                    break
                assert isinstance(item, list)
                if first and item:
                    first = False
                    _check_agreement(ctx, source, stream.boundary or carried, last, last_source)
                    carried = None
                plain = _plain_sender(ctx, item, last, expected, sender, replay, source)
                if plain is not None:
                    expected = _append_plain(ctx, plain, item, expected, source)
                    last, last_source = item[-1], source
                    continue
                for b in item:  # the batches of one fetch answer, in order
                    if ctx.plan.bootstrap and last is None and b.base_offset >= expected:
                        # The mirror starts at the sources' log start: fill up to this batch,
                        # then move the local log start past the fillers, before the first
                        # copied batch.
                        expected = _fill(ctx, sender, expected, b)
                    elif ctx.opts.fill_holes and b.base_offset > expected:
                        expected = _fill_holes(
                            ctx,
                            replay or sender,
                            expected,
                            b.base_offset,
                            source,
                            gap_stamp(last, b),
                        )
                    out, holes = _holes_filled(ctx, b, source) if ctx.opts.fill_holes else (b, 0)
                    check_next(ctx, out, expected, source)
                    (replay or sender).send(out, source, size=b.size, holes=holes)
                    start = ctx.plan.copy_start
                    if ctx.plan.bootstrap and b.base_offset < start <= b.last_offset:
                        # The first copied batch begins below the sources' log start: once it
                        # is in, the local log starts exactly where theirs does (before anything
                        # else is appended, so a kill leaves no window for consumers to read
                        # below it).
                        if replay is not None:
                            replay.start_log_at(start)  # once it is appended, if held
                        else:
                            sender.wait_confirmed()
                            ctx.local.delete_records(ctx.topic, ctx.partition, start)
                    expected = b.next_offset
                    last, last_source = b, source
        if replay is not None:
            replay.finish()
    except HeldBack:
        assert replay is not None
        try:
            replay.finish()  # stops right before what it held
        except PartsyncError as e:
            ctx.fail(e)
    except Stop:
        pass
    except PartsyncError as e:
        ctx.fail(e)
    finally:
        if replay is not None:
            replay.close()
        finish(ctx, sender, session)
        if ctx.failed.is_set():
            ctx.close_all()  # wakes fetchers blocked on a connection


def _plain_sender(
    ctx: CopyContext,
    batches: list[Batch],
    last: Batch | None,
    expected: int,
    sender: Sender,
    replay: TxnReplay | None,
    source: str,
) -> Sender | None:
    """The sender for a fetch answer's ``batches`` when all of them are plain appends (the
    common case): no transaction to replay, no hole to fill, not a bootstrap's first batch or
    the batch holding the sources' log start. None sends them one by one."""
    if not batches or ctx.opts.fill_holes:
        return None
    if ctx.plan.bootstrap and (last is None or expected <= ctx.plan.copy_start):
        return None
    if replay is None:
        return sender  # check_next refuses a transactional batch
    for b in batches:
        if b.is_transactional or b.is_control:
            return None
    return replay.plain_sender(source)


def _append_plain(
    ctx: CopyContext, sender: Sender, batches: list[Batch], expected: int, source: str
) -> int:
    """Check ``batches`` in order and stage them all on ``sender`` at once; returns the next
    expected offset. A refused batch stops there: those before it are still sent (they are
    the source's data, in order), then the refusal is raised."""
    for i, b in enumerate(batches):
        try:
            check_next(ctx, b, expected, source)
        except PartsyncError:
            if i:
                sender.send_all(batches[:i], source)
            raise
        expected = b.next_offset
    sender.send_all(batches, source)
    return expected


def check_next(ctx: CopyContext, b: Batch, expected: int, source: str) -> None:
    """Refuse (unsafe) a batch that does not start at ``expected`` (the local log end it is
    appended at) or that the local topic could not take as it is."""
    if b.base_offset != expected:
        raise UnsafeError(
            f"offset gap: the next batch from {source} starts at {b.base_offset} but the local "
            f"log end is {expected} (records removed by compaction or deletion cannot be "
            "recreated by producing)",
            cluster=source,
            offset=expected,
        )
    try:
        check_appendable(b, transactions=ctx.opts.replay_transactions)
        if not b.is_control:  # a marker is the local coordinator's own, not this batch
            ctx.rules.check(b, reserved_key=ctx.opts.hole_key if ctx.opts.fill_holes else None)
    except UnsafeError as e:
        e.cluster = e.cluster or source
        raise
    if ctx.rules.expires(b):
        first = b.base_offset if ctx.expired is None else ctx.expired[0]
        ctx.expired = (first, b.last_offset)


def finish(ctx: CopyContext, sender: Sender | None, session: ProducerSession) -> None:
    """The end of a partition's appends, however they ended: wait for the outstanding answer
    (a request sent before a failure may well have been appended: it is verified and counted
    like any other, so the result shows where the local log really ends) and free its memory.
    Only a clean copy leaves the broker's sequence where the session thinks it is."""
    answered = sender.settle() if sender is not None else False
    ctx.budget.close()
    if sender is not None:
        session.sequence = sender.sequence
    session.usable = ctx.error is None and answered


def _fill(ctx: CopyContext, sender: Sender, start: int, first: Batch) -> int:
    """Append filler batches over ``[start, first.base_offset)`` (one in flight, each verified
    like a copied batch; stamped so that no time lookup finds them,
    ``LocalTopicRules.filler_stamp``), wait until the last is confirmed, then DeleteRecords up
    to there. Returns the new expected offset."""
    to = first.base_offset
    if ctx.rules.compacted:
        raise UnsafeError(
            f"starting the mirror at offset {to} needs filler records up to it, which a "
            "compacted local topic rejects (no key) and cannot delete (DeleteRecords needs "
            "cleanup.policy=delete); create the local topic with cleanup.policy=delete for the "
            "first run, or start from an empty local partition at that offset",
            cluster=ctx.local.name,
            offset=start,
        )
    # Before writing anything: the fillers must be deletable.
    ctx.local.check_delete_records(ctx.topic, ctx.partition, start, to)
    expected = start
    stamp = ctx.rules.filler_stamp(first, int(time.time() * 1000))
    since_delete = 0
    while expected < to:
        n = min(ctx.opts.filler_records, to - expected)
        batch = Batch.parse(memoryview(filler_batch(n, stamp)))
        sender.send(batch, ctx.local.name, at=expected, filler=True)
        since_delete += 1
        if since_delete >= FILLER_DELETE_EVERY and expected + n < to:
            # Fillers are deleted as they go, so the disk they hold stays bounded (Kafka frees
            # the segments below the log start at its next retention check): up to the last
            # one, which stays readable, so a run killed here tells its fillers and goes on.
            sender.wait_confirmed()
            ctx.local.delete_records(ctx.topic, ctx.partition, expected)
            since_delete = 0
        expected += n
    sender.wait_confirmed()
    filled = (
        f"started the mirror at the sources' log start: {to - start} filler records at "
        f"offsets {start}..{to} were appended"
    )
    if to > start:
        # Said now: if the delete below fails, this round's result must still tell it.
        ctx.notes.append(filled)
    # Also with nothing to fill: fillers of a run killed before this delete may lie below.
    ctx.local.delete_records(ctx.topic, ctx.partition, to)
    if to > start:
        ctx.notes[ctx.notes.index(filled)] = filled + " and deleted"
    local = ctx.plan.local
    if local.log_start < start:
        # A retention gap skipped on request: the local records went with the fillers.
        ctx.notes.append(
            f"retention gap skipped: offsets {start}..{ctx.plan.copy_start} are on "
            f"no source; the local records {local.log_start}..{start} were "
            "deleted with them"
        )
    if to > ctx.plan.copy_start:
        ctx.notes.append(
            f"the local log starts at {to}: the source serves nothing below it, "
            f"though it reports its log start at {ctx.plan.copy_start}"
        )
    return expected


def _needs_compacted(ctx: CopyContext, offset: int, source: str) -> None:
    if not ctx.rules.compacted:
        raise UnsafeError(
            f"offset {offset} is a compaction hole in {source}'s log; --compaction-holes fill "
            "needs a compacted local topic (cleanup.policy has compact), whose compaction "
            "removes the hole records again; nothing written for it",
            cluster=ctx.local.name,
            offset=offset,
        )


def _fill_holes(
    ctx: CopyContext, sender: Sender | TxnReplay, start: int, to: int, source: str, stamp: int
) -> int:
    """Append hole records over ``[start, to)``, a compaction hole between two of ``source``'s
    batches (``wire.holes``), timestamped ``stamp``; each batch verified like a copied one.
    Returns ``to``."""
    _needs_compacted(ctx, start, source)
    for at, batch in gap_batches(start, to, stamp, ctx.opts.hole_key, ctx.opts.filler_records):
        sender.send(batch, ctx.local.name, at=at, filler=True, holes=batch.record_count)
    return to


def _holes_filled(ctx: CopyContext, b: Batch, source: str) -> tuple[Batch, int]:
    """``b``, or where compaction left holes inside it, ``b`` re-encoded with a hole record
    at each (and how many)."""
    if not b.has_holes or b.is_control:
        return b, 0  # a control batch is refused as it is (check_next)
    _needs_compacted(ctx, b.base_offset, source)
    filled = fill_inner_holes(b, ctx.opts.hole_key)
    assert filled is not None
    return Batch.parse(memoryview(filled)), b.last_offset_delta + 1 - b.record_count


def _check_agreement(
    ctx: CopyContext, source: str, b: Batch | None, last: Batch | None, last_source: str
) -> None:
    """Before using a piece's source, its copy of the previous batch must equal ours (for a
    piece after the first of a chunk: the batch straddling the cut, which came in the piece
    before). ``b`` is ``source``'s batch just below the piece."""
    if b is None or last is None:
        return
    if differs_at(ctx, b, last, last.last_offset) is not None:
        raise DivergenceError(
            f"sources disagree: {source}'s batch {b.base_offset}..{b.last_offset} "
            f"differs from {last_source}'s batch {last.base_offset}..{last.last_offset} already "
            "appended; refusing to mix them",
            cluster=source,
            offset=b.base_offset,
        )
