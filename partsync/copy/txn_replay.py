"""Replaying a source's transactions so that every marker lands at the source marker's offset
(``--transactions replay``).

A client cannot append a control batch, but a transaction coordinator writes one into every
partition of a transaction it ends, at that partition's log end. So each source transaction
that touches the partition is replayed by a local transactional producer (one of the
partition's transaction slots, ``producer.slot_id``): its data batches are appended shallowly,
transactional bit kept, under the slot's producer identity, and when the copy reaches the
source's marker the slot's transaction is ended the same way (EndTxn, commit or abort). Nothing
else is appended until that marker has landed, and it must land exactly at the source marker's
offset. Transactions of several source producers that interleave in the partition are replayed
by as many slots at once, up to ``TXN_SLOTS``.

Transactions are streamed (``plan.txn_window``): batches go as they come, so exactly-once
writers that always keep some transaction open are mirrored as they write. A copy that ends
before a source marker leaves its local transaction open; the next run (or round) resumes it
(``producer.take_up_slots``), and the result names it with the time until which the local
coordinator keeps it open (``open_transactions``). A transaction that cannot be carried over
(no KIP-664 lookups on the local cluster; an old transaction still open in the source) is held
back until its marker instead, and a copy that ends first stops right before it: the partition
is reported ``behind``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from partsync.copy.context import CopyContext
from partsync.copy.producer import TXN_SLOTS, ProducerSession, slot_id
from partsync.copy.sender import Sender
from partsync.copy.txn_marker import await_marker, check_ends_at_marker
from partsync.copy.txn_slots import SlotTxn, TxnSlots
from partsync.errors import UnsafeError
from partsync.plan.txn_window import HeldBack, HoldRule, TxnWindow, open_txns_text
from partsync.wire.batch import Batch
from partsync.wire.markers import COMMIT, marker_type

__all__ = ["TxnReplay"]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class _Held:
    """A batch taken and not yet appended, with how to append it (``Sender.send``)."""

    batch: Batch
    source: str
    at: int | None
    filler: bool
    size: int  # budget bytes it holds
    holes: int

    @property
    def next_offset(self) -> int:
        base = self.batch.base_offset if self.at is None else self.at
        return base + self.batch.last_offset_delta + 1


class TxnReplay:
    """The transactional part of one copy's appends; the appender hands it every batch in
    offset order (``offer``) once transactions are involved, and ``finish`` at the end."""

    def __init__(self, ctx: CopyContext, main: Sender, session: ProducerSession) -> None:
        self.ctx, self.main, self.session = ctx, main, session
        # Source transactions seen and what is held until their markers.
        self._source = ctx.plan.chunks[0].source if ctx.plan.chunks else ""
        self.rule = HoldRule(
            resumable=ctx.local.can_resume_transactions(),
            timeout_ms=ctx.opts.transaction_timeout_ms,
            stable_end=self._stable_end,
            clock=lambda: int(time.time() * 1000),
            source_timeout=lambda pid: ctx.sources[self._source].transaction_timeout(pid),
            source_deadline=lambda pid: ctx.sources[self._source].transaction_deadline(pid),
        )
        self._window: TxnWindow[_Held] = TxnWindow(
            TXN_SLOTS, ctx.opts.max_in_flight_bytes, self.rule.hold
        )
        self._slots = TxnSlots(ctx, session)  # which local slot replays which transaction
        self._active = main  # the sender whose appends may be in flight
        self.markers = 0
        self.held_back: HeldBack | None = None
        # The bootstrap's log start, to be set once the batch holding it is appended.
        self._start_at: int | None = None
        for slot, first in sorted(session.open_txns.items()):
            theirs = self._slots.resume(slot, first)
            if not theirs.is_control:  # a marker-only transaction just ends
                self._window.resumed(theirs.producer_id, theirs.base_offset)
            ctx.notes.append(
                f"resumed the local transaction left open from offset {theirs.base_offset} "
                f"(source producer {theirs.producer_id})"
            )

    @property
    def holding(self) -> bool:
        return self._window.holding

    # -- what the appender hands over ------------------------------------------------------

    def send(
        self,
        b: Batch,
        source: str,
        *,
        at: int | None = None,
        filler: bool = False,
        size: int | None = None,
        holes: int = 0,
    ) -> None:
        """Take the next batch (checked by the appender; the arguments are ``Sender.send``'s,
        for hole batches and batches with holes filled): held while any transaction seen is
        open, appended with everything held once none is."""
        item = _Held(
            b, source, at, filler, 0 if filler else b.size if size is None else size, holes
        )
        self._source = source
        try:
            ready = self._window.take(item, None if filler else b, item.size)
        except UnsafeError as e:
            e.cluster, e.topic, e.partition = source, self.ctx.topic, self.ctx.partition
            raise
        except HeldBack as e:
            if not self.rule.resumable:
                # Every transaction is held here: a later run holds this one again, and never
                # gets past it. A person must raise the limit.
                raise UnsafeError(
                    f"{e.reason}; raise --max-in-flight-bytes (and --memory-budget)",
                    cluster=source,
                    topic=self.ctx.topic,
                    partition=self.ctx.partition,
                    offset=e.offset,
                ) from None
            self.held_back = e
            raise
        for h in ready:
            self._append(h)
            if self._start_at is not None and h.next_offset > self._start_at:
                self._set_log_start()

    def plain_sender(self, source: str) -> Sender | None:
        """Where ``source``'s batches outside any transaction may go directly, not through
        ``send``: None while a transaction is held or a log start waits (``start_log_at``)."""
        self._source = source
        w = self._window
        if w.holding or w.held_open or self._start_at is not None:
            return None
        self._switch(self.main)
        return self.main

    def start_log_at(self, start: int) -> None:
        """A bootstrap's first copied batch holds the sources' log start ``start``: once it is
        appended (now, or when the transactions held with it go), the local log start is moved
        there, before anything after it is appended."""
        self._start_at = start
        if not self._window.holding:
            self._set_log_start()

    def _set_log_start(self) -> None:
        assert self._start_at is not None
        ctx, start, self._start_at = self.ctx, self._start_at, None
        self.wait_confirmed()
        ctx.local.delete_records(ctx.topic, ctx.partition, start)

    def _stable_end(self) -> int:
        """The serving source's last stable offset (``HoldRule``)."""
        ctx = self.ctx
        return ctx.sources[self._source].last_stable_offset(ctx.topic, ctx.partition)

    def finish(self) -> None:
        """The end of the copy's batches (or ``HeldBack``): what is held (transactions that
        cannot be left open locally and have no marker in the range) is dropped, and the copy
        stops right before it (the partition is behind); transactions streamed and still open
        stay open for the next run, and the result names them."""
        ctx = self.ctx
        self.wait_confirmed()
        if self._window.holding:
            held = open_txns_text(self._window.held_open)
            ctx.stopped_at = ctx.confirmed_end
            ctx.behind = _behind_text(
                ctx.confirmed_end,
                held,
                None if self.held_back is None else self.held_back.reason,
                resumable=self.rule.resumable,
                local=ctx.local.name,
            )
            self._window.drop_held()  # a held straddling batch: _fill deleted the fillers
        for pid, txn in sorted(self._slots.live.items(), key=lambda kv: kv[1].first):
            ctx.open_txns.append(
                {
                    "source_producer_id": pid,
                    "first_offset": txn.first,
                    "local_slot": txn.slot,
                    "open_until_ms": txn.until_ms,
                }
            )
        if ctx.open_txns:
            ctx.notes.append(_left_open_note(ctx.open_txns))

    def close(self) -> None:
        """Close the slots' writers (their appends were waited for, or the copy failed); the
        session remembers the local transactions still open, for the next round to resume."""
        self._slots.close()

    # -- appending ------------------------------------------------------------------------------

    def _switch(self, sender: Sender) -> None:
        """One append in flight per partition across all its senders: before another sender
        appends, the last one's appends must have been verified."""
        if sender is not self._active:
            self._active.wait_confirmed()
            self._active = sender

    def wait_confirmed(self) -> None:
        """Return once every append sent so far was verified."""
        self._active.wait_confirmed()

    def _append(self, h: _Held) -> None:
        b = h.batch
        if b.is_control:
            self._end(b, h.source, h.size)
        elif b.is_transactional and not h.filler:
            txn = self._slots.live.get(b.producer_id) or self._begin(b.producer_id, b.base_offset)
            self._switch(txn.sender)
            txn.sender.send(b, h.source, size=h.size, holes=h.holes)
        else:
            self._switch(self.main)
            self.main.send(b, h.source, at=h.at, filler=h.filler, size=h.size, holes=h.holes)

    def _begin(self, source_pid: int, first: int) -> SlotTxn:
        """A slot's transaction for the source producer's transaction, with the partition
        added to it."""
        slot = self._slots.free_slot(first)
        # Nothing in flight while the transaction starts: a run killed from here to its first
        # append leaves it open with nothing appended, and the next run resumes it for the
        # source transaction at its local end, which must be this one's first batch.
        self._switch(self.main)
        self.main.wait_confirmed()
        return self._slots.begin(source_pid, slot, first)

    def _end(self, b: Batch, source: str, size: int) -> None:
        """End the slot's transaction as the source's marker ``b`` ended it, and wait until
        the local marker has landed at exactly ``b``'s offset."""
        ctx = self.ctx
        commit = marker_type(b) == COMMIT
        txn = self._slots.live.get(b.producer_id) or self._begin(b.producer_id, b.base_offset)
        self.wait_confirmed()  # every append before the marker verified
        check_ends_at_marker(ctx, b, first=self.markers == 0)
        tid = slot_id(ctx.topic, ctx.partition, txn.slot)
        producer = self.session.slots[txn.slot]
        ctx.unconfirmed_end = b.next_offset  # from here the marker may land
        ctx.check_running()  # the lease too (LeasedStop): nothing sent for a lost partition
        ctx.local.txn_call(tid, lambda conn: conn.try_end_txn(tid, producer, commit), what="EndTxn")
        await_marker(ctx, b, commit, producer)
        ctx.unconfirmed_end = None
        self._slots.ended(b.producer_id)
        self._active = self.main
        ctx.confirmed(source, size, b.next_offset)
        ctx.budget.release(size)
        self.markers += 1


