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
from typing import Any

from partsync.copy.context import CopyContext
from partsync.copy.producer import AT_END, TXN_SLOTS, ProducerSession, fence_slots, slot_id
from partsync.copy.sender import Sender
from partsync.errors import AppendMismatchError, ClusterError, PartsyncError, UnsafeError
from partsync.io.broker_errors import broker_error
from partsync.io.reader import batch_at
from partsync.io.writer import SharedWriter
from partsync.plan.txn_window import HeldBack, HoldRule, TxnWindow, open_txns_text, too_many_open
from partsync.retry import Backoff, retry_until
from partsync.wire.batch import Batch, iter_batches
from partsync.wire.markers import ABORT, COMMIT, marker_name, marker_type

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


@dataclass(eq=False)
class _Txn:
    """A source transaction being replayed by a local slot (``TxnReplay._live`` keys it by
    the source producer id; the slot's writer is in ``TxnReplay._writers``)."""

    slot: int
    sender: Sender
    first: int  # offset of its first batch in the partition
    until_ms: int  # when the local coordinator aborts it if still open (wall clock; -1: unknown)


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
        self._live: dict[int, _Txn] = {}  # source producer id -> its local replay
        self._writers: dict[int, SharedWriter] = {}  # slot -> its writer
        self._active = main  # the sender whose appends may be in flight
        self.markers = 0
        self.held_back: HeldBack | None = None
        # The bootstrap's log start, to be set once the batch holding it is appended.
        self._start_at: int | None = None
        for slot, first in sorted(session.open_txns.items()):
            self._resume(slot, first)

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
            why = (
                self.held_back.reason
                if self.held_back is not None
                else f"the source transactions of {held} have no marker in the range yet"
            )
            if not self.rule.resumable:
                how = (
                    f"{ctx.local.name} cannot resume a transaction left open by an earlier run "
                    "(it lacks DescribeTransactions or DescribeProducers, KIP-664), so a "
                    "replay holds each transaction back until its marker"
                )
            else:
                how = (
                    "they began more than --transaction-timeout ago and are still open in the "
                    "source, longer than the local coordinator keeps a transaction open, so "
                    "a replay holds them back until their markers"
                )
            ctx.behind = (
                f"copied up to offset {ctx.confirmed_end}: {why}; {how}; run again once "
                "the source has ended them, or run sync --follow, which copies them "
                "as soon as they end"
            )
            self._window.drop_held()  # a held straddling batch: _fill deleted the fillers
        for pid, txn in sorted(self._live.items(), key=lambda kv: kv[1].first):
            ctx.open_txns.append(
                {
                    "source_producer_id": pid,
                    "first_offset": txn.first,
                    "local_slot": txn.slot,
                    "open_until_ms": txn.until_ms,
                }
            )
        if ctx.open_txns:
            until = [t["open_until_ms"] for t in ctx.open_txns if t["open_until_ms"] >= 0]
            when = (
                f" until {_iso(min(until))} (the local coordinator aborts them then, "
                "and the mirror would differ from the source there)"
                if until
                else ""
            )
            left = {t["source_producer_id"]: t["first_offset"] for t in ctx.open_txns}
            ctx.notes.append(
                f"left {len(left)} local transaction(s) open for source transactions that have "
                f"no marker yet ({open_txns_text(left)}): the next run resumes them, which is "
                f"safe{when}"
            )

    def close(self) -> None:
        """Close the slots' writers (their appends were waited for, or the copy failed); the
        session remembers the local transactions still open, for the next round to resume."""
        self.session.open_txns = {t.slot: t.first for t in self._live.values()}
        self.session.open_until = {t.slot: t.until_ms for t in self._live.values()}
        for txn in self._live.values():
            self.session.slot_sequences[txn.slot] = txn.sender.sequence
        self._live.clear()
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

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
            txn = self._live.get(b.producer_id) or self._begin(b.producer_id, b.base_offset)
            self._switch(txn.sender)
            txn.sender.send(b, h.source, size=h.size, holes=h.holes)
        else:
            self._switch(self.main)
            self.main.send(b, h.source, at=h.at, filler=h.filler, size=h.size, holes=h.holes)

    def _resume(self, slot: int, first: int) -> None:
        """Take up the slot's local transaction an earlier run left open from offset
        ``first``: it replays the source transaction whose batch is at that offset."""
        ctx = self.ctx
        if first == AT_END:  # begun, nothing appended: the transaction at the local end
            first = ctx.plan.local.end
        source = ctx.plan.chunks[0].source if ctx.plan.chunks else ctx.plan.serving[0]
        # A mirror that started inside this transaction's first batch (its source's log start
        # cuts it): the source serves that batch from its log start on.
        at = max(first, ctx.plan.sources[source].log_start)
        theirs = batch_at(ctx.open(ctx.sources[source]), source, ctx.topic, ctx.partition, at)
        if not theirs.is_transactional or theirs.base_offset != first:
            raise UnsafeError(
                f"the local transaction left open from offset {first} (slot {slot}) replays no "
                f"source transaction: {source}'s batch there is {theirs.describe()}",
                cluster=ctx.local.name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=first,
            )
        if theirs.producer_id in self._live:
            raise PartsyncError(
                f"two local transactions left open (slots {self._live[theirs.producer_id].slot} "
                f"and {slot}) replay the same source transaction at offset {first}",
                cluster=ctx.local.name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=first,
            )
        until = self.session.open_until.get(slot, -1)
        self._live[theirs.producer_id] = self._slot_txn(slot, first, until)
        if not theirs.is_control:  # a marker-only transaction just ends
            self._window.resumed(theirs.producer_id, first)
        ctx.notes.append(
            f"resumed the local transaction left open from offset {first} (source "
            f"producer {theirs.producer_id})"
        )

    def _slot_txn(self, slot: int, first: int, until_ms: int) -> _Txn:
        ctx = self.ctx
        writer = self._writers.get(slot)
        if writer is None or writer.broken:  # one per slot, for all its transactions
            tid = slot_id(ctx.topic, ctx.partition, slot)
            writer = ctx.local.txn_writer(
                ctx.topic, ctx.partition, tid, timeout_ms=ctx.opts.produce_timeout_ms
            )
            self._writers[slot] = writer
        identity = ProducerSession(
            *self.session.slots[slot], sequence=self.session.slot_sequences.get(slot, 0)
        )
        return _Txn(slot, Sender(ctx, writer, identity), first, until_ms)

    def _begin(self, source_pid: int, first: int) -> _Txn:
        """A slot's transaction for the source producer's transaction, with the partition
        added to it."""
        ctx = self.ctx
        busy = {t.slot for t in self._live.values()}
        free = [n for n in range(TXN_SLOTS) if n not in busy]
        if not free:  # every slot busy, a marker of a transaction with nothing left among them
            e = too_many_open(first, TXN_SLOTS)
            e.cluster, e.topic, e.partition = ctx.local.name, ctx.topic, ctx.partition
            raise e
        # Nothing in flight while the transaction starts: a run killed from here to its first
        # append leaves it open with nothing appended, and the next run resumes it for the
        # source transaction at its local end, which must be this one's first batch.
        self._switch(self.main)
        self.main.wait_confirmed()
        if not self.session.slots:
            self._fence_slots()
        slot = free[0]
        tid = slot_id(ctx.topic, ctx.partition, slot)
        producer = self.session.slots[slot]
        ctx.check_running()  # the lease too (LeasedStop): nothing sent for a lost partition
        ctx.local.txn_call(
            tid,
            lambda conn: conn.try_add_partition_to_txn(tid, producer, ctx.topic, ctx.partition),
            what="AddPartitionsToTxn",
        )
        # The coordinator times the transaction from its first AddPartitionsToTxn.
        until = int(time.time() * 1000) + ctx.opts.transaction_timeout_ms
        txn = self._slot_txn(slot, first, until)
        self._live[source_pid] = txn
        return txn

    def _fence_slots(self) -> None:
        """The copy's first transaction: fence the slots now. The fence planned none open
        (``producer.take_up_slots``); one found now is another writer's or a killed run's
        since, and the round is planned again, which takes it up."""
        ctx = self.ctx
        fence_slots(
            ctx.local,
            ctx.topic,
            ctx.partition,
            self.session,
            txn_timeout_ms=ctx.opts.transaction_timeout_ms,
        )
        _b, leo = ctx.local.bounds_and_log_ends(ctx.topic, [ctx.partition])[ctx.partition]
        if self.session.open_txns or leo != ctx.confirmed_end:
            raise ClusterError(
                f"a transaction of this partition's slots was open (or was aborted: the local "
                f"log ends at {leo}, not {ctx.confirmed_end}) when the copy began its first; "
                "planning again",
                cluster=ctx.local.name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=ctx.confirmed_end,
            )

    def _end(self, b: Batch, source: str, size: int) -> None:
        """End the slot's transaction as the source's marker ``b`` ended it, and wait until
        the local marker has landed at exactly ``b``'s offset."""
        ctx = self.ctx
        commit = marker_type(b) == COMMIT
        txn = self._live.get(b.producer_id) or self._begin(b.producer_id, b.base_offset)
        self.wait_confirmed()  # every append before the marker verified
        # What this copy confirmed, and for its first marker the local log itself, must end at
        # the marker's offset: nothing else may be on its way there (an earlier transaction's
        # marker; the fence waited for those, and each marker of this copy is checked to end
        # the log).
        leo = ctx.confirmed_end
        if self.markers == 0 and leo == b.base_offset:
            _b, leo = ctx.local.bounds_and_log_ends(ctx.topic, [ctx.partition])[ctx.partition]
        if leo != b.base_offset:
            raise AppendMismatchError(
                f"the local log ends at {leo}, not at the source's "
                f"{marker_name(marker_type(b))} marker's offset {b.base_offset}",
                cluster=ctx.local.name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=b.base_offset,
            )
        tid = slot_id(ctx.topic, ctx.partition, txn.slot)
        producer = self.session.slots[txn.slot]
        ctx.unconfirmed_end = b.next_offset  # from here the marker may land
        ctx.check_running()  # the lease too (LeasedStop): nothing sent for a lost partition
        ctx.local.txn_call(tid, lambda conn: conn.try_end_txn(tid, producer, commit), what="EndTxn")
        self._await_marker(b, commit, producer)
        ctx.unconfirmed_end = None
        self.session.slot_sequences[txn.slot] = txn.sender.sequence
        del self._live[b.producer_id]
        self._active = self.main
        ctx.confirmed(source, size, b.next_offset)
        ctx.budget.release(size)
        self.markers += 1

    def _await_marker(self, b: Batch, commit: bool, producer: tuple[int, int]) -> None:
        """EndTxn is answered before the coordinator writes its markers: wait until the local
        log holds a marker of the same kind at ``b``'s offset, replicated (a Fetch there waits
        for it: a consumer's Fetch returns nothing beyond the high watermark), with nothing
        after it."""
        ctx = self.ctx
        at = b.base_offset
        kind = marker_name(COMMIT if commit else ABORT)
        where: dict[str, Any] = {
            "cluster": ctx.local.name,
            "topic": ctx.topic,
            "partition": ctx.partition,
            "offset": at,
        }
        conn = ctx.open(ctx.local)
        deadline = time.monotonic() + ctx.opts.produce_timeout_ms / 1000
        while True:
            ctx.check_running()
            got = conn.fetch(
                ctx.topic, [(ctx.partition, at, 64 << 10)], max_wait_ms=200, min_bytes=1
            )[ctx.partition]
            if got.error_code:
                raise broker_error(got.error_code, f"reading the {kind} marker back", **where)
            landed = list(iter_batches(got.records, start=at))
            if landed:
                break
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the {kind} marker of the transaction replayed for offset {at} did not "
                    f"land within {ctx.opts.produce_timeout_ms / 1000:g}s (the local high "
                    f"watermark is {got.high_watermark})",
                    **where,
                )
        first = landed[0]
        if first.base_offset != at:
            raise AppendMismatchError(
                f"the replayed transaction's marker for offset {at} did not land there (the "
                f"batch at {at} is {first.describe()}): another writer or a changed log; "
                "stopped writing",
                **where,
            )
        if (first.producer_id, first.producer_epoch) != producer:
            raise AppendMismatchError(
                f"the marker at offset {at} ends producer {first.producer_id}'s transaction "
                f"(epoch {first.producer_epoch}), not the replay's (producer {producer[0]}, "
                f"epoch {producer[1]}): another writer or a changed log; stopped writing",
                **where,
            )
        if not first.is_control or (marker_type(first) == COMMIT) != commit:
            got_kind = marker_name(marker_type(first)) if first.is_control else "no marker"
            raise AppendMismatchError(
                f"the local batch at offset {at} is {got_kind}, the source's a {kind} marker: "
                "the local transaction was ended by someone else (its timeout?)",
                **where,
            )

        # Alone and replicated: the log ends right after it and the high watermark has
        # reached it (a Fetch answer's high watermark may be older than its records).
        def replicated() -> tuple[bool, bool]:
            bounds, leo = ctx.local.bounds_and_log_ends(ctx.topic, [ctx.partition])[ctx.partition]
            if leo != at + 1:
                raise AppendMismatchError(
                    f"the local log ends at {leo} right after the replayed transaction's "
                    f"marker at offset {at}: another writer or a changed log; stopped writing",
                    **where,
                )
            return bounds.end == leo, bounds.end == leo

        if not retry_until(replicated, Backoff(0.002, 0.05, deadline=ctx.opts.hw_wait_s)):
            raise ClusterError(
                f"the marker at offset {at} is not replicated after {ctx.opts.hw_wait_s:g}s",
                **where,
            )
