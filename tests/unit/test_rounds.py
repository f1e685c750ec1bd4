"""The step after each copy round (``plan.rounds.after_round``), as a table: the one decision
both the engine and a single partition's loop carry out."""

from __future__ import annotations

import pytest

from partsync.errors import ClusterError, HandedOnError, PartsyncError, UnsafeError
from partsync.plan.results import PartitionResult, Status
from partsync.plan.rounds import RoundsState, Step, after_round


def _result(
    status: Status,
    *,
    before: int = 100,
    after: int = 100,
    batches: int = 0,
    error: PartsyncError | None = None,
    wait_from: int | None = None,
) -> PartitionResult:
    return PartitionResult(
        "t", 0, status, before, after, 200, batches=batches, error=error, wait_from=wait_from
    )


_RETRIABLE = ClusterError("connection lost")
_FATAL = PartsyncError("the local topic refuses the batch")

# (case, result, state before, follow, stopped) -> (step, failures after, reset backoff, wait_from)
CASES = [
    (
        "one-shot caught up",
        _result(Status.SYNCED, after=200),
        RoundsState(),
        False,
        False,
        Step.DONE,
        0,
        True,
        None,
    ),
    (
        "one-shot in sync after failures",
        _result(Status.IN_SYNC),
        RoundsState(2, 100),
        False,
        False,
        Step.DONE,
        0,
        True,
        None,
    ),
    (
        "follow caught up waits at the local end",
        _result(Status.SYNCED, after=150),
        RoundsState(1, 90),
        True,
        False,
        Step.WAIT,
        0,
        True,
        150,
    ),
    (
        "follow waits past held batches",
        _result(Status.BEHIND, after=150, wait_from=170),
        RoundsState(),
        True,
        False,
        Step.WAIT,
        0,
        True,
        170,
    ),
    (
        "unsafe ends the rounds",
        _result(Status.UNSAFE, error=UnsafeError("diverged")),
        RoundsState(),
        True,
        False,
        Step.DONE,
        0,
        False,
        None,
    ),
    (
        "handed over ends the rounds",
        _result(Status.HANDED_OVER),
        RoundsState(),
        True,
        False,
        Step.DONE,
        0,
        False,
        None,
    ),
    (
        "a stop ends even a retriable failure",
        _result(Status.ERROR, error=_RETRIABLE),
        RoundsState(),
        True,
        True,
        Step.DONE,
        0,
        False,
        None,
    ),
    (
        "a stop ends a follower caught up",
        _result(Status.IN_SYNC),
        RoundsState(),
        True,
        True,
        Step.DONE,
        0,
        False,
        None,
    ),
    (
        "handed on: again at once, no failure spent",
        _result(Status.ERROR, before=120, error=HandedOnError("a transaction")),
        RoundsState(1, 100),
        False,
        False,
        Step.AGAIN,
        1,
        False,
        None,
    ),
    (
        "first retriable failure retried",
        _result(Status.ERROR, error=_RETRIABLE),
        RoundsState(),
        False,
        False,
        Step.RETRY,
        1,
        False,
        None,
    ),
    (
        "second retriable failure retried",
        _result(Status.ERROR, error=_RETRIABLE),
        RoundsState(1, 100),
        False,
        False,
        Step.RETRY,
        2,
        False,
        None,
    ),
    (
        "one-shot gives up after its retries",
        _result(Status.ERROR, error=_RETRIABLE),
        RoundsState(2, 100),
        False,
        False,
        Step.DONE,
        3,
        False,
        None,
    ),
    (
        "a follower never gives up on a retriable failure",
        _result(Status.ERROR, error=_RETRIABLE),
        RoundsState(50, 100),
        True,
        False,
        Step.RETRY,
        51,
        False,
        None,
    ),
    (
        "appends before the failure start a new count",
        _result(Status.ERROR, batches=3, after=130, error=_RETRIABLE),
        RoundsState(2, 100),
        False,
        False,
        Step.RETRY,
        1,
        True,
        None,
    ),
    (
        "a local log that moved since the last start is progress",
        _result(Status.ERROR, before=110, error=_RETRIABLE),
        RoundsState(2, 100),
        False,
        False,
        Step.RETRY,
        1,
        True,
        None,
    ),
    (
        "an older start (the driver's plan) is not progress",
        _result(Status.ERROR, before=90, error=_RETRIABLE),
        RoundsState(2, 100),
        False,
        False,
        Step.DONE,
        3,
        False,
        None,
    ),
    (
        "a failure that may not be retried ends at once",
        _result(Status.ERROR, error=_FATAL),
        RoundsState(),
        True,
        False,
        Step.DONE,
        1,
        False,
        None,
    ),
]


@pytest.mark.parametrize(
    ("case", "result", "state", "follow", "stopped", "step", "failures", "reset", "wait_from"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_after_round(
    case: str,
    result: PartitionResult,
    state: RoundsState,
    follow: bool,
    stopped: bool,
    step: Step,
    failures: int,
    reset: bool,
    wait_from: int | None,
) -> None:
    d = after_round(result, state, follow=follow, retries=2, stopped=stopped)
    assert (d.step, d.state.failures, d.reset_backoff, d.wait_from) == (
        step,
        failures,
        reset,
        wait_from,
    ), case


def test_the_furthest_start_is_remembered() -> None:
    """A failed round that started before the furthest start seen (the driver's older plan)
    does not pull it back, so the next round is measured against the furthest."""
    d = after_round(
        _result(Status.ERROR, before=90, error=_RETRIABLE),
        RoundsState(0, 120),
        follow=True,
        retries=2,
        stopped=False,
    )
    assert d.state.last_start == 120
    d = after_round(
        _result(Status.ERROR, before=130, error=_RETRIABLE),
        d.state,
        follow=True,
        retries=2,
        stopped=False,
    )
    assert (d.state.last_start, d.state.failures, d.reset_backoff) == (130, 1, True)
