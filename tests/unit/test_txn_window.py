"""The quiet points of a replay (plan.txn_window): appends held from a transaction's first
batch until every transaction seen has its marker, then let go in order."""

from __future__ import annotations

import pytest

from partsync.errors import UnsafeError
from partsync.plan.txn_window import HeldBack, HoldRule, TxnWindow
from partsync.wire.markers import COMMIT
from tests.unit.test_census import _data, _txn
from tests.unit.test_markers import marker


def test_appends_go_at_once_until_a_transaction_begins_and_together_at_its_end() -> None:
    w: TxnWindow[str] = TxnWindow(slots=8, max_held_bytes=1 << 20)
    assert w.take("plain", _data(0), 10) == ["plain"]
    assert w.take("t1", _txn(3, pid=1), 10) == [] and w.holding
    assert w.take("holes", None, 0) == []  # hole records wait with the rest
    assert w.take("t2", _txn(5, pid=2), 10) == []
    assert w.take("end1", marker(COMMIT, offset=7, producer=(1, 0)), 5) == []
    assert w.take("end2", marker(COMMIT, offset=8, producer=(2, 0)), 5) == [
        "t1", "holes", "t2", "end1", "end2",
    ]  # fmt: skip
    assert (w.holding, w.held_bytes, w.open, w.most_open, w.most_held_bytes) == (
        False, 0, {}, 2, 30,
    )  # fmt: skip


def test_one_transaction_too_many_is_refused_where_it_begins() -> None:
    w: TxnWindow[int] = TxnWindow(slots=2, max_held_bytes=1 << 20)
    w.take(0, _txn(0, pid=1), 1)
    w.take(1, _txn(2, pid=2), 1)
    with pytest.raises(UnsafeError, match="more than 2 source transactions") as e:
        w.take(2, _txn(4, pid=3), 1)
    assert e.value.offset == 4


def test_too_much_held_stops_the_copy_naming_the_earliest_held_transaction() -> None:
    w: TxnWindow[int] = TxnWindow(slots=8, max_held_bytes=25)
    w.take(0, _txn(0, pid=1), 10)
    w.take(1, _txn(2, pid=2), 10)
    w.take(2, marker(COMMIT, offset=4, producer=(1, 0)), 1)
    with pytest.raises(HeldBack, match="producer 2 from offset 2") as e:
        w.take(3, _data(5), 10)
    assert e.value.offset == 2
    assert w.drop_held() == [0, 1, 2, 3] and not w.holding


def test_streamed_transactions_go_at_once_and_a_held_one_holds_what_follows() -> None:
    held_pid = 3
    w: TxnWindow[str] = TxnWindow(8, 1 << 20, hold=lambda b: b.producer_id == held_pid)
    assert w.take("t1", _txn(0, pid=1), 10) == ["t1"]
    assert w.take("t2", _txn(2, pid=2), 10) == ["t2"]
    assert w.take("end1", marker(COMMIT, offset=4, producer=(1, 0)), 1) == ["end1"]
    assert w.take("t3", _txn(5, pid=3), 10) == [] and w.held_open == {3: 5}
    assert w.take("t1b", _txn(7, pid=1), 10) == []  # streamed, but behind the held one
    assert w.take("end3", marker(COMMIT, offset=9, producer=(3, 0)), 1) == ["t3", "t1b", "end3"]
    assert w.open == {2: 2, 1: 7} and not w.holding
    # A transaction resumed from an earlier run is streamed: its later batches go at once.
    w2: TxnWindow[str] = TxnWindow(8, 1 << 20, hold=lambda b: True)
    w2.resumed(5, 0)
    assert w2.take("more", _txn(4, pid=5), 10) == ["more"] and w2.open == {5: 0}


def _rule(resumable: bool = True, lso: int = 100) -> tuple[HoldRule, list[int]]:
    asked: list[int] = []

    def stable_end() -> int:
        asked.append(lso)
        return lso

    return HoldRule(resumable, now_ms=10_000_000, timeout_ms=900_000, stable_end=stable_end), asked


@pytest.mark.parametrize(
    ("resumable", "timestamp", "offset", "held", "asked"),
    [
        (False, 10_000_000, 0, True, 0),  # no KIP-664 on the local cluster: every one held
        (True, 10_000_000, 500, False, 0),  # young: streamed, the source not asked
        (True, 9_099_990, 500, False, 0),  # newest record exactly the timeout old: young
        (True, 9_099_989, 50, False, 1),  # old, below the source's LSO: ended there
        (True, 9_099_989, 100, True, 1),  # old and open in the source (at its LSO): held
        (True, 0, 700, True, 1),
    ],
)  # fmt: skip
def test_which_transactions_are_held(
    resumable: bool, timestamp: int, offset: int, held: bool, asked: int
) -> None:
    rule, calls = _rule(resumable)
    first = _txn(offset, pid=1, timestamp=timestamp)
    assert (rule.hold(first), len(calls)) == (held, asked)


def test_the_sources_lso_is_asked_again_only_past_where_it_was() -> None:
    rule, calls = _rule(lso=100)
    old = {"timestamp": 1}
    assert not rule.hold(_txn(10, pid=1, **old)) and not rule.hold(_txn(60, pid=2, **old))
    assert len(calls) == 1
    assert rule.hold(_txn(100, pid=3, **old)) and len(calls) == 2
