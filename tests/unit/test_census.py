"""The census ``plan --scan`` takes of a range (plan.census), following the batches as a sync
would append them: holes between and inside batches, transactions and their markers, where a
replay stops (before a transaction it holds) and where a sync with given options refuses."""

from __future__ import annotations

from typing import Any

from partsync.plan.census import Census, RangeCensus, ScanOptions, ScanStop
from partsync.wire.batch import Batch
from partsync.wire.markers import ABORT, COMMIT
from tests.unit.test_batch import build, parse
from tests.unit.test_holes import _compacted
from tests.unit.test_markers import marker

FILL = ScanOptions(fill_holes=True, replay=True, compacted=True)


def _data(base: int, n: int = 3, **kw: Any) -> Batch:
    return parse(build(n, base_offset=base, **kw))


def _txn(base: int, pid: int, n: int = 2, **kw: Any) -> Batch:
    return _data(base, n, producer=(pid, 0, 0), transactional=True, **kw)


def _census(
    start: int, *batches: Batch, end: int, opts: ScanOptions = FILL, **options: Any
) -> tuple[RangeCensus, ScanStop | None]:
    """The census of ``batches`` read from ``start`` (the local end) in a range ending at
    ``end``, by a sync with ``opts`` changed by ``options``."""
    census = Census(start, ScanOptions(**{**opts.__dict__, **options}))
    census.add_all(batches)
    return census.result(end)


def _refused_at(stop: ScanStop | None, offset: int, says: str) -> None:
    assert stop is not None and (stop.offset, stop.refused) == (offset, True), stop
    assert says in stop.reason, stop


def test_contiguous_batches_are_copied_to_the_end() -> None:
    c, stop = _census(10, _data(10), _data(13), end=16)
    assert (c.batches, c.holes, c.markers, c.end, stop) == (2, 0, 0, 16, None)
    assert c.bytes == 2 * len(build(3))
    assert _census(10, _data(10), end=13, fill_holes=False, replay=False)[1] is None


def test_holes_between_and_inside_batches_and_an_empty_batch() -> None:
    thinned = _compacted(build(5, base_offset=13), {1, 3})  # 13..17 holding 13, 15, 17
    empty = _compacted(build(4, base_offset=20), {0, 1, 2, 3})  # 20..23 holding nothing
    batches = (_data(10), thinned, empty, _data(24))
    c, stop = _census(10, *batches, end=27)
    # 18 and 19: a batch cleaned away; 14, 16: inside; 20..23: the empty batch.
    assert (c.holes_between, c.holes_inside, c.batches_with_holes) == (2, 6, 2)
    assert (c.holes, c.batches, c.end, stop) == (8, 4, 27, None)
    # Refused at the first batch with holes; what comes before it is copied.
    c, stop = _census(10, *batches, end=27, fill_holes=False)
    _refused_at(stop, 13, "holds 3 records for 5 offsets")
    assert (c.batches, c.holes, c.end) == (1, 0, 13)
    _refused_at(_census(10, *batches, end=27, compacted=False)[1], 13, "needs a compacted local")
    # A local topic the sync creates takes the compacted source's policy.
    assert _census(10, *batches, end=27, compacted=None)[1] is None


def test_a_gap_is_refused_where_the_local_log_would_end() -> None:
    c, stop = _census(10, _data(10), _data(18), end=21, fill_holes=False)
    _refused_at(stop, 13, "compaction holes at offset 13 (offsets 13..17")
    assert (c.batches, c.end) == (1, 13)


def test_a_gap_at_the_ranges_start_is_a_hole_and_a_batch_below_it_is_skipped() -> None:
    # The batch straddling the start is already in the local log; 15..19 were cleaned away.
    c, _stop = _census(12, _data(10, 5), _data(20), end=23)
    assert (c.batches, c.holes_between, c.end) == (1, 5, 23)
    c, _stop = _census(10, _data(14), end=17)
    assert c.holes_between == 4


