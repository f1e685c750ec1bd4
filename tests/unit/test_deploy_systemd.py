"""The systemd examples in deploy/systemd/: their sections and keys, the exit codes they treat
as success or as not worth a restart (partsync.errors.ExitStatus), and that each ExecStart
line, with the example env file filled in, is accepted by partsync's own `sync` parser.
`systemd-analyze verify` checks them too where it is installed."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from partsync.errors import ExitStatus
from partsync.ui.cli_sync import sync

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
INSTANCE = "orders"


def _unit(name: str) -> dict[str, list[tuple[str, str]]]:
    """Sections as lists of (key, value): systemd allows a key more than once."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in (UNITS / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if m := re.fullmatch(r"\[(\w+)\]", line):
            current = sections.setdefault(m.group(1), [])
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep, f"{name}: {raw!r}"
        current.append((key.strip(), value.strip()))
    return sections


def _one(section: list[tuple[str, str]], key: str) -> str:
    values = [v for k, v in section if k == key]
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


def _env_file(name: str) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in (UNITS / name).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {k: v for k, v in pairs}


def _exec_args(service: str, env_example: str) -> list[str]:
    """ExecStart's argv as systemd would run it for INSTANCE with the example env file."""
    s = _unit(service)["Service"]
    env = dict(v.split("=", 1) for k, v in s if k == "Environment")
    assert _one(s, "EnvironmentFile") == f"/etc/partsync/{env_example.split('.')[0]}-%i.env"
    env.update(_env_file(env_example))  # EnvironmentFile= overrides Environment=
    line = _one(s, "ExecStart").replace("%i", INSTANCE)
    missing = set(re.findall(r"\$\{(\w+)\}", line)) - set(env)
    assert not missing, f"{service} uses variables no example sets: {missing}"
    argv = shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], line))
    assert argv[0] == "/opt/partsync/bin/partsync" and argv[1] == "sync", argv
    return argv[2:]


def _parsed(args: list[str]) -> dict[str, object]:
    with sync.make_context("sync", list(args)) as ctx:
        return dict(ctx.params)


def test_follow_unit_restarts_on_failure_and_stops_with_sigterm() -> None:
    unit = _unit("partsync-follow@.service")
    s = unit["Service"]
    assert _one(s, "Restart") == "on-failure"
    assert _one(s, "KillSignal") == "SIGTERM"
    assert 0 < int(_one(s, "TimeoutStopSec")) <= 300
    # Usage errors and unsafe partitions do not fix themselves: no restart loop.
    assert set(_one(s, "RestartPreventExitStatus").split()) == {
        str(int(ExitStatus.USAGE)),
        str(int(ExitStatus.UNSAFE)),
    }
    assert _one(s, "User") not in ("root", "0")
    assert _one(s, "NoNewPrivileges") == "yes" and _one(s, "ProtectSystem") == "strict"
    assert "multi-user.target" in _one(unit["Install"], "WantedBy")


def test_follow_unit_command_is_a_follow_run_in_a_group() -> None:
    params = _parsed(_exec_args("partsync-follow@.service", "follow.env.example"))
    assert params["follow"] is True
    assert params["group"] == "mirror-orders"
    assert params["topics"] == ("orders",) and params["sources"] == "dc2,dc3"
    assert params["metrics_port"] == 9464


def test_sync_unit_is_a_oneshot_where_not_caught_up_is_success() -> None:
    s = _unit("partsync-sync@.service")["Service"]
    assert _one(s, "Type") == "oneshot"
    # 4: not caught up yet; the next timer run continues from the local log end.
    assert _one(s, "SuccessExitStatus") == str(int(ExitStatus.DEADLINE))
    assert _one(s, "KillSignal") == "SIGTERM"
    assert "Restart" not in dict(s)
    params = _parsed(_exec_args("partsync-sync@.service", "sync.env.example"))
    assert params["follow"] is False
    assert params["deadline"] == 240.0 and params["group"] == "mirror-orders"
    metrics_file = f"/var/lib/node_exporter/textfile/partsync-{INSTANCE}.prom"
    assert params["metrics_file"] == metrics_file
    assert Path(metrics_file).parent.as_posix() in _one(s, "ReadWritePaths").split()


def test_sync_timer_starts_the_sync_unit_of_its_instance() -> None:
    unit = _unit("partsync-sync@.timer")
    t = unit["Timer"]
    assert _one(t, "Unit") == "partsync-sync@%i.service"
    assert any(k.startswith("On") for k, _ in t)
    assert _one(unit["Install"], "WantedBy") == "timers.target"


def test_deadline_leaves_time_before_the_next_timer_run() -> None:
    interval = _one(_unit("partsync-sync@.timer")["Timer"], "OnUnitInactiveSec")
    m = re.fullmatch(r"(\d+)min", interval)
    assert m, interval
    assert float(_env_file("sync.env.example")["PARTSYNC_DEADLINE"]) < int(m.group(1)) * 60


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this environment's partsync.
    partsync = Path(sys.executable).parent / "partsync"
    assert partsync.exists(), partsync
    for unit in UNITS.glob("partsync-*"):
        text = unit.read_text().replace("/opt/partsync/bin/partsync", str(partsync))
        (tmp_path / unit.name).write_text(text)
    names = [
        f"partsync-follow@{INSTANCE}.service",
        f"partsync-sync@{INSTANCE}.service",
        f"partsync-sync@{INSTANCE}.timer",
    ]
    done = subprocess.run(
        ["systemd-analyze", "verify", *(f"./{n}" for n in names)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # verify exits 0 on unknown keys too; its warnings are the finding.
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
        done.stdout + done.stderr
    )
