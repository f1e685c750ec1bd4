"""docs/cli.md and the CLI agree: every option of every command is in its section, and the
JSON keys `diff` and `check` print are the ones documented. A flag or key added without its
documentation fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest

from partsync.plan.comparator import Bounds
from partsync.plan.diff_model import DiffReport, DiffStatus, Level, PartitionDiff, TopicDiff
from partsync.plan.preflight import CheckReport, ClusterCheck, Finding, Verdict
from partsync.ui.cli import cli

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def _section(command: str) -> str:
    parts = re.split(r"^## ", DOC, flags=re.MULTILINE)
    (text,) = [p for p in parts if p.startswith(f"partsync {command}\n")]
    return text


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_option_is_documented_in_its_command_section(name: str) -> None:
    text = _section(name)
    missing = sorted(
        o
        for o in _options(cli.commands[name]) - {"--help", "--config"}
        if not re.search(re.escape(o) + r"(?![\w-])", text)
    )
    assert not missing, f"docs/cli.md, partsync {name}: {missing}"


def test_top_level_options_are_documented() -> None:
    head = re.split(r"^## ", DOC, flags=re.MULTILINE)[0]
    assert not sorted(o for o in _options(cli) - {"--help"} if o not in head)


def _keys(doc: Any) -> set[str]:
    """Every key of a JSON document, nested ones too, except cluster names (data)."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k not in ("dc1", "dc2"):
                out.add(k)
            out |= _keys(v)
    elif isinstance(doc, list):
        for v in doc:
            out |= _keys(v)
    return out


def _documented(command: str) -> set[str]:
    text = _section(command)
    json_part = text[text.index("`--json`") :]
    return set(re.findall(r'"([a-z_]+)"', json_part))


def test_diff_json_keys_are_documented() -> None:
    part = PartitionDiff(
        "t",
        0,
        DiffStatus.IDENTICAL,
        Level.BATCH,
        {"dc1": Bounds(0, 5), "dc2": Bounds(0, 5)},
        (0, 5),
    )
    report = DiffReport((TopicDiff("t", (part,)),), ("dc1", "dc2"), Level.BATCH, 100)
    assert _keys(report.to_dict()) <= _documented("diff")


def test_check_json_keys_are_documented() -> None:
    c = ClusterCheck("dc1", "local", "h:1", findings=[Finding("topic t", "READ", Verdict.OK)])
    assert _keys(CheckReport(("t",), [c]).to_dict()) <= _documented("check")
    assert {v.value for v in Verdict} <= _documented("check")
