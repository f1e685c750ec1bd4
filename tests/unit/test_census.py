"""The census ``plan --scan`` takes of a range (plan.census): holes between and inside batches,
transactions and their markers, the last quiet point a replay stops at, and where a sync with
given options would refuse or wait."""

from __future__ import annotations

from typing import Any

from partsync.plan.census import Census, RangeCensus, ScanStop, scan_stop
from partsync.wire.batch import Batch
from partsync.wire.markers import ABORT, COMMIT
from tests.unit.test_batch import build, parse
from tests.unit.test_holes import _compacted
from tests.unit.test_markers import marker

FILL: dict[str, Any] = {"fill_holes": True, "replay": True, "compacted": True, "slots": 8,
                        "max_held_bytes": 1 << 26}  # fmt: skip


def _stop(c: RangeCensus, **options: Any) -> ScanStop | None:
    """Where a sync stops in ``c``: filling holes and replaying unless ``options`` say not."""
    return scan_stop(c, **{**FILL, **options})


def _data(base: int, n: int = 3, **kw: Any) -> Batch:
    return parse(build(n, base_offset=base, **kw))


def _txn(base: int, pid: int, n: int = 2) -> Batch:
    return _data(base, n, producer=(pid, 0, 0), transactional=True)


def _census(start: int, *batches: Batch, end: int | None = None) -> RangeCensus:
    return Census(start).add_all(batches).result(end)


def test_contiguous_batches_have_no_holes_and_are_quiet_to_the_end() -> None:
    c = _census(10, _data(10), _data(13), end=16)
    assert (c.batches, c.holes, c.first_hole, c.markers) == (2, 0, None, 0)
    assert (c.end, c.quiet_end, c.open_at_end) == (16, 16, ())
    assert c.bytes == sum(len(build(3)) for _ in range(2))
    assert _stop(c) is None
    assert _stop(c, fill_holes=False, replay=False) is None


def test_holes_between_and_inside_batches_and_an_empty_batch() -> None:
    thinned = _compacted(build(5, base_offset=13), {1, 3})  # 13..17 holding 13, 15, 17
    empty = _compacted(build(4, base_offset=20), {0, 1, 2, 3})  # 20..23 holding nothing
    c = _census(10, _data(10), thinned, empty, _data(24), end=27)
    # 18 and 19: a batch cleaned away; 14, 16: inside; 20..23: the empty batch.
    assert (c.holes_between, c.holes_inside, c.batches_with_holes) == (2, 6, 2)
    assert (c.holes, c.first_hole, c.batches) == (8, 13, 4)
    refused = _stop(c, fill_holes=False)
    assert refused is not None and (refused.offset, refused.refused) == (13, True)
    assert "compaction holes start there" in refused.reason
    assert _stop(c) is None
    local = _stop(c, compacted=False)
    assert local is not None and local.refused and "compacted local topic" in local.reason


def test_a_gap_at_the_ranges_start_is_a_hole_and_a_batch_below_it_is_skipped() -> None:
    # The batch straddling the start is already in the local log; 16..19 were cleaned away.
    c = _census(12, _data(10, 5), _data(20), end=23)
    assert (c.batches, c.holes_between, c.first_hole, c.end) == (1, 5, 15, 23)
    c = _census(10, _data(14), end=17)
    assert (c.holes_between, c.first_hole) == (4, 10)


def test_committed_aborted_and_interleaved_transactions() -> None:
    c = _census(
        0,
        _txn(0, pid=7),  # 0..1
        _txn(2, pid=8),  # 2..3: two open at once
        marker(COMMIT, offset=4, producer=(7, 0)),
        _data(5),  # 5..7, held while 8 is open
        marker(ABORT, offset=8, producer=(8, 0)),
        _data(9),  # 9..11
        end=12,
    )
    assert (c.committed, c.aborted, c.transactional_batches) == (1, 1, 2)
    assert (c.most_open, c.most_open_at, c.first_transactional) == (2, 2, 0)
    assert (c.open_at_end, c.quiet_end, c.end) == ((), 12, 12)
    assert _stop(c) is None
    refused = _stop(c, replay=False)
    assert refused is not None and (refused.offset, refused.refused) == (0, True)
    crowded = _stop(c, slots=1)
    assert crowded is not None and (crowded.offset, crowded.refused) == (2, True)


def test_a_transaction_without_its_marker_stops_a_replay_at_the_last_quiet_point() -> None:
    held = [_txn(6, pid=9), _data(8), marker(COMMIT, offset=11, producer=(7, 0))]
    c = _census(0, _data(0), _txn(3, pid=7), marker(COMMIT, offset=5, producer=(7, 0)), *held,
                end=12)  # fmt: skip
    # 7's transaction ended at 5; 9's from 6 is still open at the end: quiet at 6.
    assert (c.open_at_end, c.quiet_end, c.end) == ((9,), 6, 12)
    assert c.most_held_bytes == sum(b.size for b in held) and c.most_held_from == 6
    wait = _stop(c)
    assert wait is not None and (wait.offset, wait.refused) == (6, False)
    assert "producer ids 9" in wait.reason and "up to offset 6" in wait.reason
    big = _stop(c, max_held_bytes=100)
    assert big is not None and (big.offset, big.refused) == (6, True)
    assert "--max-in-flight-bytes" in big.reason


def test_a_hole_before_an_open_transaction_is_filled_at_once_and_the_quiet_point_follows() -> None:
    c = _census(0, _data(0), _txn(5, pid=3), end=7)
    assert (c.holes_between, c.quiet_end, c.open_at_end) == (2, 5, (3,))


def test_the_census_serializes_every_count() -> None:
    c = _census(0, _data(0), _txn(3, pid=7), marker(ABORT, offset=5, producer=(7, 0)), end=6)
    assert c.to_dict() == {
        "start": 0, "end": 6, "batches": 3, "bytes": c.bytes, "holes": 0,
        "holes_between_batches": 0, "holes_inside_batches": 0, "batches_with_holes": 0,
        "transactional_batches": 1, "committed": 0, "aborted": 1,
        "most_open_transactions": 1, "open_at_end": [], "quiet_end": 6,
        "most_held_bytes": c.most_held_bytes,
    }  # fmt: skip


def test_a_log_append_time_batch_is_where_a_sync_refuses() -> None:
    raw = bytearray(build(3, base_offset=3))
    raw[22] |= 0x08  # attributes (int16 at 21): timestamp type LogAppendTime
    c = _census(0, _data(0), parse(raw), end=6)
    stop = _stop(c)
    assert stop is not None and (stop.offset, stop.refused) == (3, True), stop
    assert "LogAppendTime" in stop.reason
