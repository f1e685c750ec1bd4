"""Reading bounds waits out a leader election (``BoundsReader.bounds``): an election answer is read
again with fresh metadata until it passes or the wait ends; any other error at once."""

from __future__ import annotations

from typing import Any

import pytest

from partsync._kafka import ErrorCode, error_name
from partsync.config import ClusterRef
from partsync.errors import BrokerError
from partsync.io import bounds as bounds_module
from partsync.io.cluster import Cluster
from partsync.plan.comparator import Bounds


def _error(code: ErrorCode) -> BrokerError:
    return BrokerError(
        "listing the log start offset",
        error_code=code,
        error_name=error_name(code),
        retriable=True,
        cluster="src",
    )


@pytest.fixture
def stand(monkeypatch: pytest.MonkeyPatch) -> tuple[Cluster, list[Any], list[bool]]:
    c = Cluster(ClusterRef("src", (("127.0.0.1", 9),)))  # never connects
    answers: list[Any] = []
    refreshed: list[bool] = []

    def read_bounds(_c: object, _m: object, _t: str, _p: list[int]) -> dict[int, Bounds]:
        a = answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return dict(a)

    monkeypatch.setattr(bounds_module, "read_bounds", read_bounds)
    monkeypatch.setattr(c.meta, "metadata", lambda refresh=False: refreshed.append(refresh))
    return c, answers, refreshed


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
    ],
)
def test_an_election_is_waited_out_with_fresh_metadata(
    stand: tuple[Cluster, list[Any], list[bool]], code: ErrorCode
) -> None:
    c, answers, refreshed = stand
    answers += [_error(code), _error(code), {0: Bounds(0, 7)}]
    assert c.bounds("t", [0]) == {0: Bounds(0, 7)}
    assert refreshed == [True, True] and not answers


def test_other_errors_and_a_long_election_are_raised(
    stand: tuple[Cluster, list[Any], list[bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, answers, refreshed = stand
    answers.append(_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(BrokerError, match="TOPIC_AUTHORIZATION_FAILED"):
        c.bounds("t", [0])
    assert refreshed == []
    monkeypatch.setattr(bounds_module, "BOUNDS_ELECTION_WAIT_S", 0.3)
    answers += [_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)] * 50
    with pytest.raises(BrokerError, match="NOT_LEADER_OR_FOLLOWER"):
        c.bounds("t", [0])
    assert 1 <= len(refreshed) < 10


def test_a_partition_without_a_leader_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    c = Cluster(ClusterRef("src", (("127.0.0.1", 9),)))  # never connects
    calls: list[bool] = []
    info: Any = object()

    def now(_name: str, refresh: bool) -> Any:
        calls.append(refresh)
        if len(calls) < 3:
            raise _error(ErrorCode.LEADER_NOT_AVAILABLE)
        return info

    monkeypatch.setattr(c.meta, "_topic_now", now)
    assert c.topic("t") is info
    assert calls == [False, True, True]
