"""The copy progress bar on stderr: what the run is doing until the first append, then offsets
copied of all, bytes, the rate over the last seconds, partitions caught up, and the time left."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from partsync.ui.render import human_bytes

__all__ = ["CopyProgress", "RateWindow"]

# The rate and the time left are measured over this many recent seconds: long enough to smooth
# appends of a whole partition at once, short enough to follow a throttle or a slow source.
WINDOW_S = 10.0
# And shown once the samples span this long: --max-bytes-per-sec lets one second's worth through
# at once at the start (its token bucket's burst), which over a shorter span reads as twice the
# limit.
MIN_SPAN_S = 3.0


class RateWindow:
    """Rates of cumulative counters over the last ``window`` seconds, from samples taken as
    appends are confirmed. The first sample is only a base: the bytes of an append count from
    the previous append's confirmation, never from a start with no appends behind it (that
    overstated the rate of a throttled run twofold). None until the samples span
    ``min_span`` seconds."""

    def __init__(self, window: float = WINDOW_S, min_span: float = MIN_SPAN_S) -> None:
        self.window = window
        self.min_span = min_span
        self._samples: collections.deque[tuple[float, float, float]] = collections.deque()

    def add(self, now: float, done_bytes: float, done_offsets: float) -> None:
        self._samples.append((now, done_bytes, done_offsets))
        # Keep one sample at or before the window's start as the base of the rates.
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()

    def rates(self) -> tuple[float, float] | None:
        """(bytes per second, offsets per second), or None while too little is known."""
        if len(self._samples) < 2:
            return None
        t0, b0, o0 = self._samples[0]
        t1, b1, o1 = self._samples[-1]
        if t1 - t0 < self.min_span:
            return None
        return (b1 - b0) / (t1 - t0), (o1 - o0) / (t1 - t0)


class _TimeLeft(ProgressColumn):
    """The time left as last estimated, counting down between estimates (appends can be
    seconds apart; the estimate must not sit still meanwhile)."""

    def __init__(self, estimate: Callable[[], tuple[float, float] | None]) -> None:
        super().__init__()
        self._estimate = estimate

    def render(self, task: Task) -> Text:
        est = self._estimate()
        if est is None:
            return Text("-:--:--", style="progress.remaining")
        left, at = est
        secs = max(0, int(left - (time.monotonic() - at) + 0.5))
        return Text(
            f"{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}", style="progress.remaining"
        )


class CopyProgress:
    """A progress bar on stderr, fed by the copier's callback from many threads: what the run
    is doing (``phase``) until the first bytes arrive, then offsets copied of all, bytes and
    bytes per second, partitions caught up of those behind, and the time left."""

    def __init__(self, console: Console, total_offsets: int, phase: str = "starting") -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int], int] = {}
        self._targets: dict[tuple[str, int], int] = {}
        self._total = total_offsets
        self._window = RateWindow()
        self._eta: tuple[float, float] | None = None  # (seconds left, when estimated)
        self._progress = Progress(
            TextColumn("{task.fields[phase]}"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} offsets"),
            TextColumn("{task.fields[copied]}"),
            TextColumn("{task.fields[parts]}"),
            _TimeLeft(lambda: self._eta),
            console=console,
            transient=True,
        )
        self._task = self._progress.add_task(
            "copy", total=total_offsets, copied="", parts="", phase=f"{phase}…"
        )
        self._bytes = 0
        self._offsets = 0
        self._done = 0

    def start(
        self, starts: dict[tuple[str, int], int], targets: dict[tuple[str, int], int] | None = None
    ) -> None:
        """``starts``: each partition's local end; ``targets``: where the ones behind end."""
        self._last = dict(starts)
        self._targets = dict(targets or {})
        self._done = sum(1 for k, t in self._targets.items() if self._last.get(k, 0) >= t)
        self._progress.update(self._task, parts=self._parts())
        self._progress.start()

    def _parts(self) -> str:
        return f"{self._done}/{len(self._targets)} partitions" if self._targets else ""

    def __call__(self, topic: str, partition: int, nbytes: int, next_offset: int) -> None:
        with self._lock:
            now = time.monotonic()
            key = (topic, partition)
            before = self._last.get(key, next_offset)
            self._last[key] = next_offset
            target = self._targets.get(key)
            if target is not None and before < target <= next_offset:
                self._done += 1
            self._bytes += nbytes
            self._offsets += max(0, next_offset - before)
            self._window.add(now, self._bytes, self._offsets)
            rates = self._window.rates()
            rate = ""
            if rates is not None:
                rate = f" {human_bytes(rates[0])}/s"
                if rates[1] > 0:
                    self._eta = (max(0, self._total - self._offsets) / rates[1], now)
            self._progress.update(
                self._task,
                advance=max(0, next_offset - before),
                copied=human_bytes(self._bytes) + rate,
                parts=self._parts(),
                phase="copying",
            )

    def stop(self) -> None:
        self._progress.stop()