def test_committed_aborted_and_interleaved_transactions() -> None:
    batches = (
        _txn(0, pid=7),  # 0..1
        _txn(2, pid=8),  # 2..3: two open at once
        marker(COMMIT, offset=4, producer=(7, 0)),
        _data(5),  # 5..7, held while 8 is open
        marker(ABORT, offset=8, producer=(8, 0)),
        _data(9),  # 9..11
    )
    c, stop = _census(0, *batches, end=12)
    assert (c.committed, c.aborted, c.transactional_batches, c.most_open) == (1, 1, 2, 2)
    assert (c.open_at_end, c.end, stop) == ((), 12, None)
    _refused_at(_census(0, *batches, end=12, replay=False)[1], 0, "transactional batch 0..1")
    _refused_at(_census(0, *batches, end=12, slots=1)[1], 2, "more than 1 source transactions")


def test_more_transactions_open_than_slots_are_refused_where_one_too_many_begins() -> None:
    c, stop = _census(0, *(_txn(2 * n, pid=n + 1) for n in range(10)), end=20)
    _refused_at(stop, 16, "more than 8 source transactions are open at once at offset 16")
    assert (c.end, c.batches) == (0, 0)  # all of it held back


def test_a_transaction_with_nothing_left_but_its_marker_needs_a_free_slot_too() -> None:
    live = [_txn(2 * n, pid=n + 1) for n in range(8)]
    stop = _census(0, *live, marker(COMMIT, offset=16, producer=(99, 0)), end=17)[1]
    _refused_at(stop, 16, "more than 8 source transactions")


def test_a_transaction_without_its_marker_stops_a_replay_at_the_last_quiet_point() -> None:
    c, stop = _census(
        0,
        _data(0),
        _txn(3, pid=7),
        marker(COMMIT, offset=5, producer=(7, 0)),
        _txn(6, pid=9),
        _data(8),
        marker(COMMIT, offset=11, producer=(7, 0)),
        end=12,
    )
    # 7's transaction ended at 5; 9's from 6 is still open at the end: quiet at 6.
    assert stop is not None and (stop.offset, stop.refused) == (6, False), stop
    assert "producer 9 from offset 6" in stop.reason and "up to offset 6" in stop.reason
    assert (c.open_at_end, c.end, c.batches, c.committed) == ((9,), 6, 3, 1)


def _overlapping(pairs: int) -> list[Batch]:
    """Two exactly-once writers: each commits and at once begins its next transaction while
    the other's is open, so no offset has every transaction ended; the last of each open."""
    out: list[Batch] = [_txn(0, pid=1), _txn(2, pid=2)]
    at = 4
    for _ in range(pairs):
        for pid in (1, 2):
            out += [marker(COMMIT, offset=at, producer=(pid, 0)), _txn(at + 1, pid=pid)]
            at += 3
    return out


def test_streamed_transactions_are_copied_to_the_end_and_left_open() -> None:
    batches = _overlapping(40)
    end = batches[-1].next_offset
    # Held (a local that cannot resume): never a point where all have ended.
    c, stop = _census(0, *batches, end=end)
    assert stop is not None and (stop.offset, stop.refused, c.end, c.batches) == (0, False, 0, 0)
    # Streamed: everything, the newest transaction of each writer left open.
    c, stop = _census(0, *batches, end=end, hold=lambda b: False)
    assert (stop, c.end, c.batches, c.committed, c.open_at_end) == (None, end, 162, 80, (1, 2))
    # One old transaction still open in the source is held from its first batch on.
    last = batches[-1].base_offset  # producer 2's, never ended
    c, stop = _census(0, *batches, end=end, hold=lambda b: b.base_offset in (8, last))
    assert stop is not None and (stop.offset, stop.refused, c.end) == (last, False, last), stop
    assert f"producer 2 from offset {last}" in stop.reason  # 8's ended at 13: it went on


def test_counts_stop_where_a_replay_stops() -> None:
    """Hole records after an open transaction are held with it: a sync that stops at the
    held transaction before it fills none of them."""
    c, stop = _census(0, _txn(0, pid=3), _data(5), end=8)
    assert stop is not None and (stop.offset, stop.refused) == (0, False)
    assert (c.holes, c.batches, c.end) == (0, 0, 0)


def test_a_refusal_after_an_open_transaction_is_a_refusal_not_a_wait() -> None:
    stop = _census(0, _txn(0, pid=3), _data(5), end=8, fill_holes=False)[1]
    _refused_at(stop, 2, "compaction holes at offset 2")


