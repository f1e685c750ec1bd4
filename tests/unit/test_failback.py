"""Failback's decisions (``partsync.plan.failback``, ``plan.failback_report``) and its export's
bytes and text (``partsync.wire.export``) as tables and golden values."""

from __future__ import annotations

import json

import pytest

from partsync.plan.comparator import Bounds
from partsync.plan.failback import (
    Action,
    ExportCount,
    TxnEvent,
    classify,
    moved_since,
    orphan_markers,
    topic_action,
    transaction_starts,
    transaction_states,
)
from partsync.plan.failback_report import InUse
from partsync.wire.batch import Batch
from partsync.wire.export import ORIGIN_HEADER, Origin, export_batch, record_line
from partsync.wire.records import Record, iter_records

B = Bounds


@pytest.mark.parametrize(
    ("old", "new", "first", "action", "diverged_at", "export", "discarded"),
    [
        (B(0, 100), B(0, 100), None, Action.MIRROR, None, None, 0),  # identical
        (B(0, 80), B(0, 100), None, Action.MIRROR, None, None, 0),  # a prefix
        (B(0, 0), B(40, 100), None, Action.MIRROR, None, None, 0),  # empty: a mirror start
        (B(0, 120), B(0, 100), None, Action.RECREATE, 100, (100, 120), 120),  # held more
        (B(0, 120), B(0, 130), 90, Action.RECREATE, 90, (90, 120), 120),  # records differ
        (B(10, 120), B(0, 100), 95, Action.RECREATE, 95, (95, 120), 110),
        (B(150, 160), B(0, 100), None, Action.RECREATE, 150, (150, 160), 10),  # all beyond
        # Below the new log start: nothing to compare, all of it exported.
        (B(0, 30), B(50, 100), None, Action.RECREATE, 0, (0, 30), 30),
        (None, B(0, 100), None, Action.CREATE, None, None, 0),
    ],
)
def test_classify(
    old: Bounds | None,
    new: Bounds,
    first: int | None,
    action: Action,
    diverged_at: int | None,
    export: tuple[int, int] | None,
    discarded: int,
) -> None:
    p = classify(3, old, new, first)
    assert (p.action, p.diverged_at, p.export_range, p.discarded) == (
        action,
        diverged_at,
        export,
        discarded,
    )
    assert p.to_dict()["action"] == action.value


def test_a_topic_is_created_again_when_any_partition_diverged() -> None:
    same = classify(0, B(0, 10), B(0, 10), None)
    ahead = classify(1, B(0, 12), B(0, 10), None)
    gone = classify(2, None, B(0, 10), None)
    assert topic_action([same, same]) is Action.MIRROR
    assert topic_action([same, ahead]) is Action.RECREATE
    assert topic_action([same, gone]) is Action.CREATE
    assert topic_action([gone, ahead]) is Action.RECREATE


@pytest.mark.parametrize(
    ("events", "states"),
    [
        ([TxnEvent(0, 7, False)], {}),  # outside transactions: not listed
        ([TxnEvent(0, 7, True), TxnEvent(5, 7, False, "commit")], {0: "committed"}),
        ([TxnEvent(0, 7, True), TxnEvent(5, 7, False, "abort")], {0: "aborted"}),
        ([TxnEvent(0, 7, True), TxnEvent(3, 7, True)], {0: "open", 3: "open"}),
        # Interleaved producers: each marker ends its own producer's batches only.
        (
            [
                TxnEvent(0, 7, True),
                TxnEvent(2, 8, True),
                TxnEvent(4, 8, False, "abort"),
                TxnEvent(5, 7, True),
                TxnEvent(6, 7, False, "commit"),
                TxnEvent(7, 8, True),
            ],
            {0: "committed", 2: "aborted", 5: "committed", 7: "open"},
        ),
        # A marker whose data lies before the exported range ends nothing listed.
        ([TxnEvent(0, 9, False, "commit"), TxnEvent(1, 9, True)], {1: "open"}),
    ],
)
def test_transaction_states(events: list[TxnEvent], states: dict[int, str]) -> None:
    assert transaction_states(events) == states


def test_a_marker_past_the_divergence_point_names_a_transaction_begun_below_it() -> None:
    tail = [
        TxnEvent(100, 7, False, "commit"),  # 7's transaction began below 100
        TxnEvent(101, 8, True),
        TxnEvent(102, 8, False, "abort"),  # 8's began in the tail
        TxnEvent(103, 9, False),
        TxnEvent(104, 9, False, "abort"),  # 9's first event in the tail is data
    ]
    assert orphan_markers(tail) == {7}


@pytest.mark.parametrize(
    ("window", "pids", "from_log_start", "starts", "unresolved"),
    [
        # 7's last marker at 50, its transaction's data from 60 on.
        (
            [
                TxnEvent(40, 7, True),
                TxnEvent(50, 7, False, "commit"),
                TxnEvent(60, 7, True),
                TxnEvent(70, 7, True),
            ],
            {7},
            False,
            {7: 60},
            set(),
        ),
        # No marker of 7 in the window: it may have begun below; widen it.
        ([TxnEvent(60, 7, True)], {7}, False, {}, {7}),
        # ... unless the window starts at the log start.
        ([TxnEvent(60, 7, True)], {7}, True, {7: 60}, set()),
        # Other producers' batches and non-transactional ones do not count.
        (
            [
                TxnEvent(50, 7, False, "abort"),
                TxnEvent(55, 8, True),
                TxnEvent(58, 7, False),
                TxnEvent(61, 7, True),
            ],
            {7},
            False,
            {7: 61},
            set(),
        ),
    ],
)
def test_transaction_starts(
    window: list[TxnEvent],
    pids: set[int],
    from_log_start: bool,
    starts: dict[int, int],
    unresolved: set[int],
) -> None:
    assert transaction_starts(window, pids, from_log_start=from_log_start) == (starts, unresolved)


