"""Transaction slots at the fence (``copy.producer``): a slot transaction an earlier run left
open is taken up (never initialised, which would abort it where the source holds more of it),
one being ended is waited for, and every other slot is fenced only when needed."""

from __future__ import annotations

from typing import Any

import pytest

from partsync._kafka import ActiveProducer, TxnState
from partsync.copy.producer import (
    AT_END,
    TXN_SLOTS,
    ProducerSession,
    fence_slots,
    slot_id,
    slot_partition,
    take_up_slots,
)


class FakeLocal:
    name = "local"

    def __init__(
        self,
        states: list[dict[int, TxnState]],
        producers: list[ActiveProducer],
        resumable: bool = True,
    ) -> None:
        self.states = states  # answered in turn (the last one from then on)
        self.producers = producers
        self.resumable = resumable
        self.initialised: list[str] = []

    def can_resume_transactions(self) -> bool:
        return self.resumable

    def describe_transactions(self, tids: list[str]) -> dict[str, TxnState] | None:
        now = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        empty = TxnState(0, "Empty", -1, -1)
        return {t: now.get(n, empty) for n, t in enumerate(tids)}

    def describe_producers(self, topic: str, partition: int) -> list[ActiveProducer] | None:
        return self.producers

    def init_producer_id(self, tid: str, **kw: Any) -> tuple[int, int]:
        self.initialised.append(tid)
        return (1000 + len(self.initialised), 0)


def test_nothing_open_leaves_the_slots_for_the_first_transaction() -> None:
    local = FakeLocal([{}], [])
    session = ProducerSession(1, 0)
    take_up_slots(local, "t", 0, session)  # type: ignore[arg-type]
    assert session.slots == {} and local.initialised == []


def test_an_open_slot_is_taken_up_and_the_others_fenced() -> None:
    """Slot 2 holds data from offset 40 (last sequence 9); slot 5 was begun with nothing
    appended: it replays the source transaction at the local end."""
    states = {2: TxnState(0, "Ongoing", 77, 3), 5: TxnState(0, "Ongoing", 78, 0)}
    producers = [ActiveProducer(77, 3, 9, 40), ActiveProducer(5, 0, 4, -1)]
    local = FakeLocal([states], producers)
    session = ProducerSession(1, 0)
    take_up_slots(local, "t", 0, session)  # type: ignore[arg-type]
    assert session.open_txns == {2: 40, 5: AT_END}
    assert (session.slots[2], session.slot_sequences[2]) == ((77, 3), 10)
    assert (session.slots[5], session.slot_sequences[5]) == ((78, 0), 0)
    assert local.initialised == [slot_id("t", 0, n) for n in range(TXN_SLOTS) if n not in (2, 5)]


def test_a_slot_being_ended_is_waited_for() -> None:
    ending = {1: TxnState(0, "PrepareCommit", 7, 0)}
    local = FakeLocal([ending, ending, {1: TxnState(0, "CompleteCommit", 7, 0)}], [])
    session = ProducerSession(1, 0)
    take_up_slots(local, "t", 0, session)  # type: ignore[arg-type]
    assert local.states == [{1: TxnState(0, "CompleteCommit", 7, 0)}]
    assert session.slots == {}


def test_a_slot_never_ended_stops_the_fence() -> None:
    from partsync.errors import ClusterError

    local = FakeLocal([{0: TxnState(0, "PrepareAbort", 7, 0)}], [])
    with pytest.raises(ClusterError, match="still being ended"):
        take_up_slots(local, "t", 0, ProducerSession(1, 0), wait=0.1)  # type: ignore[arg-type]


def test_fencing_the_slots_later_initialises_all_of_them() -> None:
    local = FakeLocal([{}], [])
    session = ProducerSession(1, 0)
    fence_slots(local, "t", 3, session)  # type: ignore[arg-type]
    assert sorted(session.slots) == list(range(TXN_SLOTS)) and session.open_txns == {}
    assert local.initialised == [f"partsync:t:3:txn{n}" for n in range(TXN_SLOTS)]


def test_a_cluster_that_cannot_resume_is_not_asked_and_its_slots_are_initialised() -> None:
    """Without all of KIP-664 an open slot cannot be taken up (its first offset and sequence
    are unknown): the fence leaves the slots for the first transaction, which initialises
    every one (aborting what a killed run left open, as documented)."""
    states = {2: TxnState(0, "Ongoing", 77, 3)}
    local = FakeLocal([states], [ActiveProducer(77, 3, 9, 40)], resumable=False)
    session = ProducerSession(1, 0)
    take_up_slots(local, "t", 0, session)  # type: ignore[arg-type]
    assert session.slots == {} and session.open_txns == {}
    fence_slots(local, "t", 0, session)  # type: ignore[arg-type]
    assert session.open_txns == {} and len(local.initialised) == TXN_SLOTS


@pytest.mark.parametrize(
    ("tid", "partition"),
    [
        (slot_id("orders", 3, 7), ("orders", 3)),
        (slot_id("a.b-c_d", 0, 0), ("a.b-c_d", 0)),
        ("partsync:orders:3", None),  # the partition's own id, not a slot
        ("partsync:orders:x:txn1", None),
        ("partsync:orders:3:txnx", None),
        ("other:orders:3:txn1", None),
        ("app-tx-1", None),
    ],
)
def test_a_slot_id_names_its_partition(tid: str, partition: tuple[str, int] | None) -> None:
    """The planner finds the partitions whose replay a local coordinator aborted from the
    transactional ids ListTransactions lists; any other id is not one of them."""
    assert slot_partition(tid) == partition
