"""`partsync demo`, the README's first command, through the real entry point: it runs the
main job on its own brokers, and stops them however it is stopped."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

_BOUND_S = 300


def _demo(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    env["TMPDIR"] = str(tmp_path)  # every temporary directory the demo makes is in here
    return subprocess.Popen(
        [sys.executable, "-m", "partsync", "demo", "--records", "200", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def _refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except OSError:
        return True


def test_the_demo_syncs_and_a_second_run_is_a_no_op(tmp_path: Path) -> None:
    proc = _demo(tmp_path)
    out, err = proc.communicate(timeout=_BOUND_S)
    assert proc.returncode == 0, err[-3000:]
    assert "running sync again: a no-op" in out, out[-3000:]
    assert sorted(tmp_path.iterdir()) == [], "the demo left temporary files behind"


def test_sigterm_stops_a_kept_demo_and_its_brokers(tmp_path: Path) -> None:
    """`demo --keep` waits for Ctrl-C; SIGTERM (a service manager, a terminal closed) stops it
    the same way: its three brokers are stopped and their directories removed (they were left
    running)."""
    proc = _demo(tmp_path, "--keep")
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + _BOUND_S
    while "brokers keep running" not in seen:
        line = proc.stderr.readline()
        assert line and time.monotonic() < deadline, f"the demo ended or hung:\n{seen[-3000:]}"
        seen += line
    addresses = re.findall(r"^\s+dc\d: (\S+):(\d+)$", seen, re.MULTILINE)
    assert len(addresses) == 3, seen
    assert not any(_refused(h, int(p)) for h, p in addresses)
    assert [d.name for d in tmp_path.iterdir()], "the brokers' directories"

    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)

    assert proc.returncode == 0, seen + err
    assert all(_refused(h, int(p)) for h, p in addresses), addresses
    assert sorted(tmp_path.iterdir()) == [], "the demo left temporary files behind"
