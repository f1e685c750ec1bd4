"""``check``'s and ``offsets``' options into ``CheckArgs``/``OffsetsArgs``: each check between
options a row with its message (exit 2), parsed by the commands' own click declarations,
without any broker or config file. (``plan`` and ``sync``: test_sync_args.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from partsync.errors import ExitStatus, UsageError
from partsync.ui.cli_check import CheckArgs, check
from partsync.ui.cli_offsets import OffsetsArgs, offsets


def _params(command: Any, argv: list[str]) -> dict[str, Any]:
    with command.make_context(command.name, list(argv)) as ctx:  # click consumes the list
        return dict(ctx.params)


CHECK = ["--topic", "t", "--clusters", "dc1,dc2"]
OFFSETS = ["--topic", "t", "--topic", "u", "--topic", "t", "--group", "app"]
EITHER = (
    "give either --from CLUSTER (copy the groups' committed offsets) or "
    "--to-datetime TIME (set them by time on the local cluster)"
)


@pytest.mark.parametrize(
    ("command", "args_type", "argv", "message"),
    [
        (
            check,
            CheckArgs,
            [*CHECK, "--group", "g", "--no-group"],
            "--group and --no-group contradict each other",
        ),
        (
            check,
            CheckArgs,
            [*CHECK, "--hole-key", ""],
            "--hole-key: the key of hole records cannot be empty",
        ),
        (
            check,
            CheckArgs,
            [*CHECK, "--hole-key", "", "--group", "g", "--no-group"],
            "--group and --no-group contradict each other",
        ),
        (offsets, OffsetsArgs, OFFSETS, EITHER),
        (offsets, OffsetsArgs, [*OFFSETS, "--from", "dc2", "--to-datetime", "2026-01-01"], EITHER),
    ],
)
def test_each_check_refuses_with_its_message(
    command: Any, args_type: Any, argv: list[str], message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        args_type.from_click(_params(command, argv))
    assert str(caught.value) == message
    assert caught.value.exit_status is ExitStatus.USAGE


def test_check_args_hold_the_run_as_it_would_be_given() -> None:
    args = CheckArgs.from_click(
        _params(check, [*CHECK, "--no-fencing", "--compaction-holes", "fill", "--hole-key", "k"])
    )
    assert args.clusters == "dc1,dc2" and args.selection.sources is None
    assert not args.fencing and args.copy.compaction_holes == "fill"
    assert (args.group, args.no_group) == (None, False)


def test_offsets_args_name_each_topic_once_and_keep_the_time_as_given() -> None:
    args = OffsetsArgs.from_click(_params(offsets, [*OFFSETS, "--to-datetime", "not a time"]))
    assert args.topics == ("t", "u") and args.groups == ("app",)
    # Parsed after the config is read (a bad config is reported first, as always).
    assert args.to_datetime == "not a time" and args.source is None
    copy = OffsetsArgs.from_click(_params(offsets, [*OFFSETS, "--from", "dc2", "--json"]))
    assert copy.source == "dc2" and copy.to_datetime is None and copy.as_json


@pytest.mark.parametrize(
    ("command", "args_type", "argv"),
    [(check, CheckArgs, CHECK), (offsets, OffsetsArgs, [*OFFSETS, "--from", "dc2"])],
)
def test_every_option_of_the_command_is_read(command: Any, args_type: Any, argv: list[str]) -> None:
    """An option added to the command but not to its dataclass would be silently ignored."""
    read: set[str] = set()
    params = _params(command, argv)

    class Recording(dict[str, Any]):
        def __getitem__(self, key: str) -> Any:
            read.add(key)
            return super().__getitem__(key)

    args_type.from_click(Recording(params))
    assert read == set(params)
