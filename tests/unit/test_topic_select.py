"""Which topics --topic, --topic-pattern and --exclude select (``plan.topic_select``)."""

from __future__ import annotations

import re

import pytest

from partsync.errors import TopicError, UsageError
from partsync.plan.topic_select import (
    PARTSYNC_RECORDS,
    TopicSelection,
    appeared,
    compile_patterns,
    lost_by,
    select_topics,
)

ON = {"a": ["orders", "orders.dlq", "payments", "__consumer_offsets"], "b": ["orders-eu", "x"]}


def _sel(named: tuple[str, ...] = (), pats: tuple[str, ...] = (), excl: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return TopicSelection(named, tuple(map(re.compile, pats)), tuple(map(re.compile, excl)))


def test_patterns_match_whole_names_on_any_source_after_the_named_ones() -> None:
    assert select_topics(_sel(("x",), ("orders.*",)), ON) == [
        "x",
        "orders",
        "orders-eu",
        "orders.dlq",
    ]
    assert select_topics(_sel(pats=("order",)), {"a": ["orders"], "b": ["order"]}) == ["order"]


def test_exclusions_apply_to_matches_and_named_topics() -> None:
    assert select_topics(_sel(("payments",), ("orders.*",), (r".*\.dlq", "pay.*")), ON) == [
        "orders",
        "orders-eu",
    ]


def test_partsyncs_own_records_are_never_matched_by_a_pattern() -> None:
    on = {"a": ["orders", "partsync.promotions", "partsync.acls", "partsync.source-ends"]}
    assert select_topics(_sel(pats=(".*",)), on) == ["orders"]
    assert select_topics(_sel(pats=("partsync\\..*",), named=("orders",)), on) == ["orders"]
    # A configured ACL record topic ([acls] record_topic) is partsync's own too.
    own = PARTSYNC_RECORDS | {"ops.acl-record"}
    assert select_topics(_sel(pats=(".*",)), {"a": ["orders", "ops.acl-record"]}, own) == ["orders"]
    assert appeared(_sel(pats=(".*",)), {"a": ["ops.acl-record", "new"]}, {"orders"}, own) == [
        "new"
    ]


def test_internal_topics_only_when_named() -> None:
    assert "__consumer_offsets" not in select_topics(_sel(pats=(".*",)), ON)
    assert select_topics(_sel(("__consumer_offsets",), (".*",), (".*s$",)), ON) == [
        "orders-eu",
        "orders.dlq",
        "x",
    ]


def test_nothing_selected_is_an_error_naming_the_sources_and_patterns() -> None:
    with pytest.raises(TopicError, match=r"no topic on a, b matches --topic-pattern 'nope.*'"):
        select_topics(_sel(pats=("nope.*",)), ON)
    with pytest.raises(TopicError, match=r"once --exclude '.\*' is applied"):
        select_topics(_sel(pats=("orders",), excl=(".*",)), ON)
    with pytest.raises(TopicError, match="every --topic is excluded"):
        select_topics(_sel(("orders",), excl=("ord.*",)), {})


def test_a_bad_expression_is_a_usage_error_naming_the_option() -> None:
    with pytest.raises(UsageError, match=r"--exclude '\[x' is not a regular expression"):
        compile_patterns(["ok", "[x"], "--exclude")


def test_the_selection_as_given_names_the_job() -> None:
    # Runs that resolve the same patterns to different topics still meet in one group.
    from partsync.config import ClusterRef
    from partsync.run.planner import SyncRequest

    ref = ClusterRef("l", (("h", 1),))
    one = SyncRequest(("a",), (ref,), ref, selection=_sel(pats=("o.*",), excl=("x",)))
    two = SyncRequest(("a", "b"), (ref,), ref, selection=_sel(pats=("o.*",), excl=("x",)))
    assert one.job_topics == two.job_topics == ("/o.*/,-/x/",)
    assert SyncRequest(("a", "b"), (ref,), ref).job_topics == ("a", "b")


@pytest.mark.parametrize(
    ("sel", "on", "known", "want"),
    [
        # A topic that matches and is new to the job; the known ones are not adopted again.
        (_sel(pats=("orders.*",)), ON, {"orders", "orders.dlq"}, ["orders-eu"]),
        # Excluded and internal topics stay out.
        (_sel(pats=(".*",), excl=("x",)), ON, {"orders"}, ["orders-eu", "orders.dlq", "payments"]),
        # Named topics only: nothing is adopted, whatever appears.
        (_sel(("orders",)), ON, {"orders"}, []),
        # Nothing matches (yet), or no source listed its topics: nothing, not an error.
        (_sel(pats=("nope",)), ON, set(), []),
        (_sel(pats=(".*",)), {}, set(), []),
        # A topic refused or gone earlier is known: not adopted again.
        (_sel(pats=("x",)), ON, {"x"}, []),
    ],
)
def test_a_follower_adopts_topics_that_appear_and_match(sel, on, known, want) -> None:  # type: ignore[no-untyped-def]
    assert appeared(sel, on, known) == want


@pytest.mark.parametrize(
    ("holders", "have", "answered", "want"),
    [
        # Still on its only source.
        ({"a"}, {"a"}, {"a"}, ((), False)),
        # Deleted on its only source.
        ({"a"}, set(), {"a"}, (("a",), True)),
        # Deleted on one of two: mirrored from the other, not gone.
        ({"a", "b"}, {"b"}, {"a", "b"}, (("a",), False)),
        # Deleted on both.
        ({"a", "b"}, set(), {"a", "b"}, (("a", "b"), True)),
        # Gone from a, b did not answer: b may still have it.
        ({"a", "b"}, set(), {"a"}, (("a",), False)),
        # A source that answered but never had the topic lost nothing.
        ({"b"}, set(), {"a"}, ((), False)),
        # Never seen on any source (no topic ids yet): nothing to say.
        (set(), set(), {"a", "b"}, ((), False)),
    ],
)
def test_a_topic_is_gone_only_once_every_source_that_had_it_answered_without_it(
    holders: set[str], have: set[str], answered: set[str], want: tuple[tuple[str, ...], bool]
) -> None:
    assert lost_by(holders, have, answered) == want
