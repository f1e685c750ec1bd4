"""Human output for ``partsync diff``: a rich table with a summary line, and a self-contained HTML
page (inline CSS and SVG, no scripts or external assets) with one bar chart per partition.

Every name that comes from outside (topics, cluster names, reasons) is escaped: rich markup with
``rich.markup.escape``, HTML with ``html.escape``.

The HTML page's skeleton and CSS live in the package-data template ``templates/diff.html``
(``string.Template``); the per-partition fragments (SVG charts, tables) are built here.
"""

from __future__ import annotations

import datetime as _dt
import functools
import html
import importlib.resources
import string
from collections import Counter
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from partsync.plan.comparator import Bounds
from partsync.plan.diff_model import DiffReport, DiffStatus, PartitionDiff, TopicDiff
from partsync.ui.render import WordTable, human_bytes

__all__ = ["diff_html", "diff_notes", "diff_summary", "diff_table", "display_status"]

_STYLE = {
    "identical": "green",
    "lagging": "yellow",
    "divergent": "bold red",
    "unreachable": "red",
    "error": "red",
}
_COLOR = {  # HTML: status badge colours
    "identical": "#1a7f37",
    "lagging": "#9a6700",
    "divergent": "#cf222e",
    "unreachable": "#8250df",
    "error": "#8250df",
}


def display_status(p: PartitionDiff) -> str:
    """The status as people read it: an error caused by an unreachable cluster says so."""
    if p.status is DiffStatus.ERROR and p.unreachable:
        return "unreachable"
    return p.status.value


def _range(b: Bounds | None) -> str:
    return "-" if b is None else f"{b.log_start}..{b.end}"


def _common(p: PartitionDiff) -> str:
    if p.common_range is None:
        return "-"
    lo, hi = p.common_range
    return f"{lo}..{hi}" if hi > lo else f"empty at {lo}"


def diff_table(report: DiffReport) -> Table:
    """One row per partition: status, common range, each cluster's range (lag, ✗ = disagrees,
    ? = unreachable), the first divergent offset. Who disagrees and why goes in ``diff_notes``
    below it."""
    t = WordTable(
        title=f"partsync diff ({report.level.value} level; ranges are [log start, high "
        "watermark), -N = lag, ✗ = disagrees, ? = unreachable)",
        title_justify="left",
        pad_edge=False,
    )
    t.add_column("topic", overflow="fold", min_width=6)
    t.add_column("part", justify="right", min_width=4)
    t.add_column("status", min_width=9)
    t.add_column("common", overflow="fold", min_width=6)
    for name in report.clusters:
        t.add_column(escape(name), overflow="fold")
    t.add_column("diverges", justify="right", overflow="fold")
    for tp in report.topics:
        if not tp.partitions:
            t.add_row(
                escape(tp.topic),
                "*",
                _styled(tp.status.value),
                "-",
                *["-" for _ in report.clusters],
                "-",
            )
            continue
        for p in sorted(tp.partitions, key=lambda p: p.partition):
            cells = []
            for name in report.clusters:
                cell = escape(_range(p.clusters.get(name)))
                lag = p.lag.get(name, 0)
                if lag:
                    cell += f" [yellow]-{lag}[/]"
                if name in p.unreachable:
                    cell = f"[magenta]{cell} ?[/]"
                elif name in p.disagreeing:
                    cell = f"[red]{cell} ✗[/]"
                cells.append(cell)
            t.add_row(
                escape(tp.topic),
                str(p.partition),
                _styled(display_status(p)),
                _common(p),
                *cells,
                "-" if p.first_divergent_offset is None else str(p.first_divergent_offset),
            )
    return t


def _styled(status: str) -> str:
    style = _STYLE.get(status, "")
    return f"[{style}]{status}[/]" if style else status


