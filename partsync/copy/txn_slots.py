"""The partition's local transaction slots (``producer.slot_id``) and the source transactions
they replay (``copy.txn_replay``): which slot replays which source producer's transaction, the
slots' writers and producer identities, and beginning, resuming and leaving open their
transactions. Ending one (the marker) is the replay's."""

from __future__ import annotations

import time
from dataclasses import dataclass

from partsync.copy.context import CopyContext
from partsync.copy.producer import AT_END, TXN_SLOTS, ProducerSession, fence_slots, slot_id
from partsync.copy.sender import Sender
from partsync.errors import ClusterError, PartsyncError, UnsafeError
from partsync.io.reader import batch_at
from partsync.io.writer import SharedWriter
from partsync.plan.txn_window import too_many_open
from partsync.wire.batch import Batch

__all__ = ["SlotTxn", "TxnSlots"]


@dataclass(eq=False)
class SlotTxn:
    """A source transaction being replayed by a local slot (``TxnSlots.live`` keys it by the
    source producer id; the slot's writer is in ``TxnSlots._writers``)."""

    slot: int
    sender: Sender
    first: int  # offset of its first batch in the partition
    until_ms: int  # when the local coordinator aborts it if still open (wall clock; -1: unknown)


class TxnSlots:
    """The slots of one copy's partition and their live transactions."""

    def __init__(self, ctx: CopyContext, session: ProducerSession) -> None:
        self.ctx, self.session = ctx, session
        self.live: dict[int, SlotTxn] = {}  # source producer id -> its local replay
        self._writers: dict[int, SharedWriter] = {}  # slot -> its writer

    def resume(self, slot: int, first: int) -> Batch:
        """Take up the slot's local transaction an earlier run left open from offset
        ``first``: it replays the source transaction whose batch is at that offset, which is
        returned."""
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
        if theirs.producer_id in self.live:
            raise PartsyncError(
                f"two local transactions left open (slots {self.live[theirs.producer_id].slot} "
                f"and {slot}) replay the same source transaction at offset {first}",
                cluster=ctx.local.name,
                topic=ctx.topic,
                partition=ctx.partition,
                offset=first,
            )
        until = self.session.open_until.get(slot, -1)
        self.live[theirs.producer_id] = self._slot_txn(slot, first, until)
        return theirs

    def _slot_txn(self, slot: int, first: int, until_ms: int) -> SlotTxn:
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
        return SlotTxn(slot, Sender(ctx, writer, identity), first, until_ms)

    def free_slot(self, first: int) -> int:
        """A slot with no live transaction, for the source transaction from ``first``."""
        ctx = self.ctx
        busy = {t.slot for t in self.live.values()}
        free = [n for n in range(TXN_SLOTS) if n not in busy]
        if not free:  # every slot busy, a marker of a transaction with nothing left among them
            e = too_many_open(first, TXN_SLOTS)
            e.cluster, e.topic, e.partition = ctx.local.name, ctx.topic, ctx.partition
            raise e
        return free[0]

    def begin(self, source_pid: int, slot: int, first: int) -> SlotTxn:
        """The free ``slot``'s transaction for the source producer's transaction, with the
        partition added to it (nothing in flight: ``TxnReplay._begin``)."""
        ctx = self.ctx
        if not self.session.slots:
            self._fence_slots()
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
        self.live[source_pid] = txn
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

    def ended(self, source_pid: int) -> None:
        """The source producer's transaction ended (its marker landed): its slot is free."""
        txn = self.live.pop(source_pid)
        self.session.slot_sequences[txn.slot] = txn.sender.sequence

    def close(self) -> None:
        """Close the slots' writers; the session remembers the local transactions still open,
        for the next round to resume."""
        self.session.open_txns = {t.slot: t.first for t in self.live.values()}
        self.session.open_until = {t.slot: t.until_ms for t in self.live.values()}
        for txn in self.live.values():
            self.session.slot_sequences[txn.slot] = txn.sender.sequence
        self.live.clear()
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
