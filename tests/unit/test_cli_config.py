"""``--config`` is accepted before or after the subcommand (the later one wins), through the
real entry point's error mapping (``raw_main``), without any broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from partsync.errors import ExitStatus
from partsync.ui.cli import raw_main


@pytest.fixture
def bad_config(tmp_path: Path) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text('[clusters.dc1]\nbootstrap_server = "h:1"\n')  # a typo'd key
    return path


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("command", ["plan", "sync", "diff"])
def test_config_before_or_after_the_subcommand(
    where: str,
    command: str,
    bad_config: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PARTSYNC_CONFIG", raising=False)
    args = ["--topic", "t"] + (
        ["--clusters", "dc1,dc2"] if command == "diff" else ["--sources", "dc1"]
    )
    argv = (
        ["--config", str(bad_config), command, *args]
        if where == "before"
        else [command, *args, "--config", str(bad_config)]
    )
    assert raw_main(argv) is ExitStatus.USAGE
    err = capsys.readouterr().err
    assert "bootstrap_server" in err  # the file given was the one read, wherever the flag stood


def test_the_later_config_wins(
    tmp_path: Path, bad_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.toml"
    code = raw_main(
        [
            "--config",
            str(bad_config),
            "plan",
            "--config",
            str(missing),
            "--topic",
            "t",
            "--sources",
            "dc1",
        ]
    )
    assert code is ExitStatus.USAGE
    # Rich wraps long messages at the console width (a known issue): compare words.
    assert f"config file {missing} does not exist" in " ".join(capsys.readouterr().err.split())


def test_help_and_version_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert raw_main(["--help"]) is ExitStatus.OK
    assert raw_main(["--version"]) is ExitStatus.OK
    assert raw_main(["sync", "--help"]) is ExitStatus.OK
    assert "--config FILE" in capsys.readouterr().out


def test_unknown_option_is_a_usage_error() -> None:
    assert raw_main(["plan", "--no-such-flag"]) is ExitStatus.USAGE
