"""Human output: rich tables for plans and sync reports, and the copy progress display."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

from partsync.plan.comparator import Chunk, PartitionPlan
from partsync.plan.results import Status, SyncReport
from partsync.run.planner import TopicPlan

__all__ = [
    "human_bytes",
    "plan_notes",
    "plan_table",
    "report_notes",
    "report_table",
    "styled",
    "summarize_chunks",
    "summary_line",
]

_STATUS_STYLE = {
    "in-sync": "green",
    "synced": "bold green",
    "behind": "yellow",
    "unknown": "yellow",
    "unsafe": "bold red",
    "error": "red",
    "handed-over": "cyan",
    "stopped": "yellow",
    "source-gone": "magenta",
    # A link's topic states (``partsync status``).
    "caught-up": "green",
    "mirroring": "yellow",
    "paused": "bold yellow",
    "failed": "bold red",
}


class WordTable(Table):
    """A table that never splits a word: each column is at least as wide as the longest word
    in it (a number, a range like ``8933..18933``, a header word), so a narrow terminal wraps
    cells between words, never inside one. Too narrow even for that, ``print_table`` shows
    each row as a block of ``header: value`` lines instead (nothing cut, nothing split)."""

    def __init__(self, *headers: Any, **kw: Any) -> None:
        self.records: list[tuple[Any, ...]] = []
        super().__init__(*headers, **kw)

    def add_column(self, header: Any = "", *args: Any, **kw: Any) -> None:
        super().add_column(header, *args, **kw)
        self._widen(self.columns[-1], header)

    def add_row(self, *renderables: Any, **kw: Any) -> None:
        super().add_row(*renderables, **kw)
        self.records.append(renderables)
        for column, cell in zip(self.columns, renderables, strict=False):
            self._widen(column, cell)

    def fit(self, width: int) -> bool:
        """Fix each column's width so that the table is at most ``width`` cells wide, no column
        narrower than its longest word; False where even that is too wide. Rich's own layout
        shrinks the widest columns first, below their longest word, so a table whose measured
        minimum fits could still be cut at the right edge."""
        cols = self.columns
        if not cols:
            return True
        edges = (len(cols) + 1) if self.box and self.show_edge else max(0, len(cols) - 1)
        room = width - edges - sum(sum(self.padding[1::2]) for _ in cols)
        mins = [c.min_width or 0 for c in cols]
        maxs = [max(m, self._widest(i)) for i, m in enumerate(mins)]
        if sum(mins) > room:
            return False
        if sum(maxs) > room:
            spare = room - sum(mins)
            give = [mx - mn for mn, mx in zip(mins, maxs, strict=True)]
            total = sum(give)
            widths = [mn + g * spare // total for mn, g in zip(mins, give, strict=True)]
            for i in sorted(range(len(cols)), key=lambda i: give[i], reverse=True):
                if sum(widths) >= room:
                    break
                if widths[i] < maxs[i]:
                    widths[i] += 1
            for c, w in zip(cols, widths, strict=True):
                c.width = w
        return True

    def _widest(self, i: int) -> int:
        """The widest line of column ``i``'s header and cells, unwrapped."""
        cells = [self.columns[i].header, *(r[i] for r in self.records if i < len(r))]
        widest = 0
        for cell in cells:
            text = Text.from_markup(cell) if isinstance(cell, str) else Text(str(cell))
            widest = max([widest, *(cell_len(line) for line in text.plain.splitlines())])
        return widest

    def print_records(self, console: Console) -> None:
        if self.title:
            console.print(Text.from_markup(str(self.title)))
        for row in self.records:
            console.print()
            for column, cell in zip(self.columns, row, strict=False):
                line = Text(str(column.header), style="bold") + Text(": ")
                line += Text.from_markup(cell) if isinstance(cell, str) else Text(str(cell))
                console.print(line)

    @staticmethod
    def _widen(column: Column, cell: Any) -> None:
        if isinstance(cell, str):
            cell = Text.from_markup(cell)
        if isinstance(cell, Text):
            longest = max((cell_len(w) for w in cell.plain.split()), default=0)
            column.min_width = max(column.min_width or 0, longest)


