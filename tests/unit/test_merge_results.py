"""One result for a partition copied in several rounds (the runner merges each round's result)."""

from __future__ import annotations

from partsync.errors import ClusterError, StoppedError
from partsync.plan.results import PartitionResult, Status
from partsync.run.task import merge_results


def _round(
    status: Status, before: int, after: int, batches: int = 0, **kw: object
) -> PartitionResult:
    nbytes = batches * 100
    by_source = {"a": nbytes} if batches else {}
    return PartitionResult(
        "t",
        0,
        status,
        before,
        after,
        1500,
        batches=batches,
        bytes=nbytes,
        bytes_by_source=by_source,
        batches_by_source={"a": batches} if batches else {},
        **kw,
    )  # type: ignore[arg-type]


def test_counts_add_up_and_the_run_starts_where_the_first_round_did() -> None:
    failed = _round(Status.ERROR, 0, 700, 7, reason="lost", error=ClusterError("lost"))
    done = _round(Status.SYNCED, 700, 1500, 8)
    m = merge_results(failed, done)
    assert (m.status, m.local_end_before, m.local_end_after) == (Status.SYNCED, 0, 1500)
    assert (m.batches, m.bytes, m.bytes_by_source, m.batches_by_source) == (
        15,
        1500,
        {"a": 1500},
        {"a": 15},
    )


def test_a_last_round_in_sync_after_own_appends_is_synced() -> None:
    failed = _round(Status.ERROR, 0, 1500, 15, reason="lost", error=ClusterError("lost"))
    m = merge_results(failed, _round(Status.IN_SYNC, 1500, 1500))
    assert (m.status, m.reason, m.local_end_before) == (Status.SYNCED, None, 0)


def test_another_writer_brought_it_in_sync_is_a_hand_over_not_in_sync() -> None:
    stopped = _round(Status.HANDED_OVER, 0, 0, reason="ownership moved")
    m = merge_results(stopped, _round(Status.IN_SYNC, 1500, 1500))
    assert m.status is Status.HANDED_OVER and "another writer" in (m.reason or "")
    assert "from offset 0 to 1500" in (m.reason or "")
    assert (m.local_end_before, m.local_end_after, m.batches) == (0, 0, 0)


def test_what_this_process_wrote_is_its_span_when_another_writer_finished_it() -> None:
    """It wrote 0..855, handed over, and later found the partition complete: it reports
    0..855 as its own, not 0..1500 (another member wrote 855..1500)."""
    mine = _round(Status.HANDED_OVER, 0, 855, 9, reason="ownership moved")
    m = merge_results(mine, _round(Status.IN_SYNC, 1500, 1500))
    assert m.status is Status.HANDED_OVER
    assert (m.local_end_before, m.local_end_after, m.batches) == (0, 855, 9)
    assert "from offset 855 to 1500" in (m.reason or "")


def test_nothing_moved_stays_in_sync_and_errors_stay_errors() -> None:
    assert merge_results(_round(Status.IN_SYNC, 5, 5), _round(Status.IN_SYNC, 5, 5)).status is (
        Status.IN_SYNC
    )
    stop = StoppedError("stopped")
    m = merge_results(
        _round(Status.SYNCED, 0, 10, 1),
        _round(Status.ERROR, 10, 12, 1, reason="stopped", error=stop),
    )
    assert m.status is Status.ERROR and m.error is stop and m.batches == 2


def test_an_unanswered_append_that_landed_is_this_processs_own() -> None:
    """A connection was cut with the append of 1400..1500 unanswered; it had landed, so the
    next round found the partition in sync at 1500: synced, not handed over."""
    cut = _round(
        Status.ERROR, 0, 1400, 14, reason="lost", error=ClusterError("lost"), unconfirmed_end=1500
    )
    m = merge_results(cut, _round(Status.IN_SYNC, 1500, 1500))
    assert (m.status, m.reason) == (Status.SYNCED, None)
    assert (m.local_end_before, m.local_end_after) == (0, 1500)
    # The log moved further than that append would have: another writer, as before.
    other = merge_results(cut, _round(Status.IN_SYNC, 1600, 1600))
    assert other.status is Status.HANDED_OVER and other.local_end_after == 1400


def test_a_first_append_whose_answer_was_lost_is_synced_not_in_sync() -> None:
    """The partition's only append (0..3) landed but its answer was cut: no batch was counted,
    yet the run moved the log from 0 to 3 itself; in sync would claim nothing moved."""
    cut = _round(Status.ERROR, 0, 0, reason="lost", error=ClusterError("lost"), unconfirmed_end=3)
    m = merge_results(cut, _round(Status.IN_SYNC, 3, 3))
    assert (m.status, m.local_end_before, m.local_end_after) == (Status.SYNCED, 0, 3)
