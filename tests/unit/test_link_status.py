"""A link's state per topic (``partsync.plan.link_status``) and a follower's view of it
(``partsync.ui.topic_metrics.live_topics``), as tables."""

from __future__ import annotations

import pytest

from partsync.errors import ExitStatus
from partsync.plan.link_status import (
    PartitionLag,
    TopicState,
    TopicStatus,
    lag_seconds,
    status_exit,
    topic_state,
)
from partsync.ui.topic_metrics import live_topics

S = TopicState


@pytest.mark.parametrize(
    ("conditions", "gone", "failed", "followed", "expected"),
    [
        (["in-sync", "in-sync"], False, False, None, S.CAUGHT_UP),
        (["in-sync", "in-sync"], False, False, False, S.CAUGHT_UP),  # nothing to copy
        (["in-sync", "behind"], False, False, None, S.MIRRORING),
        (["in-sync", "behind"], False, False, True, S.MIRRORING),
        (["in-sync", "behind"], False, False, False, S.PAUSED),
        (["behind", "unsafe"], False, False, True, S.FAILED),
        (["behind", "unknown"], False, False, True, S.FAILED),  # a source did not answer
        (["in-sync"], False, True, True, S.FAILED),
        ([], False, False, True, S.FAILED),  # no partition planned
        (["in-sync"], True, False, True, S.SOURCE_GONE),
    ],
)
def test_topic_state(
    conditions: list[str], gone: bool, failed: bool, followed: bool | None, expected: TopicState
) -> None:
    assert topic_state(conditions, gone=gone, failed=failed, followed=followed) is expected


@pytest.mark.parametrize(
    ("source_ms", "mirror_ms", "lag", "expected"),
    [
        (10_000, 4_000, 3, 6.0),
        (10_000, 4_000, 0, 0.0),  # caught up: whatever the stamps say
        (None, 4_000, 0, 0.0),
        (None, 4_000, 3, None),  # no data batch found at the source's end
        (10_000, None, 3, None),  # an empty mirror
        (4_000, 10_000, 3, 0.0),  # stamps out of order (CreateTime): never negative
    ],
)
def test_lag_seconds(
    source_ms: int | None, mirror_ms: int | None, lag: int, expected: float | None
) -> None:
    assert lag_seconds(source_ms, mirror_ms, lag) == expected


def _t(state: TopicState, *conds: str, refused: bool = False) -> TopicStatus:
    parts = tuple(PartitionLag(i, c, 0, 0.0) for i, c in enumerate(conds))
    return TopicStatus("t", state, parts, refused=refused)


@pytest.mark.parametrize(
    ("topics", "code"),
    [
        ([_t(S.CAUGHT_UP, "in-sync"), _t(S.MIRRORING, "behind")], ExitStatus.OK),
        ([_t(S.PAUSED, "behind"), _t(S.CAUGHT_UP, "in-sync")], ExitStatus.DEADLINE),
        ([_t(S.PAUSED, "behind"), _t(S.SOURCE_GONE)], ExitStatus.SOURCE_GONE),
        ([_t(S.SOURCE_GONE), _t(S.FAILED, "unknown")], ExitStatus.FAILURE),
        ([_t(S.FAILED, "unknown"), _t(S.FAILED, "unsafe")], ExitStatus.UNSAFE),
        ([_t(S.FAILED, refused=True)], ExitStatus.UNSAFE),
        ([_t(S.FAILED)], ExitStatus.FAILURE),
        ([], ExitStatus.OK),
        ([_t(S.PROMOTED), _t(S.CAUGHT_UP, "in-sync")], ExitStatus.OK),  # failed over, as asked
    ],
)
def test_status_exit(topics: list[TopicStatus], code: ExitStatus) -> None:
    assert status_exit(topics) is code


def test_topic_lag_is_summed_in_records_and_the_largest_in_seconds() -> None:
    parts = (PartitionLag(0, "behind", 5, 2.5), PartitionLag(1, "behind", 7, 9.0))
    t = TopicStatus("t", S.MIRRORING, parts)
    assert (t.lag_records, t.lag_seconds) == (12, 9.0)
    unknown = TopicStatus("t", S.MIRRORING, (*parts, PartitionLag(2, "behind", 1, None)))
    assert unknown.lag_seconds is None
    assert TopicStatus("t", S.CAUGHT_UP, ()).lag_seconds == 0.0


def test_a_followers_topics_come_from_its_partitions() -> None:
    status = {
        ("a", 0): "synced",
        ("a", 1): "in-sync",
        ("b", 0): "synced",
        ("b", 1): "handed-over",  # another process's now: not counted
        ("c", 0): "unsafe",
        ("d", 0): "source-gone",
    }
    lag = {("a", 0): 0, ("a", 1): 0, ("b", 0): 4, ("c", 0): 0}
    got = {t.topic: (t.state, t.lag_records, t.lag_seconds) for t in live_topics(status, lag, {})}
    assert got == {
        "a": (S.CAUGHT_UP, 0, 0.0),
        "b": (S.MIRRORING, 4, None),  # moved on since its last round, no stamp seen yet
        "c": (S.FAILED, 0, 0.0),
        "d": (S.SOURCE_GONE, 0, 0.0),
    }