def diff_notes(report: DiffReport) -> list[str]:
    """Plain-text lines explaining every topic finding and non-identical partition."""
    notes = []
    for tp in report.topics:
        if tp.reason:
            notes.append(f"{tp.status.value}: topic {tp.topic}: {tp.reason}")
        for p in sorted(tp.partitions, key=lambda p: p.partition):
            if p.reason and p.status is not DiffStatus.LAGGING:
                who = f" ({', '.join(p.disagreeing)} disagree{'s' if len(p.disagreeing) == 1 else ''})"
                notes.append(
                    f"{display_status(p)}: topic {p.topic} partition {p.partition}"
                    f"{who if p.disagreeing else ''}: {p.reason}"
                )
            if p.holes:
                what = (
                    "hole records compared as the holes they fill"
                    if p.level.value == "record"
                    else "batches compared as a mirror with filled holes holds them"
                )
                counts = ", ".join(f"{n} {k}" for n, k in p.holes.items())
                notes.append(
                    f"note: topic {p.topic} partition {p.partition}: {what} "
                    f"(--compaction-holes fill): {counts}"
                )
            if any(p.marker_skew_ms.values()):
                skews = ", ".join(f"{n} {k / 1000:g}s" for n, k in p.marker_skew_ms.items())
                notes.append(
                    f"note: topic {p.topic} partition {p.partition}: transaction "
                    f"markers' times differ by up to {skews} (each leader stamps the "
                    "markers it writes; not compared, but Kafka's time lookups can "
                    "stop at them: partsync offsets --to-datetime seeks by data "
                    "records)"
                )
    return notes


def _counts(report: DiffReport) -> Counter[str]:
    c: Counter[str] = Counter(display_status(p) for p in report.all_partitions())
    for tp in report.topics:
        if not tp.partitions:
            c[tp.status.value] += 1
    return c


def diff_summary(report: DiffReport) -> str:
    """``3 partitions on 3 clusters (batch level): 2 identical, 1 divergent; read 1.2 MiB in 0.4 s``."""
    counts = _counts(report)
    n = len(report.all_partitions())
    order = ("identical", "lagging", "divergent", "unreachable", "error")
    shown = ", ".join(f"{counts[s]} {s}" for s in order if counts[s]) or "nothing compared"
    read = sum(sum(p.bytes_read.values()) for p in report.all_partitions())
    topic_notes = [f"{t.topic}: {t.reason}" for t in report.topics if t.reason]
    line = (
        f"{n} partition{'s' if n != 1 else ''} on {len(report.clusters)} clusters "
        f"({report.level.value} level): {shown}; read {human_bytes(read)} in {report.seconds:.1f} s"
    )
    if topic_notes:
        line += " | " + "; ".join(topic_notes)
    return line


# -- HTML ----------------------------------------------------------------------------------------

_TEMPLATE = "templates/diff.html"  # package data of partsync.ui: the page skeleton and its CSS


@functools.cache
def _page() -> string.Template:
    """The page skeleton, a ``string.Template`` with ``$title``, ``$defs`` and ``$body``."""
    text = importlib.resources.files("partsync.ui").joinpath(_TEMPLATE).read_text(encoding="utf-8")
    return string.Template(text)


_W = 900  # SVG width
_LABEL = 170  # left column for cluster names
_ROW = 26


def _x(offset: int, lo: int, hi: int) -> float:
    span = max(1, hi - lo)
    return _LABEL + (offset - lo) / span * (_W - _LABEL - 20)


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _bar(x0: float, x1: float, y: int, fill: str, title: str) -> str:
    return (
        f'<rect x="{x0:.1f}" y="{y}" width="{max(1.0, x1 - x0):.1f}" height="18" rx="3" '
        f'fill="{fill}" opacity="0.85"><title>{title}</title></rect>'
    )