def _behind_text(
    confirmed_end: int, held: str, reason: str | None, *, resumable: bool, local: str
) -> str:
    """Why a copy stopped at ``confirmed_end``, right before the transactions ``held`` back
    (``reason``: the ``HeldBack`` that stopped it, if one did), and what to do about it."""
    why = f"the source transactions of {held} have no marker in the range yet"
    if reason is not None:
        why = reason
    if not resumable:
        how = (
            f"{local} cannot resume a transaction left open by an earlier run "
            "(it lacks DescribeTransactions or DescribeProducers, KIP-664), so a "
            "replay holds each transaction back until its marker"
        )
    else:
        how = (
            "they began more than --transaction-timeout ago and are still open in the "
            "source, longer than the local coordinator keeps a transaction open, so "
            "a replay holds them back until their markers"
        )
    return (
        f"copied up to offset {confirmed_end}: {why}; {how}; run again once "
        "the source has ended them, or run sync --follow, which copies them "
        "as soon as they end"
    )


def _left_open_note(open_txns: list[dict[str, int]]) -> str:
    """The note on the local transactions a copy leaves open (``CopyContext.open_txns``)."""
    until = [t["open_until_ms"] for t in open_txns if t["open_until_ms"] >= 0]
    when = (
        f" until {_iso(min(until))} (the local coordinator aborts them then, "
        "and the mirror would differ from the source there)"
        if until
        else ""
    )
    left = {t["source_producer_id"]: t["first_offset"] for t in open_txns}
    return (
        f"left {len(left)} local transaction(s) open for source transactions that have "
        f"no marker yet ({open_txns_text(left)}): the next run resumes them, which is "
        f"safe{when}"
    )
