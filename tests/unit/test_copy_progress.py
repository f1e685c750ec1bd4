"""The progress bar of `sync` on a terminal: the phase until the first bytes, then offsets,
bytes and bytes per second, partitions caught up, time left (``ui.render.CopyProgress``)."""

from __future__ import annotations

import io

from rich.console import Console

from partsync.ui import render
from partsync.ui.render import CopyProgress


def _shown(p: CopyProgress) -> str:
    out = Console(file=io.StringIO(), width=200, color_system=None)
    out.print(p._progress.make_tasks_table(p._progress.tasks))
    return " ".join(out.file.getvalue().split())  # type: ignore[attr-defined]


def test_the_phase_then_rate_and_partitions_caught_up(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = [100.0]
    monkeypatch.setattr(render.time, "monotonic", lambda: now[0])
    p = CopyProgress(Console(file=io.StringIO()), total_offsets=30, phase="joining group")
    p.start({("t", 0): 0, ("t", 1): 5, ("t", 2): 7}, {("t", 0): 10, ("t", 1): 25})
    shown = _shown(p)
    assert "joining group…" in shown and "0/30 offsets" in shown and "0/2 partitions" in shown

    p("t", 0, 1 << 20, 10)  # partition 0 caught up: no rate yet (under a second of data)
    shown = _shown(p)
    assert "copying" in shown and "10/30 offsets" in shown and "1/2 partitions" in shown
    assert "1.0 MiB" in shown and "/s" not in shown

    now[0] += 2.0
    p("t", 1, 3 << 20, 15)  # partition 1 half way
    shown = _shown(p)
    assert "20/30 offsets" in shown and "4.0 MiB 2.0 MiB/s" in shown and "1/2 partitions" in shown
    p("t", 1, 0, 25)
    assert "2/2 partitions" in _shown(p)
    p.stop()