def test_a_replay_holds_at_most_max_in_flight_bytes_of_open_transactions() -> None:
    size = _txn(0, pid=1).size
    # Its marker ends the transaction: never held beyond the limit.
    ok = _census(
        0, _txn(0, pid=1), marker(COMMIT, offset=2, producer=(1, 0)), end=3, max_held_bytes=size
    )
    assert ok[1] is None and ok[0].most_held_bytes > size
    # The first hold beyond it, named by the earliest transaction still open.
    batches = (
        _txn(0, pid=1),
        _txn(2, pid=2),
        marker(COMMIT, offset=4, producer=(1, 0)),
        _data(5, 40, value_size=400),
    )
    # Where every transaction is held (a local cluster that cannot resume one), no later run
    # gets past it either: refused, with the limit to raise.
    c, stop = _census(0, *batches, end=45, max_held_bytes=3 * size)
    _refused_at(stop, 2, "raise --max-in-flight-bytes")
    assert "producer 2 from offset 2" in stop.reason, stop  # type: ignore[union-attr]
    stop = _census(0, *batches, end=45, max_held_bytes=size - 1)[1]
    assert stop is not None and "producer 1 from offset 0" in stop.reason, stop
    # Where only transactions that may stay open longer are held, the sync stops before the
    # hold and is behind: once the source ends them, they are streamed.
    only_2 = {"hold": lambda b: b.producer_id == 2}
    c, stop = _census(0, *batches, end=45, max_held_bytes=size, **only_2)
    assert stop is not None and (stop.offset, stop.refused, c.end) == (2, False, 2), stop
    assert "--max-in-flight-bytes" in stop.reason and "producer 2 from offset 2" in stop.reason
    # Streamed transactions are never held.
    assert _census(0, *batches, end=45, max_held_bytes=size - 1, hold=lambda b: False)[1] is None


def test_an_empty_control_batch_is_refused_not_a_scan_error() -> None:
    empty = _compacted(bytes(marker(COMMIT, offset=10).data), {0})
    _c, stop = _census(10, empty, end=11)
    _refused_at(stop, 10, "holds 0 records for 1 offsets")


def test_a_mirror_started_at_the_sources_log_start() -> None:
    boot = FILL.__dict__ | {"bootstrap_at": 100, "compacted": False}
    # Fillers, not holes, lead up to the first batch.
    c, stop = _census(0, _data(105), end=108, **boot)
    assert (c.holes, c.batches, c.end, stop) == (0, 1, 108, None)
    # The batch holding the log start is copied whole, inside its transaction: a mirror of a
    # topic purged mid-transaction (Kafka Streams' repartition topics) starts, held or not.
    for hold in (None, lambda b: False):
        c, stop = _census(
            0,
            _txn(99, pid=4, n=3),
            marker(COMMIT, offset=102, producer=(4, 0)),
            end=103,
            **boot | {"hold": hold},
        )
        assert (c.batches, c.committed, c.end, stop) == (2, 1, 103, None)
    c, stop = _census(0, _data(99), _data(102), end=105, **boot)
    assert (c.batches, stop) == (2, None)
    # A compacted local topic cannot take the fillers.
    _refused_at(
        _census(0, _data(105), end=108, **boot | {"compacted": True})[1], 0, "filler records"
    )


def test_a_log_append_time_batch_is_where_a_sync_refuses() -> None:
    raw = bytearray(build(3, base_offset=3))
    raw[22] |= 0x08  # attributes (int16 at 21): timestamp type LogAppendTime
    _refused_at(_census(0, _data(0), parse(raw), end=6)[1], 3, "LogAppendTime")


def test_the_census_serializes_every_count() -> None:
    c, _stop = _census(0, _data(0), _txn(3, pid=7), marker(ABORT, offset=5, producer=(7, 0)), end=6)
    assert c.to_dict() == {
        "start": 0,
        "end": 6,
        "batches": 3,
        "bytes": c.bytes,
        "holes": 0,
        "holes_between_batches": 0,
        "holes_inside_batches": 0,
        "batches_with_holes": 0,
        "transactional_batches": 1,
        "committed": 0,
        "aborted": 1,
        "most_open_transactions": 1,
        "most_held_bytes": c.most_held_bytes,
        "open_at_end": [],
    }