def _svg(p: PartitionDiff, clusters: Sequence[str]) -> str:
    """One bar per cluster on a shared offset axis: blue where it agrees, red from the first
    divergent offset on a disagreeing cluster, hatched lag up to the furthest high watermark;
    the axis below marks the common range in green."""
    known = {n: b for n, b in p.clusters.items() if b is not None}
    if not known:
        return ""
    lo = min(b.log_start for b in known.values())
    hi = max(b.end for b in known.values())
    rows = _ROW * len(clusters)
    height = rows + 44
    out = [
        (
            f'<svg width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" role="img" '
            f'aria-label="offset ranges of partition {p.partition}">'
        )
    ]
    div = p.first_divergent_offset
    for i, name in enumerate(clusters):
        y = 6 + i * _ROW
        b = p.clusters.get(name)
        bad = name in p.disagreeing or name in p.unreachable
        label = ("? " if name in p.unreachable else "✗ " if bad else "") + name
        weight = ' font-weight="bold"' if bad else ""
        out.append(
            f'<text x="4" y="{y + 14}"{weight}><title>{_esc(name)}</title>{_esc(label[:24])}</text>'
        )
        if b is None:
            out.append(
                f'<text x="{_LABEL}" y="{y + 14}" fill="#8250df">no data '
                "(unreachable, or the partition is missing)</text>"
            )
            continue
        x0, x1 = _x(b.log_start, lo, hi), _x(b.end, lo, hi)
        what = f"{_esc(name)}: log start {b.log_start}, high watermark {b.end}"
        if bad and div is not None and b.log_start <= div < b.end:
            xd = _x(div, lo, hi)
            if div > b.log_start:
                out.append(_bar(x0, xd, y, "#0969da", what))
            out.append(_bar(xd, x1, y, "#cf222e", f"{what}; disagrees from offset {div}"))
        else:
            out.append(_bar(x0, x1, y, "#cf222e" if bad else "#0969da", what))
        lag = p.lag.get(name, 0)
        if lag:
            xe = _x(hi, lo, hi)
            out.append(
                f'<rect x="{x1:.1f}" y="{y}" width="{max(1.0, xe - x1):.1f}" height="18" rx="3" '
                f'fill="url(#lag)" stroke="#d4a72c"><title>{_esc(name)} lags by {lag}</title></rect>'
            )
            out.append(
                f'<text x="{min(xe, x1 + 4):.1f}" y="{y + 13}" fill="#7d4e00">lag {lag}</text>'
            )
    axis = rows + 12
    out.append(
        f'<line x1="{_LABEL}" y1="{axis}" x2="{_W - 20}" y2="{axis}" stroke="#d1d9e0" stroke-width="2"/>'
    )
    if p.common_range is not None and p.common_range[1] > p.common_range[0]:
        c0, c1 = p.common_range
        x0, x1 = _x(c0, lo, hi), _x(c1, lo, hi)
        out.append(
            f'<rect x="{x0:.1f}" y="{axis - 3}" width="{max(1.0, x1 - x0):.1f}" height="6" '
            f'fill="#1a7f37"><title>common range {c0}..{c1}</title></rect>'
        )
        out.append(f'<text x="4" y="{axis + 4}" fill="#1a7f37">common {c0}..{c1}</text>')
    if div is not None:
        xd = _x(div, lo, hi)
        out.append(
            f'<line x1="{xd:.1f}" y1="0" x2="{xd:.1f}" y2="{axis + 4}" stroke="#cf222e" '
            f'stroke-width="2" stroke-dasharray="4 2"><title>first divergent offset '
            f"{div}</title></line>"
        )
        anchor = "end" if xd > _W - 160 else "start"
        dx = -4 if anchor == "end" else 4
        out.append(
            f'<text x="{xd + dx:.1f}" y="{axis + 18}" fill="#cf222e" text-anchor="{anchor}">'
            f"diverges at {div}</text>"
        )
    out.append(f'<text x="{_LABEL}" y="{height - 2}" fill="#59636e">{lo}</text>')
    out.append(f'<text x="{_W - 20}" y="{height - 2}" fill="#59636e" text-anchor="end">{hi}</text>')
    out.append("</svg>")
    return "".join(out)


def _part_html(p: PartitionDiff, clusters: Sequence[str], topic: TopicDiff) -> str:
    status = display_status(p)
    head = (
        f'<span class="badge" style="background:{_COLOR.get(status, "#59636e")}">{_esc(status)}'
        f"</span> {_esc(topic.topic)} / partition {p.partition}"
    )
    if p.common_range is not None:
        head += f" &middot; common range {_esc(_common(p))}"
    if p.first_divergent_offset is not None:
        head += f" &middot; first divergent offset <b>{p.first_divergent_offset}</b>"
    if p.disagreeing:
        head += f" &middot; disagreeing: <b>{_esc(', '.join(p.disagreeing))}</b>"
    rows = "".join(
        f"<tr><td>{_esc(n)}</td><td>{_esc(b.log_start if b else '-')}</td>"
        f"<td>{_esc(b.end if b else '-')}</td><td>{_esc(p.lag.get(n, '-'))}</td></tr>"
        for n, b in ((n, p.clusters.get(n)) for n in clusters)
    )
    table = (
        '<table class="nums"><tr><th>cluster</th><th>log start</th><th>high watermark</th>'
        f"<th>lag</th></tr>{rows}</table>"
    )
    reason = f'<div class="reason">{_esc(p.reason)}</div>' if p.reason else ""
    return (
        f'<div class="part s-{_esc(status)}"><h3>{head}</h3>{reason}{_svg(p, clusters)}'
        f"{table}</div>"
    )


