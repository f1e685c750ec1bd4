"""The CLI on a real terminal: a pseudo-terminal of 80 columns, through the real entry point.
Tables fit the width without cutting a word or splitting a number; the same command piped
prints whole lines without colour."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable

import pytest

from partsync.demo.data import create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, records

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def run_in_terminal(*args: str, columns: int = 80, timeout: float = 120) -> tuple[int, str]:
    """``python -m partsync ARGS`` with stdout and stderr on a pseudo-terminal ``columns``
    wide: (exit code, what the terminal received, escape sequences kept)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    env.pop("PARTSYNC_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "partsync", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        if time.monotonic() > deadline:
            proc.kill()
            break
    os.close(master)
    return proc.wait(timeout=30), out.decode("utf-8", errors="replace")


def _visible(text: str) -> list[str]:
    """What the terminal shows line by line (a carriage return redraws a line: the progress
    bar), without escape sequences."""
    return [_ANSI.sub("", line) for line in re.split(r"\r\n|\r|\n", text)]


def test_tables_fit_an_80_column_terminal_and_pipes_get_whole_plain_lines(
    clusters: Clusters, psync: Callable[..., CliResult], topic: str
) -> None:
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    name = f"{topic}.orders-eu-central-with-a-long-name"
    for where in (a, b, local):
        create_topic(where, name, 3)
    for p in range(3):
        produce(a, name, records(1234 + p, seed=p), partition=p)
    cfg = str(clusters.config)

    code, screen = run_in_terminal("--config", cfg, "plan", "--topic", name, "--sources", "a,b")
    assert code == 0, screen
    lines = _visible(screen)
    assert "\x1b[" in screen  # a terminal gets colour
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    assert "…" not in text
    for p in range(3):  # every range whole: never "0..12" / "34" over two lines
        assert f"0..{1234 + p}" in text, text

    piped = psync("plan", "--topic", name, "--sources", "a,b", env={"COLUMNS": "80"})
    assert piped.code == 0
    assert "\x1b[" not in piped.stdout + piped.stderr
    assert name in piped.stdout  # the topic name whole on one line, however long the line

    code, screen = run_in_terminal("--config", cfg, "check", "--topic", name, "--sources", "a,b")
    assert code == 0, screen
    lines = _visible(screen)
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    assert "ok: every cluster has what the run needs" in "\n".join(lines)

    code, screen = run_in_terminal("--config", cfg, "sync", "--topic", name, "--sources", "a,b")
    assert code == 0, screen
    lines = _visible(screen)
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    # The progress bar was on screen: a phase, then the offsets copied of the total.
    assert "3,705/3,705 offsets" in text and "3/3 partitions" in text, text
    assert "status: synced" in text or "synced" in text
    _rows_whole(lines)

    # A short topic name: the sync table's 8 columns fit 80 columns only with each narrowed to
    # its longest word, which Rich's own layout does not do (it cut the right edge off).
    short = "t" + hashlib.sha1(topic.encode()).hexdigest()[:8]
    for where in (a, b, local):
        create_topic(where, short, 3)
    for p in range(3):
        produce(b if p else a, short, records(40_000 + p, seed=p), partition=p)
    code, screen = run_in_terminal("--config", cfg, "sync", "--topic", short, "--sources", "a,b")
    assert code == 0, screen
    lines = _visible(screen)
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    _rows_whole(lines)
    assert any("┃ source" in line for line in lines), "\n".join(lines)


def _rows_whole(lines: list[str]) -> None:
    """Every line of a table ends with its right border: nothing cut at the terminal's edge."""
    ends = {"┏": "┓", "┃": "┃", "┡": "┩", "│": "│", "└": "┘"}
    for line in lines:
        body = line.rstrip()
        if body[:1] in ends:
            assert body.endswith(ends[body[0]]), "\n".join(lines)


_SHOWN = re.compile(
    r"copying .*? ([\d,]+)/[\d,]+ offsets +[\d.]+ \w+(?: ([\d.]+) (\w+)/s)?"
    r".* (\d+:\d\d:\d\d|-:--:--)\s*$"
)


def test_the_progress_bar_moves_and_its_time_left_counts_down(
    clusters: Clusters, topic: str
) -> None:
    """Under --max-bytes-per-sec, where one append can carry a whole partition: the time left
    counts down between appends (it sat still, e.g. at 0:00:01 for seconds), and the rate shown
    stays within twice the limit. The rate is that of the last 10 s of appends, shown once they
    span 3 s: the throttle's burst (one second's worth at the start) and appends of bytes
    fetched ahead can still lift it to about 1.5 times the limit early on, so the formula
    itself is pinned by ``RateWindow``'s table tests (the first append's bytes over the time
    since it landed showed twice the limit and more)."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    for where in (a, local):
        create_topic(where, topic, 3)
    for p in range(3):
        produce(a, topic, records(30_000, seed=p), partition=p)
    limit = 1_000_000  # about 13 s: appends seconds apart, the time left counting down between
    code, screen = run_in_terminal(
        "--config",
        str(clusters.config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--no-group",
        "--max-bytes-per-sec",
        str(limit),
    )
    assert code == 0, screen
    lines = _visible(screen)
    frames = [
        (
            int(m.group(1).replace(",", "")),
            m.group(4),
            m.group(2) and float(m.group(2)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[m.group(3)],
        )
        for line in lines
        if (m := _SHOWN.search(line))
    ]
    shown = "\n".join(line for line in lines if "copying" in line)
    assert len({done for done, _, _ in frames}) >= 3, shown  # the bar moved
    # Between two appends (same offsets copied), the time left went down.
    ticks = {}
    for done, left, _ in frames:
        if left != "-:--:--":
            ticks.setdefault(done, []).append(left)
    assert any(
        len(set(seen)) > 1 and seen == sorted(seen, reverse=True) for seen in ticks.values()
    ), shown
    rates = [rate for _, _, rate in frames if rate]
    assert rates and max(rates) <= 2 * limit, shown
