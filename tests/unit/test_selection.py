"""Partition selection specs (``--partitions 0,3-5``) and checking them against a topic."""

from __future__ import annotations

import pytest

from partsync.errors import ExitStatus, UsageError
from partsync.plan.selection import parse_partitions, select


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("0", {0}),
        ("0,3-5", {0, 3, 4, 5}),
        ("3-5,0", {0, 3, 4, 5}),
        ("1-1", {1}),
        (" 2 , 7 ", {2, 7}),
        ("1 - 3", {1, 2, 3}),
        ("1,1,1-2", {1, 2}),  # overlaps collapse
        ("1,,2", {1, 2}),  # empty items are skipped
        ("0-9", set(range(10))),
    ],
)
def test_parse(spec: str, expected: set[int]) -> None:
    assert parse_partitions(spec) == frozenset(expected)


def test_none_means_all() -> None:
    assert parse_partitions(None) is None


@pytest.mark.parametrize("spec", ["a", "1,a", "1-b", "3-", "-3", "-1", "1-2-3", "0x1", "1.5"])
def test_not_a_number_or_range(spec: str) -> None:
    with pytest.raises(UsageError, match="is not N or N-M") as exc:
        parse_partitions(spec)
    assert repr(spec) in str(exc.value)
    assert exc.value.exit_status is ExitStatus.USAGE


@pytest.mark.parametrize("spec,item", [("5-3", "5-3"), ("0,9-8", "9-8")])
def test_descending_range(spec: str, item: str) -> None:
    with pytest.raises(UsageError, match="not an ascending range") as exc:
        parse_partitions(spec)
    assert repr(item) in str(exc.value)


@pytest.mark.parametrize("spec", [",", " , ,"])
def test_only_separators(spec: str) -> None:
    with pytest.raises(UsageError, match="no partitions"):
        parse_partitions(spec)


@pytest.mark.parametrize("spec", ["", "   "])
def test_explicit_empty_spec_is_an_error(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_partitions(spec)


def test_select_all() -> None:
    assert select(4, None, topic="t") == [0, 1, 2, 3]
    assert select(0, None, topic="t") == []


def test_select_sorted_subset() -> None:
    assert select(8, frozenset({5, 0, 3}), topic="t") == [0, 3, 5]
    assert select(8, frozenset({7}), topic="t") == [7]


def test_select_refuses_out_of_range_partitions() -> None:
    with pytest.raises(UsageError) as exc:
        select(4, frozenset({1, 4, 9}), topic="orders")
    msg = str(exc.value)
    assert "topic orders has 4 partitions" in msg
    assert "4, 9" in msg
    assert "1" not in msg.split("partition(s)")[1]  # only the missing ones are listed


def test_select_on_topic_without_partitions() -> None:
    with pytest.raises(UsageError, match="selected partition"):
        select(0, frozenset({0}), topic="t")
