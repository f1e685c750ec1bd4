"""One exception hierarchy: structured fields survive pickling (Spark ships results carrying
their error back to the driver), and results expose the error object, not a class name."""

from __future__ import annotations

import pickle

import pytest

from partsync.errors import (
    BrokerError,
    Cancelled,
    ClusterError,
    DivergenceError,
    ExitStatus,
    GroupError,
    PartsyncError,
    StoppedError,
    UnsafeError,
)
from partsync.plan.results import PartitionResult, Status


@pytest.mark.parametrize(
    "err",
    [
        BrokerError(
            "append failed",
            error_code=7,
            error_name="REQUEST_TIMED_OUT",
            retriable=True,
            cluster="dc1",
            topic="t",
            partition=3,
            offset=42,
        ),
        DivergenceError("histories differ", cluster="dc2", topic="t", partition=0, offset=9),
        StoppedError("stopped on request", offset=100),
        GroupError("no assignment", cluster="dc1"),
    ],
)
def test_errors_pickle_with_their_fields(err: PartsyncError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.to_dict() == err.to_dict()
    assert back.exit_status is err.exit_status


def test_every_error_is_a_partsync_error_with_the_right_exit_status() -> None:
    for cls in (Cancelled, GroupError, StoppedError, ClusterError):
        assert issubclass(cls, PartsyncError)
    assert UnsafeError("x").exit_status is ExitStatus.UNSAFE
    assert DivergenceError("x").exit_status is ExitStatus.UNSAFE
    assert ClusterError("x").retriable and not UnsafeError("x").retriable


def test_results_carry_the_error_object_and_derive_retriable() -> None:
    base = PartitionResult("t", 0, Status.IN_SYNC, 0, 0, 10)
    timed_out = BrokerError("append", error_code=7, error_name="REQUEST_TIMED_OUT", retriable=True)
    r = base.with_status(Status.ERROR, str(timed_out), timed_out)
    assert r.error is timed_out and r.retriable
    assert not base.with_status(Status.ERROR, "x", UnsafeError("x")).retriable
    assert not base.with_status(Status.UNSAFE, "x", ClusterError("x")).retriable
    back = pickle.loads(pickle.dumps(r))
    assert isinstance(back.error, BrokerError) and back.retriable
    assert "error" not in r.to_dict()  # the JSON contract is unchanged
