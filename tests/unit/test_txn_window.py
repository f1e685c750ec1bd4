"""Which appends a replay lets go (plan.txn_window): streamed transactions at once, a held
one's from its first batch until every held transaction has its marker, then in order; and
which transactions are held (HoldRule)."""

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
        "t1",
        "holes",
        "t2",
        "end1",
        "end2",
    ]
    assert (w.holding, w.held_bytes, w.open, w.most_open, w.most_held_bytes) == (
        False,
        0,
        {},
        2,
        30,
    )


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


def _rule(
    resumable: bool = True,
    lso: int = 100,
    source: tuple[int, int] | None = None,
) -> tuple[HoldRule, list[str]]:
    """A rule at now = 10,000,000 ms with a 900 s local timeout; ``source``: the source
    coordinator's (timeout, deadline) of every producer's transaction, None: it cannot tell."""
    asked: list[str] = []

    def stable_end() -> int:
        asked.append("lso")
        return lso

    def timeout(pid: int) -> int | None:
        asked.append("timeout")
        return None if source is None else source[0]

    def deadline(pid: int) -> int | None:
        asked.append("deadline")
        return None if source is None else source[1]

    rule = HoldRule(
        resumable,
        900_000,
        stable_end,
        clock=lambda: 10_000_000,
        source_timeout=timeout,
        source_deadline=deadline,
    )
    return rule, asked


@pytest.mark.parametrize(
    ("resumable", "source", "timestamp", "offset", "held", "asked"),
    [
        (False, None, 10_000_000, 0, True, []),  # no KIP-664 on the local cluster
        # The source's coordinator tells: a timeout within the local one's streams at once.
        (True, (60_000, 0), 0, 500, False, ["timeout"]),
        (True, (840_000, 0), 0, 500, False, ["timeout"]),  # 900 s less a 60 s margin
        # A longer one: by its deadline, after asking whether it ended already (LSO).
        (True, (3_600_000, 10_700_000), 0, 500, False, ["timeout", "lso", "deadline"]),
        (True, (3_600_000, 12_000_000), 10_000_000, 500, True, ["timeout", "lso", "deadline"]),
        (True, (3_600_000, 12_000_000), 0, 50, False, ["timeout", "lso"]),  # ended: below LSO
        # The source cannot tell: its records' time.
        (True, None, 9_099_990, 500, False, ["timeout", "lso"]),  # newest exactly 900 s old
        (True, None, 9_099_989, 500, True, ["timeout", "lso"]),
        (True, None, 0, 50, False, ["timeout", "lso"]),  # old, but ended (below the LSO)
    ],
)
def test_which_transactions_are_held(
    resumable: bool,
    source: tuple[int, int] | None,
    timestamp: int,
    offset: int,
    held: bool,
    asked: list[str],
) -> None:
    rule, calls = _rule(resumable, source=source)
    first = _txn(offset, pid=1, timestamp=timestamp)
    assert (rule.hold(first), calls) == (held, asked)


def test_the_sources_lso_is_asked_again_only_past_where_it_was() -> None:
    rule, calls = _rule(lso=100)
    old = {"timestamp": 1}
    assert not rule.hold(_txn(10, pid=1, **old)) and not rule.hold(_txn(60, pid=2, **old))
    assert calls.count("lso") == 1
    assert rule.hold(_txn(100, pid=3, **old)) and calls.count("lso") == 2