def print_table(table: Table, console: Console | None = None) -> None:
    """Print on a terminal at its width (as records when even the narrowest table is wider);
    anywhere else (a pipe, a file) whole, at the table's natural width, so nothing is cut or
    wrapped."""
    console = console or Console()
    unbounded = console.options.update_width(1 << 20)
    need = Measurement.get(console, unbounded, table)
    if not console.is_terminal:
        width = max(console.width, need.maximum)
        console = Console(file=console.file, width=width, color_system=None)
    elif isinstance(table, WordTable) and not table.fit(console.width):
        table.print_records(console)
        return
    console.print(table)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def summarize_chunks(chunks: Sequence[Chunk], limit: int = 4) -> str:
    """``0..50000 dc2, 50000..100000 dc3, ... (12 chunks: dc2 6, dc3 6)``."""
    if not chunks:
        return "-"
    shown = ", ".join(f"{c.start}..{c.end} {c.source}" for c in chunks[:limit])
    if len(chunks) <= limit:
        return shown
    per: dict[str, int] = {}
    for c in chunks:
        per[c.source] = per.get(c.source, 0) + 1
    counts = ", ".join(f"{s} {n}" for s, n in per.items())
    return f"{shown}, ... ({len(chunks)} chunks: {counts})"


def styled(status: str) -> str:
    """A status or state word in its colour (rich markup)."""
    style = _STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/]" if style else status


def plan_table(plans: Sequence[TopicPlan]) -> Table:
    sources: list[str] = []
    for tp in plans:
        for p in tp.partitions:
            for s in p.sources:
                if s not in sources:
                    sources.append(s)
    t = WordTable(title="partsync plan", title_justify="left")
    t.add_column("topic")
    t.add_column("part", justify="right")
    t.add_column("local [start, end)")
    for s in sources:
        t.add_column(f"{s} [start, hw)")
    t.add_column("condition")
    t.add_column("missing", justify="right")
    t.add_column("ranges (source)", overflow="fold")
    scanned = any(p.scan is not None for tp in plans for p in tp.partitions)
    if scanned:
        t.add_column("holes", justify="right")
        t.add_column("transactions", justify="right")
        t.add_column("sync stops at", justify="right")
    for tp in plans:
        if tp.refused or tp.error:
            status = "unsafe" if tp.refused else "error"
            blank = ["" for _ in range(3 if scanned else 0)]
            t.add_row(tp.topic, "*", "", *["" for _ in sources], styled(status), "", "", *blank)
            continue
        for p in tp.partitions:
            t.add_row(*_plan_row(p, sources), *(_scan_cells(p) if scanned else ()))
    return t


def _scan_cells(p: PartitionPlan) -> list[str]:
    """``plan --scan``: holes filled (batches re-encoded), markers replayed, and where a sync
    stops short of the target (red: refused)."""
    s = p.scan
    if s is None:
        return ["", "", ""]
    if s.error is not None or s.census is None:
        return ["", "", styled("error")]
    c = s.census
    holes = f"{c.holes} ({c.batches_with_holes} batches)" if c.batches_with_holes else str(c.holes)
    txns = f"{c.committed} commit, {c.aborted} abort" if c.markers else "0"
    if c.open_at_end:
        txns += f", {len(c.open_at_end)} open"
    stop = "-"
    if s.stop is not None:
        stop = f"[bold red]{s.stop.offset}[/]" if s.stop.refused else f"[yellow]{s.stop.offset}[/]"
    return [holes, txns, stop]


