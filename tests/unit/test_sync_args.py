"""``plan``'s and ``sync``'s options into ``PlanArgs``/``SyncArgs``: every check between options
is a row here with the message users' scripts see (exit 2), parsed by the commands' own click
declarations, without any broker or config file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from partsync.config import ClusterRef, Config
from partsync.errors import ExitStatus, UsageError
from partsync.ui.cli_sync import plan, sync
from partsync.ui.sync_args import PlanArgs, SyncArgs, groups_to_sync
from tests.support.recording import Recording

BASE = ["--topic", "t", "--sources", "127.0.0.1:2", "--local", "127.0.0.1:1"]


def _params(command: Any, argv: list[str]) -> dict[str, Any]:
    with command.make_context(command.name, [*BASE, *argv]) as ctx:
        return dict(ctx.params)


def _sync_args(argv: list[str]) -> SyncArgs:
    return SyncArgs.from_click(_params(sync, argv))


SPARK = (
    "--follow and --group run on the local engine (Spark tasks cannot hold group membership); "
    "use --engine local"
)
ONE_SHOT_GROUPS = (
    "--sync-groups is for --follow; a one-shot run copies commits with `partsync offsets`"
)
REPLAY = "--transactions replay needs fencing: its transaction slots are fenced with the partition"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine", "spark", "--follow"], SPARK),
        (["--engine", "spark", "--group", "g"], SPARK),
        (
            ["--follow", "--deadline", "5"],
            "--deadline is for one-shot runs; follow mode runs until stopped",
        ),
        (
            ["--follow", "--metrics-file", "m.prom"],
            "--metrics-file is for one-shot runs; follow mode serves --metrics-port",
        ),
        (
            ["--metrics-port", "9464"],
            "--metrics-port is for --follow; one-shot runs write --metrics-file",
        ),
        (["--sync-groups", "app"], ONE_SHOT_GROUPS),
        (["--groups-from", "127.0.0.1:3"], ONE_SHOT_GROUPS),
        (["--group", "g", "--no-group"], "--group and --no-group contradict each other"),
        (["--group", "", "--no-group"], "--group and --no-group contradict each other"),
        (["--hole-key", ""], "--hole-key: the key of hole records cannot be empty"),
        (["--transactions", "replay", "--no-fencing"], REPLAY),
        # When several are wrong, the first in this order is the one reported.
        (["--engine", "spark", "--follow", "--deadline", "5", "--metrics-port", "1"], SPARK),
        (
            ["--metrics-port", "1", "--group", "g", "--no-group"],
            "--metrics-port is for --follow; one-shot runs write --metrics-file",
        ),
        (
            ["--hole-key", "", "--transactions", "replay", "--no-fencing"],
            "--hole-key: the key of hole records cannot be empty",
        ),
    ],
)
def test_each_check_refuses_with_its_message(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        _sync_args(argv)
    assert str(caught.value) == message
    assert caught.value.exit_status is ExitStatus.USAGE


def test_a_metrics_file_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "m.prom"
    with pytest.raises(UsageError) as caught:
        _sync_args(["--metrics-file", str(missing)])
    assert str(caught.value) == (
        f"--metrics-file {missing}: directory {missing.parent} does not exist"
    )


def test_a_writable_metrics_file_is_checked_without_leaving_anything(tmp_path: Path) -> None:
    target = tmp_path / "m.prom"
    assert _sync_args(["--metrics-file", str(target)]).metrics_file == str(target)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        ([], "sync_groups", None),
        (["--follow", "--sync-groups", ""], "sync_groups", None),  # empty: not given
        (["--follow", "--sync-groups", " a, b ,a,"], "sync_groups", ("a", "b")),
        (["--follow", "--sync-groups", " , "], "sync_groups", ()),  # refused once resolved
        (["--groups-from", ""], "groups_from", None),
        (["--metrics-file", ""], "metrics_file", None),
        (["--engine", "spark", "--group", ""], "group", ""),  # as before: an empty name passes
        ([], "deadline", None),
        (["--deadline", "2.5"], "deadline", 2.5),
    ],
)
def test_accepted_options_are_held_as_parsed(argv: list[str], field: str, value: Any) -> None:
    assert getattr(_sync_args(argv), field) == value


def test_copy_options_and_run_options_carry_the_flags() -> None:
    args = _sync_args(
        [
            "--transaction-timeout",
            "2.5",
            "--session-timeout",
            "3",
            "--hole-key",
            "h",
            "--topic-check-interval",
            "7",
            "--parallelism",
            "3",
            "--follow",
            "--group",
            "g",
        ]
    )
    assert args.copy.transaction_timeout_ms == 2500
    assert args.copy.hole_key == b"h"
    assert args.copy.transactions == "replay" and args.copy.fencing
    run = args.run_options()
    assert (run.follow, run.group, run.session_timeout_ms) == (True, "g", 3000)
    assert (run.topic_check_s, run.parallelism, run.group_protocol) == (7.0, 3, "auto")
    assert _sync_args(["--no-fencing"]).copy.transactions == "refuse"
    sel = args.selection
    assert sel.topics.named == ("t",) and sel.sources == "127.0.0.1:2" and not sel.as_json


def test_plan_args_default_to_a_replay_and_take_the_scan_options() -> None:
    args = PlanArgs.from_click(_params(plan, ["--scan", "--compaction-holes", "fill"]))
    assert args.scan and args.copy.compaction_holes == "fill"
    assert args.copy.transactions == "replay"
    refuse = PlanArgs.from_click(_params(plan, ["--transactions", "refuse"]))
    assert refuse.copy.transactions == "refuse" and not refuse.scan


@pytest.mark.parametrize(("command", "args_type"), [(sync, SyncArgs), (plan, PlanArgs)])
def test_every_option_of_the_command_is_read(command: Any, args_type: Any) -> None:
    """An option added to the command but not to its dataclass would be silently ignored."""
    kw = Recording(_params(command, []))
    args_type.from_click(kw)
    assert kw.read == set(kw.data)


def _ref(name: str, port: int) -> ClusterRef:
    return ClusterRef(name, (("127.0.0.1", port),))


def test_groups_to_sync_resolves_the_source_and_refuses_what_cannot_work() -> None:
    src, loc = _ref("dc2", 2), _ref("dc1", 1)
    req: Any = SimpleNamespace(sources=(src,), local=loc)
    config = Config(clusters={"dc1": loc, "dc2": src})
    assert groups_to_sync(_sync_args([]), config, req) is None
    got = groups_to_sync(_sync_args(["--follow", "--sync-groups", "a,b"]), config, req)
    assert got is not None and (got.groups, got.source, got.interval_s) == (("a", "b"), src, 5.0)
    rows = [
        (["--follow", "--sync-groups", ","], "--sync-groups: no group named"),
        (
            ["--follow", "--sync-groups", "a", "--groups-from", "dc1"],
            "--groups-from dc1 is the local cluster",
        ),
    ]
    for argv, message in rows:
        with pytest.raises(UsageError) as caught:
            groups_to_sync(_sync_args(argv), config, req)
        assert str(caught.value) == message