def test_export_count_adds_records_by_state_and_round_trips() -> None:
    c = ExportCount()
    c.add(3, 100, None)
    c.add(2, 80, "committed")
    c.add(1, 70, None, marker=True)
    assert c.to_dict() == {
        "records": 5,
        "markers": 1,
        "bytes": 250,
        "transactions": {"committed": 2, "none": 3},
        "straddling": 0,
    }
    assert ExportCount.from_dict(c.to_dict()) == c


def test_an_export_batch_holds_the_records_as_they_were_and_their_origin() -> None:
    recs = [
        Record(40, 1_700_000_000_500, b"k1", b"v1", (("h", b"x"), ("n", None))),
        Record(41, 1_700_000_000_000, None, b"\xff\x00"),  # an older timestamp, binary value
        Record(43, 1_700_000_000_900, b"k3", None),  # a tombstone (42 was compacted away)
    ]
    origins = [Origin("dc1", "orders", 2, r.offset, 40, "committed", 1_700_000_000) for r in recs]
    data = export_batch(list(zip(recs, origins, strict=True)))
    batch = Batch.parse(memoryview(data))
    assert batch.crc_ok and batch.producer_id == -1 and batch.record_count == 3
    assert (batch.base_timestamp, batch.max_timestamp) == (1_700_000_000_000, 1_700_000_000_900)
    got = list(iter_records(batch))
    assert [(r.timestamp, r.key, r.value) for r in got] == [
        (r.timestamp, r.key, r.value) for r in recs
    ]
    assert [r.headers[:-1] for r in got] == [r.headers for r in recs]
    assert [r.headers[-1][0] for r in got] == [ORIGIN_HEADER] * 3
    assert [Origin.of(r.headers) for r in got] == origins
    # Golden: the origin header's bytes are part of the contract a rerun resumes from.
    assert got[0].headers[-1][1] == (
        b'{"cluster":"dc1","topic":"orders","partition":2,"offset":40,"diverged_at":40,'
        b'"transaction":"committed","promoted_ms":1700000000}'
    )


def test_origins_of_another_failback_do_not_resume_this_one() -> None:
    mine = Origin("dc1", "orders", 0, 0, 100)
    assert mine.same_export(Origin("dc1", "orders", 0, 150, 100, "aborted"))
    assert not mine.same_export(Origin("dc1", "orders", 0, 150, 90))  # an earlier failback
    assert not mine.same_export(Origin("dc1", "orders", 1, 150, 100))
    assert not mine.same_export(Origin("dc2", "orders", 0, 150, 100))
    # A later cycle that diverged at the same offset: another promotion.
    assert not mine.same_export(Origin("dc1", "orders", 0, 150, 100, promoted_ms=5))
    assert Origin.from_bytes(b"not json") is None
    assert Origin.of([("other", b"{}")]) is None


def test_a_json_line_is_readable_and_keeps_binary_exactly() -> None:
    r = Record(7, 1_700_000_000_000, b"key", b"\x00\xff", (("h", b"v"), ("b", b"\xfe")))
    doc = json.loads(record_line(r, producer_id=12, transaction="aborted", log_append_time=False))
    assert doc == {
        "offset": 7,
        "timestamp": 1_700_000_000_000,
        "timestamp_type": "CreateTime",
        "producer_id": 12,
        "transaction": "aborted",
        "key": "key",
        "value": {"base64": "AP8="},
        "headers": [["h", "v"], ["b", {"base64": "/g=="}]],
    }
    marker = Record(9, 5, b"\x00\x00\x00\x01", b"", control=True)
    doc = json.loads(
        record_line(marker, producer_id=12, transaction=None, log_append_time=True, marker="commit")
    )
    assert doc == {
        "offset": 9,
        "timestamp": 5,
        "timestamp_type": "LogAppendTime",
        "producer_id": 12,
        "marker": "commit",
    }


def test_in_use_names_what_it_saw_and_what_no_api_shows() -> None:
    assert not InUse().in_use
    use = InUse(
        groups={"billing": 2},
        moved={"orders-0": (10, 12)},
        open_transactions={"orders-1": (5, 9)},
        transactional_ids=["tx-1"],
        watched_s=10,
    )
    assert use.in_use
    text = use.refusal("dc1")
    for part in (
        "cluster dc1 (the old primary) is still in use",
        "billing (2)",
        "log ends that moved within 10s: orders-0 10->12",
        "orders-1 at 5 (end 9)",
        "transactional ids: tx-1",
    ):
        assert part in text, text
    assert any("assign()" in x for x in use.to_dict()["not_visible"])
    assert InUse(unknown_groups=["g"]).in_use


@pytest.mark.parametrize(
    ("old", "now", "expected"),
    [
        (B(0, 10), (10, 10), []),  # as compared and exported
        (B(0, 10), (12, 12), ["0: written since, end 10 -> 12"]),
        # Acknowledged with acks=1, not yet on the followers: no Fetch read it, so it was not
        # exported; deleting now would lose it.
        (
            B(0, 10),
            (10, 13),
            ["0: offsets 10..12 above the high watermark (not yet replicated, not exported)"],
        ),
        (B(0, 10), (11, 13), ["0: written since, end 10 -> 11"]),
        (None, (5, 5), []),  # not on the old primary: nothing there to lose
    ],
)
def test_moved_since(old: Bounds | None, now: tuple[int, int], expected: list[str]) -> None:
    p = classify(0, old, B(0, 10), None)
    assert moved_since([p], {0: now}) == expected