_RANK = {"divergent": 0, "error": 1, "unreachable": 1, "lagging": 2, "identical": 3}
_ORDER = ("identical", "lagging", "divergent", "unreachable", "error")


def _topics_table(report: DiffReport) -> str:
    """One row per topic: its partitions by status (the page's first table, before any
    partition's detail, which can run to thousands)."""
    head = "".join(f"<th>{s}</th>" for s in _ORDER)
    rows = []
    for tp in report.topics:
        c: Counter[str] = Counter(display_status(p) for p in tp.partitions)
        cells = "".join(f"<td>{c[s] or ''}</td>" for s in _ORDER)
        rows.append(
            f"<tr><td>{_esc(tp.topic)}</td><td>{_esc(tp.status.value)}</td>"
            f"<td>{len(tp.partitions)}</td>{cells}</tr>"
        )
    return (
        '<table class="nums"><tr><th>topic</th><th>status</th><th>partitions</th>'
        f"{head}</tr>{''.join(rows)}</table>"
    )


def diff_html(report: DiffReport, *, generated: _dt.datetime | None = None) -> str:
    """A self-contained HTML page: summary, then per partition a bar per cluster showing its
    ``[log start, high watermark)``, the common range (green band), lag (hatched) and the first
    divergent offset (red dashed line)."""
    when = (generated or _dt.datetime.now(_dt.UTC)).strftime("%Y-%m-%d %H:%M:%S %Z")
    counts = _counts(report)
    summary = "".join(
        f'<span><span class="badge" style="background:{_COLOR[s]}">{counts[s]}</span> {s}</span>'
        for s in ("identical", "lagging", "divergent", "unreachable", "error")
        if counts[s]
    )
    overall = {0: "identical (lag alone is fine)", 1: "failed", 3: "divergence found"}.get(
        int(report.exit_status), str(int(report.exit_status))
    )
    body = [
        f"<h1>partsync diff: {_esc(overall)}</h1>",
        (
            f'<div class="meta">clusters {_esc(", ".join(report.clusters))} &middot; '
            f"{_esc(report.level.value)} level &middot; chunks of {report.chunk_offsets} offsets "
            f"&middot; {report.seconds:.1f} s &middot; generated {_esc(when)}</div>"
        ),
        f'<div class="summary">{summary}</div>',
        f'<div class="meta">{_esc(diff_summary(report))}</div>',
        (
            '<div class="legend"><span><i style="background:#0969da"></i>cluster range [log start, '
            'high watermark)</span><span><i style="background:#1a7f37"></i>common range</span>'
            '<span><i style="background:#fff1c2;border:1px solid #d4a72c"></i>lag</span>'
            '<span><i style="background:#cf222e"></i>&#x2717; disagreeing cluster / first divergent '
            "offset</span><span>? unreachable cluster (no data)</span></div>"
        ),
    ]
    body.append(_topics_table(report))
    # A filter without script (the page stays self-contained and inert): checked, the CSS
    # hides identical partitions.
    body.append(
        '<input type="checkbox" id="only-problems"><label for="only-problems" '
        'class="filter"> show only partitions that are not identical</label>'
        '<div class="parts">'
    )
    for tp in report.topics:
        body.append(
            f"<h2>topic {_esc(tp.topic)} "
            f'<span class="badge" style="background:{_COLOR.get(tp.status.value, "#59636e")}">'
            f"{_esc(tp.status.value)}</span></h2>"
        )
        if tp.reason:
            body.append(f'<div class="topicnote">{_esc(tp.reason)}</div>')
        # Problems first: divergent, then unreadable, then lagging, then identical.
        for p in sorted(
            tp.partitions, key=lambda p: (_RANK.get(display_status(p), 1), p.partition)
        ):
            body.append(_part_html(p, report.clusters, tp))
    body.append("</div>")
    defs = (
        '<svg width="0" height="0" style="position:absolute"><defs><pattern id="lag" '
        'width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#fff1c2"/><line x1="0" y1="0" x2="0" y2="6" '
        'stroke="#d4a72c" stroke-width="2"/></pattern></defs></svg>'
    )
    # Every value is HTML already (external strings went through _esc): Template does not escape.
    return _page().substitute(
        title=_esc(", ".join(t.topic for t in report.topics)),
        defs=defs,
        body="".join(body),
    )
