"""The quiet points of a replay (plan.txn_window): appends held from a transaction's first
batch until every transaction seen has its marker, then let go in order."""

from __future__ import annotations

import pytest

from partsync.errors import UnsafeError
from partsync.plan.txn_window import TxnWindow
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


def test_too_much_held_is_refused_naming_the_earliest_open_transaction() -> None:
    w: TxnWindow[int] = TxnWindow(slots=8, max_held_bytes=25)
    w.take(0, _txn(0, pid=1), 10)
    w.take(1, _txn(2, pid=2), 10)
    w.take(2, marker(COMMIT, offset=4, producer=(1, 0)), 1)
    with pytest.raises(UnsafeError, match="producer 2 from offset 2") as e:
        w.take(3, _data(5), 10)
    assert e.value.offset == 2
    assert w.drop_held() == [0, 1, 2, 3] and not w.holding
