"""When a replay of transactions may append: the quiet points of a partition's log.

A replay never leaves a local transaction open waiting for the source (``copy.txn_replay``):
from a transaction's first batch on, appends are held back until every transaction seen has
its marker (a *quiet point*), then let go together. ``TxnWindow`` decides that for the replay,
and for ``plan --scan`` (``plan.census``), which must stop where a replay stops.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from partsync.errors import UnsafeError
from partsync.wire.batch import Batch
from partsync.wire.markers import marker_type

__all__ = ["TxnWindow", "too_many_open"]

T = TypeVar("T")


def too_many_open(offset: int, slots: int) -> UnsafeError:
    return UnsafeError(
        f"more than {slots} source transactions are open at once at offset {offset}; a replay "
        f"keeps at most {slots} local transactions open per partition",
        offset=offset,
    )


class TxnWindow(Generic[T]):
    """Takes a partition's appends in offset order (``take``) and says which may go now.

    ``slots``: transactions a replay keeps open at once; ``max_held_bytes``: the most it holds
    back (--max-in-flight-bytes)."""

    def __init__(self, slots: int, max_held_bytes: int) -> None:
        self.slots = slots
        self.max_held_bytes = max_held_bytes
        # Source producer id -> its open transaction's first offset, in the order they began.
        self.open: dict[int, int] = {}
        self.held_bytes = 0
        self.most_open = 0
        self.most_held_bytes = 0
        self._held: list[T] = []

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def take(self, item: T, batch: Batch | None, size: int) -> list[T]:
        """``item``, the append of ``batch`` (None: hole records, outside any transaction)
        holding ``size`` bytes, and what may be appended now, in order: nothing while a
        transaction is open, else every item held and this one. Raises ``UnsafeError`` (its
        offset set) where a replay must refuse: more transactions open than slots, or more
        bytes held than allowed."""
        if batch is not None and batch.is_control:
            marker_type(batch)  # only commit and abort markers can be replayed
            self.open.pop(batch.producer_id, None)
        elif batch is not None and batch.is_transactional:
            self.open.setdefault(batch.producer_id, batch.base_offset)
            if len(self.open) > self.slots:  # before any of them is begun
                raise too_many_open(batch.base_offset, self.slots)
            self.most_open = max(self.most_open, len(self.open))
        if not self.open and not self._held:
            return [item]
        self._held.append(item)
        self.held_bytes += size
        self.most_held_bytes = max(self.most_held_bytes, self.held_bytes)
        if not self.open:
            return self.drop_held()
        if self.held_bytes > self.max_held_bytes:
            pid, first = min(self.open.items(), key=lambda kv: kv[1])
            raise UnsafeError(
                f"the transaction of source producer {pid} from offset {first} is still open "
                f"after {self.held_bytes} bytes, more than --max-in-flight-bytes "
                f"({self.max_held_bytes}): a replay holds a transaction's batches until it "
                "ends; raise --max-in-flight-bytes (and --memory-budget)",
                offset=first,
            )
        return []

    def drop_held(self) -> list[T]:
        """The items held, no longer held."""
        held, self._held, self.held_bytes = self._held, [], 0
        return held
