"""The promotion record and failover point (``partsync.plan.promotion``) as tables."""

from __future__ import annotations

import pytest

from partsync.plan.promotion import FailoverPoint, Promotion, at_risk


@pytest.mark.parametrize(
    ("local_end", "answered", "last_seen", "unseen", "expected"),
    [
        (100, {"a": 100}, {}, 0, 0),  # caught up from the only source
        (100, {"a": 100, "b": 100}, {}, 0, 0),
        (100, {"a": 100}, {"b": 130}, 0, 30),  # b was 30 ahead when last seen, then went dark
        (100, {"a": 104}, {"b": 99}, 0, 4),  # the catch-up did not reach a's end
        (100, {}, {"a": 120, "b": 125}, 0, 25),
        (100, {"a": 100}, {}, 1, None),  # a source that never had its end recorded: unknown
        (100, {}, {}, 0, 0),
    ],
)
def test_at_risk(
    local_end: int,
    answered: dict[str, int],
    last_seen: dict[str, int],
    unseen: int,
    expected: int | None,
) -> None:
    assert at_risk(local_end, answered, last_seen, unseen) == expected


def test_a_promotion_record_round_trips_and_sums_its_risk() -> None:
    p = Promotion(
        "orders",
        "dc1",
        1_700_000_000_000,
        "link-a-b",
        (
            FailoverPoint(0, 100, {"a": 100, "b": None}, {"b": 130}, 30, 0),
            FailoverPoint(1, 50, {"a": 50, "b": None}, {"b": 50}, 0, 3),
        ),
    )
    again = Promotion.from_json(p.to_json())
    assert again == p
    assert again.at_risk == 30
    assert again.to_dict()["partitions"][1] == {  # type: ignore[index]
        "partition": 1,
        "local_end": 50,
        "sources": {"a": 50, "b": None},
        "last_seen": {"b": 50},
        "at_risk": 0,
        "aborted": 3,
    }
    unknown = Promotion("t", "dc1", 0, None, (FailoverPoint(0, 1, {"a": None}, {}, None),))
    assert unknown.at_risk is None


def test_the_refusal_says_when_where_and_what_to_do() -> None:
    msg = Promotion("orders", "dc1", 1_700_000_000_000).refusal()
    assert "topic orders was promoted on dc1 at 2023-11-14T22:13:20Z" in msg
    assert "nothing more is mirrored into it" in msg and "partsync.promotions" in msg


@pytest.mark.parametrize("data", [b"", b"{}", b'{"topic": "t"}', b"[1]", b"not json"])
def test_a_value_partsync_did_not_write_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a promotion record"):
        Promotion.from_json(data)