def plan_notes(plans: Sequence[TopicPlan]) -> list[str]:
    notes = []
    for tp in plans:
        if tp.refused or tp.error:
            notes.append(
                f"{'unsafe' if tp.refused else 'error'}: topic {tp.topic}: {tp.refused or tp.error}"
            )
        for p in tp.partitions:
            if p.reason:
                # Refusals already name their cluster/topic/partition/offset.
                prefix = (
                    ""
                    if p.reason.startswith("cluster ")
                    else f"topic {p.topic} partition {p.partition}: "
                )
                notes.append(f"{p.condition.value}: {prefix}{p.reason}")
            if p.scan is not None and (p.scan.error or p.scan.stop):
                where = f"topic {p.topic} partition {p.partition}"
                if p.scan.error:
                    notes.append(f"error: {where}: the scan failed: {p.scan.error}")
                elif p.scan.stop is not None and p.scan.stop.refused:
                    notes.append(
                        f"unsafe: {where}: a sync refuses the partition at offset "
                        f"{p.scan.stop.offset}: {p.scan.stop.reason}"
                    )
                elif p.scan.stop is not None:
                    notes.append(f"waits: {where}: {p.scan.stop.reason}")
    return notes


def _plan_row(p: PartitionPlan, sources: list[str]) -> list[str]:
    cols = [p.topic, str(p.partition), f"{p.local.log_start}..{p.local.end}"]
    for s in sources:
        b = p.sources.get(s)
        cols.append(f"{b.log_start}..{b.end}" if b else "-")
    cols += [styled(p.condition.value), str(p.missing), summarize_chunks(p.chunks)]
    return cols


def report_table(report: SyncReport) -> Table:
    """One row per partition; long reasons go in ``report_notes`` below the table."""
    t = WordTable(title="partsync sync", title_justify="left")
    for col, just in (
        ("topic", "left"),
        ("part", "right"),
        ("status", "left"),
        ("local end", "left"),
        ("target", "right"),
        ("batches", "right"),
        ("copied", "right"),
        ("by source", "left"),
    ):
        t.add_column(col, justify=just, overflow="fold")
    for tr in report.topics:
        for p in sorted(tr.partitions, key=lambda r: r.partition):
            by = ", ".join(f"{s} {human_bytes(n)}" for s, n in p.bytes_by_source.items())
            ends = (
                str(p.local_end_after)
                if p.local_end_before == p.local_end_after
                else f"{p.local_end_before}->{p.local_end_after}"
            )
            whole = p.partition < 0  # a topic refused or failed before its partitions were read
            t.add_row(
                p.topic,
                "*" if whole else str(p.partition),
                styled(p.status.value),
                "-" if whole else ends,
                "-" if whole else str(p.target_end),
                str(p.batches),
                human_bytes(p.bytes),
                by or "-",
            )
    return t


def report_notes(report: SyncReport) -> list[str]:
    notes = []
    for tr in report.topics:
        for p in sorted(tr.partitions, key=lambda r: r.partition):
            if p.reason:
                where = "all partitions" if p.partition < 0 else f"partition {p.partition}"
                # Errors already name their cluster/topic/partition/offset.
                prefix = "" if p.reason.startswith("cluster ") else f"topic {p.topic} {where}: "
                notes.append(f"{p.status.value}: {prefix}{p.reason}")
            for note in p.notes:
                where = f"topic {p.topic} partition {p.partition}"
                notes.append(f"note: {where}: {note}")
    return notes


def summary_line(report: SyncReport) -> str:
    parts = report.all_partitions()
    counts: dict[str, int] = {}
    for p in parts:
        counts[p.status.value] = counts.get(p.status.value, 0) + 1
    total = sum(p.bytes for p in parts)
    secs = max(report.seconds, 1e-9)
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    line = (
        f"{len(parts)} partition(s): {states}; copied {human_bytes(total)} in {report.seconds:.2f}s"
    )
    if total:
        line += f" ({human_bytes(total / secs)}/s)"
    if any(p.status is Status.UNSAFE for p in parts):
        line += "; unsafe partitions were left untouched at the point shown"
    return line
