"""Errors before any work: checked up front, exit 2 for what the user must fix, and under
``--json`` always exactly one JSON document on stdout (cron jobs append it to a log). Through
the real entry point's error mapping (``raw_main``), without any broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from partsync.errors import ExitStatus
from partsync.ui.cli import raw_main

# Nothing listens on port 1: a command that got as far as connecting would exit 1, not 2.
NOBODY = "127.0.0.1:1"


@pytest.fixture(autouse=True)
def _no_config_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PARTSYNC_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./partsync.toml


def _json(out: str) -> Any:
    return json.loads(out)  # exactly one document, or this raises


def _words(text: str) -> str:
    return " ".join(text.split())  # Rich wraps long messages at the console width


def test_a_config_error_under_json_is_one_error_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = raw_main(["sync", "--topic", "t", "--sources", "nope", "--local", NOBODY, "--json"])
    assert code is ExitStatus.USAGE
    doc = _json(capsys.readouterr().out)
    assert set(doc) == {"error"}
    err = doc["error"]
    assert err["kind"] == "config" and err["exit_code"] == 2
    assert "unknown cluster 'nope'" in err["message"]
    assert set(err) == {
        "kind",
        "message",
        "exit_code",
        "cluster",
        "topic",
        "partition",
        "offset",
        "retriable",
    }


@pytest.mark.parametrize("command", ["sync", "plan", "diff"])
def test_a_usage_error_under_json_is_one_error_document(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert raw_main([command, "--bogus", "--json"]) is ExitStatus.USAGE
    doc = _json(capsys.readouterr().out)
    assert doc["error"]["kind"] == "usage" and "--bogus" in doc["error"]["message"]


def test_without_json_nothing_goes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert raw_main(["sync", "--bogus"]) is ExitStatus.USAGE
    assert capsys.readouterr().out == ""


def test_a_metrics_file_in_a_missing_directory_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no-such-dir" / "partsync.prom"
    code = raw_main(
        [
            "sync",
            "--topic",
            "t",
            "--sources",
            NOBODY,
            "--local",
            NOBODY,
            "--metrics-file",
            str(target),
            "--json",
        ]
    )
    assert code is ExitStatus.USAGE  # before planning: connecting would have given exit 1
    out = capsys.readouterr()
    assert f"directory {target.parent} does not exist" in _words(out.err)
    assert _json(out.out)["error"]["kind"] == "usage"


def test_a_missing_ssl_file_is_a_config_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "partsync.toml"
    cfg.write_text(
        'local = "dc1"\n[clusters.dc1]\nbootstrap_servers = ["127.0.0.1:1"]\n'
        'security_protocol = "SSL"\nssl_cafile = "/no/such/ca.pem"\n'
        '[clusters.dc2]\nbootstrap_servers = ["127.0.0.1:2"]\n'
    )
    code = raw_main(["--config", str(cfg), "sync", "--topic", "t", "--sources", "dc2"])
    assert code is ExitStatus.USAGE
    err = _words(capsys.readouterr().err)
    assert "[clusters.dc1]: ssl_cafile '/no/such/ca.pem': no such file" in err


def test_a_long_error_stays_one_line_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A log line or a piped error must not be hard-wrapped at the console width.
    monkeypatch.setenv("COLUMNS", "80")
    long = "an-unknown-cluster-name-" + "x" * 80
    assert raw_main(["sync", "--topic", "t", "--sources", long, "--local", NOBODY]) is (
        ExitStatus.USAGE
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and long in lines[0], lines


def test_exclude_without_any_topic_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = raw_main(["plan", "--exclude", "x.*", "--sources", NOBODY, "--local", "127.0.0.1:2"])
    assert code is ExitStatus.USAGE
    assert "give --topic or --topic-pattern" in _words(capsys.readouterr().err)


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--topic", "orders"],
        ["sync", "--topic", "orders"],
        ["sync", "--topic", "orders", "--json"],
        ["check", "--topic", "orders"],
        ["diff", "--topic", "orders"],
        ["offsets", "--topic", "orders", "--group", "app"],
    ],
)
def test_a_missing_source_is_a_usage_error_naming_the_option(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command that reads sources says which option names them, exit 2 (plan and sync
    crashed with AttributeError, exit 1: click 8.3+ does not enforce ``required`` on an option
    given ``default=None``)."""
    assert raw_main(argv) is ExitStatus.USAGE
    out, err = capsys.readouterr()
    said = _json(out)["error"]["message"] if "--json" in argv else err
    assert any(opt in said for opt in ("--sources", "--clusters", "--from")), said
    assert "Traceback" not in err
