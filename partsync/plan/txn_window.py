"""When a replay of transactions may append each batch (``copy.txn_replay``, ``plan.census``).

A replay *streams* a source transaction: its batches are appended inside a local transaction
as they come, and a run that ends before the source's marker leaves the local transaction open
for the next run (or the next round of a follower) to resume. That is only safe while the
local coordinator keeps the transaction open (``transaction.timeout.ms``) and a later run can
find and resume it (DescribeTransactions and DescribeProducers, KIP-664, Kafka 3.0+). A
transaction that cannot be streamed is *held*: from its first batch on, appends wait until
every held transaction has its marker, then go together; a copy that ends first stops right
before the first held batch and reports the partition behind.

``HoldRule`` says which transactions are held (pure, given the source's last stable offset on
demand); ``TxnWindow`` takes a partition's appends in offset order and says which may go now.
Both ``TxnReplay`` and ``plan --scan`` use them, so the scan stops where a sync stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from partsync.errors import UnsafeError
from partsync.wire.batch import Batch
from partsync.wire.markers import marker_type

__all__ = ["HeldBack", "HoldRule", "TxnWindow", "open_txns_text", "too_many_open"]

T = TypeVar("T")


def too_many_open(offset: int, slots: int) -> UnsafeError:
    return UnsafeError(
        f"more than {slots} source transactions are open at once at offset {offset}; a replay "
        f"keeps at most {slots} local transactions open per partition",
        offset=offset,
    )


def open_txns_text(open_txns: dict[int, int]) -> str:
    """``producer P from offset F, ...`` for source producer id -> first offset, oldest first."""
    return ", ".join(
        f"producer {pid} from offset {first}"
        for pid, first in sorted(open_txns.items(), key=lambda kv: kv[1])
    )


class HeldBack(Exception):
    """A replay holds more than it may (--max-in-flight-bytes) for transactions it cannot
    stream: the copy stops right before the first held batch (the partition is behind)."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(reason)
        self.reason, self.offset = reason, offset


@dataclass
class HoldRule:
    """Which source transactions a replay holds back until their marker, decided at each one's
    first batch.

    ``resumable``: the local cluster can carry a transaction from one run to the next (KIP-664
    lookups); without it every transaction is held, as a local transaction left open would be
    aborted by the next run's fence. Otherwise a transaction is streamed unless it may stay
    open in the source for longer than the local coordinator keeps its replay open
    (``timeout_ms``, counted from its first AddPartitionsToTxn, now): then the local
    transaction would be aborted where the source holds more of it. In that order:

    - it begins below the source's last stable offset (``stable_end()``): its marker is in the
      source's log already;
    - the source's coordinator tells its timeout (``source_timeout(producer id)``): at most
      ``timeout_ms`` (less ``margin_ms``) streams; longer streams only if its start plus that
      timeout (``source_deadline``) comes before the local deadline;
    - the source cannot tell (no KIP-664 there, no rights): its first batch's newest record
      time within ``timeout_ms`` of now streams (Kafka Streams passes input timestamps on, so
      this can hold a young transaction of old records: the source's coordinator is the better
      judge);

    otherwise it is held (a hanging transaction, a KIP-939 two-phase-commit one, a producer
    with a longer timeout than the local one). ``stable_end`` is asked again only for a
    transaction that begins at or past the offset it last answered (the LSO only grows)."""

    resumable: bool
    timeout_ms: int
    stable_end: Callable[[], int]
    clock: Callable[[], int]  # Unix ms
    source_timeout: Callable[[int], int | None] = lambda pid: None
    source_deadline: Callable[[int], int | None] = lambda pid: None
    margin_ms: int = 60_000
    _lso: int = -1

    def hold(self, first: Batch) -> bool:
        if not self.resumable:
            return True
        if first.base_offset < self._lso:
            return False
        budget = self.timeout_ms - min(self.margin_ms, self.timeout_ms // 10)
        timeout = self.source_timeout(first.producer_id)
        if timeout is not None and timeout <= budget:
            return False  # the source ends it (or aborts it) before the local coordinator would
        self._lso = max(self._lso, self.stable_end())
        if first.base_offset < self._lso:
            return False
        now = self.clock()
        if timeout is not None:
            deadline = self.source_deadline(first.producer_id)
            return deadline is None or deadline > now + budget
        return first.max_timestamp < now - self.timeout_ms


class TxnWindow(Generic[T]):
    """Takes a partition's appends in offset order (``take``) and says which may go now.

    ``slots``: transactions a replay keeps open at once; ``max_held_bytes``: the most it holds
    back (--max-in-flight-bytes); ``hold``: whether the transaction a batch begins is held
    (``HoldRule.hold``; None holds every one)."""

    def __init__(
        self, slots: int, max_held_bytes: int, hold: Callable[[Batch], bool] | None = None
    ) -> None:
        self.slots = slots
        self.max_held_bytes = max_held_bytes
        self._hold = hold
        # Source producer id -> its open transaction's first offset, in the order they began.
        self.open: dict[int, int] = {}
        # Those of them held back until their marker.
        self.held_open: dict[int, int] = {}
        self.held_bytes = 0
        self.most_open = 0
        self.most_held_bytes = 0
        self._held: list[T] = []

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def resumed(self, producer_id: int, first: int) -> None:
        """A local transaction an earlier run left open replays the source producer's
        transaction from ``first``: it is streamed (it is open locally already)."""
        self.open[producer_id] = first

    def take(self, item: T, batch: Batch | None, size: int) -> list[T]:
        """``item``, the append of ``batch`` (None: hole records, outside any transaction)
        holding ``size`` bytes, and what may be appended now, in order: nothing while a held
        transaction is open, else every item held and this one. Raises ``UnsafeError`` (its
        offset set) where a replay must refuse (more transactions open than slots), and
        ``HeldBack`` where it holds more bytes than allowed."""
        if batch is not None and batch.is_control:
            marker_type(batch)  # only commit and abort markers can be replayed
            self.open.pop(batch.producer_id, None)
            self.held_open.pop(batch.producer_id, None)
        elif batch is not None and batch.is_transactional and batch.producer_id not in self.open:
            self.open[batch.producer_id] = batch.base_offset
            if len(self.open) > self.slots:  # before any of them is begun
                raise too_many_open(batch.base_offset, self.slots)
            self.most_open = max(self.most_open, len(self.open))
            if self._hold is None or self._hold(batch):
                self.held_open[batch.producer_id] = batch.base_offset
        if not self.held_open and not self._held:
            return [item]
        self._held.append(item)
        self.held_bytes += size
        self.most_held_bytes = max(self.most_held_bytes, self.held_bytes)
        if not self.held_open:
            return self.drop_held()
        if self.held_bytes > self.max_held_bytes:
            first = min(self.held_open.values())
            raise HeldBack(
                f"the source transactions of {open_txns_text(self.held_open)} are still open "
                f"after {self.held_bytes} bytes, more than --max-in-flight-bytes "
                f"({self.max_held_bytes}) a replay holds back for a transaction it cannot "
                "leave open locally",
                offset=first,
            )
        return []

    def drop_held(self) -> list[T]:
        """The items held, no longer held."""
        held, self._held, self.held_bytes = self._held, [], 0
        return held
