"""Tables at a narrow terminal and in a pipe (issue 16): a narrow terminal wraps cells between
words and never splits a number or a range; a pipe or a file gets every line whole."""

from __future__ import annotations

import io
import re

from rich.console import Console

from partsync.plan.comparator import Bounds, PlanPolicy, plan_partition
from partsync.run.planner import TopicPlan
from partsync.ui.render import WordTable, plan_table, print_table


def _plans() -> list[TopicPlan]:
    sources = {"dc2-frankfurt": Bounds(0, 18_933_000), "dc3-paris": Bounds(0, 18_933_000)}
    policy = PlanPolicy(chunk_offsets=5_000_000)
    parts = tuple(
        plan_partition("orders.eu-central", p, Bounds(0, 8933), sources, policy) for p in range(3)
    )
    return [TopicPlan("orders.eu-central", parts)]


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\.\d+)?", text))


def test_a_narrow_terminal_never_splits_a_number_or_a_range() -> None:
    wide = Console(file=io.StringIO(), width=400, color_system=None)
    wide.print(plan_table(_plans()))
    want = _numbers(wide.file.getvalue())  # type: ignore[attr-defined]
    assert {"0..18933000", "0..8933", "8933..5008933"} <= want
    for width in (80, 60):  # as a table at 80 columns, as records at 60
        narrow = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=True)
        print_table(plan_table(_plans()), narrow)
        text = narrow.file.getvalue()  # type: ignore[attr-defined]
        assert max(len(line) for line in text.splitlines()) <= width
        assert want <= _numbers(text), width  # every number and range, whole
        assert "…" not in text


def test_a_pipe_gets_every_line_whole() -> None:
    table = WordTable("name", "detail")
    table.add_row("a", "x" * 150 + " " + "y" * 30)
    out = io.StringIO()
    print_table(table, Console(file=out, width=80))  # not a terminal
    assert "x" * 150 + " " + "y" * 30 in out.getvalue()
    assert "\x1b[" not in out.getvalue()  # and no colour codes
