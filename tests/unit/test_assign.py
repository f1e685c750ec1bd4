"""The group's assignment: pure, deterministic, balanced, never two owners for a partition."""

from __future__ import annotations

import pytest

from partsync.plan.assign import (
    Subscription,
    assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    grown,
)


def _subs(**topics: tuple[str, ...]) -> dict[str, Subscription]:
    return {m: Subscription(t) for m, t in topics.items()}


def test_every_partition_has_exactly_one_owner_and_shares_differ_by_at_most_one() -> None:
    members = _subs(m1=("t",), m2=("t",), m3=("t",))
    out = assign(members, {"t": 8})
    owned = sorted(p for parts in out.values() for p in parts)
    assert owned == [("t", p) for p in range(8)]
    sizes = sorted(len(v) for v in out.values())
    assert sizes == [2, 3, 3]


def test_same_inputs_same_answer_whatever_the_member_order() -> None:
    a = assign(_subs(x=("t", "u"), y=("t", "u")), {"t": 3, "u": 2})
    b = assign(dict(reversed(list(_subs(x=("t", "u"), y=("t", "u")).items()))), {"u": 2, "t": 3})
    assert a == b


def test_a_topic_goes_only_to_members_subscribed_to_it() -> None:
    out = assign(_subs(m1=("t",), m2=("t", "u")), {"t": 2, "u": 3})
    assert out["m1"] == [("t", 0)]
    assert sorted(out["m2"]) == [("t", 1), ("u", 0), ("u", 1), ("u", 2)]


def test_topics_nobody_subscribes_to_or_unknown_locally_are_left_alone() -> None:
    out = assign(_subs(m1=("t", "missing")), {"t": 1, "other": 4})
    assert out == {"m1": [("t", 0)]}


def test_more_members_than_partitions_leaves_some_idle() -> None:
    out = assign(_subs(a=("t",), b=("t",), c=("t",)), {"t": 2})
    assert sorted(len(v) for v in out.values()) == [0, 1, 1]


def test_golden_encodings_round_trip() -> None:
    sub = Subscription(("orders", "audit"), "host:42")
    assert encode_subscription(sub) == b'{"v":1,"topics":["audit","orders"],"client":"host:42"}'
    assert decode_subscription(encode_subscription(sub)) == Subscription(
        ("audit", "orders"), "host:42"
    )
    data = encode_assignment([("orders", 2), ("audit", 0), ("orders", 0)])
    assert data == b'{"v":1,"partitions":{"audit":[0],"orders":[0,2]}}'
    assert decode_assignment(data) == [("audit", 0), ("orders", 0), ("orders", 2)]
    assert decode_assignment(b"") == []


def test_a_subscription_names_the_partition_counts_a_member_grew_its_topics_to() -> None:
    """A member that grew a topic rejoins with a different subscription, which is what makes
    the coordinator rebalance (unchanged metadata gets the old assignment back)."""
    sub = Subscription(("orders",), "host:42", (("orders", 8),))
    data = encode_subscription(sub)
    assert data == b'{"v":1,"topics":["orders"],"client":"host:42","partitions":{"orders":8}}'
    assert data != encode_subscription(Subscription(("orders",), "host:42"))
    assert decode_subscription(data) == sub


@pytest.mark.parametrize("junk", [b"\x00\x01", b"{}", b'{"v":1,"partitions":[1]}'])
def test_foreign_bytes_are_refused_clearly(junk: bytes) -> None:
    with pytest.raises(ValueError, match="not a partsync group"):
        decode_assignment(junk) if b"partitions" in junk else decode_subscription(junk)


def test_a_subscription_grows_and_takes_in_a_topic_that_joins_the_job() -> None:
    sub = Subscription(("a",), "h:1", (("a", 4),))
    assert grown(sub, {"a": 6}) == Subscription(("a",), "h:1", (("a", 6),))
    # A follower's topic planned only later joins the subscription with its count.
    assert grown(sub, {"b": 2}) == Subscription(("a", "b"), "h:1", (("a", 4), ("b", 2)))
