"""The progress bar of `sync` on a terminal: the phase until the first bytes, then offsets,
bytes and bytes per second, partitions caught up, time left (``ui.progress.CopyProgress``)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from partsync.ui import progress
from partsync.ui.progress import CopyProgress, RateWindow


def _shown(p: CopyProgress) -> str:
    out = Console(file=io.StringIO(), width=200, color_system=None)
    out.print(p._progress.make_tasks_table(p._progress.tasks))
    return " ".join(out.file.getvalue().split())  # type: ignore[attr-defined]


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    return clock


def test_the_phase_then_rate_and_partitions_caught_up(now: list[float]) -> None:
    p = CopyProgress(Console(file=io.StringIO()), total_offsets=30, phase="joining group")
    p.start({("t", 0): 0, ("t", 1): 5, ("t", 2): 7}, {("t", 0): 10, ("t", 1): 25})
    shown = _shown(p)
    assert "joining group…" in shown and "0/30 offsets" in shown and "0/2 partitions" in shown
    assert "-:--:--" in shown

    p("t", 0, 1 << 20, 10)  # partition 0 caught up: no rate yet (one append is no interval)
    shown = _shown(p)
    assert "copying" in shown and "10/30 offsets" in shown and "1/2 partitions" in shown
    assert "1.0 MiB" in shown and "/s" not in shown

    now[0] += 2.0
    p("t", 1, 3 << 20, 13)  # no rate yet: the appends span less than MIN_SPAN_S
    assert "/s" not in _shown(p)
    now[0] += 2.0
    p("t", 1, 3 << 20, 15)  # partition 1 half way: 6 MiB in the 4 s since the first append
    shown = _shown(p)
    assert "20/30 offsets" in shown and "7.0 MiB 1.5 MiB/s" in shown and "1/2 partitions" in shown
    assert "0:00:04" in shown  # 10 offsets left at 2.5 offsets/s
    now[0] += 1.0
    assert "0:00:03" in _shown(p)  # counting down between appends
    now[0] += 5.0
    assert "0:00:00" in _shown(p)
    p("t", 1, 0, 25)
    assert "2/2 partitions" in _shown(p)
    p.stop()


@pytest.mark.parametrize(
    ("samples", "rates"),
    [
        ([], None),
        ([(0.0, 100, 1)], None),  # a base only
        ([(0.0, 100, 1), (0.5, 200, 2)], None),  # under a second
        ([(0.0, 100, 1), (2.0, 300, 5)], (100.0, 2.0)),
        # A burst at the start (a token bucket's first second) leaves the window: the base is
        # the last sample at or before its start (0.1 s here, 12 s - 10 s being 2 s).
        ([(0.0, 0, 0), (0.1, 1000, 10), (5.0, 1500, 15), (12.0, 2190, 22)], (100.0, 1.0)),
    ],
)
def test_rates_over_the_last_seconds(
    samples: list[tuple[float, int, int]], rates: tuple[float, float] | None
) -> None:
    w = RateWindow(window=10.0, min_span=1.0)
    for s in samples:
        w.add(*s)
    assert w.rates() == (rates if rates is None else pytest.approx(rates, rel=0.01))
